"""The records of a local chunk, decoded a whole chunk at a time: the streaming fast path.

litdata's reader hands a dataset one item at a time, through several layers of
Python per item (reader, item loader, batch deserializer), and then litstore decodes
and checks it. For a chunk on the local disk, :class:`DecodedChunk` does the same
work once per chunk instead: it maps the file, checks every item against its
committed content hash, and decodes all items in one MessagePack pass, so serving an
item is a list lookup. Streaming visits a chunk's items together (litdata shuffles
chunks, then items within a chunk), so one decoded chunk per process is enough.

A damaged item does not stop the others: its check fails when it is asked for (or,
unchecked, it is decoded on its own), exactly as on the per-item path.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from litstore._litdata import chunk as chunk_layout
from litstore.errors import IntegrityError
from litstore.format import codec, hashing


class DecodedChunk:
    """Every item of one chunk, checked (if ``expected`` is given) and decoded.

    Args:
        data: the whole chunk, mapped by its storage backend (which refuses links and
            anything but regular files).
        name: the chunk's name, for error messages.
        expected: the committed content hashes of its items, 16 bytes each, in row order;
            ``None`` to skip the check.
    """

    def __init__(self, data: mmap.mmap | bytes, name: str, expected: bytes | memoryview | None) -> None:
        self.name = name
        offsets = chunk_layout.item_offsets(data, name)
        view = memoryview(data)
        starts, ends = chunk_layout.payload_bounds(offsets, np.arange(len(offsets) - 1))
        self._bounds = list(zip(starts.tolist(), ends.tolist(), strict=True))
        self._view = view
        self.damaged: set[int] = set()
        if expected is not None:
            if len(expected) != 16 * len(self._bounds):
                listed = len(expected) // 16
                raise IntegrityError(f"chunk {name} holds {len(self._bounds)} items; {listed} were committed")
            digest = hashing.content_hash
            actual = np.frombuffer(b"".join([digest(view[start:end]) for start, end in self._bounds]), np.uint8)
            committed = np.frombuffer(expected, np.uint8)
            differs = (actual.reshape(-1, 16) != committed.reshape(-1, 16)).any(axis=1)
            self.damaged = set(np.flatnonzero(differs).tolist())
        self._records = codec.decode_framed(view, offsets, aligned=expected is not None and not self.damaged)

    def __len__(self) -> int:
        return len(self._bounds)

    def payload(self, row: int) -> memoryview:
        """The stored bytes of item ``row``."""
        start, end = self._bounds[row]
        return self._view[start:end]

    def record(self, row: int) -> Any:
        """The decoded record of item ``row`` (the caller checked ``damaged`` first, if it checks)."""
        if self._records is not None:
            return self._records[row]
        return codec.decode(self.payload(row), f"chunk {self.name} row {row}")
