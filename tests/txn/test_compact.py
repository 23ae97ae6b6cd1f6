"""Compaction: many small chunks become few full ones; the records do not change; in a format-3 store the
version's key index becomes one run."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import litstore
from litstore.read.version import VersionReader
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
    store.gc(keep_last=1)
    expected = {f"k{i:04d}": record(i, rev=7 if i == 3 else 0) for i in range(60) if i != 4}
    assert dict(litstore.open(store.root).items()) == expected
    assert litstore.open(store.root).verify(expected_keys=expected).ok


def test_compaction_of_a_format_3_store_leaves_one_run(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=8192, format_version=3)
    for batch in range(60):
        store.append([record(batch * 10 + i) for i in range(10)])
    store.upsert([record(5, rev=1)])
    store.delete(["k0006"])
    assert len(store.version.key_runs) > 2, store.version.key_runs
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
