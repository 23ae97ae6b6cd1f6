"""Near-duplicate records for :func:`litstore.ops.audit.audit` (``near=True``).

Two signals, each gathered while the audit streams the records:

- **text and bytes**: the ``str`` and ``bytes`` values of the compared fields, joined,
  cut into byte 5-grams and summarised by a MinHash signature (``datasketch.MinHash``,
  64 permutations, xxh32 of each 5-gram). Records whose signatures agree on every row
  of some band (locality-sensitive hashing; bands chosen so that pairs of Jaccard
  similarity ``threshold`` or more meet with high probability) are candidates, kept
  when the signatures' estimated Jaccard similarity is ``threshold`` or more;
- **images**: a 64-bit difference hash (dHash: the image in grey, 9x8, each bit is
  whether a pixel is brighter than its right neighbour) of each image, from the stored
  bytes decoded by PIL; two images are near when their hashes differ in at most
  ``image_distance`` bits. By the pigeonhole rule such a pair agrees on one of
  ``image_distance + 1`` bands of the hash's bits, which finds the candidates.

Candidates are searched within each bucket of a band (records sorted by the band's
value) up to :data:`NEIGHBOURS` places apart, so a bucket of thousands of similar
records costs linear time; they still join one group through their neighbours.

Memory: a text's signature (64 x uint32, 256 bytes) is written to a temporary file as
it is made, not kept; in memory there are 8 bytes a record for its row, and while a
band is searched 8 bytes of the band's hash and 16 of sorting per record. An image
keeps 8 bytes of hash and 16 of row and field. Candidate pairs are scored a block at a
time from the signature file, so a store of 10^8 texts needs about 3 GB of memory for
the search (not 26 GB of signatures) and 26 GB of temporary disk.
"""

from __future__ import annotations

import array
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from litstore.errors import MissingDependencyError
from litstore.format.stored_media import Media, image_kind
from litstore.ops.audit_rows import Spill

#: MinHash permutations (a signature is this many uint32).
PERMUTATIONS = 64
#: Byte n-grams a text or bytes value is cut into.
SHINGLE = 5
#: Bytes of a record's text read for its signature (a longer text is cut).
MAX_TEXT_BYTES = 1 << 16
#: Places apart in a band's sorted order within which candidates are compared.
NEIGHBOURS = 32
#: Rows hashed, and candidate pairs scored, per block (bounded memory on any number of records).
_BLOCK = 1 << 18


@dataclass(frozen=True)
class NearPair:
    """Two records (indexes in audit order) found near, the kind of signal and its score."""

    first: int
    second: int
    kind: str
    score: float


class NearDuplicates:
    """Gathers signatures record by record (:meth:`add`), then finds the near pairs (:meth:`pairs`)."""

    def __init__(self, threshold: float, image_distance: int) -> None:
        try:
            from datasketch import MinHash
        except ImportError as exc:
            raise MissingDependencyError(
                "audit(near=True) needs datasketch; pip install datasketch (or pip install 'litstore[audit]')"
            ) from exc
        import xxhash

        self.threshold = threshold
        self.image_distance = image_distance
        self._base = MinHash(num_perm=PERMUTATIONS, hashfunc=xxhash.xxh32_intdigest, seed=1)
        # Flat buffers, not a Python object per record; signatures go to a temporary file as they are made.
        self._texts = _Signatures()
        self._text_rows = array.array("q")
        self._images = array.array("Q")
        self._image_rows = array.array("q")
        self._image_fields: dict[str, int] = {}
        self._image_field_of = array.array("q")

    def add(self, row: int, content: dict[Any, Any]) -> None:
        """Take the near-duplicate signals of the record at ``row`` (its compared fields)."""
        parts: list[bytes] = []
        for name in sorted(content, key=repr):
            value = content[name]
            if isinstance(value, Media) and image_kind(value.data) is not None:
                digest = _dhash(value.data)
                if digest is not None:
                    self._images.append(digest)
                    self._image_rows.append(row)
                    self._image_field_of.append(self._image_fields.setdefault(repr(name), len(self._image_fields)))
            elif isinstance(value, str):
                parts.append(" ".join(value.lower().split()).encode("utf-8", "surrogatepass"))
            elif isinstance(value, bytes):
                parts.append(value)
        text = b"\0".join(parts)[:MAX_TEXT_BYTES]
        if text:
            signature = self._base.copy()
            signature.update_batch([text[start : start + SHINGLE] for start in range(max(1, len(text) - SHINGLE + 1))])
            self._texts.add(signature.hashvalues.astype(np.uint32).tobytes())
            self._text_rows.append(row)

    def pairs(self) -> Iterator[NearPair]:
        """The near pairs found (each pair once per signal and band at most)."""
        yield from self._text_pairs()
        yield from self._image_pairs()

    def _text_pairs(self) -> Iterator[NearPair]:
        if len(self._text_rows) < 2:
            return
        signatures = self._texts.array()
        rows = np.frombuffer(self._text_rows, dtype=np.int64)
        bands, width = bands_for(self.threshold, PERMUTATIONS)
        for band in range(bands):
            buckets = np.empty(len(signatures), np.uint64)
            for start in range(0, len(signatures), _BLOCK):
                part = signatures[start : start + _BLOCK, band * width : (band + 1) * width]
                buckets[start : start + _BLOCK] = band_hash(part)
            first, second = bucket_pairs(buckets.view(np.int64))
            del buckets
            for low in range(0, len(first), _BLOCK):
                a, b = first[low : low + _BLOCK], second[low : low + _BLOCK]
                similarity = (signatures[a] == signatures[b]).mean(axis=1)
                kept = similarity >= self.threshold
                for one, other, score in zip(rows[a[kept]], rows[b[kept]], similarity[kept], strict=True):
                    yield NearPair(int(one), int(other), "text", float(score))

    def close(self) -> None:
        """Remove the signature file."""
        self._texts.close()

    def _image_pairs(self) -> Iterator[NearPair]:
        if len(self._images) < 2:
            return
        hashes = np.frombuffer(self._images, dtype=np.uint64)
        rows = np.frombuffer(self._image_rows, dtype=np.int64)
        fields = np.frombuffer(self._image_field_of, dtype=np.int64)
        bands = self.image_distance + 1
        edges = np.linspace(0, 64, bands + 1).astype(int)
        for low, high in itertools.pairwise(edges):
            mask = np.uint64((1 << int(high)) - (1 << int(low)))
            buckets = ((hashes & mask) >> np.uint64(low)).astype(np.int64) * (int(fields.max()) + 1) + fields
            first, second = bucket_pairs(buckets)
            if not len(first):
                continue
            distance = _popcount(hashes[first] ^ hashes[second])
            kept = distance <= self.image_distance
            for a, b, bits in zip(rows[first[kept]], rows[second[kept]], distance[kept], strict=True):
                if a != b:
                    yield NearPair(int(a), int(b), "image", float(bits))


class _Signatures:
    """MinHash signatures appended to a temporary file, read back as one ``n x PERMUTATIONS`` memory map."""

    def __init__(self) -> None:
        self._spill = Spill("litstore-audit-minhash-")

    def add(self, signature: bytes) -> None:
        self._spill.add(signature)

    def array(self) -> np.ndarray:
        self._spill.flush()
        count = self._spill.written // (4 * PERMUTATIONS)
        mapped: np.ndarray = np.memmap(self._spill.file, dtype=np.uint32, mode="r", shape=(count, PERMUTATIONS))
        return mapped

    def close(self) -> None:
        self._spill.close()


def band_hash(part: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of ``part`` (uint32 values): rows equal in every value hash equal.

    Different rows may collide (about one pair in 2^64); a candidate pair is scored on
    its whole signatures afterwards, so a collision costs a comparison, never a finding.
    """
    hashed = np.full(len(part), 0x9E3779B97F4A7C15, dtype=np.uint64)
    for column in range(part.shape[1]):
        hashed ^= part[:, column].astype(np.uint64)
        hashed *= np.uint64(0xBF58476D1CE4E5B9)
        hashed ^= hashed >> np.uint64(31)
    return hashed


def bands_for(threshold: float, permutations: int) -> tuple[int, int]:
    """``(bands, rows)``: the banding whose S-curve midpoint ``(1/bands)**(1/rows)`` is nearest below ``threshold``.

    Below, so that pairs at the threshold are found (recall); the estimate checked
    afterwards drops the pairs under it.
    """
    best = (permutations, 1)
    for rows in range(1, permutations + 1):
        bands = permutations // rows
        if (1 / bands) ** (1 / rows) <= threshold:
            best = (bands, rows)
    return best


def bucket_pairs(buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of positions that share a bucket, each compared with up to :data:`NEIGHBOURS` after it in the bucket."""
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    firsts, seconds = [], []
    for step in range(1, NEIGHBOURS + 1):
        if step >= len(order):
            break
        same = ordered[step:] == ordered[:-step]
        if not same.any():
            break
        firsts.append(order[:-step][same])
        seconds.append(order[step:][same])
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(firsts), np.concatenate(seconds)


def _popcount(values: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(values.astype(">u8").view(np.uint8).reshape(-1, 8), axis=1)
    counts: np.ndarray = bits.sum(axis=1)
    return counts


def _dhash(data: bytes) -> int | None:
    """The 64-bit difference hash of an image file's bytes; ``None`` if PIL cannot read it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("L", (64, 64))  # JPEG: decode at a reduced size
            pixels = np.asarray(image.convert("L").resize((9, 8), Image.Resampling.BILINEAR), dtype=np.int16)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None
    bits = (pixels[:, 1:] > pixels[:, :-1]).ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")
