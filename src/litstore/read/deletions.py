"""A version's deletion vectors, read as needed: which rows of each of its chunks are dead.

The version's listing (its commit record, or in format 6 its chain of records,
:mod:`litstore.read.listings`) holds a :class:`~litstore.format.models.DeletionRef` for every chunk
of the version with dead rows, so whether a chunk has holes, and how many, is known
without reading a chunk or vector; the rows themselves are one ranged read of the block, checked
(:func:`litstore.format.deletions.decode`) and kept per process.

Every reader that walks a chunk's rows instead of the manifest's (``items()``,
exports, streaming, verify, audit) asks :meth:`Deletions.live` which rows to yield.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from litstore.errors import IntegrityError, MissingFileError
from litstore.format import deletions as deletion_format
from litstore.format.models import DeletionRef
from litstore.read.chunks import confirm_item_count
from litstore.storage import Storage

_KEPT = 64  # decoded vectors held per process


class Deletions:
    """The dead rows of one version's chunks. Picklable: the decoded vectors are not pickled."""

    def __init__(self, storage: Storage, number: int, refs: Iterable[DeletionRef]) -> None:
        self._storage = storage
        self._number = number
        self._refs: dict[str, DeletionRef] = {ref.chunk: ref for ref in refs}
        self._decoded: OrderedDict[str, np.ndarray] = OrderedDict()

    def __repr__(self) -> str:
        return f"<Deletions of version {self._number}: {len(self._refs)} chunks with dead rows>"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_decoded"] = OrderedDict()
        return state

    def __bool__(self) -> bool:
        return bool(self._refs)

    @property
    def refs(self) -> tuple[DeletionRef, ...]:
        """Every chunk's reference, by chunk name."""
        return tuple(self._refs[name] for name in sorted(self._refs))

    @property
    def chunks(self) -> frozenset[str]:
        """The chunks with dead rows."""
        return frozenset(self._refs)

    def dead_count(self, chunk: str) -> int:
        """How many rows of ``chunk`` are dead (from the commit record: reads nothing)."""
        ref = self._refs.get(chunk)
        return 0 if ref is None else ref.dead

    def live_count(self, chunk: str, num_items: int) -> int:
        """How many of the ``num_items`` rows of ``chunk`` are live (reads nothing)."""
        return num_items - self.dead_count(chunk)

    def dead(self, chunk: str, num_items: int) -> np.ndarray:
        """The dead rows of ``chunk`` (which holds ``num_items`` items), sorted ``uint32``, checked.

        Raises:
            IntegrityError: the vector is missing, damaged or names rows past the chunk's end.
        """
        ref = self._refs.get(chunk)
        if ref is None:
            return np.empty(0, dtype=np.uint32)
        found = self._decoded.get(chunk)
        if found is not None:
            self._decoded.move_to_end(chunk)
            return found
        if ref.dead >= num_items:  # (before anything is read or made by that count)
            raise IntegrityError(
                f"the deletion vector of chunk {chunk} in {ref.path} marks every row dead ({ref.dead} of "
                f"{num_items}, by version {self._number}'s commit record), but the version still lists the chunk: "
                "store.verify() lists what is wrong"
            )
        confirm_item_count(self._storage, chunk, num_items)  # (the rows live() makes are as many)
        if ref.length > deletion_format.largest_block(num_items):
            raise IntegrityError(
                f"the deletion vector of chunk {chunk} in {ref.path} is {ref.length} bytes by version "
                f"{self._number}'s commit record, more than any of a chunk of {num_items} items can be: "
                "store.verify() lists what is wrong"
            )
        try:
            block = self._storage.read_range(ref.path, ref.offset, ref.offset + ref.length)
        except MissingFileError as exc:
            raise IntegrityError(
                f"the deletions file {ref.path} of version {self._number} is missing: the version cannot say which "
                "rows are live; store.verify() lists what is wrong"
            ) from exc
        rows = deletion_format.decode(chunk, block, ref.checksum, ref.dead, num_items, ref.path)
        self._decoded[chunk] = rows
        while len(self._decoded) > _KEPT:
            self._decoded.popitem(last=False)
        return rows

    def live(self, chunk: str, num_items: int) -> np.ndarray | None:
        """The live rows of ``chunk`` in row order, or ``None`` when all ``num_items`` are (no read)."""
        if chunk not in self._refs:
            return None
        return deletion_format.live_rows(self.dead(chunk, num_items), num_items)
