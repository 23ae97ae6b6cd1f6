"""Writers' clocks: commit times never go back along the version chain, and gc's ``older_than``
cannot expire a version just committed by a writer whose clock is slow."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import litstore

COMMIT = importlib.import_module("litstore.txn.race")  # where commit times are taken


def _record(i: int) -> dict[str, Any]:
    return {"id": f"k{i:04d}", "n": i}


class _SlowClock(datetime):
    """``datetime`` whose ``now`` is ten minutes behind."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) - timedelta(minutes=10)


def test_commit_times_never_go_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    first = store.append([_record(1)])
    monkeypatch.setattr(COMMIT, "datetime", _SlowClock)
    second = store.append([_record(2)])
    third = store.add_fields({"extra": int | None})
    monkeypatch.undo()
    times = [version.created_at for version in litstore.open(store.root).versions()]
    assert times == sorted(times)
    assert second.created_at == first.created_at == third.created_at
    before_first = first.created_at - timedelta(microseconds=1)
    assert store.at(before_first).version.number == 0
    assert store.at(datetime.now(UTC)).version.number == 3


def test_older_than_keeps_versions_a_slow_writer_just_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    monkeypatch.setattr(COMMIT, "datetime", _SlowClock)
    for i in range(3):
        store.append([_record(i)])
    monkeypatch.undo()
    report = store.gc(dry_run=False, older_than=timedelta(minutes=5))
    assert report.expired_versions == [], "committed seconds ago by the storage's clock"
    assert [version.number for version in store.versions()] == [0, 1, 2, 3]
