"""Grouping item locations by chunk: the one helper every batched read uses."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def by_chunk(chunk_ids: np.ndarray, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(chunk id, positions, rows)`` per chunk: chunks ascending, rows ascending within each.

    ``positions`` index into the inputs, so callers can put results back in order.
    """
    order = chunk_order(chunk_ids, rows)
    for chunk_id, start, end in chunk_runs(chunk_ids[order]):
        positions = order[start:end]
        yield chunk_id, positions, rows[positions]


def chunk_order(chunk_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The order that sorts locations by chunk, then by row (reading each chunk front to back)."""
    if chunk_ids.dtype.kind == rows.dtype.kind == "u" and max(chunk_ids.dtype.itemsize, rows.dtype.itemsize) <= 4:
        # One sort of a combined 64-bit key: several times faster than lexsort on two keys.
        return np.argsort((chunk_ids.astype(np.uint64) << np.uint64(32)) | rows)
    return np.lexsort((rows, chunk_ids))


def chunk_runs(sorted_ids: np.ndarray) -> list[tuple[int, int, int]]:
    """``(chunk id, start, end)`` of each run of equal ids in ``sorted_ids`` (ids sorted)."""
    if not len(sorted_ids):
        return []
    bounds = [0, *(np.flatnonzero(np.diff(sorted_ids)) + 1).tolist(), len(sorted_ids)]
    ids = sorted_ids[bounds[:-1]].tolist()
    return [(int(chunk_id), start, end) for chunk_id, start, end in zip(ids, bounds[:-1], bounds[1:], strict=True)]
