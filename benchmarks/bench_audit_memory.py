"""audit() on a large store of small records: time and peak resident memory of a fresh process.

    python benchmarks/bench_audit_memory.py --n 1000000 2000000 [--near] [--root DIR]

For each ``N`` it builds (untimed) a store of ``N`` of bench_scale's small records
(``rec-%09d``, an int label, 32 random bytes) by appends of 500,000-row Arrow tables,
in which every 1,000th record repeats its predecessor's content under its own key (so
the audit finds ``N / 1000`` duplicate groups), then runs ``store.audit()`` (with
``--near``, ``audit(near=True)``) in a fresh process and prints its seconds, its peak
resident memory (``VmHWM``, imports included) and the peak of a process that only
imports litstore and opens the store, with the bytes a record that difference makes.
What it shows: whether audit's memory follows the records' count at a small fixed cost
a record, or the records' keys and the manifest as Python and Arrow objects.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _scale_probes import SMALL_PAYLOAD, TABLE_ROWS, record_table

PROBE = """
import json, sys, time
import litstore
store = litstore.open(sys.argv[1])
near = sys.argv[2] == "near"
started = time.perf_counter()
report = store.audit(near=near) if sys.argv[2] != "open" else None
seconds = time.perf_counter() - started
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) / 1024
print(json.dumps({"seconds": seconds, "peak_mib": peak,
                  "groups": None if report is None else report.duplicate_group_count}))
"""


def build(root: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    import litstore

    store = litstore.Store.create(root, key="id")
    for first in range(0, n, TABLE_ROWS):
        table = record_table(first, min(first + TABLE_ROWS, n), SMALL_PAYLOAD)
        # every 1,000th record takes its predecessor's label and payload: a duplicate group each
        numbers = pa.array(range(first, first + table.num_rows))
        copied = pc.equal(pc.subtract(numbers, pc.multiply(pc.divide(numbers, 1000), 1000)), 1)
        previous = {
            name: pa.concat_arrays([table[name].combine_chunks()[:1], table[name].combine_chunks()[:-1]])
            for name in ("label", "payload")
        }
        table = table.set_column(1, "label", pc.if_else(copied, previous["label"], table["label"]))
        table = table.set_column(2, "payload", pc.if_else(copied, previous["payload"], table["payload"]))
        store.append(table)


def probe(root: Path, what: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(root), what], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--near", action="store_true", help="audit(near=True)")
    parser.add_argument("--root", type=Path, default=None, help="build under this folder (default: temporary)")
    args = parser.parse_args()
    base = args.root or Path(tempfile.mkdtemp(prefix="litstore-bench-audit-"))
    print("| records | audit s | peak MiB | open-only peak MiB | bytes a record above it | groups |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        root = base / f"n{n}"
        shutil.rmtree(root, ignore_errors=True)
        build(root, n)
        opened = probe(root, "open")
        audited = probe(root, "near" if args.near else "plain")
        extra = (audited["peak_mib"] - opened["peak_mib"]) * 2**20 / n
        print(
            f"| {n:,} | {audited['seconds']:.1f} | {audited['peak_mib']:,.0f} | {opened['peak_mib']:,.0f} "
            f"| {extra:.0f} | {audited['groups']} |",
            flush=True,
        )
        shutil.rmtree(root, ignore_errors=True)
    if args.root is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
