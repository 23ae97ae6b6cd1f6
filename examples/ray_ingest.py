"""Ingest with Ray: many tasks stage records, the driver commits them as one version.

Run: ``python examples/ray_ingest.py`` (needs ``pip install 'litstore[ray]'``). Makes a
store in a temporary directory, writes 5,000 generated records from 8 Ray tasks as
version 1, upserts a corrected slice as version 2, then reads the pinned version 1
back through a ``map_batches`` transform.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import ray

import litstore
import litstore.ray


def make_record(row: dict[str, Any], revision: int = 0) -> dict[str, Any]:
    i = int(row["id"])
    rng = np.random.default_rng(i)
    return {
        "id": f"sample-{i:06d}",
        "label": i % 10,
        "revision": revision,
        "embedding": rng.standard_normal(16).astype(np.float32),
    }


def normalise(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    norms = np.linalg.norm(batch["embedding"], axis=1, keepdims=True)
    batch["embedding"] = batch["embedding"] / norms
    return batch


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "samples"
        litstore.Store.create(root, key="id", splits=litstore.HashSplit(train=0.9, val=0.1))

        generated = ray.data.range(5_000, override_num_blocks=8).map(make_record)
        first = litstore.ray.write(generated, root, message="initial ingest")
        print(f"version {first.number}: {first.counts} records, one commit from 8 tasks")

        fixes = ray.data.range(500, override_num_blocks=4).map(lambda row: make_record(row, revision=1))
        second = litstore.ray.write(fixes, root, mode="upsert", message="relabel the first 500")
        print(f"version {second.number}: {second.counts} records after the upsert")

        pinned = litstore.ray.read(root, version=first.number, split="val").map_batches(normalise, batch_size=256)
        rows = pinned.take_all()
        revisions = {row["revision"] for row in rows}
        lengths = np.linalg.norm(np.stack([row["embedding"] for row in rows]), axis=1)
        print(f"read version {first.number} split val: {len(rows)} records, revisions {sorted(revisions)}")
        print(f"every embedding normalised: {bool(np.allclose(lengths, 1.0, atol=1e-5))}")
        print(f"verify: {litstore.open(root).verify().ok}")
    ray.shutdown()


if __name__ == "__main__":
    main()
