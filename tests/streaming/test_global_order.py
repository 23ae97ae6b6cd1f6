"""``order="global"``: one sequence of global batches whatever the world size and worker count, and exact
elastic resume.

The order logic is tested on its own (:mod:`litstore.order`, ranks and workers
simulated as a ``DataLoader`` takes batches from its workers), then through real
``StreamingDataLoader``s over a real store in one process, each rank a dataset made with
its rank and world size, with and without DataLoader worker processes (a state saved at
one world size and worker count resumes at another). ``tests/streaming/test_global_order_ddp.py`` runs the same over
gloo process groups with worker processes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np
import pytest
from litdata import StreamingDataLoader
from litdata.utilities.env import _DistributedEnv

import litstore
from litstore import InvalidArgumentError, StreamStateError
from litstore.order import GlobalOrder, Share

GLOBAL_BATCH = 8
SIZES = [37, 50, 3, 100, 256, 300, 1, 90, 45, 20]  # uneven chunks, one of a single item
TOTAL = sum(SIZES)


def _simulated(
    order: GlobalOrder, world: int, workers: int, start: int = 0, drop_last: bool = False
) -> list[list[int]]:
    """The global batches (positions of ``S``) ranks of ``world`` with ``workers`` workers each yield from ``start``:
    each worker streams its share, cut into its batches; a rank takes its workers' batches in turn."""
    per_rank = []
    for rank in range(world):
        queues = []
        for worker in range(workers):
            share = Share(order.total, start, world, rank, workers, worker, GLOBAL_BATCH // world, drop_last)
            streamed = [int(order.window_starts[w]) + p for w, p in share.positions(order)]
            positions = np.concatenate(streamed) if streamed else np.zeros(0, np.int64)
            sizes = np.diff(share.rank_batches[worker::workers], axis=1).ravel()
            queues.append([part.tolist() for part in np.split(positions, np.cumsum(sizes)[:-1])] if len(sizes) else [])
        batches = []
        while any(queues):
            for queue in queues:
                if queue:
                    batches.append(queue.pop(0))
        per_rank.append(batches)
    steps = max(len(batches) for batches in per_rank)
    return [[p for batches in per_rank if step < len(batches) for p in batches[step]] for step in range(steps)]


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("epoch", [1, 2])
def test_the_sequence_is_a_permutation_fixed_by_seed_and_epoch(seed: int, epoch: int) -> None:
    order = GlobalOrder(SIZES, seed, epoch, shuffle=True)
    chunks, items = order.items(0, TOTAL)
    assert sorted(zip(chunks.tolist(), items.tolist(), strict=True)) == [
        (chunk, item) for chunk, size in enumerate(SIZES) for item in range(size)
    ]
    again = GlobalOrder(SIZES, seed, epoch, shuffle=True).items(0, TOTAL)
    assert np.array_equal(again[0], chunks) and np.array_equal(again[1], items)
    other = GlobalOrder(SIZES, seed, epoch + 1, shuffle=True).items(0, TOTAL)
    assert not np.array_equal(other[1], items), "another epoch streams another order"
    # Locality: each chunk hands out its items a block at a time, in stored order of blocks.
    for chunk in range(len(SIZES)):
        handed = items[chunks == chunk]
        assert np.all(np.diff(handed // 256) >= 0)
    stored = GlobalOrder(SIZES, seed, epoch, shuffle=False).items(0, TOTAL)
    assert stored[0].tolist() == [c for c, size in enumerate(SIZES) for _ in range(size)]
    assert stored[1].tolist() == [i for size in SIZES for i in range(size)]


@pytest.mark.parametrize("drop_last", [False, True])
def test_global_batches_are_the_same_at_every_world_size_and_worker_count(drop_last: bool) -> None:
    for seed in (3, 11):
        for epoch in (1, 2):
            order = GlobalOrder(SIZES, seed, epoch, shuffle=True)
            expected = [list(range(low, min(low + GLOBAL_BATCH, TOTAL))) for low in range(0, TOTAL, GLOBAL_BATCH)]
            if drop_last:
                expected = [batch for batch in expected if len(batch) == GLOBAL_BATCH]
            for world in (1, 2, 4):
                for workers in (1, 2, 3):
                    assert _simulated(order, world, workers, drop_last=drop_last) == expected, (world, workers)


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_cursor_saved_at_any_world_size_resumes_at_any_other_with_exactly_the_rest(drop_last: bool) -> None:
    order = GlobalOrder(SIZES, 5, 1, shuffle=True)
    steps = (TOTAL - 1) // GLOBAL_BATCH + 1 if not drop_last else TOTAL // GLOBAL_BATCH
    boundary = SIZES[0] // GLOBAL_BATCH  # the step that crosses the first chunk boundary of the stored order
    for saved_at in (1, 2, 4):
        for resumed_at in (1, 2, 4):
            for cut in (0, 1, boundary, steps // 2, steps - 1, steps):
                before = _simulated(order, saved_at, 2, drop_last=drop_last)[:cut]
                share = Share(TOTAL, 0, saved_at, 0, 1, 0, GLOBAL_BATCH // saved_at, drop_last)
                after = _simulated(order, resumed_at, 2, start=share.consumed(cut), drop_last=drop_last)
                seen = [position for batch in before + after for position in batch]
                kept = TOTAL - (TOTAL % GLOBAL_BATCH if drop_last else 0)
                assert seen == list(range(kept)), (saved_at, resumed_at, cut)


# -- through StreamingDataLoader over a real store -------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> litstore.Store:
    made = litstore.Store.create(tmp_path_factory.mktemp("order") / "store", key="id", chunk_bytes=1024)
    made.append([{"id": f"k{i:03d}", "v": i} for i in range(150)])
    made.delete([f"k{i:03d}" for i in range(0, 150, 7)])  # dead rows: litdata's numbers are not the rows
    return made


def _loaders(
    store: litstore.Store, world: int, seed: int, workers: int = 0, **options: Any
) -> list[StreamingDataLoader]:
    loaders = []
    for rank in range(world):
        dataset = store.dataset(order="global", shuffle=True, seed=seed, **options)
        dataset.distributed_env = _DistributedEnv(world_size=world, global_rank=rank, num_nodes=1)
        loaders.append(StreamingDataLoader(dataset, batch_size=GLOBAL_BATCH // world, num_workers=workers))
    return loaders


def _steps(loaders: list[StreamingDataLoader], limit: int | None = None) -> list[list[str]]:
    """The global batches (keys) of the ranks' loaders stepping together; a rank out of batches adds none."""
    iterators = [iter(loader) for loader in loaders]
    steps: list[list[str]] = []
    while limit is None or len(steps) < limit:
        step = [key for iterator in iterators for batch in islice(iterator, 1) for key in batch["id"]]
        if not step:
            break
        steps.append(step)
    return steps


def test_a_real_store_streams_the_same_global_batches_at_world_sizes_1_2_4(store: litstore.Store) -> None:
    live = sorted(f"k{i:03d}" for i in range(150) if i % 7)
    for seed in (1, 2):
        epochs = []
        for world in (1, 2, 4):
            loaders = _loaders(store, world, seed, drop_last=False)
            epochs.append([_steps(loaders), _steps(loaders)])
        assert epochs[0] == epochs[1] == epochs[2]
        first, second = epochs[0]
        assert sorted(k for step in first for k in step) == live
        assert sorted(k for step in second for k in step) == live
        assert first != second, "the second epoch streams another order"
        assert all(len(step) == GLOBAL_BATCH for step in first[:-1])


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_loader_state_resumes_at_any_world_size_with_exactly_the_rest(store: litstore.Store, drop_last: bool) -> None:
    whole = _steps(_loaders(store, 1, 9, drop_last=drop_last))
    epoch = [key for step in whole for key in step]
    for saved_at in (1, 2, 4):
        for resumed_at in (1, 2, 4):
            for cut in (len(whole) // 2, len(whole) - 1, len(whole)):  # mid-epoch, before the last batch, after it
                saving = _loaders(store, saved_at, 9, drop_last=drop_last)
                before = _steps(saving, cut)
                state = copy.deepcopy(saving[0].state_dict())
                resumed = _loaders(store, resumed_at, 9, drop_last=drop_last)
                for loader in resumed:
                    loader.load_state_dict(copy.deepcopy(state))
                after = _steps(resumed)
                assert before + after == whole, (saved_at, resumed_at, cut)
    assert len(epoch) == len(set(epoch))


# (world size, worker processes) saved at -> resumed at, and drop_last: every (A, B) in {1, 2, 4}², workers
# changing too, each pair once (both drop_last settings are covered with 0 workers above).
_ELASTIC = [
    ((1, 2), (1, 0), False), ((1, 0), (2, 2), True), ((1, 2), (4, 1), False),
    ((2, 2), (1, 1), True), ((2, 1), (2, 2), False), ((2, 2), (4, 0), True),
    ((4, 0), (1, 2), False), ((4, 2), (2, 0), True), ((4, 1), (4, 2), False),
]  # fmt: skip


@pytest.mark.integration  # DataLoader worker processes
@pytest.mark.parametrize(("saved", "resumed", "drop_last"), _ELASTIC)
def test_a_state_saved_with_worker_processes_resumes_at_another_world_size_and_worker_count(
    store: litstore.Store, saved: tuple[int, int], resumed: tuple[int, int], drop_last: bool
) -> None:
    whole = _steps(_loaders(store, 1, 5, drop_last=drop_last))
    for cut in (1, len(whole) // 2, len(whole) - 1, len(whole)):  # first batch, mid-epoch, last batch, after it
        saving = _loaders(store, saved[0], 5, saved[1], drop_last=drop_last)
        before = _steps(saving, cut)
        state = copy.deepcopy(saving[0].state_dict())
        resuming = _loaders(store, resumed[0], 5, resumed[1], drop_last=drop_last)
        for loader in resuming:
            loader.load_state_dict(copy.deepcopy(state))
        assert before + _steps(resuming) == whole, (saved, resumed, cut)


def test_after_an_end_of_epoch_state_the_next_epoch_is_the_same_as_without_a_restart(store: litstore.Store) -> None:
    running = _loaders(store, 2, 4, drop_last=True)
    _steps(running)
    state = copy.deepcopy(running[0].state_dict())
    second = _steps(running)
    resumed = _loaders(store, 4, 4, drop_last=True)
    for loader in resumed:
        loader.load_state_dict(copy.deepcopy(state))
    assert _steps(resumed) == []  # the rest of the first epoch: nothing
    assert _steps(resumed) == second


def test_orders_do_not_mix_and_a_bad_order_is_refused(store: litstore.Store) -> None:
    with pytest.raises(InvalidArgumentError, match="order is one of"):
        store.dataset(order="random")
    plain = StreamingDataLoader(store.dataset(seed=1), batch_size=4)
    _steps([plain], 2)
    with pytest.raises(StreamStateError, match=r"order 'litdata'.*order 'global'"):
        _loaders(store, 1, 1)[0].load_state_dict(plain.state_dict())
    ordered = _loaders(store, 1, 1)[0]
    _steps([ordered], 2)
    with pytest.raises(StreamStateError, match=r"order 'global'.*order 'litdata'"):
        StreamingDataLoader(store.dataset(seed=1), batch_size=4).load_state_dict(ordered.state_dict())


def _edit(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state[name] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "detail"),
    [
        (_edit("sample_in_epoch", 10**6), "'sample_in_epoch' is 1000000"),
        (_edit("seed", 2), "'seed' is 2, but this dataset's is 1"),
        (_edit("litstore_order", {"order": "global", "window_chunks": 2}), "window_chunks"),
    ],
)
def test_an_edited_global_state_is_refused(
    store: litstore.Store, edit: Callable[[dict[str, Any]], None], detail: str
) -> None:
    loader = _loaders(store, 1, 1)[0]
    _steps([loader], 2)
    state = copy.deepcopy(loader.state_dict())
    edit(state["dataset"])
    with pytest.raises(StreamStateError, match=detail):
        _loaders(store, 1, 1)[0].load_state_dict(state)
