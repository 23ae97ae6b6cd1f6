"""The records of a local chunk, decoded a block of items at a time: the streaming fast path.

litdata's reader hands a dataset one item at a time, through several layers of
Python per item (reader, item loader, batch deserializer), and then litstore decodes
and checks it. For a chunk on the local disk, :class:`DecodedChunk` does that work a
block of :data:`BLOCK_ITEMS` neighbouring items at a time instead: the first request
for an item checks its whole block against the committed content hashes and decodes
it in one MessagePack pass, so serving the block's other items is a list lookup.
Each record is handed out once and then forgotten, so memory holds about a block of
decoded records, not a chunk's.

Blocks, not whole chunks: a DataLoader worker often reads only part of a chunk
(litdata splits chunks between workers at item boundaries), and a whole-chunk pass
stalls the worker for the time of a chunk (tens of milliseconds for a 64 MiB chunk),
longer than the few batches the loader keeps ready, so the training loop waits. A
block costs about a millisecond, and only blocks that are read are decoded.

The check and the decode are :mod:`litstore.read.checked`'s (:func:`~litstore.read.checked.mismatched`
for a block's hashes, a :class:`~litstore.read.checked.RecordCheck` to name damaged
records), so a damaged item raises the same :class:`~litstore.errors.DamagedRecordError`
as on every other read path. A damaged item does not stop the others: its error is
raised when it is asked for (an item that does not decode with its block is decoded
on its own then), exactly as on the per-item path.
"""

from __future__ import annotations

import mmap
from typing import Any, Final

import numpy as np

from litstore._litdata import chunk as chunk_layout
from litstore.errors import IntegrityError
from litstore.format import codec
from litstore.read.checked import RecordCheck, mismatched

#: Items checked and decoded together. Small enough that a block takes about a
#: millisecond (a loader keeps only ``prefetch_factor`` batches ready per worker),
#: big enough that the per-block set-up is lost in the per-item work.
BLOCK_ITEMS: Final = 256


class _Marker:
    """A value no record can be: stands in the list of records for an item not yet decoded."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_DAMAGED: Final = _Marker("bytes not the committed ones")
_PENDING: Final = _Marker("not decoded yet")
_ALONE: Final = _Marker("decoded on its own when asked for")


class DecodedChunk:
    """Every live item of one chunk, checked (if ``expected`` is given) and decoded block by block as it is asked for.

    Items are numbered from 0 in row order. Where ``live`` is given (a format-4 chunk
    with dead rows), they are its live rows only: item ``i`` is row ``live[i]``, blocks
    are of live items, and a dead row is never checked, decoded or handed out.

    Args:
        data: the whole chunk, mapped by its storage backend (which refuses links and
            anything but regular files).
        name: the chunk's name, for error messages.
        expected: the committed content hashes of its rows (all of them, dead ones
            included), 16 bytes each, in row order; ``None`` to skip the check.
        check: names damaged items (their version and keys); default: by chunk and row alone.
        live: the live rows, increasing and below the chunk's row count; ``None``: every row.

    Raises:
        IntegrityError: the chunk's header is damaged, or it holds another number of
            items than were committed.
    """

    def __init__(
        self,
        data: mmap.mmap | bytes,
        name: str,
        expected: bytes | memoryview | None,
        check: RecordCheck | None = None,
        live: np.ndarray | None = None,
    ) -> None:
        self.name = name
        # As stored (uint32, a view of the mapped chunk, no copy): each block widens its own slice.
        self._offsets = chunk_layout.stored_item_offsets(data, name)
        self._view = memoryview(data)
        count = len(self._offsets) - 1
        if expected is not None and len(expected) != 16 * count:
            raise IntegrityError(f"chunk {name} holds {count} items; {len(expected) // 16} were committed")
        if live is not None and len(live) and int(live[-1]) >= count:
            raise IntegrityError(f"chunk {name} holds {count} items; row {int(live[-1])} is said to be live")
        self._expected = None if expected is None else np.frombuffer(expected, np.uint8).reshape(-1, 16)
        self._check = check if check is not None else RecordCheck(None)
        self._rows = None if live is None else np.asarray(live)
        self._items = count if live is None else len(live)
        if self._rows is not None:
            # Where each live item lies, and the runs of live items lying back to back (a new run after each
            # dead row), for the whole chunk at once and as the offsets are stored (uint32): a block is then
            # slices of these, and reads its runs' bytes only (see codec.decode_framed_runs).
            starts, ends = self._offsets[self._rows], self._offsets[1:][self._rows]
            heads = np.flatnonzero(starts[1:] != ends[:-1]) + 1  # the live items that begin a run, but the first
            self._starts, self._ends, self._heads = starts, ends, heads
            self._run_firsts, self._run_lasts = starts[heads], ends[heads - 1]  # a run's first byte, the last one's end
            # Where each live item ends in the live items' bytes read back to back (a block's are slices of these).
            self._packed = np.zeros(len(starts) + 1, dtype=np.int64)
            np.cumsum(ends - starts, out=self._packed[1:])
        # The records of the blocks decoded and not yet handed out whole, and how many of each are left.
        self._blocks: dict[int, list[Any]] = {}
        self._left: dict[int, int] = {}

    def __len__(self) -> int:
        return self._items

    @property
    def row_count(self) -> int:
        """The rows the chunk holds, dead ones included (its header's item count)."""
        return len(self._offsets) - 1

    def row(self, item: int) -> int:
        """The row of item ``item``."""
        return item if self._rows is None else int(self._rows[item])

    def payload(self, row: int) -> memoryview:
        """The stored bytes of row ``row``."""
        return chunk_layout.item_payload(self._view, self._offsets, row)

    def take(self, item: int) -> Any:
        """The decoded record of item ``item``, checked against its committed content hash (if one was given).

        The chunk forgets the record as it hands it out (streaming asks for each item
        once an epoch; asked again, its block is decoded again), so a worker holds only
        the decoded records of its blocks that it has not streamed yet, and the memory
        of streamed ones is reused: holding a whole chunk's records (a 64 MiB chunk
        decodes to about 80 MiB of Python objects) costs fresh pages for every chunk.

        Raises:
            DamagedRecordError: the item does not match its committed content hash, or
                is not one canonical record.
        """
        if not 0 <= item < self._items:
            raise IndexError(f"chunk {self.name} has {self._items} items; item {item} was asked for")
        block, place = divmod(item, BLOCK_ITEMS)
        records = self._blocks.get(block)
        if records is None or records[place] is _PENDING:
            records = self._decode_block(block)
        record = records[place]
        records[place] = _PENDING
        self._left[block] -= 1
        if not self._left[block]:  # every record of the block handed out: forget the block
            del self._blocks[block], self._left[block]
        if record is _DAMAGED:
            raise self._check.mismatch(self.name, np.array([self.row(item)]))
        if record is _ALONE:
            row = self.row(item)
            expected = None if self._expected is None else self._expected[row].tobytes()
            return self._check.record(self.name, row, self.payload(row), expected)
        return record

    def _decode_block(self, block: int) -> list[Any]:
        """Check and decode the items of ``block``: its list of records, kept until each is handed out."""
        first = block * BLOCK_ITEMS
        last = min(first + BLOCK_ITEMS, self._items)
        if self._rows is None:
            offsets = self._offsets[first : last + 1].astype(np.int64)
            starts, ends = offsets[:-1], offsets[1:]
            expected = None if self._expected is None else self._expected[first:last]
            decoded = codec.decode_framed(self._view, offsets)
        else:  # live rows only: the runs of them are read, the dead rows between them never
            starts, ends = self._starts[first:last], self._ends[first:last]
            expected = None if self._expected is None else self._expected.take(self._rows[first:last], axis=0)
            low, high = self._heads.searchsorted((first + 1, last)).tolist()  # the runs that begin inside the block
            firsts = [int(starts[0]), *self._run_firsts[low:high].tolist()]
            lasts = [*self._run_lasts[low:high].tolist(), int(ends[-1])]
            packed = self._packed[first : last + 1]
            decoded = codec.decode_framed_runs(self._view, firsts, lasts, (packed[1:] - packed[0]).tolist())
        damaged: list[int] = []
        if expected is not None:
            payloads = list(
                map(self._view.__getitem__, map(slice, (starts + chunk_layout.ITEM_HEADER).tolist(), ends.tolist()))
            )
            damaged = mismatched(payloads, expected).tolist()
        records = decoded if decoded is not None else [_ALONE] * (last - first)
        for place in damaged:
            records[place] = _DAMAGED
        self._blocks[block], self._left[block] = records, len(records)
        return records
