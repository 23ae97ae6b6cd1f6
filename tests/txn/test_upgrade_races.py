"""An upgrade racing other writers: whichever commits first, the other rebases, and no lookup misses a key.

- an append that loses the race to the upgrade's commit commits on top of it (it touched
  no key); a writer still holding the format-2 config lists no runs, and the next
  format-3 commit on its version writes a run of every record;
- an upgrade that loses to an append writes its run for the newest version;
- two upgrades at once commit one index;
- an append and an upgrade in two threads, in whatever order they land.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore import txn
from litstore.txn import upgrade as upgrade_txn
from tests.store.test_upgrade import runs_agree_with_manifest

Record = dict[str, Any]


def _record(key: str, rev: int = 0) -> Record:
    return {"id": key, "rev": rev}


def _store(root: Path) -> litstore.Store:
    store = litstore.Store.create(root, key="id", chunk_bytes=2048, format_version=2)
    store.append([_record(f"a{i:03d}") for i in range(200)])
    store.delete(["a007"])
    return store


def test_an_append_that_loses_to_the_upgrade_commits_on_top_of_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _store(root)
    writer = litstore.open(root)  # holds the format-2 config and version 2
    upgraded = store.upgrade()
    version = writer.append([_record("late")])
    assert version.number == upgraded.number + 1 and version.parent == upgraded.number
    assert version.key_runs == (), "a writer holding the format-2 config lists no runs, never its parent's"
    fresh = litstore.open(root)
    assert fresh.config.format_version == 7 and fresh["late"] == _record("late") and fresh["a100"] == _record("a100")
    assert "a007" not in fresh
    fresh.append([_record("later")])
    assert len(fresh.version.key_runs) == 1 and fresh.version.key_runs[0].entries == fresh.version.total
    runs_agree_with_manifest(litstore.open(root).head().reader, gone=["a007"])


def test_an_upgrade_that_loses_to_an_append_indexes_the_newest_version(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _store(root)
    behind = store.head().reader
    litstore.open(root).append([_record("won")])
    head = txn.commit(behind, txn.Upgrade())
    assert head.version.number == behind.version.number + 2 and head.version.operation == "upgrade"
    assert head.version.key_runs[0].entries == 200
    runs_agree_with_manifest(head, gone=["a007"])
    upgrade_txn.switch_format(head.storage)
    fresh = litstore.open(root)
    assert fresh["won"] == _record("won") and fresh.head().reader.built_manifest is None


def test_a_format_3_commit_on_a_version_without_runs_writes_a_full_run(tmp_path: Path) -> None:
    """As when a format-2 writer committed between the upgrade's commit and its switch."""
    root = tmp_path / "s"
    store = _store(root)
    upgrade_txn.switch_format(store.storage)  # the config says 3, the head has no runs
    fresh = litstore.open(root)
    assert fresh["a100"] == _record("a100") and "a007" not in fresh, "read through the manifest"
    fresh.upsert([_record("a001", 1)])
    assert len(fresh.version.key_runs) == 1 and fresh.version.key_runs[0].entries == 199
    runs_agree_with_manifest(litstore.open(root).head().reader, gone=["a007"])


def test_two_upgrades_at_once_commit_one_index(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    first, second = litstore.open(root).head().reader, litstore.open(root).head().reader
    won = txn.commit(first, txn.Upgrade())
    lost = txn.commit(second, txn.Upgrade())
    assert lost.version == won.version, "the second finds the index committed and commits nothing"


def _race(root: Path, head_start: int) -> None:
    """Eight appends in a thread; an upgrade in this one once ``head_start`` of them were made."""
    started = threading.Event()
    failures: list[BaseException] = []

    def appends() -> None:
        writer = litstore.open(root)
        try:
            for batch in range(8):
                if batch == head_start:
                    started.set()
                writer.append([_record(f"t{batch}-{i}") for i in range(5)])
        except BaseException as exc:  # noqa: BLE001  (reported below)
            failures.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=appends)
    thread.start()
    upgrading = litstore.open(root)
    started.wait()
    upgrading.upgrade()
    thread.join()
    assert not failures, failures


@pytest.mark.integration  # three rounds of eight appends racing an upgrade: a few seconds
def test_an_append_and_an_upgrade_in_two_threads(tmp_path: Path) -> None:
    """The upgrade starts after 0, 2 and 4 of the eight appends: some land before its commit, some after it
    (from a writer that still holds the format-2 config), some perhaps between its commit and its switch.

    Where it lands depends on the machine's timing, so this asserts only that every order ends in a
    correct store; the tests above build each order on purpose."""
    for head_start in (0, 2, 4):
        root = tmp_path / f"s{head_start}"
        _store(root)
        _race(root, head_start)
        fresh = litstore.open(root)
        assert [version.operation for version in fresh.versions()].count("upgrade") == 1
        expected = [f"a{i:03d}" for i in range(200) if i != 7] + [f"t{b}-{i}" for b in range(8) for i in range(5)]
        assert fresh.config.format_version == 7 and sorted(fresh.keys()) == sorted(expected)
        assert fresh.get_many(expected) == [_record(key) for key in expected]
        fresh.append([_record("last")])
        runs_agree_with_manifest(litstore.open(root).head().reader, gone=["a007"])
        assert fresh.verify().ok
