"""Streaming a format-4 version whose chunks have dead rows: exactly its live records, never a dead one.

The store (600 small records in 2 KiB chunks, then a random 30% of the keys upserted or
deleted, so that most chunks hold dead rows) is built once per module; tests that damage
or write to a store build their own. Every epoch is compared with ``dict(store.items())``
and with a plain-dict model of what the version holds.

litdata numbers and samples each chunk's live items (the view's ``index.json`` lists live
counts); litstore reads each from its row, on the local block-decode path and through
litdata's own reader (remote chunks, ``dataset[i]``), whose item loader must then be told
how many rows each chunk file holds.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from litdata import StreamingDataLoader, StreamingDataset

import litstore
from litstore import IntegrityError, StreamStateError, streaming
from litstore._litdata import chunk as chunk_layout
from litstore.format import layout
from litstore.read.chunkhashes import ChunkHashes
from litstore.read.decoded import DecodedChunk
from litstore.storage.local import LocalStorage

SPLITS = litstore.HashSplit(train=0.8, val=0.1, test=0.1)
CHUNK_BYTES = 2048
COUNT = 600

Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "label": i % 5, "rev": rev, "text": f"record {i} revision {rev} " + "x" * (i % 17)}


@dataclass
class Holes:
    """A store whose head has dead rows in most chunks, the version before its delete, and the model."""

    store: litstore.Store
    expected: dict[str, Record]  # key -> record of the head
    before_delete: int  # the version the delete was committed on

    def keys(self, split: str | None = None) -> set[str]:
        return {key for key, record in self.expected.items() if split in (None, SPLITS.assign(key, record))}


def _build(store: litstore.Store, seed: int = 5) -> Holes:
    model = {record["id"]: record for record in (_record(i) for i in range(COUNT))}
    store.append(list(model.values()))
    chosen = np.random.default_rng(seed).permutation(COUNT)[: COUNT * 3 // 10].tolist()
    replaced, deleted = chosen[: len(chosen) // 2], chosen[len(chosen) // 2 :]
    upserted = [_record(i, rev=1) for i in replaced]
    model.update((record["id"], record) for record in upserted)
    store.upsert(upserted)
    before = store.head().version.number
    keys = [f"k{i:03d}" for i in deleted]
    for key in keys:
        del model[key]
    store.delete(keys)
    return Holes(store, model, before)


def _chunks(store: litstore.Store) -> list[Any]:
    return [chunk for _, chunks in sorted(store.head().chunks().items()) for chunk in chunks]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Holes:
    root = tmp_path_factory.mktemp("holes") / "store"
    holes = _build(litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES))
    version = holes.store.head().version
    assert holes.store.config.writes_deletion_vectors
    appended = [chunk.filename for chunks in holes.store.at(1).chunks().values() for chunk in chunks]
    holey = {ref.chunk for ref in version.deletions}
    assert len(holey) > 0.8 * len(appended), f"most chunks should have dead rows: {len(holey)} of {len(appended)}"
    assert sum(chunk.num_items for chunk in _chunks(holes.store)) > len(holes.expected), "rows should be dead"
    return holes


@pytest.fixture
def holes(built: Holes) -> Holes:
    return Holes(litstore.open(built.store.root), built.expected, built.before_delete)


@pytest.fixture
def own(make_store: Callable[..., litstore.Store]) -> Holes:
    return _build(make_store(key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES))


def keep_list(batch: list[Record]) -> list[Record]:
    return batch


def _loader(dataset: Any, batch_size: int = 8, num_workers: int = 0) -> StreamingDataLoader:
    return StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=keep_list)


def _flatten(batches: Iterable[list[Record]]) -> list[Record]:
    return [record for batch in batches for record in batch]


def _assert_epoch(holes: Holes, records: list[Record], split: str | None = None) -> None:
    """``records`` are every live record of the head (of ``split``) exactly once, each the committed one."""
    counts = Counter(record["id"] for record in records)
    assert not [key for key, n in counts.items() if n > 1], "a record was yielded twice"
    wanted = holes.keys(split)
    assert set(counts) == wanted, (sorted(wanted - set(counts))[:5], sorted(set(counts) - wanted)[:5])
    live = dict(holes.store.items())
    for record in records:
        assert record == live[record["id"]] == holes.expected[record["id"]], record["id"]


# -- one epoch -----------------------------------------------------------------------------------


def test_one_epoch_yields_exactly_the_live_records(holes: Holes) -> None:
    dataset = holes.store.dataset()
    assert len(dataset) == len(holes.store) == len(holes.expected)
    assert f"{len(holes.expected)} records" in repr(dataset)
    streamed = list(dataset)
    assert {record["id"]: record for record in streamed} == dict(holes.store.items())
    _assert_epoch(holes, streamed)


def test_an_unpickled_dataset_streams_the_same_live_records(holes: Holes) -> None:
    """What a DataLoader worker started with "spawn" gets: deletion vectors it reads itself."""
    dataset = holes.store.dataset(split="train")
    copy = pickle.loads(pickle.dumps(dataset))
    assert list(copy) == list(dataset)
    _assert_epoch(holes, list(copy), "train")


def test_the_view_lists_live_counts_and_the_real_files(holes: Holes) -> None:
    dataset = holes.store.dataset()
    listed = json.loads((Path(dataset.input_dir.path) / "index.json").read_bytes())["chunks"]
    deletions = holes.store.head().reader.deletions
    chunks = _chunks(holes.store)
    assert [entry["filename"] for entry in listed] == [chunk.filename for chunk in chunks]
    for entry, chunk in zip(listed, chunks, strict=True):
        assert entry["chunk_bytes"] == chunk.num_bytes == (Path(holes.store.root) / chunk.filename).stat().st_size
        assert entry["chunk_size"] == chunk.num_items - deletions.dead_count(chunk.filename)


def test_litdata_alone_refuses_the_view_which_is_why_its_item_loader_is_told_the_rows(holes: Holes) -> None:
    """litdata 0.2.76 checks a chunk's header count against the count its index lists before mapping it
    (``PyTreeLoader._ensure_chunk_mmap``): over a view listing live counts, its own dataset fails.
    ``VersionDataset._create_cache`` gives the loader the rows each file holds; if this stops
    failing, litdata changed and that hook may be dropped."""
    view = holes.store.dataset().input_dir.path
    with pytest.raises(RuntimeError, match="header item count"):
        list(StreamingDataset(view))


def test_each_split_yields_its_live_records(holes: Holes) -> None:
    seen: set[str] = set()
    for split in SPLITS.names:
        dataset = holes.store.dataset(split=split)
        assert len(dataset) == len(holes.keys(split)) == holes.store.head().version.counts[split]
        streamed = list(dataset)
        _assert_epoch(holes, streamed, split)
        seen |= {record["id"] for record in streamed}
    assert seen == holes.keys()


def test_random_access_reads_the_live_record_at_each_number(holes: Holes) -> None:
    dataset = holes.store.dataset(split="train")
    in_order = list(holes.store.dataset(split="train"))
    assert [dataset[i] for i in range(len(dataset))] == in_order
    assert dataset[len(dataset) - 3 : len(dataset)] == in_order[-3:]
    assert dataset[np.int64(5)] == in_order[5]


def test_window_direct_io_which_reads_around_litstore_is_refused(holes: Holes) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match="window_direct_io"):
        holes.store.dataset(window_direct_io=True)


def test_unchecked_stream_yields_the_live_records(holes: Holes) -> None:
    dataset = holes.store.dataset(verify_records=False, shuffle=True, seed=2)
    assert "unchecked" in repr(dataset)
    _assert_epoch(holes, list(dataset))


def test_shuffle_changes_the_order_not_the_live_set(holes: Holes) -> None:
    plain = [record["id"] for record in holes.store.dataset()]
    shuffled = [record["id"] for record in holes.store.dataset(shuffle=True, seed=3)]
    assert plain != shuffled
    assert sorted(plain) == sorted(shuffled) == sorted(holes.expected)


def test_shuffled_loader_with_two_workers_yields_each_live_record_once(holes: Holes) -> None:
    dataset = holes.store.dataset(shuffle=True, seed=7)
    _assert_epoch(holes, _flatten(_loader(dataset, batch_size=8, num_workers=2)))


# -- resume --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_workers", "split"),
    [(0, None), (2, "train")],
)
def test_mid_epoch_resume_yields_each_live_record_once(holes: Holes, num_workers: int, split: str | None) -> None:
    def loader() -> StreamingDataLoader:
        return _loader(holes.store.dataset(split=split, shuffle=True, seed=11), batch_size=4, num_workers=num_workers)

    first_loader = loader()
    first = _flatten(islice(first_loader, 9))
    assert len(first) == 36
    state = first_loader.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = _flatten(resumed)
    assert len(first) + len(rest) == len(holes.keys(split))
    _assert_epoch(holes, first + rest, split)
    if num_workers == 0:
        assert [record["id"] for record in first + rest] == [record["id"] for record in _flatten(loader())]


def test_a_state_saved_before_a_delete_is_refused_after_it(holes: Holes) -> None:
    saved_on = _loader(holes.store.dataset(version=holes.before_delete, split="train"))
    _flatten(islice(saved_on, 3))
    state = saved_on.state_dict()
    after = _loader(holes.store.dataset(split="train"))
    with pytest.raises(StreamStateError, match=rf"version {holes.before_delete}\b"):
        after.load_state_dict(state)
    _assert_epoch(holes, _flatten(after), "train")


# -- what each process reads ---------------------------------------------------------------------


def test_streaming_reads_the_deletion_vectors_of_the_chunks_it_streams_only(
    holes: Holes, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = holes.store.head().version
    val = holes.store.head().chunks()["val"]
    refs = {ref.chunk: ref for ref in version.deletions}
    wanted = sorted((refs[chunk.filename].path, refs[chunk.filename].offset) for chunk in val if chunk.filename in refs)
    assert wanted, "the val split should have chunks with dead rows"
    assert len(wanted) < len(refs)
    reads: list[tuple[str, int]] = []
    ranged = LocalStorage.read_range

    def counted(self: LocalStorage, path: str, start: int, end: int) -> bytes:
        if path.endswith(".deletions"):
            reads.append((path, start))
        return ranged(self, path, start, end)

    monkeypatch.setattr(LocalStorage, "read_range", counted)
    dataset = litstore.open(holes.store.root).dataset(split="val")
    assert reads == [], "making the dataset reads no deletion vector: the commit record has the counts"
    streamed = list(dataset)
    assert sorted(reads) == wanted
    _assert_epoch(holes, streamed, "val")


# -- the manifest path (records.arrow) and subsets -------------------------------------------------


def test_a_chunk_without_its_sidecar_streams_its_live_records_through_the_manifest(own: Holes) -> None:
    holey = {ref.chunk for ref in own.store.head().reader.deletions.refs}
    chunk = next(chunk.filename for chunk in _chunks(own.store) if chunk.filename in holey)
    (Path(own.store.root) / layout.chunk_hashes(chunk)).unlink()
    dataset = litstore.open(own.store.root).dataset(shuffle=True, seed=4)
    assert (Path(dataset.input_dir.path) / "records.arrow").is_file()
    _assert_epoch(own, list(dataset))
    for split in SPLITS.names:
        _assert_epoch(own, list(litstore.open(own.store.root).dataset(split=split)), split)


@pytest.mark.parametrize("sidecars", [True, False])
def test_a_damaged_live_record_in_a_chunk_with_holes_is_named_by_its_key(own: Holes, sidecars: bool) -> None:
    """The check and the error both use the record's row, not its live number."""
    head = own.store.head()
    holey = {ref.chunk: ref for ref in head.version.deletions}
    manifest = head.manifest()
    chunk = next(name for name in manifest.column("chunk").to_pylist() if name in holey)
    dead = head.reader.deletions.dead(chunk, next(c.num_items for c in _chunks(own.store) if c.filename == chunk))
    rows = {
        row: key
        for key, name, row in zip(
            manifest.column("key").to_pylist(),
            manifest.column("chunk").to_pylist(),
            manifest.column("row").to_pylist(),
            strict=True,
        )
        if name == chunk
    }
    row = max(rows)  # after the chunk's first dead row, so its live number differs from its row
    assert int(dead[0]) < row
    path = Path(own.store.root) / chunk
    data = bytearray(path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk)
    data[int(offsets[row + 1]) - 1] ^= 0x01  # the payload's last byte
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    if not sidecars:
        (Path(own.store.root) / layout.chunk_hashes(chunk)).unlink()
    dataset = litstore.open(own.store.root).dataset()
    with pytest.raises(litstore.DamagedRecordError) as caught:
        list(dataset)
    assert repr(rows[row]) in str(caught.value) or rows[row] in str(caught.value), str(caught.value)
    assert f"row {row}" in str(caught.value), str(caught.value)


def test_a_dead_row_is_never_read_garbage_in_it_changes_nothing(own: Holes) -> None:
    head = own.store.head()
    chunk = next(c for c in _chunks(own.store) if head.reader.deletions.dead_count(c.filename))
    dead = head.reader.deletions.dead(chunk.filename, chunk.num_items)
    path = Path(own.store.root) / chunk.filename
    data = bytearray(path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk.filename)
    for row in dead.tolist():  # not a record, nor the committed bytes: read, it would fail both checks
        data[int(offsets[row]) + chunk_layout.ITEM_HEADER : int(offsets[row + 1])] = b"\xc1" * (
            int(offsets[row + 1]) - int(offsets[row]) - chunk_layout.ITEM_HEADER
        )
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    _assert_epoch(own, list(litstore.open(own.store.root).dataset()))

    live = head.reader.deletions.live(chunk.filename, chunk.num_items)
    assert live is not None
    hashes = ChunkHashes(own.store.storage, own.store.config, head.version).of(chunk.filename, chunk.num_items)
    decoded = DecodedChunk(bytes(data), chunk.filename, hashes, None, live)
    assert (len(decoded), decoded.row_count) == (len(live), chunk.num_items)
    rows = [decoded.row(item) for item in range(len(decoded))]
    assert rows == live.tolist()
    by_row = {row: key for key, name, row in _located(head) if name == chunk.filename}
    assert [decoded.take(item)["id"] for item in range(len(decoded))] == [by_row[row] for row in rows]


def _located(head: litstore.Snapshot) -> list[tuple[str, str, int]]:
    manifest = head.manifest()
    return list(
        zip(
            manifest.column("key").to_pylist(),
            manifest.column("chunk").to_pylist(),
            manifest.column("row").to_pylist(),
            strict=True,
        )
    )


def test_subsets_of_a_version_with_holes_stream_exactly_their_live_records(holes: Holes) -> None:
    wanted = sorted(holes.keys())[::7]
    dataset = holes.store.dataset(keys=wanted, shuffle=True, seed=1)
    streamed = list(dataset)
    assert sorted(record["id"] for record in streamed) == wanted
    for record in streamed:
        assert record == holes.expected[record["id"]]
    late = list(holes.store.dataset(where="key >= 'k300'", split="train"))
    assert sorted(record["id"] for record in late) == sorted(key for key in holes.keys("train") if key >= "k300")
    labelled = late
    assert all(record == holes.expected[record["id"]] for record in labelled)
    gone = sorted(set(f"k{i:03d}" for i in range(COUNT)) - set(holes.expected))[0]
    with pytest.raises(litstore.KeyNotFoundError, match=gone):
        holes.store.dataset(keys=[wanted[0], gone])


def test_stream_order_refuses_a_row_the_deletion_vectors_say_is_dead(holes: Holes) -> None:
    head = holes.store.head()
    chunks = _chunks(holes.store)
    deletions = head.reader.deletions
    manifest = head.manifest()
    chunk = next(c for c in chunks if deletions.dead_count(c.filename))
    dead = int(deletions.dead(chunk.filename, chunk.num_items)[0])
    first = manifest.filter(pa.compute.equal(manifest.column("chunk"), chunk.filename)).slice(0, 1)
    rows = first.select(["key", "content_hash", "chunk", "row"])
    planted = rows.set_column(3, "row", pa.array([dead], pa.int64()))
    assert streaming.in_stream_order(rows, chunks, deletions).num_rows == 1
    with pytest.raises(IntegrityError, match="dead"):
        streaming.in_stream_order(planted, chunks, deletions)
    column = manifest.column("row").to_numpy().copy()
    column[manifest.column("key").to_pylist().index(first.column("key")[0].as_py())] = dead
    damaged = manifest.set_column(manifest.schema.get_field_index("row"), "row", pa.array(column))
    assert streaming.stream_records(manifest, chunks, deletions=deletions).num_rows == len(holes.expected)
    with pytest.raises(IntegrityError, match="deletion vectors"):
        streaming.stream_records(damaged, chunks, deletions=deletions)


# -- damage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("verify_records", [True, False])
def test_a_damaged_deletion_vector_is_an_integrity_error_never_a_shorter_epoch(
    own: Holes, verify_records: bool
) -> None:
    ref = own.store.head().reader.deletions.refs[0]
    path = Path(own.store.root) / ref.path
    data = bytearray(path.read_bytes())
    data[ref.offset + ref.length - 1] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    dataset = litstore.open(own.store.root).dataset(verify_records=verify_records)
    with pytest.raises(IntegrityError, match=f"deletion vector of chunk {ref.chunk}"):
        list(dataset)


def test_a_commit_record_with_every_row_of_a_listed_chunk_dead_is_refused(own: Holes) -> None:
    version = own.store.head().version
    record_path = Path(own.store.root) / layout.version_record(version.number)
    record = json.loads(record_path.read_bytes())
    chunk = record["deletions"][0]["chunk"]
    rows = next(c.num_items for c in _chunks(own.store) if c.filename == chunk)
    record["deletions"][0]["dead"] = rows
    record_path.chmod(0o644)
    record_path.write_text(json.dumps(record))
    with pytest.raises(IntegrityError, match=f"chunk {chunk}"):
        litstore.open(own.store.root).dataset()


# -- on S3 -----------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_store_with_holes_on_s3_streams_exactly_its_live_records(s3_endpoint: str, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/holes"
    options = {"endpoint_url": s3_endpoint}
    holes = _build(
        litstore.Store.create(url, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, storage_options=options)
    )
    store = litstore.open(url, storage_options=options)
    assert store.head().reader.deletions.refs
    holes = Holes(store, holes.expected, holes.before_delete)

    # litdata's own reader over downloaded chunks: the rows, not the live numbers.
    _assert_epoch(holes, list(store.dataset(shuffle=True, seed=8)))
    _assert_epoch(holes, _flatten(_loader(store.dataset(split="train", shuffle=True, seed=9), 4, 2)), "train")
    # Random access (litdata's ranged reads of single items).
    dataset = store.dataset(split="val")
    in_order = list(store.dataset(split="val"))
    assert [dataset[i] for i in range(len(dataset))] == in_order
    _assert_epoch(holes, in_order, "val")

    # Resume mid-epoch.
    def loader() -> StreamingDataLoader:
        return _loader(store.dataset(shuffle=True, seed=12), batch_size=4)

    first_loader = loader()
    first = _flatten(islice(first_loader, 10))
    resumed = loader()
    resumed.load_state_dict(first_loader.state_dict())
    _assert_epoch(holes, first + _flatten(resumed))
