"""Chunk names in commit records: checked all at once, and never two names passed off as one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
