"""An append's keys are checked against the head once: a rival that added one of them since is a conflict."""

from __future__ import annotations

from pathlib import Path

import pytest

import litstore
from litstore.read.version import VersionReader


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    original = VersionReader.existing_keys

    def counted(self: VersionReader, *args: object, **kwargs: object) -> object:
        seen.append(self.version.number)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(VersionReader, "existing_keys", counted)
    return seen


def test_an_append_checks_its_keys_once_on_an_unchanged_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    litstore.Store.create(tmp_path / "s", key="id").append([{"id": "a"}])
    store = litstore.open(tmp_path / "s")
    seen = _count_checks(monkeypatch)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("an append composed the manifest")

    with monkeypatch.context() as patched:
        patched.setattr(VersionReader, "manifest", refuse)
        store.append([{"id": "b"}, {"id": "c"}])
    assert seen == [1]
    with pytest.raises(litstore.DuplicateKeyError, match="'a'"):
        store.append([{"id": "a"}])


def test_an_append_on_a_stale_head_is_checked_again_on_the_rivals_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = litstore.Store.create(tmp_path / "s", key="id")
    stale.append([{"id": "a"}])
    rival = litstore.open(tmp_path / "s")
    rival.append([{"id": "b"}])  # version 2, which the stale handle has not seen
    seen = _count_checks(monkeypatch)
    with pytest.raises(litstore.ConflictError, match="'b'"):
        stale.append([{"id": "b"}])  # absent at version 1, added by the rival's version 2
    assert seen == [1]  # the rival's version is caught by the race's clash of touched keys
    assert litstore.open(tmp_path / "s").version.number == 2
    stale.refresh()
    seen.clear()
    assert stale.append([{"id": "c"}]).number == 3 and seen == [2]
