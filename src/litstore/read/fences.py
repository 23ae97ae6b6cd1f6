"""A large key run's fences and page sums, read a window at a time around the pages a lookup needs.

A run's tail holds a fence (the first key hash) and a sum per page of 256 entries: 16
bytes per 256 entries, 1 MB for a run of 16M entries, 62 MB at 10^9. Read and checked
whole, it made a fresh process's first lookup grow with the store. Key hashes are
xxh3 of the keys, uniform over 64 bits, so the page holding hash ``h`` is near
``h / 2^64 * pages``, off by the spread of the count of entries below ``h`` (binomial:
at most ``sqrt(entries) / 2`` entries, 8 pages at 16M entries, 62 at 10^9). A lookup
reads the blocks of :data:`BLOCK` fences (and their sums) around that page, four
spreads either side; where the fences read do not bracket ``h`` (the spread was
larger, or the keys are not uniform), the window doubles toward ``h`` until they do,
up to the whole table.

**Why this is safe without the tail's checksum** (which only what reads the whole
tail checks: merges, verify, ``KeyRuns.check``, small runs). A fence read here is a
guess until a page confirms it: every page read is checked against its sum and its
first entry must equal its fence (:func:`litstore.format.keyrun.check_pages_within`).
For hash ``h`` the reader reads pages ``first..last``, where ``fence[first] < h`` (or
``first`` is page 0) and ``fence[last + 1] > h`` by the window; reading page
``first`` confirms that nothing before it can hold ``h``. Then, where page ``last``
ends at or below ``h``, page ``last + 1`` is read as well, which confirms that
nothing after it can (its first entry is its fence, above ``h``). So a damaged fence
either leaves the key's page among those read or makes one of them fail its checks:
an :class:`~litstore.errors.IntegrityError`, never a false "absent"; and a damaged
sum fails the page it belongs to. The fences of a window must be sorted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from litstore.errors import IntegrityError
from litstore.format import keyrun

#: Pages whose fences (and sums) are read together: 512 bytes of each.
BLOCK = 64
#: Spreads (standard deviations of a hash's page about its expected one) a first window reaches either side.
SPREADS = 4


class FenceWindows:
    """The fences and sums of a run read so far, by blocks of :data:`BLOCK` pages.

    ``read(spans)`` returns the run's bytes ``[start, end)`` for each span (one request
    for all of them where the storage is remote).
    """

    def __init__(
        self, footer: keyrun.Footer, read: Callable[[Sequence[tuple[int, int]]], Sequence[bytes | memoryview]]
    ):
        self._footer = footer
        self._read = read
        self._fences: dict[int, np.ndarray] = {}
        self._sums: dict[int, np.ndarray] = {}
        self.blocks = -(-footer.pages // BLOCK)
        spread = math.sqrt(footer.entries) / 2 / footer.page
        #: Blocks either side of a hash's expected page that a first window reaches.
        self.margin = math.ceil(SPREADS * spread + 1)

    @property
    def blocks_read(self) -> int:
        return len(self._fences)

    def blocks_per_key(self) -> int:
        """Blocks a first window of one key reads (at most)."""
        return min(self.blocks, -(-(2 * self.margin + 1) // BLOCK) + 1)

    def _load(self, blocks: Sequence[int]) -> None:
        """Read the blocks not read yet: their fences and sums, in one call of ``read``."""
        missing = sorted({block for block in blocks if block not in self._fences})
        if not missing:
            return
        runs: list[tuple[int, int]] = []  # (first block, end block) of each stretch of consecutive blocks
        for block in missing:
            if runs and runs[-1][1] == block:
                runs[-1] = (runs[-1][0], block + 1)
            else:
                runs.append((block, block + 1))
        footer, spans = self._footer, []
        for low, high in runs:
            first, end = low * BLOCK, min(high * BLOCK, footer.pages)
            spans.append((footer.fences_start + 8 * first, footer.fences_start + 8 * end))
            spans.append((footer.sums_start + 8 * first, footer.sums_start + 8 * end))
        data = self._read(spans)
        for index, (low, high) in enumerate(runs):
            fences, sums = data[2 * index], data[2 * index + 1]
            count = min(high * BLOCK, footer.pages) - low * BLOCK
            if len(fences) != 8 * count or len(sums) != 8 * count:
                raise IntegrityError(f"key run {footer.path} was cut short: it is damaged")
            fence_values = np.frombuffer(fences, dtype="<u8")
            sum_values = np.frombuffer(sums, dtype="<u8")
            for block in range(low, high):
                at = slice((block - low) * BLOCK, (block - low + 1) * BLOCK)
                self._fences[block] = fence_values[at]
                self._sums[block] = sum_values[at]

    def _window(self, low: int, high: int) -> np.ndarray:
        """The fences of blocks ``[low, high)`` side by side (read), checked sorted."""
        self._load(range(low, high))
        fences = np.concatenate([self._fences[block] for block in range(low, high)])
        if bool(np.any(fences[1:] < fences[:-1])):
            raise IntegrityError(f"key run {self._footer.path}'s fences are not sorted: it is damaged")
        return fences

    def bracket(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each key hash, the first and last page that can hold it, by fences read around its expected page
        (see the module docstring): ``fence[first] < h`` unless ``first`` is 0, ``fence[last] <= h`` unless
        ``last`` is 0, and ``fence[last + 1] > h``, read, unless ``last`` is the last page.

        Raises:
            IntegrityError: a window's fences are not sorted, or the run was cut short.
        """
        pages = self._footer.pages
        expected = np.clip((hashes.astype(np.float64) * (pages / 2.0**64)).astype(np.int64), 0, pages - 1)
        first = np.zeros(len(hashes), dtype=np.int64)
        last = np.zeros(len(hashes), dtype=np.int64)
        lows = np.maximum(expected - self.margin, 0) // BLOCK
        highs = np.minimum(expected + self.margin, pages - 1) // BLOCK + 1
        self._load(
            [block for low, high in zip(lows.tolist(), highs.tolist(), strict=True) for block in range(low, high)]
        )
        for index, (value, low, high) in enumerate(zip(hashes.tolist(), lows.tolist(), highs.tolist(), strict=True)):
            while True:
                fences = self._window(low, high)
                below = low == 0 or fences[0] < value  # (bracketed on the left)
                above = high == self.blocks or fences[-1] > value
                if below and above:
                    break
                width = high - low
                low = low if below else max(low - width, 0)
                high = high if above else min(high + width, self.blocks)
            start = low * BLOCK
            first[index] = start + max(int(np.searchsorted(fences, np.uint64(value), "left")) - 1, 0)
            last[index] = start + max(int(np.searchsorted(fences, np.uint64(value), "right")) - 1, 0)
        return first, last

    def bounds(self, numbers: Sequence[int]) -> keyrun.PageBounds:
        """Each page's fence and sum (read) and the fence after it (:data:`keyrun.NO_BOUND` if not read)."""
        fences = np.empty(len(numbers), dtype=np.uint64)
        sums = np.empty(len(numbers), dtype=np.uint64)
        following = np.full(len(numbers), keyrun.NO_BOUND, dtype=np.uint64)
        for index, number in enumerate(numbers):
            block, at = divmod(number, BLOCK)
            fences[index] = self._fences[block][at]
            sums[index] = self._sums[block][at]
            after, at_after = divmod(number + 1, BLOCK)
            if number + 1 < self._footer.pages and after in self._fences:
                following[index] = self._fences[after][at_after]
        return keyrun.PageBounds(fences, sums, following)
