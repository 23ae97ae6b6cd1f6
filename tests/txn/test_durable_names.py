"""Durable before named, the names themselves: every directory a write creates is named durably in its parent,
and every file readers take as soon as it is there (a tombstone, gc's checkpoints and listings, a moved tag, the
config) is durable before it is there; a record created but not made durable is not reported committed.

As in test_durable_commits.py, power loss is not simulated: the tests watch the order of the durable steps on the
real local storage (:mod:`tests.txn.durable_watch`).
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.errors import StorageError
from litstore.storage import local
from litstore.storage.local import LocalStorage
from tests.txn.durable_watch import Watch
from tests.txn.test_durable_commits import _records

# -- the directories a write makes ----------------------


def test_create_and_first_append_name_their_top_level_directories_durably(watch: Watch) -> None:
    """``versions/`` (made by create), ``fragments/`` (first stage) and ``manifests/`` (first commit) are new
    names in the root: a power loss that dropped ``versions/`` would leave ``open`` finding no head and writing
    version 0 again, every commit silently gone. Each is named durably when it is made."""
    watch.snapshot()
    store = litstore.Store.create(watch.root, key="id")
    watch.check_chain("version 0", "versions/00000000.json")
    watch.snapshot()
    store.append(_records(0, 50))
    for path in watch.new_files(named_by_records=True):
        watch.check_chain(f"version 1 names {path}", path)
    assert not watch.failures, "\n".join(watch.failures)


# -- branches: the branch record and a branch's first own record --------------------------------------------


def test_a_branch_and_its_first_commit_are_named_durably(watch: Watch) -> None:
    """A branch record (``branches/<b>/branch.json``) and the branch's first commit
    (``branches/<b>/versions/``): every directory on the way is named durably in its parent."""
    store = litstore.Store.create(watch.root, key="id")
    store.append(_records(0, 50))
    watch.snapshot()
    store.branches.create("side")
    watch.check_chain("branch record", "branches/side/branch.json")
    side = litstore.open(watch.root, branch="side")
    watch.snapshot()
    committed = side.append(_records(100, 10))
    watch.check_chain("branch's first record", f"branches/side/versions/{committed.number:08d}.json")
    assert not watch.failures, "\n".join(watch.failures)


# -- tags ----------------------------------------------------------------------------------------------------


def test_a_tag_is_named_durably(watch: Watch) -> None:
    """``tags/<name>.json``, and ``tags`` itself in the root, are named durably."""
    store = litstore.Store.create(watch.root, key="id")
    store.append(_records(0, 50))
    watch.snapshot()
    store.tag("v1")
    watch.check_chain("tag", "tags/v1.json")
    assert not watch.failures, "\n".join(watch.failures)


def test_a_moved_tag_is_made_durable(watch: Watch) -> None:
    """A moved tag replaces its record: written durably (a torn tag record would hide the version it named)."""
    store = litstore.Store.create(watch.root, key="id")
    store.append(_records(0, 50))
    store.tag("best")
    store.append(_records(50, 50))
    store.tag("best", move=True)
    assert ("write", "tags/best.json") in watch.events
    assert "tags/best.json" in watch.synced, "the moved tag record was never fsync'd"


# -- upgrade ---------------------------------------------------------------------------------------------------


def test_upgrade_switch_makes_the_config_rename_durable(watch: Watch) -> None:
    """The upgrade's switch of litstore.json is durable, the root that names it included: the old config must
    never come back under versions committed by the new format."""
    store = litstore.Store.create(watch.root, key="id", format_version=6)
    store.append(_records(0, 50))
    watch.snapshot()
    watch.named.clear()
    store.upgrade()
    assert ("write", "litstore.json") in watch.events
    # a root fsync after the rename: the directory entry now names the new inode
    written_at = max(i for i, event in enumerate(watch.events) if event == ("write", "litstore.json"))
    assert watch.root in watch.named, f"the root was never fsync'd after litstore.json was replaced ({written_at})"


def test_upgrade_syncs_the_hashes_sidecars_it_adds_before_its_record(watch: Watch) -> None:
    """The hashes sidecars an upgrade adds are synced before its record: a sidecar left empty by a power loss
    would be an IntegrityError for every stream of every version listing its chunk."""
    store = litstore.Store.create(watch.root, key="id", format_version=2)
    store.append(_records(0, 50))
    store.append(_records(50, 50))
    watch.snapshot()
    watch.events.clear()
    store.upgrade()
    sidecars = [path for kind, path in watch.events if kind == "write" and path.endswith(".hashes")]
    assert sidecars, "the upgrade wrote no sidecar: nothing was tested"
    record = next(path for kind, path in watch.events if kind == "put" and path.startswith("versions/0"))
    at = watch.events.index(("put", record))
    synced_before = {path for kind, path in watch.events[:at] if kind == "sync"}
    assert [path for path in sidecars if path not in synced_before] == []


# -- gc: what kept versions read instead is durable before the first tombstone ----------


def test_gc_makes_checkpoints_and_listings_durable_before_the_first_tombstone(watch: Watch) -> None:
    """A tombstone replaces the record a kept version's chain is read through, so the checkpoints and listings
    gc writes for kept versions are durable before the first tombstone (and readers take them as soon as they
    are there); the tombstones are durable too."""
    store = litstore.Store.create(watch.root, key="id", checkpoint_interval=50)
    for round_ in range(5):
        store.append(_records(round_ * 40, 40))
        store.upsert(_records(round_ * 40, 5, label=round_))
    watch.events.clear()
    store.gc(keep_last=1, dry_run=False, grace=timedelta(0))
    writes = [(i, path) for i, (kind, path) in enumerate(watch.events) if kind == "write"]
    records = [(i, path) for i, path in writes if path.startswith("versions/") and ".expiring/" not in path]
    first_tombstone = records[0][0]
    replacements = sorted({path for i, path in writes if path.startswith("manifests/") and i < first_tombstone})
    assert any(path.endswith(".checkpoint.parquet") for path in replacements), "gc wrote no checkpoint"
    assert [path for path in replacements if path not in watch.synced] == []  # (durable writes, before it)
    assert [path for _, path in records if path not in watch.synced] == []  # the tombstones, durable too


# -- a record whose name cannot be made durable --------------------------------------


def test_a_commit_whose_record_name_cannot_be_made_durable_is_not_reported_done(
    watch: Watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is linked, then its directory's fsync fails (EIO): the append must not return as if
    committed (the record reads back as its own, but a power loss may take it)."""
    store = litstore.Store.create(watch.root, key="id")
    store.append(_records(0, 50))
    inner_put, inner_directory = LocalStorage.put_if_absent, local._sync_directory
    creating: list[str] = []

    def failing_directory(directory: Path) -> None:
        if creating and creating[-1].startswith("versions/0") and Path(directory).name == "versions":
            raise OSError(errno.EIO, "Input/output error")
        inner_directory(directory)

    def marking_put(self: LocalStorage, path: str, data: bytes) -> bool:
        creating.append(path)
        try:
            return inner_put(self, path, data)
        finally:
            creating.pop()

    monkeypatch.setattr(local, "_sync_directory", failing_directory)
    monkeypatch.setattr(LocalStorage, "put_if_absent", marking_put)
    with pytest.raises(StorageError):  # UncertainCommitError is one
        store.append(_records(100, 10))


# -- a file system that cannot fsync directories ----------------------------


def test_a_directory_fsync_the_file_system_does_not_support_is_not_fatal(
    watch: Watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some mounts answer EINVAL to fsync of a directory (PostgreSQL's fsync_fname ignores EINVAL/EBADF for
    directories for that reason): writes still work there, their files still fsync'd."""
    store = litstore.Store.create(watch.root, key="id")
    fsync = os.fsync
    refused: list[int] = []

    def unsupported_on_directories(descriptor: int) -> None:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            refused.append(descriptor)
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", unsupported_on_directories)
    store.append(_records(0, 10))
    store.tag("first")
    assert len(litstore.open(watch.root)) == 10 and refused


def test_a_parent_directory_this_user_cannot_read_does_not_stop_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store root made inside a directory this user may search and write but not read (mode -wx): its new name
    cannot be fsync'd there (opening the directory is refused), which must not refuse the store."""
    unreadable = tmp_path / "drop-box"
    unreadable.mkdir()
    real_open = os.open
    refused: list[str] = []

    def no_read_of_the_drop_box(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path) == unreadable and flags & os.O_DIRECTORY:
            refused.append(str(path))
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_read_of_the_drop_box)
    store = litstore.Store.create(unreadable / "store", key="id")
    store.append(_records(0, 10))
    assert refused and len(litstore.open(unreadable / "store")) == 10
