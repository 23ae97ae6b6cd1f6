"""Checkpoints and full key runs written from files, a row group and a range of key hashes at a time.

A commit that holds no manifest (every commit of a fresh process) streams its
checkpoint (:mod:`litstore.txn.checkpoint`) and merges its full key run from the
parent's runs (:func:`litstore.txn.keyruns.write_full_run`), so a store of any size
can take a checkpoint in bounded memory. What they write must be what composing the
manifest in memory writes: the same rows, the same entries.
"""

from __future__ import annotations

import io
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.errors import StorageError
from litstore.format import keyrun
from litstore.read import keyruns as read_keyruns
from litstore.read.keyruns import RunReader
from litstore.read.version import VersionReader
from litstore.txn import keyruns
from tests.read import test_key_runs as key_runs_history


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=st.lists(key_runs_history.operation, min_size=1, max_size=12),
    backend=st.sampled_from(["local", "memory"]),
)
def test_lookups_agree_with_a_model_when_every_other_version_is_a_checkpoint(
    tmp_path: Path, history: list[tuple[str, list[str]]], backend: str
) -> None:
    root = str(tmp_path / uuid.uuid4().hex) if backend == "local" else f"memory://streamed-{uuid.uuid4().hex}"
    key_runs_history._check_history(root, history, reopen=backend == "local", format_version=5, checkpoint_interval=2)


def _record(number: int, rev: int = 0) -> dict[str, Any]:
    return {"id": f"r{number:06d}", "rev": rev, "text": "x" * (number % 7)}


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    names = ["key", "content_hash", "split", "chunk", "row"]
    return sorted(zip(*(table.column(name).to_pylist() for name in names), strict=True))


def test_a_streamed_checkpoint_and_full_run_are_what_composing_in_memory_writes(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, checkpoint_interval=4)
    store.append([_record(n) for n in range(3000)])
    store.upsert([_record(n, 1) for n in range(0, 3000, 7)])
    store.delete([f"r{n:06d}" for n in range(1, 3000, 11)])
    reopened = litstore.open(tmp_path / "s")  # a fresh handle: the head holds no manifest, so v4 streams
    assert reopened.head().reader.built_manifest is None
    reopened.append([_record(n) for n in range(3000, 3500)])
    version = reopened.version
    assert version.number == 4 and version.checkpoint is not None
    assert len(version.key_runs) == 1 and version.key_runs[0].entries == version.total == 3500 - 273

    reader = VersionReader(reopened.storage, reopened.config, version)
    composed = reader.manifest()  # from the streamed checkpoint alone (the chain stops there)
    from_deltas = litstore.open(tmp_path / "s").at(3).reader.manifest()
    expected_keys = set(from_deltas.column("key").to_pylist()) | {f"r{n:06d}" for n in range(3000, 3500)}
    assert set(composed.column("key").to_pylist()) == expected_keys
    file = pq.ParquetFile(io.BytesIO(reopened.storage.read(version.checkpoint)))
    assert file.metadata.num_rows == version.total
    assert all(file.metadata.row_group(g).num_rows <= 1 << 16 for g in range(file.num_row_groups))

    streamed, names = RunReader(reopened.storage, version.key_runs[0]).everything()
    in_memory, memory_names = keyruns.full_run(composed)
    assert len(streamed) == len(in_memory)
    for field in ("key_hash", "row", "content", "keyprint"):
        assert (streamed[field] == in_memory[field]).all(), field
    assert [names[i] for i in streamed["chunk"]] == [memory_names[i] for i in in_memory["chunk"]]
    assert litstore.open(tmp_path / "s").verify().ok


def test_a_checkpoint_of_a_version_with_no_records_lists_no_run(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", checkpoint_interval=2)
    store.append([_record(n) for n in range(50)])
    litstore.open(tmp_path / "s").delete([f"r{n:06d}" for n in range(50)])
    emptied = litstore.open(tmp_path / "s")
    assert emptied.version.checkpoint is not None and emptied.version.key_runs == ()
    assert len(emptied) == 0 and "r000001" not in emptied
    emptied.append([_record(7)])
    assert litstore.open(tmp_path / "s")["r000007"]["rev"] == 0


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(0, 2000),
    batches=st.lists(st.integers(1, 700), min_size=1, max_size=8),
    filtered=st.booleans(),
)
def test_a_run_written_batch_by_batch_is_the_run_encode_makes(count: int, batches: list[int], filtered: bool) -> None:
    rng = np.random.default_rng(count)
    entries = np.zeros(count, dtype=keyrun.ENTRY)
    entries["key_hash"] = np.sort(rng.integers(0, 2**64, count, dtype=np.uint64, endpoint=False))
    entries["keyprint"] = np.frombuffer(rng.bytes(16 * count), dtype="V16")
    entries["row"] = rng.integers(0, 1000, count)
    chunks = ["fragments/a/chunk-0-0.bin", "fragments/b/chunk-0-1.bin"]
    handle = io.BytesIO()
    writer = keyrun.RunWriter(handle, filtered)
    start, turn = 0, 0
    while start < count:
        size = batches[turn % len(batches)]
        writer.add(entries[start : start + size])
        start, turn = start + size, turn + 1
    size = writer.finish(chunks)
    assert handle.getvalue() == keyrun.encode(entries, chunks, filtered) and size == len(handle.getvalue())


def test_a_run_writer_refuses_entries_out_of_order() -> None:
    entries = np.zeros(4, dtype=keyrun.ENTRY)
    entries["key_hash"] = [5, 6, 7, 8]
    writer = keyrun.RunWriter(io.BytesIO(), True)
    writer.add(entries[2:])
    try:
        writer.add(entries[:2])
    except ValueError as exc:
        assert "key-hash order" in str(exc)
    else:
        raise AssertionError("entries below the last hash were taken")


def test_a_checkpoint_that_fails_in_its_thread_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streamed checkpoint is written in a thread beside the key runs: its failure is the commit's, raised
    after the runs are done, and no version names the files of the attempt."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, checkpoint_interval=2)
    store.append([_record(n) for n in range(2000)])
    fresh = litstore.open(tmp_path / "s")  # holds no manifest: its checkpoint is streamed
    real_writing = type(fresh.storage).writing
    threads: list[str] = []

    def failing_writing(self: Any, path: str, **options: Any) -> Any:
        if path.endswith(".checkpoint.parquet"):
            threads.append(threading.current_thread().name)
            raise StorageError(f"cannot write {path!r}: disk full (injected)")
        return real_writing(self, path, **options)

    monkeypatch.setattr(type(fresh.storage), "writing", failing_writing)
    before = _metadata_files(tmp_path / "s")
    with pytest.raises(StorageError, match="disk full"):
        fresh.append([_record(n) for n in range(2000, 2100)])
    assert threads and threads[0].startswith("litstore-checkpoint")
    assert _metadata_files(tmp_path / "s") == before  # the attempt's delta, runs and indexes removed again
    monkeypatch.undo()

    reopened = litstore.open(tmp_path / "s")
    assert reopened.version.number == 1 and len(reopened) == 2000
    reopened.append([_record(n) for n in range(2000, 2100)])  # the same commit again, now whole
    assert reopened.version.number == 2 and reopened.version.checkpoint is not None
    assert len(litstore.open(tmp_path / "s")) == 2100
    assert litstore.open(tmp_path / "s").verify().ok


def test_a_damaged_page_met_by_a_checkpoint_merge_is_an_integrity_error_and_nothing_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full key run a checkpoint merges reads every page of the parent's runs by ranges: a page that does not
    match its sum stops the commit (IntegrityError naming the run), it is never merged into the new run."""
    monkeypatch.setattr(read_keyruns, "WHOLE_RUN", 0)  # every run read by ranges, as large runs are
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, checkpoint_interval=2)
    store.append([_record(n) for n in range(3000)])
    run = store.version.key_runs[0]
    path = Path(store.root) / run.path
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01  # inside the entries, far from the footer and filter
    path.write_bytes(bytes(data))

    fresh = litstore.open(tmp_path / "s")
    before = _metadata_files(tmp_path / "s")
    with pytest.raises(litstore.IntegrityError, match=f"key run {run.path} page .* checksum"):
        fresh.append([_record(3000)])  # version 2 writes a checkpoint and one run of every record
    assert litstore.open(tmp_path / "s").version.number == 1
    assert _metadata_files(tmp_path / "s") == before  # nothing of the attempt is left but its staged fragment


def _metadata_files(root: Path) -> set[str]:
    """The store's files outside fragments/ (staged data is kept for a retry; see txn.commit)."""
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not path.relative_to(root).as_posix().startswith("fragments/")
    }
