"""``get_many``: the batched lookup returns exactly what one-key lookups return, checked the same way.

The batched path reads the records of many chunks at once (sorted by chunk and row,
hashed and decoded chunk by chunk); these tests pin that it still answers like
``snapshot[key]`` for every kind of key and record, in the order asked, with
duplicates and missing keys, and that a manifest row pointing at another key's
record (swapped rows, consistent content hash) never serves that other record.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore import KeyNotFoundError

Record = dict[str, Any]


def _record(key: str | int) -> Record:
    number = key if isinstance(key, int) else int(key[1:])
    return {
        "id": key,
        "label": number % 7,
        "x": np.arange(8, dtype=np.float32) + number,
        "pair": (number, str(number)),
        "blob": bytes([number % 256]) * (number % 50),
    }


def _same(found: Record, expected: Record) -> None:
    assert found.keys() == expected.keys()
    for field, value in expected.items():
        if isinstance(value, np.ndarray):
            assert isinstance(found[field], np.ndarray) and found[field].dtype == value.dtype
            assert np.array_equal(found[field], value)
        else:
            assert type(found[field]) is type(value) and found[field] == value, field


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """300 records over many small chunks, written in three appends."""
    made = make_store(key="id", chunk_bytes=2048)
    for start in range(0, 300, 100):
        made.append([_record(f"k{i:03d}") for i in range(start, start + 100)])
    return litstore.open(made.root)


def test_get_many_matches_one_key_lookups_in_the_order_asked(store: litstore.Store) -> None:
    keys = [f"k{i:03d}" for i in range(300)]
    random.Random(7).shuffle(keys)
    asked = [*keys[:150], keys[3], keys[3], keys[140]]  # duplicates too
    found = store.get_many(asked)
    assert len(found) == len(asked)
    for key, record in zip(asked, found, strict=True):
        _same(record, store[key])
        _same(record, _record(key))
    assert found[150] is not found[151], "each answer is its own record"
    assert store.get_many([]) == []


def test_get_many_missing_keys_and_defaults(store: litstore.Store) -> None:
    asked: list[Any] = ["k001", "nope", "k299", 5, "k001", "also-nope"]
    with pytest.raises(KeyNotFoundError) as error:
        store.get_many(asked)
    assert "3 of 6 keys" in str(error.value) and "'nope'" in str(error.value)
    marker = object()
    found = store.get_many(asked, default=marker)
    assert found[1] is marker and found[3] is marker and found[5] is marker
    for position in (0, 2, 4):
        _same(found[position], _record(asked[position]))
    assert store.get_many(["nope"], default=None) == [None]


def test_get_many_with_int_keys(make_store: Callable[..., litstore.Store]) -> None:
    made = make_store(key="id", key_type=int, chunk_bytes=2048)
    made.append([_record(i) for i in range(0, 200, 2)])
    asked: list[Any] = [np.int64(10), 4, 3, True, 198, -1, 2**70]
    found = made.get_many(asked, default=None)
    assert [record and record["id"] for record in found] == [10, 4, None, None, 198, None, None]
    _same(found[0], _record(10))


def test_get_many_with_unusual_str_keys(make_store: Callable[..., litstore.Store]) -> None:
    made = make_store(key="id")
    keys = ["日本", "é", "", "k1"]
    made.append([{"id": key, "n": index} for index, key in enumerate(keys)])
    assert [record["n"] for record in made.get_many(keys[::-1])] == [3, 2, 1, 0]
    assert made.get_many([np.str_("é"), "x"], default=None) == [{"id": "é", "n": 1}, None]


def _swap_rows(store: litstore.Store, first: str, second: str) -> None:
    """Point ``first``'s row in the latest manifest delta at ``second``'s record (chunk, row and content hash)."""
    path = Path(store.root) / str(store.head().version.manifest)
    table = pq.read_table(path)
    keys = table.column("key").to_pylist()
    a, b = keys.index(first), keys.index(second)
    columns = {}
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name in ("chunk", "row", "content_hash"):
            values[a] = values[b]
        columns[name] = pa.array(values, table.schema.field(name).type)
    path.chmod(0o644)
    pq.write_table(pa.table(columns, schema=table.schema), path)


def test_a_row_pointing_at_another_keys_record_never_serves_it(store: litstore.Store) -> None:
    _swap_rows(store, "k210", "k250")
    reopened = litstore.open(store.root)
    with pytest.raises(KeyNotFoundError, match="k210"):
        reopened.get_many(["k250", "k210"])
    found = reopened.get_many(["k250", "k210", "k011"], default=None)
    assert found[1] is None
    _same(found[0], _record("k250"))
    _same(found[2], _record("k011"))
    with pytest.raises(KeyNotFoundError):
        reopened["k210"]
