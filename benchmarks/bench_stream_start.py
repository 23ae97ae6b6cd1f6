"""What it costs to start streaming: ``dataset()`` to the first batch, format 2 (manifest) against 3 (sidecars).

Run it with ``python benchmarks/bench_stream_start.py [--n 200000] [--rounds 3] [--keep DIR]``.

Two stores get the same ``--n`` small records (``rec-%08d`` keys, an int ``label``,
an 8-byte ``payload``: about 40 bytes each, encoded) in one append: one of format 2,
whose ``dataset()`` composes the manifest and writes every record's key and content
hash into the view (``records.arrow``), one of format 3, whose chunks carry hashes
sidecars. For each store and each worker count (0 and 2), a fresh Python process
opens the store, makes ``dataset(shuffle=True)`` in a fresh views directory, takes
the first batch from a ``StreamingDataLoader`` (batch size 256), then streams the
rest of the epoch. It reports the seconds from before ``dataset()`` to the first
batch (imports and ``open`` apart), the peak resident memory (VmHWM) of the main
process, and that of each DataLoader worker, read by the worker itself in its
``collate_fn`` (its last batch reports its peak over the epoch). Each figure is the
median of ``--rounds`` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import mib, print_table, workdir


def _vmhwm() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _collate(batch: list[Any]) -> tuple[int, int, int]:
    """A batch as (records, this process's pid, its peak resident bytes so far)."""
    return len(batch), os.getpid(), _vmhwm()


def child(root: str, workers: int) -> None:
    """One measurement, in this fresh process; prints its figures as JSON."""
    started = time.perf_counter()
    import litdata

    import litstore

    imported = time.perf_counter()
    after_imports = _vmhwm()
    store = litstore.open(root)
    opened = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="litstore-views-") as views:
        dataset = store.dataset(shuffle=True, seed=1, views_dir=views)
        made = time.perf_counter()
        loader = litdata.StreamingDataLoader(dataset, batch_size=256, num_workers=workers, collate_fn=_collate)
        batches = iter(loader)
        count, pid, peak = next(batches)
        first = time.perf_counter()
        peaks = {pid: peak}
        for size, pid, peak in batches:
            count += size
            peaks[pid] = max(peaks.get(pid, 0), peak)
        ended = time.perf_counter()
        view_files = sorted(path.name for path in next(Path(views).rglob("index.json")).parent.iterdir())
    worker_peaks = [peak for pid, peak in peaks.items() if pid != os.getpid()]
    print(
        json.dumps(
            {
                "imports": imported - started,
                "open": opened - imported,
                "dataset": made - opened,
                "first_batch": first - opened,
                "epoch": ended - opened,
                "records": count,
                "main_after_imports": after_imports,
                "main_peak": _vmhwm(),
                "worker_peaks": worker_peaks,
                "view": view_files,
            }
        )
    )


def build(root: Path, n: int, format_version: int) -> None:
    import numpy as np

    import litstore

    store = litstore.Store.create(root, key="id", format_version=format_version)
    payloads = np.random.default_rng(0).bytes(8 * n)
    store.append([{"id": f"rec-{i:08d}", "label": i % 10, "payload": payloads[8 * i : 8 * i + 8]} for i in range(n)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    with workdir(args.keep) as base:
        for format_version in (2, 3):
            build(base / f"format{format_version}", args.n, format_version)
        chunk_bytes = sum(path.stat().st_size for path in (base / "format3").rglob("*.bin"))
        print(f"{args.n} records, {chunk_bytes / args.n:.1f} bytes a record in the chunks (framing included)")
        rows = []
        for workers in (0, 2):
            for format_version in (2, 3):
                runs = []
                for _ in range(args.rounds):
                    command = [sys.executable, __file__, "--child", str(base / f"format{format_version}"), str(workers)]
                    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                    runs.append(json.loads(output.strip().splitlines()[-1]))
                assert all(run["records"] == args.n for run in runs)

                def median(name: str, runs: list[dict[str, Any]] = runs) -> float:
                    return statistics.median(run[name] for run in runs)

                worker_peak = max((max(run["worker_peaks"]) for run in runs if run["worker_peaks"]), default=0)
                rows.append(
                    [
                        f"format {format_version}",
                        str(workers),
                        f"{median('dataset'):.3f}",
                        f"{median('first_batch'):.3f}",
                        f"{median('epoch'):.2f}",
                        mib(median("main_after_imports")),
                        mib(median("main_peak")),
                        mib(worker_peak) if workers else "-",
                        " ".join(runs[0]["view"]),
                    ]
                )
        print_table(
            [
                "store",
                "workers",
                "dataset() s",
                "to 1st batch s",
                "epoch s",
                "main after imports",
                "main peak",
                "worker peak",
                "view holds",
            ],
            rows,
        )


if __name__ == "__main__":
    main()
