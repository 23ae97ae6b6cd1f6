"""The byte layout of a litdata chunk file: the one place that knows the item framing.

A chunk file, as litdata 0.2.76 writes it for litstore's records (all integers
little-endian uint32)::

    num_items | offsets[num_items + 1] | item 0 | item 1 | ...
    item = size | payload            (one ``bytes`` leaf: size == len(payload))

``offsets[i]`` is the absolute byte position of item ``i`` and ``offsets[-1]`` is the
file size. litstore reads items straight from this layout (a memory-mapped slice or
a ranged read), which is what makes a lookup cost microseconds instead of litdata's
milliseconds; ``tests/_litdata/test_litdata_facts.py`` checks that litdata reads the same
bytes back. This module imports numpy only, never litdata.
"""

from __future__ import annotations

import mmap

import numpy as np

from litstore.errors import IntegrityError

_U32 = np.dtype("<u4")

#: Bytes in front of each item's payload (its leaf size).
ITEM_HEADER = 4
# Offsets checked at once by stored_header_offsets: 128 KiB of gaps, which stay in cache.
_CHECK_BLOCK = 1 << 15

Buffer = bytes | memoryview | mmap.mmap


def header_size(head: Buffer, name: str) -> int:
    """The byte length of a chunk's header, given at least its first 4 bytes."""
    if len(head) < 4:
        raise IntegrityError(f"chunk {name} is {len(head)} bytes long, too short for a header")
    return 4 * (int(np.frombuffer(head, _U32, count=1)[0]) + 2)


def item_offsets(chunk: Buffer, name: str) -> np.ndarray:
    """The ``num_items + 1`` item offsets of a whole chunk (int64), checked against its length.

    Raises:
        IntegrityError: the header is cut short or the offsets do not fit the chunk.
    """
    return stored_item_offsets(chunk, name).astype(np.int64)


def stored_item_offsets(chunk: Buffer, name: str) -> np.ndarray:
    """:func:`item_offsets` as the chunk stores them: uint32, a view of ``chunk`` (no copy).

    Raises:
        IntegrityError: the header is cut short or the offsets do not fit the chunk.
    """
    size = len(chunk)
    _fitting_header_size(chunk, name)
    offsets = stored_header_offsets(chunk, name)
    if offsets[-1] != size:
        raise IntegrityError(f"chunk {name} has item offsets that do not fit its {size} bytes")
    return offsets


def _fitting_header_size(chunk: Buffer, name: str) -> int:
    """:func:`header_size` of a whole chunk, checked to fit inside it."""
    header = header_size(chunk, name)
    if header > len(chunk):
        raise IntegrityError(f"chunk {name} claims {header // 4 - 2} items but is only {len(chunk)} bytes long")
    return header


def unchecked_item_offsets(chunk: Buffer, name: str) -> np.ndarray:
    """The item offsets of a whole chunk as stored (a view), with only the header's ends checked.

    The first offset must follow the header and the last be the chunk's size; the
    offsets between are not checked: a reader of a few items checks theirs with
    :func:`check_item_bounds` (O(items read), not O(items in the chunk)).

    Raises:
        IntegrityError: the header is cut short or its ends do not fit the chunk.
    """
    header = _fitting_header_size(chunk, name)
    offsets = np.frombuffer(chunk, _U32, count=header // 4 - 1, offset=4)
    if offsets[0] != header or offsets[-1] != len(chunk):
        raise IntegrityError(f"chunk {name} has a damaged header")
    return offsets


def check_item_bounds(offsets: np.ndarray, rows: np.ndarray, name: str) -> None:
    """Check that items ``rows`` lie inside the chunk, after its header, each at least an item header long.

    ``offsets`` is :func:`unchecked_item_offsets`'s: its first and last entries are checked.

    Raises:
        IntegrityError: an offset of those items is damaged.
    """
    starts = offsets[rows].astype(np.int64)
    ends = offsets[rows + 1].astype(np.int64)
    if (starts < int(offsets[0])).any() or (ends > int(offsets[-1])).any() or (ends - starts < ITEM_HEADER).any():
        raise IntegrityError(f"chunk {name} has a damaged header")


def header_offsets(head: Buffer, name: str) -> np.ndarray:
    """The item offsets (int64) from a chunk's header bytes alone (the file size unknown).

    Raises:
        IntegrityError: the offsets do not start right after the header or do not grow.
    """
    return stored_header_offsets(head, name).astype(np.int64)


def stored_header_offsets(head: Buffer, name: str) -> np.ndarray:
    """:func:`header_offsets` as the header stores them: uint32, a view of ``head`` (no copy).

    A 64 MiB chunk of small records has a header of half a million offsets, and a
    lookup in a fresh process pays for every pass over it: widening them to int64
    alone took 2 of a 10 ms lookup. So they are checked as stored, a block at a time
    (temporaries that stay in cache): each gap ``later - earlier`` is taken modulo
    2**32 and must be at least an item header; the gaps add up to ``last - first``
    exactly only if none wrapped around (a wrapped gap adds 2**32), that is, only if
    the offsets grow by at least an item header each.

    Raises:
        IntegrityError: the offsets do not start right after the header or do not grow.
    """
    num_items = int(np.frombuffer(head, _U32, count=1)[0])
    if len(head) < 4 * (num_items + 2):
        raise IntegrityError(f"chunk {name} has a header cut short")
    offsets = np.frombuffer(head, _U32, count=num_items + 1, offset=4)
    if offsets[0] != 4 * (num_items + 2):
        raise IntegrityError(f"chunk {name} has a damaged header")
    gaps = np.empty(min(num_items, _CHECK_BLOCK), dtype=_U32)
    total = 0
    for start in range(0, num_items, _CHECK_BLOCK):
        stop = min(start + _CHECK_BLOCK, num_items)
        block = np.subtract(offsets[start + 1 : stop + 1], offsets[start:stop], out=gaps[: stop - start])
        if int(block.min()) < ITEM_HEADER:
            raise IntegrityError(f"chunk {name} has a damaged header")
        total += int(block.sum(dtype=np.uint64))
    if total != int(offsets[-1]) - int(offsets[0]):
        raise IntegrityError(f"chunk {name} has a damaged header")
    return offsets


def payload_bounds(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)``: where the payloads of items ``rows`` lie in the chunk."""
    return offsets[rows] + ITEM_HEADER, offsets[rows + 1]


def item_payload(chunk: Buffer, offsets: np.ndarray, row: int) -> memoryview:
    """The payload of item ``row``: the bytes after its leaf size."""
    start, end = int(offsets[row]), int(offsets[row + 1])
    return memoryview(chunk)[start + ITEM_HEADER : end]


def item_size_matches(chunk: Buffer, offsets: np.ndarray, row: int) -> bool:
    """Whether item ``row``'s leaf size field agrees with its offsets."""
    start, end = int(offsets[row]), int(offsets[row + 1])
    declared = int(np.frombuffer(chunk, _U32, count=1, offset=start)[0])
    return declared == end - start - ITEM_HEADER


def size_fields_match(chunk: Buffer, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each item ``chunk[starts[i]:ends[i]]`` (all within ``chunk``), whether its leaf size field agrees."""
    data = np.frombuffer(chunk, np.uint8)
    steps = np.diff(starts)
    if len(steps) and steps[0] > 0 and (steps == steps[0]).all():  # items of one size: read at their stride
        declared = np.ndarray(len(starts), _U32, data, int(starts[0]), (int(steps[0]),))
    else:
        declared = data[starts[:, None] + np.arange(ITEM_HEADER)].view(_U32)[:, 0]
    return np.asarray(declared == ends - starts - ITEM_HEADER)


def strip_item_header(item: bytes | memoryview) -> memoryview:
    """The payload of one item read on its own (its bytes from ``offsets[row]``)."""
    return memoryview(item)[ITEM_HEADER:]
