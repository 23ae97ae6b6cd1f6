"""Several processes writing one local store at once.

The writers are separate interpreters (multiprocessing "spawn"; each imports litstore
itself) that share nothing but the store directory. Importing litstore (torch) takes
seconds, so the module starts four worker processes once and hands them tasks; the
tasks of one test start together behind a ``multiprocessing.Barrier``.

What must hold, whatever the interleaving:

- every commit gets its own version number and nothing committed is lost;
- of two writers adding the same key at once exactly one wins and the other gets
  :class:`litstore.ConflictError` with nothing committed;
- writers changing disjoint keys (append, upsert, delete) all land, even when their
  copy-on-write rewrites of shared chunks force a re-plan;
- the result verifies.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import litstore

pytestmark = pytest.mark.integration

WORKERS = 4
TIMEOUT = 240  # seconds to wait for any one result; generous for a loaded machine

Record = dict[str, Any]

# Set in each worker process by _serve: the barriers it shares with the others.
_barriers: dict[int, Any] = {}


def _serve(tasks: Any, results: Any, barriers: dict[int, Any]) -> None:
    """Worker loop: run ``(function, args)`` tasks until told to stop (``None``)."""
    import litstore  # noqa: F401 - the expensive import, once per worker, before any task

    _barriers.update(barriers)
    results.put(("ready", None))
    while (task := tasks.get()) is not None:
        function, args = task
        try:
            results.put(("ok", function(*args)))
        except BaseException:  # noqa: BLE001 - report anything to the test
            results.put(("error", traceback.format_exc()))


@dataclass
class Pool:
    """Four spawned worker processes with a task queue each and one result queue."""

    processes: list[Any]
    tasks: list[Any]
    results: Any

    def run(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Run ``calls[i]`` on worker ``i``, all at once; their results in that order."""
        for worker, call in enumerate(calls):
            self.tasks[worker].put((call[0], (worker, *call[1])))
        gathered = [self.results.get(timeout=TIMEOUT) for _ in calls]
        errors = [payload for status, payload in gathered if status == "error"]
        assert not errors, "\n".join(errors)
        by_worker = dict(payload for _, payload in gathered)
        return [by_worker[worker] for worker in range(len(calls))]


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    context = multiprocessing.get_context("spawn")
    barriers = {parties: context.Barrier(parties, timeout=TIMEOUT) for parties in (2, 3, WORKERS)}
    tasks = [context.Queue() for _ in range(WORKERS)]
    results = context.Queue()
    processes = [context.Process(target=_serve, args=(tasks[i], results, barriers)) for i in range(WORKERS)]
    for process in processes:  # all at once: their imports overlap
        process.start()
    try:
        for _ in processes:
            assert results.get(timeout=TIMEOUT) == ("ready", None)
        yield Pool(processes, tasks, results)
    finally:
        for queue in tasks:
            queue.put(None)
        deadline = time.monotonic() + 2
        for process in processes:
            process.join(timeout=max(deadline - time.monotonic(), 0))
            if process.is_alive():  # idle, holding nothing: no need to wait for a slow interpreter exit
                process.kill()
                process.join()


# -- tasks (run in the workers; the first argument is the worker's number) ---------


def _append_disjoint(worker: int, root: str, batches: int, size: int) -> tuple[int, list[int]]:
    store = litstore.open(root)
    _barriers[WORKERS].wait()
    versions = []
    for batch in range(batches):
        records = [{"id": f"w{worker}-{batch:02d}-{i}", "worker": worker, "batch": batch} for i in range(size)]
        versions.append(store.append(records).number)
    return worker, versions


def _append_overlapping(worker: int, root: str, rounds: int) -> tuple[int, list[str]]:
    """Each round: append a key the other worker also appends, plus keys only this worker uses."""
    store = litstore.open(root)
    outcomes = []
    for round_ in range(rounds):
        records = [{"id": f"shared-{round_}", "worker": worker}] + [
            {"id": f"own-{worker}-{round_}-{i}", "worker": worker} for i in range(3)
        ]
        _barriers[2].wait()
        try:
            store.append(records)
            outcomes.append("committed")
        except litstore.LitstoreError as exc:
            outcomes.append(type(exc).__name__)
    return worker, outcomes


def _upsert_batches(worker: int, root: str, keys: list[int], per_batch: int) -> tuple[int, list[int]]:
    store = litstore.open(root)
    _barriers[2].wait()
    versions = []
    for start in range(0, len(keys), per_batch):
        records = [_base_record(i, rev=1) for i in keys[start : start + per_batch]]
        versions.append(store.upsert(records).number)
    return worker, versions


def _delete_batches(worker: int, root: str, keys: list[int], per_batch: int) -> tuple[int, list[int]]:
    store = litstore.open(root)
    _barriers[2].wait()
    versions = []
    for start in range(0, len(keys), per_batch):
        versions.append(store.delete([f"k{i:03d}" for i in keys[start : start + per_batch]]).number)
    return worker, versions


def _upsert_for(worker: int, root: str, seconds: float, parties: int) -> tuple[int, int]:
    """Upsert this worker's own keys, one small batch per commit, for ``seconds``; how many committed."""
    store = litstore.open(root)
    _barriers[parties].wait()
    deadline = time.monotonic() + seconds
    commits = 0
    while time.monotonic() < deadline:
        keys = [f"w{worker}-{(commits * 3 + i) % 40:02d}" for i in range(3)]
        store.upsert([{"id": key, "worker": worker, "commit": commits, "text": "x" * 60} for key in keys])
        commits += 1
    return worker, commits


def _base_record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "payload": f"{i}-{rev}" * 8}


# -- tests ---------------------------------------------------------------------------


def test_four_processes_appending_disjoint_keys_all_land(pool: Pool, tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    litstore.Store.create(root, splits=litstore.HashSplit(train=0.9, val=0.1), chunk_bytes=4096)
    batches, size = 25, 4
    results = dict(enumerate(pool.run([(_append_disjoint, (root, batches, size))] * WORKERS)))

    committed = sorted(number for versions in results.values() for number in versions)
    assert committed == list(range(1, WORKERS * batches + 1)), "two commits share a version number"
    for versions in results.values():
        assert versions == sorted(versions)  # each writer's own commits are in order

    store = litstore.open(root)
    assert store.version.number == WORKERS * batches
    history = store.versions()
    assert [version.number for version in history] == list(range(WORKERS * batches + 1))
    for version in history[1:]:
        assert (version.operation, version.added, version.parent) == ("append", size, version.number - 1)
    expected = {
        f"w{worker}-{batch:02d}-{i}": {"id": f"w{worker}-{batch:02d}-{i}", "worker": worker, "batch": batch}
        for worker in range(WORKERS)
        for batch in range(batches)
        for i in range(size)
    }
    keys = store.keys()
    assert len(keys) == len(set(keys)) == len(expected)
    assert dict(store.items()) == expected
    report = store.verify(expected_keys=expected)
    assert report.ok, report.summary()
    # Every version in between is complete too: its keys are exactly the batches committed by then.
    committed_by: dict[int, str] = {}
    for worker, versions in results.items():
        for batch, number in enumerate(versions):
            committed_by[number] = f"w{worker}-{batch:02d}-"
    for number in (1, 37, 64, 99):
        prefixes = {committed_by[n] for n in range(1, number + 1)}
        assert {key[: key.rindex("-") + 1] for key in store.at(number).keys()} == prefixes
        assert store.verify(number).ok


def test_two_processes_appending_the_same_key_exactly_one_wins(pool: Pool, tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    litstore.Store.create(root, chunk_bytes=4096)
    rounds = 4
    results = dict(enumerate(pool.run([(_append_overlapping, (root, rounds))] * 2)))

    for round_ in range(rounds):
        outcomes = sorted(results[worker][round_] for worker in (0, 1))
        # Both writers opened the store before either committed, so the loser learns
        # of the winner only at commit time: a conflict, never a duplicate-key error.
        assert outcomes == ["ConflictError", "committed"], f"round {round_}: {outcomes}"

    store = litstore.open(root)
    assert store.version.number == rounds
    expected: dict[str, Record] = {}
    for round_ in range(rounds):
        (winner,) = (worker for worker in (0, 1) if results[worker][round_] == "committed")
        expected[f"shared-{round_}"] = {"id": f"shared-{round_}", "worker": winner}
        for i in range(3):
            key = f"own-{winner}-{round_}-{i}"
            expected[key] = {"id": key, "worker": winner}
    keys = store.keys()
    assert len(keys) == len(set(keys))
    assert dict(store.items()) == expected  # nothing of the losers' batches landed
    report = store.verify(expected_keys=expected)
    assert report.ok, report.summary()


def test_concurrent_upsert_and_delete_of_disjoint_keys_both_land(pool: Pool, tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = litstore.Store.create(root, chunk_bytes=700)  # ~8 records a chunk, keys interleaved by hash
    store.append([_base_record(i) for i in range(80)])
    before_chunks = {chunk.filename for chunk in store.chunks()["train"]}
    assert len(before_chunks) >= 6, len(before_chunks)
    upserted, deleted = list(range(0, 80, 2)), list(range(1, 80, 2))  # every chunk holds both kinds
    results = dict(
        enumerate(pool.run([(_upsert_batches, (root, upserted, 10)), (_delete_batches, (root, deleted, 10))]))
    )

    committed = sorted(results[0] + results[1])
    assert committed == list(range(2, 10))
    store = litstore.open(root)
    assert store.version.number == 9
    assert Counter(version.operation for version in store.versions()[2:]) == {"upsert": 4, "delete": 4}
    expected = {f"k{i:03d}": _base_record(i, rev=1) for i in upserted}
    keys = store.keys()
    assert len(keys) == len(set(keys)) == len(expected)
    assert dict(store.items()) == expected
    report = store.verify(expected_keys=expected)
    assert report.ok, report.summary()
    assert not before_chunks & {chunk.filename for chunk in store.chunks()["train"]}  # all rewritten
    for number in range(1, 10):
        assert store.verify(number).ok


def test_writers_upserting_disjoint_keys_in_a_loop_all_make_progress(pool: Pool, tmp_path: Path) -> None:
    """No writer starves: each commits at least a quarter of the mean number of commits."""
    root = str(tmp_path / "store")
    store = litstore.Store.create(root, chunk_bytes=2048)  # small chunks: upserts rewrite shared chunks
    writers, seconds = 3, 8.0
    store.upsert(
        [
            {"id": f"w{w}-{i:02d}", "worker": w, "commit": -1, "text": "x" * 60}
            for w in range(writers)
            for i in range(40)
        ]
    )
    commits = pool.run([(_upsert_for, (root, seconds, writers))] * writers)

    mean = sum(commits) / writers
    print(f"commits per writer in {seconds:.0f} s: {commits} (min {min(commits)}, max {max(commits)}, mean {mean:.1f})")
    assert min(commits) >= 0.25 * mean, f"a writer starved: {commits}"
    store = litstore.open(root)
    assert store.version.number == 1 + sum(commits)
    assert store.verify().ok
