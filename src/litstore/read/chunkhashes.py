"""Reading chunks' hashes sidecars (:mod:`litstore.format.chunkhashes`): what streaming checks items against.

A format-3 store writes beside every chunk the committed content hashes of its items,
so a streaming dataset (and each of its DataLoader workers) reads the hashes of the
chunk it is about to decode (one small file, memory-mapped locally, one read on S3)
instead of composing the version's manifest and writing every record's hash into its
view: starting costs O(chunks), and each worker holds a chunk's hashes at a time.

:func:`all_present` says whether every chunk of a dataset has its sidecar (one
listing per fragment); where one is missing (chunks written by format 2, or before
sidecars existed) streaming checks items against the manifest instead, as it always
did. A sidecar that is there but damaged (cut short, of another item count, failing
its checksum, or another chunk's) is an :class:`~litstore.errors.IntegrityError`
naming the chunk: it is never used, and never silently skipped.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError
from litstore.format import chunkhashes, layout
from litstore.format.models import StoreConfig, Version
from litstore.read.checked import RecordCheck
from litstore.read.manifests import compose_manifest, keys_at
from litstore.storage import MissingFileError, Storage

#: Sidecars a :class:`ChunkHashes` keeps open: the chunk being streamed and the one before it.
_KEPT = 2


def all_present(storage: Storage, chunks: Iterable[ChunkInfo]) -> bool:
    """Whether every one of ``chunks`` has its hashes sidecar: one listing of each fragment they are in."""
    return not missing(storage, chunks)


def missing(storage: Storage, chunks: Iterable[ChunkInfo]) -> list[ChunkInfo]:
    """Those of ``chunks`` that have no hashes sidecar, in order: one listing of each fragment they are in."""
    present: dict[str, set[str]] = {}
    lacking = []
    for chunk in chunks:
        fragment, _, name = layout.chunk_hashes(chunk.filename).rpartition("/")
        if fragment not in present:
            present[fragment] = set(storage.names(fragment))
        if name not in present[fragment]:
            lacking.append(chunk)
    return lacking


class ChunkHashes:
    """The committed content hashes of the items of one version's chunks, read from their sidecars.

    Picklable (a spawned DataLoader worker unpickles its own, which opens the sidecars
    it needs); the sidecars it has open are not pickled. Give each process its own.

    Args:
        storage: the store's backend: every sidecar is read through it, with its checks.
        config: the store's configuration.
        version: the version streamed (named in errors; its manifest names the keys of
            damaged items, composed only then).
    """

    def __init__(self, storage: Storage, config: StoreConfig, version: Version) -> None:
        self._storage = storage
        self._config = config
        self._version = version
        self._open: OrderedDict[str, memoryview] = OrderedDict()
        self._check: RecordCheck | None = None

    def __repr__(self) -> str:
        return f"<ChunkHashes {self._storage.url} version {self._version.number}>"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_open"] = OrderedDict()
        state["_check"] = None
        return state

    def of(self, chunk: str, count: int) -> memoryview:
        """The ``16 * count`` bytes of the content hashes of ``chunk``'s items, in row order, checked.

        ``count`` is the number of items the chunk's index entry lists.

        Raises:
            IntegrityError: the sidecar is missing or damaged (see the module docstring).
        """
        found = self._open.get(chunk)
        if found is not None and len(found) == 16 * count:
            self._open.move_to_end(chunk)
            return found
        hashes = chunkhashes.parse(chunk, self._read(chunk, count), count)
        self._open[chunk] = hashes
        while len(self._open) > _KEPT:
            self._open.popitem(last=False)
        return hashes

    def check(self) -> RecordCheck:
        """Checks and decodes the version's records, naming damaged ones by key (the manifest composed then)."""
        if self._check is None:
            self._check = RecordCheck(self._version.number, self._keys_at)
        return self._check

    def _keys_at(self, chunk: str, rows: np.ndarray) -> list[object | None]:
        """The keys of the items at ``rows`` of ``chunk``: the manifest is composed for it (damage is rare)."""
        return keys_at(compose_manifest(self._storage, self._config, self._version.number), chunk, rows)

    def _read(self, chunk: str, count: int) -> mmap.mmap | bytes:
        path = layout.chunk_hashes(chunk)
        try:
            mapped = self._storage.mapped(path)
            if mapped is not None:
                return mapped
            # One read, never more than a sidecar of ``count`` items can be (one byte more shows it is longer).
            return self._storage.read_range(path, 0, chunkhashes.size(count) + 1)
        except MissingFileError as exc:
            raise IntegrityError(
                f"the hashes sidecar of chunk {chunk} is gone since the dataset was made (version "
                f"{self._version.number}): make the dataset again to stream through the manifest"
            ) from exc
