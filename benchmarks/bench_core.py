"""Core litstore benchmark: append throughput, lookup latency, get_many, index memory.

Run it with ``python benchmarks/bench_core.py [--n 200000] [--batches 10] [--keep DIR] [--splits field|hash]``.

It builds ``--n`` records (``id`` = ``f"id-{i:08d}"``, an int ``label``, a ``split``
field and a 1 KiB random ``payload``), appends them in ``--batches`` batches to a
fresh litstore store, and writes the very same dicts with litdata's own
``BinaryWriter`` (``add_item`` for each record, then ``done()`` and ``merge()``) into
a separate directory, with the same ``chunk_bytes`` as litstore's default. The two
writers take turns batch by batch (alternating which goes first), so both see the
same machine load; compare the figures of one run, not across runs.

Reads are measured on a freshly opened store (``litstore.open(root)``), warm: the
key index is built, the chunk files are in the page cache and the store's chunk
cache, and every timed pass follows an identical untimed warm-up pass.

Targets are judged on wall-clock time. Rows marked ``(info)`` are not judged: the
CPU-time rows (``time.process_time``, all threads of this process) are steadier than
wall time on a machine shared with other jobs. The exit status is 1 if a target fails.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import itertools
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import litdata
import numpy as np
from litdata.streaming.writer import BinaryWriter

import litstore
from _common import workdir
from litstore.format import codec, hashing

PAYLOAD_BYTES = 1024
SPLITS = ("train", "val", "test")
SEED = 20240601

# Targets.
APPEND_RATIO_MIN = 0.8  # litstore records/s over litdata raw writer records/s
LAST_OVER_SECOND_MAX = 1.2  # time of the last batch over the second batch
LOOKUP_P50_MAX_US = 50.0
LOOKUP_P99_MAX_US = 250.0
GET_MANY_MIN_KEYS_PER_S = 500_000.0
INDEX_BYTES_PER_RECORD_MAX = 32.0

LOOKUP_KEYS = 2_000
GET_MANY_KEYS = 10_000
GET_MANY_REPEATS = 5

Record = dict[str, Any]


def default_chunk_bytes() -> int:
    """litstore's default ``chunk_bytes`` (as ``Store.create`` declares it)."""
    default = inspect.signature(litstore.Store.create).parameters["chunk_bytes"].default
    return int(default)


def make_records(n: int, rng: np.random.Generator) -> list[Record]:
    """``n`` records: str id, int label, split field (80/10/10), 1 KiB random payload."""
    blob = rng.bytes(n * PAYLOAD_BYTES)
    labels = rng.integers(0, 1000, size=n).tolist()
    split_of = rng.choice(len(SPLITS), size=n, p=[0.8, 0.1, 0.1]).tolist()
    return [
        {
            "id": f"id-{i:08d}",
            "label": labels[i],
            "split": SPLITS[split_of[i]],
            "payload": blob[i * PAYLOAD_BYTES : (i + 1) * PAYLOAD_BYTES],
        }
        for i in range(n)
    ]


def batch_bounds(n: int, batches: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, batches + 1).astype(int).tolist()
    return list(itertools.pairwise(edges))


@dataclass(frozen=True)
class Timing:
    wall: float  # seconds, time.perf_counter
    cpu: float  # CPU seconds of this process (all threads), time.process_time

    def __add__(self, other: Timing) -> Timing:
        return Timing(self.wall + other.wall, self.cpu + other.cpu)


def timed(action: Callable[[], Any]) -> Timing:
    """Wall and CPU seconds ``action`` takes; garbage is collected first, outside the timing."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def total(timings: Sequence[Timing]) -> Timing:
    return sum(timings, Timing(0.0, 0.0))


def dir_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


# -- writing -----------------------------------------------------------------------


@dataclass
class WriteResult:
    litstore_batches: list[Timing]
    litdata_batches: list[Timing]  # add_item time of each batch
    litdata_finish: Timing  # done() + merge()

    @property
    def litstore_total(self) -> Timing:
        return total(self.litstore_batches)

    @property
    def litdata_total(self) -> Timing:
        return total(self.litdata_batches) + self.litdata_finish


def write_both(records: list[Record], batches: int, store: litstore.Store, writer: BinaryWriter) -> WriteResult:
    litstore_times: list[Timing] = []
    litdata_times: list[Timing] = []

    def litstore_batch(batch: Sequence[Record]) -> None:
        litstore_times.append(timed(lambda: store.append(batch)))

    def litdata_batch(start: int, batch: Sequence[Record]) -> None:
        def add() -> None:
            for index, record in enumerate(batch, start):
                writer.add_item(index, record)

        litdata_times.append(timed(add))

    for number, (start, end) in enumerate(batch_bounds(len(records), batches)):
        batch = records[start:end]
        if number % 2 == 0:
            litstore_batch(batch)
            litdata_batch(start, batch)
        else:
            litdata_batch(start, batch)
            litstore_batch(batch)
        print(
            f"  batch {number + 1:>2}/{batches}: {len(batch):,} records  "
            f"litstore {litstore_times[-1].wall:.3f} s  litdata add_item {litdata_times[-1].wall:.3f} s",
            flush=True,
        )

    def finish() -> None:
        writer.done()
        writer.merge()

    finish_time = timed(finish)
    print(f"  litdata done()+merge(): {finish_time.wall:.3f} s", flush=True)
    return WriteResult(litstore_times, litdata_times, finish_time)


# -- reading -----------------------------------------------------------------------


def percentiles_us(samples_ns: list[int]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.array(samples_ns, dtype=np.float64), [50, 99])
    return float(p50) / 1e3, float(p99) / 1e3


def time_lookups(lookup: Callable[[Any], Any], keys: Sequence[Any], check: Callable[[Any, Any], bool]) -> list[int]:
    """Warm-up pass over ``keys`` (checked), then one timed pass: ns per lookup."""
    for key in keys:
        if not check(key, lookup(key)):
            raise AssertionError(f"lookup of {key!r} returned the wrong record")
    clock = time.perf_counter_ns
    samples: list[int] = []
    append = samples.append
    gc.collect()
    for key in keys:
        start = clock()
        lookup(key)
        append(clock() - start)
    return samples


def unchecked_lookup(snapshot: litstore.Snapshot) -> Callable[[Any], Any]:
    """``snapshot[key]`` minus the content-hash check: the reference that prices the check."""
    index = snapshot.reader.built_index
    if index is None:
        raise AssertionError("look a key up first: the key index is built on the first lookup")
    cache = snapshot.reader.chunk_cache

    def lookup(key: Any) -> Any:
        for position in index.positions(hashing.key_hash(key)):
            chunk, row = index.location(position)
            record = codec.decode(cache.payload(chunk, row))
            if record["id"] == key:
                return record
        return None

    return lookup


def litdata_lookup(ld_dir: Path, ids: list[str], positions: np.ndarray) -> tuple[tuple[float, float] | None, str]:
    """Warm p50/p99 of litdata's ``StreamingDataset[index]``, key -> index via a dict.

    litdata has no keyed lookup of its own; a dict from key to dataset index (built
    untimed here) is the cheapest way to get one, so this times dict + ``ds[index]``.
    """
    try:
        from litdata import StreamingDataset

        dataset = StreamingDataset(str(ld_dir))
        index_of = {key: index for index, key in enumerate(ids)}
        keys = [ids[int(i)] for i in positions]
        samples = time_lookups(lambda key: dataset[index_of[key]], keys, lambda key, rec: rec["id"] == key)
    except Exception as exc:  # noqa: BLE001 - a comparison figure only: report and go on
        return None, f"skipped: {type(exc).__name__}: {exc}"
    return percentiles_us(samples), "StreamingDataset[i], key->i dict"


# -- report ------------------------------------------------------------------------


@dataclass
class Row:
    metric: str
    litstore: str
    litdata: str = ""
    target: str = ""
    verdict: str = ""


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_table(rows: list[Row]) -> None:
    header = Row("metric", "litstore", "litdata", "target", "result")
    columns = [header, *rows]
    widths = [max(len(getattr(row, field)) for row in columns) for field in ("metric", "litstore", "litdata", "target")]

    def line(row: Row) -> str:
        cells = [
            row.metric.ljust(widths[0]),
            row.litstore.rjust(widths[1]),
            row.litdata.rjust(widths[2]),
            row.target.ljust(widths[3]),
            row.verdict,
        ]
        return " | ".join(cells).rstrip()

    rule = "-+-".join("-" * width for width in widths) + "-+-------"
    print(line(header))
    print(rule)
    for row in rows:
        print(line(row))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200_000, help="records to write (default 200000)")
    parser.add_argument("--batches", type=int, default=10, help="append batches (default 10)")
    parser.add_argument("--keep", metavar="DIR", help="write under DIR (kept) instead of a temporary directory")
    parser.add_argument(
        "--splits", choices=("field", "hash"), default="field", help="split by the records' split field or HashSplit"
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.batches < 1 or args.batches > args.n:
        parser.error("need --n >= 1 and 1 <= --batches <= --n")

    rng = np.random.default_rng(SEED)
    chunk_bytes = default_chunk_bytes()
    print(f"building {args.n:,} records ...", flush=True)
    records = make_records(args.n, rng)
    encoded_size = int(np.mean([len(codec.encode(record)) for record in records[:1000]]))

    with workdir(args.keep) as base:
        ls_root, ld_dir = base / "litstore", base / "litdata"
        splits: Any = "split" if args.splits == "field" else litstore.HashSplit(train=0.8, val=0.1, test=0.1)
        store = litstore.Store.create(ls_root, key="id", splits=splits)
        assert store.config.chunk_bytes == chunk_bytes
        writer = BinaryWriter(str(ld_dir), chunk_bytes=chunk_bytes)

        print(f"writing {args.n:,} records in {args.batches} batches (litstore and litdata taking turns) ...")
        writes = write_both(records, args.batches, store, writer)
        if len(store) != args.n:
            raise AssertionError(f"store holds {len(store)} records, expected {args.n}")
        # Reads run without the 1 KiB-payload input records in memory.
        ids = [record["id"] for record in records]
        del store, writer, records
        gc.collect()

        # -- reads, on a freshly opened store --------------------------------------
        reader = litstore.open(ls_root)
        lookup_positions = rng.choice(args.n, size=min(LOOKUP_KEYS, args.n), replace=False)
        lookup_keys = [ids[int(i)] for i in lookup_positions]
        first_lookup = timed(lambda: reader[lookup_keys[0]]).wall  # builds the key index
        index_bytes = reader.lookup_index_bytes
        bytes_per_record = index_bytes / len(reader)

        samples = time_lookups(reader.__getitem__, lookup_keys, lambda key, rec: rec["id"] == key)
        p50, p99 = percentiles_us(samples)
        unchecked_p50, _ = percentiles_us(
            time_lookups(unchecked_lookup(reader.head()), lookup_keys, lambda key, rec: rec["id"] == key)
        )
        ld_lookup, ld_note = litdata_lookup(ld_dir, ids, lookup_positions)

        many_keys = [ids[int(i)] for i in rng.choice(args.n, size=GET_MANY_KEYS, replace=args.n < GET_MANY_KEYS)]
        got = reader.get_many(many_keys)  # warm-up
        if [record["id"] for record in got] != many_keys:
            raise AssertionError("get_many returned the wrong records")
        del got
        many_times = [timed(lambda: reader.get_many(many_keys)) for _ in range(GET_MANY_REPEATS)]
        keys_per_s = GET_MANY_KEYS / float(np.median([timing.wall for timing in many_times]))
        keys_per_cpu_s = GET_MANY_KEYS / float(np.median([timing.cpu for timing in many_times]))

        ls_disk, ld_disk = dir_bytes(ls_root), dir_bytes(ld_dir)

    # -- report --------------------------------------------------------------------
    bounds = batch_bounds(args.n, args.batches)
    ls_total, ld_total = writes.litstore_total, writes.litdata_total
    ls_rate, ld_rate = args.n / ls_total.wall, args.n / ld_total.wall
    ratio = ls_rate / ld_rate
    rows = [
        Row("append records/s (all batches)", f"{ls_rate:,.0f}", f"{ld_rate:,.0f}"),
        Row("append total s", f"{ls_total.wall:.3f}", f"{ld_total.wall:.3f}"),
        Row(
            "append ratio litstore/litdata",
            f"{ratio:.2f}x",
            "",
            f">= {APPEND_RATIO_MIN}x",
            verdict(ratio >= APPEND_RATIO_MIN),
        ),
        Row("append CPU s (info)", f"{ls_total.cpu:.3f}", f"{ld_total.cpu:.3f}"),
        Row("append ratio, CPU time (info)", f"{ld_total.cpu / ls_total.cpu:.2f}x"),
    ]
    if args.batches >= 2:
        second, last = writes.litstore_batches[1].wall, writes.litstore_batches[-1].wall
        second_n, last_n = bounds[1][1] - bounds[1][0], bounds[-1][1] - bounds[-1][0]
        growth = (last / last_n) / (second / second_n)  # per record, in case batch sizes differ by one
        ld_growth = (writes.litdata_batches[-1].wall / last_n) / (writes.litdata_batches[1].wall / second_n)
        cpu_growth = (writes.litstore_batches[-1].cpu / last_n) / (writes.litstore_batches[1].cpu / second_n)
        rows += [
            Row("batch 2 s / last batch s", f"{second:.3f} / {last:.3f}", "(add_item only)"),
            Row(
                "last batch / batch 2 time",
                f"{growth:.2f}",
                f"{ld_growth:.2f}",
                f"<= {LAST_OVER_SECOND_MAX}",
                verdict(growth <= LAST_OVER_SECOND_MAX),
            ),
            Row("last batch / batch 2, CPU time (info)", f"{cpu_growth:.2f}"),
        ]
    ld_p50 = f"{ld_lookup[0]:.1f}" if ld_lookup else "n/a"
    ld_p99 = f"{ld_lookup[1]:.1f}" if ld_lookup else "n/a"
    rows += [
        Row("first lookup, fresh open ms (info)", f"{first_lookup * 1e3:.1f}"),
        Row(
            f"lookup p50 us ({len(lookup_keys):,} keys, warm)",
            f"{p50:.1f}",
            ld_p50,
            f"<= {LOOKUP_P50_MAX_US:.0f}",
            verdict(p50 <= LOOKUP_P50_MAX_US),
        ),
        Row(
            "lookup p50 us without the content-hash check (info)",
            f"{unchecked_p50:.1f}",
            f"checked/unchecked {p50 / unchecked_p50:.2f}x",
        ),
        Row(
            f"lookup p99 us ({len(lookup_keys):,} keys, warm)",
            f"{p99:.1f}",
            ld_p99,
            f"<= {LOOKUP_P99_MAX_US:.0f}",
            verdict(p99 <= LOOKUP_P99_MAX_US),
        ),
        Row(
            f"get_many keys/s ({GET_MANY_KEYS:,} keys, warm)",
            f"{keys_per_s:,.0f}",
            "",
            f">= {GET_MANY_MIN_KEYS_PER_S:,.0f}",
            verdict(keys_per_s >= GET_MANY_MIN_KEYS_PER_S),
        ),
        Row("get_many keys per CPU-s (info)", f"{keys_per_cpu_s:,.0f}"),
        Row(
            "key index bytes/record",
            f"{bytes_per_record:.1f}",
            "",
            f"<= {INDEX_BYTES_PER_RECORD_MAX:.0f}",
            verdict(bytes_per_record <= INDEX_BYTES_PER_RECORD_MAX),
        ),
        Row("on-disk MiB (all files)", f"{ls_disk / 2**20:,.1f}", f"{ld_disk / 2**20:,.1f}"),
    ]

    print()
    print(
        f"records: {args.n:,} | record: {PAYLOAD_BYTES} B random payload + id/label/split "
        f"(~{encoded_size} B encoded) | batches: {args.batches} | splits: {args.splits} | "
        f"chunk_bytes: {chunk_bytes // 2**20} MiB"
    )
    print(
        f"cache: warm (reads on a freshly opened store after one untimed warm-up pass; "
        f"get_many median of {GET_MANY_REPEATS}) | litdata {litdata.__version__} | "
        f"python {platform.python_version()} | {os.cpu_count()} CPUs | load average {os.getloadavg()[0]:.1f}"
    )
    print(f"litstore: {Path(litstore.__file__).parent}")
    print(f"litdata lookup: {ld_note}")
    print()
    print_table(rows)
    verdicts = [row.verdict for row in rows if row.verdict]
    print()
    print(f"{verdicts.count('PASS')} of {len(verdicts)} targets passed")
    if args.keep:
        print(f"kept: {ls_root} and {ld_dir}")
    return 0 if all(item == "PASS" for item in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
