"""The row lookups a write plans with (Arrow hash lookups) give what the equivalent DuckDB joins give."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore import query

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
