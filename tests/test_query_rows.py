"""The row lookups a write plans with (Arrow hash lookups) give what the equivalent DuckDB joins give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore import query
from litstore.format import hashing
from litstore.read.manifests import compose

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


@pytest.mark.integration  # 60 DuckDB queries: seconds, not in the fast loop
@settings(max_examples=60, deadline=None)
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


@pytest.mark.integration  # 60 DuckDB queries: seconds, not in the fast loop
@settings(max_examples=60, deadline=None)
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


@pytest.mark.integration  # 60 DuckDB queries: seconds, not in the fast loop
@settings(max_examples=60, deadline=None)
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


@settings(max_examples=60, deadline=None)
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


@settings(max_examples=60, deadline=None)
@given(table=manifests, chunks=st.lists(names, unique=True), data=st.data())
def test_rows_in_chunks_leaves_out_the_excluded_rows(table: pa.Table, chunks: list[str], data: st.DataObject) -> None:
    excluded = np.array(data.draw(st.lists(st.booleans(), min_size=table.num_rows, max_size=table.num_rows)), bool)
    found = query.rows_in_chunks(table, chunks, excluded)
    whole = query.rows_in_chunks(table, chunks)
    left_out = set(np.array(table.column("key").to_pylist(), dtype=object)[excluded].tolist())
    assert found.column("key").to_pylist() == [key for key in whole.column("key").to_pylist() if key not in left_out]
    assert found.schema == table.schema


_CHANGES = ["added", "replaced", "deleted", "moved"]
_deltas = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(_CHANGES), st.integers(0, 99)), max_size=10), max_size=5
)


def _manifest_table(rows: list[tuple[int, str, int]], version: int | None, colliding: bool) -> pa.Table:
    """Rows ``(key number, change, row)``; key hashes true, or all alike but for two values if ``colliding``."""
    keys = [f"k{number}" for number, _, _ in rows]
    hashes = [number % 2 for number, _, _ in rows] if colliding else hashing.key_hashes(keys).tolist()
    columns = {
        "key": pa.array(keys, pa.string()),
        "key_hash": pa.array(hashes, pa.uint64()),
        "content_hash": pa.array([bytes([number, row]) * 8 for number, _, row in rows], pa.binary(16)),
        "split": pa.array(["train"] * len(rows), pa.string()),
        "chunk": pa.array([f"fragments/{version}/c.bin"] * len(rows), pa.string()),
        "row": pa.array([row for _, _, row in rows], pa.uint32()),
    }
    if version is not None:
        columns["change"] = pa.array([change for _, change, _ in rows], pa.string())
        columns["version"] = pa.array([version] * len(rows), pa.int64())
    return pa.table(columns)


@settings(max_examples=80, deadline=None)
@given(
    base=st.lists(st.integers(0, 12), unique=True, max_size=12),
    deltas=_deltas,
    colliding=st.booleans(),
)
def test_compose_takes_each_key_from_the_newest_delta_that_mentions_it(
    base: list[int], deltas: list[list[tuple[int, str, int]]], colliding: bool
) -> None:
    """Against the rule spelled out, with key hashes true or colliding (every key one of two hashes)."""
    checkpoint = _manifest_table([(number, "added", 0) for number in base], None, colliding)
    tables = [_manifest_table(rows, version, colliding) for version, rows in enumerate(deltas, 1)]
    composed = compose("str", reversed(tables), checkpoint)

    expected: list[tuple[str, bytes, int]] = []
    decided: set[int] = set()
    for rows in reversed(deltas):
        mentioned = {number for number, _, _ in rows} - decided
        expected += [
            (f"k{number}", bytes([number, row]) * 8, row)
            for number, change, row in rows
            if number in mentioned and change != "deleted"
        ]
        decided |= mentioned
    expected += [(f"k{number}", bytes([number, 0]) * 8, 0) for number in base if number not in decided]
    got = zip(
        composed.column("key").to_pylist(),
        composed.column("content_hash").to_pylist(),
        composed.column("row").to_pylist(),
        strict=True,
    )
    assert sorted(got) == sorted(expected)
