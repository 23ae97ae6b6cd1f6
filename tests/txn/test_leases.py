"""Staged fragments under gc: a commit never publishes chunks that are not there.

Each test builds the case for real (fragments staged on disk, gc run through the public
API, files aged with ``os.utime``) and checks that either the commit works and reads
back, or it raises ``StagedFragmentExpiredError`` and the store is exactly as it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout
from litstore.storage import Storage
from litstore.txn import leases
from tests.conftest import tree_state

DAY = 24 * 3600


def _record(i: int, rev: int = 0) -> dict[str, Any]:
    return {"id": f"k{i:04d}", "rev": rev, "text": f"value {i}.{rev} " * 8}


def _fragment_files(store: litstore.Store, fragment: litstore.StagedFragment) -> list[Path]:
    return sorted((Path(store.root) / layout.fragment(fragment.transaction)).iterdir())


def _age(paths: list[Path], seconds: float) -> None:
    when = time.time() - seconds
    for path in paths:
        os.utime(path, (when, when))


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id", chunk_bytes=2048)
    store.append([_record(i) for i in range(20)])
    return store


def test_a_long_job_and_a_routine_gc_commit_a_readable_version(store: litstore.Store) -> None:
    """Staged two hours before its commit (past gc's grace), the fragment is leased: gc leaves it."""
    staged = store.stage([_record(i) for i in range(100, 130)])
    _age(_fragment_files(store, staged), 2 * 3600)
    report = store.gc(dry_run=False)
    assert not [path for path in report.removed_files if staged.transaction in path]
    version = store.commit([staged])
    reopened = litstore.open(store.root)
    assert reopened.version.number == version.number == 2
    assert reopened.get_many([f"k{i:04d}" for i in range(100, 130)]) == [_record(i) for i in range(100, 130)]
    assert reopened.verify().ok
    assert not [path for path in _fragment_files(store, staged) if path.name.startswith("lease-")], "released"


def test_a_fragment_past_its_lease_is_removed_and_its_commit_refused(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 130)], lease=timedelta(hours=1))
    _age(_fragment_files(store, staged), 2 * 3600)
    report = store.gc(dry_run=False)
    assert _fragment_files_or_none(store, staged) == []
    assert any(staged.transaction in path for path in report.removed_files)
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.StagedFragmentExpiredError, match="Stage the records again"):
        store.commit([staged])
    assert tree_state(Path(store.root)) == before
    assert litstore.open(store.root).version.number == 1


def test_a_fragment_of_another_store_is_refused(
    store: litstore.Store, make_store: Callable[..., litstore.Store]
) -> None:
    other = make_store(key="id", chunk_bytes=2048)
    staged = other.stage([_record(i) for i in range(100, 110)])
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.StagedFragmentExpiredError, match="staged by another store"):
        store.commit([staged])
    assert tree_state(Path(store.root)) == before


def test_a_fragment_committed_then_expired_cannot_be_committed_again(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 110)])
    store.commit([staged])
    store.upsert([_record(i, rev=1) for i in range(100, 110)])  # its chunks leave the version
    store.gc(dry_run=False, keep_last=1)  # and go with the version that listed them
    assert not [path for path in _fragment_files_or_none(store, staged) if path.suffix == ".bin"]
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.StagedFragmentExpiredError):
        store.commit([staged], mode="upsert")
    assert tree_state(Path(store.root)) == before
    reopened = litstore.open(store.root)
    assert reopened.get_many([f"k{i:04d}" for i in range(100, 110)]) == [_record(i, rev=1) for i in range(100, 110)]
    assert reopened.verify().ok


def _fragment_files_or_none(store: litstore.Store, fragment: litstore.StagedFragment) -> list[Path]:
    directory = Path(store.root) / layout.fragment(fragment.transaction)
    return sorted(directory.iterdir()) if directory.exists() else []


def test_a_chunk_of_another_size_is_refused(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 130)])
    chunk = next(path for path in _fragment_files(store, staged) if path.suffix == ".bin")
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(litstore.StagedFragmentExpiredError, match="changed size"):
        store.commit([staged])
    assert litstore.open(store.root).version.number == 1


def test_a_gc_whose_host_clock_runs_ahead_keeps_a_fresh_fragment(
    store: litstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc judges ages by the storage's clock: a host two days ahead cannot make fresh files old."""
    staged = store.stage([_record(i) for i in range(100, 130)])
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 2 * DAY)
    report = store.gc(dry_run=False, grace=timedelta(minutes=1))
    monkeypatch.undo()
    assert not [path for path in report.removed_files if staged.transaction in path]
    store.commit([staged])
    assert litstore.open(store.root).verify().ok


def test_a_commit_refuses_a_fragment_gc_marked(store: litstore.Store) -> None:
    """gc marked the fragment before the commit leased it: the commit publishes nothing."""
    staged = store.stage([_record(i) for i in range(100, 110)])
    mark = Path(store.root) / layout.doomed(staged.transaction, layout.new_transaction())
    mark.write_bytes(b"{}")
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.StagedFragmentExpiredError, match="being removed by gc"):
        store.commit([staged])
    assert tree_state(Path(store.root)) == before
    mark.unlink()  # gc backed off: the fragment commits
    store.commit([staged])
    assert len(litstore.open(store.root)) == 30


class _LeasingOnMark:
    """A storage through which gc runs while a commit leases the fragment just as gc marks it."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.marked: list[str] = []

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        name = path.rsplit("/", 1)[-1]
        if layout.is_doomed_mark(name):
            fragment = path.split("/")[1]
            leases.take(self._inner, fragment, layout.new_transaction(), 3600)  # the rival commit, first
            self.marked.append(fragment)
        self._inner.write(path, data, durable=durable)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_gc_leaves_a_fragment_a_commit_leased_while_gc_looked(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 130)], lease=timedelta(hours=1))
    _age(_fragment_files(store, staged), 2 * 3600)  # its lease ran out: gc will want it
    head = store.head()
    proxy = _LeasingOnMark(head.storage)
    collecting = litstore.Store(litstore.Snapshot(proxy, head.config, head.version, head.model))  # type: ignore[arg-type]
    report = collecting.gc(dry_run=False)
    assert proxy.marked == [staged.transaction]
    assert not [path for path in report.removed_files if path.endswith(".bin") and staged.transaction in path]
    assert not [path for path in _fragment_files(store, staged) if path.name.startswith("doomed-")]
    store.commit([staged])
    reopened = litstore.open(store.root)
    assert len(reopened) == 50 and reopened.verify().ok


def test_break_leases_removes_fresh_debris_and_its_commit_is_refused(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 110)])
    assert store.gc(dry_run=False, grace=timedelta(0)).removed_files == []
    report = store.gc(dry_run=False, grace=timedelta(0), break_leases=True)
    assert any(staged.transaction in path for path in report.removed_files)
    assert not (Path(store.root) / layout.fragment(staged.transaction)).exists()
    with pytest.raises(litstore.StagedFragmentExpiredError):
        store.commit([staged])


def test_staging_nothing_leaves_no_files(store: litstore.Store) -> None:
    before = tree_state(Path(store.root))
    staged = store.stage([])
    assert len(staged) == 0
    assert tree_state(Path(store.root)) == before
    assert not (Path(store.root) / layout.fragment(staged.transaction)).exists()


def test_a_lease_must_be_a_positive_timedelta(store: litstore.Store) -> None:
    before = tree_state(Path(store.root))
    for bad in (timedelta(0), timedelta(days=400), 3600, "1h"):
        with pytest.raises(litstore.InvalidArgumentError, match="lease"):
            store.stage([_record(1000)], lease=bad)  # type: ignore[arg-type]
    assert tree_state(Path(store.root)) == before


def test_a_planted_lease_protects_only_its_own_fragment_and_not_forever(store: litstore.Store) -> None:
    staged = store.stage([_record(i) for i in range(100, 110)], lease=timedelta(hours=1))
    planted = Path(store.root) / layout.lease(staged.transaction, "f" * 20)
    planted.write_bytes(b'{"seconds": 1e30, "not": "a lease"}')
    _age(_fragment_files(store, staged), 2 * DAY)
    report = store.gc(dry_run=False)
    assert any(staged.transaction in path for path in report.removed_files)


class _RecordingWrites:
    """A storage that records the paths written through it."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.written: list[str] = []

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        self.written.append(path)
        self._inner.write(path, data, durable=durable)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _recording(store: litstore.Store) -> tuple[litstore.Store, _RecordingWrites]:
    head = store.head()
    proxy = _RecordingWrites(head.storage)
    return litstore.Store(litstore.Snapshot(proxy, head.config, head.version, head.model)), proxy  # type: ignore[arg-type]


def _leases_written(proxy: _RecordingWrites) -> list[str]:
    return [path for path in proxy.written if layout.is_lease(path.rsplit("/", 1)[-1])]


def test_an_append_relies_on_the_lease_it_just_took(store: litstore.Store) -> None:
    """Staged and committed in one call: the stager's lease, written moments before, protects the commit."""
    recording, proxy = _recording(store)
    recording.append([_record(i) for i in range(100, 110)])
    assert len(_leases_written(proxy)) == 1, "the stager's lease only"
    assert not list(Path(store.root).glob("fragments/*/lease-*")), "released"
    assert len(litstore.open(store.root)) == 30


def test_a_commit_long_after_staging_takes_its_own_lease(store: litstore.Store) -> None:
    """A tenth of the lease later, the stager's lease is not fresh: the commit leases the fragment again."""
    recording, proxy = _recording(store)
    staged = recording.stage([_record(i) for i in range(100, 110)], lease=timedelta(seconds=2))
    time.sleep(0.3)
    recording.commit([staged])
    written = _leases_written(proxy)
    assert len(written) == 2 and written[0].endswith(f"lease-{staged.transaction}.json")
    assert not list(Path(store.root).glob("fragments/*/lease-*")), "both released"
    assert len(litstore.open(store.root)) == 30


def test_a_fragment_staged_by_another_process_is_leased_by_its_commit(store: litstore.Store) -> None:
    """The stager's lease counts only in the process that wrote it (a Ray task's fragment is leased again)."""
    staged = store.stage([_record(i) for i in range(100, 110)])
    leases.forget(store.storage, staged.transaction)  # what a committing process that did not stage it knows
    recording, proxy = _recording(store)
    recording.commit([staged])
    assert len(_leases_written(proxy)) == 1, "the commit's own"
    assert not list(Path(store.root).glob("fragments/*/lease-*")), "both released"
