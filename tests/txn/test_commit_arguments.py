"""A write's mode, message and metadata are checked before anything is written.

Found only when the commit record is built, a typo (``mode="Append"``) used to be taken
as upsert, write the manifest and indexes, and then fail with a pydantic error, leaving
them behind; an ingest ran ``fn`` over every input first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import litstore
from tests.conftest import tree_state

from ._workers import failing_first_slow_after, one_record

BAD_MODES: list[Any] = ["Append", "insert", "UPSERT", None, 1, ["append"]]
BAD_RECORD_ARGUMENTS: list[dict[str, Any]] = [
    {"message": 5},
    {"message": b"bytes"},
    {"metadata": "not a dict"},
    {"metadata": {1: "a key that is not text"}},
    {"metadata": {"value": object()}},
    {"metadata": {"value": b"\xff not text"}},
]


def _state(root: str) -> tuple[dict[str, str], set[str]]:
    """Every file with its hash, and every path (an empty directory shows too)."""
    return tree_state(Path(root)), {str(path.relative_to(root)) for path in Path(root).rglob("*")}


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    made = make_store(key="id")
    made.append([{"id": "a", "value": 1}])
    return made


@pytest.mark.parametrize("mode", BAD_MODES)
def test_commit_refuses_an_unknown_mode_before_writing(store: litstore.Store, mode: Any) -> None:
    staged = store.stage([{"id": "b", "value": 2}])
    before = _state(store.root)
    with pytest.raises(litstore.InvalidArgumentError, match=r"mode must be one of 'append', 'upsert', got"):
        store.commit([staged], mode=mode)
    assert _state(store.root) == before, "nothing written, the staged fragment kept"
    assert store.commit([staged]).number == 2, "the fragment still commits"


REFUSED = r"message must be|metadata must be|metadata has the key|metadata\["


@pytest.mark.parametrize("arguments", BAD_RECORD_ARGUMENTS)
def test_every_write_refuses_what_a_commit_record_cannot_hold(store: litstore.Store, arguments: dict[str, Any]) -> None:
    staged = store.stage([{"id": "b", "value": 2}])
    before = _state(store.root)
    writes: list[Callable[[], object]] = [
        lambda: store.commit([staged], **arguments),
        lambda: store.append([{"id": "c"}], **arguments),
        lambda: store.upsert([{"id": "a", "value": 3}], **arguments),
        lambda: store.delete(["a"], **arguments),
        lambda: store.ingest(one_record, [2, 3], num_workers=0, progress=False, **arguments),
    ]
    for write in writes:
        with pytest.raises(litstore.InvalidArgumentError, match=REFUSED):
            write()
        assert _state(store.root) == before
    assert litstore.open(store.root).version.number == 1


def test_commit_refuses_what_is_not_a_list_of_staged_fragments(store: litstore.Store) -> None:
    staged = store.stage([{"id": "b", "value": 2}])
    before = _state(store.root)
    for fragments in [staged, [{"id": "b"}], "fragments"]:
        with pytest.raises(litstore.InvalidArgumentError, match="list of StagedFragment"):
            store.commit(fragments)  # type: ignore[arg-type]
        assert _state(store.root) == before


@pytest.mark.integration
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("mode", ["Append", "insert", None])
def test_ingest_refuses_an_unknown_mode_before_fn_runs(
    store: litstore.Store, tmp_path: Path, mode: Any, num_workers: int
) -> None:
    """fn (which leaves a file for each input it runs on) never runs; the store is as it was."""
    ran = tmp_path / "ran"
    ran.mkdir()
    before = _state(store.root)
    with pytest.raises(litstore.InvalidArgumentError, match=r"mode must be one of 'append', 'upsert'"):
        store.ingest(failing_first_slow_after, [f"{ran}:{i}" for i in range(1, 5)], mode=mode, num_workers=num_workers)
    assert not list(ran.iterdir()), "fn ran"
    assert _state(store.root) == before


def test_staging_nothing_leaves_no_directory(store: litstore.Store) -> None:
    """``stage([])`` used to leave an empty ``fragments/<id>/`` directory that gc never removes."""
    before = _state(store.root)
    staged = store.stage([])
    assert len(staged) == 0
    assert _state(store.root) == before
    assert store.commit([staged]).number == 1, "an empty fragment commits nothing"
    assert _state(store.root) == before
