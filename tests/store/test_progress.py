"""Long operations are quiet by default and show tqdm progress on stderr when asked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import litstore
from tests.txn._workers import one_record


def test_writes_are_quiet_by_default_and_show_progress_when_asked(
    make_store: Callable[..., litstore.Store], capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(key="id")
    store.append([{"id": str(i)} for i in range(500)])
    store.upsert([{"id": "1", "v": 1}])
    store.delete(["2"])
    store.gc(dry_run=False)
    quiet = capsys.readouterr()
    assert quiet.out == quiet.err == ""

    store.append([{"id": f"n{i}"} for i in range(300)], progress=True)
    shown = capsys.readouterr().err
    assert "writing records: 300rec" in shown
    assert "fragments/" not in shown  # progress speaks of records, not of internal file names
    store.delete(["3"], progress=True)
    assert "moving records" not in capsys.readouterr().err, "format 4 marks the row dead: nothing is moved"
    copying = make_store(key="id", format_version=3)
    copying.append([{"id": str(i)} for i in range(500)])
    copying.delete(["3"], progress=True)
    assert "moving records: 499rec" in capsys.readouterr().err
    store.gc(dry_run=False, progress=True, keep_last=1)
    assert "removing unreferenced files" in capsys.readouterr().err


def test_ingest_is_quiet_by_default_like_every_other_call(
    make_store: Callable[..., litstore.Store], capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(key="id")
    store.ingest(one_record, range(20), num_workers=0)
    quiet = capsys.readouterr()
    assert quiet.out == quiet.err == ""
    store.ingest(one_record, range(20, 40), num_workers=0, progress=True)
    assert "ingesting inputs" in capsys.readouterr().err
    assert len(store) == 40
