"""Records out: Arrow tables and batches, pandas and polars frames, with the content that was stored."""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

import litstore
from litstore import export
from litstore.format import codec

MakeStore = Callable[..., litstore.Store]


def _records() -> list[dict[str, Any]]:
    return [
        {
            "id": f"k{i}",
            "n": i,
            "x": i / 2,
            "ok": i % 2 == 0,
            "name": f"name-{i}",
            "blob": bytes([i, 255]),
            "meta": {"a": i, "tags": ["t"] * i, "inner": {"z": float(i)}},
            "pair": (i, i + 1),
            "pixels": np.arange(6, dtype=np.uint8).reshape(2, 3) + i,
            "ragged": np.arange(i + 1, dtype=np.int16),
            "w": np.float32(i) / 4,
            "maybe": None if i == 1 else i * 10,
        }
        for i in range(4)
    ]


def _by_key(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in table.to_pylist()}


def test_to_arrow_types_and_round_trip(store: litstore.Store) -> None:
    records = _records()
    store.append(records)
    table = store.to_arrow()
    assert table.column_names == ["id", *sorted(set(records[0]) - {"id"})]
    schema = table.schema
    assert schema.field("n").type == pa.int64()
    assert schema.field("x").type == pa.float64()
    assert schema.field("ok").type == pa.bool_()
    assert schema.field("name").type == pa.string()
    assert schema.field("blob").type == pa.binary()
    assert schema.field("w").type == pa.float32()
    assert schema.field("pair").type == pa.list_(pa.int64())
    assert schema.field("ragged").type == pa.list_(pa.int16())
    assert pa.types.is_struct(schema.field("meta").type)
    assert schema.field("pixels").type == pa.fixed_shape_tensor(pa.uint8(), [2, 3])

    rows = _by_key(table)
    pixels = dict(zip(table.column("id").to_pylist(), export.tensor_rows(table.column("pixels")), strict=True))
    for record in records:
        row = rows[record["id"]]
        assert row["n"] == record["n"] and row["x"] == record["x"] and row["ok"] == record["ok"]
        assert row["name"] == record["name"] and row["blob"] == record["blob"]
        assert row["meta"] == record["meta"] and row["pair"] == list(record["pair"])
        assert row["ragged"] == record["ragged"].tolist()
        assert row["w"] == float(record["w"]) and row["maybe"] == record["maybe"]
        np.testing.assert_array_equal(pixels[record["id"]], record["pixels"])
        assert pixels[record["id"]].dtype == np.uint8


def test_tensors_with_missing_rows_and_torch_tensors(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type=int)
    store.append(
        [{"id": 0, "t": torch.ones(2, 2) * 3, "a": np.eye(2)}, {"id": 1, "t": torch.zeros(2, 2)}, {"id": 2, "a": None}]
    )
    table = store.to_arrow()
    assert table.schema.field("t").type == pa.fixed_shape_tensor(pa.float32(), [2, 2])
    assert table.schema.field("a").type == pa.fixed_shape_tensor(pa.float64(), [2, 2])
    by_id = dict(zip(table.column("id").to_pylist(), export.tensor_rows(table.column("a")), strict=True))
    np.testing.assert_array_equal(by_id[0], np.eye(2))
    assert by_id[1] is None and by_id[2] is None
    t_rows = dict(zip(table.column("id").to_pylist(), export.tensor_rows(table.column("t")), strict=True))
    np.testing.assert_array_equal(t_rows[0], np.full((2, 2), 3.0, dtype=np.float32))
    assert t_rows[2] is None


def test_columns_arrow_cannot_type_fall_back_to_canonical_encodings(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type=int)
    values = {
        "mixed": [1, "one", b"raw"],
        "int_keys": [{1: "a"}, {2: "b"}, {3: "c"}],
        "huge": [2**70, 1, -(2**80)],
        "surrogate": ["\ud800", "ok", "x"],
        "bfloat": [torch.ones(2, dtype=torch.bfloat16)] * 3,
        "mixed_arrays": [np.zeros(2), np.zeros((2, 2)), None],
    }
    store.append([{"id": i, **{name: column[i] for name, column in values.items()}} for i in range(3)])
    table = store.to_arrow()
    for name, column in values.items():
        field = table.schema.field(name)
        assert field.type == pa.binary(), name
        assert field.metadata == export.ENCODING_METADATA, name
        decoded = {
            key: None if raw is None else codec.decode(raw)
            for key, raw in zip(table.column("id").to_pylist(), table.column(name).to_pylist(), strict=True)
        }
        for i, original in enumerate(column):
            if isinstance(original, torch.Tensor):
                assert torch.equal(decoded[i], original)
            elif isinstance(original, np.ndarray):
                np.testing.assert_array_equal(decoded[i], original)
            else:
                assert decoded[i] == original, name
    assert table.schema.field("id").metadata is None


def test_batches_that_type_a_column_differently_give_one_schema(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records are stored in key-hash order: learn it from a probe store with the same keys,
    # then give the first two stored records ints, raw bytes and 2-vectors, the next two
    # strings, non-bytes and 3-vectors: batches of two type each column differently.
    probe = make_store(key="id", key_type=int)
    probe.append([{"id": i} for i in range(5)])
    order = [record["id"] for record in probe.values()]
    values = [
        {"v": 1, "b": b"x", "s": np.zeros(2)},
        {"v": 2, "b": b"y", "s": np.zeros(2)},
        {"v": "two", "b": 5, "s": np.zeros(3)},
        {"v": "three", "b": "z", "s": np.zeros(3)},
        {"v": None},
    ]
    store = make_store(key="id", key_type=int)
    store.append([{"id": key, **value} for key, value in zip(order, values, strict=True)])
    assert [record["id"] for record in store.values()] == order
    batches = list(store.iter_batches(batch_size=2))
    assert [batch.num_rows for batch in batches] == [2, 2, 1]
    assert batches[0].schema.field("v").type == pa.int64() and batches[1].schema.field("v").type == pa.string()
    assert batches[0].schema.field("b").metadata is None
    assert batches[1].schema.field("b").metadata == export.ENCODING_METADATA

    monkeypatch.setattr(export, "DEFAULT_BATCH_SIZE", 2)
    table = store.to_arrow()
    assert table.num_rows == 5
    assert table.schema.field("v").type == pa.binary()
    assert table.schema.field("b").metadata == export.ENCODING_METADATA
    decoded = dict(zip(table.column("id").to_pylist(), table.column("b").to_pylist(), strict=True))
    assert codec.decode(decoded[order[0]]) == b"x" and codec.decode(decoded[order[2]]) == 5
    assert decoded[order[4]] is None
    assert table.schema.field("s").type == pa.list_(pa.float64())


def test_columns_select_fields_and_always_keep_the_key(store: litstore.Store) -> None:
    store.append(_records())
    table = store.to_arrow(columns=["name", "n"])
    assert table.column_names == ["id", "name", "n"]
    assert store.to_arrow(columns=["maybe"]).column("maybe").null_count == 1
    with pytest.raises(litstore.InvalidArgumentError, match="nope"):
        store.to_arrow(columns=["n", "nope"])
    with pytest.raises(litstore.InvalidArgumentError, match="list of field names"):
        store.to_arrow(columns="name")
    with pytest.raises(litstore.InvalidArgumentError, match="batch_size"):
        store.iter_batches(batch_size=0)


def test_iter_batches_sizes_and_content(store: litstore.Store) -> None:
    store.append([{"id": f"k{i:03d}", "n": i} for i in range(10)])
    batches = list(store.iter_batches(batch_size=4))
    assert [batch.num_rows for batch in batches] == [4, 4, 2]
    assert all(batch.schema.names == ["id", "n"] for batch in batches)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert sorted(rows, key=lambda row: row["n"]) == [{"id": f"k{i:03d}", "n": i} for i in range(10)]
    assert next(store.iter_batches(3, columns=["n"])).schema.names == ["id", "n"]


def test_iter_batches_memory_is_bounded_by_the_batch(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type=int, chunk_bytes=1 << 20)
    payload = 20_000
    for start in range(0, 1000, 250):
        store.append([{"id": i, "blob": bytes([i % 256]) * payload} for i in range(start, start + 250)])
    total = 1000 * payload
    tracemalloc.start()
    try:
        rows = 0
        for batch in store.iter_batches(batch_size=20):
            rows += batch.num_rows
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows == 1000
    assert peak < total / 3, f"peak {peak} bytes while the version holds {total}"


def test_to_pandas_and_to_polars_hold_the_records(store: litstore.Store) -> None:
    records = {record["id"]: record for record in _records()}
    store.append(list(records.values()))

    frame = store.to_pandas()
    assert list(frame.columns) == store.to_arrow().column_names
    for row in frame.to_dict("records"):
        record = records[row["id"]]
        assert row["n"] == record["n"] and row["name"] == record["name"] and row["blob"] == record["blob"]
        assert isinstance(row["pixels"], np.ndarray) and row["pixels"].dtype == np.uint8
        np.testing.assert_array_equal(row["pixels"], record["pixels"])
        np.testing.assert_array_equal(row["ragged"], record["ragged"])

    import polars

    frame_pl = store.to_polars()
    assert frame_pl.schema["pixels"] == polars.Array(polars.UInt8, (2, 3))
    for row in frame_pl.to_dicts():
        record = records[row["id"]]
        assert row["n"] == record["n"] and row["meta"] == record["meta"] and row["maybe"] == record["maybe"]
        assert row["pixels"] == record["pixels"].tolist()
        assert row["ragged"] == record["ragged"].tolist()


def test_snapshots_export_their_own_version(store: litstore.Store) -> None:
    store.append([{"id": "a", "n": 1}])
    old = store.head()
    store.upsert([{"id": "a", "n": 2}, {"id": "b", "n": 3}])
    assert old.to_arrow().to_pylist() == [{"id": "a", "n": 1}]
    assert sorted(store.to_arrow().column("n").to_pylist()) == [2, 3]
    assert old.to_pandas()["n"].tolist() == [1]
    assert old.to_polars()["n"].to_list() == [1]


def test_an_empty_version_exports_an_empty_table(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type=int)
    table = store.to_arrow()
    assert table.num_rows == 0 and table.schema.field("id").type == pa.int64()
    assert list(store.iter_batches()) == []
    assert len(store.to_pandas()) == 0 and len(store.to_polars()) == 0


@pytest.mark.parametrize("module", ["pandas", "polars"])
def test_a_missing_optional_dependency_says_what_to_install(
    store: litstore.Store, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    store.append([{"id": "a", "n": 1}])
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(litstore.LitstoreError, match=f"pip install {module}"):
        getattr(store, f"to_{module}")()


def test_exports_of_a_store_with_holes_hold_only_live_records(make_store: MakeStore) -> None:
    """Format 4: superseded and deleted records stay in their chunks as dead rows; no export yields one."""
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=1024)
    store.append([{"id": f"k{i:03d}", "n": i, "rev": 0} for i in range(90)])
    store.upsert([{"id": f"k{i:03d}", "n": i, "rev": 1} for i in range(0, 90, 4)])
    store.delete([f"k{i:03d}" for i in range(1, 90, 9)])
    assert store.head().reader.deletions.refs
    live = {key: record for key, record in store.items()}
    assert len(live) == len(store) == 80
    expected = {key: {"id": key, "n": record["n"], "rev": record["rev"]} for key, record in live.items()}

    table = store.to_arrow()
    assert table.num_rows == 80 and _by_key(table) == expected
    batches = list(store.iter_batches(batch_size=7))
    assert sum(batch.num_rows for batch in batches) == 80
    assert _by_key(pa.Table.from_batches(batches)) == expected
    frame = store.to_pandas()
    assert sorted(frame["id"]) == sorted(expected) and frame.set_index("id")["rev"].to_dict() == {
        key: record["rev"] for key, record in expected.items()
    }
    assert _by_key(store.at(1).to_arrow()) == {f"k{i:03d}": {"id": f"k{i:03d}", "n": i, "rev": 0} for i in range(90)}
