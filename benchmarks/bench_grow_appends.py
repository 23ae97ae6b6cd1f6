"""Building a large store by appends in one process: time and memory of each append, checkpoints included.

Run it with ``python benchmarks/bench_grow_appends.py --n 100000000 [--step 500000]
[--checkpoint-interval 64] [--root DIR]``.

The records are bench_scale's small ones (``rec-<9 digits>``, an int label, a 32-byte
payload), appended ``--step`` at a time from Arrow tables into one ``Store`` handle, as
``bench_scale.py``'s build does. Each line gives the version, the records it holds, the
append's seconds, the process's resident memory after it and its peak so far
(``ru_maxrss``), whether the version is a checkpoint and how many key runs it lists.
What it shows: whether a commit's cost and the writer's memory follow the change or
the store (a checkpoint composes every record, streamed since the fifth session).
At the end a fresh handle looks one key up.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import litstore
from _scale_probes import SMALL_PAYLOAD, record_table


def _resident_mib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16_000_000, help="records to build")
    parser.add_argument("--step", type=int, default=500_000, help="records an append")
    parser.add_argument("--checkpoint-interval", type=int, default=64, help="the store's checkpoint_interval")
    parser.add_argument("--root", type=Path, default=None, help="build here (replaced); default a temporary folder")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="litstore-grow-")) / "store"
    shutil.rmtree(root, ignore_errors=True)
    store = litstore.Store.create(root, key="id", checkpoint_interval=args.checkpoint_interval)
    begun = time.perf_counter()
    for first in range(0, args.n, args.step):
        started = time.perf_counter()
        store.append(record_table(first, min(first + args.step, args.n), SMALL_PAYLOAD))
        version = store.version
        print(
            f"v{version.number} records={version.total:,} {time.perf_counter() - started:.2f} s"
            f" rss={_resident_mib()} MiB peak={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB"
            f" checkpoint={version.checkpoint is not None} runs={len(version.key_runs)}",
            flush=True,
        )
    print(f"built {args.n:,} records in {time.perf_counter() - begun:.0f} s")
    started = time.perf_counter()
    key = f"rec-{args.n // 2:09d}"
    assert litstore.open(root)[key]["id"] == key
    print(f"fresh open + lookup of {key}: {1000 * (time.perf_counter() - started):.1f} ms")
    if args.root is None:
        shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
