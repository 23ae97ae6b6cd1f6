"""Functions run in child processes by the commit tests (importable by spawned workers)."""

from __future__ import annotations

import litstore


def record(i: int, rev: int = 0) -> dict[str, object]:
    return {"id": f"k{i:04d}", "value": i * 10 + rev, "blob": bytes([i % 251]) * (50 + i % 30)}


def stage_range(root: str, start: int, stop: int) -> litstore.StagedFragment:
    """Open the store in this process and stage records ``start..stop``; nothing is committed."""
    return litstore.open(root).stage([record(i) for i in range(start, stop)])
