"""What an audit keeps per record (:mod:`litstore.ops.audit_rows`): groups found from digests alone, keys read back."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.ops import audit_rows
from litstore.ops.audit_rows import AuditedRows, KeyColumn, duplicate_groups

# Few distinct words, so that first words collide while second words differ: a 64-bit collision is not a duplicate.
_WORDS = st.integers(min_value=0, max_value=3).map(lambda word: (word * 0x9E3779B97F4A7C15) % 2**64)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_WORDS, _WORDS, st.integers(0, 2)), max_size=60), st.integers(0, 4))
def test_duplicate_groups_are_the_rows_of_equal_digests(rows: list[tuple[int, int, int]], examples: int) -> None:
    digests = np.array([[first, second] for first, second, _ in rows], dtype=np.uint64).reshape(-1, 2)
    splits = np.array([split for _, _, split in rows], dtype=np.uint16)
    model: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, (first, second, _) in enumerate(rows):
        model[first, second].append(row)
    expected = sorted((group for group in model.values() if len(group) > 1), key=lambda group: (-len(group), group))
    found = duplicate_groups(digests, splits)
    got = [found.rows[start : start + size].tolist() for start, size in zip(found.starts, found.sizes, strict=True)]
    assert sorted(got) == sorted(expected)
    assert [group.tolist() for group in found.largest(examples)] == expected[:examples]
    across = [group for group in expected if len({rows[row][2] for row in group}) > 1]
    assert int(found.across.sum()) == len(across)
    assert [group.tolist() for group in found.largest(examples, across=True)] == across[:examples]


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_keys_come_back_from_the_key_column_in_any_order(monkeypatch: pytest.MonkeyPatch, key_type: str) -> None:
    monkeypatch.setattr(audit_rows, "_FLUSH", 64)  # many appends to the key file
    keys = [f"key-{i}-é" if key_type == "str" else i * 7 - 500 for i in range(1000)] + (
        ["", "\udcff"] if key_type == "str" else []
    )
    column = KeyColumn(key_type)  # type: ignore[arg-type]
    for key in keys:
        column.add(key)
    assert len(column) == len(keys)
    rows = np.array([len(keys) - 1, 0, 500, 3, 3, len(keys) - 2])
    assert column.take(rows) == [keys[row] for row in rows]
    assert column.take(np.zeros(0, np.int64)) == []
    column.close()


def test_by_split_names_each_split_s_keys_sorted() -> None:
    rows = AuditedRows("str")
    for split, key in [("train", "b"), ("test", "z"), ("train", "a"), ("val", "m")]:
        rows.add(split, key, bytes(16))
    assert rows.by_split(np.array([0, 1, 2])) == {"test": ("z",), "train": ("a", "b")}
    assert rows.split_names() == ["train", "test", "val"]
    rows.close()
