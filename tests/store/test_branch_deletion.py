"""Deleting a branch through the public API, on real files (and memory storage).

What must hold:

- a deleted branch is gone (no listing, no open, no files under ``branches/<name>/``),
  main's records and files are as they were, and the next gc removes the chunks only
  that branch listed;
- main, the branch a handle is on, and a branch other branches start from are refused;
- a writer of the branch whose commit record lands after the deletion is told (the
  record is removed again): no version is published where nobody can reach it;
- a deletion stopped part-way is finished by running it again, and a branch of the same
  name cannot be made over what it left.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore import InvalidArgumentError, VersionNotFoundError
from tests.conftest import tree_state

Record = dict[str, Any]


def _records(keys: range, value: int = 0) -> list[Record]:
    return [{"id": f"k{i:03d}", "value": value, "blob": bytes([i % 256]) * 40} for i in keys]


@pytest.fixture
def base(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id", chunk_bytes=2048)
    store.append(_records(range(40)))
    return store


def _chunk_files(store: litstore.Store | litstore.Snapshot) -> set[str]:
    return {chunk.filename for chunks in store.head().chunks().values() for chunk in chunks}


def test_a_deleted_branch_is_gone_and_gc_removes_what_only_it_held(base: litstore.Store) -> None:
    root = Path(base.root)
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(5, 15), 7))
    side.append(_records(range(100, 130)))
    side.tags.create("tried", side.version.number)
    only_side = _chunk_files(side) - _chunk_files(base)
    assert only_side
    main_files = {path: digest for path, digest in tree_state(root).items() if not path.startswith("branches/")}
    main_records = dict(base.items())

    base.branches.delete("side")
    assert list(base.branches) == [] and not (root / "branches" / "side").exists()
    with pytest.raises(VersionNotFoundError, match="no branch 'side'"):
        litstore.open(base.root, branch="side")
    assert {path: digest for path, digest in tree_state(root).items() if not path.startswith("branches/")} == (
        main_files
    )
    report = base.gc(dry_run=False, grace=timedelta(0))
    assert only_side <= set(report.removed_files)
    assert not any((root / name).exists() for name in only_side)
    reopened = litstore.open(base.root)
    assert dict(reopened.items()) == main_records
    reopened.verify().raise_if_failed()


def test_main_the_handle_s_own_branch_and_a_base_of_branches_are_refused(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(2), 3))
    side.branches.create("deeper")  # from side's own version 2: based on side
    with pytest.raises(InvalidArgumentError, match="main"):
        base.branches.delete("main")
    with pytest.raises(InvalidArgumentError, match="on branch 'side'"):
        side.branches.delete("side")
    with pytest.raises(InvalidArgumentError, match=r"'deeper'.*delete those first"):
        base.branches.delete("side")
    with pytest.raises(VersionNotFoundError, match="no branch 'nope'"):
        base.branches.delete("nope")
    side.branches.delete("deeper")  # a handle on a branch deletes another branch
    base.branches.delete("side")
    assert list(base.branches) == []


def test_a_commit_landing_after_the_deletion_is_refused_not_published(base: litstore.Store) -> None:
    base.branches.create("side")
    writer = litstore.open(base.root, branch="side")
    writer.upsert(_records(range(3), 1))
    number = writer.version.number
    base.branches.delete("side")  # while the writer's handle is open
    with pytest.raises(VersionNotFoundError, match=f"deleted while version {number + 1} was being committed"):
        writer.upsert(_records(range(3), 2))
    assert not (Path(base.root) / "branches" / "side" / "versions" / f"{number + 1:08d}.json").exists()
    assert list(base.branches) == []
    assert sorted(path for path in tree_state(Path(base.root)) if path.startswith("branches/")) == []
    made = base.branches.create("side")  # the name again: a new branch, none of the old one's versions
    fresh = litstore.open(base.root, branch="side")
    assert fresh.version.number == made.from_version == 1
    assert dict(fresh.items()) == dict(base.items())


def test_a_stopped_deletion_is_finished_by_running_it_again(base: litstore.Store) -> None:
    base.branches.create("side")
    litstore.open(base.root, branch="side").upsert(_records(range(3), 1))
    (Path(base.root) / "branches" / "side" / "branch.json").unlink()  # stopped after its first step
    assert list(base.branches) == []
    with pytest.raises(InvalidArgumentError, match=r"store\.branches\.delete\('side'\)"):
        base.branches.create("side")  # over the old branch's versions: refused
    base.branches.delete("side")
    assert not (Path(base.root) / "branches" / "side").exists()
    with pytest.raises(VersionNotFoundError):
        base.branches.delete("side")


def test_branch_deletion_on_memory_storage() -> None:
    store = litstore.Store.create(f"memory://deletion-{id(object())}", key="id")
    store.append(_records(range(10)))
    store.branches.create("side")
    litstore.open(store.root, branch="side").upsert(_records(range(2), 5))
    store.branches.delete("side")
    assert list(store.branches) == []
    assert store.storage.walk("branches") == []
