"""Shared fixtures: fresh stores on real directories, and a hash of every file under a root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash

import litstore


def tree_state(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) with a hash of its bytes."""
    return {
        str(path.relative_to(root)): xxhash.xxh3_128_hexdigest(path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[..., litstore.Store]:
    """Create a store under a fresh directory; keyword arguments go to ``Store.create``."""
    counter = iter(range(1_000_000))

    def make(**options: object) -> litstore.Store:
        return litstore.Store.create(tmp_path / f"store-{next(counter)}", **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """An empty store keyed by ``id`` with a 80/10/10 hash split."""
    return make_store(key="id", splits=litstore.HashSplit(train=0.8, val=0.1, test=0.1))
