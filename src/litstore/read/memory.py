"""Arrow's freed memory, handed back: what keeps a long write or a large composition within its bounds."""

from __future__ import annotations

import pyarrow as pa


def release_freed() -> None:
    """Hand the memory Arrow has freed back to the system.

    Arrow's allocator keeps freed blocks for reuse; a stream of runs, each copied a
    few times, or a manifest composed from large deltas, would otherwise hold hundreds
    of MiB it no longer uses (``benchmarks/bench_ingest.py`` measures the peak).
    """
    pa.default_memory_pool().release_unused()
