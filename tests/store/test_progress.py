"""Long operations are quiet by default and show tqdm progress on stderr when asked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import litstore


def test_writes_are_quiet_by_default_and_show_progress_when_asked(
    make_store: Callable[..., litstore.Store], capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(key="id")
    store.append([{"id": str(i)} for i in range(500)])
    store.upsert([{"id": "1", "v": 1}])
    store.delete(["2"])
    store.gc()
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
    store.gc(progress=True, keep_last=1)
    assert "removing unreferenced files" in capsys.readouterr().err
