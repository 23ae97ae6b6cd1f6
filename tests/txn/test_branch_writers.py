"""Processes writing several lines of one local store at once: main, two branches, and two writers on one branch.

What must hold, whatever the interleaving (today's guarantees, per line):

- every commit on a line gets its own version number of that line, and nothing committed is lost;
- writers on different lines never see each other's records;
- of two writers of one branch adding the same key at once, exactly one wins and the
  other gets :class:`litstore.ConflictError` with nothing committed;
- every line verifies;
- a branch deleted under its writers takes the commits that landed before the deletion with
  it, and every later commit is told (VersionNotFoundError) with nothing left behind.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

import litstore

pytestmark = pytest.mark.integration

TIMEOUT = 240


def _append_on(root: str, branch: str, tag: str, commits: int, barrier: Any, results: Any) -> None:
    store = litstore.open(root, branch=branch)
    barrier.wait(timeout=TIMEOUT)
    numbers = [store.append([{"id": f"{tag}-{n}-{i}", "by": tag} for i in range(3)]).number for n in range(commits)]
    results.put((tag, numbers))


def _append_shared(root: str, branch: str, tag: str, rounds: int, barrier: Any, results: Any) -> None:
    store = litstore.open(root, branch=branch)
    outcomes = []
    for round_ in range(rounds):
        barrier.wait(timeout=TIMEOUT)
        try:
            store.append([{"id": f"shared-{round_}", "by": tag}, {"id": f"own-{tag}-{round_}", "by": tag}])
            outcomes.append("committed")
        except litstore.ConflictError:
            outcomes.append("conflict")
    results.put((tag, outcomes))


def _run(context: Any, target: Any, calls: list[tuple[Any, ...]]) -> dict[str, Any]:
    return _run_jobs(context, [(target, call) for call in calls])


def _run_jobs(context: Any, jobs: list[tuple[Any, tuple[Any, ...]]]) -> dict[str, Any]:
    """Start each ``target(*call, barrier, results)`` in a process; what each put in ``results``, by tag."""
    barrier = context.Barrier(len(jobs))
    results = context.Queue()
    processes = [context.Process(target=target, args=(*call, barrier, results)) for target, call in jobs]
    for process in processes:
        process.start()
    gathered = dict(results.get(timeout=TIMEOUT) for _ in processes)
    for process in processes:
        process.join(timeout=TIMEOUT)
        assert process.exitcode == 0
    return gathered


def test_writers_on_main_and_two_branches(tmp_path: Path, forkserver: multiprocessing.context.BaseContext) -> None:
    root = str(tmp_path / "store")
    store = litstore.Store.create(root, key="id")
    store.append([{"id": "seed", "by": "seed"}])
    store.branches.create("a")
    store.branches.create("b")
    commits = 6
    numbers = _run(forkserver, _append_on, [(root, line, line, commits) for line in ("main", "a", "b")])
    for line in ("main", "a", "b"):
        assert numbers[line] == list(range(2, 2 + commits)), (line, numbers)
        handle = litstore.open(root, branch=line)
        assert {record["by"] for record in handle.values()} == {"seed", line}
        assert len(handle) == 1 + 3 * commits
        handle.verify().raise_if_failed()


def test_two_writers_on_one_branch(tmp_path: Path, forkserver: multiprocessing.context.BaseContext) -> None:
    root = str(tmp_path / "store")
    store = litstore.Store.create(root, key="id")
    store.append([{"id": "seed", "by": "seed"}])
    store.branches.create("side")
    rounds = 5
    outcomes = _run(forkserver, _append_shared, [(root, "side", tag, rounds) for tag in ("x", "y")])
    for round_ in range(rounds):
        assert sorted(outcomes[tag][round_] for tag in ("x", "y")) == ["committed", "conflict"], outcomes
    side = litstore.open(root, branch="side")
    assert side.version.number == 1 + rounds
    assert [version.number for version in side.versions()] == list(range(side.version.number + 1))
    assert len(side) == 1 + 2 * rounds
    side.verify().raise_if_failed()
    assert litstore.open(root).version.number == 1 and len(litstore.open(root)) == 1


def _append_until_gone(root: str, branch: str, tag: str, commits: int, barrier: Any, results: Any) -> None:
    store = litstore.open(root, branch=branch)
    outcomes: list[str] = []
    barrier.wait(timeout=TIMEOUT)
    for n in range(commits):
        try:
            store.append([{"id": f"{tag}-{n}-{i}", "by": tag} for i in range(3)])
            outcomes.append("committed")
        except litstore.VersionNotFoundError:
            outcomes.append("gone")
            break
        except Exception:  # noqa: BLE001 - anything else is reported to the test, which fails naming it
            outcomes.append(traceback.format_exc())
            break
    results.put((tag, outcomes))


def _delete_branch(root: str, branch: str, tag: str, after: float, barrier: Any, results: Any) -> None:
    store = litstore.open(root)
    barrier.wait(timeout=TIMEOUT)
    time.sleep(after)
    try:
        store.branches.delete(branch)
        results.put((tag, ["deleted"]))
    except Exception:  # noqa: BLE001 - reported to the test, which fails naming it
        results.put((tag, [traceback.format_exc()]))


def test_writers_of_a_branch_deleted_under_them_commit_before_or_are_told(
    tmp_path: Path, forkserver: multiprocessing.context.BaseContext
) -> None:
    """Two processes append to a branch while a third deletes it: each commit lands before the deletion (and
    goes with the branch) or raises VersionNotFoundError; no version record is left where nobody reaches it,
    and main is untouched."""
    root = str(tmp_path / "store")
    store = litstore.Store.create(root, key="id")
    store.append([{"id": "seed", "by": "seed"}])
    store.branches.create("side")
    before = tree_files(Path(root))
    jobs: list[tuple[Any, tuple[Any, ...]]] = [(_append_until_gone, (root, "side", tag, 40)) for tag in ("x", "y")]
    jobs.append((_delete_branch, (root, "side", "deleter", 0.3)))
    outcomes = _run_jobs(forkserver, jobs)

    assert outcomes["deleter"] == ["deleted"]
    for tag in ("x", "y"):
        assert all(outcome in ("committed", "gone") for outcome in outcomes[tag]), outcomes
    reopened = litstore.open(root)
    assert list(reopened.branches) == []
    assert not list((Path(root) / "branches").glob("side/**/*.json"))  # no record of the branch left behind
    assert len(reopened) == 1 and reopened.version.number == 1
    reopened.verify().raise_if_failed()
    assert {path for path in tree_files(Path(root)) if not path.startswith(("branches/", "fragments/"))} >= {
        path for path in before if not path.startswith(("branches/", "fragments/"))
    }


def tree_files(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}
