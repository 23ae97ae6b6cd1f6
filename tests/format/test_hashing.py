"""The column-wise hashes are the per-key ones: key_hash_array and fingerprint_of."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
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
