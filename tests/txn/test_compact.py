"""Compaction: many small chunks, and chunks with many dead rows (format 4), become few full ones of live rows;
the records do not change; the version's key index becomes one run; a compaction racing a writer lands both."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore._litdata.index import ChunkInfo
from litstore.format import keyrun
from litstore.read import version as version_module
from litstore.read.keyruns import RunReader
from litstore.read.version import VersionReader
from litstore.txn import keyruns as txn_keyruns
from tests.read.test_key_runs import _Counting
from tests.store.test_upgrade import runs_agree_with_manifest

from ._workers import record


def _small_appends(make_store: Callable[..., litstore.Store], appends: int = 30) -> litstore.Store:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=8192)
    for batch in range(appends):
        store.append([record(batch * 10 + i) for i in range(10)])
    return store


def test_compact_merges_small_chunks_and_keeps_every_record(make_store: Callable[..., litstore.Store]) -> None:
    store = _small_appends(make_store)
    before = store.version
    chunks_before = sum(len(chunks) for chunks in store.chunks().values())
    version = store.compact(message="nightly")
    assert version.number == before.number + 1 and version.operation == "compact" and version.message == "nightly"
    assert version.fingerprint == before.fingerprint and version.counts == before.counts
    assert (version.added, version.replaced, version.removed) == (0, 0, 0)
    chunks_after = sum(len(chunks) for chunks in store.chunks().values())
    assert chunks_before >= 50 and chunks_after <= 6, (chunks_before, chunks_after)
    assert not store.diff(before.number, version.number)
    expected = {f"k{i:04d}": record(i) for i in range(300)}
    reopened = litstore.open(store.root)
    assert dict(reopened.items()) == expected
    assert reopened.verify(expected_keys=expected).ok
    assert dict(reopened.at(before.number).items()) == expected  # the old version still reads its old chunks
    streamed = sorted(item["id"] for item in reopened.dataset(split="val"))
    assert streamed == sorted(item["id"] for item in reopened.at(before.number).dataset(split="val"))
    assert len(streamed) == version.counts["val"]
    assert store.compact() == version, "nothing left to compact: no new version"


def test_compact_then_write_then_gc(make_store: Callable[..., litstore.Store]) -> None:
    store = _small_appends(make_store, appends=6)
    store.compact()
    store.upsert([record(3, rev=7)])
    store.delete(["k0004"])
    store.gc(dry_run=False, keep_last=1)
    expected = {f"k{i:04d}": record(i, rev=7 if i == 3 else 0) for i in range(60) if i != 4}
    assert dict(litstore.open(store.root).items()) == expected
    assert litstore.open(store.root).verify(expected_keys=expected).ok


def test_compaction_of_a_format_3_store_leaves_one_run(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=8192, format_version=3, checkpoint_interval=1000)
    for batch in range(60):
        store.append([record(batch * 10 + i) for i in range(10)])
    store.upsert([record(5, rev=1)])
    store.delete(["k0006"])
    assert len(store.version.key_runs) > 1, store.version.key_runs
    version = store.compact()
    assert version.operation == "compact" and len(version.key_runs) == 1
    assert version.key_runs[0].entries == version.total == 599
    head = litstore.open(store.root).head()
    counting = _Counting(head.storage)
    fresh = VersionReader(counting, head.config, head.version)  # type: ignore[arg-type]
    assert fresh.find("k0333") == record(333) and fresh.find("k0005") == record(5, rev=1)
    assert fresh.find("k0006") is None
    assert [path for path in counting.read_bytes if path.endswith(".keys")] == [version.key_runs[0].path]
    runs_agree_with_manifest(head.reader, gone=["k0006"])
    store.append([record(1000)])
    assert len(store.version.key_runs) == 2 and litstore.open(store.root)["k1000"] == record(1000)


@pytest.mark.parametrize("options", [{"min_fill": 0}, {"min_fill": 1.5}, {"target_chunk_bytes": 0}])
def test_compact_refuses_bad_arguments(make_store: Callable[..., litstore.Store], options: dict[str, float]) -> None:
    store = _small_appends(make_store, appends=2)
    with pytest.raises(litstore.InvalidArgumentError):
        store.compact(**options)  # type: ignore[arg-type]
    assert store.version.number == 2


@pytest.mark.parametrize("options", [{"min_live": -0.1}, {"min_live": 1.5}, {"min_live": True}, {"min_live": "1"}])
def test_compact_refuses_a_bad_min_live(make_store: Callable[..., litstore.Store], options: dict[str, object]) -> None:
    store = _small_appends(make_store, appends=2)
    with pytest.raises(litstore.InvalidArgumentError, match="min_live must be in"):
        store.compact(**options)  # type: ignore[arg-type]
    assert store.version.number == 2


def _with_holes(
    make_store: Callable[..., litstore.Store], format_version: int = 4
) -> tuple[litstore.Store, dict[str, dict[str, object]]]:
    """A store (format 4 unless asked) of 1,500 records appended at once, then 450 of them upserted and 300
    deleted at random (in several commits): most chunks have dead rows. Returns it and the records it holds."""
    store = make_store(
        key="id", splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=8192, format_version=format_version
    )
    store.append([record(i) for i in range(1500)])
    expected = {f"k{i:04d}": record(i) for i in range(1500)}
    shuffled = random.Random(4).sample(range(1500), 750)
    for part in range(3):
        batch = [record(i, rev=1) for i in shuffled[part * 150 : (part + 1) * 150]]
        store.upsert(batch)
        expected.update((str(item["id"]), item) for item in batch)
    for part in range(2):
        gone = [f"k{i:04d}" for i in shuffled[450 + part * 150 : 450 + (part + 1) * 150]]
        store.delete(gone)
        for key in gone:
            expected.pop(key)
    return store, expected


def _chunk_figures(chunks: dict[str, list[ChunkInfo]]) -> dict[str, tuple[int, int]]:
    """Per split: how many chunks, and their bytes."""
    return {split: (len(listed), sum(chunk.num_bytes for chunk in listed)) for split, listed in chunks.items()}


def test_compaction_leaves_a_store_with_holes_as_one_append_would(make_store: Callable[..., litstore.Store]) -> None:
    store, expected = _with_holes(make_store)
    before = store.version
    holey = {ref.chunk for ref in before.deletions}
    listed_before = {chunk.filename for chunks in store.chunks().values() for chunk in chunks}
    assert len(holey) >= 15, "most chunks have dead rows"
    version = store.compact(message="tidy")
    assert (version.operation, version.message, version.number) == ("compact", "tidy", before.number + 1)
    assert version.fingerprint == before.fingerprint and version.counts == before.counts
    assert not store.diff(before.number, version.number)
    assert version.deletions == (), "every chunk with dead rows was rewritten, its deletion vector gone"
    assert holey <= set(version.dropped_chunks) <= listed_before
    assert version.checkpoint is not None and len(version.key_runs) == 1
    assert version.key_runs[0].entries == len(expected)

    one_append = make_store(key="id", splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=8192)
    one_append.append(list(expected.values()))
    compacted, reference = _chunk_figures(store.chunks()), _chunk_figures(one_append.chunks())
    for split, (count, size) in reference.items():
        assert compacted[split][0] <= count + 1, (compacted, reference)
        assert compacted[split][1] <= 1.05 * size, (compacted, reference)  # the live payload, no dead rows

    fresh = litstore.open(store.root)
    assert dict(fresh.items()) == expected
    keys = sorted(expected)
    assert fresh.get_many(keys) == [expected[key] for key in keys]
    assert fresh.verify(expected_keys=keys).ok
    streamed = sorted(str(item["id"]) for split in ("train", "val") for item in fresh.dataset(split=split))
    assert streamed == keys
    assert dict(fresh.at(before.number).items()) == expected, "the old version still reads its own chunks"
    assert store.compact() == version, "nothing left to compact: no new version"


def test_min_live_decides_which_chunks_with_dead_rows_are_rewritten(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id", chunk_bytes=8192, format_version=4)
    store.append([record(i) for i in range(600)])
    store.delete(["k0001"])  # one dead row in one full chunk: live fraction above 0.8
    assert len(store.head().reader.deletions.refs) == 1
    assert store.compact() == store.version, "nothing to gain at the default min_live"
    assert store.compact(min_live=0.0).number == store.version.number
    holey = store.head().reader.deletions.refs[0].chunk
    version = store.compact(min_live=1.0)
    assert version.operation == "compact" and version.deletions == ()
    assert holey in version.dropped_chunks and len(version.dropped_chunks) == 1
    assert dict(litstore.open(store.root).items()) == {f"k{i:04d}": record(i) for i in range(600) if i != 1}


def test_a_format_3_store_compacts_as_before(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=8192, format_version=3)
    store.append([record(i) for i in range(600)])
    store.delete(["k0001"])  # copy-on-write: the chunk's live rows moved, no dead rows
    assert store.head().reader.deletions.refs == ()
    assert store.compact(min_live=1.0) == store.version, "min_live has nothing to find in a format-3 store"


def _untouched_keys(store: litstore.Store, expected: dict[str, dict[str, object]], count: int) -> list[str]:
    """``count`` keys still in the first append's chunks (so in chunks with dead rows, which a compaction
    rewrites)."""
    first = {chunk.filename for chunks in store.at(1).chunks().values() for chunk in chunks}
    manifest = store.manifest()
    keys = [
        key
        for key, chunk in zip(manifest.column("key").to_pylist(), manifest.column("chunk").to_pylist(), strict=True)
        if chunk in first and expected[key]["value"] == int(key[1:]) * 10
    ]
    return sorted(keys)[:count]


def _lands_as(store: litstore.Store, expected: dict[str, dict[str, object]]) -> None:
    """A fresh handle reads ``expected`` (items, lookups, manifest), with the fingerprint of those records."""
    fresh = litstore.open(store.root)
    assert dict(fresh.items()) == expected
    keys = sorted(expected)
    assert fresh.get_many(keys) == [expected[key] for key in keys]
    assert sorted(fresh.manifest().column("key").to_pylist()) == keys
    reference = litstore.Store.create(
        f"{store.root}-reference", key="id", splits=litstore.HashSplit(train=0.7, val=0.3)
    )
    assert fresh.version.fingerprint == reference.append(list(expected.values())).fingerprint


@pytest.mark.parametrize("format_version", [4, 7])
def test_a_write_planned_before_a_compaction_plans_again_on_it(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    """Format 7's compaction record names no dropped chunks (it is listed in full): the writers that lost the
    race to it find them by its listing against their head's."""
    store, expected = _with_holes(make_store, format_version)
    upserted, deleted = _untouched_keys(store, expected, 2)
    upserter, deleter = litstore.open(store.root), litstore.open(store.root)  # both at the version before
    listed_before = {chunk.filename for chunks in store.chunks().values() for chunk in chunks}
    compacted = store.compact()
    listed_after = {chunk.filename for chunks in store.chunks().values() for chunk in chunks}
    assert compacted.deletions == () and listed_before - listed_after
    assert set(compacted.dropped_chunks) == (listed_before - listed_after if format_version < 7 else set())
    number = int(upserted[1:])
    version = upserter.upsert([record(number, rev=9)])  # marks a row of a chunk the compaction dropped
    assert version.number == compacted.number + 1
    version = deleter.delete([deleted])
    assert version.number == compacted.number + 2
    dropped = listed_before - listed_after
    assert not dropped & {ref.chunk for ref in version.deletions}, "the marks are on the compaction's chunks"
    assert not dropped & {chunk.filename for chunks in litstore.open(store.root).chunks().values() for chunk in chunks}
    expected[upserted] = record(number, rev=9)
    del expected[deleted]
    _lands_as(store, expected)


def test_a_compaction_planned_before_a_write_plans_again_on_it(make_store: Callable[..., litstore.Store]) -> None:
    store, expected = _with_holes(make_store)
    upserted, deleted = _untouched_keys(store, expected, 2)
    compactor = litstore.open(store.root)  # at the version before the writes
    number = int(upserted[1:])
    store.upsert([record(number, rev=9)])  # marks rows dead in chunks the compaction rewrites
    written = store.delete([deleted])
    compacted = compactor.compact()
    assert compacted.number == written.number + 1 and compacted.operation == "compact"
    assert compacted.fingerprint == written.fingerprint and compacted.counts == written.counts
    assert not store.diff(written.number, compacted.number), "the compaction moved the live rows, no dead one"
    expected[upserted] = record(number, rev=9)
    del expected[deleted]
    _lands_as(store, expected)


def test_a_large_version_compacts_without_composing_its_manifest(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``STREAMED_ROWS`` the rows a compaction moves are streamed out of the manifest, its checkpoint
    streamed, its key run merged from the parent's runs; the run names only the chunks the version lists."""
    store = make_store(key="id", splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=8192)
    for batch in range(30):
        store.append([record(batch * 10 + i) for i in range(10)])
    store.upsert([record(7, rev=3)])
    store.delete(["k0008", "k0123"])
    before = store.version
    composed: list[int] = []
    real = version_module.compose_manifest

    def counting(storage: object, config: object, number: int) -> object:
        composed.append(number)
        return real(storage, config, number)  # type: ignore[arg-type]

    monkeypatch.setattr(version_module, "STREAMED_ROWS", 50)
    monkeypatch.setattr(version_module, "compose_manifest", counting)
    version = litstore.open(store.root).compact()
    assert composed == [], "compaction composed a whole manifest"
    assert version.operation == "compact" and version.fingerprint == before.fingerprint and version.checkpoint
    monkeypatch.undo()
    expected = {f"k{i:04d}": record(i, rev=3 if i == 7 else 0) for i in range(300) if i not in (8, 123)}
    reopened = litstore.open(store.root)
    assert dict(reopened.items()) == expected and reopened.verify(expected_keys=expected).ok
    assert not reopened.diff(before.number, version.number)
    runs_agree_with_manifest(reopened.head().reader, gone=["k0008", "k0123"])
    (run,) = version.key_runs
    listed = {chunk.filename for chunks in reopened.chunks().values() for chunk in chunks}
    assert set(RunReader(reopened.head().storage, run).tail().chunks) == listed


def test_a_full_run_with_a_live_entry_in_a_retired_chunk_is_refused(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = _small_appends(make_store, appends=3)
    head = store.head().reader
    chunk = next(iter(store.chunks().values()))[0].filename
    empty = (np.zeros(0, dtype=keyrun.ENTRY), [])
    with pytest.raises(litstore.IntegrityError, match="points into chunk"):
        txn_keyruns.write_full_run(head.storage, 99, "0" * 20, empty, head.version.key_runs, True, frozenset([chunk]))
    assert not [name for name in head.storage.names("manifests") if name.startswith("00000099")]


_commit_module = importlib.import_module("litstore.txn.commit")


def _racing_publish(monkeypatch: pytest.MonkeyPatch, rival: Callable[[], Any]) -> list[Any]:
    """Make the next commit's first publish run ``rival`` first (its result kept in the list returned)."""
    real, done, started = _commit_module.publish, [], []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not started:
            started.append(True)  # (the rival's own commits publish through here too)
            done.append(rival())
        return real(*args, **kwargs)

    monkeypatch.setattr(_commit_module, "publish", racing)
    return done


@pytest.mark.parametrize("format_version", [6, 7])
def test_an_append_whose_head_gc_expired_rebases_on_the_compaction_that_won(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, format_version: int
) -> None:
    """An append touches no chunk: losing to a compaction (format 7: a record naming no dropped chunks) it reads
    nothing of its head's listing, which gc expired meanwhile, and lands on the compaction (found by review: it
    read the head's listing and reported the store damaged)."""
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=8192, format_version=format_version)
    for batch in range(5):
        store.append([{"id": f"a{batch}-{i}", "v": i} for i in range(20)])
    writer = litstore.open(root)

    def compact_and_collect() -> Any:
        compacted = store.compact()
        store.gc(keep_last=1, dry_run=False, grace=timedelta(0))
        return compacted

    rival = _racing_publish(monkeypatch, compact_and_collect)
    version = writer.append([{"id": "new", "v": 1}])
    assert version.number == rival[0].number + 1
    assert litstore.open(root)["new"] == {"id": "new", "v": 1} and len(litstore.open(root)) == 101


def test_a_format_6_append_whose_head_gc_expired_rebases_on_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=8192, checkpoint_interval=8, format_version=6)
    for batch in range(6):
        store.append([{"id": f"a{batch}-{i}", "v": i} for i in range(20)])
    writer = litstore.open(root)  # at version 6: its append publishes as 7, listed by delta

    def two_appends_and_collect() -> Any:
        store.append([{"id": "r1"}])  # 7, by delta
        checkpointed = store.append([{"id": "r2"}])  # 8: listed in full, naming nothing dropped
        store.gc(keep_last=2, dry_run=False, grace=timedelta(0))  # expires 6, the writer's head
        return checkpointed

    rival = _racing_publish(monkeypatch, two_appends_and_collect)
    assert writer.append([{"id": "new"}]).number == rival[0].number + 1
    assert sorted(litstore.open(root).get_many(["new", "r1", "r2"]), key=str) == sorted(
        [{"id": "new"}, {"id": "r1"}, {"id": "r2"}], key=str
    )
