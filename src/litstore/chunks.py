"""Reading records' bytes out of chunk files, memory-mapped and cached.

A :class:`ChunkCache` keeps the most recently used chunks open (their memory maps
and parsed item offsets), so repeated lookups into the same chunk cost a slice.
Chunks are immutable once committed, so a cached chunk never goes stale.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict

import numpy as np

from litstore import _litdata
from litstore.storage import LocalStorage


class _OpenChunk:
    __slots__ = ("data", "offsets")

    def __init__(self, data: mmap.mmap | bytes, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets


class ChunkCache:
    """Open chunks of one store, least recently used closed first.

    Not thread-safe; each thread or process should use its own cache.
    """

    def __init__(self, storage: LocalStorage, capacity: int = 256) -> None:
        self._storage = storage
        self._capacity = capacity
        self._open: OrderedDict[str, _OpenChunk] = OrderedDict()

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

    def _load(self, name: str) -> _OpenChunk:
        path = self._storage.local_path(name)
        with open(path, "rb") as handle:
            data: mmap.mmap | bytes = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if _litdata.file_size(path) else b""
            )
        return _OpenChunk(data, _litdata.item_offsets(data, name))

    def payload(self, name: str, row: int) -> memoryview:
        """The stored bytes (canonical encoding) of item ``row`` of chunk ``name``."""
        chunk = self._chunk(name)
        return _litdata.item_payload(chunk.data, chunk.offsets, row)

    def offsets(self, name: str) -> np.ndarray:
        return self._chunk(name).offsets

    def clear(self) -> None:
        self._open.clear()
