"""Reading records' bytes out of chunk files, memory-mapped or by ranged reads, cached.

A :class:`ChunkCache` keeps the most recently used chunks open: a chunk the backend
can memory-map costs a slice per lookup; of any other chunk only the item offsets
are kept, and each lookup reads just the bytes of its item (one ranged GET).
Chunks are immutable once committed, so a cached chunk never goes stale.
It hands out stored bytes only: checking them against their committed content hashes
and decoding them is :mod:`litstore.read.checked`'s. A chunk file that is gone raises
:class:`~litstore.errors.IntegrityError` naming it.
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from litstore._litdata import chunk as layout
from litstore.errors import IntegrityError, MissingFileError
from litstore.format import columnar
from litstore.storage import LocalInput, Storage

# The first ranged read of a remote chunk: enough for the header of ~16,000 items.
_HEADER_GUESS = 64 * 1024
# Remote records closer than this are fetched with one GET (a few wasted bytes are
# cheaper than a round trip); at most this many GETs at once.
_MERGE_GAP = 4 * 1024
_CONCURRENT_GETS = 8
#: Up to this many items of a local chunk not open are read by pread rather than through a mapping
#: (random reads: 4,096 preads of a few dozen bytes take about 4 ms).
_READ_ROWS = 4096


def confirm_item_count(storage: Storage, name: str, num_items: int) -> None:
    """Check that chunk file ``name`` holds the ``num_items`` items its version lists, before anything is sized
    by that count (a chunk's dead and live rows, a row array of a chunk with none dead).

    The count comes from a commit record or a split index, which a hostile writer makes
    as easily as the chunk: a consistent claim of 2^30 items in a 4 GiB chunk would have
    a reader allocate gigabytes for a chunk of a few bytes. Two words are read: the
    header's item count, and the last of its item offsets, which lies past every other
    offset, so a file that has it is at least 4 bytes an item long.

    Raises:
        IntegrityError: the chunk is missing, says another count, or is too short to hold it.
    """
    last = 4 * (num_items + 1)  # the header: the count, then num_items + 1 offsets
    try:
        count, end = storage.read_ranges(name, [(0, 4), (last, last + 4)])
    except MissingFileError as exc:
        raise IntegrityError(f"chunk {name} is missing: store.verify() lists what is wrong") from exc
    if len(end) != 4 or len(count) != 4 or int.from_bytes(count, "little") != num_items:
        raise IntegrityError(
            f"chunk {name} does not hold the {num_items} items its version lists (its header says "
            f"{int.from_bytes(count, 'little') if len(count) == 4 else 'nothing'}, or it is too short): "
            "store.verify() lists what is wrong"
        )


class _OpenChunk:
    __slots__ = ("checked", "data", "offsets", "view")

    def __init__(self, data: mmap.mmap | bytes | None, offsets: np.ndarray, checked: bool = True) -> None:
        self.data = data  # None when items are read by range
        self.offsets = offsets  # uint32 as the header stores them (never widened: see _litdata.chunk)
        self.view = None if data is None else memoryview(data)
        # Whether every offset is checked; if not (a mapped chunk), each read checks the bounds of its rows.
        self.checked = checked


class ChunkCache:
    """Open chunks of one store, least recently used closed first.

    Not thread-safe; each thread or process should use its own cache.
    """

    def __init__(self, storage: Storage, capacity: int = 256) -> None:
        self._storage = storage
        self._capacity = capacity
        self._open: OrderedDict[str, _OpenChunk] = OrderedDict()
        self._reads_locally = isinstance(storage.litdata_input(), LocalInput)  # a local file system

    def _chunk(self, name: str) -> _OpenChunk:
        chunk = self._open.get(name)
        if chunk is not None:
            self._open.move_to_end(name)
            return chunk
        chunk = self._load(name)
        self._open[name] = chunk
        if len(self._open) > self._capacity:
            self._open.popitem(last=False)
        return chunk

    def holds(self, name: str) -> bool:
        """Whether chunk ``name`` is open in this cache."""
        return name in self._open

    def release(self, name: str) -> None:
        """Close chunk ``name`` (if open): a walk through every chunk keeps only the chunk it reads mapped.

        Its mapping is unmapped once nothing handed out still refers to it.
        """
        self._open.pop(name, None)

    def _load(self, name: str) -> _OpenChunk:
        try:
            return self._open_chunk(name)
        except MissingFileError as exc:
            raise IntegrityError(f"chunk {name}, committed in this version, is missing from the store") from exc

    def _open_chunk(self, name: str) -> _OpenChunk:
        data = self._storage.mapped(name)
        if data is not None:
            if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_RANDOM"):
                # Lookups read a few items anywhere in the chunk: readahead would read (and map) ~128 KiB
                # around each one, which made 10,000 lookups in a 100M-record store map 2 GB of chunks.
                data.madvise(mmap.MADV_RANDOM)
            # The header's ends only: a lookup checks the offsets of the rows it reads, not all of them
            # (a 64 MiB chunk of small records has half a million; checking them all cost each lookup of a
            # cold chunk 3 ms and 2 MiB of mapped header).
            return _OpenChunk(data, layout.unchecked_item_offsets(data, name), checked=False)
        head = self._storage.read_range(name, 0, _HEADER_GUESS)
        header_size = layout.header_size(head, name)
        if header_size > len(head):
            head += self._storage.read_range(name, len(head), header_size)
        return _OpenChunk(None, layout.stored_header_offsets(head, name))

    def _check_row(self, name: str, chunk: _OpenChunk, rows: np.ndarray) -> None:
        if len(rows) and (rows.min() < 0 or rows.max() >= len(chunk.offsets) - 1):
            raise IntegrityError(
                f"chunk {name} has {len(chunk.offsets) - 1} items; row {int(rows.max())} was asked for"
            )
        if not chunk.checked and len(rows):
            layout.check_item_bounds(chunk.offsets, rows, name)

    def _whole(self, name: str) -> _OpenChunk:
        """Chunk ``name`` with every offset of its header checked (for reads of many items at once)."""
        chunk = self._chunk(name)
        if not chunk.checked:
            assert chunk.data is not None
            layout.stored_item_offsets(chunk.data, name)
            chunk.checked = True
        return chunk

    def read_through(self, name: str) -> None:
        """Say that chunk ``name`` is about to be read front to back (a walk): read ahead, check its header once."""
        chunk = self._whole(name)
        if isinstance(chunk.data, mmap.mmap) and hasattr(mmap, "MADV_SEQUENTIAL"):
            chunk.data.madvise(mmap.MADV_SEQUENTIAL)

    def payload(self, name: str, row: int) -> memoryview:
        """The stored bytes (canonical encoding) of item ``row`` of chunk ``name``."""
        chunk = self._chunk(name)
        if chunk.view is None or not chunk.checked or not 0 <= row < len(chunk.offsets) - 1:
            return memoryview(self.payloads(name, np.array([row]))[0])
        offsets = chunk.offsets
        return chunk.view[int(offsets[row]) + layout.ITEM_HEADER : int(offsets[row + 1])]

    def payloads(self, name: str, rows: np.ndarray | None = None) -> list[bytes] | list[memoryview]:
        """The stored bytes of items ``rows`` (default: every item) of chunk ``name``, in that order.

        Up to 4,096 items of a local chunk that is not open are read (pread), not mapped: a mapped
        page of a file the kernel holds in large folios maps up to 2 MiB into the process,
        so 10,000 lookups in a 16M-record store had mapped every chunk (1.2 GB resident).
        """
        if rows is not None and len(rows) <= _READ_ROWS and name not in self._open and self._reads_locally:
            return self._read_rows(name, np.asarray(rows, dtype=np.int64))
        chunk = self._chunk(name)
        rows = np.arange(len(chunk.offsets) - 1) if rows is None else np.asarray(rows, dtype=np.int64)
        self._check_row(name, chunk, rows)
        starts, ends = layout.payload_bounds(chunk.offsets, rows)
        if chunk.view is None:
            return self._fetch(name, starts.tolist(), ends.tolist())
        view = chunk.view
        return [view[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]

    def _read_rows(self, name: str, rows: np.ndarray) -> list[memoryview]:
        """Items ``rows`` of local chunk ``name`` by two reads: their header offsets, then their payloads.

        Raises:
            IntegrityError: the chunk is missing, a row is past its items, or their offsets are damaged.
        """
        if not len(rows):
            return []
        header = layout.ITEM_HEADER
        try:
            read = self._storage.read_ranges(name, [(0, 8), *((4 + 4 * row, 12 + 4 * row) for row in rows.tolist())])
        except MissingFileError as exc:
            raise IntegrityError(f"chunk {name}, committed in this version, is missing from the store") from exc
        if len(read[0]) < 8:
            raise IntegrityError(f"chunk {name} is {len(read[0])} bytes long, too short for a header")
        count, first = (int(value) for value in np.frombuffer(read[0], "<u4"))
        if rows.min() < 0 or rows.max() >= count:
            raise IntegrityError(f"chunk {name} has {count} items; row {int(rows.max())} was asked for")
        if first != 4 * (count + 2) or any(len(bounds) < 8 for bounds in read[1:]):
            raise IntegrityError(f"chunk {name} has a damaged header")
        bounds = np.frombuffer(b"".join(read[1:]), "<u4").reshape(-1, 2).astype(np.int64)
        starts, ends = bounds[:, 0] + header, bounds[:, 1]
        if (bounds[:, 0] < first).any() or (ends < starts).any():
            raise IntegrityError(f"chunk {name} has a damaged header")
        # What is read is allocated first: the distinct rows' items, which in a sound chunk do not overlap, must
        # fit in the file, so damaged offsets cannot make this read gigabytes.
        _, picked, back = np.unique(rows, return_index=True, return_inverse=True)
        size = self._size(name)
        if (ends > size).any() or int((ends[picked] - starts[picked]).sum()) > size:
            raise IntegrityError(f"chunk {name} has a damaged header (an item ends past the chunk's end)")
        spans = list(zip(starts[picked].tolist(), ends[picked].tolist(), strict=True))
        payloads = self._storage.read_ranges(name, spans)
        if any(len(payload) != end - start for payload, (start, end) in zip(payloads, spans, strict=True)):
            raise IntegrityError(f"chunk {name} has a damaged header (an item ends past the chunk's end)")
        return [memoryview(payloads[position]) for position in back.tolist()]

    def _size(self, name: str) -> int:
        """The byte size of local chunk ``name`` (its link, never followed: reads refuse links)."""
        path = self._storage.local_path(name)
        assert path is not None  # only local chunks are read by rows
        try:
            return os.lstat(path).st_size
        except FileNotFoundError as exc:
            raise IntegrityError(f"chunk {name}, committed in this version, is missing from the store") from exc

    def items(self, name: str, rows: np.ndarray) -> pa.LargeBinaryArray:
        """Items ``rows`` of chunk ``name`` as the chunk holds them (each payload after its 4-byte size), in order.

        For moving records between chunks: a mapped chunk's items are taken in one bulk
        copy (its offsets were checked against its length when it was opened); a remote
        chunk's payloads, or items whose size field does not match their offsets, are
        framed again from the payloads.
        """
        chunk = self._whole(name)
        rows = np.asarray(rows, dtype=np.int64)
        self._check_row(name, chunk, rows)
        if chunk.view is not None:
            whole = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(),
                len(chunk.offsets) - 1,
                [None, pa.py_buffer(chunk.offsets.astype(np.int64)), pa.py_buffer(chunk.view)],
            )
            taken: pa.LargeBinaryArray = whole.take(pa.array(rows))
            del whole  # the chunk's mapping is no longer referenced by Arrow
            ends = columnar.value_offsets(taken)
            if layout.size_fields_match(taken.buffers()[2] or b"", ends[:-1], ends[1:]).all():
                return taken
        payloads = [bytes(payload) for payload in self.payloads(name, rows)]
        return columnar.sized(pa.array(payloads, pa.large_binary()))

    def _fetch(self, name: str, starts: list[int], ends: list[int]) -> list[bytes]:
        """Byte ranges of a remote chunk: nearby ranges merged, the GETs run concurrently.

        Ranges closer than ``_MERGE_GAP`` are read as one, so neighbouring records cost
        one GET, while records far apart are read without the bytes between them.
        """
        header = layout.ITEM_HEADER
        order = sorted(range(len(starts)), key=starts.__getitem__)
        spans: list[list[int]] = []  # [start, end] of each GET
        for position in order:
            if spans and starts[position] - header - spans[-1][1] <= _MERGE_GAP:
                spans[-1][1] = max(spans[-1][1], ends[position])
            else:
                spans.append([starts[position] - header, ends[position]])
        if not spans:
            return []
        if len(spans) == 1:  # one GET: no pool (starting one cost a lookup 1-2 ms on memory storage)
            blobs = [self._storage.read_range(name, spans[0][0], spans[0][1])]
        else:
            with ThreadPoolExecutor(max_workers=min(_CONCURRENT_GETS, len(spans))) as pool:
                blobs = list(pool.map(lambda span: self._storage.read_range(name, span[0], span[1]), spans))
        payloads: list[bytes] = [b""] * len(starts)
        span_index = 0
        for position in order:
            while ends[position] > spans[span_index][1]:
                span_index += 1
            base = spans[span_index][0]
            blob = blobs[span_index]
            if len(blob) < ends[position] - base:
                raise IntegrityError(f"chunk {name} is shorter than its header says")
            payloads[position] = blob[starts[position] - base : ends[position] - base]
        return payloads

    def offsets(self, name: str) -> np.ndarray:
        return self._whole(name).offsets
