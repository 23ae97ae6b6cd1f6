"""Costs that should not grow with the store: issues 18's and 19's benchmark tables, each figure in a fresh process.

Run it with::

    python benchmarks/bench_scale.py [--n 1000000 4000000 16000000] [--writes 10 1000]
        [--upsert-every 2] [--big-records [N]] [--only FIGURES | --skip FIGURES]
        [--formats 5 6] [--no-lance] [--workers 0 2] [--rounds 2] [--build-n 1000000]
        [--dicts-n 200000] [--compact] [--json FILE] [--keep DIR] [--timeout SECONDS]

For each ``N`` it builds, untimed (its time and peak memory are shown as ``build``),
stores of ``N`` small records (``{"id": "rec-%09d", "label": int, "payload": 32 random
bytes}``, about 40 bytes each) by appending Arrow tables of 500,000 rows one after
another, so building takes bounded memory at any ``N``: a litstore store of each of
``--formats`` (2: the manifest composed on first use; 3: key runs on disk,
:mod:`litstore.format.keyrun`, changes copy-on-write; 4: changes mark rows dead in
deletion vectors; 5: each key run carries a key filter,
:mod:`litstore.format.keyfilter`; 6, the default: commit records list chunks and deletion
vectors by delta, :mod:`litstore.read.listings`), and, if ``pylance`` is importable, a Lance dataset
written by ``write_dataset`` with a BTREE scalar index on ``id``. ``--big-records`` adds
a size of 1M (or the given number of) records of 1 KiB, built in tables of ~128 MiB.

Every figure runs in a fresh Python process (``_scale_probes.py``): the libraries it needs are imported before
the clock starts (pandas included, which pyarrow imports on its first conversion; their
time and memory are shown apart), and the process reports its time and its peak resident
memory (``VmHWM``, imports included). Each figure that leaves the store as it was runs
``--rounds`` times and keeps the best, so the page cache is warm. The figures
(``--only`` / ``--skip`` take their names, comma-separated):

- ``lookup``: open the store and read one random key; peak memory of that process
  against the same process on an empty store.
- ``get_many``: open, then read 10,000 random keys (Lance: an ``IN`` filter).
- ``dataset``: ``store.dataset()`` to the first batch of a ``StreamingDataLoader`` with
  each of ``--workers`` workers (Lance, for reference: ``to_batches()`` to its first batch),
  then on to 10,000 records; the peak memory of the main process and of each worker (read
  from ``/proc/<pid>/status`` while the workers live), against the same loader over a
  10,000-record store.
- ``verify``: ``store.verify()``, time and peak memory, against the floor: reading every
  chunk file and xxh3-128-hashing each of its items, in a process of its own.
- ``gc``: ``store.gc()`` with nothing to remove (Lance: ``cleanup_old_versions()``).
- ``append``: open, then append 100 new records (Lance: ``write_dataset`` append). Each
  round is a write and counts towards ``--writes``.
- ``writes``: small writes (100-record appends, and every ``--upsert-every``-th an upsert
  of 100 consecutive keys; Lance: ``write_dataset`` append and ``merge_insert``) until
  the store has had each of ``--writes`` (made in one process, untimed setup), then
  ``open + first lookup`` again. An upsert copies the chunk holding its keys (up to
  64 MiB) and writes a key run and manifest delta for all its records: a count whose
  upserts would leave less than 2 GiB of disk free is skipped (``failed``), its need
  projected from what the previous upserts took.
- ``upsert`` (issue 19; on stores built for it, Lance's with stable row ids): open,
  then upsert 100 random existing keys with new content (Lance: ``merge_insert("id")``,
  update all matched, insert the rest, on the BTREE-indexed ``id``); each of ``--rounds``
  takes other keys, the fastest is kept. Also its peak memory against an empty store's
  process that only opens it, and the bytes and count of the files new or rewritten by
  it (fewest and most of the rounds: the first change after a bulk build writes a full
  manifest checkpoint), against the upserted records' own bytes (key + 8 + payload each).
- ``delete``: the same for deleting 100 random keys (Lance: ``delete("id IN (...)")``).
- ``diff``: ``store.diff(a, b)`` of the versions before and after the last upsert, then
  the last delete (Lance: ``delta(begin_version=a, end_version=b)`` with its inserted,
  updated and deleted rows read).
- ``holes``: one epoch of ``store.dataset()`` through a torch ``DataLoader`` (0 workers)
  of a store of ``N`` records of which one in 10, at random, were then deleted in one
  call, against the same live records written with no holes, in records/s (Lance:
  ``to_batches()``, for reference).
- ``compact`` (slow: only with ``--compact`` or ``--only``): 1,000 appends of 100 to a
  store of ``N``, then ``compact()`` (Lance: ``optimize.compact_files()``); then open +
  first lookup, one epoch (0 workers) and an append of 100, each against the same on a
  store of the same records built in appends of 500,000 rows.
- ``build`` (once, ``--build-n`` records): ``store.append(table)`` of one Arrow table and
  ``store.ingest(fn, inputs, num_workers=2)`` (``fn`` makes 1,000 dicts per input),
  against ``lance.write_dataset(table)``, in records/s.
- ``dicts`` (once, ``--dicts-n`` records of 1 KiB): 10 calls of
  ``store.ingest(fn, inputs, num_workers=2)`` (``fn`` makes 100 dicts per input) against
  10 ``lance.write_dataset(pa.Table.from_pylist(dicts))`` of the same dicts made in the
  process, in records/s.

Printed (stdout, markdown): a table per size with each figure for each litstore format
and Lance, each format's ratio to what the figure is compared with (Lance unless the
``against`` column says otherwise) and the issue's target, and what each change wrote by
kind of file; then the growth exponent k (cost ~ N^k, least squares over the sizes run)
of every figure; then, per format, the figures with a target as the README shows them
(a column per size). Progress goes to stderr.
``--json FILE`` writes the rows, the k table and every probe's raw output (rewritten after
each size, so a long run leaves what it measured). A probe that fails (a process killed
for memory, say) shows as ``failed``; a store whose build failed is left out of its size.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import compile_litstore, dir_bytes, print_markdown, workdir
from _scale_probes import (
    BIG_PAYLOAD,
    CHANGED,
    DICTS_APPENDS,
    HOLES,
    INGEST_WORKERS,
    LANCE,
    LOOKUPS,
    MANY_APPENDS,
    REFERENCE_RECORDS,
    SMALL_PAYLOAD,
    SMALL_WRITE,
    is_upsert,
    lookup_key,
    rows_per_table,
)

PROBES = Path(__file__).with_name("_scale_probes.py")

DISK_MARGIN = 2 * 2**30  # free disk the writes leave untouched

#: Issue 18's targets: the text shown, and what is judged ("<=" or ">=" a ratio, "at most" a value).
TARGETS: dict[str, tuple[str, tuple[str, float] | None]] = {
    "lookup": ("≤ 1.0x Lance at every N; k ≤ 0.1", ("<=", 1.0)),
    "lookup memory": ("≤ 1.3x an empty store's", ("<=", 1.3)),
    "after writes": ("≤ 1.5x before them", ("<=", 1.5)),
    "append": ("≤ 1.0x Lance; k ≤ 0.1", ("<=", 1.0)),
    "dataset": ("≤ 0.5 s at 16M; k ≤ 0.2", ("at most", 0.5)),
    "dataset workers": ("k ≤ 0.2", None),
    "worker memory": ("≤ 1.2x", ("<=", 1.2)),
    "verify": ("≥ 0.8x the floor's speed (≤ 1.25x its time)", ("<=", 1.25)),
    "verify memory": ("≤ 1 GiB at 16M", ("at most", 1024.0)),
    "gc": ("≤ 1.0x Lance", ("<=", 1.0)),
    "get_many": ("≤ 1.0x Lance", ("<=", 1.0)),
    "build": ("≥ 0.5x Lance", (">=", 0.5)),
    "dicts": ("≥ 1.0x Lance", (">=", 1.0)),
    # issue 19's
    "upsert": ("≤ 1.0x Lance `merge_insert` at every N; k ≤ 0.2", ("<=", 1.0)),
    "delete": ("≤ 1.0x Lance `delete`; k ≤ 0.2", ("<=", 1.0)),
    "upsert bytes": ("≤ 4x the upserted records' bytes + O(touched chunks) small files", ("<=", 4.0)),
    "diff": ("≤ 1.0x Lance `delta()`", ("<=", 1.0)),
    "holes": ("≥ 0.95x the same records with no holes", (">=", 0.95)),
    "change memory": ("≤ 1.3x an empty store's process", ("<=", 1.3)),
    "compacted": ("≤ 1.1x a store written in one append", ("<=", 1.1)),
}

PER_SIZE = ("lookup", "get_many", "dataset", "verify", "gc", "append", "writes", "upsert", "delete", "diff", "holes")
SLOW = ("compact",)  # run only when asked for (--compact, or --only)
FIGURES = (*PER_SIZE, "build", "dicts", *SLOW)
MAIN_STORES = PER_SIZE[:7]  # the figures measured on the stores built first (the others build their own)

# -- the driver --------------------------------------------------------------------------------

#: What a probe printed (its JSON line), or ``{"error": ...}`` if its process failed.
Result = dict[str, Any]


@dataclass(frozen=True)
class Size:
    """A store size: ``n`` records with ``payload`` random bytes each."""

    n: int
    payload: int

    @property
    def label(self) -> str:
        return f"{self.n:,}" + (" x 1 KiB" if self.payload == BIG_PAYLOAD else "")


@dataclass
class Row:
    """One figure in one table: a value per kind, and each litstore kind's ratio to its reference."""

    section: str  # the table it is printed in: a size's label, "references" or "building"
    n: int
    payload: int
    name: str
    unit: str  # "s", "MiB" or "records/s"
    values: dict[str, float | None]
    failed: list[str] = field(default_factory=list)
    against: str = ""
    references: dict[str, float | None] = field(default_factory=dict)
    target: str = ""
    bound: tuple[str, float] | None = None  # ("<=" or ">=", a ratio) or ("at most", a value)
    extra: dict[str, Any] = field(default_factory=dict)

    def ratio(self, kind: str) -> float | None:
        figure, reference = self.values.get(kind), self.references.get(kind)
        return None if figure is None or not reference else figure / reference

    def met(self, kind: str) -> bool | None:
        if self.bound is None:
            return None
        sign, limit = self.bound
        figure = self.values.get(kind) if sign == "at most" else self.ratio(kind)
        if figure is None:
            return None
        return figure >= limit if sign == ">=" else figure <= limit


def goal(name: str) -> dict[str, Any]:
    """The ``target`` and ``bound`` of a row, from :data:`TARGETS`."""
    target, bound = TARGETS[name]
    return {"target": target, "bound": bound}


def value(result: Result | None, metric: str = "seconds") -> float | None:
    return None if result is None or "error" in result else float(result[metric])


def values(results: dict[str, Result], metric: str = "seconds") -> dict[str, float | None]:
    return {kind: value(result, metric) for kind, result in results.items()}


def failures(results: dict[str, Result]) -> list[str]:
    return [kind for kind, result in results.items() if "error" in result]


def largest_worker(results: dict[str, Result | None]) -> dict[str, float | None]:
    return {
        kind: max(result["workers_mib"]) if result and result.get("workers_mib") else None
        for kind, result in results.items()
    }


def rates(results: dict[str, Result], records: int, metric: str = "seconds") -> dict[str, float | None]:
    return {kind: records / took if (took := value(result, metric)) else None for kind, result in results.items()}


def run_process(command: list[str], timeout: float | None) -> Result:
    """Run a probe in a process group of its own: on a timeout or Ctrl-C, it ends with its loader and ingest workers."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return {"error": f"ran past --timeout {timeout} s"}
        except KeyboardInterrupt:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    if process.returncode != 0:
        last = (stderr.strip().splitlines() or [""])[-1]
        return {"error": f"exit status {process.returncode}: {last[-300:]}"}
    return dict(json.loads(stdout.strip().splitlines()[-1]))


class Bench:
    """Runs every probe in a fresh process and turns what they print into rows."""

    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args, self.base = args, base
        chosen = args.only or [name for name in FIGURES if name not in SLOW or name in args.slow]
        self.figures = [name for name in chosen if name not in args.skip]
        self.kinds = [f"litstore-{version}" for version in args.formats] + ([LANCE] if args.lance else [])
        self.ours = [kind for kind in self.kinds if kind != LANCE]
        self.rows: list[Row] = []
        self.probes: list[dict[str, Any]] = []
        self.references: dict[int, dict[str, Result]] = {}
        self.started = time.perf_counter()

    # -- running probes

    def call(self, op: str, kind: str, root: Path, **params: Any) -> Result:
        spec = {"op": op, "kind": kind, "root": str(root), **params}
        if kind != LANCE:
            spec["format"] = int(kind.rsplit("-", 1)[1])
        command = [sys.executable, str(PROBES), json.dumps(spec)]
        begun = time.perf_counter()
        result = run_process(command, self.args.timeout)
        result["wall_seconds"] = time.perf_counter() - begun
        self.probes.append({"spec": spec, "result": result})
        shown = result.get("error") or f"{cell(result['seconds'], 's')}, peak {result['peak_mib']:,.0f} MiB"
        print(f"[{time.perf_counter() - self.started:6.0f} s] {op} {kind} {root.parent.name}: {shown}", file=sys.stderr)
        return result

    def best(self, op: str, kind: str, root: Path, **params: Any) -> Result:
        """The fastest of ``--rounds`` runs: the first reads what the others find in the page cache."""
        runs = [self.call(op, kind, root, round=number, **params) for number in range(self.args.rounds)]
        good = [run for run in runs if "error" not in run]
        return min(good, key=lambda run: float(run["seconds"])) if good else runs[-1]

    def each(self, op: str, roots: dict[str, Path], size: Size, **params: Any) -> dict[str, Result]:
        return {
            kind: self.best(op, kind, root, n=size.n, payload=size.payload, **params) for kind, root in roots.items()
        }

    def paired(
        self, op: str, first: tuple[dict[str, Path], Size], second: tuple[dict[str, Path], Size], **params: Any
    ) -> tuple[dict[str, Result], dict[str, Result]]:
        """``each`` on two sets of stores, rounds interleaved: a shared machine's slow and fast phases fall on both."""
        runs: tuple[dict[str, list[Result]], dict[str, list[Result]]] = ({}, {})
        for number in range(self.args.rounds):
            for kind in self.kinds:
                for got, (roots, size) in zip(runs, (first, second), strict=True):
                    if kind in roots:
                        result = self.call(
                            op, kind, roots[kind], n=size.n, payload=size.payload, round=number, **params
                        )
                        got.setdefault(kind, []).append(result)
        return fastest_of_each(runs[0]), fastest_of_each(runs[1])

    def build(
        self, folder: Path, size: Size, kinds: Sequence[str], **params: Any
    ) -> tuple[dict[str, Path], dict[str, Result]]:
        """A store of ``size`` per kind, and the builds' results; a kind whose build failed has no root."""
        built = {
            kind: self.call("build", kind, folder / kind, n=size.n, payload=size.payload, **params) for kind in kinds
        }
        return {kind: folder / kind for kind, result in built.items() if "error" not in result}, built

    # -- rows

    def add(self, size: Size, name: str, unit: str, figures: dict[str, float | None], **rest: Any) -> None:
        section = rest.pop("section", size.label)
        self.rows.append(Row(section, size.n, size.payload, name, unit, figures, **rest))

    def figure(
        self, size: Size, name: str, unit: str, results: dict[str, Result], metric: str = "seconds", **rest: Any
    ) -> None:
        self.add(size, name, unit, values(results, metric), failed=failures(results), **rest)

    def lance_of(self, results: dict[str, Result], metric: str = "seconds") -> dict[str, float | None]:
        """Lance's figure as the reference of every litstore kind."""
        return {kind: value(results.get(LANCE), metric) for kind in self.ours}

    # -- what is measured

    def reference(self, payload: int) -> dict[str, Result]:
        """Empty stores' lookup processes and loaders over 10,000 records, measured once per record size."""
        if payload in self.references:
            return self.references[payload]
        got: dict[str, Result] = {}
        section = {"section": "references" + (" x 1 KiB" if payload == BIG_PAYLOAD else "")}
        if {"lookup", "writes", "upsert", "delete"} & set(self.figures):
            size = Size(0, payload)
            roots, _ = self.build(self.base / f"empty-{payload}", size, self.kinds)
        if {"lookup", "writes"} & set(self.figures):
            empties = self.each("lookup", roots, size, key=lookup_key(0))
            got.update({f"empty {kind}": result for kind, result in empties.items()})
            self.figure(size, "empty store: open + lookup of a missing key", "s", empties, **section)
            self.figure(size, "↳ imports before the clock", "s", empties, "imports_seconds", **section)
            self.figure(size, "↳ memory after the imports", "MiB", empties, "imports_mib", **section)
            self.figure(size, "↳ peak memory", "MiB", empties, "peak_mib", **section)
        if {"upsert", "delete"} & set(self.figures):
            opened = self.each("open", roots, size)
            got.update({f"open {kind}": result for kind, result in opened.items()})
            self.figure(size, "empty store: open (nothing else)", "s", opened, **section)
            self.figure(size, "↳ peak memory", "MiB", opened, "peak_mib", **section)
        if "dataset" in self.figures:
            size = Size(REFERENCE_RECORDS, payload)
            roots, _ = self.build(self.base / f"ref-{payload}", size, self.ours)
            for workers in self.args.workers:
                streams = self.each("dataset", roots, size, workers=workers, batch_size=self.args.batch_size)
                got.update({f"stream {kind} {workers}": result for kind, result in streams.items()})
                name = f"{REFERENCE_RECORDS:,}-record store: dataset() → first batch, {workers} workers"
                self.figure(size, name, "s", streams, **section)
                self.figure(
                    size, f"↳ peak memory, main process ({workers} workers)", "MiB", streams, "peak_mib", **section
                )
                if workers:
                    self.add(
                        size,
                        f"↳ peak memory, largest of {workers} workers",
                        "MiB",
                        largest_worker(dict(streams)),
                        **section,
                    )
        self.references[payload] = got
        return got

    def measure_size(self, size: Size) -> None:
        begun = time.perf_counter()
        reference = self.reference(size.payload)
        if set(MAIN_STORES) & set(self.figures):
            folder = self.base / f"n{size.n}-{size.payload}"
            roots, built = self.build(folder, size, self.kinds)
            name = f"build (setup: tables of {rows_per_table(size.payload):,} rows appended)"
            self.figure(size, name, "s", built, against="lance", references=self.lance_of(built))
            self.figure(
                size,
                "↳ peak memory of the build",
                "MiB",
                built,
                "peak_mib",
                against="lance",
                references=self.lance_of(built, "peak_mib"),
            )
            before = self.measure_reads(size, roots, reference)
            self.measure_writes(size, roots, reference, before)
            self.add(size, "size on disk", "MiB", {kind: dir_bytes(root) / 2**20 for kind, root in roots.items()})
            self.discard(folder)
        if {"upsert", "delete", "diff"} & set(self.figures):
            self.measure_changes(size, reference)
        if "holes" in self.figures:
            self.measure_holes(size)
        if "compact" in self.figures:
            self.measure_compact(size)
        took = time.perf_counter() - begun
        print(f"[{time.perf_counter() - self.started:6.0f} s] size {size.label} took {took:.0f} s", file=sys.stderr)

    def measure_reads(self, size: Size, roots: dict[str, Path], reference: dict[str, Result]) -> dict[str, Result]:
        """The figures that leave the stores as they were; the first lookups' results."""
        before: dict[str, Result] = {}
        if "lookup" in self.figures:
            before = self.each("lookup", roots, size, key=lookup_key(size.n))
            self.figure(
                size,
                "open + first lookup",
                "s",
                before,
                against="lance",
                references=self.lance_of(before),
                **goal("lookup"),
            )
            self.figure(
                size,
                "↳ peak memory of that process",
                "MiB",
                before,
                "peak_mib",
                against="an empty store's process",
                references=self.empty_peaks(reference),
                **goal("lookup memory"),
            )
        if "get_many" in self.figures:
            got = self.each("get_many", roots, size)
            self.figure(
                size,
                f"get_many of {LOOKUPS:,} keys",
                "s",
                got,
                against="lance `IN` filter",
                references=self.lance_of(got),
                **goal("get_many"),
            )
        if "dataset" in self.figures:
            self.measure_dataset(size, roots, reference)
        ours = {kind: root for kind, root in roots.items() if kind != LANCE}
        if "verify" in self.figures:
            checked, floor = self.each("verify", ours, size), self.each("floor", ours, size)
            self.figure(
                size, "verify()", "s", checked, against="the floor's time", references=values(floor), **goal("verify")
            )
            self.figure(
                size,
                "↳ peak memory of verify()",
                "MiB",
                checked,
                "peak_mib",
                against="the floor's process",
                references=values(floor, "peak_mib"),
                **goal("verify memory"),
            )
            self.figure(size, "↳ floor: read + xxh3-128 of every chunk item", "s", floor)
        if "gc" in self.figures:
            got = self.each("gc", roots, size)
            self.figure(
                size,
                "gc() with nothing to remove",
                "s",
                got,
                against="lance cleanup_old_versions()",
                references=self.lance_of(got),
                **goal("gc"),
            )
        return before

    def measure_dataset(self, size: Size, roots: dict[str, Path], reference: dict[str, Result]) -> None:
        batch_size = self.args.batch_size
        scan = {LANCE: self.best("dataset", LANCE, roots[LANCE], batch_size=batch_size)} if LANCE in roots else {}
        ours = {kind: root for kind, root in roots.items() if kind != LANCE}
        for workers in self.args.workers:
            got = self.each("dataset", ours, size, workers=workers, batch_size=batch_size)
            streams: dict[str, Result | None] = {kind: reference.get(f"stream {kind} {workers}") for kind in self.ours}
            self.figure(
                size,
                f"dataset() → first batch, {workers} workers",
                "s",
                {**got, **scan},
                against="lance to_batches() first batch",
                references=self.lance_of(scan),
                **goal("dataset" if workers == 0 else "dataset workers"),
            )
            self.figure(
                size,
                f"↳ peak memory, main process ({workers} workers)",
                "MiB",
                got,
                "peak_mib",
                against=f"the same over {REFERENCE_RECORDS:,} records",
                references={kind: value(result, "peak_mib") for kind, result in streams.items()},
            )
            if workers:
                each_worker = {kind: result.get("workers_mib") for kind, result in got.items()}
                self.add(
                    size,
                    f"↳ peak memory, largest of {workers} workers",
                    "MiB",
                    largest_worker(dict(got)),
                    failed=failures(got),
                    against=f"a worker streaming {REFERENCE_RECORDS:,} records",
                    references=largest_worker(streams),
                    extra={"workers_mib": each_worker},
                    **goal("worker memory"),
                )

    def measure_writes(
        self, size: Size, roots: dict[str, Path], reference: dict[str, Result], before: dict[str, Result]
    ) -> None:
        """Appends of 100 records, then the small writes and the lookups after them."""
        done = 0  # writes each store has had since its build
        if "append" in self.figures:
            got = self.each("append", roots, size)
            done = self.args.rounds
            self.figure(
                size,
                f"append {SMALL_WRITE} records",
                "s",
                got,
                against="lance",
                references=self.lance_of(got),
                **goal("append"),
            )
        if "writes" not in self.figures:
            return
        every = self.args.upsert_every
        # An upsert copies the chunk holding its keys, and writes a key run and a manifest delta for all of
        # that chunk's records: about 3x the chunk, until the first writes measure it.
        per_upsert = {kind: 3.0 * largest_chunk(root) for kind, root in roots.items()}
        for count in sorted(set(self.args.writes)):
            upserts = sum(is_upsert(write, every) for write in range(done, count))
            needed, free = upserts * sum(per_upsert.values()), shutil.disk_usage(self.base).free
            if needed > free - DISK_MARGIN:
                note = f"skipped: its upserts need ~{needed / 2**30:,.1f} GiB of disk, {free / 2**30:,.1f} GiB free"
                print(f"writes up to {count:,} {note} (see --upsert-every)", file=sys.stderr)
                self.add(size, f"open + first lookup after {count:,} writes", "s", {}, failed=list(roots), target=note)
                break
            grown = {kind: dir_bytes(root) for kind, root in roots.items()}
            made = {
                kind: self.call(
                    "writes", kind, root, n=size.n, payload=size.payload, first=done, last=count, upsert_every=every
                )
                for kind, root in roots.items()
            }
            if upserts:
                per_upsert = {kind: (dir_bytes(root) - grown[kind]) / upserts for kind, root in roots.items()}
            done = max(done, count)
            after = self.each("lookup", roots, size, key=lookup_key(size.n))
            self.figure(
                size,
                f"open + first lookup after {done:,} writes",
                "s",
                after,
                against="the same before the writes",
                references=values(before),
                **goal("after writes"),
            )
            self.figure(
                size,
                f"↳ peak memory after {done:,} writes",
                "MiB",
                after,
                "peak_mib",
                against="an empty store's process",
                references=self.empty_peaks(reference),
                **goal("lookup memory"),
            )
            self.figure(size, f"↳ the writes up to {done:,} (setup, one process)", "s", made)

    def measure_changes(self, size: Size, reference: dict[str, Result]) -> None:
        """Upserts and deletes of random keys, what they write, and the diffs of the versions they make.

        The stores are built for these figures (Lance's with stable row ids, without which
        ``delta()`` reports no updated or deleted rows). Each of ``--rounds`` upserts (then
        deletes) takes other keys; the fastest is kept. The diffs are of the last round's
        versions, each run ``--rounds`` times.
        """
        folder = self.base / f"n{size.n}-{size.payload}-changes"
        roots, built = self.build(folder, size, self.kinds, stable_row_ids=True)
        self.figure(size, "build of the stores changed (setup; Lance with stable row ids)", "s", built)
        empty = {kind: value(reference.get(f"open {kind}"), "peak_mib") for kind in self.kinds}
        changes: dict[str, dict[str, Result]] = {}
        for op in ("upsert", "delete"):
            if op not in self.figures and "diff" not in self.figures:
                continue
            runs = {
                kind: [self.write(op, kind, root, size, number) for number in range(self.args.rounds)]
                for kind, root in roots.items()
            }
            got = fastest_of_each(runs)
            changes[op] = {kind: each[-1] for kind, each in runs.items()}
            what = f"{op} {CHANGED} random {'existing keys (new content)' if op == 'upsert' else 'keys'}"
            lance_api = "merge_insert" if op == "upsert" else "delete"
            self.figure(size, what, "s", got, against=f"lance {lance_api}", references=self.lance_of(got), **goal(op))
            self.figure(
                size,
                f"↳ peak memory of the {op} process",
                "MiB",
                got,
                "peak_mib",
                against="an empty store's process (open + nothing)",
                references={kind: empty.get(kind) for kind in self.ours},
                **goal("change memory"),
            )
            wrote = {kind: [run["written"] for run in each if "written" in run] for kind, each in runs.items()}
            records = {kind: value(got.get(kind), "records_bytes") for kind in self.ours} if op == "upsert" else {}
            for name, pick in (("fewest", min), ("most", max)):
                picked = {kind: pick(each, key=lambda w: int(w["bytes"])) for kind, each in wrote.items() if each}
                self.add(
                    size,
                    f"{'↳ ' if name == 'most' else ''}bytes written by the {op}, {name} of the rounds",
                    "bytes",
                    {kind: float(picked[kind]["bytes"]) if kind in picked else None for kind in wrote},
                    failed=failures(got),
                    against="the upserted records' bytes" if records else "",
                    references=records,
                    extra={"written": picked, "op": op},
                    # the target is the next row's: what is left besides the touched chunks' parts
                )
            if records:
                rest = {
                    kind: [int(w["bytes"]) - int(w.get("per_chunk", 0)) for w in each] for kind, each in wrote.items()
                }
                self.add(
                    size,
                    f"↳ bytes written by the {op} besides one deletion vector and reference per touched chunk, "
                    "fewest of the rounds",
                    "bytes",
                    {kind: float(min(each)) if each else None for kind, each in rest.items()},
                    failed=failures(got),
                    against="the upserted records' bytes",
                    references=records,
                    **goal("upsert bytes"),
                )
                touched = {
                    kind: float(max(w.get("touched", 0) for w in each)) if each else None
                    for kind, each in wrote.items()
                }
                self.add(size, f"↳ chunks the {op} touched (deletion references it wrote)", "chunks", touched)
            files = {kind: float(min(w["files"] for w in each)) if each else None for kind, each in wrote.items()}
            self.add(size, f"↳ files new or rewritten by the {op}, fewest of the rounds", "files", files)
        if "diff" in self.figures:
            expected = {
                "upsert": {"added": 0, "changed": CHANGED, "removed": 0},
                "delete": {"added": 0, "changed": 0, "removed": CHANGED},
            }
            for op, made in changes.items():
                got = {
                    kind: self.best(
                        "diff", kind, roots[kind], old=result["old"], new=result["new"], expect=expected[op]
                    )
                    for kind, result in made.items()
                    if "error" not in result
                }
                self.figure(
                    size,
                    f"diff of the versions before/after the {op}",
                    "s",
                    got,
                    against="lance delta() (its rows read)",
                    references=self.lance_of(got),
                    **goal("diff"),
                    extra={
                        "counts": {
                            kind: {k: r.get(k) for k in ("added", "changed", "removed")} for kind, r in got.items()
                        }
                    },
                )
        self.discard(folder)

    def write(self, op: str, kind: str, root: Path, size: Size, number: int) -> Result:
        """Round ``number`` of an upsert or delete, with what it wrote: the files new or rewritten after it."""
        before = snapshot(root)
        result = self.call(op, kind, root, n=size.n, payload=size.payload, round=number)
        if "error" not in result:
            result["written"] = written(before, snapshot(root), root if kind != LANCE else None)
        return result

    def measure_holes(self, size: Size) -> None:
        """One epoch of a store with one row in ``HOLES`` deleted at random, against its live records with no holes."""
        folder = self.base / f"n{size.n}-{size.payload}-holes"
        records = size.n - size.n // HOLES
        holes, made = self.build(folder / "holes", size, self.kinds, holes=True)
        live, _ = self.build(folder / "live", size, self.kinds, live=True)
        params = {"records": records, "batch_size": self.args.batch_size}
        with_holes, without = self.paired("epoch", (holes, size), (live, size), **params)
        self.add(
            size,
            f"stream one epoch, 1 row in {HOLES} deleted at random (0 workers)",
            "records/s",
            rates(with_holes, records),
            failed=failures(with_holes),
            against="the same live records with no holes",
            references={kind: rates(without, records).get(kind) for kind in self.ours},
            **goal("holes"),
        )
        self.add(
            size, "↳ the same live records, no holes", "records/s", rates(without, records), failed=failures(without)
        )
        self.add(
            size,
            "↳ the same epoch, records per CPU second (steadier on a loaded machine)",
            "records/s",
            rates(with_holes, records, "cpu_seconds"),
            failed=failures(with_holes),
            against="the same live records with no holes",
            references={kind: rates(without, records, "cpu_seconds").get(kind) for kind in self.ours},
            **goal("holes"),
        )
        self.figure(size, "↳ of the epoch: open to the first batch", "s", with_holes, "first_seconds")
        self.figure(size, "↳ the same, no holes", "s", without, "first_seconds")
        self.figure(size, f"↳ setup: delete of 1 row in {HOLES} in one call", "s", made, "delete_seconds")
        self.discard(folder)

    def measure_compact(self, size: Size) -> None:
        """``MANY_APPENDS`` appends of ``SMALL_WRITE``, then ``compact()``, against the same records in big appends."""
        folder = self.base / f"n{size.n}-{size.payload}-compact"
        appended, _ = self.build(folder / "appended", size, self.kinds)
        made = {
            kind: self.call("appends", kind, root, n=size.n, payload=size.payload) for kind, root in appended.items()
        }
        compacted = {kind: self.call("compact", kind, root) for kind, root in appended.items()}
        whole = Size(size.n + MANY_APPENDS * SMALL_WRITE, size.payload)
        one, _ = self.build(folder / "one", whole, self.kinds)
        label = f"after {MANY_APPENDS:,} appends of {SMALL_WRITE} + compact()"
        against = f"the same records in appends of {rows_per_table(size.payload):,} rows"
        self.figure(size, f"{MANY_APPENDS:,} appends of {SMALL_WRITE} (setup, one process)", "s", made)
        self.figure(size, "↳ then compact() (Lance: optimize.compact_files())", "s", compacted)
        params = {"records": whole.n, "batch_size": self.args.batch_size}
        for op, name, extra in (
            ("lookup", "open + first lookup", {"key": lookup_key(size.n)}),
            ("epoch", "stream one epoch (0 workers)", params),
            ("append", f"append {SMALL_WRITE} records", {}),
        ):
            after, reference = self.paired(op, (appended, size), (one, whole), **extra)
            self.figure(
                size,
                f"{label}: {name}",
                "s",
                after,
                against=against,
                references={kind: value(reference.get(kind)) for kind in self.ours},
                **goal("compacted"),
            )
            self.figure(size, f"↳ {name}, {against}", "s", reference)
            if op == "epoch":
                self.figure(
                    size,
                    f"↳ {name}, CPU seconds",
                    "s",
                    after,
                    "cpu_seconds",
                    against=against,
                    references={kind: value(reference.get(kind), "cpu_seconds") for kind in self.ours},
                    **goal("compacted"),
                )
        self.discard(folder)

    def discard(self, folder: Path) -> None:
        """Remove stores measured (disk is short at 100M), unless ``--keep``."""
        if not self.args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    def empty_peaks(self, reference: dict[str, Result]) -> dict[str, float | None]:
        return {kind: value(reference.get(f"empty {kind}"), "peak_mib") for kind in self.kinds}

    def measure_building(self) -> None:
        folder, section = self.base / "building", {"section": "building"}
        if "build" in self.figures:
            n = self.args.build_n
            size = Size(n, SMALL_PAYLOAD)
            tables = {kind: self.call("build_table", kind, folder / f"table-{kind}", n=n) for kind in self.kinds}
            ingests = {kind: self.call("build_ingest", kind, folder / f"ingest-{kind}", n=n) for kind in self.ours}
            self.discard(folder)
            lance = rates(tables, n).get(LANCE)
            for name, results, shown in (
                ("append(Arrow table)", tables, rates(tables, n)),
                (f"ingest(num_workers={INGEST_WORKERS})", ingests, {**rates(ingests, n), LANCE: lance}),
            ):
                self.add(
                    size,
                    f"{n:,} small records: {name}",
                    "records/s",
                    shown,
                    failed=failures(results),
                    against="lance write_dataset(table)",
                    references=dict.fromkeys(self.ours, lance),
                    **goal("build"),
                    **section,
                )
                self.figure(size, "↳ peak memory", "MiB", results, "peak_mib", **section)
        if "dicts" in self.figures:
            n = self.args.dicts_n
            size = Size(n, BIG_PAYLOAD)
            made = {kind: self.call("dicts", kind, folder / f"dicts-{kind}", n=n) for kind in self.kinds}
            self.discard(folder)
            shown = rates(made, n)
            name = f"{n:,} x 1 KiB dicts in {DICTS_APPENDS} ingest(num_workers={INGEST_WORKERS})"
            self.add(
                size,
                name,
                "records/s",
                shown,
                failed=failures(made),
                against="lance write_dataset(Table.from_pylist(dicts))",
                references=dict.fromkeys(self.ours, shown.get(LANCE)),
                **goal("dicts"),
                **section,
            )
            self.figure(size, "↳ peak memory", "MiB", made, "peak_mib", **section)

    def growth(self) -> list[dict[str, Any]]:
        """k (figure ~ N^k, least squares in log-log) of each figure over the sizes of small records."""
        sizes = {f"{n:,}": n for n in self.args.n}
        rows = [row for row in self.rows if row.section in sizes]
        fitted = []
        for name in dict.fromkeys(row.name for row in rows):
            same = [row for row in rows if row.name == name]
            if len(same) < 2:
                continue
            exponents: dict[str, float | None] = {}
            for kind in self.kinds:
                points = [(math.log(row.n), math.log(figure)) for row in same if (figure := row.values.get(kind))]
                exponents[kind] = slope(points) if len(points) >= 2 else None
            target = next((part.strip() for part in same[0].target.split(";") if part.strip().startswith("k ")), "")
            fitted.append({"name": name, "unit": same[0].unit, "k": exponents, "target": target})
        return fitted


def fastest(runs: Sequence[Result]) -> Result:
    good = [run for run in runs if "error" not in run]
    return min(good, key=lambda run: float(run["seconds"])) if good else runs[-1]


def fastest_of_each(runs: dict[str, list[Result]]) -> dict[str, Result]:
    return {kind: fastest(each) for kind, each in runs.items()}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: its path relative to it -> (size, mtime in ns)."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def written(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], root: Path | None = None
) -> dict[str, Any]:
    """What a write left: bytes and count of the files new or rewritten, and bytes by kind of file.

    With ``root`` (a litstore store), also ``per_chunk``: the bytes that are one per chunk
    the write touched (issue 19's "O(touched chunks) small files"): its deletion vector
    files, and the deletion references its commit record lists (their JSON), with
    ``touched``, how many chunks those references name.
    """
    changed = {path: size for path, (size, mtime) in after.items() if before.get(path) != (size, mtime)}
    kinds: dict[str, int] = {}
    for path, size in changed.items():
        kinds[file_kind(path)] = kinds.get(file_kind(path), 0) + size
    found: dict[str, Any] = {
        "bytes": sum(changed.values()),
        "files": len(changed),
        "kinds": dict(sorted(kinds.items())),
    }
    if root is not None:
        vectors = sum(size for path, size in changed.items() if path.endswith(".deletions"))
        records = [path for path in changed if path.startswith("versions/") and path.endswith(".json")]
        references: list[Any] = []
        for path in records:
            text = (root / path).read_text()
            if text.lstrip().startswith("{"):
                references += json.loads(text).get("deletions", [])
        compact = json.dumps(references, separators=(",", ":")).encode() if references else b""
        found["per_chunk"] = vectors + len(compact)
        found["touched"] = len(references)
    return found


#: The ends of file names a write's files are grouped by (litstore's, then Lance's), longest first.
FILE_ENDS = ".checkpoint.parquet .parquet .bin .hashes .keys .deletions .json .lance .arrow .manifest .txn".split()


def file_kind(path: str) -> str:
    """A file's top folder and the end of its name: ``fragments/*.bin``, ``_deletions/*.arrow``."""
    top, _, rest = path.partition("/")
    name = rest.rsplit("/", 1)[-1]
    if not rest:
        return path
    return f"{top}/*" + next((end for end in FILE_ENDS if name.endswith(end)), "")


def largest_chunk(root: Path) -> int:
    """Bytes of the largest chunk file under a litstore root (0 for Lance): what one small upsert copies."""
    return max((path.stat().st_size for path in root.glob("fragments/*/chunk-*.bin")), default=0)


def slope(points: Sequence[tuple[float, float]]) -> float:
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


# -- output -----------------------------------------------------------------------------------


def cell(figure: float | None, unit: str) -> str:
    if figure is None or math.isnan(figure):
        return "—"
    if unit == "s":
        return f"{figure * 1000:,.1f} ms" if figure < 1 else f"{figure:,.2f} s"
    if unit == "MiB":
        return f"{figure:,.0f} MiB"
    if unit == "bytes":
        return (
            f"{figure:,.0f} B"
            if figure < 2**10
            else f"{figure / 2**10:,.1f} KiB"
            if figure < 2**20
            else f"{figure / 2**20:,.1f} MiB"
        )
    if unit in ("files", "chunks"):
        return f"{figure:,.0f}"
    return f"{figure:,.0f}/s"


def short(kind: str) -> str:
    return kind.replace("litstore-", "f")


def print_section(rows: Sequence[Row], kinds: Sequence[str]) -> None:
    ours = [kind for kind in kinds if kind != LANCE]
    header = ["figure", *kinds, *(f"{short(kind)} ratio" for kind in ours), "ratio to", "target", "met"]
    table = []
    for row in rows:
        ratios = [f"{ratio:.2f}x" if (ratio := row.ratio(kind)) is not None else "" for kind in ours]
        met = ", ".join(f"{short(kind)} {'yes' if ok else 'NO'}" for kind in ours if (ok := row.met(kind)) is not None)
        shown = ["failed" if kind in row.failed else cell(row.values.get(kind), row.unit) for kind in kinds]
        table.append([row.name, *shown, *ratios, row.against if any(ratios) else "", row.target, met])
    print_markdown(header, table)


def print_report(bench: Bench) -> None:
    for section in dict.fromkeys(row.section for row in bench.rows):
        if section.startswith("references"):
            title = f"References{section.removeprefix('references')}: empty stores, {REFERENCE_RECORDS:,}-record stores"
        elif section == "building":
            title = "Building a store"
        else:
            title = f"N = {section} records" + ("" if "KiB" in section else " of ~40 B")
        print(f"\n### {title}\n")
        print_section([row for row in bench.rows if row.section == section], bench.kinds)
        print_written([row for row in bench.rows if row.section == section])
    fitted = bench.growth()
    if fitted:
        print(f"\n### Growth exponent k (figure ~ N^k) over N = {', '.join(f'{n:,}' for n in sorted(bench.args.n))}\n")
        print_markdown(
            ["figure", "unit", *bench.kinds, "target"],
            [
                [
                    each["name"],
                    each["unit"],
                    *(f"{k:.2f}" if (k := each["k"][kind]) is not None else "—" for kind in bench.kinds),
                    each["target"],
                ]
                for each in fitted
            ],
        )
    print(f"\n{len(bench.probes)} processes, {time.perf_counter() - bench.started:,.0f} s in all")


def print_written(rows: Sequence[Row]) -> None:
    """What each change wrote, by kind of file (the bytes rows' rounds)."""
    lines = [
        f"- {row.name.removeprefix('↳ ')}, {kind}: {cell(float(wrote['bytes']), 'bytes')} in {wrote['files']} files: "
        + ", ".join(f"{name} {cell(float(size), 'bytes')}" for name, size in wrote["kinds"].items())
        for row in rows
        if "written" in row.extra
        for kind, wrote in row.extra["written"].items()
    ]
    if lines:
        print("\nWhat the changes wrote (files new or rewritten), by kind of file:\n")
        print("\n".join(lines))


def print_readme(bench: Bench) -> None:
    """The figures with a target, one row each and a column per size: ready for the README, per litstore kind."""
    sizes = [section for section in dict.fromkeys(row.section for row in bench.rows) if section[0].isdigit()]
    named = [row for row in bench.rows if row.section in sizes and row.target]
    fitted = {each["name"]: each["k"] for each in bench.growth()}
    for kind in bench.ours:
        table = []
        for name in dict.fromkeys(row.name for row in named):
            by_size = {row.section: row for row in named if row.name == name}
            cells, missed = [], []
            for section in sizes:
                row = by_size.get(section)
                if row is None:
                    cells.append("")
                    continue
                shown = "failed" if kind in row.failed else cell(row.values.get(kind), row.unit)
                reference, ratio = row.references.get(kind), row.ratio(kind)
                shown += f" ({cell(reference, row.unit)})" if reference is not None and row.unit != "MiB" else ""
                shown += f" {ratio:.2f}x" if ratio is not None else ""
                cells.append(shown)
                if row.met(kind) is False or kind in row.failed:
                    missed.append(section)
            k = fitted.get(name, {}).get(kind)
            row = next(iter(by_size.values()))
            met = f"**no** at {', '.join(missed)}" if missed else "yes" if row.bound else ""
            table.append([name, *cells, f"{k:.2f}" if k is not None else "—", row.target, met])
        print(f"\n### README table, {kind} (value (what it is compared with) ratio)\n")
        print_markdown(["figure", *sizes, "k (N^k)", "target", "met"], table)


def summary(bench: Bench) -> dict[str, Any]:
    """Everything measured so far, for ``--json``: rows, k, and every probe's spec and output."""
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        "args": vars(bench.args),
        "seconds": time.perf_counter() - bench.started,
        "rows": [asdict(row) for row in bench.rows],
        "k": bench.growth(),
        "probes": bench.probes,
    }


# -- command line -----------------------------------------------------------------------------


def figure_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown figure {', '.join(unknown)}: choose from {', '.join(FIGURES)}")
    return names


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000], help="store sizes (small records)")
    parser.add_argument(
        "--big-records",
        type=int,
        nargs="?",
        const=1_000_000,
        default=None,
        help="also a store of this many 1 KiB records (default 1,000,000)",
    )
    parser.add_argument("--writes", type=int, nargs="+", default=[10], help="small writes before looking up again")
    parser.add_argument(
        "--upsert-every", type=int, default=2, help="every K-th small write is an upsert (it copies a chunk); 0: none"
    )
    parser.add_argument("--only", type=figure_list, default=None, help=f"figures to run, of {','.join(FIGURES)}")
    parser.add_argument("--skip", type=figure_list, default=[], help="figures not to run")
    parser.add_argument(
        "--formats", type=int, nargs="+", choices=(2, 3, 4, 5, 6, 7), default=[6, 7], help="litstore formats"
    )
    parser.add_argument(
        "--compact",
        dest="slow",
        action="append_const",
        const="compact",
        default=[],
        help=f"also {MANY_APPENDS:,} appends of {SMALL_WRITE}, compact(), then append/lookup/stream (slow)",
    )
    parser.add_argument("--no-lance", dest="lance", action="store_false", help="litstore only")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader workers (dataset)")
    parser.add_argument("--batch-size", type=int, default=256, help="DataLoader and to_batches batch size")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each figure that changes nothing (best kept)")
    parser.add_argument("--build-n", type=int, default=1_000_000, help="small records built (build)")
    parser.add_argument("--dicts-n", type=int, default=200_000, help="1 KiB dict records ingested (dicts)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds after which a probe is stopped")
    parser.add_argument("--json", type=Path, default=None, help="write rows, k and raw probes to this file")
    parser.add_argument("--keep", default=None, help="build under this (new or empty) directory and keep it")
    args = parser.parse_args(argv)
    if min(args.n) < 1 or args.rounds < 1 or min(args.writes) < 1 or min(args.workers) < 0 or args.upsert_every < 0:
        parser.error("--n, --rounds and --writes must be positive, --workers and --upsert-every not negative")
    if args.build_n < 1 or args.dicts_n < DICTS_APPENDS or (args.big_records is not None and args.big_records < 1):
        parser.error(f"--build-n and --big-records must be positive, --dicts-n at least {DICTS_APPENDS}")
    return args


def importable(module: str) -> bool:
    """Whether ``module`` imports, tried in a child process so that this one stays small."""
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    compile_litstore()
    if args.lance and not importable("lance"):
        args.lance = False
        print("lance cannot be imported: litstore only (pip install 'litstore[bench]')", file=sys.stderr)
    with workdir(args.keep, "litstore-bench-scale-") as base:
        bench = Bench(args, base)
        print(
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
            f"figures: {', '.join(bench.figures)}",
            file=sys.stderr,
        )
        steps: list[Callable[[], None]] = []
        if {*PER_SIZE, *SLOW} & set(bench.figures):  # (compact is measured per size too)
            sizes = [Size(n, SMALL_PAYLOAD) for n in args.n]
            sizes += [Size(args.big_records, BIG_PAYLOAD)] if args.big_records else []
            steps += [functools.partial(bench.measure_size, size) for size in sizes]
        if {"build", "dicts"} & set(bench.figures):
            steps.append(bench.measure_building)
        for step in steps:
            step()
            if args.json:
                args.json.write_text(json.dumps(summary(bench), indent=1, default=str))
        print_report(bench)
        print_readme(bench)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
