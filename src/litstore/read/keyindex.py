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

from litstore.errors import IntegrityError, describe
from litstore.format import hashing
from litstore.format import manifest as manifest_format


@dataclass(frozen=True)
class KeyIndex:
    hashes: np.ndarray  # uint64, sorted
    chunk_ids: np.ndarray  # uint32, into ``chunks``
    rows: np.ndarray  # uint32
    contents: np.ndarray  # (n, 16) uint8: the committed content hash of each record
    chunks: tuple[str, ...]

    @classmethod
    def from_manifest(cls, manifest: pa.Table) -> KeyIndex:
        """Build from a manifest's ``key_hash``, ``content_hash``, ``chunk`` and ``row`` columns.

        Every row's key hash must be its key's: a lookup finds records by hash and
        confirms them by key, so a row whose key was changed alone (a damaged or
        crafted manifest file that holds key hashes) could otherwise serve a record
        another version committed.

        Raises:
            IntegrityError: some rows hold a key hash that is not their key's.
        """
        chunk_names, chunk_codes = manifest_format.chunk_codes(manifest.column("chunk"))
        hashes = manifest.column("key_hash").to_numpy()
        wrong = np.flatnonzero(hashing.key_hash_array(manifest.column("key")) != hashes)
        if len(wrong):
            keys = manifest.column("key").take(pa.array(wrong[:5])).to_pylist()
            shown = describe(keys)
            raise IntegrityError(
                f"the manifest is damaged: {len(wrong)} rows hold a key hash that is not their key's ({shown})"
            )
        order = np.argsort(hashes, kind="stable")
        return cls(
            hashes=np.ascontiguousarray(hashes[order]),
            chunk_ids=chunk_codes.astype(np.uint32)[order],
            rows=manifest.column("row").to_numpy().astype(np.uint32)[order],
            contents=content_matrix(manifest.column("content_hash"))[order],
            chunks=tuple(chunk_names),
        )

    def __len__(self) -> int:
        return len(self.hashes)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (the chunk names are shared and few)."""
        return self.hashes.nbytes + self.chunk_ids.nbytes + self.rows.nbytes + self.contents.nbytes

    def positions(self, key_hash: int) -> range:
        """Positions whose hash equals ``key_hash`` (usually zero or one)."""
        target = np.uint64(key_hash)
        start = int(np.searchsorted(self.hashes, target, "left"))
        end = start
        while end < len(self.hashes) and self.hashes[end] == target:
            end += 1
        return range(start, end)

    def first_positions(self, key_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash, its first position and whether it is present at all."""
        count = len(key_hashes)
        if not len(self.hashes):
            return np.zeros(count, dtype=np.intp), np.zeros(count, dtype=bool)
        # Search in hash order: ascending needles keep the binary searches in cache.
        order = np.argsort(key_hashes)
        positions = np.empty(count, dtype=np.intp)
        positions[order] = np.searchsorted(self.hashes, key_hashes[order], "left")
        found = self.hashes[np.minimum(positions, len(self.hashes) - 1)] == key_hashes
        found &= positions < len(self.hashes)
        return positions, found

    def location(self, position: int) -> tuple[str, int]:
        return self.chunks[int(self.chunk_ids[position])], int(self.rows[position])

    def content(self, position: int) -> bytes:
        """The committed content hash of the record at ``position``."""
        return bytes(self.contents[position].tobytes())

    def with_changes(self, removed: np.ndarray, added: pa.Table) -> KeyIndex:
        """A new index without the positions in ``removed`` and with the manifest rows ``added``.

        ``added`` needs the ``key_hash``, ``content_hash``, ``chunk`` and ``row`` columns.
        Costs O(n + m log n) for ``m`` added entries: one merge, no full re-sort.
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
        sorted_hashes = hashes[order]
        del hashes
        new_ids = numbers[codes[order]]
        new_rows = added.column("row").to_numpy()[order].astype(np.uint32, copy=False)
        new_contents = content_matrix(added.column("content_hash"), copy=False)[order]
        # Content hashes move as single 16-byte items: row-wise copies of an (n, 16) array cost several times more.
        kept = [self.hashes, self.chunk_ids, self.rows, _items16(self.contents)]
        if len(removed):
            keep = np.ones(len(self.hashes), dtype=bool)
            keep[removed] = False
            kept = [array[keep] for array in kept]
        if not len(kept[0]):  # the first version: nothing to merge into
            return KeyIndex(sorted_hashes, new_ids, new_rows, new_contents, tuple(chunk_table))
        # One merge: the new entries' places in the result, every old entry in the others, in order.
        places = np.searchsorted(kept[0], sorted_hashes, "right") + np.arange(len(sorted_hashes))
        old_places = np.ones(len(kept[0]) + len(sorted_hashes), dtype=bool)
        old_places[places] = False
        merged = []
        for old, new in zip(kept, [sorted_hashes, new_ids, new_rows, _items16(new_contents)], strict=True):
            result = np.empty(len(old_places), dtype=old.dtype)
            result[places] = new
            result[old_places] = old
            merged.append(result)
        hashes, chunk_ids, rows, contents = merged
        return KeyIndex(hashes, chunk_ids, rows, contents.view(np.uint8).reshape(-1, 16), tuple(chunk_table))


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
