"""The global order: one sequence of an epoch's items that every world size and worker count shares.

litdata's order depends on the world size: it deals chunks to ranks and workers first
and shuffles each one's share, so a run restarted on 4 ranks instead of 2 sees another
global order, and resuming at another world size replays or skips samples.
``store.dataset(..., order="global")`` streams by this module instead (MosaicML
streaming's idea): the epoch's items form one sequence ``S``, fixed by the chunks, the
seed and the epoch alone, and the ranks and workers take slices of it.

**The sequence** (:class:`GlobalOrder`). The chunks are permuted (seeded by seed and
epoch) and cut into *windows* of :data:`WINDOW_CHUNKS` consecutive chunks of that
permutation. Within a window, ``S`` is a random interleaving of its chunks' items
(which chunk each position draws from is a permutation of the window's chunk labels),
and each chunk hands out its items in stored order of aligned blocks of
:data:`BLOCK_ITEMS`, shuffled within each block. So a stretch of ``S`` mixes a few
chunks (stored in key-hash order, itself unrelated to the records' content), while each
reader walks each of its chunks forward a block at a time: a chunk is mapped once per
window and its blocks are decoded once each (``benchmarks/bench_stream.py --order``).
With ``shuffle=False`` ``S`` is the stored order.

**Who reads what** (:class:`Share`). With world size ``W`` and per-rank batch size
``b``, global batch ``g`` (counted from the cursor ``start``) is
``S[start + g*W*b : start + (g+1)*W*b]`` and rank ``r`` reads its ``r``-th slice of
``b`` items, so the ranks' batches of one step, in rank order, are that global batch
whatever ``W`` is (for a fixed global batch size). The last, partial global batch is
dropped with ``drop_last`` (its items are the epoch's last ``len(S) - start`` mod
``W*b`` items of ``S``), or else split between the ranks as evenly as possible, in
rank order (a rank gets no last batch only when it holds fewer items than there are
ranks). Worker ``w`` of ``n`` reads its rank's batches ``w, w + n, ...``, which is the
order a ``DataLoader`` takes batches from its workers in.

**The cursor.** A rank that has yielded ``k`` batches has, with every other rank in
step, consumed ``start + k*W*b`` items of ``S`` (all of them once it has yielded all
its batches): that number, the epoch and the seed are the whole resume state, and it
resumes at any world size, worker count and batch size (:meth:`Share.consumed`).

Cost: each reader computes the whole of each window it reads from, in numpy, about
30 ns an item of the epoch per reader (measured in the benchmark), like MosaicML's
per-node epoch arrays; a window is computed when the reader reaches it, so starting
costs one window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, Protocol

import numpy as np

#: Chunks whose items one stretch of the global order mixes.
WINDOW_CHUNKS: Final = 4
#: Aligned items of a chunk shuffled together (the chunk's blocks are handed out in stored order).
BLOCK_ITEMS: Final = 256
#: Items a chunk hands out together at one place of the interleaving.
RUN_ITEMS: Final = 16
_PERMUTATIONS: Final = 16  # random permutations of a block's items per window, each block one of them XOR a byte


def _rng(seed: int, epoch: int, *more: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed % 2**64, epoch % 2**64, *more]))


class GlobalOrder:
    """The epoch's sequence ``S`` of items over chunks of ``sizes`` items (see the module docstring).

    Items are named ``(chunk, item)``: the chunk's index in ``sizes`` and the item's
    number within it. ``S`` depends on ``sizes``, ``seed``, ``epoch`` and ``shuffle``
    only.
    """

    def __init__(self, sizes: Sequence[int] | np.ndarray, seed: int, epoch: int, shuffle: bool) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), bool(shuffle)
        count = len(self.sizes)
        self.chunk_order = _rng(self.seed, self.epoch).permutation(count) if shuffle else np.arange(count)
        windows = [self.chunk_order[first : first + WINDOW_CHUNKS] for first in range(0, count, WINDOW_CHUNKS)]
        self._windows = windows
        self.window_starts = np.concatenate([[0], np.cumsum([int(self.sizes[w].sum()) for w in windows])]).astype(
            np.int64
        )

    @property
    def total(self) -> int:
        """The items of the epoch (``len(S)``)."""
        return int(self.window_starts[-1])

    def at(self, index: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``S`` at ``positions`` (increasing, counted from the start of window ``index``): chunks and item numbers.

        Costs O(items of the window / :data:`RUN_ITEMS`) plus O(``len(positions)``), so a
        reader that streams a slice of each window pays for little more than its slice.
        """
        chunks = self._windows[index]
        sizes = self.sizes[chunks]
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:
            ends = np.cumsum(sizes)
            which = np.searchsorted(ends, positions, side="right")
            return chunks[which], positions - (ends - sizes)[which]
        rng = _rng(self.seed, self.epoch, index + 1)
        runs = -(-sizes // RUN_ITEMS)
        labels = rng.permutation(np.repeat(np.arange(len(chunks), dtype=np.int8), runs))
        # Each slot's run number within its chunk: slots grouped by chunk (a radix sort: int8 keys), counted.
        grouped = np.argsort(labels, kind="stable")
        run_number = np.empty(len(labels), dtype=np.int64)
        run_number[grouped] = np.arange(len(labels)) - np.repeat(np.cumsum(runs) - runs, runs)
        lengths = np.minimum(sizes[labels] - run_number * RUN_ITEMS, RUN_ITEMS)
        slot = np.repeat(np.arange(len(labels), dtype=np.int64), lengths)[positions]
        slot_starts = np.cumsum(lengths) - lengths
        which = labels[slot].astype(np.int64)
        handed = run_number[slot] * RUN_ITEMS + positions - slot_starts[slot]  # the chunk's j-th item handed out
        # Within a chunk: aligned blocks in stored order, each block's items permuted (one of a few random
        # permutations, XOR a byte: still a permutation of 0..255); the short last block by its own permutation.
        whole, rest = np.divmod(sizes, BLOCK_ITEMS)
        table = np.argsort(rng.random((_PERMUTATIONS, BLOCK_ITEMS)), axis=1)
        first_block = np.cumsum(whole + 1) - (whole + 1)
        choice = rng.integers(0, _PERMUTATIONS, int((whole + 1).sum()))
        flip = rng.integers(0, BLOCK_ITEMS, len(choice))
        tails = np.concatenate([rng.permutation(int(r)) for r in rest])
        first_tail = np.cumsum(rest) - rest
        block, place = np.divmod(handed, BLOCK_ITEMS)
        items = block * BLOCK_ITEMS
        full = block < whole[which]
        at = first_block[which] + block
        items[full] += table[choice[at[full]], place[full]] ^ flip[at[full]]
        items[~full] += tails[first_tail[which[~full]] + place[~full]]
        return chunks[which], items

    def items(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``S[start:stop]`` as (chunks, items), for tests and checks."""
        parts = []
        for index in range(len(self._windows)):
            begin, end = int(self.window_starts[index]), int(self.window_starts[index + 1])
            low, high = max(start, begin), min(stop, end)
            if low < high:
                parts.append(self.at(index, np.arange(low - begin, high - begin)))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@dataclass(frozen=True)
class Share:
    """The part of an epoch's ``S`` (of ``total`` items, from position ``start``) that one reader streams.

    The reader is worker ``worker`` of ``num_workers`` of rank ``rank`` of
    ``world_size``, whose loader makes batches of ``batch_size`` (see the module
    docstring).
    """

    total: int
    start: int
    world_size: int
    rank: int
    num_workers: int
    worker: int
    batch_size: int
    drop_last: bool

    @cached_property
    def rank_batches(self) -> np.ndarray:
        """The ``[low, high)`` ranges of ``S`` of this rank's batches, in order (``(n, 2)``; none empty)."""
        size, stride = self.batch_size, self.world_size * self.batch_size
        rest = max(self.total - self.start, 0)
        full, partial = divmod(rest, stride)
        lows = self.start + np.arange(full, dtype=np.int64) * stride + self.rank * size
        batches = np.stack([lows, lows + size], axis=1)
        if partial and not self.drop_last:
            even, extra = divmod(partial, self.world_size)
            low = self.start + full * stride + self.rank * even + min(self.rank, extra)
            high = low + even + (self.rank < extra)
            if high > low:
                batches = np.concatenate([batches, [[low, high]]])
        return batches.reshape(-1, 2)

    @property
    def rank_items(self) -> int:
        """The items this rank streams (all its workers together)."""
        return int((self.rank_batches[:, 1] - self.rank_batches[:, 0]).sum())

    def consumed(self, batches: int) -> int:
        """The cursor once this rank (all ranks in step) has yielded ``batches`` batches; ``len(S)`` after its last."""
        if batches >= len(self.rank_batches):
            return self.total
        return self.start + batches * self.world_size * self.batch_size

    def positions(self, order: GlobalOrder) -> Iterator[tuple[int, np.ndarray]]:
        """This worker's positions of ``S``, in the order it streams them: per window, (window, positions in it)."""
        ranges = self.rank_batches[self.worker :: self.num_workers]
        if not len(ranges):
            return
        starts = order.window_starts
        first = int(np.searchsorted(starts, ranges[0, 0], side="right")) - 1
        for index in range(first, len(starts) - 1):
            begin, end = int(starts[index]), int(starts[index + 1])
            low = int(np.searchsorted(ranges[:, 1], begin, side="right"))
            high = int(np.searchsorted(ranges[:, 0], end, side="left"))
            if low >= len(ranges):
                return
            if high <= low:
                continue
            lows = np.maximum(ranges[low:high, 0], begin)
            highs = np.minimum(ranges[low:high, 1], end)
            yield index, _spans(lows, highs) - begin


def _spans(lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(low, high)`` for each pair."""
    lengths = highs - lows
    offsets = np.repeat(lows - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    spans: np.ndarray = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
    return spans


class Taker(Protocol):
    """A decoded chunk's items, as :class:`litstore.read.decoded.DecodedChunk` hands them out."""

    def take(self, item: int) -> Any: ...


class WorkerStream:
    """The items of one reader's :class:`Share` of ``order``, in order, each chunk decoded by ``decode``.

    At each window it reaches, it asks ``decode(chunk, items)`` once for each chunk it
    reads there, with the (increasing) item numbers it will take from it, and then takes
    them by their place in that list; the previous window's chunks are released first.
    """

    def __init__(self, order: GlobalOrder, share: Share, decode: Callable[[int, np.ndarray], Taker]) -> None:
        self._order = order
        self._windows = share.positions(order)
        self._decode = decode
        self._chunks: dict[int, Taker] = {}
        self._plan_chunks: list[int] = []
        self._plan_takes: list[int] = []
        self._at = 0

    def __iter__(self) -> WorkerStream:
        return self

    def __next__(self) -> Any:
        while self._at >= len(self._plan_chunks):
            self._next_window()
        at = self._at
        self._at += 1
        return self._chunks[self._plan_chunks[at]].take(self._plan_takes[at])

    def _next_window(self) -> None:
        self._chunks = {}
        index, positions = next(self._windows)  # StopIteration: the share is streamed
        chunks, items = self._order.at(index, positions)
        takes = np.empty(len(items), dtype=np.int64)
        for chunk in np.unique(chunks).tolist():
            mine = chunks == chunk
            wanted = np.sort(items[mine])
            takes[mine] = np.searchsorted(wanted, items[mine])
            self._chunks[chunk] = self._decode(chunk, wanted)
        self._plan_chunks, self._plan_takes, self._at = chunks.tolist(), takes.tolist(), 0
