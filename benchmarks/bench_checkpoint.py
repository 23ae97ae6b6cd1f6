"""A commit that writes a checkpoint, in a fresh process: what every ``checkpoint_interval``-th commit costs.

Run it with::

    python benchmarks/bench_scale.py --n 1000000 4000000 16000000 --only lookup --keep DIR
    python benchmarks/bench_checkpoint.py DIR [--n 4000000 16000000] [--rounds 3] [--compare TREE]

A commit writes a full manifest checkpoint and one key run of every record every
``checkpoint_interval`` (64) versions, spaced further in a large store (512 at 16M records:
``litstore.txn.checkpoint.checkpoint_spacing``), so a stream of small appends pays O(store)
once every so many commits (``bench_small_writes.py`` measures the stream). Each
size's kept store (``n<N>-32/litstore-<format>``, the newest format kept) is copied once
beside it (``--work``, default ``DIR/checkpoint-work``) with ``checkpoint_interval`` set to 1 in
the copy's config (and the spacing held at it), so
every append of 100 records there writes a checkpoint (a full manifest and key run: about 1.4 GB at
16M records, kept, so the copy is removed after its size is measured). Each round appends in a fresh
process (imports before the clock) and prints the seconds and the peak resident memory.
``--compare TREE``: another checkout of litstore (its ``src``) run in the same rounds,
alternating, so both see the same load; prints each one's median and the ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from _common import compile_litstore, kept_litstore

HERE = Path(__file__).resolve().parent
PROBE = r"""
import json, resource, sys, time
import litstore
root, tag = sys.argv[1], sys.argv[2]
# Every commit a checkpoint, however large the store (its spacing would grow with it: txn/checkpoint.py).
sys.modules["litstore.txn.checkpoint"].ROWS_PER_CHECKPOINT_VERSION = 1 << 62
store = litstore.open(root)
records = [{"id": f"ckpt-{tag}-{i:05d}", "label": i % 10, "payload": bytes(32)} for i in range(100)]
start = time.perf_counter()
store.append(records)
seconds = time.perf_counter() - start
assert store.version.checkpoint is not None, "the append wrote no checkpoint"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mib": peak, "records": store.version.total}))
"""


def prepare(kept: Path, work: Path) -> Path:
    """A copy of the kept store whose every commit writes a checkpoint."""
    if not work.exists():
        shutil.copytree(kept, work)
        config_path = work / "litstore.json"
        config = json.loads(config_path.read_text())
        config["checkpoint_interval"] = 1
        config_path.write_text(json.dumps(config, indent=1))
    return work


def append(source: Path, root: Path, tag: str) -> dict[str, float]:
    env = {"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), tag], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode:
        raise SystemExit(f"probe failed ({source}):\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="the directory bench_scale.py --keep built")
    parser.add_argument("--n", type=int, nargs="+", default=[4_000_000, 16_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="where the copies go (default: KEPT/checkpoint-work)")
    parser.add_argument("--compare", type=Path, default=None, help="another litstore checkout, run alternately")
    args = parser.parse_args()
    compile_litstore()
    work = args.work or args.kept / "checkpoint-work"
    sources = {"this": HERE.parent / "src"}
    if args.compare is not None:
        sources["compare"] = args.compare.resolve() / "src"
    print("| records | tree | seconds (median) | each round | peak MiB |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.n:
        root = prepare(args.kept / f"n{n}-32" / kept_litstore(args.kept / f"n{n}-32"), work / f"n{n}")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
        for round_number in range(args.rounds):
            for name, source in sources.items():
                runs[name].append(append(source, root, f"{name}-{round_number}-{uuid.uuid4().hex[:8]}"))
        medians = {}
        for name, results in runs.items():
            seconds = [result["seconds"] for result in results]
            medians[name] = statistics.median(seconds)
            each = ", ".join(f"{value:.2f}" for value in seconds)
            peak = max(result["peak_mib"] for result in results)
            print(f"| {n:,} | {name} | {medians[name]:.2f} s | {each} | {peak:.0f} |")
        if "compare" in medians:
            print(f"| {n:,} | this / compare | {medians['this'] / medians['compare']:.2f}x | | |")
        shutil.rmtree(root)  # every round's checkpoint is kept there: tens of GB at 16M


if __name__ == "__main__":
    main()
