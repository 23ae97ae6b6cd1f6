"""Tables in, the same records out: append/upsert take Arrow, pandas and polars, and the column-wise path agrees.

A table's rows are records. Records that arrive as a table, or as a list of flat
dicts, are checked and encoded column by column; these tests hold that path to the
record-by-record one: the same canonical bytes (content hashes), the same version
fingerprint, the same verdicts naming the same positions.
"""

from __future__ import annotations

import datetime
import decimal
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
import litstore.store
from litstore.format import codec, hashing
from tests.conftest import tree_state


def _records(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"k{i:05d}",
            "label": i % 7,
            "split": ("train", "val")[i % 2],
            "score": i / 3,
            "blob": bytes([i % 256]) * 5,
        }
        for i in range(start, start + count)
    ]


def _store(path: Path, **options: Any) -> litstore.Store:
    return litstore.Store.create(path, key="id", splits="split", **options)


def _one_by_one(records: list[dict[str, Any]]) -> Iterator[Any]:
    """The records wrapped so that no column-wise path can take them: the record-by-record reference."""
    for record in records:
        yield _Mapping(record)


class _Mapping(dict[str, Any]):
    """A dict subclass: valid input, but never taken column-wise (only plain dicts are)."""


def _content_hashes(store: litstore.Store) -> dict[str, bytes]:
    manifest = store.manifest()
    return dict(zip(manifest.column("key").to_pylist(), manifest.column("content_hash").to_pylist(), strict=True))


@pytest.mark.parametrize("kind", ["arrow", "batch", "pandas", "polars"])
def test_append_takes_tables_and_stores_what_dicts_store(tmp_path: Path, kind: str) -> None:
    records = _records(300)
    table = pa.Table.from_pylist(records)
    given_input: Any = {
        "arrow": table,
        "batch": table.to_batches()[0],
        "pandas": pd.DataFrame(records, index=range(1000, 1300)),  # the index is not a field
        "polars": pl.DataFrame(records),
    }[kind]
    from_table = _store(tmp_path / "table")
    version = from_table.append(given_input)
    reference = _store(tmp_path / "reference")
    expected = reference.append(_one_by_one(records))
    assert version.total == 300
    assert version.fingerprint == expected.fingerprint
    assert _content_hashes(from_table) == _content_hashes(reference)
    assert from_table["k00007"] == {"blob": b"\x07" * 5, "id": "k00007", "label": 0, "score": 7 / 3, "split": "val"}
    assert from_table.verify().ok


def test_upsert_takes_a_table(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    store.append(_records(100))
    changed = pa.Table.from_pylist([{**record, "label": 99} for record in _records(10)] + _records(5, start=100))
    version = store.upsert(changed)
    assert (version.added, version.replaced) == (5, 10)
    assert store["k00003"]["label"] == 99
    assert store.upsert(changed).number == version.number  # nothing changed: nothing committed


@pytest.mark.parametrize(
    ("rows", "error", "positions"),
    [
        ([{"id": "a", "split": "train"}, {"id": None, "split": "train"}], litstore.KeyFieldError, [1]),
        (
            [{"id": "a", "split": "train"}, {"id": "b", "split": "train"}, {"id": "a", "split": "val"}],
            litstore.DuplicateKeyError,
            [2],
        ),
        ([{"id": "a", "split": "train"}, {"id": "b", "split": "holdout"}], litstore.SplitError, [1]),
        ([{"id": "a", "split": "train", "price": decimal.Decimal("1.50")}], litstore.SchemaError, [0]),
    ],
)
def test_a_bad_table_is_refused_like_the_same_dicts(
    tmp_path: Path, rows: list[dict[str, Any]], error: type[Exception], positions: list[int]
) -> None:
    store = _store(tmp_path / "s")
    store.append(_records(3, start=500))
    before = tree_state(tmp_path / "s")
    with pytest.raises(error) as from_table:
        store.append(pa.Table.from_pylist(rows))
    with pytest.raises(error) as from_dicts:
        store.append(list(_one_by_one(rows)))
    assert [position for position, _ in from_table.value.culprits] == positions  # type: ignore[attr-defined]
    assert from_table.value.culprits == from_dicts.value.culprits  # type: ignore[attr-defined]
    assert tree_state(tmp_path / "s") == before


def test_an_int_key_column_and_a_hash_split(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="n", key_type=int, splits=litstore.HashSplit(train=0.5, test=0.5))
    table = pa.table({"n": pa.array(range(200), pa.int32()), "x": [str(i) for i in range(200)]})
    store.append(table)
    reference = litstore.Store.create(
        tmp_path / "r", key="n", key_type=int, splits=litstore.HashSplit(train=0.5, test=0.5)
    )
    reference.append(_one_by_one(table.to_pylist()))
    assert store.version.fingerprint == reference.version.fingerprint
    assert store[17] == {"n": 17, "x": "17"}
    assert sorted(store.splits) == ["test", "train"]


def test_a_key_repeated_across_blocks_and_runs_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litstore.store, "_RUN_BYTES", 2048)  # many runs of a few records
    store = _store(tmp_path / "s")
    records = _records(400)
    records.append({**records[10], "label": 1000})
    with pytest.raises(litstore.DuplicateKeyError) as caught:
        store.append(iter(records))
    assert "k00010" in str(caught.value)
    assert len(store) == 0 and store.version.number == 0


def test_many_runs_give_the_records_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(500)
    whole = _store(tmp_path / "whole")
    whole.append(records)
    monkeypatch.setattr(litstore.store, "_RUN_BYTES", 4096)
    table = _store(tmp_path / "table")
    table.append(pa.Table.from_pylist(records))
    stream = _store(tmp_path / "stream")
    stream.append(iter(records))
    for store in (table, stream):
        assert store.version.fingerprint == whole.version.fingerprint
        assert store.get_many([r["id"] for r in records]) == [dict(sorted(r.items())) for r in records]
        assert store.verify().ok


_names = st.sampled_from(["a", "b", "label", "x_1", "é", "z" * 40])
_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(string.printable + "é✓", max_size=40),
    st.binary(max_size=300),
    st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    columns=st.lists(_names, unique=True, max_size=4),
    kinds=st.lists(st.sampled_from(["int", "float", "str", "bytes", "bool", "mixed"]), min_size=4, max_size=4),
    rows=st.lists(st.lists(_values, min_size=4, max_size=4), min_size=1, max_size=80),
)
def test_column_wise_bytes_are_the_canonical_bytes(
    tmp_path_factory: pytest.TempPathFactory, columns: list[str], kinds: list[str], rows: list[list[Any]]
) -> None:
    """Whatever the fields hold, the stored bytes are codec.encode's: fast path or fallback, same content hashes."""
    pick = {"int": int, "float": float, "str": str, "bytes": bytes, "bool": bool}
    records = []
    for number, values in enumerate(rows):
        record: dict[str, Any] = {"id": f"r{number}"}
        for name, kind, value in zip(columns, kinds, values, strict=False):
            wanted = pick.get(kind)
            record[name] = value if wanted is None or value is None or type(value) is wanted else None
        records.append(record)
    store = litstore.Store.create(tmp_path_factory.mktemp("s"), key="id")
    store.append(records)
    assert _content_hashes(store) == {r["id"]: hashing.content_hash(codec.encode(r)) for r in records}


def test_a_table_without_columns_is_refused_row_for_row(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    empty_columns = pa.table({"id": ["a", "b", "c"]}).drop_columns(["id"])
    with pytest.raises(litstore.KeyFieldError) as caught:
        store.append(empty_columns)
    assert [position for position, _ in caught.value.culprits] == [0, 1, 2]


@pytest.mark.parametrize("column", ["id", "note"])
def test_text_that_is_not_utf8_is_refused_naming_the_column(tmp_path: Path, column: str) -> None:
    values = {"id": ["a", "b"], "note": ["x", "y"], "split": ["train", "train"]}
    broken = pa.Array.from_buffers(
        pa.string(), 2, [None, pa.py_buffer(b"\0\0\0\0\1\0\0\0\2\0\0\0"), pa.py_buffer(b"\xff\xfe")]
    )
    table = pa.table({**values, column: broken})
    store = _store(tmp_path / "s")
    before = tree_state(tmp_path / "s")
    with pytest.raises(litstore.InvalidArgumentError, match=f"column '{column}'.*UTF-8"):
        store.append(table)
    assert tree_state(tmp_path / "s") == before


class _Name(str):
    """A str subclass as a field name: the record-by-record path refuses it."""


def test_a_field_name_of_a_str_subclass_in_a_later_record_is_refused_as_record_by_record(tmp_path: Path) -> None:
    records = _records(5)
    records[3] = {(_Name(name) if name == "label" else name): value for name, value in records[3].items()}
    with pytest.raises(litstore.SchemaError) as column_wise:
        _store(tmp_path / "a").append(records)
    with pytest.raises(litstore.SchemaError) as one_by_one:
        _store(tmp_path / "b").append(_one_by_one(records))
    assert column_wise.value.culprits == one_by_one.value.culprits == [(3, "k00003")]


def test_a_timestamp_column_is_stored_as_datetimes(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    when = datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC)
    store.append(pa.Table.from_pylist([{"id": "a", "split": "train", "when": when, "day": when.date()}]))
    assert store["a"]["when"] == when and store["a"]["day"] == datetime.date(2024, 1, 1)
