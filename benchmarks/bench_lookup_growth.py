"""Open + first lookup on stores of several sizes, litstore and Lance interleaved, many fresh processes.

Run it with::

    python benchmarks/bench_scale.py --n 1000000 4000000 16000000 --only lookup --keep DIR
    python benchmarks/bench_lookup_growth.py DIR [--n 1000000 4000000 16000000] [--rounds 15]

``bench_scale.py`` keeps the best of a few rounds of each size in turn, so on a shared
machine one size can land in a busy minute and another in a quiet one, and the growth
exponent ``k`` (cost ~ N^k) swings with the load (0.25 to 0.44 between runs of the same
code). Here every round looks up a random key in every size, litstore and Lance in
alternating order, each in a fresh process (``_scale_probes.py``'s ``lookup`` probe, imports
before the clock), so load drifts evenly over the sizes. Prints the fastest and the median
of each size, ``k`` fitted on each, and litstore's median over Lance's.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

from _common import compile_litstore, kept_litstore

HERE = Path(__file__).resolve().parent


def slope(sizes: list[int], seconds: list[float]) -> float:
    """k of seconds ~ size^k, least squares in log-log (``nan`` with fewer than two sizes)."""
    if len(set(sizes)) < 2:
        return math.nan
    xs, ys = [math.log(n) for n in sizes], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)


def lookup(root: Path, kind: str, n: int, key: str) -> float:
    spec = {"op": "lookup", "kind": kind, "root": str(root / f"n{n}-32" / kind), "key": key, "n": n}
    done = subprocess.run(
        [sys.executable, str(HERE / "_scale_probes.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"the {kind} lookup at {n:,} failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", type=Path, help="a directory bench_scale.py --keep built")
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000, 4_000_000, 16_000_000])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    compile_litstore()
    rng = random.Random(3)
    kinds = (kept_litstore(args.stores / f"n{args.n[0]}-32"), "lance")
    times: dict[tuple[str, int], list[float]] = {(kind, n): [] for kind in kinds for n in args.n}
    for number in range(args.rounds):
        for n in args.n:
            key = f"rec-{rng.randrange(n):09d}"
            for kind in kinds if number % 2 == 0 else kinds[::-1]:
                times[kind, n].append(lookup(args.stores, kind, n, key))
    print(f"open + first lookup, {args.rounds} fresh processes each, sizes {[f'{n:,}' for n in args.n]}")
    for kind in kinds:
        fastest = [min(times[kind, n]) for n in args.n]
        medians = [statistics.median(times[kind, n]) for n in args.n]
        print(
            f"{kind:>10}: fastest {[round(t * 1e3, 2) for t in fastest]} ms, k {slope(args.n, fastest):.2f}; "
            f"median {[round(t * 1e3, 2) for t in medians]} ms, k {slope(args.n, medians):.2f}"
        )
    ratios = [statistics.median(times[kinds[0], n]) / statistics.median(times[kinds[1], n]) for n in args.n]
    print("litstore / Lance (medians):", [round(ratio, 2) for ratio in ratios])


if __name__ == "__main__":
    main()
