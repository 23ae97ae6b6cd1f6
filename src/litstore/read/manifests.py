"""A small cache of composed manifests, shared by a store handle and its snapshots."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa


class ManifestCache:
    """The composed manifests of the few most recently used versions of one store.

    Shared by a store and every snapshot taken from it, so ``store.diff(a, b)`` twice,
    or ``store.at(v)`` taken again, does not compose the same manifests again. Safe
    because a committed version never changes: entries are keyed by version number
    and the commit's transaction id. ``litstore.open`` starts with an empty cache.
    """

    def __init__(self, capacity: int = 4) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[int, str | None], pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, str | None]) -> pa.Table | None:
        with self._lock:
            table = self._entries.get(key)
            if table is not None:
                self._entries.move_to_end(key)
            return table

    def put(self, key: tuple[int, str | None], table: pa.Table) -> None:
        with self._lock:
            self._entries[key] = table
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
