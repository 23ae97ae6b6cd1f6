"""Branches, merge and restore through the public API, on real files (and memory storage).

What must hold:

- a branch's writes never change main, and main's never change a branch (a hypothesis
  search over interleaved writes on both, checked against a dict per line);
- a store without branches writes nothing under ``branches/``, and a branch's writes
  leave main's ``versions/`` as it was;
- ``merge`` applies the source's upserts and deletes by key; a key both lines changed
  differently is a ``MergeConflictError`` naming it, and nothing is committed; a key both
  changed to the same content is no conflict; a second merge judges from the first;
- ``restore`` gives a new version with the old version's exact records and fingerprint,
  which verifies and takes further writes (formats 3 and 5, deletion vectors revived);
- gc of any line keeps what every other line's versions need.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import litstore
from litstore import InvalidArgumentError, MergeConflictError, VersionNotFoundError
from tests.conftest import empty_memory_store, tree_state

Record = dict[str, Any]


def _records(keys: range, value: int = 0) -> list[Record]:
    return [{"id": f"k{i:03d}", "value": value, "blob": bytes([i % 256]) * 40} for i in keys]


def _content(snapshot: litstore.Store | litstore.Snapshot) -> dict[Any, Record]:
    return dict(snapshot.items())


@pytest.fixture
def base(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id", chunk_bytes=2048)
    store.append(_records(range(40)))
    return store


# -- isolation ------------------------------------------------------------------------

_STEP = st.tuples(
    st.sampled_from(["main", "side"]), st.sampled_from(["upsert", "delete"]), st.integers(0, 11), st.integers(0, 3)
)


@settings(max_examples=10, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=8))
def test_writes_on_one_line_never_change_the_other(steps: list[tuple[str, str, int, int]]) -> None:
    root = f"memory://isolation-{uuid.uuid4().hex}"
    main = litstore.Store.create(root, key="id", chunk_bytes=1024)
    try:
        main.append(_records(range(12)))
        main.branches.create("side")
        lines = {"main": main, "side": litstore.open(root, branch="side")}
        models = {name: _content(store) for name, store in lines.items()}
        for line, operation, number, value in steps:
            store, model = lines[line], models[line]
            key = f"k{number:03d}"
            if operation == "upsert":
                record = {"id": key, "value": value, "blob": b"x"}
                store.upsert([record])
                model[key] = record
            else:
                store.delete([key], missing_ok=True)
                model.pop(key, None)
            for name in lines:
                assert _content(litstore.open(root, branch=name)) == models[name], (name, steps)
        for store in lines.values():
            store.verify().raise_if_failed()
    finally:
        empty_memory_store(main)


def test_a_store_without_branches_writes_nothing_under_branches(base: litstore.Store) -> None:
    base.upsert(_records(range(5), 1))
    base.delete(["k007"])
    assert not (Path(base.root) / "branches").exists()
    assert dict(base.branches) == {}
    assert base.branch == "main"


def test_branch_writes_leave_main_s_files_as_they_were(base: litstore.Store) -> None:
    base.branches.create("side")
    before = tree_state(Path(base.root) / "versions")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(3), 7))
    side.delete(["k010"])
    side.append(_records(range(100, 103)))
    assert tree_state(Path(base.root) / "versions") == before
    assert [v.number for v in side.versions()] == [0, 1, 2, 3, 4]
    assert [v.number for v in litstore.open(base.root).versions()] == [0, 1]
    assert side.version.number == 4 and base.refresh().number == 1


def test_a_branch_shares_its_start_version_s_files_and_numbers_on_from_it(base: litstore.Store) -> None:
    base.upsert(_records(range(2), 5))
    made = base.branches.create("side", from_=1)
    assert (made.base, made.from_version) == ("main", 1)
    side = base.at("branch:side")
    assert side.version == base.at(1).version  # the very commit record of main's version 1
    assert _content(side) == _content(base.at(1))
    version = litstore.open(base.root, branch="side").upsert(_records(range(1), 9))
    assert version.number == 2 and version.parent == 1
    assert _content(base.at(2)) != _content(base.at("branch:side"))  # main's 2 and side's 2 are two commits


def test_a_branch_of_a_branch_reads_each_line_s_versions(base: litstore.Store) -> None:
    base.branches.create("a")
    a = litstore.open(base.root, branch="a")
    a.upsert(_records(range(1), 1))  # a's 2
    a.branches.create("b")
    b = litstore.open(base.root, branch="b")
    assert (b.branches["b"].base, b.branches["b"].from_version) == ("a", 2)
    b.upsert(_records(range(1, 2), 2))  # b's 3
    a.upsert(_records(range(2, 3), 3))  # a's 3
    base.upsert(_records(range(3, 4), 4))  # main's 2
    assert b["k000"]["value"] == 1 and b["k001"]["value"] == 2 and b["k002"]["value"] == 0
    assert b["k003"]["value"] == 0 and base["k003"]["value"] == 4
    assert _content(b.at(1)) == _content(base.at(1))
    b.verify().raise_if_failed()


def test_branch_arguments_are_checked(base: litstore.Store) -> None:
    with pytest.raises(InvalidArgumentError, match="main"):
        base.branches.create("main")
    with pytest.raises(InvalidArgumentError, match="branch name"):
        base.branches.create("no/slashes")
    base.branches.create("side", from_=0)
    assert base.branches.create("side", from_=0).from_version == 0  # the same start: the same branch
    with pytest.raises(InvalidArgumentError, match="never moves"):
        base.branches.create("side", from_=1)
    with pytest.raises(VersionNotFoundError, match="no branch 'nope'"):
        litstore.open(base.root, branch="nope")
    with pytest.raises(VersionNotFoundError):
        base.at("branch:nope")
    with pytest.raises(VersionNotFoundError):
        base.branches.create("later", from_=9)
    with pytest.raises(InvalidArgumentError, match="into itself"):
        base.merge("side", into="side")


def test_a_branch_store_and_snapshot_pickle_as_that_branch(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(1), 3))
    again = pickle.loads(pickle.dumps(side))
    assert again.branch == "side" and again.version == side.version and again["k000"]["value"] == 3
    snapshot = pickle.loads(pickle.dumps(side.head()))
    assert snapshot.version == side.version
    assert litstore.open(side.root)["k000"]["value"] == 3  # ROOT#branch=side opens the branch


def test_branches_on_memory_storage() -> None:
    root = f"memory://branches-{uuid.uuid4().hex}"
    store = litstore.Store.create(root, key="id")
    try:
        store.append(_records(range(5)))
        store.branches.create("side")
        side = litstore.open(root, branch="side")
        side.delete(["k001"])
        assert "k001" in store and "k001" not in side
        store.merge("side")
        assert "k001" not in store
        store.verify().raise_if_failed()
    finally:
        empty_memory_store(store)


# -- merge ------------------------------------------------------------------------------


def test_merge_applies_the_branch_s_changes_by_key(base: litstore.Store) -> None:
    base.branches.create("relabel")
    side = litstore.open(base.root, branch="relabel")
    side.upsert(_records(range(0, 5), 1))
    side.delete(["k030", "k031"])
    side.append(_records(range(100, 103)))
    base.upsert(_records(range(20, 22), 2))  # main changes other keys meanwhile
    version = base.merge("relabel", message="relabelled")
    assert version.operation == "merge" and version.message == "relabelled"
    assert version.metadata["merged_from"] == {"branch": "relabel", "version": side.version.number}
    assert (version.added, version.replaced, version.removed) == (3, 5, 2)
    expected = _content(side)
    expected.update({record["id"]: record for record in _records(range(20, 22), 2)})
    assert _content(base) == expected
    assert base.version == version
    base.verify().raise_if_failed()
    # The records were copied as stored: each merged key has the branch's content hash on main.
    query = "SELECT key, content_hash FROM manifest WHERE key < 'k005' OR key >= 'k100' ORDER BY key"
    assert base.sql(query).to_pylist() == side.sql(query).to_pylist()


def test_a_key_both_lines_changed_is_a_conflict_and_nothing_is_committed(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(0, 4), 1))
    side.delete(["k010"])
    base.upsert(_records(range(2, 3), 2))  # same key, other content
    base.delete(["k003"])  # deleted here, changed there
    base.upsert(_records(range(10, 11), 5))  # changed here, deleted there
    before_main, before_side = base.version, side.version
    with pytest.raises(MergeConflictError) as caught:
        base.merge("side")
    assert caught.value.keys == ["k002", "k003", "k010"]
    assert "k002" in str(caught.value) and "nothing was committed" in str(caught.value)
    assert isinstance(caught.value, litstore.ConflictError)
    assert litstore.open(base.root).version == before_main
    assert litstore.open(base.root, branch="side").version == before_side


def test_keys_both_lines_changed_alike_are_no_conflict(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(0, 3), 1))
    side.delete(["k020"])
    base.upsert(_records(range(0, 2), 1))  # the same new content
    base.delete(["k020"])
    version = base.merge("side")
    assert (version.added, version.replaced, version.removed) == (0, 1, 0)  # only k002 was left to apply
    assert _content(base) == _content(side)


def test_a_second_merge_judges_from_the_first(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.upsert(_records(range(0, 2), 1))
    base.merge("side")
    side.upsert(_records(range(0, 1), 2))  # the branch keeps working on a key it already merged
    version = base.merge("side")
    assert version.replaced == 1 and base["k000"]["value"] == 2
    assert base.merge("side") == version  # nothing new: nothing committed


def test_merge_main_into_a_branch(base: litstore.Store) -> None:
    base.branches.create("side")
    base.upsert(_records(range(5, 6), 3))
    litstore.open(base.root, branch="side").upsert(_records(range(6, 7), 4))
    version = base.merge("main", into="side")
    side = litstore.open(base.root, branch="side")
    assert side.version == version and side["k005"]["value"] == 3 and side["k006"]["value"] == 4
    assert base["k006"]["value"] == 0


# -- restore ----------------------------------------------------------------------------


@pytest.mark.parametrize("format_version", [3, 5])
def test_restore_gives_the_old_version_s_records_and_fingerprint(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    store = make_store(key="id", chunk_bytes=1024, format_version=format_version)
    store.append(_records(range(30)))
    old = store.version
    store.upsert(_records(range(0, 10), 1))
    store.delete([f"k{i:03d}" for i in range(10, 20)])
    store.append(_records(range(50, 55)))
    store.compact()
    before = store.version
    restored = store.restore(old.number, message="back to 1")
    assert restored.number == before.number + 1 and restored.operation == "restore"
    assert restored.fingerprint == old.fingerprint and restored.counts == old.counts
    assert restored.metadata["restored_from"] == old.number
    assert _content(store) == _content(store.at(old.number))
    assert _content(litstore.open(store.root)) == _content(store.at(old.number))
    store.verify().raise_if_failed()
    assert store.diff(before.number).counts == store.at(old.number).diff(before.number).counts
    assert store.restore(old.number) == restored  # already there: nothing committed
    # The restored version takes further writes like any other.
    store.upsert(_records(range(12, 14), 9))
    store.delete(["k001"])
    store.verify().raise_if_failed()
    assert store["k012"]["value"] == 9 and "k001" not in store and "k015" in store


def test_restore_on_a_branch_commits_on_the_branch(base: litstore.Store) -> None:
    base.branches.create("side")
    side = litstore.open(base.root, branch="side")
    side.delete([f"k{i:03d}" for i in range(10)])
    restored = side.restore(1)
    assert restored.number == 3 and side.version == restored
    assert _content(side) == _content(base) and base.version.number == 1


# -- gc ---------------------------------------------------------------------------------


def test_gc_of_main_keeps_what_branches_need(base: litstore.Store) -> None:
    base.upsert(_records(range(0, 5), 1))  # main 2
    base.branches.create("side")  # from 2
    side = litstore.open(base.root, branch="side")
    for round_ in range(3):
        side.upsert(_records(range(round_, round_ + 10), 10 + round_))
        side.delete([f"k{30 + round_:03d}"])
    for round_ in range(3):
        base.upsert(_records(range(round_, round_ + 10), 20 + round_))
        base.delete([f"k{35 + round_:03d}"])
    models = {v.number: _content(side.at(v.number)) for v in side.versions() if v.number >= 2}
    report = base.gc(keep_last=1, dry_run=False, grace=timedelta(0))
    assert 2 in report.kept_versions  # the branch point
    assert report.removed_files  # something went: main's old versions
    for number, model in models.items():
        assert _content(litstore.open(base.root, branch="side").at(number)) == model
        litstore.open(base.root, branch="side").verify(number).raise_if_failed()
    base.verify().raise_if_failed()
    # And the branch's own gc keeps main's versions whole.
    main_now = _content(base)
    side.gc(keep_last=1, dry_run=False, grace=timedelta(0))
    assert _content(litstore.open(base.root)) == main_now
    litstore.open(base.root).verify().raise_if_failed()
    assert [v.number for v in litstore.open(base.root, branch="side").versions()] == [2, side.version.number]


def test_a_damaged_branch_record_is_an_integrity_error(base: litstore.Store) -> None:
    base.branches.create("side")
    record = Path(base.root) / "branches" / "side" / "branch.json"
    record.write_text(record.read_text().replace('"from_version": 1', '"from_version": -3'))
    with pytest.raises(litstore.IntegrityError, match=r"branch record branches/side/branch\.json is damaged"):
        litstore.open(base.root, branch="side")
    record.write_text(record.read_text().replace('"name": "side"', '"name": "other"'))
    with pytest.raises(litstore.IntegrityError):
        base.branches["side"]
    assert litstore.open(base.root).version.number == 1  # main reads as before
