"""What a write does in threads (the next run's chunks while the caller prepares, the delta's Parquet beside the
key runs): a failure there is the write's own, raised to the caller, and leaves nothing a version names."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore._litdata import writer as litdata_writer
from litstore.errors import StorageError


def _record(number: int) -> dict[str, Any]:
    return {"id": f"r{number:06d}", "text": "x" * (number % 7)}


def _metadata_files(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not path.relative_to(root).as_posix().startswith("fragments/")
    }


@pytest.mark.parametrize("threaded", [True, False], ids=["in-its-thread", "small-inline"])
def test_a_delta_that_fails_in_its_thread_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded: bool
) -> None:
    """The delta's Parquet is written in a thread beside the key runs, or (a small delta) in the committing
    thread: either way its failure is the commit's."""
    if threaded:
        monkeypatch.setattr(sys.modules["litstore.txn.commit"], "_SMALL_DELTA_ROWS", 0)
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096)
    store.append([_record(n) for n in range(500)])
    real_write = type(store.storage).write
    threads: list[str] = []

    def failing_write(self: Any, path: str, data: bytes) -> None:
        if path.startswith("manifests/") and path.endswith(".parquet"):
            threads.append(threading.current_thread().name)
            raise StorageError(f"cannot write {path!r}: disk full (injected)")
        real_write(self, path, data)

    monkeypatch.setattr(type(store.storage), "write", failing_write)
    before = _metadata_files(tmp_path / "s")
    with pytest.raises(StorageError, match="disk full"):
        store.append([_record(n) for n in range(500, 600)])
    assert threads and threads[0].startswith("litstore-delta" if threaded else "MainThread")
    assert _metadata_files(tmp_path / "s") == before  # the attempt's key runs removed again
    monkeypatch.undo()

    reopened = litstore.open(tmp_path / "s")
    assert reopened.version.number == 1 and len(reopened) == 500
    reopened.append([_record(n) for n in range(500, 600)])
    assert len(litstore.open(tmp_path / "s")) == 600 and litstore.open(tmp_path / "s").verify().ok


def test_a_run_whose_chunks_fail_in_the_writing_thread_stages_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generator of many runs: the chunk write of a later run fails in the writing thread; the caller gets
    that error, the input stops being read, and the fragment is removed whole."""
    monkeypatch.setattr("litstore.store._RUN_BYTES", 2048)  # many runs from a small input
    monkeypatch.setattr(sys.modules["litstore.txn.stage"], "_SMALL_RUN", 0)  # each run in the thread, small or not
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096)
    real = litdata_writer.write_chunk_file
    threads: list[str] = []
    read: list[int] = []

    def failing_chunk(directory: str, filename: str, parts: Any) -> None:
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            raise OSError("disk full (injected)")
        real(directory, filename, parts)

    def records() -> Any:
        for number in range(3000):
            read.append(number)
            yield _record(number)

    monkeypatch.setattr(litdata_writer, "write_chunk_file", failing_chunk)
    with pytest.raises(OSError, match="disk full"):
        store.append(records())
    assert threads[-1].startswith("litstore-write")
    assert len(read) < 3000  # the input was not read to its end after the failure
    assert not list((tmp_path / "s").glob("fragments/*/*"))  # the partial fragment removed
    monkeypatch.undo()
    assert litstore.open(tmp_path / "s").version.number == 0


def test_small_runs_are_written_in_the_calling_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of a few records is written where it was prepared (a thread would cost more than it overlaps);
    a large one in the writing thread."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096)
    real = litdata_writer.write_chunk_file
    threads: list[str] = []

    def recording_chunk(directory: str, filename: str, parts: Any) -> None:
        threads.append(threading.current_thread().name)
        real(directory, filename, parts)

    monkeypatch.setattr(litdata_writer, "write_chunk_file", recording_chunk)
    store.append(iter([_record(n) for n in range(1000)]))
    assert len(threads) > 1 and set(threads) == {"MainThread"}
    threads.clear()
    monkeypatch.setattr(sys.modules["litstore.txn.stage"], "_SMALL_RUN", 50)
    store.append(iter([_record(n) for n in range(1000, 2000)]))
    assert any(name.startswith("litstore-write") for name in threads)  # (the last chunk: at the close, here)
    assert len(litstore.open(tmp_path / "s")) == 2000


def test_an_interrupt_in_a_small_delta_waits_for_the_checkpoint_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """^C while the small delta is written in the committing thread, a checkpoint being streamed beside it:
    the commit waits for that thread before it removes what it wrote, so no file lands after the removal."""
    root = tmp_path / "s"
    litstore.Store.create(root, key="id", chunk_bytes=4096, checkpoint_interval=2).append(
        [_record(n) for n in range(300)]
    )
    store = litstore.open(root)  # a fresh handle: version 2's checkpoint is streamed in a thread
    commit_module = sys.modules["litstore.txn.commit"]
    real_checkpoint = commit_module.write_checkpoint
    finished: list[float] = []

    def slow_checkpoint(*args: Any) -> int:
        time.sleep(0.5)
        try:
            return int(real_checkpoint(*args))
        finally:
            finished.append(time.monotonic())

    def interrupted_delta(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(commit_module, "write_checkpoint", slow_checkpoint)
    monkeypatch.setattr(commit_module, "_write_delta", interrupted_delta)
    before = _metadata_files(root)
    with pytest.raises(KeyboardInterrupt):
        store.append([_record(n) for n in range(300, 310)])
    returned = time.monotonic()
    assert finished and finished[0] <= returned  # the checkpoint's thread was done before append returned
    time.sleep(0.2)
    assert _metadata_files(root) == before
    monkeypatch.undo()
    assert len(litstore.open(root)) == 300 and litstore.open(root).verify().ok
