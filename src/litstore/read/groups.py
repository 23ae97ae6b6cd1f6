"""Grouping item locations by chunk: the one helper every batched read uses."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def by_chunk(chunk_ids: np.ndarray, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(chunk id, positions, rows)`` per chunk: chunks ascending, rows ascending within each.

    ``positions`` index into the inputs, so callers can put results back in order.
    """
    order = np.lexsort((rows, chunk_ids))
    sorted_ids = chunk_ids[order]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    for positions in np.split(order, bounds):
        if len(positions):
            yield int(chunk_ids[positions[0]]), positions, rows[positions]
