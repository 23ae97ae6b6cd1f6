"""The row lookups a write plans with (Arrow hash lookups) give what the equivalent DuckDB joins give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore import query
from litstore.format import hashing

names = st.sampled_from(["fragments/a/chunk-0.bin", "fragments/a/chunk-1.bin", "fragments/b/chunk-0.bin"])
manifests = st.lists(st.tuples(names, st.integers(0, 50)), max_size=40).map(
    lambda places: pa.table(
        {
            "key": pa.array([f"k{index:03d}" for index in range(len(places))], pa.string()),
            "chunk": pa.array([name for name, _ in places], pa.string()).dictionary_encode(),
            "row": pa.array([row for _, row in places], pa.uint32()),
        }
    )
)


@settings(max_examples=200, deadline=None)
@given(
    table=manifests,
    wanted=st.lists(st.integers(-5, 45).map(lambda i: f"k{i:03d}"), unique=True, max_size=30),
)
def test_rows_for_keys_is_the_join(table: pa.Table, wanted: list[str]) -> None:
    found = query.rows_for_keys(table, pa.array(wanted, pa.string()))
    plain = table.set_column(1, "chunk", table.column("chunk").cast(pa.string()))
    keys = pa.table({"key": pa.array(wanted, pa.string()), "position": pa.array(range(len(wanted)), pa.int64())})
    expected = query.query(
        "SELECT w.position, t.* FROM w JOIN t USING (key) ORDER BY w.position", {"w": keys, "t": plain}
    )
    assert found.column_names == ["position", "key", "chunk", "row"]
    assert found.column("position").to_pylist() == expected.column("position").to_pylist()
    assert found.column("key").to_pylist() == expected.column("key").to_pylist()
    assert found.column("chunk").cast(pa.string()).to_pylist() == expected.column("chunk").to_pylist()


@settings(max_examples=200, deadline=None)
@given(table=manifests, chunks=st.lists(names, unique=True))
def test_rows_in_chunks_is_the_semi_join(table: pa.Table, chunks: list[str]) -> None:
    found = query.rows_in_chunks(table, chunks)
    plain = table.set_column(1, "chunk", table.column("chunk").cast(pa.string()))
    wanted = pa.table({"chunk": pa.array(chunks, pa.string())})
    expected = query.query(
        'SELECT t.* FROM t SEMI JOIN wanted USING (chunk) ORDER BY chunk, "row", key', {"t": plain, "wanted": wanted}
    )
    got = sorted(zip(found.column("chunk").cast(pa.string()).to_pylist(), found.column("row").to_pylist(), strict=True))
    assert [
        (c, r)
        for c, r in zip(
            found.column("chunk").cast(pa.string()).to_pylist(), found.column("row").to_pylist(), strict=True
        )
    ] == got
    assert sorted(found.column("key").to_pylist()) == sorted(expected.column("key").to_pylist())
    assert found.schema == table.schema


@settings(max_examples=200, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.integers(0, 20).map(lambda i: f"k{i:02d}"), st.sampled_from(["added", "replaced", "deleted", "moved"])
        ),
        max_size=40,
    )
)
def test_touched_keys_is_the_query(changes: list[tuple[str, str]]) -> None:
    delta = pa.table(
        {"key": pa.array([key for key, _ in changes], pa.string()), "change": [change for _, change in changes]}
    )
    expected = query.query("SELECT DISTINCT key FROM d WHERE change <> 'moved'", {"d": delta}).column(0).to_pylist()
    assert sorted(query.touched_keys(delta)) == sorted(expected)


@settings(max_examples=200, deadline=None)
@given(
    table=manifests,
    leaving=st.lists(st.integers(-5, 45).map(lambda i: f"k{i:03d}"), unique=True, max_size=10),
    colliding=st.booleans(),
)
def test_key_mask_is_is_in_even_when_key_hashes_collide(table: pa.Table, leaving: list[str], colliding: bool) -> None:
    hashes = hashing.key_hashes(table.column("key").to_pylist())
    if colliding:  # every row shares one hash, that of the first wanted key: only the keys can tell them apart
        hashes = np.full(table.num_rows, hashing.key_hashes(leaving[:1] or ["k000"])[0], dtype=np.uint64)
    with_hashes = table.add_column(1, "key_hash", pa.array(hashes, pa.uint64()))
    expected = pc.is_in(table.column("key"), value_set=pa.array(leaving, pa.string())).to_numpy(zero_copy_only=False)
    assert query.key_mask(with_hashes, leaving).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(table=manifests, chunks=st.lists(names, unique=True), data=st.data())
def test_rows_in_chunks_leaves_out_the_excluded_rows(table: pa.Table, chunks: list[str], data: st.DataObject) -> None:
    excluded = np.array(data.draw(st.lists(st.booleans(), min_size=table.num_rows, max_size=table.num_rows)), bool)
    found = query.rows_in_chunks(table, chunks, excluded)
    whole = query.rows_in_chunks(table, chunks)
    left_out = set(np.array(table.column("key").to_pylist(), dtype=object)[excluded].tolist())
    assert found.column("key").to_pylist() == [key for key in whole.column("key").to_pylist() if key not in left_out]
    assert found.schema == table.schema
