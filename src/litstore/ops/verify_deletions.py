"""What ``verify`` checks of a format-4 version's deletion vectors, and which stored items they leave live.

A version's commit record gives every chunk with dead rows a
:class:`~litstore.format.models.DeletionRef` (:mod:`litstore.format.deletions`).
Readers that walk a chunk's rows (``items()``, exports, streaming) skip the rows its
vector marks dead, so a vector that marks the wrong rows drops records from them, or
brings back superseded ones. :class:`DeadRows` reads each listed chunk's vector once,
through the check every reader uses (:meth:`litstore.read.deletions.Deletions.dead`:
checksum, Roaring layout, count, rows within the chunk, not every row), as ``verify``
reaches the chunk, and tells it which items are dead; ``verify`` then leaves those out
of the data (record counts, fingerprint, "stored but not listed", duplicates) and
checks the rule the manifest and the vectors share: a dead row is exactly a row the
manifest does not list. Problems are ``(file, what)``, as the key index's are:

- a vector that does not decode (missing file, truncated or changed block, count or
  rows that disagree with its reference or its chunk): its chunk's unlisted items are
  then taken as its dead ones, so the one fault is reported once;
- a reference to a chunk no split index of the version lists;
- a dead row the manifest lists (readers that walk rows would not yield its record),
  named by chunk, row and key (:func:`listed_dead`).

Memory: the dead rows of the chunk being matched (4 bytes each), and the decoded
vectors :class:`~litstore.read.deletions.Deletions` keeps (at most 64).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError
from litstore.format import layout
from litstore.format.models import DeletionRef, Version
from litstore.read.deletions import Deletions
from litstore.read.listings import read_listing
from litstore.storage import Storage

#: Dead rows the manifest lists named one by one; one more entry counts the rest.
NAMED = 1000


class DeadRows:
    """The dead rows of the chunks ``verify`` reads, by listing, and what is wrong with their vectors."""

    def __init__(self, storage: Storage, version: Version, listings: Sequence[tuple[str, ChunkInfo]]) -> None:
        self._version = version.number
        refs = read_listing(storage, version).deletions  # (format 6: composed from the chain of records)
        self._deletions = Deletions(storage, version.number, refs)
        self._refs: dict[str, DeletionRef] = {ref.chunk: ref for ref in refs}
        self._listings = listings
        self._current: tuple[str, np.ndarray | None] | None = None  # the chunk last asked for, and its dead rows
        self._failed: set[str] = set()
        self._checked: set[str] = set()
        self.problems: list[tuple[str, str]] = []
        listed = {chunk.filename for _, chunk in listings}
        for ref in refs:
            if ref.chunk not in listed:
                self.problems.append(
                    (
                        ref.path,
                        f"the commit record of version {self._version} gives chunk {ref.chunk} a deletion vector, "
                        "but no split index of the version lists that chunk",
                    )
                )

    def path_of(self, chunk: str) -> str:
        """The deletions file holding ``chunk``'s vector (the commit record, for a chunk without one)."""
        ref = self._refs.get(chunk)
        return ref.path if ref is not None else layout.version_record(self._version)

    def of(self, listing: int) -> np.ndarray | None:
        """The dead rows (sorted) of listing ``listing``'s chunk; ``None``: its vector does not decode (a problem)."""
        chunk = self._listings[listing][1]
        if self._current is not None and self._current[0] == chunk.filename:
            return self._current[1]
        dead: np.ndarray | None
        if chunk.filename not in self._refs:
            dead = np.empty(0, np.uint32)
        elif chunk.filename in self._failed:
            dead = None
        else:
            try:
                dead = self._deletions.dead(chunk.filename, chunk.num_items)
            except IntegrityError as exc:
                self._failed.add(chunk.filename)
                self.problems.append((self.path_of(chunk.filename), str(exc)))
                dead = None
            self._checked.add(chunk.filename)
        self._current = (chunk.filename, dead)
        return dead

    def mask(self, listing: int, start: int, count: int) -> np.ndarray | None:
        """Which of items ``[start, start + count)`` of listing ``listing``'s chunk are dead (``None``: unknown)."""
        dead = self.of(listing)
        if dead is None:
            return None
        marked = np.zeros(count, bool)
        lo, hi = np.searchsorted(dead, [start, start + count])
        marked[dead[lo:hi].astype(np.int64) - start] = True
        return marked

    def finish(self) -> None:
        """Check the vectors of listed chunks no part reached (a missing or damaged chunk's)."""
        for listing, (_, chunk) in enumerate(self._listings):
            if chunk.filename in self._refs and chunk.filename not in self._checked:
                self.of(listing)


def listed_dead(
    dead_rows: DeadRows, version: int, named: Sequence[tuple[Any, str, int]], total: int
) -> list[tuple[str, str]]:
    """The problems of the ``total`` dead rows the manifest lists: those of ``named`` (key, chunk, row; at most
    :data:`NAMED`) one by one, and one entry counting the rest."""
    problems = [
        (
            dead_rows.path_of(chunk),
            f"the deletion vector of chunk {chunk} marks row {row} dead, but the manifest of version {version} "
            f"lists key {key!r} there: readers that walk the chunk's rows would not yield it",
        )
        for key, chunk, row in named[:NAMED]
    ]
    rest = total - len(problems)
    if rest > 0:
        where = problems[0][0] if problems else layout.version_record(version)
        problems.append((where, f"{rest} more rows marked dead that the manifest lists"))
    return problems
