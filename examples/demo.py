"""The main job on a local store: create, append twice, look up, query the manifest, verify.

Run it with ``python examples/demo.py [ROOT]`` (default: a temporary directory).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import litstore


def make_records(start: int, count: int, rng: np.random.Generator) -> list[dict[str, object]]:
    return [
        {
            "id": f"pet-{number:05d}",
            "label": int(rng.integers(0, 3)),
            "species": ["cat", "dog", "bird"][number % 3],
            "features": rng.standard_normal(8).astype(np.float32),
        }
        for number in range(start, start + count)
    ]


def main(root: Path) -> None:
    rng = np.random.default_rng(0)
    store = litstore.Store.create(root / "pets", key="id", splits=litstore.HashSplit(train=0.8, val=0.1, test=0.1))
    print(f"created {store}")

    first = store.append(make_records(0, 1_000, rng))
    second = store.append(make_records(1_000, 500, rng))
    for version in (first, second):
        print(f"version {version.number}: {version.operation} +{version.added}, counts {version.counts}")

    record = store["pet-01234"]
    print(f"store['pet-01234'] -> label {record['label']}, species {record['species']}, {record['features'].dtype}")
    print(f"version 1 has pet-01234? {'pet-01234' in store.at(1)}; latest has it? {'pet-01234' in store}")

    counts = store.sql("SELECT split, count(*) AS records FROM manifest GROUP BY split ORDER BY split")
    print("records per split:", dict(zip(counts["split"].to_pylist(), counts["records"].to_pylist())))

    expected = [f"pet-{number:05d}" for number in range(1_500)]
    report = store.verify(expected_keys=expected)
    print(report.summary())
    report.raise_if_failed()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            main(Path(directory))
