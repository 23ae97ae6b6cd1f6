"""What the chunks of a version hold, as ``verify`` compares it: one pair hash per stored item.

For each item of a listed chunk, :func:`read_part` computes the item's content hash
(xxh3-128 of its payload), finds its key (:func:`litstore.format.recordscan.scan_keys`
for flat records, :func:`litstore.format.codec.decode` for the others, exactly as
reading it would) and returns the item's fingerprint term, xxh3-128 of key bytes and
content hash: 16 bytes and a flag per item, whatever the record's size. The manifest
row that lists the item must have the same pair (:mod:`litstore.ops.verify_listed`).

A chunk is read in parts of at most :data:`PART_ITEMS` items, so what one part holds
beside the chunk's bytes stays small; parts are independent, so
:func:`read_parts` can hand them to worker processes (``num_workers``). Each worker
maps or reads the chunk itself: only the pair hashes travel back.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import queue
import threading
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from litstore._litdata import chunk as chunk_layout
from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, MissingFileError
from litstore.format import codec, hashing, recordscan
from litstore.ops import verify_listed
from litstore.storage import Storage

#: Items of a chunk read as one part (about 1 MiB of pair hashes, and of the arrays a scan uses).
PART_ITEMS = 1 << 16


@dataclass(frozen=True)
class Part:
    """Items ``[start, stop)`` of one listed chunk (``stop`` ``None``: to its end); the part at 0 checks the chunk."""

    listing: int  # the chunk's number among the listed chunks
    chunk: ChunkInfo
    start: int = 0
    stop: int | None = None


@dataclass(frozen=True)
class StoredPart:
    """What :func:`read_part` found.

    Attributes:
        part: what was read.
        found: whether the chunk file exists.
        items: how many items the chunk holds (``-1``: its layout is damaged).
        problems: what is wrong with the chunk as a whole (checked by the part that starts it).
        pairs: ``(n, 16)`` pair hash of each item read (zeros where ``keyed`` is false).
        keyed: whether each item decodes to a record with a key of the store's type.
        contents: ``(n, 16)`` content hash of each item read.
    """

    part: Part
    found: bool
    items: int
    problems: tuple[str, ...]
    pairs: np.ndarray
    keyed: np.ndarray
    contents: np.ndarray


def _contents(storage: Storage, name: str) -> bytes | mmap.mmap:
    mapped = storage.mapped(name)
    return storage.read(name) if mapped is None else mapped


def read_part(storage: Storage, part: Part, key_field: str, key_type: str) -> StoredPart:
    """Read ``part`` and hash its items (see the module docstring).

    Raises:
        StorageError: the chunk cannot be read (other than not existing).
    """
    chunk = part.chunk
    nothing = (np.zeros((0, 16), np.uint8), np.zeros(0, bool), np.zeros((0, 16), np.uint8))
    try:
        data = _contents(storage, chunk.filename)
    except MissingFileError:
        return StoredPart(part, False, 0, (), *nothing)
    whole = part.start == 0
    problems = []
    if whole and len(data) != chunk.num_bytes:
        problems.append(f"{len(data)} bytes, the index says {chunk.num_bytes}")
    try:
        offsets = chunk_layout.item_offsets(data, chunk.filename)
    except IntegrityError as exc:
        return StoredPart(part, True, -1, (*problems, str(exc)) if whole else (), *nothing)
    items = len(offsets) - 1
    if whole and items != chunk.num_items:
        problems.append(f"{items} items, the index says {chunk.num_items}")
    stop = items if part.stop is None else min(part.stop, items)
    start = min(part.start, stop)
    pairs, keyed, contents = _pairs(data, offsets[start : stop + 1], key_field, key_type)
    return StoredPart(part, True, items, tuple(problems), pairs, keyed, contents)


def read_chunk(storage: Storage, listing: int, chunk: ChunkInfo, key_field: str, key_type: str) -> Iterator[StoredPart]:
    """:func:`read_part` of each part of :data:`PART_ITEMS` items of a whole chunk, reading it once (the last
    part's ``stop`` is ``None``): what one part holds stays small whatever the chunk's size.

    Raises:
        StorageError: the chunk cannot be read (other than not existing).
    """
    whole = Part(listing, chunk)
    try:
        data = _contents(storage, chunk.filename)
    except MissingFileError:
        yield StoredPart(whole, False, 0, (), *_nothing())
        return
    problems = []
    if len(data) != chunk.num_bytes:
        problems.append(f"{len(data)} bytes, the index says {chunk.num_bytes}")
    try:
        offsets = chunk_layout.item_offsets(data, chunk.filename)
    except IntegrityError as exc:
        yield StoredPart(whole, True, -1, (*problems, str(exc)), *_nothing())
        return
    items = len(offsets) - 1
    if items != chunk.num_items:
        problems.append(f"{items} items, the index says {chunk.num_items}")
    for start in range(0, max(items, 1), PART_ITEMS):
        stop = start + PART_ITEMS if start + PART_ITEMS < items else None
        end = items if stop is None else stop
        pairs, keyed, contents = _pairs(data, offsets[start : end + 1], key_field, key_type)
        found = tuple(problems) if start == 0 else ()
        yield StoredPart(Part(listing, chunk, start, stop), True, items, found, pairs, keyed, contents)


def _nothing() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((0, 16), np.uint8), np.zeros(0, bool), np.zeros((0, 16), np.uint8)


#: Parts :func:`read_ahead` holds ready (about 17 MB of results).
AHEAD = 8


def read_ahead(parts: Iterator[StoredPart], executor: ThreadPoolExecutor) -> Generator[StoredPart, None, None]:
    """``parts``, made by a task of ``executor`` at most :data:`AHEAD` ahead of the one asked for, so that what
    the caller does with each (matching) runs beside the reading of the next (numpy steps release the GIL).
    Closing the iterator stops the task; an error it met is raised here, where its part would have come.
    """
    ready: queue.Queue[tuple[StoredPart | None, BaseException | None]] = queue.Queue(AHEAD)
    stop = threading.Event()

    def offer(item: tuple[StoredPart | None, BaseException | None]) -> None:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                ready.put(item, timeout=0.05)
                return

    def produce() -> None:
        try:
            for part in parts:
                offer((part, None))
                if stop.is_set():
                    return
            offer((None, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            offer((None, exc))

    task = executor.submit(produce)
    try:
        while True:
            part, error = ready.get()
            if error is not None:
                raise error
            if part is None:
                return
            yield part
    finally:
        stop.set()
        task.result()  # (it stops within one part)


def _pairs(
    data: bytes | mmap.mmap, offsets: np.ndarray, key_field: str, key_type: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair hash of each item whose framing ``offsets`` gives, whether it has a key, and its content hash;
    :data:`PART_ITEMS` items at a time."""
    parts = [
        _part_pairs(data, offsets[start : start + PART_ITEMS + 1], key_field, key_type)
        for start in range(0, len(offsets) - 1, PART_ITEMS)
    ]
    if not parts:
        return np.zeros((0, 16), np.uint8), np.zeros(0, bool), np.zeros((0, 16), np.uint8)
    return tuple(np.concatenate(column) for column in zip(*parts))  # type: ignore[return-value]


def _part_pairs(
    data: bytes | mmap.mmap, offsets: np.ndarray, key_field: str, key_type: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    count = len(offsets) - 1
    pairs = np.zeros((count, 16), np.uint8)
    buffer = np.frombuffer(data, np.uint8)
    starts, ends = offsets[:-1] + chunk_layout.ITEM_HEADER, offsets[1:]
    sized = chunk_layout.size_fields_match(data, offsets[:-1], ends)
    items = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]
    )
    contents = hashing.content_hash_array(items, skip=chunk_layout.ITEM_HEADER)
    scan = recordscan.scan_keys(buffer, starts, ends, key_field, key_type)
    keyed = sized & scan.valid
    decode = sized & ~scan.scanned  # records the scan does not read: decoded as a reader would
    fast = np.flatnonzero(keyed)
    strided = _strided_keys(buffer, scan, fast) if key_type == "str" else None
    if strided is not None:
        pairs[fast] = hashing.fixed_pair_hashes(strided, _fixed(contents[fast]))
        fast = fast[:0]
    if len(fast):
        if key_type == "str":
            keys = _gathered(buffer, scan.starts[fast], scan.lengths[fast])
            try:
                keys = keys.cast(pa.large_string())
            except pa.ArrowInvalid:  # a key that is not UTF-8, or holds a lone surrogate: decode those records
                keyed[fast] = False
                decode[fast] = True
                fast = fast[:0]
        else:
            keys = verify_listed.arrow_int64(scan.values[fast])
    if len(fast):
        pairs[fast] = hashing.pair_hashes(keys, _fixed(contents[fast]))
    slow: dict[int, str | int] = {}
    for row in np.flatnonzero(decode).tolist():
        key = _decoded_key(data, int(starts[row]), int(ends[row]), key_field, key_type)
        if key is not None:
            slow[row] = key
    if slow:
        rows = np.array(list(slow), np.int64)
        key_array = pa.array(list(slow.values()), pa.large_string() if key_type == "str" else pa.int64())
        pairs[rows] = hashing.pair_hashes(key_array, _fixed(contents[rows]))
        keyed[rows] = True
    return pairs, keyed, contents


def _strided_keys(buffer: np.ndarray, scan: recordscan.ScannedKeys, rows: np.ndarray) -> np.ndarray | None:
    """The text keys of records ``rows`` as the rows of an ``(n, width)`` view of ``buffer``, when they are all of
    one width at one stride (records of one shape in a chunk) and ASCII (so valid UTF-8); ``None`` otherwise."""
    if len(rows) < 2:
        return None
    starts, lengths = scan.starts[rows], scan.lengths[rows]
    steps = np.diff(starts)
    if not (lengths == lengths[0]).all() or not (steps == steps[0]).all() or steps[0] < lengths[0]:
        return None
    width, stride = int(lengths[0]), int(steps[0])
    keys = np.lib.stride_tricks.as_strided(buffer[int(starts[0]) :], (len(rows), width), (stride, 1), writeable=False)
    return keys if not width or int(keys.max()) < 0x80 else None


def _gathered(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.LargeBinaryArray:
    """The byte strings ``buffer[starts[i]:starts[i] + lengths[i]]`` as one Arrow array (one copy, in numpy)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
    values = buffer[index]
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )


def _fixed(contents: np.ndarray) -> pa.FixedSizeBinaryArray:
    raw = np.ascontiguousarray(contents)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(raw), [None, pa.py_buffer(raw)])


def _decoded_key(data: bytes | mmap.mmap, start: int, end: int, key_field: str, key_type: str) -> str | int | None:
    """The key of the record in ``data[start:end]``, decoded as a reader would; ``None`` if it has none."""
    try:
        record = codec.decode(memoryview(data)[start:end])
    except IntegrityError:
        return None
    key = record.get(key_field) if isinstance(record, dict) else None
    return key if hashing.is_key(key, key_type) else None


def decoded_keys(storage: Storage, chunk: ChunkInfo, rows: Sequence[int], key_field: str, key_type: str) -> list[Any]:
    """The key of each item ``rows`` of ``chunk`` (``None``: it has none): for the few items a report names."""
    try:
        data = _contents(storage, chunk.filename)
    except MissingFileError:
        return [None] * len(rows)
    try:
        offsets = chunk_layout.item_offsets(data, chunk.filename)
        keys: list[Any] = []
        for row in rows:
            if not chunk_layout.item_size_matches(data, offsets, row):
                keys.append(None)
                continue
            keys.append(_decoded_key(data, int(offsets[row]) + 4, int(offsets[row + 1]), key_field, key_type))
        return keys
    except IntegrityError:
        return [None] * len(rows)


def parts_of(chunks: Sequence[ChunkInfo], split: bool) -> list[Part]:
    """The parts ``chunks`` are read in: whole chunks, or (``split``) ranges of at most :data:`PART_ITEMS` items as
    the index counts them (the last part of each runs to the chunk's end, whatever it holds)."""
    parts = []
    for listing, chunk in enumerate(chunks):
        if not split or chunk.num_items <= PART_ITEMS:
            parts.append(Part(listing, chunk))
            continue
        starts = list(range(0, chunk.num_items, PART_ITEMS))
        for start, stop in itertools.zip_longest(starts, starts[1:]):
            parts.append(Part(listing, chunk, start, stop))
    return parts


def read_in_thread(
    storage: Storage, chunks: Sequence[ChunkInfo], key_field: str, key_type: str, executor: ThreadPoolExecutor
) -> Generator[StoredPart, None, None]:
    """Every part of ``chunks`` (numbered by their place in it), each chunk read whole by :func:`read_chunk` in
    ``executor``'s thread, at most :data:`AHEAD` parts ahead (:func:`read_ahead`; close it to stop the thread)."""
    chunked = (
        part
        for listing, chunk in enumerate(chunks)
        for part in read_chunk(storage, listing, chunk, key_field, key_type)
    )
    return read_ahead(chunked, executor)


def read_in_workers(
    storage: Storage, chunks: Sequence[ChunkInfo], key_field: str, key_type: str, pool: Executor
) -> Iterator[StoredPart]:
    """Every part of ``chunks`` read by ``pool``'s worker processes (:func:`read_parts`): ranges of
    :data:`PART_ITEMS` items of a local store's chunks (each worker opens the file), whole chunks elsewhere."""
    split = bool(chunks) and storage.local_path(chunks[0].filename) is not None
    return read_parts(storage, parts_of(chunks, split), key_field, key_type, pool)


#: Parts handed to worker processes ahead of the one ``verify`` waits for (what they return is 33 bytes an item).
WINDOW = 32


def worker_pool(num_workers: int) -> ProcessPoolExecutor:
    """``num_workers`` processes, forked from the fork server ingest starts (litstore is imported there once)."""
    from litstore.ingest import _context

    return ProcessPoolExecutor(max_workers=num_workers, mp_context=_context())


def read_parts(
    storage: Storage,
    parts: Sequence[Part],
    key_field: str,
    key_type: str,
    pool: Executor | None,
    window: int = WINDOW,
) -> Iterator[StoredPart]:
    """:func:`read_part` of each of ``parts``, in order: here as they are asked for, or in ``pool``.

    With a pool, the first ``window`` parts are handed out at once, before the first
    is asked for: the workers read chunks while the caller reads the manifest.
    """
    if pool is None:
        return (read_part(storage, part, key_field, key_type) for part in parts)
    pending = deque(pool.submit(read_part, storage, part, key_field, key_type) for part in parts[:window])
    return _collected(pool, pending, parts[window:], storage, key_field, key_type)


def _collected(
    pool: Executor,
    pending: deque[Future[StoredPart]],
    rest: Sequence[Part],
    storage: Storage,
    key_field: str,
    key_type: str,
) -> Iterator[StoredPart]:
    waiting = iter(rest)
    while pending:
        done = pending.popleft()
        following = next(waiting, None)
        if following is not None:
            pending.append(pool.submit(read_part, storage, following, key_field, key_type))
        yield done.result()
