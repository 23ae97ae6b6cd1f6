"""``Store.upgrade``: a format-2 store with history becomes a format-4 one whose lookups read the key index.

The upgrade commits a version with the same records and fingerprint (an empty diff)
whose one key run agrees with the manifest on every key, then switches the config;
older versions read as before; a second upgrade commits nothing; an upgrade stopped
between its commit and the switch leaves a working store that upgrades again; a
missing, cut or damaged run is an ``IntegrityError`` saying how to rebuild it, which
the upgrade does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore import txn
from litstore.format import hashing, layout
from litstore.read import keyruns
from litstore.read.version import VersionReader
from litstore.txn import upgrade as upgrade_txn
from tests.conftest import ON_S3_TOO, reopen

Record = dict[str, Any]


def _record(key: str, rev: int) -> Record:
    return {"id": key, "rev": rev, "text": f"{key}/{rev} " * 3}


def _keys(numbers: range) -> list[str]:
    return [f"k{i:04d}" for i in numbers]


def runs_agree_with_manifest(reader: VersionReader, gone: Sequence[str] = ()) -> None:
    """Every key of ``reader``'s manifest is live in its key runs at the manifest's chunk, row and content hash;
    every key of ``gone`` is not."""
    manifest = reader.manifest()
    keys = manifest.column("key").to_pylist() + list(gone)
    hashes = np.array([hashing.key_hash(key) for key in keys], dtype=np.uint64)
    prints = np.array([hashing.keyprint(key) for key in keys], dtype="V16")
    status, names, entries = reader.key_runs().find_many(hashes, prints)
    live = manifest.num_rows
    assert (status[:live] == keyruns.LIVE).all()
    assert names[:live] == manifest.column("chunk").to_pylist()
    assert entries["row"][:live].tolist() == manifest.column("row").to_pylist()
    assert [bytes(content) for content in entries["content"][:live]] == manifest.column("content_hash").to_pylist()
    assert (status[live:] != keyruns.LIVE).all()


def _history(root: Path, **options: Any) -> tuple[litstore.Store, dict[int, dict[Any, Record]]]:
    """A format-2 store with appends, upserts, deletes and tags; every version's records."""
    store = litstore.Store.create(root, key="id", chunk_bytes=4096, **{"format_version": 2, **options})
    store.append([_record(key, 0) for key in _keys(range(300))])
    store.tag("first")
    store.append([_record(key, 1) for key in _keys(range(300, 400))])
    store.upsert([_record(key, 2) for key in _keys(range(10, 30))])
    store.delete(_keys(range(50, 70)))
    store.tag("before")
    store.upsert([_record(key, 3) for key in _keys(range(390, 410))])
    return store, {number: dict(store.at(number).items()) for number in range(store.version.number + 1)}


def test_upgrade_keeps_records_and_history_and_indexes_every_key(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store, versions = _history(root)
    before = store.version
    assert store.config.format_version == 2 and not before.key_runs
    version = store.upgrade(message="index")
    assert version.number == before.number + 1 and version.operation == "upgrade" and version.message == "index"
    assert version.fingerprint == before.fingerprint and version.counts == before.counts
    assert (version.added, version.replaced, version.removed) == (0, 0, 0)
    assert len(version.key_runs) == 1 and version.key_runs[0].entries == before.total
    assert store.config.format_version == 7
    assert json.loads((root / layout.CONFIG).read_text())["format_version"] == 7
    assert not store.diff(before.number, version.number)

    reopened = litstore.open(root)
    assert reopened.config.format_version == 7 and reopened.version == version
    head = reopened.head().reader
    runs_agree_with_manifest(head, gone=[*_keys(range(50, 70)), "never"])
    fresh = litstore.open(root)
    expected = versions[before.number]
    assert fresh.get_many(sorted(expected)) == [expected[key] for key in sorted(expected)]
    assert fresh.head().reader.built_manifest is None, "the lookups read the key run, not the manifest"
    assert "k0055" not in fresh and fresh.get("k0055") is None and "k0399" in fresh
    for number, records in versions.items():  # older versions read as they did, through their manifests
        old = litstore.open(root).at(number)
        assert dict(old.items()) == records
        if records:
            key = sorted(records)[len(records) // 2]
            assert old[key] == records[key]
    assert reopened.at("first").version.number == 1 and dict(reopened.at("before").items()) == versions[4]
    assert reopened.verify().ok
    reopened.append([_record("new", 9)])
    assert len(reopened.version.key_runs) == 2, "the next commit merges onto the upgrade's run"
    runs_agree_with_manifest(reopened.head().reader)


@ON_S3_TOO
def test_upgrade_on_any_backend(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id", chunk_bytes=2048, format_version=2)
    store.append([_record(key, 0) for key in _keys(range(100))])
    store.delete(["k0003"])
    before = store.version
    version = store.upgrade()
    assert version.fingerprint == before.fingerprint and len(version.key_runs) == 1
    fresh = reopen(store)
    assert fresh.config.format_version == 7 and fresh["k0050"] == _record("k0050", 0) and "k0003" not in fresh
    runs_agree_with_manifest(fresh.head().reader, gone=["k0003"])
    assert dict(fresh.at(before.number).items()) == dict(fresh.items())
    assert reopen(store).upgrade() == version


@pytest.mark.parametrize("format_version", [3, 4])
def test_a_format_3_or_4_store_is_switched_and_given_one_filtered_run(tmp_path: Path, format_version: int) -> None:
    """Its runs read as they are, but have no key filters: one run of every record, with its filter, replaces
    them (the same records and fingerprint), and a second upgrade commits nothing."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1024, format_version=format_version)
    store.append([_record(key, 0) for key in _keys(range(40))])
    store.append([_record(key, 0) for key in _keys(range(40, 50))])
    before = store.version
    assert len(before.key_runs) == 2 and not store.head().reader.key_runs().filtered()
    version = store.upgrade()
    assert version.number == before.number + 1 and version.operation == "upgrade"
    assert version.fingerprint == before.fingerprint and len(version.key_runs) == 1
    fresh = litstore.open(store.root)
    assert fresh.config.format_version == 7 and fresh.head().reader.key_runs().filtered()
    assert fresh.get_many(_keys(range(50))) == [_record(key, 0) for key in _keys(range(50))]
    assert fresh.upgrade() == version


def test_a_second_upgrade_commits_nothing(tmp_path: Path) -> None:
    store, _ = _history(tmp_path / "s")
    first = store.upgrade()
    assert store.upgrade() == first
    assert litstore.open(store.root).upgrade() == first
    assert [v.operation for v in store.versions()].count("upgrade") == 1


def test_upgrade_of_a_format_5_store_or_an_empty_one_commits_nothing(tmp_path: Path) -> None:
    native = litstore.Store.create(tmp_path / "a", key="id")
    native.append([_record(key, 0) for key in _keys(range(10))])
    assert native.upgrade() == native.version and native.version.number == 1
    empty = litstore.Store.create(tmp_path / "b", key="id", format_version=2)
    assert empty.upgrade().number == 0 and empty.config.format_version == 7
    empty.append([_record("a", 0)])
    assert len(empty.version.key_runs) == 1 and litstore.open(tmp_path / "b")["a"] == _record("a", 0)


def test_an_upgrade_stopped_before_the_switch_leaves_a_working_store(tmp_path: Path) -> None:
    """The first half done for real: the upgrade's commit, not the config switch."""
    root = tmp_path / "s"
    store, versions = _history(root)
    committed = txn.commit(store.head().reader, txn.Upgrade()).version
    assert committed.operation == "upgrade" and committed.key_runs
    stopped = litstore.open(root)
    assert stopped.config.format_version == 2 and stopped.version == committed
    assert dict(stopped.items()) == versions[committed.number - 1]
    assert stopped.verify().ok
    version = stopped.upgrade()
    assert version == committed, "the head has its index: the upgrade only switches the format"
    assert litstore.open(root).config.format_version == 7
    runs_agree_with_manifest(litstore.open(root).head().reader)


def test_writes_after_a_stopped_upgrade_then_upgrade_again(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store, _ = _history(root)
    txn.commit(store.head().reader, txn.Upgrade())
    stopped = litstore.open(root)
    stopped.append([_record("late", 0)])
    stopped.delete(["k0001"])
    assert stopped.version.key_runs == (), "a format-2 commit lists no runs, never its parent's"
    assert "late" in litstore.open(root) and "k0001" not in litstore.open(root)
    version = stopped.upgrade()
    assert version.operation == "upgrade" and version.number == stopped.version.number
    fresh = litstore.open(root)
    assert fresh["late"] == _record("late", 0) and "k0001" not in fresh
    runs_agree_with_manifest(fresh.head().reader, gone=["k0001"])


def test_upgrade_of_a_format_1_store(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store, versions = _history(root, format_version=1)
    version = store.upgrade()
    fresh = litstore.open(root)
    assert fresh.config.format_version == 7 and dict(fresh.items()) == versions[version.number - 1]
    fresh.upsert([_record("k0000", 7)])
    assert litstore.open(root)["k0000"] == _record("k0000", 7)
    runs_agree_with_manifest(litstore.open(root).head().reader)
    assert litstore.open(root).verify().ok


def test_upgrade_refuses_a_bad_rebuild_flag_before_reading(tmp_path: Path) -> None:
    store, _ = _history(tmp_path / "s")
    with pytest.raises(litstore.InvalidArgumentError, match="rebuild must be True or False"):
        store.upgrade(rebuild="yes")  # type: ignore[arg-type]
    assert litstore.open(store.root).config.format_version == 2


# -- a damaged index: an IntegrityError that says what to do, and the upgrade that does it -----------


def _indexed(root: Path) -> tuple[litstore.Store, Path]:
    store = litstore.Store.create(root, key="id", chunk_bytes=4096)
    store.append([_record(key, 0) for key in _keys(range(3000))])
    return store, root / store.version.key_runs[0].path


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_cut_run_is_named_and_the_upgrade_writes_it_again(tmp_path: Path, damage: str) -> None:
    store, path = _indexed(tmp_path / "s")
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(litstore.IntegrityError) as raised:
        litstore.open(store.root)["k0001"]
    message = str(raised.value)
    assert store.version.key_runs[0].path in message and "litstore upgrade --rebuild" in message
    version = litstore.open(store.root).upgrade()
    assert version.number == store.version.number + 1 and version.operation == "upgrade"
    fresh = litstore.open(store.root)
    assert fresh["k0001"] == _record("k0001", 0) and "nope" not in fresh
    runs_agree_with_manifest(fresh.head().reader)


def test_a_damaged_page_is_rebuilt_only_when_asked(tmp_path: Path) -> None:
    store, path = _indexed(tmp_path / "s")
    data = bytearray(path.read_bytes())
    data[1000] ^= 0x40  # inside the first page: the run still opens, a lookup's page check finds it
    path.write_bytes(bytes(data))
    keys = _keys(range(3000))
    with pytest.raises(litstore.IntegrityError, match=r"checksum.*litstore upgrade --rebuild"):
        litstore.open(store.root).get_many(keys)
    assert litstore.open(store.root).upgrade() == store.version, "the runs open: nothing to do"
    rebuilt = litstore.open(store.root).upgrade(rebuild=True)
    assert rebuilt.number == store.version.number + 1
    assert litstore.open(store.root).get_many(keys) == [_record(key, 0) for key in keys]


# -- stopped at any storage call ---------------------------------------------------------------------


class _Stop(BaseException):
    """Raised by :class:`_Stopping` where a crash would have stopped the upgrade."""


class _Stopping:
    """Forwards every storage call; raises :class:`_Stop` instead of the ``stop_at``-th call that writes."""

    WRITES = ("write", "put_if_absent", "delete", "delete_tree", "write_file", "staging")

    def __init__(self, inner: Any, stop_at: int | None) -> None:
        self._inner = inner
        self._stop_at = stop_at
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name not in self.WRITES:
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{name} {args[0]}")
            if len(self.calls) == self._stop_at:
                raise _Stop
            return found(*args, **kwargs)

        return call


def _upgrade_through(root: Path, stop_at: int | None) -> list[str]:
    """Upgrade the store at ``root`` through a storage that stops at its ``stop_at``-th write; the writes made."""
    head = litstore.open(root).head().reader
    stopping = _Stopping(head.storage, stop_at)
    reader = VersionReader(stopping, head.config, head.version)  # type: ignore[arg-type]
    try:
        upgrade_txn.upgrade(reader)
    except _Stop:
        pass
    return stopping.calls


def test_an_upgrade_stopped_at_any_storage_call_leaves_a_store_that_upgrades_again(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    _, versions = _history(pristine)
    latest = max(versions)
    steps = _upgrade_through(Path(shutil.copytree(pristine, tmp_path / "clean")), None)
    assert steps[-1] == f"write {layout.CONFIG}", "the config is switched last"
    for stop_at in range(1, len(steps) + 1):
        root = Path(shutil.copytree(pristine, tmp_path / f"stopped-{stop_at}"))
        _upgrade_through(root, stop_at)
        stopped = litstore.open(root)
        assert stopped.config.format_version == 2, f"stopped before the switch ({steps[stop_at - 1]})"
        assert stopped.version.number in (latest, latest + 1)
        assert dict(stopped.items()) == versions[latest] and stopped.verify().ok
        stopped.append([_record("after", 0)])
        version = litstore.open(root).upgrade()
        fresh = litstore.open(root)
        assert fresh.config.format_version == 7 and fresh.version == version
        assert fresh["after"] == _record("after", 0) and "k0055" not in fresh
        runs_agree_with_manifest(fresh.head().reader, gone=["k0055"])


def test_upgrade_gives_old_chunks_their_sidecars_so_streaming_composes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from litstore.read import chunkhashes

    store = litstore.Store.create(tmp_path / "s", key="id", format_version=2, chunk_bytes=2048)
    store.append([{"id": f"k{i:03d}", "v": i} for i in range(200)])
    store.upsert([{"id": f"k{i:03d}", "v": -i} for i in range(0, 200, 9)])
    before = dict(store.items())
    listed = [chunk for chunks in store.chunks().values() for chunk in chunks]
    assert not chunkhashes.all_present(store.storage, listed)
    store.upgrade()
    assert chunkhashes.all_present(store.storage, listed)
    fresh = litstore.open(tmp_path / "s")

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the manifest was composed")

    monkeypatch.setattr(VersionReader, "manifest", refuse)
    assert dict(fresh.items()) == before
    streamed = sorted((record["id"], record["v"]) for record in fresh.dataset())
    assert streamed == sorted((key, record["v"]) for key, record in before.items())


def test_a_rebuild_of_a_format_4_store_with_holes_keeps_its_dead_rows_dead(tmp_path: Path) -> None:
    """The upgrade's version carries its parent's deletion vectors: without them every dead row came back."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=2048)
    store.append([_record(key, 0) for key in _keys(range(120))])
    store.upsert([_record(key, 1) for key in _keys(range(0, 120, 7))])
    store.delete(_keys(range(40, 50)))
    before = dict(store.items())
    assert store.head().reader.deletions.refs and len(before) == 110
    # A holed chunk whose sidecar is gone gets none: the manifest no longer holds its dead rows' hashes.
    holed = store.head().reader.deletions.refs[0].chunk
    (tmp_path / "s" / layout.chunk_hashes(holed)).unlink()

    store.upgrade(rebuild=True)
    fresh = litstore.open(tmp_path / "s")
    assert fresh.version.operation == "upgrade"
    assert fresh.version.deletions == store.versions()[-2].deletions
    assert not (tmp_path / "s" / layout.chunk_hashes(holed)).exists()
    assert dict(fresh.items()) == before
    assert fresh.to_arrow().num_rows == len(fresh) == 110
    report = fresh.verify()
    assert report.ok, report.summary()
    runs_agree_with_manifest(fresh.head().reader, gone=_keys(range(40, 50)))
