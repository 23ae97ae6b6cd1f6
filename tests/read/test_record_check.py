"""``read.checked``: every reader checks and decodes records one way, and names a damaged one in one format.

A record whose stored bytes do not match their committed content hash, or match it
yet are not one canonical record (a hostile writer committed them so), raises the
same :class:`~litstore.DamagedRecordError` from every reader: ``snapshot[key]``,
``get_many``, ``items``, streaming block by block (local chunks) and item by item
(litdata's own reader path), naming key, version, chunk and row and pointing at
``store.verify()``. The stores here are real ones, damaged by editing their chunk
files (and, for the hostile writer, their manifest, hashes sidecars and key runs: ``tests.planting``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore import DamagedRecordError, IntegrityError
from litstore._litdata import chunk as chunk_layout
from litstore.format import codec, hashing
from litstore.read.checked import RecordCheck, mismatched
from litstore.read.chunks import ChunkCache
from litstore.read.decoded import DecodedChunk
from litstore.storage.local import LocalStorage
from tests.planting import restamp

COUNT = 300
Reader = Callable[[litstore.Store, Path], Any]


def _record(number: int) -> dict[str, Any]:
    return {"id": f"k{number:03d}", "n": number, "text": "x" * (number % 30)}


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """300 records over several chunks, one version."""
    made = make_store(key="id", chunk_bytes=4096)
    made.append([_record(number) for number in range(COUNT)])
    assert len({row["chunk"] for row in made.head().manifest().to_pylist()}) > 2
    return made


def _entry(store: litstore.Store, key: str) -> dict[str, Any]:
    return next(row for row in store.head().manifest().to_pylist() if row["key"] == key)


def _committed(store: litstore.Store, chunk: str) -> list[dict[str, Any]]:
    """The manifest rows of ``chunk``, in row order."""
    rows = [row for row in litstore.open(store.root).head().manifest().to_pylist() if row["chunk"] == chunk]
    return sorted(rows, key=lambda row: row["row"])


def _payload_bounds(path: Path, chunk: str, row: int) -> tuple[bytearray, int, int]:
    data = bytearray(path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk)
    return data, int(offsets[row]) + chunk_layout.ITEM_HEADER, int(offsets[row + 1])


def _flip(store: litstore.Store, key: str) -> tuple[str, int]:
    """Flip one bit in the middle of ``key``'s stored payload: the chunk damaged after the commit."""
    entry = _entry(store, key)
    path = Path(store.root) / entry["chunk"]
    data, start, end = _payload_bounds(path, entry["chunk"], entry["row"])
    data[(start + end) // 2] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    return entry["chunk"], entry["row"]


def _plant(store: litstore.Store, key: str, payload_of: Callable[[int], bytes]) -> tuple[str, int]:
    """Replace ``key``'s payload with ``payload_of(its size)`` and commit its hash: a hostile writer's store."""
    entry = _entry(store, key)
    path = Path(store.root) / entry["chunk"]
    data, start, end = _payload_bounds(path, entry["chunk"], entry["row"])
    payload = payload_of(end - start)
    assert len(payload) == end - start
    data[start:end] = payload
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    manifest = Path(store.root) / str(store.head().version.manifest)
    table = pq.read_table(manifest)
    hashes = [
        hashing.content_hash(payload) if listed == key else content
        for listed, content in zip(table.column("key").to_pylist(), table.column("content_hash").to_pylist())
    ]
    column = table.schema.get_field_index("content_hash")
    manifest.chmod(0o644)
    pq.write_table(
        table.set_column(column, "content_hash", pa.array(hashes, table.schema.field(column).type)), manifest
    )
    restamp(store.root)
    return entry["chunk"], entry["row"]


def _not_msgpack(size: int) -> bytes:
    return b"\xc1" * size  # 0xc1: a byte MessagePack never uses


def _two_records(size: int) -> bytes:
    """A payload of ``size`` bytes holding two whole records."""
    head = codec.encode({"id": "foreign"})
    return head + next(
        packed for length in range(size) if len(packed := codec.encode({"t": "x" * length})) == size - len(head)
    )


def _every_item(dataset: Any) -> list[Any]:
    return [dataset[position] for position in range(len(dataset))]


#: Every reader of records, each on a freshly opened store, asked for key k037 among others.
READERS: dict[str, Reader] = {
    "lookup": lambda store, views: store["k037"],
    "get_many": lambda store, views: store.get_many(["k001", "k037", "k299"]),
    "items": lambda store, views: dict(store.head().items()),
    "stream blocks": lambda store, views: list(store.dataset(views_dir=views)),
    "stream items": lambda store, views: _every_item(store.dataset(views_dir=views)),
}


def _errors(store: litstore.Store, tmp_path: Path) -> dict[str, DamagedRecordError]:
    found = {}
    for name, read in READERS.items():
        with pytest.raises(DamagedRecordError) as caught:
            read(litstore.open(store.root), tmp_path / "views")
        found[name] = caught.value
    return found


def _named(error: DamagedRecordError, store: litstore.Store, chunk: str, row: int) -> None:
    version = store.head().version.number
    for part in ("'k037'", f"version {version}", chunk, f"row {row}", "store.verify() lists every damaged record"):
        assert part in str(error), (part, str(error))
    assert (error.version, error.chunk, error.rows, error.keys) == (version, chunk, [row], ["k037"])


def test_a_record_not_matching_its_hash_is_named_alike_by_every_reader(store: litstore.Store, tmp_path: Path) -> None:
    chunk, row = _flip(store, "k037")
    errors = _errors(store, tmp_path)
    assert len({str(error) for error in errors.values()}) == 1, {name: str(error) for name, error in errors.items()}
    error = errors["lookup"]
    _named(error, store, chunk, row)
    assert "do not match their committed content hash" in str(error)
    assert litstore.open(store.root)["k036"] == _record(36), "the records around it still read"


@pytest.mark.parametrize(
    ("payload_of", "reason"),
    [(_not_msgpack, "do not decode"), (_two_records, "does not hold exactly one record")],
    ids=["not msgpack", "two records"],
)
def test_a_payload_matching_its_hash_yet_not_a_record_is_named_alike_by_every_reader(
    store: litstore.Store, tmp_path: Path, payload_of: Callable[[int], bytes], reason: str
) -> None:
    chunk, row = _plant(store, "k037", payload_of)
    errors = _errors(store, tmp_path)
    assert len({str(error) for error in errors.values()}) == 1, {name: str(error) for name, error in errors.items()}
    error = errors["get_many"]
    _named(error, store, chunk, row)
    assert "matches its committed content hash but is not one canonical record" in str(error)
    assert reason in str(error)


def test_an_undecodable_item_streamed_unchecked_is_named_by_version_chunk_and_row(
    store: litstore.Store, tmp_path: Path
) -> None:
    _plant(store, "k040", _not_msgpack)
    entry = _entry(store, "k040")
    dataset = litstore.open(store.root).dataset(views_dir=tmp_path / "views", verify_records=False)
    with pytest.raises(DamagedRecordError) as caught:
        list(dataset)
    message = str(caught.value)
    for part in (
        f"version {store.head().version.number}",
        entry["chunk"],
        f"row {entry['row']}",
        ", read without its content hash check,",
    ):
        assert part in message, (part, message)
    assert "matches its committed content hash" not in message
    assert (caught.value.chunk, caught.value.rows) == (entry["chunk"], [entry["row"]])


def test_the_check_names_every_damaged_row_of_a_batch(store: litstore.Store) -> None:
    """The helper itself, on a real chunk: one comparison for a clean batch; on damage, every culprit named."""
    chunk = _entry(store, "k037")["chunk"]
    manifest = _committed(store, chunk)
    rows = np.array([row["row"] for row in manifest], dtype=np.int64)
    expected = np.frombuffer(b"".join(row["content_hash"] for row in manifest), np.uint8).reshape(-1, 16)
    cache = ChunkCache(LocalStorage(store.root))
    check = RecordCheck(7)
    assert check.records(chunk, rows, cache.payloads(chunk, rows), expected) == [
        _record(int(row["key"][1:])) for row in manifest
    ]
    assert len(mismatched(cache.payloads(chunk, rows), expected)) == 0

    wrong = expected.copy()
    wrong[[1, 3]] ^= 0xFF
    assert mismatched(cache.payloads(chunk, rows), wrong).tolist() == [1, 3]
    with pytest.raises(DamagedRecordError) as caught:
        check.records(chunk, rows, cache.payloads(chunk, rows), wrong)
    assert (caught.value.version, caught.value.rows, caught.value.keys) == (7, rows[[1, 3]].tolist(), [None, None])
    assert f"2 record(s) of version 7 do not match their committed content hash (chunk {chunk}, rows " in str(
        caught.value
    )
    keys = [row["key"] for row in manifest]
    with pytest.raises(DamagedRecordError) as caught:
        check.records(chunk, rows, cache.payloads(chunk, rows), wrong, lambda at: [keys[i] for i in at.tolist()])
    assert caught.value.keys == [keys[1], keys[3]]
    assert f"keys {keys[1]!r}, {keys[3]!r}; chunk {chunk}" in str(caught.value)


def test_the_block_decoder_raises_what_the_single_record_check_raises(store: litstore.Store) -> None:
    chunk, row = _plant(store, "k037", _two_records)
    reader = litstore.open(store.root).head().reader
    expected = b"".join(row["content_hash"] for row in _committed(store, chunk))
    path = Path(store.root) / chunk
    blocks = DecodedChunk(path.read_bytes(), chunk, expected, reader.check)
    with pytest.raises(DamagedRecordError) as from_block:
        for position in range(len(blocks)):
            blocks.take(position)
    payload = ChunkCache(LocalStorage(store.root)).payload(chunk, row)
    with pytest.raises(DamagedRecordError) as from_record:
        reader.check.record(chunk, row, payload, hashing.content_hash(payload))
    assert str(from_block.value) == str(from_record.value)
    assert from_block.value.keys == ["k037"]


def test_the_error_pickles_and_is_made_again_from_its_message(store: litstore.Store) -> None:
    """A DataLoader worker's error reaches the main process as ``type(error)(message)``: that must be the same type."""
    _flip(store, "k037")
    with pytest.raises(DamagedRecordError) as caught:
        litstore.open(store.root)["k037"]
    again = type(caught.value)(str(caught.value))
    assert isinstance(again, IntegrityError) and str(again) == str(caught.value)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.chunk, copy.rows, copy.keys) == (caught.value.chunk, caught.value.rows, ["k037"])
