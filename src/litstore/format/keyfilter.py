"""The byte layout of a key run's filter: a blocked Bloom filter read one 64-byte block a key.

A format-5 key run (:mod:`litstore.format.keyrun`) carries, between its entries and its
chunk table, a filter of the keys it has entries for (live and deleted alike)::

    blocks   b x 64 bytes, b = ceil(entries x BITS_PER_KEY / 448):
               bits      56 B   448 filter bits
               checksum  u64    xxh3-64 of the bits, xor'ed with the block's number
                                times a fixed odd constant (a block moved elsewhere fails)

A key's block is chosen by its key hash (``(key_hash >> 32) * b >> 32``: blocks follow
the run's key-hash order, so a run's filter can be built a section of entries at a
time), and its :data:`PROBES` bits inside the block by 9-bit fields of the low word of
its keyprint (an independent hash of the key). A key whose bits are not all set has
no entry in the run, so a lookup or an append's uniqueness check reads no page of
that run for it; a key whose bits are set (about one in a hundred of the keys a run
does not hold) reads its page as before.

Why blocked (after Putze, Sanders and Singler, "Cache-, Hash- and Space-Efficient
Bloom Filters"): a fresh process checks 100 new keys against a run by reading 100
blocks of 64 bytes (6.4 KB) instead of 100 pages of 12 KiB, and the filter is never
read whole, so what a process reads does not grow with the run. A block checks
itself, so a damaged filter is found before a single bit of it is believed (a
filter that says "absent" for a key the run holds would hide the key's newest entry).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import xxhash

from litstore.errors import IntegrityError
from litstore.format import xxh3

#: Bytes of a block, of its filter bits, and the bits themselves.
BLOCK = 64
_BITS_BYTES = 56
_BITS = _BITS_BYTES * 8
#: Filter bits a run spends per entry (about 1% false positives at 7 probes in 448-bit blocks).
BITS_PER_KEY = 10
#: Bits set per key.
PROBES = 7
_FIELD = 9  # bits of the keyprint word each probe takes (7 x 9 = 63 of 64)
_MIX = np.uint64(0x9E3779B97F4A7C15)
#: Entries turned into bits at once when a filter is built.
_SECTION = 1 << 18
#: Up to this many blocks are checked one xxhash call each, and up to :data:`_FEW_KEYS` keys tested in
#: Python: a lookup asks one block of every run, and numpy's steps over a handful of values cost more
#: than the values (a fresh process's lookup spent 0.3 ms a run on one block; xxhash per block is also
#: faster than the numpy XXH3 up to a few thousand blocks).
_FEW_BLOCKS = 1024
_FEW_KEYS = 16


def block_count(entries: int) -> int:
    """Blocks of the filter of a run of ``entries`` entries (at least one)."""
    return max(1, -(-entries * BITS_PER_KEY // _BITS))


def blocks_of(key_hashes: npt.NDArray[np.uint64], blocks: int) -> npt.NDArray[np.int64]:
    """The block each key hash falls in, in a filter of ``blocks`` blocks (non-decreasing in the hash)."""
    high = key_hashes.astype(np.uint64) >> np.uint64(32)
    return ((high * np.uint64(blocks)) >> np.uint64(32)).astype(np.int64)


def _bits_of(prints: npt.NDArray[np.void]) -> npt.NDArray[np.uint64]:
    """The bit numbers inside its block of each keyprint (16-byte values): ``(PROBES, n)``.

    Computed in place, a probe at a time (temporaries of n words cost more than the arithmetic).
    """
    low = np.ascontiguousarray(prints).view("<u8").reshape(-1, 2)[:, 0]
    bits = np.empty((PROBES, len(low)), dtype=np.uint64)
    for probe, row in enumerate(bits):
        np.right_shift(low, np.uint64(_FIELD * probe), out=row)
    bits &= np.uint64((1 << _FIELD) - 1)
    bits *= np.uint64(_BITS)
    bits >>= np.uint64(_FIELD)
    return bits


def _checksums(bits: npt.NDArray[np.uint8], numbers: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """The checksum of each block's bits (``bits``: ``(n, 56)`` rows; ``numbers``: the blocks' numbers)."""
    offsets = np.arange(len(bits) + 1, dtype=np.int64) * _BITS_BYTES
    digests = xxh3.hash64(np.ascontiguousarray(bits).reshape(-1), offsets)
    return digests ^ (numbers.astype(np.uint64) * _MIX)


def _few_checksums(blocks: bytes, numbers: npt.NDArray[np.int64] | Sequence[int]) -> npt.NDArray[np.uint64]:
    """:func:`_checksums` of whole blocks side by side (``blocks``: their bytes), one xxhash call each."""
    digests = np.fromiter(
        (xxhash.xxh3_64_intdigest(blocks[at : at + _BITS_BYTES]) for at in range(0, len(blocks), BLOCK)),
        dtype=np.uint64,
        count=len(numbers),
    )
    return digests ^ (np.asarray(numbers, dtype=np.uint64) * _MIX)


def encode(key_hashes: npt.NDArray[np.uint64], prints: npt.NDArray[np.void]) -> bytes:
    """The filter of a run whose entries have ``key_hashes`` (sorted) and keyprints ``prints``."""
    sections = (
        (key_hashes[start : start + _SECTION], prints[start : start + _SECTION])
        for start in range(0, len(key_hashes), _SECTION)
    )
    return encode_sections(len(key_hashes), sections)


def encode_sections(entries: int, sections: Iterable[tuple[npt.NDArray[np.uint64], npt.NDArray[np.void]]]) -> bytes:
    """The filter of a run of ``entries`` entries given as ``sections`` (key hashes and keyprints, in key-hash
    order, together ``entries`` long): what a run written piece by piece builds without holding its entries."""
    count = block_count(entries)
    bits = np.zeros((count, _BITS_BYTES), dtype=np.uint8)
    for hashes, section_prints in sections:
        if not len(hashes):
            continue
        where = blocks_of(hashes, count)
        first, last = int(where[0]), int(where[-1])
        flags = np.zeros((last - first + 1, _BITS), dtype=bool)
        positions = _bits_of(section_prints)
        positions += ((where - first) * _BITS).astype(np.uint64)[None, :]
        flags.reshape(-1)[positions.reshape(-1)] = True
        bits[first : last + 1] |= np.packbits(flags, axis=1, bitorder="little")
    blocks = np.empty((count, BLOCK), dtype=np.uint8)
    blocks[:, :_BITS_BYTES] = bits
    blocks[:, _BITS_BYTES:] = _checksums(bits, np.arange(count)).astype("<u8").view(np.uint8).reshape(count, 8)
    return blocks.tobytes()


def check_blocks(path: str, numbers: Sequence[int], data: Sequence[bytes | memoryview]) -> npt.NDArray[np.uint8]:
    """The bits (``(n, 56)`` rows) of blocks ``numbers`` of run ``path``'s filter (``data``: their bytes).

    Raises:
        IntegrityError: a block is short or does not match its checksum.
    """
    if any(len(block) != BLOCK for block in data):
        raise IntegrityError(f"key run {path}'s filter was cut short: it is damaged")
    return _checked(path, b"".join(data), np.asarray(numbers, dtype=np.int64))


def check_span(path: str, first: int, count: int, data: bytes) -> npt.NDArray[np.uint8]:
    """:func:`check_blocks` of blocks ``first`` to ``first + count``, given as one byte string (no step per block:
    what ``verify`` reads to check a run's entries against its filter).

    Raises:
        IntegrityError: the span is short or a block does not match its checksum.
    """
    if len(data) != count * BLOCK:
        raise IntegrityError(f"key run {path}'s filter was cut short: it is damaged")
    return _checked(path, data, np.arange(first, first + count, dtype=np.int64))


def _checked(path: str, data: bytes, numbers: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    blocks = np.frombuffer(data, dtype=np.uint8).reshape(-1, BLOCK)
    stored = blocks[:, _BITS_BYTES:].copy().view("<u8").reshape(-1)
    if len(numbers) <= _FEW_BLOCKS:
        sums = _few_checksums(data, numbers)
    else:
        sums = _checksums(blocks[:, :_BITS_BYTES], numbers)
    bad = np.flatnonzero(stored != sums)
    if len(bad):
        raise IntegrityError(
            f"key run {path}'s filter block {int(numbers[bad[0]])} does not match its checksum: it is damaged"
        )
    return blocks[:, :_BITS_BYTES]


def may_hold(
    bits: npt.NDArray[np.uint8], rows: npt.NDArray[np.int64], prints: npt.NDArray[np.void]
) -> npt.NDArray[np.bool_]:
    """For each key (its keyprint), whether its probes are all set in its block's ``bits`` (row ``rows[i]``)."""
    if len(rows) <= _FEW_KEYS:
        return _few_held(bits, rows, prints)
    words = np.ascontiguousarray(bits).view("<u8").reshape(-1)  # 7 words a block, bit b in word b >> 6
    held = np.ones(len(rows), dtype=bool)
    firsts = rows.astype(np.int64) * (_BITS_BYTES // 8)
    for probe in _bits_of(prints):
        word = words[firsts + (probe >> np.uint64(6)).astype(np.int64)]
        held &= ((word >> (probe & np.uint64(63))) & np.uint64(1)).astype(bool)
    return held


def _few_held(
    bits: npt.NDArray[np.uint8], rows: npt.NDArray[np.int64], prints: npt.NDArray[np.void]
) -> npt.NDArray[np.bool_]:
    """:func:`may_hold` in Python integers: a block's bits as one little-endian integer (bit ``b`` of the
    integer is bit ``b & 63`` of its word ``b >> 6``), the probes cut from the keyprint's low word."""
    lows = np.ascontiguousarray(prints).view("<u8").reshape(-1, 2)[:, 0].tolist()
    field, held = (1 << _FIELD) - 1, []
    for row, low in zip(rows.tolist(), lows, strict=True):
        block = int.from_bytes(bits[row].tobytes(), "little")
        held.append(
            all(block >> ((((low >> (_FIELD * probe)) & field) * _BITS) >> _FIELD) & 1 for probe in range(PROBES))
        )
    return np.array(held, dtype=bool)
