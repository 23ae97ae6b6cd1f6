"""Chunk names in commit records: checked all at once, and never two names passed off as one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import litstore
from litstore.format import layout
from litstore.format.models import Version


def _chunk(number: int) -> str:
    fragment = f"{number:020x}"
    return f"fragments/{fragment}/chunk-{fragment}-0.bin"


def test_a_thousand_chunk_names_check_together() -> None:
    names = tuple(_chunk(number) for number in range(1_000))
    assert layout.check_chunks(names) == names
    assert layout.check_chunks(()) == ()


@pytest.mark.parametrize(
    "bad",
    [
        _chunk(1) + "\n" + _chunk(2),  # two good names in one string
        "../outside/secret.bin",
        "fragments/00000000000000000001/chunk-00000000000000000002-0.bin",  # another fragment's chunk
        _chunk(3) + "\n",
        "",
        7,
    ],
    ids=["two-in-one", "outside", "other-fragment", "trailing-newline", "empty", "not-a-string"],
)
def test_one_bad_name_among_many_is_refused_by_name(bad: Any) -> None:
    names = (*(_chunk(number) for number in range(500)), bad, *(_chunk(number) for number in range(500, 600)))
    with pytest.raises(ValueError, match="is not a chunk path") as caught:
        layout.check_chunks(names)
    assert repr(bad) in str(caught.value)


def test_a_commit_record_dropping_two_chunks_in_one_name_does_not_open(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    for key in "abc":
        store.append([{"id": key}])
    head = store.head()
    added = {chunk.filename for chunk in store.at(head.version.number - 1).chunks()["train"]}
    first, second = sorted(added)
    record = head.version.model_dump()
    with pytest.raises(ValueError, match="is not a chunk path"):
        Version.model_validate({**record, "dropped_chunks": [f"{first}\n{second}"]})
    assert Version.model_validate({**record, "dropped_chunks": [first, second]}).dropped_chunks == (first, second)


_NAME_CHARACTERS = "0123456789abcdefgz/-.\n\u0663"


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 120),
    digits=st.integers(1, 3),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(_NAME_CHARACTERS)), max_size=3),
)
def test_names_of_one_length_are_judged_as_the_regular_expression_judges_them(
    count: int, digits: int, edits: list[tuple[int, str]]
) -> None:
    """Column by column (past 4 KiB of names) or by the regular expression, every joined table gets one answer:
    one character changed anywhere (a digit where hex is wanted, the other fragment's id, a newline that
    makes two names of one, a non-ASCII digit) is caught as the expression catches it."""
    joined = list("\n".join(f"{_chunk(number)[:-6]}-{number % 10**digits:0{digits}d}.bin" for number in range(count)))
    for position, character in edits:
        joined[position % len(joined)] = character
    text = "".join(joined)
    assert layout.are_chunks(text) == (layout._CHUNK_LINES.fullmatch(text) is not None)


def test_a_thousand_names_with_one_wrong_character_are_refused() -> None:
    names = [_chunk(number) for number in range(1_000)]
    assert layout.are_chunks("\n".join(names))
    for position in (3, 15, 33, 45, 58, 61):  # fragments/, the fragment id, /chunk-, the chunk id, number, .bin
        wrong = list(names)
        wrong[700] = wrong[700][:position] + "G" + wrong[700][position + 1 :]
        assert not layout.are_chunks("\n".join(wrong)), position
