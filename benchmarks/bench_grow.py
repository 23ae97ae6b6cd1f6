"""Small writes to a large store: what one append, upsert or delete of a few records costs as the store grows.

Run it with ``python benchmarks/bench_grow.py [--n 2000000] [--ops 100] [--repeats 5] [--keep DIR]``.

Records are small (``{"id": "id-<9 digits>", "value": int}``), so a store of ``--n``
records is built quickly (in appends of 500,000, untimed) and the fixed costs of a
write dominate. The same operations run on a small store (``--small`` records) and on
the large one, and on a Lance dataset of the same records (``write_dataset`` with
``mode="append"`` for appends, ``merge_insert`` for upserts, ``delete`` for deletes),
taking turns; each figure is the median of ``--repeats`` operations of ``--ops``
records, page cache warm:

- ``append``: ``--ops`` new keys. Target (litstore's own, not an issue's): the large
  store's append at most 3x the small store's, i.e. an append costs what it adds, not
  the size of the store.
- ``first lookup``: a fresh process opens the store and reads one key (imports not
  counted), with its peak resident memory: litstore composes the manifest and builds
  its key index; Lance scans the ``id`` column with a filter. Shown for information.
- ``upsert`` / ``delete``: ``--ops`` random existing keys. Shown for information: a
  change copies every record that shares a chunk with a changed one (litdata cannot
  express holes in a chunk), and random keys touch nearly every chunk; Lance marks
  deleted rows in deletion files instead.

The exit status is 1 if a target fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _common import print_table, verdict, workdir

APPEND_SCALING_MAX = 3.0
BUILD_STEP = 500_000


def keys(start: int, stop: int) -> list[str]:
    return [f"id-{i:09d}" for i in range(start, stop)]


def build(root: Path, n: int) -> tuple[Any, Any]:
    """A litstore store and a Lance dataset of records ``0..n-1`` (untimed)."""
    import lance
    import pyarrow as pa

    import litstore

    store = litstore.Store.create(root / "litstore", key="id")
    uri = str(root / "lance")
    for start in range(0, n, BUILD_STEP):
        stop = min(n, start + BUILD_STEP)
        table = pa.table({"id": keys(start, stop), "value": np.arange(start, stop, dtype=np.int64)})
        store.append(table)
        lance.write_dataset(table, uri, mode="append" if start else "create")
    return store, uri


def median_ms(action: Callable[[int], object], repeats: int) -> float:
    times = []
    for number in range(repeats):
        started = time.perf_counter()
        action(number)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def measure(store: Any, uri: str, n: int, ops: int, repeats: int, rng: np.random.Generator) -> dict[str, float]:
    """Milliseconds per operation, litstore and Lance taking turns."""
    import lance
    import pyarrow as pa

    fresh = iter(range(10**9, 2 * 10**9, ops))

    def new_records() -> pa.Table:
        start = next(fresh)
        return pa.table({"id": keys(start, start + ops), "value": np.arange(ops, dtype=np.int64)})

    def existing() -> list[list[str]]:
        """``repeats`` sets of ``ops`` distinct existing keys, no key in two sets."""
        chosen = rng.choice(n, size=ops * repeats, replace=False).reshape(repeats, ops)
        return [[f"id-{i:09d}" for i in row] for row in chosen.tolist()]

    def lance_upsert(table: pa.Table) -> None:
        dataset = lance.dataset(uri)
        dataset.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(table)

    def lance_delete(doomed: list[str]) -> None:
        lance.dataset(uri).delete("id IN (" + ", ".join(f"'{key}'" for key in doomed) + ")")

    figures: dict[str, float] = {}
    figures["litstore append"] = median_ms(lambda _: store.append(new_records()), repeats)
    figures["lance append"] = median_ms(lambda _: lance.write_dataset(new_records(), uri, mode="append"), repeats)
    upserts = existing()

    def changed(chosen: list[str]) -> pa.Table:
        return pa.table({"id": chosen, "value": np.full(len(chosen), -1, dtype=np.int64)})

    figures["litstore upsert"] = median_ms(lambda number: store.upsert(changed(upserts[number])), repeats)
    figures["lance upsert"] = median_ms(lambda number: lance_upsert(changed(upserts[number])), repeats)
    deletes = existing()
    figures["litstore delete"] = median_ms(lambda number: store.delete(deletes[number]), repeats)
    figures["lance delete"] = median_ms(lambda number: lance_delete(deletes[number]), repeats)
    return figures


_FIRST_LOOKUP = """
import json, sys, time
kind, where, key = sys.argv[1:]
if kind == "litstore":
    import litstore
    started = time.perf_counter()
    record = litstore.open(where)[key]
else:
    import lance
    started = time.perf_counter()
    record = lance.dataset(where).to_table(filter=f"id = '{key}'").to_pylist()[0]
seconds = time.perf_counter() - started
assert record["id"] == key, record
status = open("/proc/self/status").read()
print(json.dumps({"seconds": seconds, "peak_mib": int(status.split("VmHWM:")[1].split()[0]) / 1024}))
"""


def first_lookup(kind: str, where: str, key: str) -> dict[str, float]:
    """Seconds (imports apart) and peak resident MiB of a fresh process that opens the store and reads one key."""
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _FIRST_LOOKUP, kind, where, key], check=True, capture_output=True, text=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2_000_000, help="records in the large store (default 2,000,000)")
    parser.add_argument("--small", type=int, default=10_000, help="records in the small store (default 10,000)")
    parser.add_argument("--ops", type=int, default=100, help="records per operation (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="operations per figure, median kept (default 5)")
    parser.add_argument("--keep", help="work in this (new or empty) directory and keep it")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    import lance

    import litstore

    args = parse_args(argv)
    print(
        f"python {platform.python_version()}, litstore {litstore.__version__}, lance {lance.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[int, dict[str, float]] = {}
    with workdir(args.keep, "litstore-bench-grow-") as base:
        for size in (args.small, args.n):
            print(f"building {size:,} records (untimed)", flush=True)
            store, uri = build(base / f"n{size}", size)
            rng = np.random.default_rng(size)
            results[size] = measure(store, uri, size, args.ops, args.repeats, rng)
            key = f"id-{size // 2:09d}"  # an original record: no write above changed it
            for kind, where in (("litstore", str(store.root)), ("lance", uri)):
                looked = first_lookup(kind, where, key)
                results[size][f"{kind} first lookup"] = looked["seconds"] * 1e3
                results[size][f"{kind} first lookup peak"] = looked["peak_mib"]
            shown = [f"{k} {v:.1f} {'MiB' if k.endswith('peak') else 'ms'}" for k, v in results[size].items()]
            print(f"  {size:,} records: " + ", ".join(shown), flush=True)
    small, large = results[args.small], results[args.n]
    rows = []
    for operation in ("append", "upsert", "delete"):
        ours, theirs = large[f"litstore {operation}"], large[f"lance {operation}"]
        scaling = ours / small[f"litstore {operation}"]
        judged = operation == "append"
        rows.append(
            [
                f"{operation} {args.ops} records",
                f"{ours:,.1f} ms on {args.n:,} ({small[f'litstore {operation}']:,.1f} ms on {args.small:,})",
                f"{theirs:,.1f} ms on {args.n:,} ({small[f'lance {operation}']:,.1f} ms on {args.small:,})",
                f"{scaling:.2f}x",
                f"<= {APPEND_SCALING_MAX:.1f}x" if judged else "(info)",
                verdict(scaling <= APPEND_SCALING_MAX) if judged else "-",
            ]
        )
    ours, theirs = large["litstore first lookup"], large["lance first lookup"]
    rows.append(
        [
            "first lookup of a key, fresh process",
            f"{ours:,.0f} ms, peak {large['litstore first lookup peak']:,.0f} MiB on {args.n:,} "
            f"({small['litstore first lookup']:,.0f} ms on {args.small:,})",
            f"{theirs:,.0f} ms, peak {large['lance first lookup peak']:,.0f} MiB on {args.n:,} "
            f"({small['lance first lookup']:,.0f} ms on {args.small:,})",
            f"{ours / small['litstore first lookup']:.2f}x",
            "(info)",
            "-",
        ]
    )
    print()
    print_table(["operation", "litstore", "lance", "litstore large/small", "target", "result"], rows)
    failed = any(row[-1] == "FAIL" for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
