"""Staging: writing records into a new fragment, before any version lists them.

A :class:`StagedFragment` is small and picklable: its id, the chunks it wrote and one
manifest row per record. It can be produced in another process or on another
machine (a Ray task, a torchrun rank) and handed to :func:`litstore.txn.commit`,
which publishes any number of them as one version. A fragment that is never
committed is invisible; ``gc`` removes it after its grace period.

Staging streams: records arrive as a sequence of :class:`~litstore.txn.records.Batch`
runs (bounded in bytes by :func:`~litstore.txn.records.prepare_runs`), each run's
records are sorted by key hash per split and appended to that split's chunk stream
(in a thread, while the caller prepares the next run: :class:`_WriteBehind`), and
only two runs (the one written, the next) and the chunks being filled are in memory,
whatever the input size. Within a run, key-hash order makes the chunks depend on the set of
records, not on the order they came in: an input that fits in one run gives the
same chunk files in any order.
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from litstore import query
from litstore._litdata import chunk as chunk_layout
from litstore._litdata.index import ChunkInfo
from litstore._litdata.writer import ChunkWriter
from litstore.errors import DuplicateKeyError, IntegrityError, describe
from litstore.format import chunkhashes, hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.models import StoreConfig
from litstore.read.memory import release_freed
from litstore.storage import Storage
from litstore.txn import leases
from litstore.txn.progress import bar as progress_bar
from litstore.txn.records import Batch

_Run = TypeVar("_Run")

# A run of fewer records is written in the calling thread: a thread's start and the GIL it
# shares cost more than the overlap gains on a run written in a millisecond.
_SMALL_RUN = 4096


@dataclass(frozen=True)
class StagedFragment:
    """Records written to a fragment of the store and checked; not yet part of any version.

    Attributes:
        transaction: the fragment's id (its files live under ``fragments/<transaction>/``).
        chunks: the chunks written for each split.
        rows: one manifest row per record (``key``, ``key_hash``, ``content_hash``,
            ``split``, ``chunk``, ``row``, then the declared fields), in the order they were written.
        fingerprint: what its records add to a version's fingerprint (the sum of their
            pair hashes, 32 hex digits), so a commit need not hash every record again.
        lease: how many seconds after staging gc leaves the fragment alone
            (:mod:`litstore.txn.leases`); a commit renews it for as long again.
    """

    transaction: str
    chunks: dict[str, tuple[ChunkInfo, ...]]
    rows: pa.Table = field(repr=False)
    fingerprint: str = hashing.fingerprint_hex(0)
    lease: float = leases.DEFAULT_LEASE.total_seconds()

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    def __repr__(self) -> str:
        chunks = sum(len(listed) for listed in self.chunks.values())
        return f"StagedFragment({self.transaction!r}, records={len(self)}, chunks={chunks})"


@dataclass(frozen=True)
class Moved:
    """Committed records that move to new chunks (copy-on-write): their items as stored, in order, and their
    manifest rows (``key``, ``key_hash``, ``content_hash``, ``split``), which they keep."""

    rows: pa.Table
    items: pa.LargeBinaryArray

    def __len__(self) -> int:
        return int(self.rows.num_rows)


def stage(
    storage: Storage,
    config: StoreConfig,
    runs: Batch | Moved | Iterable[Batch],
    progress: bool = False,
    description: str = "writing records",
    chunk_bytes: int | None = None,
    fingerprinted: bool = True,
    lease: float = leases.DEFAULT_LEASE.total_seconds(),
) -> StagedFragment:
    """Write ``runs`` (one batch or a stream of them) into a new fragment.

    Each run's records are written per split in key-hash order; chunks are about
    ``chunk_bytes`` (default: the store's) each; a format-3 store also gets each chunk's
    hashes sidecar beside it (:mod:`litstore.format.chunkhashes`). Every chunk is read back before this
    returns: every record must sit, intact, exactly once where the rows say; and made durable
    (:meth:`~litstore.storage.Storage.sync`), so that a commit in another process (ingest's
    workers stage, the caller commits) names nothing a power loss could take. If the
    stream raises (bad input found late), the partial fragment is removed. With
    ``fingerprinted=False`` the fragment's fingerprint is left at zero instead of
    hashing every (key, content hash) pair: for records moved between chunks, which
    leave a version's fingerprint as it was.

    The fragment is leased for ``lease`` seconds (:mod:`litstore.txn.leases`) once the
    input's first run is ready, before its first chunk is written: gc removes none of
    its files meanwhile. Staging nothing leaves no files.

    Raises:
        IntegrityError: the written chunks do not hold every record exactly once.
    """
    return write_fragment(
        storage, config, runs, progress, description, chunk_bytes, fingerprinted, sources=False, lease=lease
    )[0]


def write_fragment(
    storage: Storage,
    config: StoreConfig,
    runs: Batch | Moved | Iterable[Batch],
    progress: bool = False,
    description: str = "writing records",
    chunk_bytes: int | None = None,
    fingerprinted: bool = True,
    sources: bool = True,
    lease: float = leases.DEFAULT_LEASE.total_seconds(),
) -> tuple[StagedFragment, np.ndarray]:
    """:func:`stage`, and where each of the fragment's rows came from: row ``i`` holds record ``sources[i]``
    of the input (the runs' records numbered one after another).

    For moves, which must find each record's new place without matching millions of keys.
    With ``sources=False`` the positions (8 bytes a record) are not kept and an empty
    array is returned.
    """
    transaction = layout.new_transaction()
    prefix = layout.fragment(transaction)
    key_type = manifest_format.schema(config.key_type).field("key").type
    bar = progress_bar(progress, desc=description, unit="rec")
    leased = False
    try:
        with storage.staging(prefix) as directory:
            streams = _SplitStreams(
                directory, transaction, prefix, chunk_bytes or config.chunk_bytes, key_type, fingerprinted, sources, bar
            )
            runs_seen = 0
            single = isinstance(runs, (Batch, Moved))  # (nothing to prepare beside its writing)
            with _WriteBehind() as behind:
                for run in [runs] if isinstance(runs, (Batch, Moved)) else runs:
                    if not leased:  # before the first chunk, after the input's first run (a slow source writes nothing)
                        leases.take(storage, transaction, transaction, lease)
                        leased = True
                    runs_seen += 1
                    behind.submit(streams.add, run, inline=single or len(run) < _SMALL_RUN)
            chunks = {split: tuple(writer.close()) for split, writer in sorted(streams.writers.items())}
            release_freed(sum(chunk.num_bytes for listed in chunks.values() for chunk in listed))
            rows = _locate(streams.written, chunks, config.key_type)
            if runs_seen > 1:  # within a run the input was checked already
                twice = query.duplicate_keys(rows, hashes_are_true=True)
                if twice:
                    raise DuplicateKeyError(f"{len(twice)} keys appear more than once in the input: {describe(twice)}")
            _check_landed(directory, prefix, rows)
            if config.writes_key_runs:
                _write_hashes(directory, prefix, chunks, rows)
        if not any(chunks.values()):
            storage.delete_tree(prefix)  # nothing staged: no files to lease, commit or collect
        else:  # durable before any commit record names them, whichever process commits the fragment
            storage.sync(_fragment_files(chunks, config.writes_key_runs))
    except BaseException:
        storage.delete_tree(prefix)
        raise
    finally:
        bar.close()
    fragment = StagedFragment(transaction, chunks, rows, hashing.fingerprint_hex(streams.fingerprint), lease)
    # _locate lays the splits out in name order, each split's runs in the order they came.
    placed = [positions for split in sorted(chunks) for name, positions in streams.taken_from if name == split]
    return fragment, np.concatenate(placed) if placed else np.empty(0, dtype=np.intp)


def _fragment_files(chunks: dict[str, tuple[ChunkInfo, ...]], sidecars: bool) -> list[str]:
    """The paths of a fragment's chunk files, and (``sidecars``) of their hashes sidecars."""
    paths = [chunk.filename for listed in chunks.values() for chunk in listed]
    return paths + [layout.chunk_hashes(path) for path in paths] if sidecars else paths


class _SplitStreams:
    """The chunk stream of each split of a fragment being written, and what :func:`write_fragment` learns of the
    records it writes: their rows in the order written, where each came from, their fingerprint."""

    def __init__(
        self,
        directory: str,
        transaction: str,
        prefix: str,
        chunk_bytes: int,
        key_type: pa.DataType,
        fingerprinted: bool,
        sources: bool,
        bar: Any,
    ) -> None:
        self.directory, self.transaction, self.prefix, self.chunk_bytes = directory, transaction, prefix, chunk_bytes
        self.key_type, self.fingerprinted, self.sources, self.bar = key_type, fingerprinted, sources, bar
        self.numbers = itertools.count()
        self.writers: dict[str, ChunkWriter] = {}
        self.written: list[pa.Table] = []  # rows in the order they entered each split's chunk stream
        self.taken_from: list[tuple[str, np.ndarray]] = []  # (split, input positions) in the order written
        self.fingerprint = 0
        self.offset = 0  # the input position of the run's first record

    def add(self, run: Batch | Moved) -> None:
        """Append ``run``'s records to their splits' streams, in key-hash order within each split."""
        run_rows, splits = _rows_of(run, self.key_type)
        if self.fingerprinted:
            self.fingerprint += hashing.fingerprint_of(run_rows.column("key"), run_rows.column("content_hash"))
        key_hashes = run_rows.column("key_hash").to_numpy()
        split_names, split_codes = manifest_format.chunk_codes(splits)  # (any string column's codes)
        for code in sorted(range(len(split_names)), key=split_names.__getitem__):
            split = split_names[code]
            members = np.flatnonzero(split_codes == code)
            order = members[np.argsort(key_hashes[members])]  # ties: _break_hash_ties orders them
            order = _break_hash_ties(order, key_hashes, run_rows.column("content_hash"))
            writer = self.writers.get(split)
            if writer is None:
                writer = self.writers[split] = ChunkWriter(
                    self.directory, self.transaction, self.prefix, self.numbers, self.chunk_bytes
                )
            taken = pa.array(order, pa.int64())
            items = run.items.take(taken)
            writer.add_items(items)
            release_freed(items.nbytes)
            del items
            split_column = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(len(order), np.int32)), pa.array([split], pa.string())
            ).cast(pa.string())
            self.written.append(run_rows.take(taken).add_column(3, "split", split_column))
            if self.sources:
                self.taken_from.append((split, order + self.offset))
            self.bar.update(len(order))
        self.offset += run_rows.num_rows


class _WriteBehind:
    """Runs one call at a time in a thread of its own (unless asked to run it inline), while the caller prepares
    the next.

    :func:`write_fragment` writes a run this way while the next is prepared: encoding,
    hashing and the checks against the head on one side, sorting, taking, file writes
    and the fingerprint on the other, both mostly NumPy, Arrow and I/O calls that
    release the GIL, so they overlap on a second core. The records' source (a caller's
    generator, ``ingest``'s ``fn``) is still iterated only by the calling thread. At most
    one call runs: :meth:`submit` first waits for the one before, so at most two runs are
    in memory (the one written, the one prepared). Its error is raised by the next
    :meth:`submit` or at the end of the ``with`` block; however the block ends, no call
    is still running after it (none writes into a fragment the caller removes).
    """

    def __init__(self) -> None:
        self.executor: futures.ThreadPoolExecutor | None = None  # made for the first run written in a thread
        self.pending: futures.Future[None] | None = None

    def submit(self, function: Callable[[_Run], None], argument: _Run, inline: bool = False) -> None:
        """Run ``function(argument)`` once the call before it is done: in the thread, or here where ``inline``."""
        self.wait()
        if inline:
            function(argument)
            return
        if self.executor is None:
            self.executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="litstore-write")
        self.pending = self.executor.submit(function, argument)

    def wait(self) -> None:
        """Wait for the call running, raising its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> _WriteBehind:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        try:
            if kind is None:
                self.wait()
            elif self.pending is not None:
                futures.wait([self.pending])  # its outcome goes unused: the fragment is being removed
        finally:
            if self.executor is not None:
                self.executor.shutdown(wait=True)


def write_chunk_hashes(storage: Storage, chunk: str, hashes: bytes | memoryview) -> str:
    """Write the hashes sidecar (:mod:`litstore.format.chunkhashes`) of the committed ``chunk`` whose items
    have the content ``hashes`` (16 bytes each, in row order); returns its path.

    For chunks written without one (by format 2, or before sidecars existed): the hashes
    must be the ones the manifest committed for the chunk's rows.
    """
    path = layout.chunk_hashes(chunk)
    storage.write(path, chunkhashes.encode(chunk, hashes))
    return path


def discard(storage: Storage, fragment: StagedFragment) -> None:
    """Remove a staged fragment that will never be committed."""
    storage.delete_tree(layout.fragment(fragment.transaction))
    leases.forget(storage, fragment.transaction)


def _rows_of(run: Batch | Moved, key_type: pa.DataType) -> tuple[pa.Table, pa.Array | pa.ChunkedArray]:
    """The run's manifest columns known before it is written (all but split, chunk and row), in run order,
    and each record's split."""
    if isinstance(run, Moved):
        return run.rows.select(["key", "key_hash", "content_hash"]), run.rows.column("split")
    contents = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(run), [None, pa.py_buffer(np.ascontiguousarray(run.contents))]
    )
    columns = {
        "key": run.key_column.cast(key_type),
        "key_hash": pa.array(run.key_hashes, pa.uint64()),
        "content_hash": contents,
    }
    columns.update(run.fields)
    return pa.table(columns), pa.array(run.splits, pa.string())


def _locate(written: list[pa.Table], chunks: dict[str, tuple[ChunkInfo, ...]], key_type: str) -> pa.Table:
    """The manifest rows of everything written: each split's stream laid over its chunks.

    ``chunk`` is dictionary-encoded (:func:`~litstore.format.manifest.held_schema`): a
    few bytes a row instead of a ~64-character name. ``written`` is emptied.
    """
    schema = manifest_format.held_schema(key_type)
    if not written:
        return schema.empty_table()
    for column in [column for column in written[0].schema if column.name not in schema.names]:
        schema = schema.append(column)  # a declared field
    streams: dict[str, list[pa.Table]] = {}
    for table in written:
        streams.setdefault(table.column("split")[0].as_py(), []).append(table)
    written.clear()
    ordered = sorted(streams)
    listed = [chunk for split in ordered for chunk in chunks[split]]
    names = pa.array([chunk.filename for chunk in listed], pa.string())
    first_chunk = 0
    parts = []
    for split in ordered:
        stream = pa.concat_tables(streams.pop(split))  # zero-copy: the runs' tables stay as they are
        counts = np.array([chunk.num_items for chunk in chunks[split]], dtype=np.int64)
        if int(counts.sum()) != stream.num_rows:
            raise IntegrityError(f"{int(counts.sum())} of {stream.num_rows} records of split {split!r} were written")
        numbers = np.arange(first_chunk, first_chunk + len(counts), dtype=np.int32)
        first_chunk += len(counts)
        located = pa.DictionaryArray.from_arrays(pa.array(np.repeat(numbers, counts)), names)
        rows = np.arange(stream.num_rows, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        parts.append(stream.append_column("chunk", located).append_column("row", pa.array(rows, pa.uint32())))
    return pa.concat_tables(parts).select(schema.names).cast(schema)


def _write_hashes(directory: str, prefix: str, chunks: dict[str, tuple[ChunkInfo, ...]], rows: pa.Table) -> None:
    """Write beside each chunk its hashes sidecar, from ``rows`` (:func:`_locate`'s: chunk by chunk, in row order),
    and read each back: it must parse as the sidecar of its chunk."""
    contents = rows.column("content_hash").combine_chunks()
    hashes = memoryview(contents.buffers()[1]).cast("B")[16 * contents.offset : 16 * (contents.offset + len(contents))]
    start = 0
    for chunk in (chunk for split in sorted(chunks) for chunk in chunks[split]):
        name = layout.chunk_hashes(chunk.filename)
        path = os.path.join(directory, name.removeprefix(prefix + "/"))
        with open(path, "wb") as out:
            out.write(chunkhashes.encode(chunk.filename, hashes[16 * start : 16 * (start + chunk.num_items)]))
        with open(path, "rb") as written:
            chunkhashes.parse(chunk.filename, written.read(chunkhashes.size(chunk.num_items) + 1), chunk.num_items)
        start += chunk.num_items
    if 16 * start != len(hashes):
        raise IntegrityError(f"{len(hashes) // 16} records were written, but the chunks hold {start}")


def _break_hash_ties(order: np.ndarray, key_hashes: np.ndarray, contents: pa.ChunkedArray) -> np.ndarray:
    """Order records that share a key hash by content, so equal input gives equal chunks."""
    hashes = key_hashes[order]
    if len(hashes) < 2 or not np.any(hashes[1:] == hashes[:-1]):
        return order
    ordered = sorted(zip(hashes.tolist(), contents.take(pa.array(order)).to_pylist(), order.tolist(), strict=True))
    return np.array([position for _, _, position in ordered], dtype=order.dtype)


def _check_landed(directory: str, prefix: str, rows: pa.Table) -> None:
    """Check that records sit where their rows say, in the local staging ``directory``.

    The writer read each chunk back whole as it was written (:class:`ChunkWriter`: its
    bytes are the ones built); here each chunk's header must hold exactly the records
    its rows say, and a sample of records (every 32nd row and the last of each chunk)
    must sit, intact and with their size field right, exactly where its row says, which
    catches a record written to the wrong place without hashing every record twice.
    Reads only headers and the sampled items, and looks at the rows as columns: memory
    stays bounded by the sample.
    """
    names, chunk_ids = manifest_format.chunk_codes(rows.column("chunk"))
    row_numbers = rows.column("row").to_numpy()
    counts = np.bincount(chunk_ids, minlength=len(names))
    sample = np.flatnonzero((row_numbers % 32 == 0) | (row_numbers == counts[chunk_ids] - 1))
    sample = sample[np.argsort(chunk_ids[sample], kind="stable")]
    sampled_rows = row_numbers[sample].astype(np.int64)
    expected = rows.column("content_hash").take(pa.array(sample)).to_pylist()
    bounds = np.searchsorted(chunk_ids[sample], np.arange(len(names) + 1)).tolist()
    for chunk_id, name in enumerate(names):
        count = int(counts[chunk_id])
        if not count:
            continue  # a name only the dictionary lists
        first, last = bounds[chunk_id], bounds[chunk_id + 1]
        with open(os.path.join(directory, name.removeprefix(prefix + "/")), "rb") as handle:
            if os.fstat(handle.fileno()).st_size < 4 * (count + 2):
                raise IntegrityError(f"chunk {name} is shorter than the header of {count} records")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    offsets = chunk_layout.header_offsets(view[: 4 * (count + 2)], name)
                    if len(offsets) - 1 != count:
                        raise IntegrityError(
                            f"chunk {name} holds {len(offsets) - 1} records, {count} were written to it"
                        )
                    wrong = _wrong_items(view, offsets, sampled_rows[first:last], expected[first:last])
                finally:
                    view.release()
        if wrong is not None:
            key = rows.column("key")[int(sample[first + wrong])].as_py()
            row = int(sampled_rows[first + wrong])
            raise IntegrityError(f"record {key!r} did not land intact in chunk {name} row {row}")


def _wrong_items(view: memoryview, offsets: np.ndarray, rows: np.ndarray, expected: list[bytes]) -> int | None:
    """The position in ``rows`` of the first item whose size field or content hash is not as written, if any."""
    starts, ends = offsets[rows], offsets[rows + 1]
    if len(rows) and int(ends.max()) > len(view):
        return int(np.argmax(ends > len(view)))
    payloads = map(view.__getitem__, map(slice, (starts + chunk_layout.ITEM_HEADER).tolist(), ends.tolist()))
    hashes = list(map(hashing.content_hash, payloads))
    damaged = np.fromiter(map(bytes.__ne__, hashes, expected), dtype=bool, count=len(hashes))
    bad = ~chunk_layout.size_fields_match(view, starts, ends) | damaged
    return int(np.argmax(bad)) if bad.any() else None
