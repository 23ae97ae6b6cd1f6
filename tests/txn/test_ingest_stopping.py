"""``Store.ingest`` can always be stopped: Ctrl-C in the caller, or the caller killed, leaves no worker running.

Each test runs an ingest in a real caller process (``tests/txn/_stopping.py``) with two
real worker processes, whose pids the workers leave in a directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc"),
]

WORKTREE = Path(__file__).resolve().parents[2]


def _caller(root: str, directory: Path, fn: str, count: int) -> subprocess.Popen[bytes]:
    """A process running ``store.ingest(fn, ...)`` with 2 workers, in a session of its own (its own process group)."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKTREE / "src"), str(WORKTREE)]))
    code = "from tests.txn._stopping import main; main()"
    command = [sys.executable, "-c", code, root, str(directory), fn, str(count)]
    output = {"stderr": subprocess.PIPE, "stdout": subprocess.DEVNULL}
    return subprocess.Popen(command, cwd=WORKTREE, env=environment, start_new_session=True, **output)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie, which only waits to be reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _until(condition: Callable[[], bool], seconds: float, what: str) -> float:
    """Wait until ``condition()`` holds; how long that took. Fails the test after ``seconds``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def _workers(directory: Path, caller: subprocess.Popen[bytes]) -> list[int]:
    """The pids of the caller's 2 workers, once both run ``fn``."""

    def both_started() -> bool:
        assert caller.poll() is None, caller.communicate()[1].decode()
        return len(list(directory.iterdir())) == 2

    _until(both_started, 30, "both workers run fn")
    return [int(path.name) for path in directory.iterdir()]


def _end(caller: subprocess.Popen[bytes], workers: list[int]) -> str:
    """Kill whatever of the caller and its workers still runs (only a failing test leaves any); its stderr."""
    if caller.poll() is None:
        os.killpg(caller.pid, signal.SIGKILL)
    for pid in workers:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    return caller.communicate()[1].decode()


def _listing(root: Path) -> set[str]:
    """Every path under ``root``, directories included (an empty fragment directory shows)."""
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.parametrize(
    ("fn", "whom"),
    [
        ("hanging", "caller"),  # `kill -INT <caller>`: only the caller gets it, and must pass it on
        ("hanging", "group"),  # Ctrl-C in a terminal: the caller and its workers all get it
        ("hanging_deaf", "group"),  # fn ignores Ctrl-C: its worker must be killed
    ],
)
def test_ctrl_c_stops_the_workers_and_commits_nothing(
    make_store: Callable[..., litstore.Store], tmp_path: Path, fn: str, whom: str
) -> None:
    store = make_store(key="id")
    store.append([{"id": "before"}])
    root = Path(store.root)
    before, listed = tree_state(root), _listing(root)
    directory = tmp_path / "pids"
    directory.mkdir()
    caller = _caller(store.root, directory, fn, 1000)
    workers: list[int] = []
    try:
        workers += _workers(directory, caller)
        if whom == "caller":
            os.kill(caller.pid, signal.SIGINT)
        else:
            os.killpg(caller.pid, signal.SIGINT)
        took = _until(lambda: caller.poll() is not None, 8, "the caller exits after Ctrl-C")
        alive = [pid for pid in workers if _alive(pid)]
    finally:
        stderr = _end(caller, workers)
    assert "KeyboardInterrupt" in stderr and caller.returncode != 0, stderr
    assert took < (5 if fn == "hanging_deaf" else 2), f"the caller took {took:.1f} s to stop"
    assert not alive, "a worker outlived the ingest"
    assert litstore.open(store.root).version.number == 1, "nothing was committed"
    if fn == "hanging":  # interrupted, each worker removed its fragment: not even its directory is left
        assert tree_state(root) == before, "every staged file was removed"
        assert _listing(root) == listed
    else:  # killed: at most the fragment it was staging, with its lease (gc's after the lease, or break_leases)
        left = _listing(root) - listed
        assert all(name.startswith(layout.FRAGMENTS + "/") for name in left), left
        store.gc(dry_run=False, grace=timedelta(0), break_leases=True)
        assert tree_state(root) == before, "gc removes what a killed worker staged"


def test_workers_end_when_their_caller_is_killed(make_store: Callable[..., litstore.Store], tmp_path: Path) -> None:
    """SIGKILL leaves the caller no chance to stop its workers: they notice its death and end, and stop writing."""
    store = make_store(key="id", chunk_bytes=1 << 20)
    root = Path(store.root)
    before = tree_state(root)
    directory = tmp_path / "pids"
    directory.mkdir()
    caller = _caller(store.root, directory, "slow_record", 20_000)  # about a minute of work
    fragments = root / layout.FRAGMENTS

    def staged_files() -> dict[str, int]:
        return {str(path): path.stat().st_size for path in fragments.rglob("*") if path.is_file()}

    workers: list[int] = []
    try:
        workers += _workers(directory, caller)
        _until(lambda: len(staged_files()) >= 1, 10, "the workers write chunks")
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait(5)
        took = _until(lambda: not any(_alive(pid) for pid in workers), 5, "the workers end after their caller")
    finally:
        _end(caller, workers)
    assert took < 2, f"the workers took {took:.1f} s to notice their caller is gone"
    written = staged_files()
    time.sleep(0.5)
    assert staged_files() == written, "something still writes fragments"
    assert litstore.open(store.root).version.number == 0
    store.gc(
        dry_run=False, grace=timedelta(0), break_leases=True
    )  # the workers' fragments: debris of an ingest never committed
    assert tree_state(root) == before
