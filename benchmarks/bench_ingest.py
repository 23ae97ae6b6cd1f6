"""Ingest benchmark: peak memory of a streaming append, and ``Store.ingest`` scaling from 1 to 2 workers.

Run it with ``python benchmarks/bench_ingest.py [--n 2000000] [--inputs 2000] [--only rss,ingest] [--keep DIR]``.

``rss``: a fresh child process creates a store and calls ``store.append(generator)``
with ``--n`` records ``{"id": str, "label": int, "split": str, "payload": 1 KiB random
bytes}`` made one at a time, so the records never all exist at once; its peak resident
memory is read back with ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` after it exits (and
printed by the child from ``/proc/self/status`` VmHWM). Target: <= 600 MiB. For
comparison, another child holds ``--sample`` of the same records in a list and the
memory they take is scaled up to ``--n``: what ``store.append(list)`` would need for the
input alone. The RSS of a child that only imports litstore and creates the store is
shown as the floor.

``ingest``: ``store.ingest(make_batch, range(--inputs), num_workers=w)`` into a fresh
store, for ``w`` = 1 and 2, taking turns for ``--rounds`` rounds (best kept);
``make_batch`` turns one int into 100 such records. Target: 2 workers >= 1.6x the
records/s of 1 worker. Both use worker processes (``num_workers=1`` is one worker, not
the calling process). CPU time counts this process and its reaped workers. The exit
status is 1 if a target fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _common import Timing, mib, peak_rss_bytes, print_table, timed, verdict, workdir

PAYLOAD_BYTES = 1024
SPLITS = ("train", "val", "test")
SEED = 20240601
RECORDS_PER_INPUT = 100
GENERATOR_BLOCK = 4096

RSS_MAX_BYTES = 600 * 2**20
INGEST_RATIO_MIN = 1.6

Record = dict[str, Any]


def record(i: int, payload: bytes) -> Record:
    return {"id": f"id-{i:09d}", "label": i % 1000, "split": SPLITS[0 if i % 10 < 8 else 1 + i % 2], "payload": payload}


def generate(n: int) -> Iterator[Record]:
    """``n`` records made one at a time (random payloads drawn in blocks of ``GENERATOR_BLOCK``)."""
    rng = np.random.default_rng(SEED)
    for start in range(0, n, GENERATOR_BLOCK):
        count = min(GENERATOR_BLOCK, n - start)
        blob = rng.bytes(count * PAYLOAD_BYTES)
        for offset in range(count):
            yield record(start + offset, blob[offset * PAYLOAD_BYTES : (offset + 1) * PAYLOAD_BYTES])


def make_batch(number: int) -> list[Record]:
    """The ``RECORDS_PER_INPUT`` records of input ``number`` (module level: ``ingest`` workers import it)."""
    blob = np.random.default_rng([SEED, number]).bytes(RECORDS_PER_INPUT * PAYLOAD_BYTES)
    first = number * RECORDS_PER_INPUT
    return [
        record(first + offset, blob[offset * PAYLOAD_BYTES : (offset + 1) * PAYLOAD_BYTES])
        for offset in range(RECORDS_PER_INPUT)
    ]


# -- child processes ---------------------------------------------------------------------


def child(mode: str, n: int, base: Path) -> None:
    """Run in a fresh process: ``append`` (stream ``n`` records into a new store), ``floor`` or ``hold``."""
    import gc

    import litstore

    if mode == "hold":
        gc.collect()
        before = current_rss_bytes()
        records = list(generate(n))
        gc.collect()
        print(f"HOLD_BYTES {current_rss_bytes() - before} {len(records)}", flush=True)
        return
    store = litstore.Store.create(base / f"store-{mode}", key="id", splits="split")
    if mode == "append":
        timing, version = timed(lambda: store.append(generate(n)))
        print(
            f"  child: appended {version.total:,} records in {timing.wall:.1f} s (cpu {timing.cpu:.1f} s), "
            f"{version.total / timing.wall:,.0f} records/s",
            flush=True,
        )
    print(f"PEAK_RSS {peak_rss_bytes()}", flush=True)


def current_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_child(mode: str, n: int, base: Path) -> tuple[dict[str, str], int]:
    """The ``KEY value`` lines a child printed, and the peak RSS (bytes) of all children reaped so far."""
    command = [sys.executable, __file__, "--child", mode, "--n", str(n), "--base", str(base)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    sys.stderr.write(result.stderr)
    values = {}
    for line in result.stdout.splitlines():
        if line.startswith("  "):
            print(line, flush=True)
        elif " " in line:
            key, value = line.split(" ", 1)
            values[key] = value
    return values, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


# -- sections ----------------------------------------------------------------------------


def bench_rss(base: Path, args: argparse.Namespace) -> list[list[str]]:
    print(f"rss: store.append(generator of {args.n:,} x 1 KiB records) in a fresh child process", flush=True)
    # The append child runs first: RUSAGE_CHILDREN's ru_maxrss is the largest of all reaped children.
    values, peak = run_child("append", args.n, base)
    child_peak = int(values["PEAK_RSS"])
    print(f"  peak RSS {mib(peak)} (child VmHWM {mib(child_peak)})", flush=True)
    shutil.rmtree(base / "store-append")
    floor, _ = run_child("floor", 0, base)
    sample = min(args.sample, args.n)
    held, _ = run_child("hold", sample, base)
    per_record = int(held["HOLD_BYTES"].split()[0]) / sample
    setup = f"{args.n:,} x ~1 KiB records, generator, fresh child"
    return [
        [
            "append(generator) peak RSS",
            setup,
            f"{mib(peak)} (child VmHWM {mib(child_peak)})",
            f"<= {mib(RSS_MAX_BYTES)}",
            verdict(peak <= RSS_MAX_BYTES),
        ],
        ["floor: import litstore + create (info)", "fresh child", mib(int(floor["PEAK_RSS"])), "(info)", "-"],
        [
            "the records themselves as a list (info)",
            f"{per_record:,.0f} B/record measured on {sample:,}, scaled to {args.n:,}",
            mib(per_record * args.n),
            "(info)",
            "-",
        ],
    ]


def bench_ingest(base: Path, args: argparse.Namespace) -> list[list[str]]:
    import litstore

    expected = args.inputs * RECORDS_PER_INPUT
    print(f"ingest: {args.inputs:,} inputs x {RECORDS_PER_INPUT} records = {expected:,} records", flush=True)
    best: dict[int, Timing] = {}
    counter = 0
    order = [1, 2]
    for round_number in range(args.rounds):
        for workers in order if round_number % 2 == 0 else order[::-1]:
            counter += 1
            root = base / f"ingest-{counter}"
            store = litstore.Store.create(root, key="id", splits="split")
            timing, version = timed(
                lambda store=store, workers=workers: store.ingest(
                    make_batch, range(args.inputs), num_workers=workers, progress=False
                )
            )
            if version.total != expected:
                raise AssertionError(f"ingest committed {version.total} records, expected {expected}")
            print(
                f"  round {round_number + 1}: num_workers={workers}: {expected / timing.wall:>9,.0f} records/s "
                f"(wall {timing.wall:.2f} s, cpu {timing.cpu:.2f} s)",
                flush=True,
            )
            if workers not in best or timing.wall < best[workers].wall:
                best[workers] = timing
            shutil.rmtree(root)
    one, two = best[1], best[2]
    ratio = one.wall / two.wall
    setup = f"{args.inputs:,} inputs -> {expected:,} x ~1 KiB records, best of {args.rounds}"
    return [
        [
            "ingest records/s, 1 worker (info)",
            setup,
            f"{expected / one.wall:,.0f}/s (wall {one.wall:.2f} s, cpu {one.cpu:.2f} s)",
            "(info)",
            "-",
        ],
        [
            "ingest records/s, 2 workers",
            setup,
            f"{expected / two.wall:,.0f}/s (wall {two.wall:.2f} s, cpu {two.cpu:.2f} s)",
            "",
            "",
        ],
        [
            "ingest 2 workers / 1 worker",
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
            f"{ratio:.2f}x (cpu-s per record {two.cpu / one.cpu:.2f}x)",
            f">= {INGEST_RATIO_MIN:.1f}x",
            verdict(ratio >= INGEST_RATIO_MIN),
        ],
    ]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000_000, help="records appended from a generator (rss)")
    parser.add_argument("--sample", type=int, default=200_000, help="records held in a list to price them (rss)")
    parser.add_argument("--inputs", type=int, default=2_000, help=f"ingest inputs, {RECORDS_PER_INPUT} records each")
    parser.add_argument("--rounds", type=int, default=2, help="ingest rounds per worker count (best kept)")
    parser.add_argument("--only", type=lambda text: text.split(","), default=["rss", "ingest"])
    parser.add_argument("--keep", help="work in this (new or empty) directory and keep it")
    parser.add_argument("--child", choices=("append", "floor", "hold"), help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if set(args.only) - {"rss", "ingest"}:
        parser.error("--only takes rss, ingest or both")
    if args.child is None and (args.n < 1 or args.inputs < 1 or args.rounds < 1):
        parser.error("--n, --inputs and --rounds must be positive")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.child is not None:
        child(args.child, args.n, Path(args.base))
        return 0
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    rows: list[list[str]] = []
    with workdir(args.keep, "litstore-bench-ingest-") as base:
        if "rss" in args.only:
            rows += bench_rss(base, args)
        if "ingest" in args.only:
            rows += bench_ingest(base, args)
    print()
    print_table(["figure", "setup", "litstore", "target", "result"], rows)
    judged = [row[-1] for row in rows if row[-1] in ("PASS", "FAIL")]
    print(f"\n{judged.count('PASS')} of {len(judged)} targets passed")
    return 1 if "FAIL" in judged else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
