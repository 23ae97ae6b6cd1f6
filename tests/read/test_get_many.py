"""``get_many``: the batched lookup returns exactly what one-key lookups return, checked the same way.

The batched path reads the records of many chunks at once (sorted by chunk and row,
hashed and decoded chunk by chunk); these tests pin that it still answers like
``snapshot[key]`` for every kind of key and record, in the order asked, with
duplicates and missing keys, and that a manifest row pointing at another key's
record (swapped rows, consistent content hash) never serves that other record. The
lookups run on each backend (a memory store reads by ranges, as S3 does); the damage
is made in a local directory.
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
from litstore._litdata import chunk as chunk_layout
from litstore.format import codec, hashing
from litstore.snapshot import MISSING
from tests.conftest import reopen
from tests.planting import restamp

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


def _filled(make: Callable[..., litstore.Store]) -> litstore.Store:
    """300 records over many small chunks, written in three appends, reopened."""
    made = make(key="id", chunk_bytes=2048)
    for start in range(0, 300, 100):
        made.append([_record(f"k{i:03d}") for i in range(start, start + 100)])
    return reopen(made)


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """The filled store in a local directory, for tests that edit its files."""
    return _filled(make_store)


@pytest.fixture
def any_store(make_any_store: Callable[..., litstore.Store]) -> litstore.Store:
    """The filled store on each backend (local, memory)."""
    return _filled(make_any_store)


def test_get_many_matches_one_key_lookups_in_the_order_asked(any_store: litstore.Store) -> None:
    keys = [f"k{i:03d}" for i in range(300)]
    random.Random(7).shuffle(keys)
    asked = [*keys[:150], keys[3], keys[3], keys[140]]  # duplicates too
    found = any_store.get_many(asked)
    assert len(found) == len(asked)
    for key, record in zip(asked, found, strict=True):
        _same(record, any_store[key])
        _same(record, _record(key))
    assert found[150] is not found[151], "each answer is its own record"
    assert any_store.get_many([]) == []


def test_get_many_missing_keys_and_defaults(any_store: litstore.Store) -> None:
    asked: list[Any] = ["k001", "nope", "k299", 5, "k001", "also-nope"]
    with pytest.raises(KeyNotFoundError) as error:
        any_store.get_many(asked)
    assert "3 of 6 keys" in str(error.value) and "'nope'" in str(error.value)
    marker = object()
    found = any_store.get_many(asked, default=marker)
    assert found[1] is marker and found[3] is marker and found[5] is marker
    for position in (0, 2, 4):
        _same(found[position], _record(asked[position]))
    assert any_store.get_many(["nope"], default=None) == [None]


def test_get_many_with_int_keys(make_any_store: Callable[..., litstore.Store]) -> None:
    made = make_any_store(key="id", key_type=int, chunk_bytes=2048)
    made.append([_record(i) for i in range(0, 200, 2)])
    asked: list[Any] = [np.int64(10), 4, 3, True, 198, -1, 2**70]
    found = made.get_many(asked, default=None)
    assert [record and record["id"] for record in found] == [10, 4, None, None, 198, None, None]
    _same(found[0], _record(10))


def test_get_many_with_unusual_str_keys(make_any_store: Callable[..., litstore.Store]) -> None:
    made = make_any_store(key="id")
    keys = ["日本", "é", "", "k1"]
    made.append([{"id": key, "n": index} for index, key in enumerate(keys)])
    assert [record["n"] for record in made.get_many(keys[::-1])] == [3, 2, 1, 0]
    assert made.get_many([np.str_("é"), "x"], default=None) == [{"id": "é", "n": 1}, None]


def _swap_rows(store: litstore.Store, first: str, second: str) -> None:
    """Point ``first``'s row in the latest manifest delta (and key runs) at ``second``'s record (chunk, row and
    content hash)."""
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
    restamp(store.root)


def test_a_row_pointing_at_another_keys_record_never_serves_it(store: litstore.Store) -> None:
    """At format 3 (the default) the key runs name each entry's key by its keyprint, so an entry whose record
    holds another key is a damaged index: refused, naming the key. The records around it still read."""
    _swap_rows(store, "k210", "k250")
    reopened = litstore.open(store.root)
    for read in (
        lambda: reopened.get_many(["k250", "k210"]),
        lambda: reopened.get_many(["k250", "k210", "k011"], default=None),
        lambda: reopened["k210"],
    ):
        with pytest.raises(litstore.IntegrityError, match=r"points key 'k210' at chunk .* which holds another record"):
            read()
    found = reopened.get_many(["k250", "k011"])
    _same(found[0], _record("k250"))
    _same(found[1], _record("k011"))


def test_a_row_pointing_at_another_keys_record_is_a_missing_key_at_format_2(
    make_store: Callable[..., litstore.Store],
) -> None:
    """Format 2 only: its key index holds key hashes alone, so a record of another key is a hash collision and
    the key is looked for at its other positions (here: none)."""
    store = _filled(lambda **options: make_store(format_version=2, **options))
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


def test_get_many_reads_records_msgpack_defaults_refuse(make_store: Callable[..., litstore.Store]) -> None:
    """Int dict keys and lone surrogates, among ordinary records of one batch, come back unchanged and in order.

    The batched decoder tries MessagePack's stricter defaults first; these records make it
    fall back part-way through a batch, keeping the records decoded before them.
    """
    made = make_store(key="id")
    records: list[Record] = []
    for number in range(60):
        record: Record = {"id": f"k{number:02d}", "n": number}
        if number % 20 == 7:
            record["by_int"] = {1: "one", -2: [3, 4]}
        if number % 20 == 13:
            record["text"] = "lone \ud800 surrogate"
        records.append(record)
    made.append(records)
    assert len({row["chunk"] for row in made.head().manifest().to_pylist()}) == 1, "one chunk, one batch"
    asked = [record["id"] for record in records]
    random.Random(3).shuffle(asked)
    by_key = {record["id"]: record for record in records}
    assert litstore.open(made.root).get_many(asked) == [by_key[key] for key in asked]
    assert dict(litstore.open(made.root).items()) == by_key

    plain, odd = codec.encode({"id": "a"}), codec.encode({"id": "b", "m": {2: "x"}})
    assert codec.decode_each([plain, odd, plain, odd, plain]) == [{"id": "a"}, {"id": "b", "m": {2: "x"}}] * 2 + [
        {"id": "a"}
    ]


def _plant(store: litstore.Store, key: str, payload_of: Callable[[int], bytes]) -> tuple[str, int]:
    """Replace ``key``'s stored payload with ``payload_of(its length)``, its manifest row (and sidecar, key runs)
    given the new hash."""
    path = Path(store.root) / str(store.head().version.manifest)
    table = pq.read_table(path)
    entry = next(row for row in table.to_pylist() if row["key"] == key)
    chunk_path = Path(store.root) / entry["chunk"]
    data = bytearray(chunk_path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), entry["chunk"])
    start, end = int(offsets[entry["row"]]) + chunk_layout.ITEM_HEADER, int(offsets[entry["row"] + 1])
    payload = payload_of(end - start)
    assert len(payload) == end - start
    data[start:end] = payload
    chunk_path.chmod(0o644)
    chunk_path.write_bytes(bytes(data))
    hashes = [
        hashing.content_hash(payload) if listed == key else content
        for listed, content in zip(table.column("key").to_pylist(), table.column("content_hash").to_pylist())
    ]
    column = table.schema.get_field_index("content_hash")
    path.chmod(0o644)
    pq.write_table(table.set_column(column, "content_hash", pa.array(hashes, table.schema.field(column).type)), path)
    restamp(store.root)
    return entry["chunk"], entry["row"]


def _two_records(size: int) -> bytes:
    """A payload of ``size`` bytes holding two whole records: a foreign one, then filler."""
    head = codec.encode({"id": "foreign"})
    return head + next(
        packed for length in range(size) if len(packed := codec.encode({"t": "x" * length})) == size - len(head)
    )


def test_a_committed_payload_holding_two_records_is_refused_naming_its_key(store: litstore.Store) -> None:
    """The payload's content hash matches (a hostile writer committed it): get_many refuses it, naming key and row."""
    chunk, row = _plant(store, "k250", _two_records)
    reopened = litstore.open(store.root)
    for asked, default in ((["k011", "k250", "k251"], MISSING), (["k250"], None)):
        with pytest.raises(litstore.IntegrityError) as error:
            reopened.get_many(asked, default)
        for part in ("'k250'", chunk, f"row {row}", "exactly one record"):
            assert part in str(error.value)
    _same(reopened.get_many(["k251", "k011"])[0], _record("k251"))
    with pytest.raises(litstore.IntegrityError):
        reopened["k250"]


def test_a_committed_payload_that_does_not_decode_is_refused_naming_its_key(store: litstore.Store) -> None:
    chunk, row = _plant(store, "k260", lambda size: b"\xc1" * size)  # 0xc1: a byte MessagePack never uses
    with pytest.raises(litstore.IntegrityError) as error:
        litstore.open(store.root).get_many(["k259", "k260"])
    for part in ("'k260'", chunk, f"row {row}", "do not decode"):
        assert part in str(error.value)
