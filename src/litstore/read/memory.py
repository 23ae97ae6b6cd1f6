"""Freed memory, handed back: what keeps a long write, a large composition or ``verify`` within its bounds."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import pyarrow as pa

#: Work that allocated less than this leaves too little freed to be worth handing back: ``malloc_trim``
#: walks the heap (~80 us a call in a fresh process; a 100-record append called it four times).
SMALL_WORK = 1 << 20


def release_freed(handled: int | None = None) -> None:
    """Hand the memory Arrow and the C allocator have freed back to the system; nothing if ``handled`` (about
    the bytes the work just done allocated) is below :data:`SMALL_WORK`.

    Arrow's allocator keeps freed blocks for reuse; a stream of runs, each copied a
    few times, or a manifest composed from large deltas, would otherwise hold hundreds
    of MiB it no longer uses (``benchmarks/bench_ingest.py`` measures the peak). glibc's
    ``malloc`` does the same with numpy's arrays below its mmap threshold (up to 32 MiB
    once a larger block was freed): ``malloc_trim`` gives back the free pages of its
    heap, which the next large allocation would otherwise find taken (Linux only).
    """
    if handled is not None and handled < SMALL_WORK:
        return
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where there is none (other systems, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _malloc_trim()
