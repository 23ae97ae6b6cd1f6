"""The numpy XXH3 of whole columns gives exactly xxhash's numbers, at every length class and seed."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.format import columnar, hashing, xxh3

_SEEDS = (0, 0x5EED_5917, 2**64 - 1, 12_345_678_901_234)


def _column(items: list[bytes]) -> tuple[bytes, np.ndarray]:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(item) for item in items], out=offsets[1:])
    return b"".join(items), offsets


def _expected128(items: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(map(xxhash.xxh3_128_digest, items)), dtype=np.uint8).reshape(-1, 16)


def _mixed_lengths() -> list[bytes]:
    rng = random.Random(5)
    items = [rng.randbytes(length) for length in range(0, 300) for _ in range(3)]
    items += [b"\0" * length for length in range(0, 260)] + [b"\xff" * length for length in range(0, 260)]
    rng.shuffle(items)
    return items


@pytest.mark.parametrize("seed", _SEEDS)
def test_hash64_of_every_length_is_xxhash(seed: int) -> None:
    items = _mixed_lengths()
    data, offsets = _column(items)
    expected = [xxhash.xxh3_64_intdigest(item, seed) for item in items]
    assert xxh3.hash64(data, offsets, seed).tolist() == expected


def test_hash128_of_every_length_is_xxhash() -> None:
    items = _mixed_lengths()
    data, offsets = _column(items)
    assert np.array_equal(xxh3.hash128(data, offsets), _expected128(items))


@pytest.mark.parametrize("length", [*range(0, 34), 63, 64, 65, 96, 97, 128, 129, 159, 160, 161, 239, 240, 241])
def test_inputs_of_one_length_are_read_at_a_stride(length: int) -> None:
    """Columns of one length take the strided reads; the buffer starts part-way into a larger one."""
    rng = random.Random(length)
    items = [rng.randbytes(length) for _ in range(100)]
    data, offsets = _column([b"x" * 3, *items])
    offsets = offsets[1:]  # the first input starts 3 bytes into the buffer
    assert xxh3.suits(offsets) == (length <= xxh3.MIDSIZE_MAX)
    assert xxh3.hash64(data, offsets, 7).tolist() == [xxhash.xxh3_64_intdigest(item, 7) for item in items]
    assert np.array_equal(xxh3.hash128(data, offsets), _expected128(items))


def test_columns_longer_than_a_block() -> None:
    keys = [f"rec-{number:09d}".encode() for number in range(70_001)]
    data, offsets = _column(keys)
    assert xxh3.hash64(data, offsets).tolist() == [xxhash.xxh3_64_intdigest(key) for key in keys]
    assert np.array_equal(xxh3.hash128(data, offsets), _expected128(keys))


@settings(max_examples=50)
@given(st.lists(st.binary(max_size=48), min_size=64, max_size=150), st.integers(0, 2**64 - 1))
def test_hashes_of_any_short_inputs(items: list[bytes], seed: int) -> None:
    data, offsets = _column(items)
    assert xxh3.hash64(data, offsets, seed).tolist() == [xxhash.xxh3_64_intdigest(item, seed) for item in items]
    assert np.array_equal(xxh3.hash128(data, offsets), _expected128(items))


def test_column_keyprints_and_pair_hashes_are_the_per_key_ones() -> None:
    """hashing's column paths that use it: keyprints of keys, fingerprint pairs of one length."""
    keys = [f"key-{number:05d}" for number in range(500)]
    column = pa.array(keys, pa.string())
    assert hashing.keyprint_array(column) == b"".join(map(hashing.keyprint, keys))
    contents = [bytes([number % 256]) * 16 for number in range(500)]
    total = hashing.fingerprint_of(column, pa.array(contents, pa.binary(16)))
    assert total == hashing.fingerprint_sum(keys, contents)
    offsets = columnar.value_offsets(column.cast(pa.large_binary()))
    assert xxh3.suits(offsets)
