"""gc is restartable: a gc killed (SIGKILL) at any step leaves every listed version readable.

A child process runs ``gc(keep_last=1, grace=0)`` on a copy of a store with five
versions, an uncommitted fragment and files a killed writer left behind, and kills
itself just before its N-th mutating storage call (a checkpoint, a tombstone, a file
deletion), or after the last one. The steps are learned from one uninterrupted run.

After each kill: every version the store still lists opens and reads exactly the
records it read before gc; a second gc finishes without error and expires what the
first meant to; and the store is then exactly what one uninterrupted gc leaves.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state
from tests.txn.test_writer_crash import MUTATING, KillingStorage

pytestmark = pytest.mark.integration

PARALLEL = 4
LONG_AGO = time.time() - 3 * 3600
Record = dict[str, Any]
#: Files killed writes left behind: one old (gc removes it), one fresh (kept until it is older than the grace).
OLD_TEMPORARY = f"{layout.FRAGMENTS}/.tmp-{'a' * 32}-chunk-x.bin"
FRESH_TEMPORARY = f"{layout.MANIFESTS}/.tmp-{'b' * 32}-00000009-x.parquet"


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "text": f"value {i}.{rev} " * 4}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[Any, Record]]]:
    """Versions 1..5 (no checkpoint but the first), debris, everything old; what each version reads."""
    root = tmp_path_factory.mktemp("gc-crash") / "base"
    store = litstore.Store.create(root, splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=1024)
    store.append([_record(i) for i in range(40)])
    store.upsert([_record(i, rev=1) for i in range(0, 40, 6)] + [_record(i) for i in range(40, 50)])
    store.delete([f"k{i:03d}" for i in range(1, 50, 9)])
    store.append([_record(i) for i in range(60, 70)])
    store.upsert([_record(i, rev=2) for i in range(60, 70, 3)])
    store.stage([_record(i) for i in range(200, 210)], lease=timedelta(hours=1))  # a writer that never committed
    contents = {version.number: dict(store.at(version.number).items()) for version in store.versions()}
    (root / OLD_TEMPORARY).write_bytes(b"half a chunk")
    for path in root.rglob("*"):
        os.utime(path, (LONG_AGO, LONG_AGO), follow_symlinks=False)
    (root / FRESH_TEMPORARY).write_bytes(b"a write still in progress")
    return root, contents


def _gc(root: str, kill_at: int | None, when: str) -> list[tuple[str, str]]:
    """Run gc(keep_last=1, grace=0) on ``root`` through a KillingStorage; its mutating calls."""
    head = litstore.open(root).head()
    killing = KillingStorage(head.storage, kill_at, when)
    store = litstore.Store(litstore.Snapshot(killing, head.config, head.version, head.model))  # type: ignore[arg-type]
    store.gc(dry_run=False, keep_last=1, grace=timedelta(0))
    return killing.calls


def _crash(root: str, kill_at: int, when: str) -> None:
    _gc(root, kill_at, when)
    os._exit(3)  # the kill point was never reached


def test_gc_killed_at_any_step_leaves_readable_versions_and_the_next_gc_finishes(
    base: tuple[Path, dict[int, dict[Any, Record]]], tmp_path: Path, forkserver: multiprocessing.context.BaseContext
) -> None:
    root, contents = base
    clean = tmp_path / "uninterrupted"
    shutil.copytree(root, clean)
    calls = _gc(str(clean), None, "before")
    assert {name for name, _ in calls} <= set(MUTATING)
    records = {layout.version_record(n) for n in range(6)}
    tombstones = [path for name, path in calls if name == "write" and path in records]
    assert tombstones == [layout.version_record(n) for n in (4, 3, 2, 1, 0)], "tombstones are written newest first"
    assert sum(name == "delete" for name, _ in calls) >= 10
    finished = set(tree_state(clean))  # the tombstones' times differ from run to run, not their paths
    assert OLD_TEMPORARY not in finished and FRESH_TEMPORARY not in finished
    points = [(index, "before") for index in range(1, len(calls) + 1)] + [(len(calls), "after")]

    for start in range(0, len(points), PARALLEL):
        group = points[start : start + PARALLEL]
        roots = [tmp_path / f"kill-{start + offset}" for offset in range(len(group))]
        children = []
        for copy, (kill_at, when) in zip(roots, group):
            shutil.copytree(root, copy)
            child = forkserver.Process(target=_crash, args=(str(copy), kill_at, when))  # type: ignore[attr-defined]
            child.start()
            children.append(child)
        for copy, (kill_at, when), child in zip(roots, group, children):
            point = f"gc killed {when} step {kill_at} ({' '.join(calls[kill_at - 1])})"
            child.join(timeout=120)
            assert child.exitcode == -signal.SIGKILL, f"{point}: exit code {child.exitcode}"
            _check_recovered(copy, contents, point)
            assert set(tree_state(copy)) == finished, f"{point}: gc again left another store than one gc does"
            shutil.rmtree(copy)


def _check_recovered(root: Path, contents: dict[int, dict[Any, Record]], point: str) -> None:
    store = litstore.open(root)
    fresh = (root / FRESH_TEMPORARY).exists()  # unless the killed gc (grace 0) removed it already
    listed = [version.number for version in store.versions()]
    assert listed[-1] == 5 and set(listed) <= set(contents), f"{point}: lists {listed}"
    for number in listed:
        assert dict(store.at(number).items()) == contents[number], f"{point}: version {number} reads wrong"

    report = store.gc(dry_run=False, keep_last=1)  # the default grace: only the fresh temporary file is young

    assert [version.number for version in store.versions()] == [5], point
    assert set(report.expired_versions) == set(listed) - {5}, point
    assert not (root / OLD_TEMPORARY).exists() and (root / FRESH_TEMPORARY).exists() == fresh, point
    store.gc(dry_run=False, grace=timedelta(0))
    assert not (root / FRESH_TEMPORARY).exists(), point
    for number in range(5):
        with pytest.raises(litstore.VersionNotFoundError):
            store.at(number)
    assert dict(store.items()) == contents[5], point
    assert store.verify(expected_keys=contents[5]).ok, point
    stored = {found.path for found in store.storage.walk(layout.FRAGMENTS)}
    chunks = {chunk.filename for split in store.chunks().values() for chunk in split}
    assert stored == chunks | {layout.chunk_hashes(chunk) for chunk in chunks}, point  # (each with its sidecar)
