"""What gc reads: with nothing to remove, commit records and listings only, never an index or a manifest.

Shown with files gc must not need: a damaged index or manifest of an old version is
left alone by a gc that expires nothing and finds nothing older than its grace
period, and is refused (the store left as it was) by one that would remove files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state


def _history(make_store: Callable[..., litstore.Store]) -> Path:
    # Format 5: every version has split index files (a format-6 version listed by delta has none, and gc
    # composes its listing from the full record below it, reading that one's indexes).
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=2048, format_version=5)
    for batch in range(3):
        store.append([{"id": f"k{batch}-{i:03d}", "v": i} for i in range(80)])
    return Path(store.root)


def _record(root: Path, number: int) -> dict[str, object]:
    record: dict[str, object] = json.loads((root / layout.version_record(number)).read_text())
    return record


@pytest.mark.parametrize("damaged", ["index", "manifest"])
def test_gc_with_nothing_to_remove_reads_no_index_nor_manifest(
    make_store: Callable[..., litstore.Store], damaged: str
) -> None:
    root = _history(make_store)
    record = _record(root, 1)
    indexes = record["indexes"]
    assert isinstance(indexes, dict)
    path = str(indexes["train"]) if damaged == "index" else str(record["manifest"])
    (root / path).write_bytes(b"garbage")
    before = tree_state(root)

    report = litstore.open(root).gc(dry_run=False)
    assert report.removed_files == [] and report.expired_versions == [] and report.checkpoints_written == []
    assert report.kept_versions == [0, 1, 2, 3]
    assert tree_state(root) == before

    if damaged == "index":  # a gc that would remove files reads every index first, and refuses
        with pytest.raises(litstore.IntegrityError, match=path):
            litstore.open(root).gc(dry_run=False, keep_last=1, grace=timedelta(0))
        assert tree_state(root) == before


def test_gc_reads_the_indexes_when_an_old_chunk_may_go(make_store: Callable[..., litstore.Store]) -> None:
    """Nothing expires, but with no grace every chunk is old enough to go: gc must read which ones are listed."""
    root = _history(make_store)
    store = litstore.open(root)
    report = store.gc(dry_run=False, grace=timedelta(0))
    assert report.expired_versions == []
    assert not any(layout.is_chunk(path) for path in report.removed_files)
    assert litstore.open(root).verify().ok
    indexes = _record(root, 1)["indexes"]
    assert isinstance(indexes, dict)
    (root / str(indexes["train"])).write_bytes(b"garbage")
    with pytest.raises(litstore.IntegrityError):
        litstore.open(root).gc(dry_run=False, grace=timedelta(0))


@pytest.mark.parametrize("line", ["main", "branch"])
def test_gc_reads_each_commit_record_of_every_line_a_bounded_number_of_times(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """Format 6: gc composes the listings of the other lines' versions in order, as it does its own line's,
    not each version's chain from scratch (that read every record up to ``checkpoint_interval`` times)."""
    store = make_store(key="id", checkpoint_interval=64)
    for i in range(40):
        store.append([{"id": f"k{i:03d}", "v": i}])
    store.branches.create("b")
    branch = litstore.open(store.root, branch="b")
    for i in range(40):
        branch.append([{"id": f"b{i:03d}", "v": i}])
    reads: dict[str, int] = {}
    real_read = type(store.storage).read

    def read(self: object, path: str) -> bytes:
        if path.endswith(".json") and f"{layout.VERSIONS}/" in path:
            reads[path] = reads.get(path, 0) + 1
        return real_read(self, path)  # type: ignore[arg-type]

    monkeypatch.setattr(type(store.storage), "read", read)
    (litstore.open(store.root) if line == "main" else litstore.open(store.root, branch="b")).gc(dry_run=False)

    assert len(reads) >= 80
    assert max(reads.values()) <= 4, sorted(reads.items(), key=lambda item: -item[1])[:3]
