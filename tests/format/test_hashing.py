"""The column-wise hashes are the per-key ones: key_hash_array and fingerprint_of."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.format import hashing

_str_keys = st.lists(st.text(max_size=20), unique=True, max_size=40)
_int_keys = st.lists(st.integers(-(2**63), 2**63 - 1), unique=True, max_size=40)


@given(st.one_of(_str_keys, _int_keys), st.data())
def test_column_hashes_equal_the_per_key_ones(keys: list[str] | list[int], data: st.DataObject) -> None:
    contents = [data.draw(st.binary(min_size=16, max_size=16)) for _ in keys]
    column = pa.array(keys, pa.int64() if keys and isinstance(keys[0], int) else pa.string())
    assert hashing.key_hash_array(column).tolist() == hashing.key_hashes(keys).tolist()
    assert hashing.fingerprint_of(column, pa.array(contents, pa.binary(16))) == hashing.fingerprint_sum(keys, contents)
    split = len(keys) // 2
    chunked = pa.chunked_array([column.slice(0, split), column.slice(split)])
    assert hashing.key_hash_array(chunked).tolist() == hashing.key_hashes(keys).tolist()


def test_column_hashes_of_more_keys_than_one_slice() -> None:
    keys = [f"key-{i}-é" for i in range(70_001)]  # past key_hash_array's slice of 8,192 rows, non-ASCII
    column = pa.array(keys, pa.string())
    assert hashing.key_hash_array(column).tolist() == hashing.key_hashes(keys).tolist()
    assert hashing.key_hash_array(column.slice(3)).tolist() == hashing.key_hashes(keys[3:]).tolist()


@given(st.lists(st.binary(max_size=600), max_size=30), st.integers(0, 3), st.sampled_from([0, 4]))
def test_content_hashes_are_the_per_item_ones(items: list[bytes], start: int, skip: int) -> None:
    """Both ways of hashing a column (bytes from Arrow for small items, buffer slices otherwise), on a sliced column."""
    column = pa.array([b"\0" * skip + item for item in items], pa.large_binary()).slice(min(start, len(items)))
    expected = [hashing.content_hash(item) for item in items[min(start, len(items)) :]]
    assert hashing.content_hashes(column, skip=skip) == expected


@settings(deadline=None)
@given(
    st.integers(0, 230),
    st.integers(0, 200),
    st.integers(0, 5),
    st.sampled_from([pa.string(), pa.large_string(), pa.int64(), pa.int32()]),
    st.randoms(use_true_random=False),
)
def test_pair_hashes_of_keys_of_one_width_are_the_per_key_ones(
    width: int, count: int, start: int, key_type: pa.DataType, random: Any
) -> None:
    """Keys all one width (ids, int keys) take the fixed-stride path: the same pairs, on sliced columns too,
    whether the column-wise hash or one xxhash call each (below 64 rows) runs."""
    if pa.types.is_integer(key_type):
        low = -(2 ** (key_type.bit_width - 1))
        keys: list[Any] = [random.randrange(low, -low) for _ in range(count + start)]
    else:
        keys = ["".join(random.choice("ab\u00e9") for _ in range(width)) for _ in range(count + start)]
        keys = [key.encode()[:width].decode(errors="ignore").ljust(width, "x") for key in keys]
    contents = [random.randbytes(16) for _ in keys]
    column = pa.array(keys, key_type).slice(start)
    hashes = pa.array(contents, pa.binary(16)).slice(start)
    expected = [hashing.pair_hash(key, content).to_bytes(16, "big") for key, content in zip(keys, contents)][start:]
    assert [bytes(row) for row in hashing.pair_hashes(column, hashes)] == expected
