"""Streaming a pinned version into training through litdata's ``StreamingDataset``.

Each (version, split) is streamed from a small private *view* directory outside the
store root (:mod:`litstore.views`): the split's litdata ``index.json``, and a link to
the store's ``fragments`` (local stores) or litdata's chunk cache (remote ones).

A format-4 version's chunks may hold dead rows (rows its deletion vectors mark as
superseded or deleted, :mod:`litstore.read.deletions`). The view's ``index.json``
lists each chunk's live count as its ``chunk_size`` (its file and byte size as they
are), so litdata samples, shuffles, splits between ranks and workers, and resumes
over live items only, and :class:`VersionDataset` reads litdata's item ``i`` of a
chunk from the chunk's ``i``-th live row. Making the dataset reads no deletion
vector (the commit record has each chunk's dead count); each process reads a chunk's
as it reaches the chunk.

The storage backend says how litdata reaches the store
(:meth:`~litstore.storage.Storage.litdata_input`). A local store streams with the view
directory as litdata's input directory, so litdata memory-maps the committed chunks
in place through the symlink (no copy of chunk data). A remote store streams with
the store URL as input directory, the view's index as ``index_path`` and the view's
own ``cache/``: an S3 store through litdata's S3 downloader, an ``az://`` or ``gs://``
store through litstore's own backend (:mod:`litstore._litdata.downloader`; with
DataLoader workers started by ``multiprocessing_context="spawn"``, as obstore does
not survive a fork). Either way the store root is
never written by readers (a shared, read-only store streams fine), and two versions
never share an ``index.json`` or a cache: litdata copies a custom ``index_path`` into
its input or cache directory, so versions sharing one would read each other's.

Items are checked against the content hashes their version committed. Where every
chunk streamed has its hashes sidecar (format-3 stores, :mod:`litstore.read.chunkhashes`),
each process reads the sidecar of the chunk it is about to decode, and making the
dataset reads no manifest: the view holds ``index.json`` and the ``fragments`` link (or
the cache) only, and starting costs O(chunks), not O(records). Otherwise (format 2, or
a chunk without its sidecar) the manifest is composed once and the key and content
hash of every item written into ``records.arrow``, which each worker maps.

:class:`VersionDataset` decodes each item back into its record and records the
version it streams in ``state_dict()``, so a loader state saved on one version
refuses to resume on another; the view's path is left out of that state, so it
resumes under any views directory. Every other entry of a state is checked before
litdata uses it (:mod:`litstore.stream_state`): an edited one raises
:class:`~litstore.errors.StreamStateError` naming the entry. Unless ``verify_records=False``, each item's bytes
are checked against the content hash the manifest committed for it (xxh3-128, well
under a microsecond for a typical record) and decoded by a
:class:`~litstore.read.checked.RecordCheck`, as every reader's are: damage raises
:class:`~litstore.errors.DamagedRecordError` naming the key, version, chunk and row.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from litdata import StreamingDataset
from litdata.streaming.cache import Cache
from litdata.streaming.sampler import ChunkedIndex
from litdata.utilities.env import _WorkerEnv

from litstore import order as order_module
from litstore import stream_state, views
from litstore._litdata.downloader import (
    STORAGE_PREFIX,
    allow_plain_http_s3,
    download_fault,
    error_chain,
    missing_object,
    read_through_storage,
    storage_input,
)
from litstore._litdata.index import ChunkInfo
from litstore.errors import (
    IntegrityError,
    InvalidArgumentError,
    KeyNotFoundError,
    LitstoreError,
    StorageError,
    StreamStateError,
)
from litstore.format import layout
from litstore.format.models import StoreConfig, Version
from litstore.read.checked import RecordCheck
from litstore.read.chunkhashes import ChunkHashes
from litstore.read.decoded import DecodedChunk
from litstore.read.deletions import Deletions
from litstore.storage import LocalInput, Storage
from litstore.storage.local import LocalStorage

_STATE_KEY = "litstore"
# Loader-state entries that hold the view's path: where the view lives is not part of what a state resumes.
_VIEW_PATHS = ("input_dir_path", "cache_dir_path")


_STREAMING_NEXT = StreamingDataset.__next__
#: ``order=``: litdata's own (depends on the world size), or the global order of :mod:`litstore.order`.
_ORDERS = ("litdata", "global")
#: The state entry of a global-order stream: what else fixes its sequence (see :mod:`litstore.order`).
_ORDER_KEY = "litstore_order"


def open_dataset(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    split: str | None,
    chunks: list[ChunkInfo],
    records: pa.Table | None,
    views_dir: str | os.PathLike[str] | None = None,
    *,
    hashes: ChunkHashes | None = None,
    deletions: Deletions | None = None,
    opener: Callable[[], Any] | None = None,
    **kwargs: Any,
) -> VersionDataset:
    """A :class:`VersionDataset` over the live items of ``chunks`` of one version and split of the store on
    ``storage``; ``opener`` opens the version's snapshot, for keyed access (``dataset[key]``).

    ``chunks`` are as the split index lists them (every row of each chunk file);
    ``deletions`` says which rows are dead (format 4). ``records`` (from
    :func:`stream_records`) are the key and content hash of each live item in stream
    order; ``hashes`` instead reads each chunk's from its sidecar; with neither, items
    are streamed unchecked.
    """
    source = storage.litdata_input()
    if source is None:
        raise LitstoreError(f"litdata cannot stream from {storage.url}: use a local, s3://, gs:// or az:// store")
    local = source.directory if isinstance(source, LocalInput) else None
    if local is not None:
        storage.local_path(layout.FRAGMENTS)  # the backend's checks: litdata follows no link the store holds
    directory = views.view(
        views.views_root(views_dir),
        storage,
        local,
        version,
        split,
        live_chunks(chunks, deletions),
        config.chunk_bytes,
        records,
    )
    identity = {"root": storage.url, "version": version.number, "split": split, "fingerprint": version.fingerprint}
    checked = directory / views.RECORDS_FILE if records is not None else None
    if isinstance(source, LocalInput):
        for chunk in chunks:  # litdata opens chunks by path: apply the storage's checks (links, FIFOs) first
            storage.read_range(chunk.filename, 0, 0)
        return VersionDataset(
            str(directory),
            identity,
            chunks=chunks,
            records_file=checked,
            chunk_hashes=hashes,
            chunk_root=source.directory,
            deletions=deletions,
            opener=opener,
            **kwargs,
        )
    kwargs.setdefault("cache_dir", str(directory / "cache"))
    if source.storage is not None:  # litdata downloads through litstore's backend (az://, gs://)
        remote, kwargs["storage_options"] = storage_input(source.storage)
    else:
        remote = source.url
        kwargs.setdefault("storage_options", dict(source.storage_options))
    return VersionDataset(
        remote,
        identity,
        plain_http=source.plain_http,
        endpoint=source.endpoint or source.url,
        chunks=chunks,
        records_file=checked,
        chunk_hashes=hashes,
        index_path=str(directory / "index.json"),
        deletions=deletions,
        opener=opener,
        **kwargs,
    )


def live_chunks(chunks: Sequence[ChunkInfo], deletions: Deletions | None) -> list[ChunkInfo]:
    """``chunks`` as a view's index lists them: each chunk's live items as its ``num_items`` (reads nothing).

    litdata samples, splits and numbers a chunk's items by the count its index gives,
    so a chunk with dead rows is listed with its live count (its file and byte size
    unchanged), and :class:`VersionDataset` maps litdata's numbers to the live rows.

    Raises:
        IntegrityError: the version's record says a chunk has no live row, or more dead
            rows than it holds (a chunk whose rows are all dead is never listed).
    """
    if not deletions:
        return list(chunks)
    listed = []
    for chunk in chunks:
        live = deletions.live_count(chunk.filename, chunk.num_items)
        if live < 1:
            raise IntegrityError(
                f"the commit record says {deletions.dead_count(chunk.filename)} of the {chunk.num_items} rows of "
                f"chunk {chunk.filename} are dead, yet its split index lists it: the version is damaged; "
                "store.verify() lists what is wrong"
            )
        listed.append(dataclasses.replace(chunk, num_items=live))
    return listed


def stream_records(
    manifest: pa.Table, chunks: Sequence[ChunkInfo], located: bool = False, deletions: Deletions | None = None
) -> pa.Table:
    """``key`` and ``content_hash`` of every live item of ``chunks``, in the order litdata numbers them.

    ``chunks`` are as the split index lists them (every row); ``deletions`` (format 4)
    says which rows are dead: litdata numbers only the live ones. ``located``: also each
    item's ``chunk`` and ``row`` (the row in the chunk file).

    Raises:
        IntegrityError: the manifest does not hold exactly one record for each live item
            of ``chunks``, or names a row the deletion vectors say is dead.
    """
    names = [chunk.filename for chunk in chunks]
    stored = np.array([chunk.num_items for chunk in chunks], dtype=np.int64)
    sizes = np.array([chunk.num_items for chunk in live_chunks(chunks, deletions)], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    total = int(starts[-1])
    listed = manifest.filter(pc.is_in(manifest.column("chunk"), pa.array(names, pa.string())))
    chunk_ids = pc.index_in(listed.column("chunk"), pa.array(names, pa.string())).to_numpy(zero_copy_only=False)
    rows = listed.column("row").to_numpy().astype(np.int64)
    outside = bool(((rows < 0) | (rows >= stored[chunk_ids])).any())
    places = rows if outside else _live_positions(chunks, chunk_ids, rows, deletions)
    positions = starts[chunk_ids] + places
    if outside or len(positions) != total or bool((places < 0).any()) or len(np.unique(positions)) != total:
        raise IntegrityError(
            f"the manifest lists {len(positions)} records in the {len(names)} chunks of this split, "
            f"whose index and deletion vectors say they hold {total} live items: the version's index, "
            "manifest or deletion vectors are damaged; store.verify() lists what is wrong"
        )
    columns = ["key", "content_hash", "chunk", "row"] if located else ["key", "content_hash"]
    return listed.select(columns).take(pa.array(np.argsort(positions)))


def _live_positions(
    chunks: Sequence[ChunkInfo], chunk_ids: np.ndarray, rows: np.ndarray, deletions: Deletions | None
) -> np.ndarray:
    """Where each of ``rows`` (of chunk ``chunks[chunk_ids]``, all in range) is among its chunk's live rows;
    -1 for a dead one. Reads the deletion vectors of those chunks with dead rows only."""
    if not deletions or not len(rows):
        return rows
    places = rows.copy()
    order = np.argsort(chunk_ids, kind="stable")
    present, firsts = np.unique(chunk_ids[order], return_index=True)
    lasts = [*firsts[1:].tolist(), len(order)]
    for chunk_id, first, last in zip(present.tolist(), firsts.tolist(), lasts, strict=True):
        chunk = chunks[chunk_id]
        live = deletions.live(chunk.filename, chunk.num_items)
        if live is None:
            continue
        mine = order[first:last]
        found = np.searchsorted(live, rows[mine])
        alive = found < len(live)
        alive[alive] = live[found[alive]] == rows[mine][alive]
        places[mine] = np.where(alive, found, -1)
    return places


def in_stream_order(rows: pa.Table, chunks: Sequence[ChunkInfo], deletions: Deletions | None = None) -> pa.Table:
    """Those of ``rows`` (``key``, ``content_hash``, ``chunk``, ``row``) in ``chunks``, in the order litdata
    numbers their items.

    ``deletions`` (format 4) says which rows of ``chunks`` are dead: rows are in stream
    order when sorted by chunk and row, dead ones or not, but none may be dead.

    Raises:
        IntegrityError: a row names an item its chunk does not hold, or one that is
            dead (the index it came from is damaged).
    """
    position = {chunk.filename: index for index, chunk in enumerate(chunks)}
    sizes = np.array([chunk.num_items for chunk in chunks], dtype=np.int64)
    names = rows.column("chunk").to_pylist()
    inside = np.array([name in position for name in names], dtype=bool)
    rows = rows.filter(pa.array(inside))
    chunk_ids = np.array([position[name] for name in np.array(names, dtype=object)[inside]], dtype=np.int64)
    numbers = rows.column("row").to_numpy().astype(np.int64)
    if len(numbers) and bool(((numbers < 0) | (numbers >= sizes[chunk_ids])).any()):
        raise IntegrityError(
            "the key index names items past the end of their chunks in this split: the version's index is "
            "damaged; store.verify() checks it"
        )
    if len(numbers) and bool((_live_positions(chunks, chunk_ids, numbers, deletions) < 0).any()):
        raise IntegrityError(
            "the key index names items that the version's deletion vectors say are dead: the version's index or "
            "deletion vectors are damaged; store.verify() checks them"
        )
    return rows.take(pa.array(np.lexsort((numbers, chunk_ids))))


def open_subset(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    split: str | None,
    members: pa.Table,
    verify_records: bool,
    views_dir: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> VersionDataset:
    """A :class:`VersionDataset` over the records ``members`` (``key``, ``content_hash``, ``chunk``, ``row``).

    The records' bytes are copied, in the order given, into chunks of a private view
    directory named by the version and a digest of the subset's keys (see
    :func:`litstore.views.subset_view`), and streamed from there: a chunk with holes streams several
    times slower than a whole one (``benchmarks/bench_stream.py``), a copy at full speed.
    """
    digest = views.subset_digest(members)
    directory, chunks = views.subset_view(
        views.views_root(views_dir), storage, version, split, members, digest, config.chunk_bytes
    )
    identity = {
        "root": storage.url,
        "version": version.number,
        "split": split,
        "fingerprint": version.fingerprint,
        "subset": digest,
        "subset_records": members.num_rows,
    }
    checked = directory / views.RECORDS_FILE if verify_records else None
    return VersionDataset(
        str(directory),
        identity,
        chunks=chunks,
        records_file=checked,
        chunk_root=str(directory),
        keys_file=directory / views.RECORDS_FILE,
        **kwargs,
    )


class VersionDataset(StreamingDataset):
    """A litdata ``StreamingDataset`` over one pinned version (and split) of a store.

    Behaves exactly like ``StreamingDataset`` (shuffle, workers, DDP, ``StreamingDataLoader``
    resume) and yields decoded records, each checked against its committed content hash
    unless the dataset was made with ``verify_records=False``. Build it with ``store.dataset(...)``.

    The committed hashes come from ``records_file`` (every live item's, in stream order)
    or from ``chunk_hashes`` (each chunk's sidecar, read as the chunk is reached).

    **Dead rows (format 4).** The view's index lists each chunk's live count, so litdata
    samples, shuffles, splits and resumes over live items only; ``deletions`` says which
    rows they are, and each item litdata numbers is read from its row: item ``i`` of a
    chunk is its ``i``-th live row. Each process reads the deletion vector of a chunk when
    it first reads an item of it, so a DataLoader worker reads only its own chunks'.
    litdata's own reader (remote chunks, and ``dataset[i]``) is handed the row,
    and its item loader the number of rows each chunk file holds (see
    :meth:`_create_cache`), so its checks of a chunk's header still hold.

    **Keyed access.** As in litdata, ``dataset[key]`` (a str key) and
    ``dataset.get_by_key(key)`` (any key) return the item the dataset yields for that
    key, checked and transformed; :class:`~litstore.errors.KeyNotFoundError` if its
    version, split or subset does not hold it. A whole split finds the key through its
    version's key index (the snapshot opened again on first use in each process, by
    ``opener``); a subset through the keys of its view, listed once on first use.
    """

    def __init__(
        self,
        input_dir: Any,
        identity: dict[str, Any],
        plain_http: bool = False,
        *,
        endpoint: str | None = None,
        chunks: Sequence[ChunkInfo] = (),
        records_file: Path | None = None,
        chunk_hashes: ChunkHashes | None = None,
        chunk_root: str | None = None,
        deletions: Deletions | None = None,
        opener: Callable[[], Any] | None = None,
        keys_file: Path | None = None,
        check_ranks: bool = True,
        order: str = "litdata",
        **kwargs: Any,
    ) -> None:
        if check_ranks:
            check_rank_detection()
        if order not in _ORDERS:
            raise InvalidArgumentError(f"order is one of {list(_ORDERS)}, got {order!r}")
        if order == "global" and chunk_root is None:
            raise InvalidArgumentError(
                "order='global' streams local stores only: remote chunks go through litdata's downloader, which "
                "fetches each worker's chunks in litdata's own order; stream this store with the default order"
            )
        self.order = order
        if order == "global" and kwargs.get("drop_last") is None:
            kwargs["drop_last"] = True  # the same at every world size (litdata's default depends on it)
        self._order_start = 0  # global order: the cursor in the epoch's sequence this pass starts at
        self._order_epoch = 1  # global order: the epoch the loader streams (litdata counts its own)
        self._worker_stream: order_module.WorkerStream | None = None
        self._plain_http = plain_http
        self._endpoint = endpoint  # where a remote stream downloads chunks from (errors name it)
        self._opener = opener  # opens the version's Snapshot (picklable); for dataset[key]
        self._keys_file = keys_file  # a subset's keys, in stream order; for dataset[key]
        self._snapshot: Any = None
        self._key_field: str | None = None
        self._key_positions: dict[Any, int] | None = None
        if plain_http:
            allow_plain_http_s3()
        # A stream downloading through litstore's backend (az://, gs://); its input is litdata's Dir.
        self._through_storage = str(getattr(input_dir, "url", None) or "").startswith(STORAGE_PREFIX)
        transform = kwargs.pop("transform", None)
        self._transforms: list[Callable[[Any], Any]] = (
            [] if transform is None else list(transform) if isinstance(transform, list) else [transform]
        )
        self._deletions = deletions if deletions else None
        if self._deletions is not None and kwargs.get("window_direct_io"):
            raise InvalidArgumentError(
                "window_direct_io reads chunks' items without litstore, so it cannot skip the rows this version "
                "deleted: stream this version without it (or compact the store first)"
            )
        # Rows each chunk file holds, dead ones included (what its header says).
        self._stored_rows = {chunk.filename: chunk.num_items for chunk in chunks}
        super().__init__(input_dir, **kwargs)
        # Local chunks (names relative to ``chunk_root``) are decoded a block of items at a
        # time, read through the local storage backend and its checks; remote ones go
        # through litdata's downloads.
        self._chunk_storage = LocalStorage(chunk_root) if chunk_root is not None else None
        self._decoded: DecodedChunk | None = None
        self._check: RecordCheck | None = None  # made on first use: it names keys from the records file
        self._decoded_index = -1
        self._decoded_start = 0  # litdata's number of the decoded chunk's first item
        self._live_index = -1  # the chunk whose live rows _live_rows holds
        self._live_rows: np.ndarray | None = None
        self.identity = dict(identity)
        self._records_file = records_file
        self._chunk_hashes = chunk_hashes
        # Memory-mapped here, so that DataLoader workers forked from this process share the
        # mapping instead of each opening it; a worker that unpickles the dataset opens its own.
        self._expected: memoryview | None = None
        self._keys: pa.ChunkedArray | None = None
        if records_file is not None:
            self._open_records()
        # litdata numbers the live items across the chunks it streams (all of them unless
        # subsampled): item g of its chunk c is live item g - litdata_starts[c] of the chunk,
        # our record stream_starts[c] + that.
        sizes = {chunk.filename: chunk.num_items for chunk in live_chunks(chunks, self._deletions)}
        starts = np.cumsum([0] + [sizes[chunk.filename] for chunk in chunks])[:-1]
        ours = {chunk.filename: int(start) for chunk, start in zip(chunks, starts, strict=True)}
        files = list(self.subsampled_files) or [chunk.filename for chunk in chunks]
        self._files = files
        self._stored: list[int] = [self._stored_rows[name] for name in files]
        self._litdata_starts: list[int] = np.concatenate([[0], np.cumsum([sizes[name] for name in files])]).tolist()
        self._stream_starts: list[int] = [ours[name] for name in files]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # Memory-mapped (or bound to this dataset): each process opens or makes its own.
        state["_expected"] = state["_keys"] = state["_decoded"] = state["_check"] = None
        state["_live_rows"] = state["_snapshot"] = state["_key_positions"] = None
        state["_decoded_index"] = state["_live_index"] = -1
        state["_worker_stream"] = None  # a generator: each worker makes its own in __iter__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A DataLoader worker started with "spawn" unpickles the dataset in a fresh
        # interpreter: register litstore's downloaders there too.
        self.__dict__.update(state)
        if state.get("_plain_http"):
            allow_plain_http_s3()
        if state.get("_through_storage"):
            read_through_storage()

    def __repr__(self) -> str:
        split = "all splits" if self.identity.get("split") is None else f"split {self.identity['split']!r}"
        checked = "" if self._records_file is not None or self._chunk_hashes is not None else ", unchecked"
        source = self.input_dir.url or self.input_dir.path
        return (
            f"<VersionDataset {self.identity.get('root')} version {self.identity.get('version')}, {split}: "
            f"{self._litdata_starts[-1]} records, shuffle={self.shuffle}{checked}, streaming from {source}>"
        )

    def _create_cache(self, worker_env: _WorkerEnv) -> Cache:
        """litdata's cache (reader) for this process, its item loader told how many rows each chunk file holds.

        The view's ``index.json`` lists each chunk's live count, from which litdata
        computes, once, as the reader's config loads, the intervals it samples and
        numbers. Its item loader keeps the same list and checks each chunk's header
        against it before mapping the file (``PyTreeLoader._ensure_chunk_mmap``, also
        when it warms the next chunks of a local stream): a chunk with dead rows holds
        more. So, once the config is loaded, the loader gets its own copy of the list
        with the rows each file holds, and :meth:`__getitem__` hands litdata the row
        of each item, never its live number. ``tests/streaming/test_holes.py`` pins this.

        A local stream's items are decoded by litstore (:meth:`_record`), so its item
        loader maps no chunk ahead: litdata's warming of the next chunks (up to four of
        them, each as a Python list of its item offsets, 36 bytes an item: 17 MiB for a
        chunk of 500,000 small records) is left to its page-cache hint alone.
        """
        cache = super()._create_cache(worker_env=worker_env)
        if self._chunk_storage is not None:
            loader = cache._reader._item_loader
            if hasattr(loader, "warm_posix_chunk"):
                loader.warm_posix_chunk = _map_nothing
        if self._deletions is not None:
            loader = cache._reader._item_loader
            listed = getattr(loader, "_chunks", None)
            if listed is not None:
                loader._chunks = [
                    {**entry, "chunk_size": self._stored_rows.get(entry["filename"], entry["chunk_size"])}
                    for entry in listed
                ]
        return cache

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        if isinstance(index, str):
            return self.get_by_key(index)
        return self._item(index, transformed=True)

    def _item(self, index: Any, transformed: bool) -> Any:
        """Item ``index`` (a number or litdata's ``ChunkedIndex``), checked, decoded, transformed if ``transformed``."""
        if type(index) is ChunkedIndex and self._chunk_storage is not None:
            return self._record(index.chunk_index, index.index, transformed)
        whole = isinstance(index, (int, np.integer)) and not isinstance(index, bool)
        if whole and 0 <= index < self._litdata_starts[-1]:  # dataset[i]: litdata's per-item path, as on S3
            index = ChunkedIndex(index=int(index), chunk_index=bisect.bisect_right(self._litdata_starts, index) - 1)
        if type(index) is not ChunkedIndex:
            return super().__getitem__(index)  # litdata's error
        begin = self._litdata_starts[index.chunk_index]
        position = int(index.index) - begin
        row = self._row(index.chunk_index, position)
        item = super().__getitem__(index if row == position else dataclasses.replace(index, index=begin + row))
        record = self._checked(item, index.chunk_index, position, row)
        return self._transformed(record) if transformed else record

    def _transformed(self, record: Any) -> Any:
        for transform in self._transforms:
            record = transform(record)
        return record

    def get_by_key(self, key: Any) -> Any:
        """The item this dataset yields for the record with ``key`` (see the class docstring).

        Raises:
            KeyNotFoundError: this dataset's version, split or subset holds no record with ``key``.
            IntegrityError: the record is not what its version committed.
        """
        for number in self._numbers_of(key):
            record = self._item(number, transformed=False)
            if self._keys_file is not None or (isinstance(record, dict) and record.get(self._key_field) == key):
                return self._transformed(record)  # (a whole split's index may list another key of the same hash)
        where = "all splits" if self.identity.get("split") is None else f"split {self.identity['split']!r}"
        subset = ", in this subset" if "subset" in self.identity else ""
        raise KeyNotFoundError(
            f"key {key!r} is not in version {self.identity.get('version')} ({where}{subset}) of "
            f"{self.identity.get('root')}"
        )

    def _numbers_of(self, key: Any) -> list[int]:
        """litdata's numbers of the items that may be the record with ``key`` (normally none or one)."""
        if self._keys_file is not None:  # a subset: its items are its keys, in stream order, with no dead rows
            if self._key_positions is None:
                keys = pa.ipc.open_file(pa.memory_map(str(self._keys_file))).read_all().column("key").to_pylist()
                self._key_positions = {stored: position for position, stored in enumerate(keys)}
            position = self._key_positions.get(key)
            return [] if position is None else self._numbers_at(position)
        if self._opener is None:
            raise LitstoreError("this dataset was made without its version's key index: keyed access needs one")
        if self._snapshot is None:
            self._snapshot = self._opener()
        self._key_field = self._snapshot.config.key
        files = {name: chunk_index for chunk_index, name in enumerate(self._files)}
        numbers = []
        for chunk, row in self._snapshot.reader.places(key):
            chunk_index = files.get(chunk)
            if chunk_index is None:  # in another split
                continue
            live = self._live(chunk_index)
            position = row if live is None else int(np.searchsorted(live, row))
            if live is None or (position < len(live) and live[position] == row):
                numbers.append(self._litdata_starts[chunk_index] + position)
        return numbers

    def _numbers_at(self, position: int) -> list[int]:
        """litdata's number of the item at ``position`` of the stream (none if its chunk is not streamed)."""
        for chunk_index, start in enumerate(self._stream_starts):
            size = self._litdata_starts[chunk_index + 1] - self._litdata_starts[chunk_index]
            if start <= position < start + size:
                return [self._litdata_starts[chunk_index] + position - start]
        return []

    # litdata reads the next chunks in __iter__ and __next__ (a remote stream's downloads,
    # and its per-item reads), before __getitem__ sees them: a header that disagrees with
    # index.json, or a truncated chunk, raises RuntimeError, ValueError, IndexError or
    # OSError from inside litdata (found by tests/store/test_fuzzed_stores.py); a local
    # stream's headers are checked by DecodedChunk, named the same way in _decode. A
    # download that failed (the storage client's error is in the chain) is a StorageError,
    # never damage. A plain try costs nothing per item.
    def __iter__(self) -> VersionDataset:
        if self.order == "global":
            return self._iter_global()
        try:
            super().__iter__()
        except (LitstoreError, StopIteration):
            raise
        except (RuntimeError, ValueError, IndexError, OSError) as exc:
            raise _stream_failure(self.identity, self._endpoint, exc, self._files) from exc
        return self

    def __next__(self) -> Any:
        if self._worker_stream is not None:
            return self._transformed(next(self._worker_stream))
        upcoming = self.upcoming_indexes
        if upcoming and self.has_triggered_download and self._chunk_storage is not None:
            if self.global_index < self.stop_length:
                # The next item of the local chunk being streamed: litdata's __next__ would
                # do exactly this bookkeeping, then build a ChunkedIndex only for __getitem__.
                number = upcoming.popleft()
                chunk_index = self.worker_chunks[self.worker_next_chunk_index - 1]
                self.global_index += 1
                self.consumed_sample_count_in_curr_chunk += 1
                return self._record(chunk_index, number)
        try:
            return _STREAMING_NEXT(self)
        except (LitstoreError, StopIteration):
            raise
        except (RuntimeError, ValueError, IndexError, OSError) as exc:
            raise _stream_failure(self.identity, self._endpoint, exc, self._files) from exc

    def _live(self, chunk_index: int) -> np.ndarray | None:
        """The live rows of chunk ``chunk_index`` (litdata's number), or ``None`` when every row is live.

        Raises:
            IntegrityError: its deletion vector is missing or damaged.
        """
        if self._deletions is None:
            return None
        if self._live_index != chunk_index:
            self._live_rows = self._deletions.live(self._files[chunk_index], self._stored[chunk_index])
            self._live_index = chunk_index
        return self._live_rows

    def _row(self, chunk_index: int, position: int) -> int:
        """The row of chunk ``chunk_index`` holding its live item ``position``."""
        live = self._live(chunk_index)
        return position if live is None else int(live[position])

    def _record(self, chunk_index: int, number: int, transformed: bool = True) -> Any:
        """Item ``number`` (litdata's numbering) of local chunk ``chunk_index``, checked, decoded and transformed."""
        chunk = self._decoded
        if chunk is None or self._decoded_index != chunk_index:
            chunk = self._decode(chunk_index)
        record = chunk.take(int(number) - self._decoded_start)  # the chunk's live items, numbered as litdata does
        return self._transformed(record) if transformed else record

    def _decode(self, chunk_index: int) -> DecodedChunk:
        """Map local chunk ``chunk_index`` for decoding (see :mod:`litstore.read.decoded`), releasing the last one."""
        self._decoded = None  # release the previous chunk before mapping the next
        chunk = self._decoded = self._decoded_chunk(chunk_index)
        self._decoded_index = chunk_index
        self._decoded_start = self._litdata_starts[chunk_index]
        return chunk

    def _decoded_chunk(self, chunk_index: int, rows: np.ndarray | None = None) -> DecodedChunk:
        """Local chunk ``chunk_index`` mapped for decoding its ``rows`` (increasing; default: its live rows)."""
        live = self._live(chunk_index)
        expected: bytes | memoryview | None = None
        if self._records_file is not None:
            if self._expected is None:
                self._open_records()
            assert self._expected is not None
            start = 16 * self._stream_starts[chunk_index]
            size = self._litdata_starts[chunk_index + 1] - self._litdata_starts[chunk_index]
            expected = self._expected[start : start + 16 * size]
            if live is not None:  # the records file holds live items only: a dead row's place (unread) is zero
                every = np.zeros((self._stored[chunk_index], 16), dtype=np.uint8)
                every[live] = np.frombuffer(expected, dtype=np.uint8).reshape(-1, 16)
                expected = every.tobytes()
        elif self._chunk_hashes is not None:
            expected = self._hashes_of(chunk_index)
        name = self._files[chunk_index]
        assert self._chunk_storage is not None
        mapped = self._chunk_storage.mapped(name)
        try:
            chunk = DecodedChunk(mapped, name, expected, self._record_check(), live if rows is None else rows)
        except IntegrityError as exc:  # a damaged header: named as when litdata's reader finds it
            raise _damaged_chunk(self.identity, exc) from exc
        if chunk.row_count != self._stored[chunk_index]:
            raise IntegrityError(
                f"chunk {name} holds {chunk.row_count} items; its split index lists {self._stored[chunk_index]}: the "
                "chunk or the version's index is damaged; store.verify() lists every damaged record"
            )
        return chunk

    def _checked(self, item: bytes, chunk_index: int, position: int, row: int) -> Any:
        """The record of ``item`` (live item ``position``, at ``row``, of chunk ``chunk_index``), checked if
        records are."""
        expected = None
        if self._records_file is not None:
            if self._expected is None:
                self._open_records()
            assert self._expected is not None
            place = self._stream_starts[chunk_index] + position
            expected = self._expected[16 * place : 16 * place + 16]
        elif self._chunk_hashes is not None:
            expected = self._hashes_of(chunk_index)[16 * row : 16 * row + 16]
        return self._record_check().record(self._files[chunk_index], row, item, expected)

    def _hashes_of(self, chunk_index: int) -> memoryview:
        """The committed content hashes of every row of chunk ``chunk_index`` (litdata's number), from its sidecar."""
        assert self._chunk_hashes is not None
        return self._chunk_hashes.of(self._files[chunk_index], self._stored[chunk_index])

    def _record_check(self) -> RecordCheck:
        if self._check is None:
            if self._chunk_hashes is not None:  # names damaged records from the manifest, composed only then
                self._check = self._chunk_hashes.check()
            else:
                self._check = RecordCheck(self.identity["version"], self._keys_at)
        return self._check

    def _keys_at(self, chunk: str, rows: np.ndarray) -> list[Any]:
        """The keys of the items at ``rows`` of ``chunk``, from the records file (``None`` each if unchecked)."""
        if self._records_file is None:
            return [None] * len(rows)
        if self._keys is None:
            self._open_records()
        assert self._keys is not None
        chunk_index = self._files.index(chunk)
        live = self._live(chunk_index)
        positions = np.asarray(rows, dtype=np.int64) if live is None else np.searchsorted(live, rows)
        return list(self._keys.take(pa.array(positions + self._stream_starts[chunk_index])).to_pylist())

    def _open_records(self) -> None:
        assert self._records_file is not None
        table = pa.ipc.open_file(pa.memory_map(str(self._records_file))).read_all()
        contents = table.column("content_hash").combine_chunks()
        start = 16 * contents.offset
        self._expected = memoryview(contents.buffers()[1]).cast("B")[start : start + 16 * len(contents)]
        self._keys = table.column("key")

    # -- the global order (order="global", see litstore.order) --------------------------
    # litdata's sampling, workers' chunks and resume are replaced; its loader, its state's
    # entries and its checks of them are kept. The state's ``sample_in_epoch`` is the cursor
    # in the epoch's sequence and ``resume_mode`` is "elastic", so that StreamingDataLoader
    # resumes it on any topology: its own counts restart from zero, and so does the cursor's
    # count of batches.

    def _share(self, num_workers: int, worker: int, batch_size: int | None = None) -> order_module.Share:
        return order_module.Share(
            total=self._litdata_starts[-1],
            start=self._order_start,
            world_size=self.distributed_env.world_size,
            rank=self.distributed_env.global_rank,
            num_workers=num_workers,
            worker=worker,
            batch_size=batch_size or self.batch_size,
            drop_last=self.drop_last,
        )

    def _iter_global(self) -> VersionDataset:
        forced = getattr(self, "_forced_worker_env", None)
        self.worker_env = forced if forced is not None else _WorkerEnv.detect()
        sizes = np.diff(self._litdata_starts)
        sequence = order_module.GlobalOrder(sizes, self.seed, self._order_epoch, self.shuffle)
        share = self._share(self.worker_env.world_size, self.worker_env.rank)
        self._worker_stream = order_module.WorkerStream(sequence, share, self._decode_items)
        return self

    def _decode_items(self, chunk_index: int, items: np.ndarray) -> DecodedChunk:
        """Local chunk ``chunk_index`` to decode its live ``items`` (increasing), numbered 0.. in that order."""
        if len(items) == self._litdata_starts[chunk_index + 1] - self._litdata_starts[chunk_index]:
            return self._decoded_chunk(chunk_index)  # every live item (items is 0..n-1): the plain block path
        live = self._live(chunk_index)
        return self._decoded_chunk(chunk_index, items if live is None else live[items])

    def get_len(self, num_workers: int, batch_size: int) -> int:
        if self.order != "global":
            return int(super().get_len(num_workers, batch_size))
        self.set_num_workers(num_workers)
        self.set_batch_size(batch_size)
        return int(self._share(1, 0).rank_items)

    def set_epoch(self, current_epoch: int) -> None:
        super().set_epoch(current_epoch)
        self._order_epoch = current_epoch

    def reset_state_dict(self) -> None:
        super().reset_state_dict()
        self._order_start = 0

    def _order_entry(self) -> dict[str, Any] | None:
        if self.order != "global":
            return None
        return {
            "order": "global",
            "window_chunks": order_module.WINDOW_CHUNKS,
            "block_items": order_module.BLOCK_ITEMS,
            "run_items": order_module.RUN_ITEMS,
        }

    def state_dict(self, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict[str, Any]:
        state: dict[str, Any] = dict(super().state_dict(num_samples_yielded, num_workers, batch_size))
        for entry in _VIEW_PATHS:
            state[entry] = None
        state[_STATE_KEY] = self.identity
        if self.order == "global":
            batches = num_samples_yielded // batch_size  # the loader counts batches, each as batch_size samples
            state["sample_in_epoch"] = self._share(1, 0, batch_size).consumed(batches)
            state["num_samples_yielded"] = 0
            state["current_epoch"] = self._order_epoch
            state["resume_mode"] = "elastic"
            state[_ORDER_KEY] = self._order_entry()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from ``state_dict`` (this dataset's part of a loader state), checked first.

        Raises:
            StreamStateError: the state was saved on another version, split or subset, or is
                not one litdata wrote for this dataset (see :mod:`litstore.stream_state`).
        """
        if not isinstance(state_dict, dict):
            raise StreamStateError(f"a loader state is a dict, got {type(state_dict).__name__}")
        saved = state_dict.get(_STATE_KEY)
        if saved != self.identity:
            raise StreamStateError(
                f"this loader state was saved while streaming {_describe(saved)}; "
                f"it cannot resume a dataset over {_describe(self.identity)}"
            )
        saved_order = state_dict.get(_ORDER_KEY)
        if saved_order != self._order_entry():
            saved_name = saved_order.get("order") if isinstance(saved_order, dict) else saved_order
            raise StreamStateError(
                f"this loader state was saved streaming in order {saved_name or 'litdata'!r} "
                f"({saved_order!r}); this dataset streams in order {self.order!r}: make the dataset with the "
                "order= it was saved with to resume from it"
            )
        # The state binds to (store, version, split, fingerprint), checked above; litdata
        # would also compare the view's path, which differs between runs.
        state = stream_state.check({k: v for k, v in state_dict.items() if k != _ORDER_KEY}, self, _STATE_KEY)
        state["input_dir_path"] = self.input_dir.path
        state["cache_dir_path"] = self.cache_dir.path
        if self.order == "global":
            self._order_start = state["sample_in_epoch"]
            self._order_epoch = state["current_epoch"]
        super().load_state_dict(state)


#: What launchers set in each process of a distributed job: (world size, rank) variables.
_LAUNCHERS = (("WORLD_SIZE", "RANK"), ("SLURM_NTASKS", "SLURM_PROCID"))


def check_rank_detection() -> None:
    """Refuse to stream where the environment says the job is distributed but litdata cannot see this rank.

    litdata takes a process's rank from an initialised ``torch.distributed`` process
    group or from ``GLOBAL_RANK``, and reads them once, when the dataset is made;
    torchrun sets ``WORLD_SIZE`` and ``RANK`` (SLURM ``SLURM_NTASKS`` and
    ``SLURM_PROCID``) and neither of those. A dataset made before
    ``init_process_group`` in such a job takes every process for rank 0, and every rank
    streams the same share, each record seen ``world size`` times with no warning.

    Raises:
        InvalidArgumentError: the environment says the job is distributed (a world size above
            one) and no process group is initialised and ``GLOBAL_RANK`` is not set.
    """
    import torch.distributed

    if "GLOBAL_RANK" in os.environ or (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    launcher = next((names for names in _LAUNCHERS if _world_size(names[0]) > 1), None)
    if launcher is None:
        return
    size_name, rank_name = launcher
    size, rank = os.environ[size_name].strip(), os.environ.get(rank_name)
    said = f"{size_name}={size}" + (f", {rank_name}={rank}" if rank is not None else "")
    raise InvalidArgumentError(
        f"the environment says this process is one of a distributed job ({said}), but litdata cannot see its "
        "rank: no torch.distributed process group is initialised and GLOBAL_RANK is not set, so every rank would "
        "stream the same share of the data. Make the dataset after torch.distributed.init_process_group(...), or "
        f"set GLOBAL_RANK (from {rank_name}) and WORLD_SIZE in each process; pass check_ranks=False to stream as "
        "litdata sees it anyway (every process as rank 0)"
    )


def _world_size(name: str) -> int:
    """The world size the environment variable ``name`` gives (1 if unset or not a number)."""
    text = os.environ.get(name, "1").strip()
    return int(text) if text.isdigit() else 1


def _map_nothing(chunk_index: int, chunk_filepath: str) -> None:
    """An item loader's ``warm_posix_chunk`` that maps nothing (litdata's reader gives the page-cache hint itself)."""


def _stream_failure(
    identity: dict[str, Any], endpoint: str | None, exc: BaseException, chunks: Sequence[str] = ()
) -> LitstoreError:
    """What litdata's error while streaming means: a chunk the service says is not there (:class:`IntegrityError`,
    the same on every backend), a download's fault (:class:`StorageError`), or a damaged chunk."""
    missing = missing_object(exc)
    if missing is not None:
        return _missing_chunk(identity, missing, exc, chunks)
    fault = download_fault(exc)
    if fault is None:
        return _damaged_chunk(identity, exc)
    detail = str(fault).strip().splitlines()[0] if str(fault).strip() else type(fault).__name__
    return StorageError(
        f"streaming version {identity.get('version')} of {identity.get('root')} could not download a chunk from "
        f"{endpoint or identity.get('root')} ({type(fault).__name__}: {detail}): a network or storage fault, not "
        "damage; check the endpoint, credentials and network, then retry"
    )


def _missing_chunk(
    identity: dict[str, Any], missing: BaseException, exc: BaseException, chunks: Sequence[str]
) -> IntegrityError:
    """A chunk the version lists that the service answered is not there: data missing since the commit.

    The chunk is the one of ``chunks`` (the version's) that ``missing`` names (obstore and a backend name the
    object). boto3 names none; then the chunk litdata's reader was waiting for is named as that, for it may be
    a later one than the prefetch thread failed on.
    """
    name = next((chunk for chunk in chunks if chunk in str(missing)), None)
    waited = [str(error) for error in error_chain(exc) if error is not missing]
    waiting = next((chunk for message in waited for chunk in chunks if chunk in message), None)
    detail = str(missing).strip().splitlines()[0].partition(" <?xml")[0] or type(missing).__name__  # no XML body
    version, root = identity.get("version"), identity.get("root")
    if name is not None:
        chunk = f"its chunk {name}"
    else:
        chunk = "a chunk it lists" + (f" (the stream was waiting for {waiting})" if waiting else "")
    return IntegrityError(
        f"streaming version {version} of {root}: {chunk} is not there (the service "
        f"answered {type(missing).__name__}: {detail}). A committed version's chunks are removed only by gc, once "
        f"no version it keeps lists them: if version {version} was expired (store.gc), stream a version gc kept; "
        "otherwise the chunk was deleted from the bucket by something other than litstore. store.verify() lists "
        "every missing chunk"
    )


def _damaged_chunk(identity: dict[str, Any], exc: BaseException) -> IntegrityError:
    """litdata's error on a damaged chunk, as the :class:`IntegrityError` it means."""
    return IntegrityError(
        f"streaming version {identity.get('version')} failed to read a chunk ({exc}): the chunk or its index "
        "is damaged; store.verify() lists every damaged record"
    )


def _describe(identity: dict[str, Any] | None) -> str:
    if not identity:
        return "something other than a litstore version"
    split = identity.get("split") or "all splits"
    if identity.get("subset"):
        split += f", a subset of {identity.get('subset_records')} records ({identity['subset']})"
    return f"version {identity['version']} ({split}, fingerprint {identity['fingerprint']}) of {identity['root']}"
