"""The package's surface: ``__all__`` is honest, the code type-checks and lints clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import litstore

ROOT = Path(__file__).resolve().parent.parent


def test_all_names_every_public_member() -> None:
    public = {name for name in dir(litstore) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(litstore, name)).__name__ == "module"}
    assert set(litstore.__all__) == public - modules
    assert litstore.__all__ == sorted(litstore.__all__)


def test_every_error_is_a_litstore_error() -> None:
    errors = [getattr(litstore, name) for name in litstore.__all__ if name.endswith("Error")]
    assert len(errors) >= 10
    for error in errors:
        assert issubclass(error, litstore.LitstoreError), error
    assert issubclass(litstore.KeyNotFoundError, KeyError)
    assert issubclass(litstore.InvalidRecordError, ValueError)
    assert issubclass(litstore.VersionNotFoundError, LookupError)
    assert issubclass(litstore.StorageError, OSError)


@pytest.mark.integration
def test_mypy_strict_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_ruff_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "examples", "benchmarks", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
