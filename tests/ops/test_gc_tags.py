"""A tag created while gc runs protects its version: gc re-reads the tags after marking what it expires.

Processes race for real: one runs ``gc(keep_last=1)`` while another tags old versions.
Every tag whose creation returned must name a version that still reads back; a
creation that lost the race raises ``VersionNotFoundError`` (or ``ConflictError``)
and leaves no tag behind.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout

VERSIONS = 24


def _record(i: int) -> dict[str, Any]:
    return {"id": f"k{i:04d}", "text": f"value {i} " * 4}


def _run_gc(root: str, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    litstore.open(root).gc(dry_run=False, keep_last=1)


def _tag_all(root: str, start: multiprocessing.synchronize.Event, created: Any) -> None:
    store = litstore.open(root)
    start.wait()
    for number in range(VERSIONS - 1, 0, -1):
        try:
            store.tags.create(f"t{number}", number)
        except (litstore.VersionNotFoundError, litstore.ConflictError):
            continue
        created.put(number)


@pytest.mark.integration
@pytest.mark.parametrize("round_", range(3))
def test_a_tag_created_during_gc_always_protects_its_version(
    tmp_path: Path, round_: int, forkserver: multiprocessing.context.BaseContext
) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1024)
    for i in range(VERSIONS):
        store.append([_record(i)])
    contents = {number: dict(store.at(number).items()) for number in range(1, VERSIONS + 1)}
    context = forkserver
    start, created = context.Event(), context.Queue()
    collector = context.Process(target=_run_gc, args=(str(store.root), start))
    tagger = context.Process(target=_tag_all, args=(str(store.root), start, created))
    collector.start()
    tagger.start()
    start.set()
    for process in (collector, tagger):
        process.join(timeout=120)
        assert process.exitcode == 0
    tagged = []
    while not created.empty():
        tagged.append(created.get())
    reopened = litstore.open(store.root)
    assert dict(reopened.tags) == {f"t{number}": number for number in tagged}, "no tag is left by a lost race"
    for number in tagged:
        assert dict(reopened.at(f"t{number}").items()) == contents[number]
    assert not [path for path, _, _ in reopened.storage.walk(layout.VERSIONS) if ".expiring/" in path]
    assert reopened.gc(dry_run=False, keep_last=1).expired_versions == []  # the tagged ones stay, the rest went already
    assert reopened.verify().ok


def test_a_tag_on_a_version_gc_has_expired_is_undone(tmp_path: Path) -> None:
    """What the tag sees when gc wins: its version is a tombstone, so the tag removes itself."""
    store = litstore.Store.create(tmp_path / "s", key="id")
    for i in range(3):
        store.append([_record(i)])
    store.gc(dry_run=False, keep_last=1)
    with pytest.raises(litstore.VersionNotFoundError):
        store.tags.create("late", 1)
    assert dict(litstore.open(store.root).tags) == {}


def test_a_tag_waits_for_a_gc_mark_and_is_undone_if_the_mark_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import litstore.tags

    store = litstore.Store.create(tmp_path / "s", key="id")
    for i in range(3):
        store.append([_record(i)])
    mark = tmp_path / "s" / layout.expiring_mark(1, layout.new_transaction())
    mark.parent.mkdir(parents=True)
    mark.write_bytes(b"{}")  # a gc about to expire version 1 (or one killed there)
    monkeypatch.setattr(litstore.tags, "_GC_WAIT", 0.2)
    with pytest.raises(litstore.ConflictError, match="gc is expiring version 1"):
        store.tags.create("pinned", 1)
    assert dict(litstore.open(store.root).tags) == {}
    mark.unlink()
    store.tags.create("pinned", 1)
    assert store.gc(dry_run=False, keep_last=1).expired_versions == [0, 2]
    assert store.at("pinned")["k0000"] == _record(0)
