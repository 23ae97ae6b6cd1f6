"""Costs that should not grow with the store: each operation in a fresh process, at several store sizes.

Run it with ``python benchmarks/bench_scale.py [--n 1000000 4000000] [--keep DIR]``.

For each ``N`` it builds, untimed, stores of ``N`` small records (``{"id": "rec-%09d",
"label": int, "payload": 32 bytes}``, written as Arrow tables of 500,000 rows): a
litstore store of format 2 (the manifest composed on first use), one of format 3 (the
key index on disk, :mod:`litstore.format.keyrun`), and, if ``pylance`` is installed, a
Lance dataset written by ``write_dataset`` with a BTREE scalar index on ``id``. Then
each operation runs in a fresh Python process (imports done before the clock starts,
pandas included, which pyarrow imports on its first array; page cache warm), and the
process reports its time and its peak resident memory (``VmHWM``, imports included;
``ru_maxrss`` would keep the parent's across ``exec``):

- ``first lookup``: open the store or dataset and read one random key;
- ``get_many 10k``: open, then read 10,000 random keys (Lance: ``isin`` filter);
- ``append 100``: open, then append 100 new records (Lance: ``write_dataset`` append).

Printed: one table per N with the ratio of each litstore format to Lance, and the
growth exponent k (time ~ N^k) fitted over the sizes run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD_STEP = 500_000
PAYLOAD = b"x" * 32

_PROBE = r"""
import json, random, sys, time
kind, root, n, op = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(7)
asked = [f"rec-{rng.randrange(n):09d}" for _ in range(10_000 if op == "get_many" else 1)]
import pandas, pyarrow as pa  # pyarrow imports pandas on its first array anyway: an import, not timed
if kind == "lance":
    import lance
else:
    import litstore
start = time.perf_counter()
if kind == "lance":
    dataset = lance.dataset(root)
    if op == "append":
        table = pa.table({"id": [f"new-{i}" for i in range(100)], "label": list(range(100)),
                          "payload": [b"x" * 32] * 100})
        lance.write_dataset(table, root, mode="append")
    else:
        quoted = ", ".join(f"'{key}'" for key in asked)
        rows = dataset.to_table(filter=f"id IN ({quoted})").num_rows
        assert rows == len(set(asked)), rows
else:
    store = litstore.open(root)
    if op == "append":
        store.append(pa.table({"id": [f"new-{i}" for i in range(100)], "label": list(range(100)),
                               "payload": [b"x" * 32] * 100}))
    elif op == "get_many":
        assert len(store.get_many(asked)) == len(asked)
    else:
        assert store[asked[0]]["id"] == asked[0]
seconds = time.perf_counter() - start
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_mib": peak / 1024}))
"""


def build(root: Path, n: int, lance_too: bool) -> dict[str, str]:
    import pyarrow as pa

    import litstore

    roots = {"litstore-2": str(root / "f2"), "litstore-3": str(root / "f3")}
    stores = {
        "litstore-2": litstore.Store.create(roots["litstore-2"], key="id", format_version=2),
        "litstore-3": litstore.Store.create(roots["litstore-3"], key="id", format_version=3),
    }
    if lance_too:
        roots["lance"] = str(root / "lance")
    for start in range(0, n, BUILD_STEP):
        stop = min(start + BUILD_STEP, n)
        table = pa.table(
            {
                "id": [f"rec-{i:09d}" for i in range(start, stop)],
                "label": pa.array(range(start, stop), pa.int64()),
                "payload": pa.array([PAYLOAD] * (stop - start), pa.binary()),
            }
        )
        for store in stores.values():
            store.append(table)
        if lance_too:
            import lance

            lance.write_dataset(table, roots["lance"], mode="append" if start else "create")
    if lance_too:
        import lance

        lance.dataset(roots["lance"]).create_scalar_index("id", index_type="BTREE")
    return roots


def probe(kind: str, root: str, n: int, op: str) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, "-c", _PROBE, "lance" if kind == "lance" else "litstore", root, str(n), op],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--keep", type=Path, default=None, help="build under this directory and keep it")
    args = parser.parse_args()
    try:
        import lance  # noqa: F401

        lance_too = True
    except ImportError:
        lance_too = False
        print("pylance is not installed: litstore only (pip install 'litstore[bench]')")
    results: dict[int, dict[tuple[str, str], dict[str, float]]] = {}
    ops = ["first lookup", "get_many", "append"]
    for n in args.n:
        base = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
        roots = build(base / f"n{n}", n, lance_too)
        results[n] = {}
        for op in ops:
            for kind, root in roots.items():
                results[n][(kind, op)] = probe(kind, root, n, op.split()[0] if op != "first lookup" else "lookup")
        print(f"\nN = {n:,} records (~40 B each); fresh process per operation, imports not timed")
        print(
            f"{'operation':<14}" + "".join(f"{kind:>22}" for kind in roots) + ("   ratio 3/lance" if lance_too else "")
        )
        for op in ops:
            cells = [results[n][(kind, op)] for kind in roots]
            line = f"{op:<14}" + "".join(f"{c['seconds'] * 1000:>10.1f} ms {c['peak_mib']:>5.0f} MiB" for c in cells)
            if lance_too:
                line += f"   {results[n][('litstore-3', op)]['seconds'] / results[n][('lance', op)]['seconds']:>6.2f}x"
            print(line)
        if not args.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    if len(args.n) > 1:
        print("\ngrowth exponent k (seconds ~ N^k) over", ", ".join(f"{n:,}" for n in args.n))
        low, high = min(args.n), max(args.n)
        for op in ops:
            kinds = sorted({kind for kind, each in results[low] if each == op})
            shown = []
            for kind in kinds:
                a, b = results[low][(kind, op)]["seconds"], results[high][(kind, op)]["seconds"]
                shown.append(f"{kind} {math.log(b / a) / math.log(high / low):.2f}")
            print(f"  {op:<14}" + ", ".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
