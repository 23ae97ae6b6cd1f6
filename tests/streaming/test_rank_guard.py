"""A dataset made where the environment says the job is distributed, but litdata cannot see this rank, is refused.

torchrun sets ``WORLD_SIZE`` and ``RANK`` (SLURM ``SLURM_NTASKS`` and ``SLURM_PROCID``);
litdata reads the rank from an initialised process group or ``GLOBAL_RANK`` only. A
dataset made before ``init_process_group`` would stream the same share on every rank.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import litstore

_LAUNCH_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "GLOBAL_RANK", "SLURM_NTASKS", "SLURM_PROCID", "NNODES")


@pytest.fixture
def store(make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch) -> litstore.Store:
    for name in _LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    made = make_store(key="id")
    made.append([{"id": f"k{i:03d}", "v": i} for i in range(40)])
    return made


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, "WORLD_SIZE=2, RANK=1"),
        ({"WORLD_SIZE": "8"}, "WORLD_SIZE=8"),
        ({"SLURM_NTASKS": "4", "SLURM_PROCID": "3"}, "SLURM_NTASKS=4, SLURM_PROCID=3"),
    ],
    ids=["torchrun", "world-size-only", "slurm"],
)
def test_a_job_whose_ranks_litdata_cannot_see_is_refused(
    store: litstore.Store, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], named: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    for make in (lambda: store.dataset(), lambda: store.dataset(split="train", keys=["k001"])):
        with pytest.raises(litstore.InvalidArgumentError, match="init_process_group") as caught:
            make()
        assert named in str(caught.value) and "GLOBAL_RANK" in str(caught.value)
        assert "check_ranks=False" in str(caught.value)
    assert len(list(store.dataset(check_ranks=False))) > 0  # the rare intended case


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {"WORLD_SIZE": "1", "RANK": "0"},
        {"WORLD_SIZE": "2", "RANK": "1", "GLOBAL_RANK": "1"},  # litdata's own variables
        {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"},
    ],
    ids=["alone", "world-of-one", "litdata-variables", "slurm-of-one"],
)
def test_a_launch_litdata_can_see_streams(
    store: litstore.Store, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    dataset = store.dataset(drop_last=False)
    assert dataset.distributed_env.global_rank == int(environment.get("GLOBAL_RANK", "0"))
    keys = [record["id"] for record in dataset]
    assert len(keys) == len(set(keys)) and keys


_RANK = """
import datetime, json, os, sys
import torch.distributed as dist
import litstore

root, out = sys.argv[1], sys.argv[2]
store = litstore.open(root)
try:
    store.dataset(split="train")
except litstore.InvalidArgumentError as exc:
    refused = "init_process_group" in str(exc)
else:
    refused = False
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))  # env:// from torchrun's variables
try:
    dataset = store.dataset(split="train", drop_last=False)
    keys = [record["id"] for record in dataset]
    with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as file:
        json.dump({"refused_before": refused, "rank": dataset.distributed_env.global_rank, "keys": keys}, file)
    dist.barrier()
finally:
    dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.integration
def test_torchrun_ranks_are_refused_before_the_group_and_share_the_split_after(
    store: litstore.Store, tmp_path: Path
) -> None:
    out = tmp_path / "ranks"
    out.mkdir()
    port, world = _free_port(), 2
    launched = []
    for rank in range(world):
        environment = {
            **{name: value for name, value in os.environ.items() if name not in _LAUNCH_VARIABLES},
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        launched.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, str(store.root), str(out)],
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for process in launched:
        _, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr[-2000:]
    seen = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]
    assert all(share["refused_before"] for share in seen), "a dataset made before init_process_group streamed"
    assert [share["rank"] for share in seen] == [0, 1]
    first, second = (set(share["keys"]) for share in seen)
    assert first and second and first.isdisjoint(second)
    train = {
        key for key, record in store.items() if litstore.open(store.root).config.splits.assign(key, record) == "train"
    }
    assert first | second == train
