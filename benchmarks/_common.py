"""Helpers shared by the benchmark scripts (run them as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def workdir(keep: str | None, prefix: str = "litstore-bench-") -> Iterator[Path]:
    """A scratch directory: a temporary one, or ``keep`` (which must be empty) to look at afterwards."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as directory:
            yield Path(directory)
        return
    path = Path(keep)
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"--keep {keep}: directory exists and is not empty")
    path.mkdir(parents=True, exist_ok=True)
    yield path
