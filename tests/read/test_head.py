"""Finding the newest version: the head hint, checked by lookups, and the listing it saves.

Every commit overwrites ``versions/head.hint`` with its number; opening a store and
``refresh()`` read it and look up its record and the two after it
(:func:`litstore.read.log.head_number`), a losing writer looks up the records after its
head (:func:`litstore.read.log.versions_after`). Whatever the hint says (missing,
garbage, stale, planted past the last record or behind it) and whatever gaps a damaged
store has, the head found is the listing's. After 1,000 commits opening makes as many
storage calls as after 10, none a listing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout
from litstore.format.models import Version
from litstore.read import log
from litstore.storage import Storage
from litstore.storage.local import LocalStorage
from litstore.storage.memory import MemoryStorage
from litstore.txn import race
from tests.conftest import ON_S3_TOO, reopen

MakeStore = Callable[..., litstore.Store]


def _store(make_any_store: MakeStore, commits: int = 5) -> litstore.Store:
    store = make_any_store(key="id", format_version=3)
    for number in range(commits):
        store.append([{"id": f"k{number}", "x": number}])
    return store


def _listed_head(storage: Storage) -> int:
    return log.version_numbers(storage)[-1]


def _extend(store: litstore.Store, until: int) -> None:
    """Commit versions up to ``until`` with the lowest-level commit call, which writes the hint as every commit
    does: copies of the head's record naming no files but its key runs (lookups read those), many, cheaply."""
    store.refresh()
    reader, head = store.head().reader, store.version
    for number in range(head.number + 1, until + 1):
        copy = head.model_copy(
            update={"number": number, "parent": number - 1, "transaction": None, "manifest": None}
            | {"indexes": {}, "fragments": ()}
        )
        assert race.put_commit_record(reader, Version.model_validate(copy.model_dump()), [])


def _hint(storage: Storage, data: bytes) -> None:
    storage.write(layout.HEAD_HINT, data)


@ON_S3_TOO
def test_every_commit_names_itself_in_the_hint_and_the_head_is_the_listings(make_any_store: MakeStore) -> None:
    store = _store(make_any_store)
    assert store.storage.read(layout.HEAD_HINT) == b"5\n"
    assert log.head_number(store.storage) == _listed_head(store.storage) == 5
    assert reopen(store).version.number == 5
    store.storage.delete(layout.HEAD_HINT)  # a store written before the hint, or a hint lost
    assert log.head_number(store.storage) == 5
    assert reopen(store).version.number == 5


@ON_S3_TOO
@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(b"2\n", id="stale"),
        pytest.param(b"0", id="version-0"),
        pytest.param(b"6\n", id="one-past"),
        pytest.param(b"99999999999\n", id="far-past"),
        pytest.param(b"", id="empty"),
        pytest.param(b"five\n", id="words"),
        pytest.param(b"-1\n", id="negative"),
        pytest.param(b" 5\n", id="padded"),
        pytest.param(b"5\n\n", id="two-newlines"),
        pytest.param(b"4" * 10_000, id="huge"),
        pytest.param(b"\xff\xfe5", id="binary"),
    ],
)
def test_a_stale_planted_or_garbage_hint_gives_the_listings_head(make_any_store: MakeStore, hint: bytes) -> None:
    store = _store(make_any_store)
    _hint(store.storage, hint)
    assert log.head_number(store.storage) == _listed_head(store.storage) == 5
    assert reopen(store).version.number == 5
    other = reopen(store)
    store.append([{"id": "more", "x": 0}])
    _hint(store.storage, hint)
    assert other.refresh().number == 6


def test_a_hint_that_is_a_directory_or_a_link_is_no_hint(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "store", key="id", format_version=3)
    store.append([{"id": "a", "x": 1}])
    hint = tmp_path / "store" / layout.HEAD_HINT
    hint.unlink()
    hint.mkdir()
    assert log.head_number(store.storage) == 1
    hint.rmdir()
    (tmp_path / "elsewhere").write_bytes(b"0\n")
    hint.symlink_to(tmp_path / "elsewhere")
    assert log.head_hint(store.storage) is None
    assert reopen(store).version.number == 1


@ON_S3_TOO
def test_a_gap_above_the_hint_is_stepped_over_as_the_listing_does(make_any_store: MakeStore) -> None:
    """A damaged store (record 4 of 0-6 removed by hand): the head is 6, as listed, and the next append
    is version 7, never a new version 4 forking the history."""
    store = _store(make_any_store, commits=6)
    store.storage.delete(layout.version_record(4))
    for hint in (b"3\n", b"2\n", b"6\n", b"4\n", None):
        if hint is None:
            store.storage.delete(layout.HEAD_HINT)
        else:
            _hint(store.storage, hint)
        assert log.head_number(store.storage) == _listed_head(store.storage) == 6, hint
        assert log.versions_after(store.storage, 3) == [5, 6]
    _hint(store.storage, b"3\n")
    assert reopen(store).append([{"id": "after-gap", "x": 0}]).number == 7
    assert not store.storage.exists(layout.version_record(4))
    assert store.storage.read(layout.HEAD_HINT) == b"7\n"


@ON_S3_TOO
def test_the_records_after_a_writers_head_are_the_listings(make_any_store: MakeStore) -> None:
    store = _store(make_any_store, commits=3)
    _extend(store, log.MAX_PROBES + 6)
    listed = log.version_numbers(store.storage)
    for number in listed:
        assert log.versions_after(store.storage, number) == [found for found in listed if found > number]


@ON_S3_TOO
def test_a_losing_writer_catches_up_with_the_winners(make_any_store: MakeStore) -> None:
    store = _store(make_any_store, commits=2)
    behind = reopen(store)
    for number in range(3):
        store.append([{"id": f"winner-{number}", "x": number}])
    store.storage.delete(layout.HEAD_HINT)
    assert behind.append([{"id": "late", "x": 0}]).number == 6
    assert reopen(store).version.number == 6
    assert {"late", "winner-0", "winner-2"} <= set(reopen(store).keys())


class _Calls:
    """Every storage call the local and memory backends make, by method name and path."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []
        self._depth = threading.local()

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(storage: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            if depth == 0:  # a method calling another (memory's read_range) counts once
                self.made.append((name, path))
            self._depth.value = depth + 1
            try:
                return method(storage, path, *args, **kwargs)
            finally:
                self._depth.value = depth

        return recorded


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Calls]:
    found = _Calls()
    for backend in (LocalStorage, MemoryStorage):
        for name in ("read", "read_range", "mapped", "exists", "names", "walk"):
            if name in vars(backend):
                monkeypatch.setattr(backend, name, found.wrap(name, vars(backend)[name]))
    yield found


def _relative(path: str, head: int) -> str:
    """``path`` with a commit record's number written relative to ``head`` (``versions/<head+1>.json``)."""
    match = re.fullmatch(r"versions/(\d+)\.json", path)
    if match is None:
        return path
    offset = int(match.group(1)) - head
    return f"versions/<head{offset:+d}>.json" if offset else "versions/<head>.json"


def test_opening_after_1000_commits_makes_the_calls_it_makes_after_10(
    make_any_store: MakeStore, backend: str, calls: _Calls
) -> None:
    store = _store(make_any_store, commits=3)
    made = {}
    sizes = (10, 1_000) if backend == "memory" else (10, 200)  # local commit records are synced: slower
    for until in sizes:
        _extend(store, until)
        calls.made.clear()
        handle = reopen(store)
        assert handle.version.number == until
        assert handle["k1"]["x"] == 1
        made[until] = [(name, _relative(path, until)) for name, path in calls.made]
        assert not [call for call in calls.made if call[0] in ("names", "walk")], calls.made
    assert made[10] == made[sizes[1]]
    assert made[10][:6] == [
        ("read", layout.CONFIG),
        ("read_range", layout.HEAD_HINT),
        ("exists", "versions/<head>.json"),
        ("exists", "versions/<head+1>.json"),
        ("exists", "versions/<head+2>.json"),
        ("read", "versions/<head>.json"),
    ]


def test_gc_keeps_the_hint_and_counts_no_version_for_it(make_store: MakeStore) -> None:
    store = _store(make_store, commits=4)
    report = store.gc(dry_run=False, keep_last=1, grace=timedelta(0))
    assert report.kept_versions == [4]
    assert layout.HEAD_HINT not in report.removed_files
    assert store.storage.read(layout.HEAD_HINT) == b"4\n"
    assert reopen(store).version.number == 4
    assert not layout.is_own_file(layout.HEAD_HINT)
    assert layout.version_numbers(store.storage.names(layout.VERSIONS)) == [0, 1, 2, 3, 4]
