"""Garbage collection: what ``Store.gc`` keeps, what it removes, and what it must never break.

Every test builds a real store, snapshots what each version reads (and every file
with its size) before gc, runs gc, and compares:

- kept versions (``keep_last``, ``older_than``, tagged, latest) read back exactly what
  they read before and verify; every file they list is still there;
- expired versions raise ``VersionNotFoundError``;
- the report names exactly the files that disappeared, and its byte count is their size;
- ``dry_run`` (the default) changes nothing and reports what the real run then removes;
- debris of writers that never committed goes only once older than the grace period;
  the staged fragment of a live writer survives and can still be committed;
- writes after gc work and verify, including from a writer that opened before gc.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state

SPLITS = litstore.HashSplit(train=0.8, val=0.2)
TWO_HOURS_AGO = time.time() - 2 * 3600
TWO_DAYS_AGO = time.time() - 2 * 24 * 3600  # past a staged fragment's lease (one day)

Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "text": f"value {i}.{rev} " * 4}


def _sizes(root: Path) -> dict[str, int]:
    """Every file under ``root`` (path relative to it) and its size."""
    return {path.relative_to(root).as_posix(): path.stat().st_size for path in root.rglob("*") if path.is_file()}


def _contents(store: litstore.Snapshot) -> dict[int, dict[Any, Record]]:
    """What every version of the store reads: version -> key -> record."""
    return {version.number: dict(store.at(version.number).items()) for version in store.versions()}


def _files_of(view: litstore.Snapshot) -> set[str]:
    """The files a version names: its commit record, indexes, manifest files, key runs, deletions files
    (format 4), chunks and (format 3 on) the chunks' hashes sidecars."""
    version = view.version
    files = {layout.version_record(version.number), *version.indexes.values()}
    files.update(path for path in (version.manifest, version.checkpoint) if path)
    files.update(run.path for run in version.key_runs)
    files.update(ref.path for ref in version.deletions)
    chunks = {chunk.filename for split in view.chunks().values() for chunk in split}
    files.update(chunks)
    if view.config.format_version >= 3:
        files.update(layout.chunk_hashes(chunk) for chunk in chunks)
    return files


@dataclass
class History:
    store: litstore.Store
    root: Path
    contents: dict[int, dict[Any, Record]]  # what each version read before gc


@pytest.fixture(params=[3, 4], ids=["format3", "format4"])
def history(make_store: Callable[..., litstore.Store], request: pytest.FixtureRequest) -> History:
    """Versions 1..6 (append, upsert, delete, append, upsert, delete); version 2 tagged "golden"; in a format-3
    store (copy-on-write) and a format-4 one (deletion vectors)."""
    store = make_store(
        key="id", splits=SPLITS, chunk_bytes=1024, checkpoint_interval=3, format_version=int(request.param)
    )
    store.append([_record(i) for i in range(40)])
    store.upsert([_record(i, rev=1) for i in range(0, 40, 8)] + [_record(i) for i in range(40, 45)])
    store.tag("golden")
    store.delete([f"k{i:03d}" for i in range(1, 40, 7)])
    store.append([_record(i) for i in range(50, 60)])
    store.upsert([_record(i, rev=2) for i in range(50, 60, 2)])
    store.delete(["k050", "k003", "k044"])
    assert store.version.number == 6
    return History(store, Path(store.root), _contents(store))


def _check_kept(root: Path, contents: dict[int, dict[Any, Record]], kept: list[int]) -> None:
    """Each kept version, read by a freshly opened store, reads what it read before gc and verifies."""
    store = litstore.open(root)
    for number in kept:
        view = store.at(number)
        assert dict(view.items()) == contents[number], f"version {number} changed"
        keys = sorted(contents[number])
        assert view.get_many(keys) == [contents[number][key] for key in keys]
        report = view.verify(expected_keys=keys)
        assert report.ok, report.summary()
        missing = {path for path in _files_of(view) if not (root / path).is_file()}
        assert not missing, f"version {number} lost {missing}"


def test_gc_keep_last_keeps_last_tagged_and_latest(history: History) -> None:
    root = history.root
    before = _sizes(root)
    report = history.store.gc(dry_run=False, keep_last=2)

    assert report.kept_versions == [2, 5, 6]  # tagged 2, the last two (5 and the latest, 6)
    assert report.expired_versions == [0, 1, 3, 4]
    assert not report.dry_run
    after = _sizes(root)
    removed = set(before) - set(after)
    assert set(report.removed_files) == removed
    assert len(report.removed_files) == len(removed)  # each file reported once
    assert report.removed_bytes == sum(before[path] for path in removed)
    for number in report.expired_versions:
        # An expired commit record stays as a tombstone, so its number is never reused.
        tombstone = json.loads((root / layout.version_record(number)).read_text())
        assert tombstone["expired"] is True and tombstone["number"] == number
    _check_kept(root, history.contents, [2, 5, 6])

    store = litstore.open(root)
    assert store.version.number == 6
    assert [version.number for version in store.versions()] == [2, 5, 6]
    assert dict(store.tags) == {"golden": 2}
    for number in (0, 1, 3, 4):
        with pytest.raises(litstore.VersionNotFoundError):
            store.at(number)
        with pytest.raises(litstore.VersionNotFoundError):
            store.verify(number)
    # Versions whose manifests were composed through expired ones got checkpoints.
    assert set(report.checkpoints_written) <= {2, 5, 6}

    again = store.gc(dry_run=False, keep_last=2)
    assert (again.removed_files, again.removed_bytes, again.expired_versions) == ([], 0, [])
    assert _sizes(root) == after

    version = store.append([_record(i) for i in range(100, 110)])
    assert version.number == 7
    expected = {**history.contents[6], **{f"k{i:03d}": _record(i) for i in range(100, 110)}}
    assert dict(litstore.open(root).items()) == expected
    assert litstore.open(root).verify(expected_keys=expected).ok
    _check_kept(root, {**history.contents, 7: expected}, [2, 5, 6, 7])


def test_gc_keep_last_one_keeps_only_the_latest_and_tags(history: History) -> None:
    history.store.delete_tag("golden")
    report = history.store.gc(dry_run=False, keep_last=1)
    assert report.kept_versions == [6]
    assert report.expired_versions == [0, 1, 2, 3, 4, 5]
    _check_kept(history.root, history.contents, [6])
    # Only the latest version's files, the store config and the tombstones remain.
    store = litstore.open(history.root)
    remaining = {path for path in _sizes(history.root) if not path.startswith(layout.TAGS)}
    tombstones = {layout.version_record(number) for number in range(6)}
    assert remaining - {layout.CONFIG, layout.HEAD_HINT} - tombstones <= _files_of(store) | {
        layout.manifest_checkpoint(6, store.version.transaction or "")
    }


def test_gc_without_limits_keeps_every_version(history: History) -> None:
    before = tree_state(history.root)
    report = history.store.gc(dry_run=False)
    assert report.expired_versions == []
    assert report.kept_versions == [0, 1, 2, 3, 4, 5, 6]
    assert report.removed_files == []
    assert tree_state(history.root) == before
    _check_kept(history.root, history.contents, list(range(7)))


def test_dry_run_removes_nothing_and_reports_what_gc_removes(history: History) -> None:
    root = history.root
    _, debris = _stale_debris(history.store)
    before_state = tree_state(root)
    before = _sizes(root)

    dry = history.store.gc(keep_last=2)  # a dry run by default, as the CLI and Delta's vacuum
    assert dry.dry_run and dry.expired_versions and dry.removed_files
    assert tree_state(root) == before_state  # not one byte changed
    assert history.store.gc(keep_last=2, dry_run=True) == dry
    assert dry.checkpoints_written == []
    assert set(debris) <= set(dry.removed_files)

    real = history.store.gc(dry_run=False, keep_last=2)
    assert sorted(real.removed_files) == sorted(dry.removed_files)
    assert real.removed_bytes == dry.removed_bytes
    assert (real.kept_versions, real.expired_versions) == (dry.kept_versions, dry.expired_versions)
    removed = set(before) - set(_sizes(root))
    assert set(real.removed_files) == removed
    assert real.removed_bytes == sum(before[path] for path in removed)
    _check_kept(root, history.contents, real.kept_versions)


def test_gc_of_a_store_with_holes_keeps_the_dead_rows_its_last_version_needs(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=1024, format_version=4)
    store.append([_record(i) for i in range(60)])
    manifest = store.manifest()
    chunk_of = dict(zip(manifest.column("key").to_pylist(), manifest.column("chunk").to_pylist(), strict=True))
    keys_in: dict[str, list[str]] = {}
    for key, chunk in sorted(chunk_of.items()):
        keys_in.setdefault(chunk, []).append(key)
    first = chunk_of["k000"]
    last, emptied = sorted(chunk for chunk in keys_in if chunk != first)[:2]
    gone = keys_in[last][0]
    store.upsert([_record(0, rev=1)])  # version 2: one dead row in ``first``
    store.upsert([_record(int(keys_in[first][1][1:]), rev=1)])  # 3: another in ``first``
    store.delete([gone])  # 4: one dead row in ``last``
    store.delete(keys_in[emptied])  # 5: every row of ``emptied``
    expected = dict(store.items())
    head = store.version
    refs = {ref.chunk: ref.path for ref in head.deletions}
    paths = {number: store.at(number).version for number in range(2, 5)}
    assert refs[first] == layout.deletions(3, paths[3].transaction or "")
    assert refs[last] == layout.deletions(4, paths[4].transaction or ""), "version 5 keeps version 4's vector"
    assert emptied in head.dropped_chunks and emptied not in refs
    superseded = layout.deletions(2, paths[2].transaction or "")  # ``first``'s vector of version 2, replaced in 3
    root = Path(store.root)
    assert (root / superseded).is_file()

    report = store.gc(dry_run=False, keep_last=1)
    assert report.kept_versions == [head.number] and report.expired_versions == [0, 1, 2, 3, 4]
    assert superseded in report.removed_files and not (root / superseded).exists()
    assert emptied in report.removed_files and not (root / emptied).exists(), "no kept version lists it"
    for path in {*refs.values(), first, last}:
        assert (root / path).is_file(), f"{path} is still needed"
    fresh = litstore.open(root)
    assert dict(fresh.items()) == expected and len(expected) == 60 - 1 - len(keys_in[emptied])
    keys = sorted(expected)
    assert fresh.get_many(keys) == [expected[key] for key in keys]
    assert fresh["k000"] == _record(0, rev=1) and gone not in fresh
    missing = {path for path in _files_of(fresh) if not (root / path).is_file()}
    assert not missing, missing
    remaining = {path for path in _sizes(root) if not path.startswith(layout.TAGS)}
    tombstones = {layout.version_record(number) for number in range(head.number)}
    assert remaining - {layout.CONFIG, layout.HEAD_HINT} - tombstones <= _files_of(fresh) | {
        layout.manifest_checkpoint(head.number, head.transaction or "")
    }, "every file of an expired version that the last one does not name is gone"

    store.upsert([_record(2, rev=5)])  # a new vector merged with the kept one of an expired version
    expected["k002"] = _record(2, rev=5)
    assert dict(litstore.open(root).items()) == expected


# -- debris and the grace period -----------------------------------------------------


def _stage(store: litstore.Store, first: int, count: int) -> tuple[None, litstore.StagedFragment]:
    """Stage an append as a writer would, without committing it."""
    return None, store.stage([_record(i) for i in range(first, first + count)])


def _age(root: Path, paths: list[str], when: float = TWO_HOURS_AGO) -> None:
    for path in paths:
        os.utime(root / path, (when, when))


def _stale_debris(store: litstore.Store) -> tuple[litstore.StagedFragment, list[str]]:
    """A writer that died long ago: a staged fragment and the files of a failed publish, 2 hours old."""
    root = Path(store.root)
    _, staged = _stage(store, 700, 30)
    fragment = sorted(path for path in _sizes(root) if path.startswith(layout.fragment(staged.transaction) + "/"))
    assert len(fragment) >= 2  # several chunks
    published = [
        layout.manifest_delta(99, staged.transaction),
        layout.split_index(99, staged.transaction, "train"),
    ]
    for path in published:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"left behind by a writer that died while publishing")
    debris = fragment + published
    _age(root, published)
    _age(root, fragment, TWO_DAYS_AGO)
    return staged, debris


def test_debris_is_removed_only_after_the_grace_period(history: History) -> None:
    store, root = history.store, history.root
    _, debris = _stale_debris(store)
    _, fresh = _stage(store, 800, 30)  # a dead writer's fragment too, but only just written
    fresh_files = [path for path in _sizes(root) if path.startswith(layout.fragment(fresh.transaction) + "/")]
    assert fresh_files

    before = _sizes(root)
    report = store.gc(dry_run=False)
    assert report.expired_versions == []
    assert sorted(report.removed_files) == sorted(debris)
    assert report.removed_bytes == sum(before[path] for path in debris)
    after = _sizes(root)
    assert not set(debris) & set(after)
    assert set(fresh_files) <= set(after)
    _check_kept(root, history.contents, list(range(7)))

    # A grace period shorter than its age does not break its lease; break_leases does.
    _age(root, fresh_files, time.time() - 120)
    assert store.gc(dry_run=False, grace=timedelta(hours=1)).removed_files == []
    assert store.gc(dry_run=False, grace=timedelta(minutes=1)).removed_files == []
    report = store.gc(dry_run=False, grace=timedelta(minutes=1), break_leases=True)
    assert sorted(report.removed_files) == sorted(fresh_files)
    _check_kept(root, history.contents, list(range(7)))


def test_a_live_writers_staged_fragment_survives_gc_and_commits(history: History) -> None:
    store, root = history.store, history.root
    _, staged = _stage(store, 900, 25)  # a writer that is still working: fresh files
    staged_files = [path for path in _sizes(root) if path.startswith(layout.fragment(staged.transaction) + "/")]

    report = store.gc(dry_run=False, keep_last=1)  # the most aggressive expiry there is, default grace
    assert not set(report.removed_files) & set(staged_files)
    assert all((root / path).is_file() for path in staged_files)

    # The writer now publishes on top of the latest version, which gc kept.
    latest = litstore.open(root)
    version = latest.commit([staged])
    reopened = litstore.open(root)
    assert reopened.version.number == version.number == 7
    expected = {**history.contents[6], **{f"k{i:03d}": _record(i) for i in range(900, 925)}}
    assert dict(reopened.items()) == expected
    report = reopened.verify(expected_keys=expected)
    assert report.ok, report.summary()


# -- older_than -------------------------------------------------------------------


def test_gc_older_than_keeps_recent_versions(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=1024)
    store.append([_record(i) for i in range(10)])
    store.append([_record(i) for i in range(10, 20)])
    time.sleep(2.0)  # a clear gap between the old versions and the recent ones
    store.append([_record(i) for i in range(20, 30)])
    store.delete(["k000", "k025"])
    contents = _contents(store)
    created = {version.number: version.created_at for version in store.versions()}
    root = Path(store.root)

    assert store.gc(older_than=timedelta(days=1), dry_run=True).expired_versions == []
    assert store.gc(older_than=created[3], dry_run=True).expired_versions == [0, 1, 2]  # a time: kept if at/after

    # A duration: versions created within the last (now - created[3]) + 1 s are kept.
    age = datetime.now(UTC) - created[3] + timedelta(seconds=1)
    report = store.gc(dry_run=False, older_than=age)
    assert report.kept_versions == [3, 4]
    assert report.expired_versions == [0, 1, 2]
    _check_kept(root, contents, [3, 4])
    for number in (0, 1, 2):
        with pytest.raises(litstore.VersionNotFoundError):
            litstore.open(root).at(number)
    store.append([_record(40)])
    assert litstore.open(root).verify().ok


# -- writers that opened before gc ---------------------------------------------------


def test_a_writer_behind_gc_does_not_reuse_an_expired_version_number(
    make_store: Callable[..., litstore.Store],
) -> None:
    """A store opened before gc expired the versions after its own must not commit "below" the head.

    ``writer`` committed version 1 (a long-lived writer: it has the version's key index
    and chunk list in memory); another writer commits 2 and 3; gc(keep_last=1) expires
    0..2 and deletes their commit records. ``writer.append`` must either fail (it is
    behind) or land in the latest version. It must not re-create commit record 2,
    which no one will ever read as the latest version: that write would be lost.
    """
    writer = make_store(key="id")
    writer.append([{"id": f"k{i}"} for i in range(5)])
    root = writer.root
    other = litstore.open(root)
    other.append([{"id": "x"}])
    other.append([{"id": "y"}])
    assert other.gc(dry_run=False, keep_last=1).expired_versions == [0, 1, 2]

    try:
        committed = writer.append([{"id": "z", "by": "writer"}])
    except litstore.LitstoreError:
        committed = None
    latest = litstore.open(root)
    if committed is not None:
        assert latest.version.number == committed.number, (
            f"append returned version {committed.number}, but the store's latest version is "
            f"{latest.version.number}: the write is lost"
        )
        assert latest["z"] == {"id": "z", "by": "writer"}
    assert [version.number for version in latest.versions()][-1] == latest.version.number
    report = latest.verify()
    assert report.ok, report.summary()


def test_a_writer_behind_gc_does_not_commit_a_duplicate_key(make_store: Callable[..., litstore.Store]) -> None:
    """A writer catching up across versions gc expired must not miss the keys they added.

    ``writer`` committed version 1. Another writer commits 2 (tagged, so kept), 3 (adds
    key ``x``) and 4; gc(keep_last=1) expires 3. ``writer`` appends ``x`` too: its
    commit of version 2 loses, it catches up to 4, and must then notice that ``x`` is
    taken (an error; ConflictError says it best). Committing it would put ``x`` in
    the store twice.
    """
    writer = make_store(key="id")
    writer.append([{"id": f"k{i}"} for i in range(5)])
    root = writer.root
    other = litstore.open(root)
    other.append([{"id": "w"}])
    other.tag("kept")
    other.append([{"id": "x", "by": "other"}])
    other.append([{"id": "y"}])
    assert other.gc(dry_run=False, keep_last=1).expired_versions == [0, 1, 3]

    try:
        committed = writer.append([{"id": "x", "by": "writer"}])
    except litstore.LitstoreError:
        committed = None
    latest = litstore.open(root)
    report = latest.verify()
    assert report.ok, report.summary()
    keys = latest.keys()
    assert len(keys) == len(set(keys)), f"duplicate keys in version {latest.version.number}"
    assert committed is None, f"append of a key that is already in the store committed version {committed.number}"
    assert latest["x"] == {"id": "x", "by": "other"}


def test_gc_streams_the_checkpoints_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept version whose chain passes expired ones gets a checkpoint streamed from the files (a row group
    at a time), never its manifest composed whole in memory: what was GBs at 16M records."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1024, checkpoint_interval=64)
    for step in range(8):  # version 1 appends 30 records; each upsert adds 20 and replaces 10
        batch = [_record(i, rev=step) for i in range(step * 20, step * 20 + 30)]
        store.append(batch) if step == 0 else store.upsert(batch)
    expected = {r["id"]: r for step in range(8) for r in (_record(i, step) for i in range(step * 20, step * 20 + 30))}
    gone = sorted(expected)[::7]
    store.delete(gone)  # version 9
    expected = {key: record for key, record in expected.items() if key not in gone}

    def composed_whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("gc composed a manifest in memory")

    monkeypatch.setattr("litstore.read.manifests.compose_manifest", composed_whole)
    store.gc(dry_run=False, keep_last=3)  # keeps 7, 8 and 9: version 7's chain passed 1 to 6
    monkeypatch.undo()
    names = os.listdir(tmp_path / "s" / layout.MANIFESTS)
    assert any(name.startswith(f"{7:08d}-") and name.endswith(".checkpoint.parquet") for name in names)
    reopened = litstore.open(tmp_path / "s")
    assert {key: dict(record) for key, record in reopened.items()} == expected
    assert reopened.at(7).sql("SELECT count(*) AS n FROM manifest").column("n")[0].as_py() == 150
    assert sorted(reopened.at(8).keys()) == sorted({r["id"] for r in map(_record, range(170))})
    for number in (7, 8, 9):
        assert reopened.at(number).verify().ok
