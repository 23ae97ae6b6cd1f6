"""``verify`` in bounded memory: the manifest streamed into fixed columns, chunks read in parts, workers.

The damage itself is covered by ``test_verify.py``; these check that the ways of
getting there agree: parts of any size, worker processes, key hashes that collide,
and the composition rule applied while streaming (rows newer deltas replaced or
deleted are not the version's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore import VerifyReport
from litstore._litdata import chunk as chunk_layout
from litstore.format import layout
from litstore.ops import verify_listed, verify_stored

SPLITS = litstore.HashSplit(train=0.5, val=0.5)


def _records(prefix: str, count: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i:04d}", "n": i, "blob": bytes([i % 256]) * 24} for i in range(start, start + count)]


def _delta(root: Path, version: int) -> Path:
    record = json.loads((root / layout.version_record(version)).read_text())
    return root / record["manifest"]


def _newest_file(root: Path, version: int) -> Path:
    """The checkpoint version ``version`` wrote with its commit, else its delta."""
    record = json.loads((root / layout.version_record(version)).read_text())
    return root / (record.get("checkpoint") or record["manifest"])


def _damaged(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """A store with one of most kinds of damage: a flipped payload byte, a missing chunk, a manifest row
    removed, a key twice in a delta."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    for prefix in "abc":
        store.append(_records(prefix, 120))
    root = Path(store.root)
    rows = store.manifest().to_pylist()
    by_chunk: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_chunk.setdefault(row["chunk"], []).append(row)
    chunks = sorted(by_chunk)
    flipped = by_chunk[chunks[0]][1]
    data = bytearray((root / flipped["chunk"]).read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), flipped["chunk"])
    data[int(offsets[flipped["row"] + 1]) - 1] ^= 0xFF
    (root / flipped["chunk"]).write_bytes(bytes(data))
    (root / chunks[-1]).unlink()
    path = _delta(root, 3)
    table = pq.read_table(path).to_pylist()
    dropped = next(row for row in table if row["chunk"] != chunks[-1])
    kept = [row for row in table if row is not dropped]
    kept.append(dict(kept[0]))
    pq.write_table(pa.Table.from_pylist(kept, schema=pq.read_schema(path)), path)
    return litstore.open(root)


def _kinds(report: VerifyReport) -> set[str]:
    return {line.split(":")[0].split(" ", 1)[1] for line in report.problems()}


def test_parts_of_any_size_give_the_same_report(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _damaged(make_store)
    whole = store.verify()
    assert {"corrupt records (key, chunk, row, problem)", "missing chunks", "duplicate keys"} <= _kinds(whole)
    assert whole.unlisted_records and whole.missing_records
    monkeypatch.setattr(verify_stored, "PART_ITEMS", 3)
    assert litstore.open(store.root).verify() == whole


@pytest.mark.integration
def test_workers_give_the_same_report_as_serial(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _damaged(make_store)
    serial = store.verify()
    assert not serial.ok
    assert litstore.open(store.root).verify(num_workers=2) == serial
    monkeypatch.setattr(verify_stored, "PART_ITEMS", 5)  # chunks handed out in parts of 5 items
    assert litstore.open(store.root).verify(num_workers=2) == serial
    healthy = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    healthy.append(_records("h", 200))
    report = healthy.verify(num_workers=3)
    assert report.ok, report.summary()
    assert report == healthy.verify()


@pytest.mark.parametrize("workers", [-1, 1.5, True, "2"])
def test_num_workers_must_be_a_whole_number(store: litstore.Store, workers: Any) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match="num_workers"):
        store.verify(num_workers=workers)


def test_keys_that_share_a_hash_are_not_duplicates(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every key given the same key hash: candidates everywhere, confirmed by key, so only real duplicates count."""
    monkeypatch.setattr(verify_listed, "key_hashes_of", lambda prints: np.zeros(len(prints), np.uint64))
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    store.append(_records("a", 60))
    store.upsert(_records("a", 20, start=50))  # replaces ten, adds ten: the rule must match them by keyprint
    store.delete(["a0003"])
    report = store.verify()
    assert report.ok, report.summary()
    assert report.records_checked == len(store) == 69

    path = _newest_file(Path(store.root), 2)  # the upsert's: a live row (the delete's lists only the key gone)
    rows = pq.read_table(path).to_pylist()
    pq.write_table(pa.Table.from_pylist([*rows, dict(rows[-1])], schema=pq.read_schema(path)), path)
    damaged = litstore.open(store.root).verify()
    assert damaged.duplicate_keys == [rows[-1]["key"]]


def test_rows_newer_deltas_replaced_are_not_the_versions(make_store: Callable[..., litstore.Store]) -> None:
    """Upserts and deletes over a checkpoint: the replaced rows of older files are never compared, even wrong."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048, checkpoint_interval=2)
    store.append(_records("a", 80))
    store.append(_records("b", 40))  # version 2 writes a checkpoint
    store.upsert([{**record, "n": -1} for record in _records("a", 30)])
    store.delete([f"b{i:04d}" for i in range(10)])
    assert store.verify().ok
    root = Path(store.root)
    # An older delta's row for a key version 3 replaced: wrong, but no longer the version's.
    path = _delta(root, 1)
    rows = pq.read_table(path).to_pylist()
    replaced = next(row for row in rows if row["key"] == "a0005")
    replaced["content_hash"] = bytes(16)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    report = litstore.open(root).verify()
    assert report.ok, report.summary()
    assert report.records_checked == len(store) == 110
    for number in (2, 3):
        assert litstore.open(root).verify(number).ok
    older = litstore.open(root).verify(1)  # whose manifest that row still is
    assert [(key, problem) for key, _, _, problem in older.corrupt_records] == [("a0005", "content")]


def test_int_keys_through_the_scan(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="n", key_type=int, splits=SPLITS, chunk_bytes=2048)
    keys = [-(2**63), -129, -33, -1, 0, 1, 127, 128, 2**15, 2**31, 2**40, 2**63 - 1]
    store.append([{"n": key, "v": str(key)} for key in keys])
    store.append([{"n": key, "nested": [key, {"x": 1}]} for key in range(1000, 1010)])  # decoded one by one
    report = store.verify(expected_keys=[*keys, *range(1000, 1010)])
    assert report.ok, report.summary()
    assert report.records_checked == 22


def test_mentioned_keys_that_share_a_first_word_are_told_apart_by_the_second() -> None:
    """The rule's set of keys newer deltas mention: keyprints equal in their first 8 bytes still differ."""

    def prints(*pairs: tuple[int, int]) -> np.ndarray:
        return np.array(pairs, np.uint64).view(np.uint8).reshape(-1, 16)

    mentioned = verify_listed._Mentioned()
    mentioned.add([prints((7, 1), (3, 9))])
    mentioned.add([prints((7, 2)), prints((1, 1))])
    asked = prints((7, 1), (7, 2), (7, 3), (3, 9), (3, 8), (1, 1), (2, 1))
    assert mentioned.rows_of(asked).tolist() == [True, True, False, True, False, True, False]


def _stored(
    count: int, fail_at: int | None = None, made: list[int] | None = None
) -> Iterator[verify_stored.StoredPart]:
    for number in range(count):
        if number == fail_at:
            raise litstore.StorageError(f"part {number} cannot be read")
        if made is not None:
            made.append(number)
        yield verify_stored.StoredPart(verify_stored.Part(number, None), True, 0, (), *verify_stored._nothing())  # type: ignore[arg-type]


def test_parts_read_ahead_come_in_order_and_an_error_where_its_part_would() -> None:
    with ThreadPoolExecutor(1) as thread:
        assert [part.part.listing for part in verify_stored.read_ahead(_stored(30), thread)] == list(range(30))
        got = []
        with pytest.raises(litstore.StorageError, match="part 12"):
            for part in verify_stored.read_ahead(_stored(30, fail_at=12), thread):
                got.append(part.part.listing)
        assert got == list(range(12))


def test_parts_read_ahead_stop_when_the_reader_stops() -> None:
    made: list[int] = []
    with ThreadPoolExecutor(1) as thread:
        parts = verify_stored.read_ahead(_stored(10_000, made=made), thread)
        assert next(parts).part.listing == 0
        parts.close()  # waits for the thread's task to end
        assert len(made) <= 2 + verify_stored.AHEAD
