"""A stream of small appends to a large store: what each costs, checkpoints included, and what it leaves.

Run it with::

    python benchmarks/bench_scale.py --n 1000000 4000000 16000000 --only lookup --keep DIR
    python benchmarks/bench_small_writes.py DIR [--n 4000000 16000000] [--appends 128] [--compare TREE]

The per-figure append of ``bench_scale.py`` keeps the fastest of a few rounds, so it never
meets the commit that writes a manifest checkpoint (O(store)); a user appending all day
pays it every so many commits. Here each size's kept store (``n<N>-32/litstore-<format>``,
the newest format kept) is copied (``--work``, default ``DIR/small-writes-work``), one process makes ``--appends``
appends of 100 records to the copy, one after another, timing each (its median, its
slowest, their sum: the amortized cost), and then, each in a fresh process on the store
they left (imports before the clock, best of 3): ``sql("SELECT count(*) ...")`` (the
whole manifest composed: a checkpoint and the deltas after it) and open + first lookup.
``--compare TREE``: another checkout of litstore (its ``src``) run on its own copy of the
same store, right after this tree's, so both see about the same load. The copies are
removed when measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import compile_litstore, kept_litstore

HERE = Path(__file__).resolve().parent
APPENDS = r"""
import json, resource, sys, time
import litstore
root, count = sys.argv[1], int(sys.argv[2])
store = litstore.open(root)
seconds, checkpoints = [], 0
for round in range(count):
    records = [{"id": f"small-{round:05d}-{i:03d}", "label": i % 10, "payload": bytes(32)} for i in range(100)]
    start = time.perf_counter()
    store.append(records)
    seconds.append(time.perf_counter() - start)
    checkpoints += store.version.checkpoint is not None
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "checkpoints": checkpoints, "peak_mib": peak, "version": store.version.number}))
"""
READ = r"""
import json, sys, time
import duckdb, pandas, pyarrow  # imported before the clock, as bench_scale's probes do
import litstore
root, what = sys.argv[1], sys.argv[2]
start = time.perf_counter()
store = litstore.open(root)
if what == "sql":
    found = store.sql("SELECT count(*) AS n FROM manifest").column("n")[0].as_py()
else:
    found = store["rec-000000007"]["id"]
print(json.dumps({"seconds": time.perf_counter() - start, "found": str(found)}))
"""


def run(source: Path, code: str, *arguments: str) -> dict[str, Any]:
    env = {"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"probe failed ({source}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(source: Path, kept: Path, work: Path, appends: int) -> dict[str, float]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(kept, work)
    try:
        made = run(source, APPENDS, str(work), str(appends))
        seconds = [float(s) for s in made["seconds"]]
        sql = min(float(run(source, READ, str(work), "sql")["seconds"]) for _ in range(3))
        lookup = min(float(run(source, READ, str(work), "lookup")["seconds"]) for _ in range(3))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "median_ms": statistics.median(seconds) * 1000,
        "slowest_ms": max(seconds) * 1000,
        "total_s": sum(seconds),
        "checkpoints": float(made["checkpoints"]),
        "version": float(made["version"]),
        "peak_mib": float(made["peak_mib"]),
        "sql_ms": sql * 1000,
        "lookup_ms": lookup * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, help="the directory bench_scale.py --keep built")
    parser.add_argument("--n", type=int, nargs="+", default=[4_000_000, 16_000_000], help="store sizes")
    parser.add_argument("--appends", type=int, default=128, help="appends of 100 records, one after another")
    parser.add_argument("--compare", type=Path, default=None, help="another litstore checkout, run the same way")
    parser.add_argument("--work", type=Path, default=None, help="where the copies go (default DIR/small-writes-work)")
    args = parser.parse_args()
    compile_litstore()
    trees = [("this", HERE.parent / "src")] + ([("compare", args.compare / "src")] if args.compare else [])
    work = args.work or args.dir / "small-writes-work"
    header = ("N", "tree", "median", "slowest", "sum", "ckpts", "version", "peak", "sql", "lookup")
    print(" ".join(f"{name:>{width}}" for name, width in zip(header, (12, 8, 9, 10, 8, 5, 7, 8, 9, 8), strict=True)))
    for n in args.n:
        kept = args.dir / f"n{n}-32" / kept_litstore(args.dir / f"n{n}-32")
        for name, source in trees:
            row = measure(source, kept, work / f"{name}-{n}", args.appends)
            print(
                f"{n:>12,} {name:>8} {row['median_ms']:7.1f}ms {row['slowest_ms']:8.0f}ms {row['total_s']:7.2f}s "
                f"{row['checkpoints']:5.0f} {row['version']:7.0f} {row['peak_mib']:5.0f}MiB "
                f"{row['sql_ms']:7.0f}ms {row['lookup_ms']:6.1f}ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
