"""The in-memory lookup index of one version: key hash -> (chunk, row, content hash).

Four parallel arrays sorted by key hash (uint64 hash, uint32 chunk id, uint32 row,
16-byte content hash: 32 bytes a record, half of it the content hash) plus the list
of chunk names. A lookup is one binary search; since hashes can collide, callers
confirm each hit by the stored record's key. The content hash is what the manifest
committed for the record, so a reader can tell the bytes it read are the record's and
not damage (a flipped bit decodes to a plausible record more often than not).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from litstore.errors import IntegrityError
from litstore.format import manifest as manifest_format


@dataclass(frozen=True)
class _Entries:
    """Index entries sorted by key hash: four parallel arrays."""

    hashes: np.ndarray  # uint64, sorted
    chunk_ids: np.ndarray  # uint32, into the index's ``chunks``
    rows: np.ndarray  # uint32
    contents: np.ndarray  # (n, 16) uint8: the committed content hash of each record

    def __len__(self) -> int:
        return len(self.hashes)

    def without(self, removed: np.ndarray) -> _Entries:
        keep = np.ones(len(self.hashes), dtype=bool)
        keep[removed] = False
        contents = _rows16(_items16(self.contents)[keep])
        return _Entries(self.hashes[keep], self.chunk_ids[keep], self.rows[keep], contents)

    def merged(self, added: _Entries) -> _Entries:
        """These entries and ``added`` in one sorted set (an added entry after the old ones of its hash)."""
        if not len(added):
            return self
        if not len(self):
            return added
        # One merge: the new entries' places in the result, every old entry in the others, in order.
        places = np.searchsorted(self.hashes, added.hashes, "right") + np.arange(len(added))
        old_places = np.ones(len(self) + len(added), dtype=bool)
        old_places[places] = False
        merged = []
        # Content hashes move as single 16-byte items: row-wise copies of an (n, 16) array cost several times more.
        for old, new in (
            (self.hashes, added.hashes),
            (self.chunk_ids, added.chunk_ids),
            (self.rows, added.rows),
            (_items16(self.contents), _items16(added.contents)),
        ):
            result = np.empty(len(old_places), dtype=old.dtype)
            result[places] = new
            result[old_places] = old
            merged.append(result)
        hashes, chunk_ids, rows, contents = merged
        return _Entries(hashes, chunk_ids, rows, _rows16(contents))


class KeyIndex:
    """The lookup index of one version (see the module docstring).

    Entries a commit adds are kept apart, in a small sorted set of their own, and merged
    into the rest only when something reads the arrays (a lookup) or the recent set
    grows past an eighth of the rest: a run of appends to a large store then costs what
    it adds, not the size of the store each time. :meth:`contains` answers from both
    sets without merging.
    """

    def __init__(
        self,
        hashes: np.ndarray,
        chunk_ids: np.ndarray,
        rows: np.ndarray,
        contents: np.ndarray,
        chunks: tuple[str, ...],
        recent: _Entries | None = None,
    ) -> None:
        self.chunks = chunks
        # One attribute, replaced whole: a reader in another thread never sees half a merge.
        self._state: tuple[_Entries, _Entries | None] = (_Entries(hashes, chunk_ids, rows, contents), recent)

    @classmethod
    def from_manifest(cls, manifest: pa.Table) -> KeyIndex:
        """Build from a manifest's ``key_hash``, ``content_hash``, ``chunk`` and ``row`` columns.

        The key hashes are trusted: manifest readers derive them from the keys, never from
        a file (:mod:`litstore.format.manifest`), and writers compute them.
        """
        chunk_names, chunk_codes = manifest_format.chunk_codes(manifest.column("chunk"))
        hashes = manifest.column("key_hash").to_numpy()
        order = np.argsort(hashes, kind="stable")
        return cls(
            hashes=np.ascontiguousarray(hashes[order]),
            chunk_ids=chunk_codes.astype(np.uint32)[order],
            rows=manifest.column("row").to_numpy().astype(np.uint32)[order],
            contents=content_matrix(manifest.column("content_hash"))[order],
            chunks=tuple(chunk_names),
        )

    def _entries(self) -> _Entries:
        """Every entry in one sorted set (merging the recent ones in, once)."""
        entries, recent = self._state
        if recent is not None:
            entries = entries.merged(recent)
            self._state = (entries, None)
        return entries

    @property
    def hashes(self) -> np.ndarray:
        """Every entry's key hash, sorted (uint64)."""
        return self._entries().hashes

    @property
    def chunk_ids(self) -> np.ndarray:
        """Every entry's chunk, as a position in :attr:`chunks` (uint32)."""
        return self._entries().chunk_ids

    @property
    def rows(self) -> np.ndarray:
        """Every entry's row in its chunk (uint32)."""
        return self._entries().rows

    @property
    def contents(self) -> np.ndarray:
        """Every entry's committed content hash, as an ``(n, 16)`` uint8 array."""
        return self._entries().contents

    def __len__(self) -> int:
        entries, recent = self._state
        return len(entries) + (len(recent) if recent is not None else 0)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (the chunk names are shared and few)."""
        return sum(
            part.hashes.nbytes + part.chunk_ids.nbytes + part.rows.nbytes + part.contents.nbytes
            for part in self._state
            if part is not None
        )

    def positions(self, key_hash: int) -> range:
        """Positions whose hash equals ``key_hash`` (usually zero or one)."""
        hashes = self.hashes
        target = np.uint64(key_hash)
        start = int(np.searchsorted(hashes, target, "left"))
        end = start
        while end < len(hashes) and hashes[end] == target:
            end += 1
        return range(start, end)

    def first_positions(self, key_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash, its first position and whether it is present at all."""
        return _first_positions(self.hashes, key_hashes)

    def contains(self, key_hashes: np.ndarray) -> np.ndarray:
        """Whether each hash is present (without merging recent entries in)."""
        found = np.zeros(len(key_hashes), dtype=bool)
        for part in self._state:
            if part is not None:
                found |= _first_positions(part.hashes, key_hashes)[1]
        return found

    def location(self, position: int) -> tuple[str, int]:
        entries = self._entries()
        return self.chunks[int(entries.chunk_ids[position])], int(entries.rows[position])

    def content(self, position: int) -> bytes:
        """The committed content hash of the record at ``position``."""
        return bytes(self.contents[position].tobytes())

    def with_changes(self, removed: np.ndarray, added: pa.Table) -> KeyIndex:
        """A new index without the positions in ``removed`` and with the manifest rows ``added``.

        ``added`` needs the ``key_hash``, ``content_hash``, ``chunk`` and ``row`` columns.
        With nothing removed this costs O(m log m) for ``m`` added entries, plus, now and
        then, one merge of O(n) (amortized O(1) an entry); removing entries costs O(n).
        """
        chunk_names, codes = manifest_format.chunk_codes(added.column("chunk"))
        chunk_table = list(self.chunks)
        known = {name: number for number, name in enumerate(chunk_table)}
        numbers = np.empty(len(chunk_names), dtype=np.uint32)
        for code, name in enumerate(chunk_names):
            number = known.get(name)
            if number is None:
                number = known[name] = len(chunk_table)
                chunk_table.append(name)
            numbers[code] = number
        hashes = added.column("key_hash").to_numpy()
        order = np.argsort(hashes, kind="stable")
        new = _Entries(
            np.ascontiguousarray(hashes[order]),
            numbers[codes[order]],
            added.column("row").to_numpy()[order].astype(np.uint32, copy=False),
            content_matrix(added.column("content_hash"), copy=False)[order],
        )
        chunks = tuple(chunk_table)
        if len(removed):
            entries = self._entries().without(removed).merged(new)
            return KeyIndex(entries.hashes, entries.chunk_ids, entries.rows, entries.contents, chunks)
        entries, recent = self._state
        recent = new if recent is None else recent.merged(new)
        if not len(entries) or len(recent) > max(_RECENT_MIN, len(entries) // 8):
            entries, recent = entries.merged(recent), None
        return KeyIndex(entries.hashes, entries.chunk_ids, entries.rows, entries.contents, chunks, recent)


#: Recent entries are merged into the rest once they outnumber an eighth of it, or this many.
_RECENT_MIN = 1 << 16


def _first_positions(hashes: np.ndarray, key_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``key_hashes``, its first position in the sorted ``hashes`` and whether it is there."""
    count = len(key_hashes)
    if not len(hashes):
        return np.zeros(count, dtype=np.intp), np.zeros(count, dtype=bool)
    # Search in hash order: ascending needles keep the binary searches in cache.
    order = np.argsort(key_hashes)
    positions = np.empty(count, dtype=np.intp)
    positions[order] = np.searchsorted(hashes, key_hashes[order], "left")
    found = hashes[np.minimum(positions, len(hashes) - 1)] == key_hashes
    found &= positions < len(hashes)
    return positions, found


def _rows16(items: np.ndarray) -> np.ndarray:
    """16-byte items back as an ``(n, 16)`` uint8 array (a view)."""
    return items.view(np.uint8).reshape(-1, 16)


def _items16(contents: np.ndarray) -> np.ndarray:
    """An ``(n, 16)`` uint8 array as ``n`` single 16-byte items (a view, copied only if not contiguous)."""
    return np.ascontiguousarray(contents).view(np.dtype((np.void, 16))).reshape(-1)


def content_matrix(column: pa.ChunkedArray | pa.Array, copy: bool = True) -> np.ndarray:
    """A ``binary(16)`` content-hash column as an ``(n, 16)`` uint8 array (no Python objects).

    With ``copy=False`` the array may be a view of the column's buffer, for a caller
    that copies it anyway (a reordering ``take``).
    """
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise IntegrityError("a manifest has records without a content hash")
    width = array.type.byte_width
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    matrix = data[array.offset * width : (array.offset + len(array)) * width].reshape(-1, width)
    return matrix.copy() if copy else matrix
