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

Buffer = bytes | memoryview | mmap.mmap


def header_size(head: Buffer, name: str) -> int:
    """The byte length of a chunk's header, given at least its first 4 bytes."""
    if len(head) < 4:
        raise IntegrityError(f"chunk {name} is {len(head)} bytes long, too short for a header")
    return 4 * (int(np.frombuffer(head, _U32, count=1)[0]) + 2)


def item_offsets(chunk: Buffer, name: str) -> np.ndarray:
    """The ``num_items + 1`` item offsets of a whole chunk, checked against its length.

    Raises:
        IntegrityError: the header is cut short or the offsets do not fit the chunk.
    """
    size = len(chunk)
    header = header_size(chunk, name)
    if header > size:
        raise IntegrityError(f"chunk {name} claims {header // 4 - 2} items but is only {size} bytes long")
    offsets = header_offsets(chunk, name)
    if offsets[-1] != size:
        raise IntegrityError(f"chunk {name} has item offsets that do not fit its {size} bytes")
    return offsets


def header_offsets(head: Buffer, name: str) -> np.ndarray:
    """The item offsets from a chunk's header bytes alone (the file size unknown).

    Raises:
        IntegrityError: the offsets do not start right after the header or do not grow.
    """
    num_items = int(np.frombuffer(head, _U32, count=1)[0])
    if len(head) < 4 * (num_items + 2):
        raise IntegrityError(f"chunk {name} has a header cut short")
    offsets = np.frombuffer(head, _U32, count=num_items + 1, offset=4).astype(np.int64)
    if offsets[0] != 4 * (num_items + 2) or np.any(np.diff(offsets) < ITEM_HEADER):
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
    declared = data[starts[:, None] + np.arange(ITEM_HEADER)].view(_U32)[:, 0]
    return np.asarray(declared == ends - starts - ITEM_HEADER)


def strip_item_header(item: bytes | memoryview) -> memoryview:
    """The payload of one item read on its own (its bytes from ``offsets[row]``)."""
    return memoryview(item)[ITEM_HEADER:]
