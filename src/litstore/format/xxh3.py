"""XXH3 (64 and 128 bits) of many short byte strings at once, with numpy.

``xxhash.xxh3_64_intdigest`` and ``xxh3_128_digest`` cost a Python call each, about
0.1-0.3 microseconds, which dominates hashing millions of small keys and records. For
inputs of at most :data:`MIDSIZE_MAX` bytes XXH3 is a fixed sequence of 64-bit reads,
multiplies, xors and shifts chosen by the input's length: :func:`hash64` and
:func:`hash128` run that sequence on whole columns (each step one numpy operation over
every input of a length class), giving exactly the numbers xxhash gives (the algorithm
of xxHash 0.8, whose output is frozen; ``tests/format/test_xxh3.py`` checks every length
from 0 to past 240 bytes, with seeds, against xxhash itself). Longer inputs, and short
columns where a Python call each costs less than the numpy steps, are handed to xxhash.

Inputs are given as one byte buffer and ``n + 1`` offsets (an Arrow binary array's
layout); they are hashed :data:`_BLOCK` at a time, so the numpy temporaries stay a few MiB
whatever the column's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

#: Inputs up to this many bytes are hashed with numpy; longer ones by xxhash, one call each.
MIDSIZE_MAX = 240
#: Below this many inputs one xxhash call each is cheaper than the numpy steps.
_MIN_VECTOR = 64
#: Inputs hashed together (bounds the temporaries: ~100 bytes an input).
_BLOCK = 1 << 15

_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_PRIME32_2 = 0x85EBCA77
_PRIME64_1 = 0x9E3779B185EBCA87
_PRIME64_2 = 0xC2B2AE3D27D4EB4F
_PRIME64_3 = 0x165667B19E3779F9
_PRIME64_4 = 0x85EBCA77C2B2AE63
_PRIME_MX1 = 0x165667919E3779F9
_PRIME_MX2 = 0x9FB21C651E98DF25
_M64 = (1 << 64) - 1

# XXH3's default secret (its first 136 bytes, all that inputs of up to 240 bytes read).
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3"
)


def _secret64(offset: int) -> int:
    return int.from_bytes(_SECRET[offset : offset + 8], "little")


def _secret32(offset: int) -> int:
    return int.from_bytes(_SECRET[offset : offset + 4], "little")


def suits(offsets: npt.NDArray[np.int64]) -> bool:
    """Whether :func:`hash64` and :func:`hash128` beat one xxhash call per input for inputs at ``offsets``.

    They do for inputs of at most 16 bytes (keys), and for inputs all of one length up to
    :data:`MIDSIZE_MAX` (read at a fixed stride); for inputs of mixed lengths past 16 bytes,
    gathering their words costs more than the calls (1M records of ~60 bytes: 0.8 s
    against 0.18 s).
    """
    if len(offsets) - 1 < _MIN_VECTOR:
        return False
    lengths = np.diff(offsets)
    longest = int(lengths.max())
    return longest <= 16 or (longest <= MIDSIZE_MAX and int(lengths.min()) == longest)


def hash64(data: Any, offsets: npt.NDArray[np.int64], seed: int = 0) -> npt.NDArray[np.uint64]:
    """``xxhash.xxh3_64_intdigest(data[offsets[i]:offsets[i + 1]], seed)`` for every ``i``, as uint64."""
    count = len(offsets) - 1
    if count < _MIN_VECTOR:
        view = memoryview(data).cast("B")
        digest = xxhash.xxh3_64_intdigest
        spans = zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
        return np.fromiter((digest(view[start:end], seed) for start, end in spans), np.uint64, count)
    out = np.empty(count, dtype=np.uint64)
    for first in range(0, count, _BLOCK):
        last = min(first + _BLOCK, count)
        block = _Block(data, offsets[first : last + 1])
        out[first:last] = block.hash64(seed & _M64)
    return out


def hash128(data: Any, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """``xxhash.xxh3_128_digest(data[offsets[i]:offsets[i + 1]])`` for every ``i``: the rows of an ``(n, 16)`` array."""
    count = len(offsets) - 1
    if count < _MIN_VECTOR:
        view = memoryview(data).cast("B")
        digest = xxhash.xxh3_128_digest
        spans = zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
        joined = b"".join(digest(view[start:end]) for start, end in spans)
        return np.frombuffer(joined, dtype=np.uint8).reshape(-1, 16)
    out = np.empty((count, 2), dtype=">u8")
    for first in range(0, count, _BLOCK):
        last = min(first + _BLOCK, count)
        high, low = _Block(data, offsets[first : last + 1]).hash128()
        out[first:last, 0] = high
        out[first:last, 1] = low
    return out.view(np.uint8).reshape(-1, 16)


def _mul128(a: npt.NDArray[np.uint64], b: Any) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """The 128-bit product of ``a`` and ``b`` (uint64 each), as its (low, high) halves."""
    thirty_two = _U64(32)
    a0, a1 = a & _MASK32, a >> thirty_two
    b0, b1 = b & _MASK32, b >> thirty_two
    p01, p10 = a0 * b1, a1 * b0
    middle = a0 * b0
    middle >>= thirty_two
    middle += p01 & _MASK32
    middle += p10 & _MASK32
    middle >>= thirty_two
    p01 >>= thirty_two
    p10 >>= thirty_two
    high = a1 * b1
    high += p01
    high += p10
    high += middle
    return a * b, high  # (the low half is the product modulo 2**64)


def _fold(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    low, high = _mul128(a, b)
    return low ^ high


def _avalanche(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    h = h ^ (h >> _U64(37))
    h = h * _U64(_PRIME_MX1)
    return h ^ (h >> _U64(32))


def _xxh64_avalanche(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    h = h ^ (h >> _U64(33))
    h = h * _U64(_PRIME64_2)
    h = h ^ (h >> _U64(29))
    h = h * _U64(_PRIME64_3)
    return h ^ (h >> _U64(32))


def _rrmxmx(h: npt.NDArray[np.uint64], length: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    h = h ^ (_rotl(h, 49) ^ _rotl(h, 24))
    h = h * _U64(_PRIME_MX2)
    h = h ^ ((h >> _U64(35)) + length)
    h = h * _U64(_PRIME_MX2)
    return h ^ (h >> _U64(28))


def _rotl(h: npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    return (h << _U64(bits)) | (h >> _U64(64 - bits))


def _swap32(value: int) -> int:
    return int.from_bytes((value & 0xFFFFFFFF).to_bytes(4, "little"), "big")


class _Block:
    """The inputs of one block: their bytes copied into a zero-padded, word-aligned buffer, read by position."""

    def __init__(self, data: Any, offsets: npt.NDArray[np.int64]) -> None:
        base = int(offsets[0])
        span = int(offsets[-1]) - base
        raw = np.frombuffer(data, dtype=np.uint8, count=span, offset=base) if span else np.empty(0, np.uint8)
        buffer = np.zeros(span // 8 + 3, dtype="<u8")  # two spare words: a read may run 16 bytes past an end
        buffer.view(np.uint8)[:span] = raw
        self.raw = raw
        self.bytes = buffer.view(np.uint8)
        self.words = buffer
        self.starts = offsets[:-1] - base
        self.lengths = np.diff(offsets)
        # Inputs all of one length lie at a fixed stride: a read at the same place in each
        # is then a strided view, not a gather (every position a class method reads is its
        # input's start plus a constant, or its end minus one).
        count = len(self.lengths)
        self.uniform = bool(count) and bool((self.lengths == self.lengths[0]).all())
        self.stride = int(self.lengths[0]) if self.uniform else 0

    def read64(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """The little-endian 64-bit words at byte ``positions`` (unaligned)."""
        if self.stride and len(positions) == len(self.starts):
            offset = int(positions[0])
            words: npt.NDArray[np.uint64] = np.ndarray(
                len(positions), dtype="<u8", buffer=self.bytes, offset=offset, strides=(self.stride,)
            )
            return words
        index = positions >> 3
        shift = ((positions & 7) << 3).astype(np.uint64)
        joined: npt.NDArray[np.uint64] = (self.words[index] >> shift) | (self.words[index + 1] << (_U64(64) - shift))
        return joined

    def read32(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        return self.read64(positions) & _MASK32

    def classes(self) -> list[tuple[str, Any]]:
        """The length classes of the inputs, each with its rows (a whole slice when all are of one length)."""
        lengths = self.lengths
        bounds = (("empty", 0, 0), ("tiny", 1, 3), ("small", 4, 8), ("short", 9, 16), ("mid", 17, 128))
        if self.uniform:  # (inputs of one length: no masks, no gathers)
            length = int(lengths[0])
            if length > MIDSIZE_MAX:
                return [("long", np.arange(len(lengths)))]
            return [(next((name for name, low, high in bounds if low <= length <= high), "midsize"), slice(None))]
        found = [(name, np.flatnonzero((lengths >= low) & (lengths <= high))) for name, low, high in bounds]
        found.append(("midsize", np.flatnonzero((lengths > 128) & (lengths <= MIDSIZE_MAX))))
        found.append(("long", np.flatnonzero(lengths > MIDSIZE_MAX)))
        return [(name, rows) for name, rows in found if len(rows)]

    def long_digests(self, rows: npt.NDArray[np.intp], digest: Any, seed: int | None = None) -> list[Any]:
        view = memoryview(self.raw.data)
        spans = zip(self.starts[rows].tolist(), (self.starts[rows] + self.lengths[rows]).tolist(), strict=True)
        if seed is None:
            return [digest(view[start:end]) for start, end in spans]
        return [digest(view[start:end], seed) for start, end in spans]

    def mix16(self, positions: npt.NDArray[np.int64], secret: int, seed: int) -> npt.NDArray[np.uint64]:
        low = self.read64(positions) ^ _U64((_secret64(secret) + seed) & _M64)
        high = self.read64(positions + 8) ^ _U64((_secret64(secret + 8) - seed) & _M64)
        return _fold(low, high)

    # -- 64 bits -----------------------------------------------------------------------------

    def hash64(self, seed: int) -> npt.NDArray[np.uint64]:
        out = np.empty(len(self.lengths), dtype=np.uint64)
        for name, rows in self.classes():
            if name == "long":
                out[rows] = self.long_digests(rows, xxhash.xxh3_64_intdigest, seed)
                continue
            starts, lengths = self.starts[rows], self.lengths[rows]
            out[rows] = getattr(self, f"_{name}64")(starts, lengths, seed)
        return out

    def _empty64(self, starts: Any, lengths: Any, seed: int) -> Any:
        value = _xxh64_avalanche(np.array([seed ^ _secret64(56) ^ _secret64(64)], dtype=np.uint64))
        return np.repeat(value, len(starts))

    def _tiny64(self, starts: Any, lengths: Any, seed: int) -> Any:
        c1 = self.bytes[starts].astype(np.uint64)
        c2 = self.bytes[starts + (lengths >> 1)].astype(np.uint64)
        c3 = self.bytes[starts + lengths - 1].astype(np.uint64)
        combined = (c1 << _U64(16)) | (c2 << _U64(24)) | c3 | (lengths.astype(np.uint64) << _U64(8))
        bitflip = _U64(((_secret32(0) ^ _secret32(4)) + seed) & _M64)
        return _xxh64_avalanche(combined ^ bitflip)

    def _small64(self, starts: Any, lengths: Any, seed: int) -> Any:
        seed ^= _swap32(seed) << 32
        first = self.read32(starts)
        last = self.read32(starts + lengths - 4)
        bitflip = _U64(((_secret64(8) ^ _secret64(16)) - seed) & _M64)
        keyed = (last + (first << _U64(32))) ^ bitflip
        return _rrmxmx(keyed, lengths.astype(np.uint64))

    def _short64(self, starts: Any, lengths: Any, seed: int) -> Any:
        bitflip1 = _U64(((_secret64(24) ^ _secret64(32)) + seed) & _M64)
        bitflip2 = _U64(((_secret64(40) ^ _secret64(48)) - seed) & _M64)
        low = self.read64(starts) ^ bitflip1
        high = self.read64(starts + lengths - 8) ^ bitflip2
        acc = lengths.astype(np.uint64) + low.byteswap() + high + _fold(low, high)
        return _avalanche(acc)

    def _mid64(self, starts: Any, lengths: Any, seed: int) -> Any:
        acc = lengths.astype(np.uint64) * _U64(_PRIME64_1)
        ends = starts + lengths
        acc += self.mix16(starts, 0, seed) + self.mix16(ends - 16, 16, seed)
        for round_ in range(1, 4):  # inputs past 32, 64, 96 bytes mix 32 more each
            part = np.flatnonzero(lengths > 32 * round_)
            if len(part):
                front = self.mix16(starts[part] + 16 * round_, 32 * round_, seed)
                acc[part] += front + self.mix16(ends[part] - 16 * (round_ + 1), 32 * round_ + 16, seed)
        return _avalanche(acc)

    def _midsize64(self, starts: Any, lengths: Any, seed: int) -> Any:
        acc = lengths.astype(np.uint64) * _U64(_PRIME64_1)
        for round_ in range(8):
            acc += self.mix16(starts + 16 * round_, 16 * round_, seed)
        acc = _avalanche(acc)
        rounds = lengths // 16
        for round_ in range(8, MIDSIZE_MAX // 16):
            part = np.flatnonzero(rounds > round_)
            if len(part):
                acc[part] += self.mix16(starts[part] + 16 * round_, 16 * (round_ - 8) + 3, seed)
        acc += self.mix16(starts + lengths - 16, 136 - 17, seed)
        return _avalanche(acc)

    # -- 128 bits ----------------------------------------------------------------------------

    def hash128(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """(high, low) halves of each input's XXH3-128, seed 0."""
        high = np.empty(len(self.lengths), dtype=np.uint64)
        low = np.empty(len(self.lengths), dtype=np.uint64)
        for name, rows in self.classes():
            if name == "long":
                digests = b"".join(self.long_digests(rows, xxhash.xxh3_128_digest))
                halves = np.frombuffer(digests, dtype=">u8").reshape(-1, 2)
                high[rows], low[rows] = halves[:, 0], halves[:, 1]
                continue
            starts, lengths = self.starts[rows], self.lengths[rows]
            high[rows], low[rows] = getattr(self, f"_{name}128")(starts, lengths)
        return high, low

    def _empty128(self, starts: Any, lengths: Any) -> Any:
        low = _xxh64_avalanche(np.array([_secret64(64) ^ _secret64(72)], dtype=np.uint64))
        high = _xxh64_avalanche(np.array([_secret64(80) ^ _secret64(88)], dtype=np.uint64))
        return np.repeat(high, len(starts)), np.repeat(low, len(starts))

    def _tiny128(self, starts: Any, lengths: Any) -> Any:
        c1 = self.bytes[starts].astype(np.uint64)
        c2 = self.bytes[starts + (lengths >> 1)].astype(np.uint64)
        c3 = self.bytes[starts + lengths - 1].astype(np.uint64)
        combined_low = (c1 << _U64(16)) | (c2 << _U64(24)) | c3 | (lengths.astype(np.uint64) << _U64(8))
        swapped = combined_low.astype(np.uint32).byteswap().astype(np.uint64)
        combined_high = ((swapped << _U64(13)) | (swapped >> _U64(19))) & _MASK32
        low = _xxh64_avalanche(combined_low ^ _U64(_secret32(0) ^ _secret32(4)))
        high = _xxh64_avalanche(combined_high ^ _U64(_secret32(8) ^ _secret32(12)))
        return high, low

    def _small128(self, starts: Any, lengths: Any) -> Any:
        first = self.read32(starts)
        last = self.read32(starts + lengths - 4)
        keyed = (first + (last << _U64(32))) ^ _U64(_secret64(16) ^ _secret64(24))
        low, high = _mul128(keyed, _U64(_PRIME64_1) + (lengths.astype(np.uint64) << _U64(2)))
        high = high + (low << _U64(1))
        low = low ^ (high >> _U64(3))
        low = low ^ (low >> _U64(35))
        low = low * _U64(_PRIME_MX2)
        low = low ^ (low >> _U64(28))
        return _avalanche(high), low

    def _short128(self, starts: Any, lengths: Any) -> Any:
        bitflip_low = _U64(_secret64(32) ^ _secret64(40))
        bitflip_high = _U64(_secret64(48) ^ _secret64(56))
        first = self.read64(starts)
        last = self.read64(starts + lengths - 8)
        low, high = _mul128(first ^ last ^ bitflip_low, _U64(_PRIME64_1))
        low = low + ((lengths.astype(np.uint64) - _U64(1)) << _U64(54))
        last = last ^ bitflip_high
        high = high + last + (last & _MASK32) * _U64(_PRIME32_2 - 1)
        low = low ^ high.byteswap()
        result_low, result_high = _mul128(low, _U64(_PRIME64_2))
        result_high = result_high + high * _U64(_PRIME64_2)
        return _avalanche(result_high), _avalanche(result_low)

    def _mix32(
        self,
        acc: tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]],
        first: npt.NDArray[np.int64],
        second: npt.NDArray[np.int64],
        secret: int,
        seed: int,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        low, high = acc
        low = (low + self.mix16(first, secret, seed)) ^ (self.read64(second) + self.read64(second + 8))
        high = (high + self.mix16(second, secret + 16, seed)) ^ (self.read64(first) + self.read64(first + 8))
        return low, high

    def _finish128(self, low: Any, high: Any, lengths: Any) -> Any:
        lengths = lengths.astype(np.uint64)
        result_low = _avalanche(low + high)
        mixed = low * _U64(_PRIME64_1) + high * _U64(_PRIME64_4) + lengths * _U64(_PRIME64_2)
        return _U64(0) - _avalanche(mixed), result_low

    def _mid128(self, starts: Any, lengths: Any) -> Any:
        low = lengths.astype(np.uint64) * _U64(_PRIME64_1)
        high = np.zeros(len(starts), dtype=np.uint64)
        ends = starts + lengths
        rounds = (lengths - 1) // 32
        for round_ in range(3, -1, -1):
            part = np.flatnonzero(rounds >= round_) if round_ else None
            if part is None:
                low, high = self._mix32((low, high), starts, ends - 16, 0, 0)
                continue
            if not len(part):
                continue
            s, e = starts[part], ends[part]
            low[part], high[part] = self._mix32(
                (low[part], high[part]), s + 16 * round_, e - 16 * (round_ + 1), 32 * round_, 0
            )
        return self._finish128(low, high, lengths)

    def _midsize128(self, starts: Any, lengths: Any) -> Any:
        low = lengths.astype(np.uint64) * _U64(_PRIME64_1)
        high = np.zeros(len(starts), dtype=np.uint64)
        for offset in range(32, 160, 32):
            low, high = self._mix32((low, high), starts + offset - 32, starts + offset - 16, offset - 32, 0)
        low, high = _avalanche(low), _avalanche(high)
        for offset in range(160, MIDSIZE_MAX + 1, 32):
            part = np.flatnonzero(lengths >= offset)
            if len(part):
                s = starts[part]
                low[part], high[part] = self._mix32(
                    (low[part], high[part]), s + offset - 32, s + offset - 16, 3 + offset - 160, 0
                )
        ends = starts + lengths
        low, high = self._mix32((low, high), ends - 16, ends - 32, 136 - 17 - 16, 0)
        return self._finish128(low, high, lengths)
