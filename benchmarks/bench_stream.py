"""Streaming benchmark: a pinned litstore version against plain litdata over the same chunks, and diff time.

Run it with ``python benchmarks/bench_stream.py [--n 100000] [--diff-n 1000000] [--skip-diff] [--keep DIR]``;
``--order`` times only one shuffled epoch in ``order="global"`` against litdata's shuffle (target >= 0.9x).

Streaming. ``--n`` records (``id``, an int ``label``, a ``--payload``-byte random
``payload``) are appended to a fresh store in ``--batches`` batches: that is the
*full* version. Then 5% of its keys, drawn at random, are deleted: the *deleted*
version, which copy-on-write gives its own compacted chunks. For each of the two
versions and each ``--workers`` count, one epoch is timed through
``litdata.StreamingDataLoader`` for three datasets over exactly the same chunk files:

- ``litstore``: ``store.dataset(version=v)`` (yields decoded records);
- ``litdata+decode``: a plain ``litdata.StreamingDataset`` over a directory holding a
  copy of the version's ``index.json`` and a ``fragments`` symlink to the store's
  fragments, with ``transform=litstore.format.codec.decode`` (the same work: the fair baseline);
- ``litdata raw``: the same plain dataset, decoding nothing (yields the stored bytes
  as memoryviews; a batch becomes a list of ``bytes``, since default collate cannot
  stack memoryviews and worker processes cannot pickle them).

The targets compare ``litstore`` with ``litdata+decode``; the raw ratio is shown for
information (it prices decoding, not litstore). The chunk files are read once before
timing, so every epoch runs with a warm page cache; the variants take turns, in a
rotating order, for ``--rounds`` rounds, and each keeps its best round. Dataset
construction is timed apart (``setup``); the epoch time includes the loader's worker
start-up, which is the same for all three.

Two ratios are printed: ``ratio`` (wall-clock samples/s, what the targets are about;
PASS/FAIL in ``wall``) and ``cpu ratio`` (samples per CPU-second of this process and
its loader workers, PASS/FAIL in ``cpu``). On a machine shared with other jobs the
wall-clock figures swing by 2x between identical epochs; the CPU-time figures do not,
and they are close to what an idle machine would show. The exit status follows ``wall`` (and
the diff targets).

Diff. ``--diff-n`` small records (``{"id": str, "v": int}``) are appended in four
batches (version *a*); then 5% of the keys get a new ``v`` (upsert) and another 5%
are deleted (version *b*), so 10% of the keys differ. ``store.diff(a, b)`` is timed
on a freshly opened store (cold: both manifests are composed from their Parquet
files), again on the same store (warm: files in the page cache, libraries loaded),
and on two manifests already in memory (the comparison alone).

Subset. On the full version, ``dataset(where="label < 100")`` (10% of the records,
copied once into the view, ``copy`` timed apart) against the whole split, per sample
streamed, and ``StreamingDataset.subset(indices)`` over the same chunks (litdata's
region-of-interest holes) for information.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import itertools
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from litdata import StreamingDataLoader, StreamingDataset

import litstore
from _common import workdir
from litstore import Diff
from litstore.format import codec

SEED = 20240601
SPLIT = "train"  # splits=None gives one split, "train"

STREAM_RATIO_MIN = 0.95  # litstore samples/s over litdata+decode samples/s, full version
DELETED_RATIO_MIN = 0.90  # the same, on the version that deleted 5% at random
ORDER_RATIO_MIN = 0.90  # global order samples/s over litdata's shuffle samples/s (--order)
DIFF_MAX_S = 1.0
DELETE_FRACTION = 0.05
SUBSET_WHERE = "label < 100"  # labels are uniform in [0, 1000): a 10% subset
SUBSET_RATIO_MIN = 0.5  # subset samples/s over whole-split samples/s
CHANGE_FRACTION = 0.05  # upserted with new content; the same fraction again is deleted


def default_chunk_bytes() -> int:
    return int(inspect.signature(litstore.Store.create).parameters["chunk_bytes"].default)


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# -- streaming ---------------------------------------------------------------------------


def build_stream_store(root: Path, n: int, payload: int, batches: int, chunk_bytes: int) -> litstore.Store:
    rng = np.random.default_rng(SEED)
    store = litstore.Store.create(root, key="id", chunk_bytes=chunk_bytes, fields={"label": int})
    edges = np.linspace(0, n, batches + 1).astype(int).tolist()
    for start, end in itertools.pairwise(edges):
        blob = rng.bytes((end - start) * payload)
        labels = rng.integers(0, 1000, size=end - start).tolist()
        records = [
            {
                "id": f"id-{i:08d}",
                "label": labels[i - start],
                "payload": blob[(i - start) * payload : (i - start + 1) * payload],
            }
            for i in range(start, end)
        ]
        seconds, version = timed(lambda records=records: store.append(records))
        print(f"  append {len(records):,} records -> version {version.number}: {seconds:.2f} s", flush=True)
    return store


def plain_dir(store: litstore.Store, version: litstore.Version, directory: Path) -> Path:
    """A plain litdata input dir: the version's split index.json and a symlink to the store's fragments."""
    directory.mkdir(parents=True)
    (directory / "index.json").write_bytes((Path(store.root) / version.indexes[SPLIT]).read_bytes())
    (directory / "fragments").symlink_to(Path(store.root) / "fragments", target_is_directory=True)
    return directory


def chunk_files(store: litstore.Store, version: litstore.Version) -> list[Path]:
    return [Path(store.root) / chunk.filename for chunk in store.at(version).chunks()[SPLIT]]


def warm_page_cache(files: list[Path]) -> None:
    for path in files:
        with path.open("rb") as handle:
            while handle.read(16 * 2**20):
                pass


@dataclass
class Run:
    variant: str
    workers: int
    setup_s: float
    epoch_s: float  # wall-clock
    cpu_s: float  # CPU time of this process and its (reaped) loader workers
    samples: int

    @property
    def rate(self) -> float:
        return self.samples / self.epoch_s

    @property
    def cpu_rate(self) -> float:
        return self.samples / self.cpu_s


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its children that have exited."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def as_bytes(items: list[Any]) -> list[bytes]:
    """Collate for raw items: litdata yields variable-length memoryviews, which default collate
    cannot stack and worker processes cannot pickle; a batch becomes a list of ``bytes``."""
    return [bytes(item) for item in items]


def epoch(make: Callable[[], StreamingDataset], workers: int, batch_size: int, variant: str) -> Run:
    setup, dataset = timed(make)
    options: dict[str, Any] = {"collate_fn": as_bytes} if variant == "litdata raw" else {}
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers, **options)

    def consume() -> int:
        count = 0
        for batch in loader:
            count += len(batch["id"]) if isinstance(batch, dict) else len(batch)
        return count

    cpu_before = cpu_seconds()
    seconds, samples = timed(consume)  # workers are joined (reaped) when the epoch ends
    return Run(variant, workers, setup, seconds, cpu_seconds() - cpu_before, samples)


@dataclass
class Best:
    """The best wall-clock and the best CPU-time throughput of one variant over its rounds."""

    variant: str
    rate: float = 0.0
    cpu_rate: float = 0.0

    def add(self, run: Run) -> None:
        self.rate = max(self.rate, run.rate)
        self.cpu_rate = max(self.cpu_rate, run.cpu_rate)


def bench_version(
    store_root: Path,
    version: litstore.Version,
    plain: Path,
    workers_list: list[int],
    rounds: int,
    batch_size: int,
) -> dict[int, dict[str, Best]]:
    """Best throughputs of each variant for each worker count."""
    makers: dict[str, Callable[[], StreamingDataset]] = {
        "litstore": lambda: litstore.open(store_root).dataset(version=version.number, split=SPLIT),
        "litstore unchecked": lambda: litstore.open(store_root).dataset(
            version=version.number, split=SPLIT, verify_records=False
        ),
        "litdata+decode": lambda: StreamingDataset(str(plain), transform=codec.decode),
        "litdata raw": lambda: StreamingDataset(str(plain)),
    }
    names = list(makers)
    # Plain litdata reads every row its index lists: a format-4 version's dead rows too.
    rows = sum(chunk.num_items for chunk in litstore.open(store_root).at(version.number).chunks()[SPLIT])
    best: dict[int, dict[str, Best]] = {}
    for workers in workers_list:
        best[workers] = {name: Best(name) for name in names}
        for round_number in range(rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                run = epoch(makers[name], workers, batch_size, name)
                wanted = version.total if name.startswith("litstore") else rows
                if run.samples != wanted:
                    raise AssertionError(f"{name} yielded {run.samples} samples, expected {wanted}")
                print(
                    f"    workers={workers} round {round_number + 1}: {name:<15} {run.rate:>10,.0f} samples/s "
                    f"(epoch {run.epoch_s:.2f} s, cpu {run.cpu_s:.2f} s, setup {run.setup_s * 1e3:.0f} ms)",
                    flush=True,
                )
                best[workers][name].add(run)
    return best


def stream_rows(
    label: str, version: litstore.Version, size: int, best: dict[int, dict[str, Best]], target: float
) -> list[list[str]]:
    rows = []
    for workers, runs in best.items():
        ours, fair, raw = runs["litstore"], runs["litdata+decode"], runs["litdata raw"]
        for baseline, checked in ((fair, True), (raw, False)):
            ratio, cpu_ratio = ours.rate / baseline.rate, ours.cpu_rate / baseline.cpu_rate
            rows.append(
                [
                    label,
                    f"{version.total:,}",
                    mib(size),
                    str(workers),
                    "page cache warm",
                    f"{ours.rate:,.0f}",
                    baseline.variant,
                    f"{baseline.rate:,.0f}",
                    f"{ratio:.3f}x",
                    f"{cpu_ratio:.3f}x",
                    f">= {target:.2f}x" if checked else "(info)",
                    verdict(ratio >= target) if checked else "-",
                    verdict(cpu_ratio >= target) if checked else "-",
                ]
            )
        unchecked = runs["litstore unchecked"]
        ratio, cpu_ratio = ours.rate / unchecked.rate, ours.cpu_rate / unchecked.cpu_rate
        rows.append(
            [
                label,
                f"{version.total:,}",
                mib(size),
                str(workers),
                "page cache warm",
                f"{ours.rate:,.0f}",
                unchecked.variant,
                f"{unchecked.rate:,.0f}",
                f"{ratio:.3f}x",
                f"{cpu_ratio:.3f}x",
                "(info)",
                "-",
                "-",
            ]
        )
    return rows


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    line = "  ".join(f"{{:<{width}}}" for width in widths)
    print(line.format(*header))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line.format(*row))


def bench_streaming(directory: Path, args: argparse.Namespace) -> list[list[str]]:
    print(f"streaming: {args.n:,} records of {args.payload} B payload, chunk_bytes {mib(args.chunk_bytes)}", flush=True)
    store_root = directory / "stream-store"
    store = build_stream_store(store_root, args.n, args.payload, args.batches, args.chunk_bytes)
    full = store.version
    rng = np.random.default_rng(SEED + 1)
    keys = store.keys()
    doomed = [keys[i] for i in rng.choice(len(keys), size=int(len(keys) * DELETE_FRACTION), replace=False)]
    seconds, deleted = timed(lambda: store.delete(doomed))
    print(
        f"  delete {len(doomed):,} random keys -> version {deleted.number}: {seconds:.2f} s, "
        f"{len(deleted.dropped_chunks)} of {len(store.at(full).chunks()[SPLIT])} chunks rewritten",
        flush=True,
    )

    rows: list[list[str]] = []
    for label, version, target in (
        (f"v{full.number} full", full, STREAM_RATIO_MIN),
        (f"v{deleted.number} -5% deleted", deleted, DELETED_RATIO_MIN),
    ):
        files = chunk_files(store, version)
        size = sum(path.stat().st_size for path in files)
        plain = plain_dir(store, version, directory / f"plain-{version.number}")
        warm_page_cache(files)
        print(f"  {label}: {version.total:,} records in {len(files)} chunks, {mib(size)}", flush=True)
        best = bench_version(store_root, version, plain, args.workers, args.rounds, args.batch_size)
        rows.extend(stream_rows(label, version, size, best, target))
    rows.extend(bench_subset(store_root, full, plain_dir(store, full, directory / "plain-subset"), args))
    return rows


def bench_order(directory: Path, args: argparse.Namespace) -> list[list[str]]:
    """Samples/s of one shuffled epoch in the global order (``order="global"``) against litdata's shuffle."""
    print(f"order: {args.n:,} records of {args.payload} B payload, chunk_bytes {mib(args.chunk_bytes)}", flush=True)
    store_root = directory / "order-store"
    build_stream_store(store_root, args.n, args.payload, args.batches, args.chunk_bytes)
    version = litstore.open(store_root).version
    warm_page_cache(chunk_files(litstore.open(store_root), version))
    makers: dict[str, Callable[[], StreamingDataset]] = {
        "litdata shuffle": lambda: litstore.open(store_root).dataset(split=SPLIT, shuffle=True, seed=SEED),
        "global order": lambda: litstore.open(store_root).dataset(
            split=SPLIT, shuffle=True, seed=SEED, order="global", drop_last=False
        ),
    }
    names = list(makers)
    rows = []
    for workers in args.workers:
        best = {name: Best(name) for name in names}
        for round_number in range(args.rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                run = epoch(makers[name], workers, args.batch_size, name)
                if run.samples != version.total:
                    raise AssertionError(f"{name} yielded {run.samples} samples, expected {version.total}")
                print(
                    f"    workers={workers} round {round_number + 1}: {name:<15} {run.rate:>10,.0f} samples/s "
                    f"(epoch {run.epoch_s:.2f} s, cpu {run.cpu_s:.2f} s, setup {run.setup_s * 1e3:.0f} ms)",
                    flush=True,
                )
                best[name].add(run)
        ours, baseline = best["global order"], best["litdata shuffle"]
        ratio, cpu_ratio = ours.rate / baseline.rate, ours.cpu_rate / baseline.cpu_rate
        rows.append(
            [
                f"{version.total:,}",
                str(workers),
                f"{ours.rate:,.0f}",
                f"{baseline.rate:,.0f}",
                f"{ratio:.3f}x",
                f"{cpu_ratio:.3f}x",
                f">= {ORDER_RATIO_MIN:.2f}x",
                verdict(ratio >= ORDER_RATIO_MIN),
                verdict(cpu_ratio >= ORDER_RATIO_MIN),
            ]
        )
    return rows


def bench_subset(store_root: Path, version: litstore.Version, plain: Path, args: argparse.Namespace) -> list[list[str]]:
    """Samples/s of a 10% subset (``where=SUBSET_WHERE``) against the whole split, and of litdata holes.

    ``litstore subset`` copies the subset's records once into the view (timed apart as
    ``copy``) and streams the copy; ``litdata holes`` streams the same records in place
    with ``StreamingDataset.subset(indices)`` (each chunk read with gaps).
    """
    from litstore import streaming

    store = litstore.open(store_root)
    snapshot = store.at(version.number)
    chunks = snapshot.chunks()[SPLIT]
    order = streaming.stream_records(snapshot.manifest(), chunks).column("key").to_pylist()
    members = set(snapshot.select(SUBSET_WHERE))
    indices = [position for position, key in enumerate(order) if key in members]
    copy_s, _ = timed(lambda: store.dataset(version=version.number, split=SPLIT, where=SUBSET_WHERE))
    print(f"  subset {SUBSET_WHERE!r}: {len(indices):,} of {version.total:,} records; copy {copy_s:.2f} s", flush=True)
    makers: dict[str, Callable[[], StreamingDataset]] = {
        "litstore whole": lambda: litstore.open(store_root).dataset(version=version.number, split=SPLIT),
        "litstore subset": lambda: litstore.open(store_root).dataset(
            version=version.number, split=SPLIT, where=SUBSET_WHERE
        ),
        "litdata holes": lambda: StreamingDataset(str(plain), transform=codec.decode).subset(indices),
    }
    rows = []
    for workers in args.workers:
        best = {name: Best(name) for name in makers}
        for _ in range(args.rounds):
            for name, make in makers.items():
                run = epoch(make, workers, args.batch_size, name)
                best[name].add(run)
                print(f"    workers={workers}: {name:<16} {run.rate:>10,.0f} samples/s", flush=True)
        whole = best["litstore whole"]
        for name in ("litstore subset", "litdata holes"):
            ratio = best[name].rate / whole.rate
            checked = name == "litstore subset"
            rows.append(
                [
                    f"v{version.number} subset 10%",
                    f"{len(indices):,}",
                    f"copy {copy_s:.2f} s",
                    str(workers),
                    "page cache warm",
                    f"{best[name].rate:,.0f}",
                    "litstore whole",
                    f"{whole.rate:,.0f}",
                    f"{ratio:.3f}x",
                    f"{best[name].cpu_rate / whole.cpu_rate:.3f}x",
                    f">= {SUBSET_RATIO_MIN:.2f}x" if checked else "(info)",
                    verdict(ratio >= SUBSET_RATIO_MIN) if checked else "-",
                    "-",
                ]
            )
    return rows


# -- diff -----------------------------------------------------------------------------------


def bench_diff(directory: Path, n: int) -> list[list[str]]:
    print(f"diff: {n:,} keys, {CHANGE_FRACTION:.0%} changed + {CHANGE_FRACTION:.0%} deleted", flush=True)
    root = directory / "diff-store"
    store = litstore.Store.create(root, key="id")
    edges = np.linspace(0, n, 5).astype(int).tolist()
    for start, end in itertools.pairwise(edges):
        records = [{"id": f"k{i:08d}", "v": i} for i in range(start, end)]
        seconds, version = timed(lambda records=records: store.append(records))
        print(f"  append {len(records):,} -> version {version.number}: {seconds:.2f} s", flush=True)
    a = store.version
    rng = np.random.default_rng(SEED + 2)
    picked = rng.choice(n, size=2 * int(n * CHANGE_FRACTION), replace=False)
    changed, removed = np.split(picked, 2)
    seconds, _ = timed(lambda: store.upsert([{"id": f"k{i:08d}", "v": -int(i) - 1} for i in changed.tolist()]))
    print(f"  upsert {len(changed):,} changed -> version {store.version.number}: {seconds:.2f} s", flush=True)
    seconds, b = timed(lambda: store.delete([f"k{i:08d}" for i in removed.tolist()]))
    print(f"  delete {len(removed):,} -> version {b.number}: {seconds:.2f} s", flush=True)
    expected = {"added": 0, "removed": len(removed), "changed": len(changed)}
    differing = len(removed) + len(changed)

    def check(diff: Diff) -> Diff:
        if diff.counts != expected:
            raise AssertionError(f"diff counts {diff.counts}, expected {expected}")
        return diff

    gc.collect()
    cold_store = litstore.open(root)
    cold_s, diff = timed(lambda: check(cold_store.diff(a.number, b.number)))
    print("  " + diff.summary().replace("\n", "\n  "), flush=True)
    warm_s, _ = timed(lambda: check(cold_store.diff(a.number, b.number)))
    old_view, new_view = cold_store.at(a.number), cold_store.at(b.number)
    compose_a, old_manifest = timed(old_view.manifest)
    compose_b, new_manifest = timed(new_view.manifest)
    memory_s, _ = timed(lambda: check(Diff.between(a.number, b.number, old_manifest, new_manifest)))
    print(
        f"  compose manifest v{a.number}: {compose_a:.3f} s, v{b.number}: {compose_b:.3f} s; "
        f"Diff.between on both in memory: {memory_s:.3f} s",
        flush=True,
    )
    keys = f"{n:,} vs {b.total:,}"
    what = f"{differing:,} differ ({differing / n:.0%})"
    rows = []
    for state, seconds, target in (
        ("manifests cold (fresh open)", cold_s, True),
        ("warm (same store, again)", warm_s, True),
        ("manifests in memory", memory_s, False),
    ):
        result = verdict(seconds < DIFF_MAX_S) if target else "-"
        rows.append(
            [
                f"v{a.number}->v{b.number}",
                keys,
                what,
                state,
                f"{seconds:.3f} s",
                f"< {DIFF_MAX_S} s" if target else "(info)",
                result,
            ]
        )
    return rows


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="records for the streaming part")
    parser.add_argument("--payload", type=int, default=1024, help="payload bytes per streamed record")
    parser.add_argument("--batches", type=int, default=4, help="append batches for the streaming store")
    parser.add_argument("--chunk-bytes", type=int, default=default_chunk_bytes())
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=lambda text: [int(part) for part in text.split(",")], default=[0, 2])
    parser.add_argument("--rounds", type=int, default=3, help="timed epochs per variant (best kept)")
    parser.add_argument("--diff-n", type=int, default=1_000_000, help="keys for the diff part")
    parser.add_argument("--skip-diff", action="store_true")
    parser.add_argument("--skip-stream", action="store_true")
    parser.add_argument("--keep", help="work in this (new or empty) directory and keep it")
    parser.add_argument(
        "--order", action="store_true", help="only time the global order against litdata's shuffle (one epoch each)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    print(f"python {sys.version.split()[0]}, litstore {litstore.__version__}, {os.cpu_count()} CPUs", flush=True)
    with workdir(args.keep, "litstore-bench-stream-") as directory:
        os.environ["LITSTORE_VIEWS"] = str(directory / "views")
        if args.order:
            order_rows = bench_order(directory, args)
            print()
            header = ["records", "workers", "global/s", "shuffle/s", "ratio", "cpu ratio", "target", "wall", "cpu"]
            print_table(header, order_rows)
            return 1 if any(row[-2] == "FAIL" for row in order_rows) else 0
        stream_rows_ = [] if args.skip_stream else bench_streaming(directory, args)
        diff_rows = [] if args.skip_diff else bench_diff(directory, args.diff_n)
        if args.keep is None:
            shutil.rmtree(directory / "views", ignore_errors=True)
    print()
    failed = False
    if stream_rows_:
        header = ["version", "records", "size", "workers", "cache", "litstore/s", "baseline", "baseline/s", "ratio"]
        print_table([*header, "cpu ratio", "target", "wall", "cpu"], stream_rows_)
        failed |= any(row[-2] == "FAIL" for row in stream_rows_)
        print()
    if diff_rows:
        print_table(["diff", "keys", "differing", "state", "time", "target", "result"], diff_rows)
        failed |= any(row[-1] == "FAIL" for row in diff_rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
