"""Crash safety: a writer killed (SIGKILL) at any step leaves a store that opens at a complete version.

A child process opens the store and runs one write (append, upsert or delete); it
kills itself with SIGKILL at a chosen step:

- at the N-th *mutating* storage call (``staging``, ``write``, ``put_if_absent``,
  ``delete``, ``delete_tree``), just before or just after performing it. The
  counting happens in :class:`KillingStorage`, a proxy for ``store.storage`` that
  forwards every method of the ``Storage`` protocol;
- at the N-th chunk file written (``litstore._litdata.writer.write_chunk_file``):
  before it, after it, or half-way through (a torn chunk file).

The number of steps of each write is learned first by running it, uninterrupted,
under a counting proxy in this process, and every step is then a kill point.
After each kill the store must open at the parent version or at parent + 1 (the
latter exactly when the kill came after the commit record was created), read back
exactly that version's records, verify, accept the next append, and survive a gc
that removes the dead writer's debris.

Children are forked from a forkserver that imported litstore once (the ``forkserver``
fixture: spawning a fresh interpreter per kill point would cost seconds of torch and
pandas imports each); each child is still a separate process that shares nothing with
the test but the store directory.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore._litdata import writer as litdata_writer
from litstore.format import layout
from litstore.storage import Storage

pytestmark = pytest.mark.integration

SPLITS = litstore.HashSplit(train=0.7, val=0.3)
CHUNK_BYTES = 1024  # ~8 records a chunk: each write below writes several chunks
CHECKPOINT_INTERVAL = 2  # the crashing commit (version 2) also writes a full manifest checkpoint
PARALLEL = 4

Record = dict[str, Any]

MUTATING = ("staging", "write", "overwrite", "put_if_absent", "delete", "delete_tree")
#: Every member of the ``Storage`` protocol (methods, properties and attributes).
PROTOCOL = frozenset(name for name in (*vars(Storage), *Storage.__annotations__) if not name.startswith("_"))


class KillingStorage:
    """Forwards every ``Storage`` call; SIGKILLs this process at the N-th mutating call.

    ``when`` is ``"before"`` (the call never happens) or ``"after"`` (it completed).
    With ``kill_at=None`` it only logs the mutating calls.
    """

    def __init__(self, inner: Storage, kill_at: int | None = None, when: str = "before") -> None:
        self._inner = inner
        self._kill_at = kill_at
        self._when = when
        self._lock = threading.Lock()  # a commit writes its delta in a thread beside its key runs
        self.calls: list[tuple[str, str]] = []
        assert set(MUTATING) <= PROTOCOL, "a mutating Storage method was renamed: update MUTATING"

    def _before(self, name: str, path: str) -> int:
        """Log the call; its number (calls made in threads are numbered in the order they start)."""
        with self._lock:
            self.calls.append((name, path))
            number = len(self.calls)
        self._kill(number, "before")
        return number

    def _kill(self, number: int, phase: str) -> None:
        if number == self._kill_at and phase == self._when:
            os.kill(os.getpid(), signal.SIGKILL)

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        number = self._before("write", path)
        self._inner.write(path, data, durable=durable)
        self._kill(number, "after")

    def overwrite(self, path: str, data: bytes) -> None:
        number = self._before("overwrite", path)
        self._inner.overwrite(path, data)
        self._kill(number, "after")

    def put_if_absent(self, path: str, data: bytes) -> bool:
        number = self._before("put_if_absent", path)
        created = self._inner.put_if_absent(path, data)
        self._kill(number, "after")
        return created

    def delete(self, path: str) -> None:
        number = self._before("delete", path)
        self._inner.delete(path)
        self._kill(number, "after")

    def delete_tree(self, path: str) -> None:
        number = self._before("delete_tree", path)
        self._inner.delete_tree(path)
        self._kill(number, "after")

    @contextmanager
    def staging(self, path: str) -> Iterator[str]:
        number = self._before("staging", path)
        with self._inner.staging(path) as directory:
            self._kill(number, "after")
            yield directory

    def __getattr__(self, name: str) -> Any:
        # Every other member of the protocol only reads: forward it as it is.
        if name not in PROTOCOL:
            raise AttributeError(f"litstore used {name!r}, which is not part of the Storage protocol")
        return getattr(self._inner, name)


@contextmanager
def counting_chunk_writes(kill_at: int | None = None, when: str = "before") -> Iterator[list[str]]:
    """Count (and maybe die at) the chunk files litstore writes in this process."""
    original = litdata_writer.write_chunk_file
    written: list[str] = []

    def write_chunk_file(directory: str, filename: str, parts: Iterable[bytes | memoryview]) -> None:
        parts = list(parts)
        written.append(filename)
        if len(written) == kill_at:
            if when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            if when == "torn":
                data = b"".join(parts)
                with open(os.path.join(directory, filename), "wb") as out:
                    out.write(data[: len(data) // 2])
                    out.flush()
                os.kill(os.getpid(), signal.SIGKILL)
        original(directory, filename, parts)
        if len(written) == kill_at and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    litdata_writer.write_chunk_file = write_chunk_file  # type: ignore[assignment]
    try:
        yield written
    finally:
        litdata_writer.write_chunk_file = original  # type: ignore[assignment]


# -- the store and the writes --------------------------------------------------------


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "text": f"record {i} revision {rev} " * 3}


BASE = {f"k{i:03d}": _record(i) for i in range(60)}


APPENDED = [_record(i) for i in range(100, 150)]
UPSERTED = [_record(i, rev=1) for i in range(0, 60, 3)] + [_record(i) for i in range(200, 220)]
DELETED = [f"k{i:03d}" for i in range(0, 60, 4)]
RIVAL = [_record(i) for i in range(300, 310)]

#: The writes a child is killed in. "append-after-rival" appends from a store opened
#: before another writer committed: its first commit attempt loses, it removes what it
#: wrote, catches up and commits again on top of the rival's version.
OPERATIONS = ("append", "upsert", "delete", "append-after-rival")


def _write(store: litstore.Store, operation: str, wrap: Callable[[Storage], Storage] | None = None) -> None:
    """Run ``operation`` on ``store`` (at the base version), through ``wrap(storage)`` if given."""
    if operation == "append-after-rival":
        litstore.open(store.root).append(RIVAL)  # commits version 2; ``store`` does not know yet
    if wrap is not None:
        head = store.head()
        store = litstore.Store(litstore.Snapshot(wrap(head.storage), head.config, head.version, head.model))
    if operation in ("append", "append-after-rival"):
        store.append(APPENDED)
    elif operation == "upsert":
        store.upsert(UPSERTED)
    else:
        store.delete(DELETED)


def _outcome(operation: str, committed: bool) -> tuple[int, dict[str, Record]]:
    """The version number and records the store must hold after ``operation`` was killed."""
    parent, records = 1, dict(BASE)
    if operation == "append-after-rival":
        parent, records = 2, {**BASE, **{record["id"]: record for record in RIVAL}}
    if not committed:
        return parent, records
    if operation in ("append", "append-after-rival"):
        return parent + 1, {**records, **{record["id"]: record for record in APPENDED}}
    if operation == "upsert":
        return parent + 1, {**records, **{record["id"]: record for record in UPSERTED}}
    return parent + 1, {key: record for key, record in records.items() if key not in DELETED}


def _crash(root: str, operation: str, target: str, kill_at: int, when: str) -> None:
    """Child: run ``operation`` on the store at ``root``, dying at the chosen step."""
    store = litstore.open(root)
    if target == "storage":
        _write(store, operation, lambda storage: KillingStorage(storage, kill_at, when))  # type: ignore[arg-type,return-value]
    else:
        with counting_chunk_writes(kill_at, when):
            _write(store, operation)
    os._exit(3)  # the kill point was never reached


@dataclass(frozen=True)
class KillPoint:
    operation: str
    target: str  # "storage" or "chunk"
    kill_at: int  # 1-based
    when: str  # "before", "after" or "torn"
    commits: bool  # whether the write is committed at this point
    step: str = ""  # what the step does, for messages

    def __str__(self) -> str:
        return f"{self.operation} killed {self.when} {self.target} step {self.kill_at} ({self.step})"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store at version 1 holding ``BASE``; each kill point works on a copy."""
    root = tmp_path_factory.mktemp("crash") / "base"
    store = litstore.Store.create(root, splits=SPLITS, chunk_bytes=CHUNK_BYTES, checkpoint_interval=CHECKPOINT_INTERVAL)
    store.append(list(BASE.values()))
    return root


def _copy(base: Path, destination: Path) -> str:
    shutil.copytree(base, destination)
    return str(destination)


def _steps(base: Path, scratch: Path, operation: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The mutating storage calls and chunk writes of ``operation``, from an uninterrupted run."""
    proxies: list[KillingStorage] = []

    def wrap(storage: Storage) -> KillingStorage:
        proxies.append(KillingStorage(storage))
        return proxies[-1]

    store = litstore.open(_copy(base, scratch / f"dry-{operation}"))
    with counting_chunk_writes() as chunks:
        _write(store, operation, wrap)  # type: ignore[arg-type]
    return proxies[0].calls, list(chunks)


def _kill_points(base: Path, scratch: Path) -> list[KillPoint]:
    """Kill points over every step of each write, learned by running it once without a kill."""
    points: list[KillPoint] = []
    for operation in OPERATIONS:
        calls, chunks = _steps(base, scratch, operation)
        names = [name for name, _ in calls]
        assert set(names) <= set(MUTATING)
        # The staging directory, then the stager's lease; after the commit record only the head hint is
        # written and the leases removed.
        commit_at = len(names) - names[::-1].index("put_if_absent")
        after = {(name, path if name in ("write", "overwrite") else "") for name, path in calls[commit_at:]}
        # A delete stages nothing and writes no chunk: it marks the rows dead (format 4).
        first = ["write"] if operation == "delete" else ["staging", "write"]
        assert names[: len(first)] == first and after <= {("delete", ""), ("overwrite", layout.HEAD_HINT)}, names
        final, _ = _outcome(operation, committed=True)
        assert calls[commit_at - 1][1] == f"versions/{final:08d}.json"
        assert "write" in names and (len(chunks) == 0 if operation == "delete" else len(chunks) >= 3), (names, chunks)
        steps = list(enumerate(calls, start=1))
        if operation == "append-after-rival":
            # The lost commit, the clean-up and the second attempt: kill before each step of
            # those, and after the final commit record.
            lost = names.index("put_if_absent") + 1
            assert "delete" in names[lost:] and names.count("put_if_absent") == 2, names
            variants = [(index, "before") for index, _ in steps[lost - 1 :]] + [(len(calls), "after")]
        else:
            # Every step up to the commit record, before and after; of the lease releases after it,
            # the last only (the version is complete from the record on: each is the same case).
            variants = [(index, when) for index, _ in steps[:commit_at] for when in ("before", "after")]
            variants += [(len(calls), "after")] if len(calls) > commit_at else []
        for index, when in variants:
            commits = index > commit_at or (index == commit_at and when == "after")
            points.append(KillPoint(operation, "storage", index, when, commits, " ".join(calls[index - 1])))
        # Chunk writes: every chunk of the append torn half-way, plus the first one never
        # written and the last one written in full; one torn chunk of the upsert (a delete writes none).
        # (The rival's own chunk writes would count too: no chunk kill points there.)
        if operation == "append":
            chunk_steps = [(index, "torn") for index in range(1, len(chunks) + 1)]
            chunk_steps += [(1, "before"), (len(chunks), "after")]
        elif operation == "upsert":
            chunk_steps = [(len(chunks) // 2 + 1, "torn")]
        else:
            chunk_steps = []
        points.extend(
            KillPoint(operation, "chunk", index, when, False, chunks[index - 1]) for index, when in chunk_steps
        )
    return points


def _check_recovered(root: str, point: KillPoint) -> None:
    store = litstore.open(root)
    expected_number, expected = _outcome(point.operation, point.commits)
    assert store.version.number == expected_number, f"{point}: opened at version {store.version.number}"
    assert [version.number for version in store.versions()] == list(range(expected_number + 1))
    if point.commits:
        assert store.version.operation == point.operation.removesuffix("-after-rival")
    keys = store.keys()
    assert len(keys) == len(set(keys)), point
    assert dict(store.items()) == expected, point
    report = store.verify(expected_keys=expected)
    assert report.ok, f"{point}: {report.summary()}"

    store.append([_record(900), _record(901)])
    reopened = litstore.open(root)
    assert reopened.version.number == expected_number + 1
    assert len(reopened) == len(expected) + 2
    assert reopened.get_many(["k900", "k901"]) == [_record(900), _record(901)]

    # gc with no grace removes every file of the dead writer, and nothing a version needs.
    reopened.gc(dry_run=False, grace=timedelta(0), break_leases=True)
    stored = {path for path, _, _ in reopened.storage.walk("fragments")}
    listed = {
        chunk.filename
        for number in range(1, expected_number + 2)
        for split in reopened.at(number).chunks().values()
        for chunk in split
    }
    listed |= {layout.chunk_hashes(chunk) for chunk in listed}  # each chunk with its hashes sidecar
    assert stored == listed, f"{point}: debris left {sorted(stored - listed)}, missing {sorted(listed - stored)}"
    assert dict(reopened.at(expected_number).items()) == expected, point
    report = litstore.open(root).verify(expected_keys={**expected, "k900": None, "k901": None})
    assert report.ok, f"{point}: after the next append and gc: {report.summary()}"


def test_kill_at_every_step_of_a_write_leaves_a_complete_version(
    base: Path, tmp_path: Path, forkserver: multiprocessing.context.BaseContext
) -> None:
    points = _kill_points(base, tmp_path)
    assert len(points) >= 20
    assert {point.operation for point in points if point.commits} == set(OPERATIONS)  # (then leases released)
    roots = [_copy(base, tmp_path / f"kill-{number}") for number in range(len(points))]

    for start in range(0, len(points), PARALLEL):
        group = list(range(start, min(start + PARALLEL, len(points))))
        children = []
        for number in group:
            point = points[number]
            child = forkserver.Process(  # type: ignore[attr-defined]
                target=_crash, args=(roots[number], point.operation, point.target, point.kill_at, point.when)
            )
            child.start()
            children.append(child)
        for number, child in zip(group, children):
            child.join(timeout=120)
            assert child.exitcode == -signal.SIGKILL, f"{points[number]}: child exit code {child.exitcode}"
        for number in group:
            _check_recovered(roots[number], points[number])


def test_killed_writer_debris_is_never_part_of_a_version(
    base: Path, tmp_path: Path, forkserver: multiprocessing.context.BaseContext
) -> None:
    """A kill just before the commit leaves staged files behind; no version lists them."""
    root = _copy(base, tmp_path / "store")
    store = litstore.open(root)
    before = {path for path, _, _ in store.storage.walk("fragments")}
    # The last put_if_absent of an append is the commit record: die just before it.
    calls, _ = _steps(base, tmp_path, "append")
    commit_at = len(calls) - [name for name, _ in calls][::-1].index("put_if_absent")
    child = forkserver.Process(  # type: ignore[attr-defined]
        target=_crash, args=(root, "append", "storage", commit_at, "before")
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL

    debris = {path for path, _, _ in store.storage.walk("fragments")} - before
    assert debris, "the killed writer staged no chunks"
    store = litstore.open(root)
    assert store.version.number == 1
    listed = {chunk.filename for split in store.chunks().values() for chunk in split}
    assert not debris & listed
    report = store.gc(dry_run=False)  # fresh debris is within the grace period: kept
    assert not set(report.removed_files) & debris
    report = store.gc(dry_run=False, grace=timedelta(0), break_leases=True)
    assert debris <= set(report.removed_files)
    assert not debris & {path for path, _, _ in store.storage.walk("fragments")}
    assert store.verify(expected_keys=BASE).ok
