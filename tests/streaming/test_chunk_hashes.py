"""Streaming a format-3 store through its chunks' hashes sidecars: no manifest, same batches, typed damage.

Two stores with the same history (append, upsert, delete, append; 4 KiB chunks of
records of one size) differ only in format: format 2 streams through the manifest
(``records.arrow`` in the view), format 3 through the sidecar beside each chunk. They
must yield the same batches, shuffled or not, with 0 or 2 workers, resumed or not;
format 3 must compose no manifest to make the dataset and its first batches; and a
damaged sidecar, or a damaged chunk under a good one, must raise a typed error
naming what is damaged. A missing sidecar falls back to the manifest, still checked.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash
from litdata import StreamingDataLoader

import litstore
from litstore._litdata.index import ChunkInfo
from litstore.format import chunkhashes, layout
from litstore.read import log
from litstore.read.version import VersionReader
from litstore.streaming import VersionDataset
from tests.conftest import release_frames

SPLITS = litstore.HashSplit(train=0.8, val=0.2)
CHUNK_BYTES = 4096
Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    """Records of one encoded size, so that full chunks hold the same number of items."""
    return {"id": f"k{i:03d}", "label": i % 5, "rev": rev, "x": np.arange(16, dtype=np.float32) + i}


def _build(store: litstore.Store) -> litstore.Store:
    store.append([_record(i) for i in range(240)])
    store.upsert([_record(i, rev=1) for i in range(0, 240, 6)] + [_record(i) for i in range(240, 300)])
    store.delete([f"k{i:03d}" for i in range(2, 300, 5)])
    store.append([_record(i) for i in range(300, 340)])
    return store


def _create(root: Path, format_version: int) -> litstore.Store:
    return litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, format_version=format_version)


@dataclass
class Pair:
    old: Path  # format 2
    new: Path  # format 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    base = tmp_path_factory.mktemp("hashes")
    _build(_create(base / "format2", 2))
    _build(_create(base / "format3", 3))
    return Pair(base / "format2", base / "format3")


@pytest.fixture
def own(tmp_path: Path) -> litstore.Store:
    """A format-3 store of this test's own, to damage."""
    return _build(_create(tmp_path / "store", 3))


def keep_list(batch: list[Record]) -> list[Record]:
    return batch


def _loader(dataset: VersionDataset, num_workers: int, batch_size: int = 8) -> StreamingDataLoader:
    return StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=keep_list)


def _batches(batches: Iterable[list[Record]]) -> list[list[tuple[str, int, int]]]:
    """Each batch as (key, rev, first value of x) of its records."""
    return [[(record["id"], record["rev"], int(record["x"][0])) for record in batch] for batch in batches]


def _view_files(dataset: VersionDataset) -> set[str]:
    return {path.name for path in Path(dataset.input_dir.path).iterdir()}


def _no_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any manifest composition, or read of a manifest file, fail (in forked workers too)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the manifest was read")

    monkeypatch.setattr(VersionReader, "manifest", refuse)
    monkeypatch.setattr(log, "read_manifest_file", refuse)


# -- the same stream as format 2 ----------------------------------------------------------


def test_format_3_streams_through_sidecars_and_format_2_through_the_manifest(pair: Pair) -> None:
    new = litstore.open(pair.new).dataset()
    old = litstore.open(pair.old).dataset()
    assert _view_files(new) == {"index.json", "fragments"}
    assert _view_files(old) == {"index.json", "fragments", "records.arrow"}
    assert "unchecked" not in repr(new)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(("shuffle", "split"), [(False, None), (True, None), (True, "train")])
def test_same_batches_as_format_2(pair: Pair, num_workers: int, shuffle: bool, split: str | None) -> None:
    streamed = [
        _batches(_loader(litstore.open(root).dataset(split=split, shuffle=shuffle, seed=5), num_workers))
        for root in (pair.old, pair.new)
    ]
    assert streamed[0] == streamed[1]
    keys = [key for batch in streamed[1] for key, _, _ in batch]
    expected = litstore.open(pair.new).keys()
    if split is None:
        assert sorted(keys) == sorted(expected)
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_matches_format_2(pair: Pair, num_workers: int) -> None:
    def halves(root: Path) -> tuple[list[Any], list[Any]]:
        first_loader = _loader(litstore.open(root).dataset(shuffle=True, seed=9), num_workers, batch_size=4)
        first = _batches(islice(first_loader, 7))
        state = first_loader.state_dict()
        resumed = _loader(litstore.open(root).dataset(shuffle=True, seed=9), num_workers, batch_size=4)
        resumed.load_state_dict(state)
        return first, _batches(resumed)

    old, new = halves(pair.old), halves(pair.new)
    assert old == new
    keys = [key for half in new for batch in half for key, _, _ in batch]
    assert sorted(keys) == sorted(litstore.open(pair.new).keys())


def test_a_state_saved_through_the_manifest_resumes_through_sidecars(own: litstore.Store) -> None:
    """The state binds to the version and litdata's numbering, not to where the committed hashes come from."""
    sidecar = _sidecar(own, _chunks(own)[0].filename)
    written = sidecar.read_bytes()
    sidecar.unlink()
    through_manifest = litstore.open(own.root).dataset(shuffle=True, seed=3)
    assert "records.arrow" in _view_files(through_manifest)
    saved = _loader(through_manifest, 0, batch_size=4)
    first = _batches(islice(saved, 5))
    state = saved.state_dict()
    sidecar.write_bytes(written)
    resumed = _loader(litstore.open(own.root).dataset(shuffle=True, seed=3), 0, batch_size=4)
    resumed.load_state_dict(state)
    keys = [key for batch in first + _batches(resumed) for key, _, _ in batch]
    assert sorted(keys) == sorted(own.keys())


# -- nothing composed -----------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataset_and_first_batch_compose_no_manifest(
    pair: Pair, num_workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = litstore.open(pair.new)
    _no_manifest(monkeypatch)
    dataset = store.dataset(shuffle=True, seed=1)
    loader = iter(_loader(dataset, num_workers))
    first = next(loader)
    assert len(first) == 8
    assert sum(len(batch) for batch in loader) + len(first) == len(store)
    assert _view_files(dataset) == {"index.json", "fragments"}
    # The same holds by index (litdata's per-item path) and on a split.
    train = store.dataset(split="train")
    assert train[0]["id"] == next(iter(train))["id"]


def test_format_2_composes_the_manifest(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal above is real: the manifest path trips it."""
    store = litstore.open(pair.old)
    _no_manifest(monkeypatch)
    with pytest.raises(AssertionError, match="manifest was read"):
        store.dataset()


def test_a_pickled_dataset_streams_the_same(pair: Pair) -> None:
    dataset = litstore.open(pair.new).dataset(shuffle=True, seed=2)
    copy = pickle.loads(pickle.dumps(dataset))
    assert [record["id"] for record in copy] == [record["id"] for record in dataset]


@pytest.mark.integration
def test_spawned_workers_stream_the_same(pair: Pair) -> None:
    dataset = litstore.open(pair.new).dataset(shuffle=True, seed=4)
    forked = _batches(_loader(dataset, 2))
    spawned = StreamingDataLoader(
        dataset, batch_size=8, num_workers=2, collate_fn=keep_list, multiprocessing_context="spawn"
    )
    assert _batches(spawned) == forked


def test_subsets_of_a_format_3_store_stream(pair: Pair) -> None:
    store = litstore.open(pair.new)
    wanted = set(store.select("split = 'val'"))
    assert {record["id"] for record in store.dataset(where="split = 'val'")} == wanted
    keys = sorted(wanted)[:5]
    assert {record["id"] for record in store.dataset(keys=keys)} == set(keys)


# -- damage -----------------------------------------------------------------------------------


def _sidecar(store: litstore.Store, chunk: str) -> Path:
    return Path(store.root, layout.chunk_hashes(chunk))


def _chunks(store: litstore.Store) -> list[ChunkInfo]:
    return [chunk for name, chunks in sorted(store.chunks().items()) for chunk in chunks]


def _same_count_pair(store: litstore.Store) -> tuple[str, str]:
    by_count: dict[int, list[str]] = {}
    for chunk in _chunks(store):
        by_count.setdefault(chunk.num_items, []).append(chunk.filename)
    twins = [names for names in by_count.values() if len(names) > 1]
    assert twins, "the store should have two chunks of the same item count"
    return twins[0][0], twins[0][1]


def _cut(store: litstore.Store, chunk: str) -> None:
    path = _sidecar(store, chunk)
    path.write_bytes(path.read_bytes()[:-5])


def _flip(store: litstore.Store, chunk: str) -> None:
    path = _sidecar(store, chunk)
    data = bytearray(path.read_bytes())
    data[chunkhashes.HEADER.size + 3] ^= 0x40
    path.write_bytes(bytes(data))


def _recount(store: litstore.Store, chunk: str) -> None:
    """The header says one item more; the checksum recomputed to match it: only the count gives it away."""
    path = _sidecar(store, chunk)
    data = path.read_bytes()
    count = struct.unpack_from("<Q", data, 8)[0]
    hashes = data[chunkhashes.HEADER.size : -chunkhashes.FOOTER.size]
    head = chunkhashes.MAGIC + struct.pack("<Q", count + 1)
    checksum = xxhash.xxh3_64(chunk.encode() + head + hashes).intdigest()
    path.write_bytes(head + hashes + struct.pack("<Q", checksum))


def _longer(store: litstore.Store, chunk: str) -> None:
    """A well-formed sidecar for one item more (its checksum right): its length does not fit the chunk."""
    path = _sidecar(store, chunk)
    hashes = path.read_bytes()[chunkhashes.HEADER.size : -chunkhashes.FOOTER.size]
    path.write_bytes(chunkhashes.encode(chunk, hashes + b"\x00" * 16))


def _swap(store: litstore.Store, chunk: str) -> None:
    """Another chunk's sidecar (same item count) put in its place."""
    first, second = _same_count_pair(store)
    other = second if chunk == first else first
    _sidecar(store, chunk).write_bytes(_sidecar(store, other).read_bytes())


DAMAGES: dict[str, Callable[[litstore.Store, str], None]] = {
    "cut": _cut,
    "flipped": _flip,
    "count": _recount,
    "longer": _longer,
    "swapped": _swap,
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_sidecar_raises_an_integrity_error_naming_the_chunk(own: litstore.Store, damage: str) -> None:
    chunk = _same_count_pair(own)[0]
    DAMAGES[damage](own, chunk)
    dataset = litstore.open(own.root).dataset()
    with pytest.raises(litstore.IntegrityError, match=f"hashes sidecar of chunk {chunk}") as caught:
        list(dataset)
    assert not isinstance(caught.value, litstore.DamagedRecordError), "the sidecar is damaged, not a record"
    # The per-item path (litdata's __getitem__, as on S3) refuses it too.
    position = _position_of(dataset, chunk)
    with pytest.raises(litstore.IntegrityError, match=f"hashes sidecar of chunk {chunk}"):
        dataset[position]


@pytest.mark.integration  # worker processes
def test_damage_is_refused_in_a_worker(own: litstore.Store) -> None:
    chunks = _chunks(own)
    written = _sidecar(own, chunks[0].filename).read_bytes()
    _flip(own, chunks[0].filename)
    with pytest.raises(litstore.IntegrityError, match=f"hashes sidecar of chunk {chunks[0].filename}") as caught:
        list(_loader(litstore.open(own.root).dataset(), 2))
    release_frames(caught)  # each loader shuts its workers down now, not 10 s later
    _sidecar(own, chunks[0].filename).write_bytes(written)
    key = _flip_item(own, chunks[1].filename, 3)
    with pytest.raises(litstore.DamagedRecordError, match=key) as caught:
        list(_loader(litstore.open(own.root).dataset(), 2))
    release_frames(caught)


def _position_of(dataset: VersionDataset, chunk: str, row: int = 0) -> int:
    """litdata's number of item ``row`` of ``chunk`` in ``dataset`` (not shuffled)."""
    return int(dataset._litdata_starts[dataset._files.index(chunk)]) + row


def _flip_item(store: litstore.Store, chunk: str, row: int) -> str:
    """Flip a byte inside item ``row`` of ``chunk``; the key of that record."""
    path = Path(store.root, chunk)
    data = bytearray(path.read_bytes())
    offsets = np.frombuffer(bytes(data), "<u4", count=struct.unpack_from("<I", data)[0] + 1, offset=4)
    data[int(offsets[row]) + 10] ^= 0x01
    path.write_bytes(bytes(data))
    manifest = store.manifest()
    at = pc.and_(pc.equal(manifest.column("chunk").cast(pa.string()), chunk), pc.equal(manifest.column("row"), row))
    (key,) = manifest.filter(at).column("key").to_pylist()
    return str(key)


def test_a_damaged_chunk_under_a_good_sidecar_raises_naming_the_key(own: litstore.Store) -> None:
    chunk = _chunks(own)[1]
    key = _flip_item(own, chunk.filename, 3)
    dataset = litstore.open(own.root).dataset()
    with pytest.raises(litstore.DamagedRecordError, match=key) as caught:
        list(dataset)
    assert caught.value.chunk == chunk.filename and caught.value.rows == [3]
    with pytest.raises(litstore.DamagedRecordError, match=key):
        dataset[_position_of(dataset, chunk.filename, 3)]


def test_a_missing_sidecar_falls_back_to_the_manifest_and_still_checks(own: litstore.Store) -> None:
    chunk = _chunks(own)[2].filename
    _sidecar(own, chunk).unlink()
    store = litstore.open(own.root)
    dataset = store.dataset(shuffle=True)
    assert _view_files(dataset) == {"index.json", "fragments", "records.arrow"}
    assert sorted(record["id"] for record in dataset) == sorted(store.keys())
    key = _flip_item(own, chunk, 0)
    with pytest.raises(litstore.DamagedRecordError, match=key):
        list(litstore.open(own.root).dataset())


def test_a_sidecar_written_again_is_used_again(own: litstore.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = _chunks(own)[0]
    sidecar = _sidecar(own, chunk.filename)
    written = sidecar.read_bytes()
    sidecar.unlink()
    hashes = chunkhashes.parse(chunk.filename, written, chunk.num_items)
    litstore.txn.write_chunk_hashes(own.storage, chunk.filename, hashes)
    store = litstore.open(own.root)
    _no_manifest(monkeypatch)
    assert len(list(store.dataset())) == len(store)


def test_unverified_streaming_reads_no_sidecar(own: litstore.Store) -> None:
    for chunk in _chunks(own):
        _flip(own, chunk.filename)
    store = litstore.open(own.root)
    dataset = store.dataset(verify_records=False)
    assert "unchecked" in repr(dataset)
    assert len(list(dataset)) == len(store)


# -- on S3 ---------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_format_3_store_on_s3_streams_through_its_sidecars(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from litstore.storage.s3 import S3Storage

    url = f"s3://{s3_bucket}/hashes"
    options = {"endpoint_url": s3_endpoint}
    store = litstore.Store.create(
        url, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, format_version=3, storage_options=options
    )
    _build(store)
    store = litstore.open(url, storage_options=options)
    expected = {key: store[key]["rev"] for key in store.keys()}
    _no_manifest(monkeypatch)
    dataset = store.dataset(shuffle=True, seed=8)
    assert "records.arrow" not in _view_files(dataset)
    streamed = [record for batch in _loader(dataset, 2) for record in batch]
    assert {record["id"]: record["rev"] for record in streamed} == expected
    assert len(streamed) == len(expected)
    monkeypatch.undo()

    # One read of each chunk's sidecar, as its first item is reached.
    reads: list[str] = []
    ranged = S3Storage.read_range

    def counted(self: S3Storage, path: str, start: int, end: int) -> bytes:
        reads.append(path)
        return ranged(self, path, start, end)

    monkeypatch.setattr(S3Storage, "read_range", counted)
    assert len(list(litstore.open(url, storage_options=options).dataset(shuffle=True, seed=8))) == len(expected)
    monkeypatch.undo()
    sidecars = sorted(layout.chunk_hashes(chunk.filename) for chunk in _chunks(store))
    assert sorted(path for path in reads if path.endswith(".hashes")) == sidecars

    chunk = _chunks(store)[0].filename
    sidecar = layout.chunk_hashes(chunk)
    data = bytearray(store.storage.read(sidecar))
    data[chunkhashes.HEADER.size] ^= 0x01
    store.storage.write(sidecar, bytes(data))
    with pytest.raises(litstore.IntegrityError, match=f"hashes sidecar of chunk {chunk}"):
        list(litstore.open(url, storage_options=options).dataset())
