"""The public commit protocol: fragments staged anywhere, committed once as one version."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

import litstore
from litstore.format import layout

from ._workers import record, stage_range


def _fragment_files(root: Path, fragment: litstore.StagedFragment) -> list[Path]:
    return sorted((root / layout.fragment(fragment.transaction)).glob("*.bin"))


@pytest.mark.integration
def test_fragments_staged_in_two_processes_commit_as_one_version(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.8, val=0.2), chunk_bytes=2048)
    store.append([record(i) for i in range(0, 50)])
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        staged = pool.starmap(stage_range, [(store.root, 100, 180), (store.root, 200, 260)])
    assert {len(fragment) for fragment in staged} == {80, 60}
    assert store.version.number == 1, "staging commits nothing"
    assert litstore.open(store.root).version.number == 1

    version = store.commit(staged, message="two workers")
    assert version.number == 2
    assert version.added == 140 and version.operation == "append" and version.message == "two workers"
    assert set(version.fragments) == {fragment.transaction for fragment in staged}
    expected = {f"k{i:04d}": record(i) for i in [*range(0, 50), *range(100, 180), *range(200, 260)]}
    reopened = litstore.open(store.root)
    assert dict(reopened.items()) == expected
    assert reopened.verify(expected_keys=expected).ok


def test_a_staged_fragment_is_small_and_picklable(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=1024)
    fragment = store.stage([record(i) for i in range(40)])
    copy = pickle.loads(pickle.dumps(fragment))
    assert copy.transaction == fragment.transaction and len(copy) == 40
    assert "records=40" in repr(fragment)
    assert store.commit([copy]).added == 40


def test_duplicate_keys_across_fragments_commit_nothing(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([record(0)])
    first = store.stage([record(i) for i in range(1, 10)])
    second = store.stage([record(i) for i in range(5, 15)])
    with pytest.raises(litstore.DuplicateKeyError, match="k0005"):
        store.commit([first, second])
    assert store.version.number == litstore.open(store.root).version.number == 1
    with pytest.raises(litstore.DuplicateKeyError, match="already in the store"):
        store.commit([store.stage([record(0, rev=1)])])
    assert litstore.open(store.root).version.number == 1


def test_upsert_mode_drops_unchanged_rows_without_leaving_holes(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=1 << 20)
    store.append([record(i) for i in range(20)])
    # Half the staged records are unchanged: the staged chunk loses them, so its
    # changed records are moved into a new chunk instead of being listed with holes.
    # (The parent's replaced rows are marked dead in format 4, moved out in format 3.)
    fragment = store.stage([record(i, rev=1 if i % 2 else 0) for i in range(20)] + [record(50)])
    version = store.commit([fragment], mode="upsert")
    assert (version.added, version.replaced, version.removed) == (1, 10, 0)
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    assert not any(name.startswith(layout.fragment(fragment.transaction)) for name in listed)
    deletions = store.head().reader.deletions
    for chunks in store.chunks().values():
        assert sum(chunk.num_items - deletions.dead_count(chunk.filename) for chunk in chunks) == 21
    assert sum(deletions.dead_count(name) for name in listed) == (10 if store.config.writes_deletion_vectors else 0)
    expected = {f"k{i:04d}": record(i, rev=1 if i % 2 else 0) for i in range(20)} | {"k0050": record(50)}
    assert dict(litstore.open(store.root).items()) == expected
    assert store.verify(expected_keys=expected).ok


def test_commit_after_another_writer_rebases(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    staged = store.stage([record(i) for i in range(10)])
    litstore.open(store.root).append([record(i) for i in range(100, 105)])  # another writer wins version 1
    version = store.commit([staged])
    assert version.number == 2 and version.parent == 1
    assert len(litstore.open(store.root)) == 15


def test_an_uncommitted_fragment_is_invisible_and_gc_removes_it(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1024)
    fragment = store.stage([record(i) for i in range(30)])
    files = _fragment_files(tmp_path / "s", fragment)
    assert files and len(litstore.open(store.root)) == 0
    files = sorted((tmp_path / "s" / layout.fragment(fragment.transaction)).iterdir())  # its lease too
    old = 1_000_000_000  # older than its lease
    for path in files:
        os.utime(path, (old, old))
    removed = store.gc(dry_run=False).removed_files
    assert sorted(removed) == sorted(str(path.relative_to(tmp_path / "s")) for path in files)


def test_a_split_named_expired_works(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=litstore.HashSplit(expired=0.5, train=0.5))
    store.append([record(i) for i in range(40)])
    store.delete(["k0001"])
    reopened = litstore.open(store.root)
    assert len(reopened) == 39 and reopened.version.counts["expired"] > 0
    assert reopened.at(1)["k0001"] == record(1)
    assert reopened.verify().ok
    assert len(list(reopened.dataset(split="expired"))) == reopened.version.counts["expired"]
