"""XXH3 (64 and 128 bits, seed 0, default secret) of many short byte strings at once, in numpy.

``xxhash.xxh3_128_digest`` costs a Python call per string: about 100 ns, against a
few ns of hashing for a 30-byte string. ``verify`` hashes every stored item and
several short strings per manifest row (keys, key ‖ content hash pairs), so the calls
would be most of its time. XXH3 hashes a string of at most 240 bytes by a fixed
recipe per length class (0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes: a few 64-bit
multiplies of words read from the input and the secret), and those recipes run here
for all the strings of a class together, one numpy step per operation. Longer
strings are handed to :mod:`xxhash` one by one (their hashing, not the call,
dominates). The results are exactly xxhash's, as ``tests/format/test_xxh3.py``
checks over every length class.

The strings are given as one ``uint8`` buffer with ``starts`` and ``lengths``; every
read stays inside its string. The recipes follow the reference implementation
(``xxhash.h`` v0.8, functions named in each docstring).
"""

from __future__ import annotations

import numpy as np
import xxhash

_M32 = np.uint64(0xFFFFFFFF)
_PRIME32_2 = 0x85EBCA77
_PRIME64_1 = 0x9E3779B185EBCA87
_PRIME64_2 = 0xC2B2AE3D27D4EB4F
_PRIME64_3 = 0x165667B19E3779F9
_PRIME64_4 = 0x85EBCA77C2B2AE63
_PRIME_MX1 = 0x165667919E3779F9
_PRIME_MX2 = 0x9FB21C651E98DF25
_MASK64 = 2**64 - 1

#: XXH3_kSecret, the default 192-byte secret.
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)

#: Longest string hashed here; longer ones go to xxhash.
MIDSIZE_MAX = 240


def _secret64(at: int) -> int:
    return int.from_bytes(_SECRET[at : at + 8], "little")


def _secret32(at: int) -> int:
    return int.from_bytes(_SECRET[at : at + 4], "little")


def _u(value: int) -> np.uint64:
    return np.uint64(value & _MASK64)


class _Reader:
    """Little-endian words at any byte offset of a buffer (an overlapping strided view: one gather a read)."""

    def __init__(self, buffer: np.ndarray) -> None:
        if len(buffer) < 8:
            buffer = np.concatenate([buffer, np.zeros(8 - len(buffer), np.uint8)])
        self.buffer = buffer
        self.words = np.ndarray((len(buffer) - 7,), "<u8", buffer, 0, (1,))
        self.halves = np.ndarray((len(buffer) - 3,), "<u4", buffer, 0, (1,))

    def u64(self, at: np.ndarray) -> np.ndarray:
        return self.words[at].astype(np.uint64)

    def u32(self, at: np.ndarray) -> np.ndarray:
        return self.halves[at].astype(np.uint64)

    def u8(self, at: np.ndarray) -> np.ndarray:
        return self.buffer[at].astype(np.uint64)


def _mul128(a: np.ndarray, b: np.ndarray | np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit product of uint64s ``a`` and ``b``, as (low, high) words (XXH_mult64to128, portable)."""
    a_lo, a_hi = a & _M32, a >> np.uint64(32)
    b_lo, b_hi = b & _M32, b >> np.uint64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    cross = (lo_lo >> np.uint64(32)) + (hi_lo & _M32) + a_lo * b_hi
    high = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + a_hi * b_hi
    low = (cross << np.uint64(32)) | (lo_lo & _M32)
    return low, high


def _fold(a: np.ndarray, b: np.ndarray | np.uint64) -> np.ndarray:
    """XXH3_mul128_fold64."""
    low, high = _mul128(a, b)
    return low ^ high


def _xorshift(value: np.ndarray, shift: int) -> np.ndarray:
    return value ^ (value >> np.uint64(shift))


def _avalanche(value: np.ndarray) -> np.ndarray:
    """XXH3_avalanche."""
    return _xorshift(_xorshift(value, 37) * _u(_PRIME_MX1), 32)


def _avalanche64(value: np.ndarray) -> np.ndarray:
    """XXH64_avalanche."""
    value = _xorshift(value, 33) * _u(_PRIME64_2)
    value = _xorshift(value, 29) * _u(_PRIME64_3)
    return _xorshift(value, 32)


def _swap64(value: np.ndarray) -> np.ndarray:
    return value.byteswap()


def _rotl64(value: np.ndarray, shift: int) -> np.ndarray:
    return (value << np.uint64(shift)) | (value >> np.uint64(64 - shift))


def _mix16(read: _Reader, at: np.ndarray, secret: int) -> np.ndarray:
    """XXH3_mix16B with seed 0: 16 input bytes at ``at`` with the secret's at ``secret``."""
    return _fold(read.u64(at) ^ _u(_secret64(secret)), read.u64(at + 8) ^ _u(_secret64(secret + 8)))


# The 64-bit recipes (XXH3_64bits).


def _h64_empty(count: int) -> np.ndarray:
    """XXH3_len_0to16_64b, length 0."""
    return _avalanche64(np.full(count, _u(_secret64(56) ^ _secret64(64))))


def _h64_1to3(read: _Reader, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH3_len_1to3_64b."""
    combined = (
        (read.u8(at) << np.uint64(16))
        | (read.u8(at + (length >> 1)) << np.uint64(24))
        | read.u8(at + length - 1)
        | (length.astype(np.uint64) << np.uint64(8))
    )
    return _avalanche64(combined ^ _u(_secret32(0) ^ _secret32(4)))


def _h64_4to8(read: _Reader, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH3_len_4to8_64b and XXH3_rrmxmx."""
    keyed = (read.u32(at + length - 4) + (read.u32(at) << np.uint64(32))) ^ _u(_secret64(8) ^ _secret64(16))
    value = keyed ^ _rotl64(keyed, 49) ^ _rotl64(keyed, 24)
    value = value * _u(_PRIME_MX2)
    value = value ^ ((value >> np.uint64(35)) + length.astype(np.uint64))
    value = value * _u(_PRIME_MX2)
    return _xorshift(value, 28)


def _h64_9to16(read: _Reader, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH3_len_9to16_64b."""
    low = read.u64(at) ^ _u(_secret64(24) ^ _secret64(32))
    high = read.u64(at + length - 8) ^ _u(_secret64(40) ^ _secret64(48))
    return _avalanche(length.astype(np.uint64) + _swap64(low) + high + _fold(low, high))


def _h64_17to128(read: _Reader, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH3_len_17to128_64b."""
    acc = length.astype(np.uint64) * _u(_PRIME64_1)
    end = at + length
    for rounds, above in ((3, 96), (2, 64), (1, 32)):
        rows = np.flatnonzero(length > above)
        if len(rows):
            acc[rows] += _mix16(read, at[rows] + 16 * rounds, 32 * rounds) + _mix16(
                read, end[rows] - 16 * (rounds + 1), 32 * rounds + 16
            )
    return _avalanche(acc + _mix16(read, at, 0) + _mix16(read, end - 16, 16))


def _h64_129to240(read: _Reader, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    """XXH3_len_129to240_64b."""
    acc = length.astype(np.uint64) * _u(_PRIME64_1)
    for round_ in range(8):
        acc += _mix16(read, at + 16 * round_, 16 * round_)
    acc = _avalanche(acc)
    for round_ in range(8, MIDSIZE_MAX // 16):
        rows = np.flatnonzero(length // 16 > round_)
        if not len(rows):
            break
        acc[rows] += _mix16(read, at[rows] + 16 * round_, 16 * (round_ - 8) + 3)
    acc += _mix16(read, at + length - 16, 136 - 17)
    return _avalanche(acc)


# The 128-bit recipes (XXH3_128bits): (low, high) words.


def _h128_empty(count: int) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_0to16_128b, length 0."""
    low = _avalanche64(np.full(count, _u(_secret64(64) ^ _secret64(72))))
    high = _avalanche64(np.full(count, _u(_secret64(80) ^ _secret64(88))))
    return low, high


def _h128_1to3(read: _Reader, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_1to3_128b."""
    combined = (
        (read.u8(at) << np.uint64(16))
        | (read.u8(at + (length >> 1)) << np.uint64(24))
        | read.u8(at + length - 1)
        | (length.astype(np.uint64) << np.uint64(8))
    )
    swapped = combined.astype(np.uint32).byteswap().astype(np.uint64)
    rotated = ((swapped << np.uint64(13)) | (swapped >> np.uint64(19))) & _M32
    low = _avalanche64(combined ^ _u(_secret32(0) ^ _secret32(4)))
    high = _avalanche64(rotated ^ _u(_secret32(8) ^ _secret32(12)))
    return low, high


def _h128_4to8(read: _Reader, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_4to8_128b."""
    keyed = (read.u32(at) + (read.u32(at + length - 4) << np.uint64(32))) ^ _u(_secret64(16) ^ _secret64(24))
    low, high = _mul128(keyed, _u(_PRIME64_1) + (length.astype(np.uint64) << np.uint64(2)))
    high = high + (low << np.uint64(1))
    low = low ^ (high >> np.uint64(3))
    low = _xorshift(_xorshift(low, 35) * _u(_PRIME_MX2), 28)
    return low, _avalanche(high)


def _h128_9to16(read: _Reader, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_9to16_128b (the 64-bit branch)."""
    first = read.u64(at)
    last = read.u64(at + length - 8)
    m_low, m_high = _mul128(first ^ last ^ _u(_secret64(32) ^ _secret64(40)), _u(_PRIME64_1))
    m_low = m_low + ((length.astype(np.uint64) - np.uint64(1)) << np.uint64(54))
    last = last ^ _u(_secret64(48) ^ _secret64(56))
    m_high = m_high + last + (last & _M32) * np.uint64(_PRIME32_2 - 1)
    m_low = m_low ^ _swap64(m_high)
    low, high = _mul128(m_low, _u(_PRIME64_2))
    high = high + m_high * _u(_PRIME64_2)
    return _avalanche(low), _avalanche(high)


def _mix32(
    read: _Reader, low: np.ndarray, high: np.ndarray, first: np.ndarray, second: np.ndarray, secret: int
) -> tuple[np.ndarray, np.ndarray]:
    """XXH128_mix32B with seed 0."""
    low = (low + _mix16(read, first, secret)) ^ (read.u64(second) + read.u64(second + 8))
    high = (high + _mix16(read, second, secret + 16)) ^ (read.u64(first) + read.u64(first + 8))
    return low, high


def _fold_midsize(low: np.ndarray, high: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tail XXH3_len_17to128_128b and XXH3_len_129to240_128b share."""
    result_low = low + high
    result_high = low * _u(_PRIME64_1) + high * _u(_PRIME64_4) + length.astype(np.uint64) * _u(_PRIME64_2)
    return _avalanche(result_low), np.uint64(0) - _avalanche(result_high)


def _h128_17to128(read: _Reader, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_17to128_128b."""
    low = length.astype(np.uint64) * _u(_PRIME64_1)
    high = np.zeros(len(at), np.uint64)
    end = at + length
    for rounds, above in ((3, 96), (2, 64), (1, 32)):
        rows = np.flatnonzero(length > above)
        if len(rows):
            low[rows], high[rows] = _mix32(
                read, low[rows], high[rows], at[rows] + 16 * rounds, end[rows] - 16 * (rounds + 1), 32 * rounds
            )
    low, high = _mix32(read, low, high, at, end - 16, 0)
    return _fold_midsize(low, high, length)


def _h128_129to240(read: _Reader, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH3_len_129to240_128b."""
    low = length.astype(np.uint64) * _u(_PRIME64_1)
    high = np.zeros(len(at), np.uint64)
    for offset in range(32, 160, 32):
        low, high = _mix32(read, low, high, at + offset - 32, at + offset - 16, offset - 32)
    low, high = _avalanche(low), _avalanche(high)
    for offset in range(160, MIDSIZE_MAX + 1, 32):
        rows = np.flatnonzero(length >= offset)
        if not len(rows):
            break
        low[rows], high[rows] = _mix32(
            read, low[rows], high[rows], at[rows] + offset - 32, at[rows] + offset - 16, 3 + offset - 160
        )
    end = at + length
    low, high = _mix32(read, low, high, end - 16, end - 32, 136 - 17 - 16)
    return _fold_midsize(low, high, length)


_CLASSES = ((1, 3), (4, 8), (9, 16), (17, 128), (129, MIDSIZE_MAX))
_RECIPES_64 = (_h64_1to3, _h64_4to8, _h64_9to16, _h64_17to128, _h64_129to240)
_RECIPES_128 = (_h128_1to3, _h128_4to8, _h128_9to16, _h128_17to128, _h128_129to240)


def _classes(lengths: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """The rows of each length class (a slice when every row is of one class), by class number (-1: empty, 5: long)."""
    low, high = int(lengths.min()), int(lengths.max())
    bounds = ((0, 0), *_CLASSES, (MIDSIZE_MAX + 1, 2**62))
    for number, (first, last) in enumerate(bounds, -1):
        if first <= low and high <= last:
            return [(number, slice(None))]
    found: list[tuple[int, np.ndarray | slice]] = []
    for number, (first, last) in enumerate(bounds, -1):
        rows = np.flatnonzero((lengths >= first) & (lengths <= last))
        if len(rows):
            found.append((number, rows))
    return found


def hash64(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``xxhash.xxh3_64_intdigest`` of each ``buffer[starts[i]:starts[i] + lengths[i]]``, as uint64.

    ``buffer`` is ``uint8``; ``starts`` and ``lengths`` are int64 and every string lies within ``buffer``.
    """
    out = np.empty(len(starts), np.uint64)
    if not len(starts):
        return out
    read = _Reader(buffer)
    for number, rows in _classes(lengths):
        at, length = starts[rows], lengths[rows]
        if number == -1:
            out[rows] = _h64_empty(len(at))
        elif number == len(_CLASSES):
            raw = memoryview(buffer)
            out[rows] = [xxhash.xxh3_64_intdigest(raw[a : a + n]) for a, n in zip(at.tolist(), length.tolist())]
        else:
            out[rows] = _RECIPES_64[number](read, at, length)
    return out


def hash128(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``xxhash.xxh3_128_digest`` of each string (see :func:`hash64`), as the rows of an ``(n, 16)`` uint8 array."""
    out = np.empty((len(starts), 2), ">u8")  # the digest: high word, then low word, big-endian
    if len(starts):
        read = _Reader(buffer)
        for number, rows in _classes(lengths):
            at, length = starts[rows], lengths[rows]
            if number == -1:
                low, high = _h128_empty(len(at))
            elif number == len(_CLASSES):
                raw = memoryview(buffer)
                digests = b"".join(
                    xxhash.xxh3_128_digest(raw[a : a + n]) for a, n in zip(at.tolist(), length.tolist())
                )
                out[rows] = np.frombuffer(digests, ">u8").reshape(-1, 2)
                continue
            else:
                low, high = _RECIPES_128[number](read, at, length)
            out[rows, 0] = high
            out[rows, 1] = low
    return out.view(np.uint8).reshape(-1, 16)
