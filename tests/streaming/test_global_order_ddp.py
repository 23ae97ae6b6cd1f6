"""``order="global"`` over real gloo process groups with DataLoader worker processes: the global batches are the
ones a single process streams, at world sizes 2 and 4, with 0 and 2 workers, over two epochs and two seeds."""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from litdata import StreamingDataLoader

import litstore

pytestmark = pytest.mark.integration

GLOBAL_BATCH = 8
SEEDS = (3, 11)
EPOCHS = 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _batches(root: str, world: int, workers: int, seed: int) -> list[list[list[str]]]:
    """Each epoch's batches (their keys) of this process's loader."""
    dataset = litstore.open(root).dataset(order="global", shuffle=True, seed=seed)
    loader = StreamingDataLoader(dataset, batch_size=GLOBAL_BATCH // world, num_workers=workers)
    return [[list(batch["id"]) for batch in loader] for _ in range(EPOCHS)]


def _rank(rank: int, world: int, workers: int, port: int, root: str, views: str, out: str) -> None:
    os.environ["LITSTORE_VIEWS"] = views
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=90),
    )  # fmt: skip
    try:
        seen = {seed: _batches(root, world, workers, seed) for seed in SEEDS}
        Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _global_steps(out: Path, world: int) -> dict[str, list[list[list[str]]]]:
    """Per seed and epoch, the global batches: step g is rank 0's batch g, then rank 1's, ..."""
    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]
    steps: dict[str, list[list[list[str]]]] = {}
    for seed in map(str, SEEDS):
        steps[seed] = []
        for epoch in range(EPOCHS):
            count = max(len(seen[seed][epoch]) for seen in ranks)
            steps[seed].append(
                [[key for seen in ranks for key in (seen[seed][epoch][g] if g < len(seen[seed][epoch]) else [])]
                 for g in range(count)]
            )  # fmt: skip
    return steps


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    made = litstore.Store.create(tmp_path_factory.mktemp("ddp-order") / "store", key="id", chunk_bytes=1024)
    made.append([{"id": f"k{i:03d}", "v": i} for i in range(160)])
    made.delete([f"k{i:03d}" for i in range(0, 160, 9)])
    return made.root


@pytest.mark.parametrize(("world", "workers"), [(2, 2), (4, 0)])
def test_global_batches_over_gloo_are_those_of_one_process(root: str, tmp_path: Path, world: int, workers: int) -> None:
    os.environ["LITSTORE_VIEWS"] = str(tmp_path / "views-single")
    single = {str(seed): _batches(root, 1, 0, seed) for seed in SEEDS}
    out = tmp_path / "ranks"
    out.mkdir()
    args = (world, workers, _free_port(), root, str(tmp_path / "views"), str(out))
    context = mp.start_processes(_rank, args=args, nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + 240
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the {world} ranks did not finish within 240 s")
    assert _global_steps(out, world) == single
    live = sorted(f"k{i:03d}" for i in range(160) if i % 9)
    for seed in map(str, SEEDS):
        first, second = single[seed]
        keys = [key for step in first for key in step]
        assert len(keys) == len(set(keys)) == len(live) // GLOBAL_BATCH * GLOBAL_BATCH and set(keys) <= set(live)
        assert first != second, "each epoch has its own order (drop_last, the default here, drops its tail)"
