"""Fixtures every streaming test shares."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put streaming views under this test's temporary directory, not the shared temp dir."""
    directory = tmp_path / "views"
    monkeypatch.setenv("LITSTORE_VIEWS", str(directory))
    return directory
