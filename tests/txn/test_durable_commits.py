"""A commit record names only durable files: every file a write created is fsync'd, with the directories
that name it, before the record that names it is created, and the record's own name is made durable too.

Power loss cannot be simulated here; what these tests hold to is the order of the durable steps, watched on
the real local storage (:mod:`tests.txn.durable_watch`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.errors import StorageError
from litstore.storage.local import LocalStorage
from tests.txn.durable_watch import Watch


def _records(start: int, count: int, label: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"k{i:05d}", "label": label, "blob": bytes([i % 251]) * 50} for i in range(start, start + count)]


_WRITES: dict[str, Callable[[litstore.Store], Any]] = {
    "append": lambda store: store.append(_records(300, 50)),
    "upsert": lambda store: store.upsert(_records(0, 20, label=1)),
    "delete": lambda store: store.delete([f"k{i:05d}" for i in range(5, 25)]),
    "compact": lambda store: store.compact(),
    "add_fields": lambda store: store.add_fields({"label": "int64"}),
    "restore": lambda store: store.restore(1),
}


@pytest.mark.parametrize("write", sorted(_WRITES))
def test_a_commit_record_names_only_files_made_durable_before_it(watch: Watch, write: str) -> None:
    store = litstore.Store.create(watch.root, key="id")
    for start in range(0, 300, 100):  # three versions, so that a restore and a compaction have work to do
        store.append(_records(start, 100))
    store.delete(["k00001"])
    assert watch.undurable == []  # (creating the store, the appends and the delete too)
    watch.snapshot()
    _WRITES[write](store)
    assert watch.records, "the write committed no version"
    assert watch.undurable == []
    assert store.get("k00002") is not None


def test_every_version_of_a_history_was_durable_when_committed(watch: Watch) -> None:
    """The whole life of a store, each record checked as it is created (stage, commit, checkpoints)."""
    store = litstore.Store.create(watch.root, key="id")
    records = 0
    for round_ in range(6):
        watch.snapshot()
        store.append(_records(round_ * 40, 40))
        store.upsert(_records(round_ * 40, 5, label=round_))
        records += len(watch.records)
    assert records == store.version.number >= 11  # every commit watched (round 0's upsert changes nothing)
    assert watch.undurable == []


def test_sync_skips_files_that_are_gone_and_refuses_links(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write("fragments/t1/a.bin", b"data")
    storage.sync(["fragments/t1/a.bin", "fragments/t1/gone.bin"])  # a file gc removed meanwhile: nothing to keep
    os.symlink(tmp_path / "fragments/t1/a.bin", tmp_path / "fragments/t1/link.bin")
    with pytest.raises(StorageError, match=r"link\.bin"):
        storage.sync(["fragments/t1/link.bin"])


def test_gc_makes_what_kept_versions_read_durable_before_it_removes_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc checkpoints a kept version whose chain runs through expiring ones, and tombstones those: both must
    outlive a power loss that the removal of the files they replace outlives."""
    store = litstore.Store.create(tmp_path / "store", key="id", checkpoint_interval=50)
    for round_ in range(5):
        store.append(_records(round_ * 40, 40))
        store.upsert(_records(round_ * 40, 5, label=round_))
    written: list[str] = []
    synced: set[str] = set()
    early: list[str] = []
    write, sync, delete = LocalStorage.write, LocalStorage.sync, LocalStorage.delete

    def recording_write(self: LocalStorage, path: str, data: bytes, *, durable: bool = False) -> None:
        write(self, path, data, durable=durable)
        if path.startswith(("manifests/", "versions/")) and ".expiring/" not in path:  # (not gc's own marks)
            written.append(path)
            if durable:
                synced.add(path)

    def recording_sync(self: LocalStorage, paths: Any) -> None:
        sync(self, paths)
        synced.update(paths)

    def checked_delete(self: LocalStorage, path: str) -> None:
        if ".expiring/" not in path:
            early.extend(found for found in written if found not in synced)
        delete(self, path)

    monkeypatch.setattr(LocalStorage, "write", recording_write)
    monkeypatch.setattr(LocalStorage, "sync", recording_sync)
    monkeypatch.setattr(LocalStorage, "delete", checked_delete)
    report = store.gc(keep_last=1, dry_run=False, grace=timedelta(0))
    assert report.expired_versions and report.removed_files
    assert any(path.startswith("manifests/") for path in written), "gc wrote no checkpoint: nothing was tested"
    assert early == []
    assert len(store.at(store.version.number).keys()) == 200
