"""Costs that should not grow with the store: issue 18's benchmark table, each figure in a fresh process.

Run it with::

    python benchmarks/bench_scale.py [--n 1000000 4000000 16000000] [--writes 10 1000]
        [--big-records [N]] [--only FIGURES | --skip FIGURES] [--formats 2 3] [--no-lance]
        [--workers 0 2] [--rounds 2] [--build-n 1000000] [--dicts-n 200000]
        [--json FILE] [--keep DIR] [--timeout SECONDS]

For each ``N`` it builds, untimed (its time and peak memory are shown as ``build``),
stores of ``N`` small records (``{"id": "rec-%09d", "label": int, "payload": 32 random
bytes}``, about 40 bytes each) by appending Arrow tables of 500,000 rows one after
another, so building takes bounded memory at any ``N``: a litstore store of format 2 (the
manifest composed on first use), one of format 3 (key runs on disk,
:mod:`litstore.format.keyrun`), and, if ``pylance`` is importable, a Lance dataset
written by ``write_dataset`` with a BTREE scalar index on ``id``. ``--big-records`` adds
a size of 1M (or the given number of) records of 1 KiB, built in tables of ~128 MiB.

Every figure runs in a fresh Python process: the libraries it needs are imported before
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
- ``writes``: small writes (100-record appends and upserts in turn; Lance:
  ``write_dataset`` append and ``merge_insert``) until the store has had each of
  ``--writes`` (made in one process, untimed setup), then ``open + first lookup`` again.
- ``build`` (once, ``--build-n`` records): ``store.append(table)`` of one Arrow table and
  ``store.ingest(fn, inputs, num_workers=2)`` (``fn`` makes 1,000 dicts per input),
  against ``lance.write_dataset(table)``, in records/s.
- ``dicts`` (once, ``--dicts-n`` records of 1 KiB): 10 calls of
  ``store.ingest(fn, inputs, num_workers=2)`` (``fn`` makes 100 dicts per input) against
  10 ``lance.write_dataset(pa.Table.from_pylist(dicts))`` of the same dicts made in the
  process, in records/s.

Printed (stdout, markdown): a table per size with each figure for litstore format 2,
format 3 and Lance, each format's ratio to what the figure is compared with (Lance unless
the ``against`` column says otherwise) and the issue's target; then the growth exponent k
(cost ~ N^k, least squares over the sizes run) of every figure. Progress goes to stderr.
``--json FILE`` writes the rows, the k table and every probe's raw output (rewritten after
each size, so a long run leaves what it measured). A probe that fails (a process killed
for memory, say) shows as ``failed``; a store whose build failed is left out of its size.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import dir_bytes, peak_rss_bytes, print_markdown, workdir

SEED = 20240601
SMALL_PAYLOAD = 32
BIG_PAYLOAD = 1024
TABLE_ROWS = 500_000
TABLE_BYTES = 128 * 2**20
LOOKUPS = 10_000  # keys asked by get_many
STREAMED = 10_000  # records a dataset probe streams before reading the processes' peaks
REFERENCE_RECORDS = 10_000  # records of the store whose loader workers are the reference
SMALL_WRITE = 100  # records per append or upsert of the writes
INGEST_BLOCK = 1_000  # small records made per ingest input (build)
DICTS_BLOCK = 100  # 1 KiB records made per ingest input (dicts)
DICTS_APPENDS = 10
INGEST_WORKERS = 2
DISK_MARGIN = 2 * 2**30  # free disk the writes leave untouched
ITEM_HEADER = 4  # each item of a litdata chunk starts with its size (uint32); litstore hashes what follows

FIGURES = ("lookup", "get_many", "dataset", "verify", "gc", "append", "writes", "build", "dicts")
PER_SIZE = FIGURES[:7]
LANCE = "lance"

# -- records --------------------------------------------------------------------------------


def rows_per_table(payload_bytes: int) -> int:
    return max(1, min(TABLE_ROWS, TABLE_BYTES // (payload_bytes + 24)))


def record_table(start: int, stop: int, payload_bytes: int, prefix: str = "rec", label: int | None = None) -> Any:
    """Records ``start`` to ``stop`` as an Arrow table: keys ``<prefix>-%09d``, seeded random payloads."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = stop - start
    numbers = pa.array(np.arange(start, stop, dtype=np.int64))
    keys = pc.binary_join_element_wise(f"{prefix}-", pc.utf8_lpad(pc.cast(numbers, pa.string()), 9, "0"), "")
    offsets = np.arange(0, (count + 1) * payload_bytes, payload_bytes, dtype=np.int64)
    blob = np.random.default_rng([SEED, start, payload_bytes]).bytes(count * payload_bytes)
    payloads = pa.Array.from_buffers(pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(blob)])
    labels = numbers if label is None else pa.array(np.full(count, label, dtype=np.int64))
    return pa.table({"id": keys, "label": labels, "payload": payloads.cast(pa.binary())})


def small_block(bounds: tuple[int, int]) -> list[dict[str, Any]]:
    """The small records of one ingest input (module level: ingest workers import it)."""
    return list(record_table(*bounds, SMALL_PAYLOAD).to_pylist())


def kib_block(bounds: tuple[int, int]) -> list[dict[str, Any]]:
    """The 1 KiB records of one ingest input (module level: ingest workers import it)."""
    return list(record_table(*bounds, BIG_PAYLOAD).to_pylist())


def blocks(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(first, min(first + size, stop)) for first in range(start, stop, size)]


def lookup_key(n: int, salt: str = "") -> str:
    return f"rec-{random.Random(f'{SEED}{salt}').randrange(max(n, 1)):09d}"


# -- probes: what each fresh process runs ----------------------------------------------------


def probe_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the store (setup): tables appended one after another, then Lance's BTREE index."""
    root, n, payload = spec["root"], spec["n"], spec["payload"]
    step = rows_per_table(payload)
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        lance = _lance()
        if n == 0:
            lance.write_dataset(record_table(0, 0, payload), root)
        for first in range(0, n, step):
            table = record_table(first, min(first + step, n), payload)
            lance.write_dataset(table, root, mode="append" if first else "create")
        if n:
            lance.dataset(root).create_scalar_index("id", index_type="BTREE")
    else:
        store = _litstore().Store.create(root, key="id", format_version=spec["format"])
        for first in range(0, n, step):
            store.append(record_table(first, min(first + step, n), payload))
    return {"seconds": time.perf_counter() - start, "table_rows": step}


def probe_lookup(spec: dict[str, Any]) -> dict[str, Any]:
    key = spec["key"]
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        found = _lance().dataset(spec["root"]).to_table(filter=f"id = '{key}'").num_rows == 1
    else:
        store = _litstore().open(spec["root"])
        try:
            found = store[key]["id"] == key
        except KeyError:
            found = False
    seconds = time.perf_counter() - start
    if found != (spec["n"] > 0):
        raise AssertionError(f"lookup of {key} found={found} in a store of {spec['n']} records")
    return {"seconds": seconds}


def probe_get_many(spec: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(SEED)
    asked = [f"rec-{rng.randrange(spec['n']):09d}" for _ in range(LOOKUPS)]
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        quoted = ", ".join(f"'{key}'" for key in asked)
        found = _lance().dataset(spec["root"]).to_table(filter=f"id IN ({quoted})").num_rows
        expected = len(set(asked))
    else:
        found, expected = len(_litstore().open(spec["root"]).get_many(asked)), len(asked)
    seconds = time.perf_counter() - start
    if found != expected:
        raise AssertionError(f"get_many found {found} records, expected {expected}")
    return {"seconds": seconds}


def probe_append(spec: dict[str, Any]) -> dict[str, Any]:
    table = record_table(0, SMALL_WRITE, spec["payload"], prefix=f"new{spec['round']}")
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        _lance().write_dataset(table, spec["root"], mode="append")
    else:
        _litstore().open(spec["root"]).append(table)
    return {"seconds": time.perf_counter() - start}


def is_upsert(write: int, every: int) -> bool:
    """Whether small write number ``write`` is an upsert (of ``SMALL_WRITE`` consecutive keys) or an append."""
    return every > 0 and write % every == every - 1


def probe_writes(spec: dict[str, Any]) -> dict[str, Any]:
    """Writes ``first`` to ``last`` (setup): appends of new keys, and every ``upsert_every``-th an upsert."""
    root, n, payload = spec["root"], spec["n"], spec["payload"]
    rng = random.Random(f"{SEED}-writes-{spec['first']}")
    lance = _lance() if spec["kind"] == LANCE else None
    store = None if lance else _litstore().open(root)
    start = time.perf_counter()
    for write in range(spec["first"], spec["last"]):
        appends = not is_upsert(write, spec["upsert_every"])
        if appends:
            table = record_table(0, SMALL_WRITE, payload, prefix=f"w{write}")
        else:
            first = rng.randrange(max(n - SMALL_WRITE, 0) + 1)
            table = record_table(first, min(first + SMALL_WRITE, n), payload, label=-1 - write)
        if store is not None:
            (store.append if appends else store.upsert)(table)
        elif appends:
            lance.write_dataset(table, root, mode="append")
        else:
            lance.dataset(root).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                table
            )
    return {"seconds": time.perf_counter() - start}


def probe_dataset(spec: dict[str, Any]) -> dict[str, Any]:
    """Time to the first batch; then stream on to ``STREAMED`` records and read every process's peak."""
    batch_size = spec["batch_size"]
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        batch = next(iter(_lance().dataset(spec["root"]).to_batches(batch_size=batch_size)))
        return {"seconds": time.perf_counter() - start, "streamed": batch.num_rows}
    from litdata import StreamingDataLoader

    dataset = _litstore().open(spec["root"]).dataset()
    batches = iter(StreamingDataLoader(dataset, batch_size=batch_size, num_workers=spec["workers"]))
    streamed = len(next(batches)["id"])
    first = time.perf_counter() - start
    wanted = min(STREAMED, len(dataset))
    while streamed < wanted:  # never past the end: workers that have finished wait, alive, for the loader
        streamed += len(next(batches)["id"])
    workers = [peak_rss_bytes(pid) / 2**20 for pid in child_pids()]
    streaming = time.perf_counter() - start
    return {"seconds": first, "stream_seconds": streaming, "streamed": streamed, "workers_mib": workers}


def probe_verify(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    report = _litstore().open(spec["root"]).verify()
    seconds = time.perf_counter() - start
    if not report.ok:
        raise AssertionError(f"verify found problems: {report!r}")
    return {"seconds": seconds, "records": report.records_checked, "chunks": report.chunks_checked}


def probe_floor(spec: dict[str, Any]) -> dict[str, Any]:
    """Read every chunk file (litdata's layout: item count, offsets, items) and xxh3-128 each item."""
    import numpy as np
    import xxhash

    digest = xxhash.xxh3_128_digest
    items = size = 0
    start = time.perf_counter()
    for path in sorted(Path(spec["root"], "fragments").glob("*/chunk-*.bin")):
        data = path.read_bytes()
        count = int.from_bytes(data[:4], "little")
        offsets = np.frombuffer(data, np.uint32, count + 1, 4).tolist()
        view = memoryview(data)
        for begin, end in itertools.pairwise(offsets):
            digest(view[begin + ITEM_HEADER : end])
        items, size = items + count, size + len(data)
    return {"seconds": time.perf_counter() - start, "records": items, "bytes": size}


def probe_gc(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        removed = _lance().dataset(spec["root"]).cleanup_old_versions().old_versions
    else:
        removed = len(_litstore().open(spec["root"]).gc().removed_files)
    return {"seconds": time.perf_counter() - start, "removed": removed}


def probe_build_table(spec: dict[str, Any]) -> dict[str, Any]:
    table = record_table(0, spec["n"], SMALL_PAYLOAD)
    if spec["kind"] == LANCE:
        start = time.perf_counter()
        _lance().write_dataset(table, spec["root"])
    else:
        store = _litstore().Store.create(spec["root"], key="id", format_version=spec["format"])
        start = time.perf_counter()
        store.append(table)
    return {"seconds": time.perf_counter() - start}


def probe_build_ingest(spec: dict[str, Any]) -> dict[str, Any]:
    store = _litstore().Store.create(spec["root"], key="id", format_version=spec["format"])
    start = time.perf_counter()
    store.ingest(small_block, blocks(0, spec["n"], INGEST_BLOCK), num_workers=INGEST_WORKERS, progress=False)
    return {"seconds": time.perf_counter() - start}


def probe_dicts(spec: dict[str, Any]) -> dict[str, Any]:
    """``DICTS_APPENDS`` writes of 1 KiB dicts, made by ``kib_block`` (in ingest's workers, or here for Lance)."""
    import pyarrow as pa

    n, root = spec["n"], spec["root"]
    store = None if spec["kind"] == LANCE else _litstore().Store.create(root, key="id", format_version=spec["format"])
    start = time.perf_counter()
    for number, (first, last) in enumerate(blocks(0, n, -(-n // DICTS_APPENDS))):
        inputs = blocks(first, last, DICTS_BLOCK)
        if store is None:
            dicts = [record for bounds in inputs for record in kib_block(bounds)]
            _lance().write_dataset(pa.Table.from_pylist(dicts), root, mode="append" if number else "create")
        else:
            store.ingest(kib_block, inputs, num_workers=INGEST_WORKERS, progress=False)
    return {"seconds": time.perf_counter() - start}


PROBES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "build": probe_build,
    "lookup": probe_lookup,
    "get_many": probe_get_many,
    "append": probe_append,
    "writes": probe_writes,
    "dataset": probe_dataset,
    "verify": probe_verify,
    "floor": probe_floor,
    "gc": probe_gc,
    "build_table": probe_build_table,
    "build_ingest": probe_build_ingest,
    "dicts": probe_dicts,
}


def _lance() -> Any:
    import lance

    return lance


def _litstore() -> Any:
    import litstore

    return litstore


def child_pids() -> list[int]:
    """The live processes whose parent is this one (a loader's workers)."""
    own, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it ended while we looked
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == own:
                found.append(int(entry.name))
    return sorted(found)


def run_probe(spec: dict[str, Any]) -> None:
    """In a fresh process: import what the probe needs, run it, print one JSON line."""
    start = time.perf_counter()
    modules = ["numpy", "pandas", "pyarrow", "pyarrow.compute"]
    modules += ["lance"] if spec["kind"] == LANCE else ["litstore", "duckdb"]  # litstore imports DuckDB when needed
    modules += ["torch", "litdata"] if spec["op"] == "dataset" and spec["kind"] != LANCE else []
    modules += ["xxhash"] if spec["op"] == "floor" else []
    for name in modules:
        importlib.import_module(name)
    imports = {"imports_seconds": time.perf_counter() - start, "imports_mib": peak_rss_bytes() / 2**20}
    result = PROBES[spec["op"]](spec)
    print(json.dumps({**result, **imports, "peak_mib": peak_rss_bytes() / 2**20}), flush=True)


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


def rates(results: dict[str, Result], records: int) -> dict[str, float | None]:
    return {kind: records / seconds if (seconds := value(result)) else None for kind, result in results.items()}


class Bench:
    """Runs every probe in a fresh process and turns what they print into rows."""

    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args, self.base = args, base
        self.figures = [name for name in (args.only or FIGURES) if name not in args.skip]
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
        command = [sys.executable, __file__, "--probe", json.dumps(spec)]
        begun = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            result: Result = {"error": f"ran past --timeout {self.args.timeout} s"}
        else:
            if done.returncode == 0:
                result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
            else:
                last = (done.stderr.strip().splitlines() or [""])[-1]
                result = {"error": f"exit status {done.returncode}: {last[-300:]}"}
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

    def build(self, folder: Path, size: Size, kinds: Sequence[str]) -> tuple[dict[str, Path], dict[str, Result]]:
        """A store of ``size`` per kind, and the builds' results; a kind whose build failed has no root."""
        built = {kind: self.call("build", kind, folder / kind, n=size.n, payload=size.payload) for kind in kinds}
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
        section = "references" + (" x 1 KiB" if payload == BIG_PAYLOAD else "")
        if {"lookup", "writes"} & set(self.figures):
            size = Size(0, payload)
            roots, _ = self.build(self.base / f"empty-{payload}", size, self.kinds)
            empties = self.each("lookup", roots, size, key=lookup_key(0))
            got.update({f"empty {kind}": result for kind, result in empties.items()})
            self.figure(size, "empty store: open + lookup of a missing key", "s", empties, section=section)
            self.figure(size, "↳ imports before the clock", "s", empties, "imports_seconds", section=section)
            self.figure(size, "↳ memory after the imports", "MiB", empties, "imports_mib", section=section)
            self.figure(size, "↳ peak memory", "MiB", empties, "peak_mib", section=section)
        if "dataset" in self.figures:
            size = Size(REFERENCE_RECORDS, payload)
            roots, _ = self.build(self.base / f"ref-{payload}", size, self.ours)
            for workers in self.args.workers:
                streams = self.each("dataset", roots, size, workers=workers, batch_size=self.args.batch_size)
                got.update({f"stream {kind} {workers}": result for kind, result in streams.items()})
                name = f"{REFERENCE_RECORDS:,}-record store: dataset() → first batch, {workers} workers"
                self.figure(size, name, "s", streams, section=section)
                self.figure(
                    size,
                    f"↳ peak memory, main process ({workers} workers)",
                    "MiB",
                    streams,
                    "peak_mib",
                    section=section,
                )
                if workers:
                    self.add(
                        size,
                        f"↳ peak memory, largest of {workers} workers",
                        "MiB",
                        largest_worker(dict(streams)),
                        section=section,
                    )
        self.references[payload] = got
        return got

    def measure_size(self, size: Size) -> None:
        begun = time.perf_counter()
        reference = self.reference(size.payload)
        folder = self.base / f"n{size.n}-{size.payload}"
        roots, built = self.build(folder, size, self.kinds)
        self.figure(
            size,
            f"build (setup: tables of {rows_per_table(size.payload):,} rows appended)",
            "s",
            built,
            against="lance",
            references=self.lance_of(built),
        )
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
        took = time.perf_counter() - begun
        print(f"[{time.perf_counter() - self.started:6.0f} s] size {size.label} took {took:.0f} s", file=sys.stderr)
        if not self.args.keep:
            shutil.rmtree(folder, ignore_errors=True)

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
                target="≤ 1.0x Lance at every N; k ≤ 0.1",
                bound=("<=", 1.0),
            )
            self.figure(
                size,
                "↳ peak memory of that process",
                "MiB",
                before,
                "peak_mib",
                against="an empty store's process",
                references=self.empty_peaks(reference),
                target="≤ 1.3x an empty store's",
                bound=("<=", 1.3),
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
                target="≤ 1.0x Lance",
                bound=("<=", 1.0),
            )
        if "dataset" in self.figures:
            self.measure_dataset(size, roots, reference)
        ours = {kind: root for kind, root in roots.items() if kind != LANCE}
        if "verify" in self.figures:
            checked, floor = self.each("verify", ours, size), self.each("floor", ours, size)
            self.figure(
                size,
                "verify()",
                "s",
                checked,
                against="the floor's time",
                references=values(floor),
                target="≥ 0.8x the floor's speed (≤ 1.25x its time)",
                bound=("<=", 1.25),
            )
            self.figure(
                size,
                "↳ peak memory of verify()",
                "MiB",
                checked,
                "peak_mib",
                against="the floor's process",
                references=values(floor, "peak_mib"),
                target="≤ 1 GiB at 16M",
                bound=("at most", 1024.0),
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
                target="≤ 1.0x Lance",
                bound=("<=", 1.0),
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
                target="≤ 0.5 s at 16M; k ≤ 0.2" if workers == 0 else "k ≤ 0.2",
                bound=("at most", 0.5) if workers == 0 else None,
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
                self.add(
                    size,
                    f"↳ peak memory, largest of {workers} workers",
                    "MiB",
                    largest_worker(dict(got)),
                    failed=failures(got),
                    against=f"a worker streaming {REFERENCE_RECORDS:,} records",
                    references=largest_worker(streams),
                    target="≤ 1.2x",
                    bound=("<=", 1.2),
                    extra={"workers_mib": {kind: result.get("workers_mib") for kind, result in got.items()}},
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
                target="≤ 1.0x Lance; k ≤ 0.1",
                bound=("<=", 1.0),
            )
        if "writes" not in self.figures:
            return
        every = self.args.upsert_every
        for count in sorted(set(self.args.writes)):
            upserts = sum(is_upsert(write, every) for write in range(done, count))
            copied, free = upserts * sum(map(largest_chunk, roots.values())), shutil.disk_usage(self.base).free
            if copied > free - DISK_MARGIN:
                print(
                    f"writes up to {count:,} skipped: their upserts would copy ~{copied / 2**30:,.1f} GiB of chunks, "
                    f"{free / 2**30:,.1f} GiB free (--upsert-every)",
                    file=sys.stderr,
                )
                self.add(
                    size,
                    f"open + first lookup after {count:,} writes",
                    "s",
                    {},
                    failed=list(roots),
                    target=f"skipped: needs ~{copied / 2**30:,.0f} GiB of disk, see --upsert-every",
                )
                break
            made = {
                kind: self.call(
                    "writes", kind, root, n=size.n, payload=size.payload, first=done, last=count, upsert_every=every
                )
                for kind, root in roots.items()
            }
            done = max(done, count)
            after = self.each("lookup", roots, size, key=lookup_key(size.n))
            self.figure(
                size,
                f"open + first lookup after {done:,} writes",
                "s",
                after,
                against="the same before the writes",
                references=values(before),
                target="≤ 1.5x before them",
                bound=("<=", 1.5),
            )
            self.figure(
                size,
                f"↳ peak memory after {done:,} writes",
                "MiB",
                after,
                "peak_mib",
                against="an empty store's process",
                references=self.empty_peaks(reference),
                target="≤ 1.3x an empty store's",
                bound=("<=", 1.3),
            )
            self.figure(size, f"↳ the writes up to {done:,} (setup, one process)", "s", made)

    def empty_peaks(self, reference: dict[str, Result]) -> dict[str, float | None]:
        return {kind: value(reference.get(f"empty {kind}"), "peak_mib") for kind in self.kinds}

    def measure_building(self) -> None:
        folder = self.base / "building"
        if "build" in self.figures:
            n = self.args.build_n
            size = Size(n, SMALL_PAYLOAD)
            tables = {kind: self.call("build_table", kind, folder / f"table-{kind}", n=n) for kind in self.kinds}
            ingests = {kind: self.call("build_ingest", kind, folder / f"ingest-{kind}", n=n) for kind in self.ours}
            shutil.rmtree(folder, ignore_errors=True)
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
                    target="≥ 0.5x Lance",
                    bound=(">=", 0.5),
                    section="building",
                )
                self.figure(size, "↳ peak memory", "MiB", results, "peak_mib", section="building")
        if "dicts" in self.figures:
            n = self.args.dicts_n
            size = Size(n, BIG_PAYLOAD)
            made = {kind: self.call("dicts", kind, folder / f"dicts-{kind}", n=n) for kind in self.kinds}
            shutil.rmtree(folder, ignore_errors=True)
            shown = rates(made, n)
            self.add(
                size,
                f"{n:,} x 1 KiB dicts in {DICTS_APPENDS} ingest(num_workers={INGEST_WORKERS})",
                "records/s",
                shown,
                failed=failures(made),
                against="lance write_dataset(Table.from_pylist(dicts))",
                references=dict.fromkeys(self.ours, shown.get(LANCE)),
                target="≥ 1.0x Lance",
                bound=(">=", 1.0),
                section="building",
            )
            self.figure(size, "↳ peak memory", "MiB", made, "peak_mib", section="building")

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


def summary(bench: Bench) -> dict[str, Any]:
    """Everything measured so far, for ``--json``: rows, k, and every probe's spec and output."""
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        "args": {name: setting for name, setting in vars(bench.args).items() if name != "probe"},
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
    parser.add_argument("--formats", type=int, nargs="+", choices=(2, 3), default=[2, 3], help="litstore formats")
    parser.add_argument("--no-lance", dest="lance", action="store_false", help="litstore only")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader workers (dataset)")
    parser.add_argument("--batch-size", type=int, default=256, help="DataLoader and to_batches batch size")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each figure that changes nothing (best kept)")
    parser.add_argument("--build-n", type=int, default=1_000_000, help="small records built (build)")
    parser.add_argument("--dicts-n", type=int, default=200_000, help="1 KiB dict records ingested (dicts)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds after which a probe is stopped")
    parser.add_argument("--json", type=Path, default=None, help="write rows, k and raw probes to this file")
    parser.add_argument("--keep", default=None, help="build under this (new or empty) directory and keep it")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.n) < 1 or args.rounds < 1 or min(args.writes) < 1 or min(args.workers) < 0 or args.upsert_every < 0:
        parser.error("--n, --rounds and --writes must be positive, --workers and --upsert-every not negative")
    if args.build_n < 1 or args.dicts_n < DICTS_APPENDS or (args.big_records is not None and args.big_records < 1):
        parser.error(f"--build-n and --big-records must be positive, --dicts-n at least {DICTS_APPENDS}")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.probe is not None:
        run_probe(json.loads(args.probe))
        return 0
    if args.lance and importlib.util.find_spec("lance") is None:
        args.lance = False
        print("pylance is not installed: litstore only (pip install 'litstore[bench]')", file=sys.stderr)
    with workdir(args.keep, "litstore-bench-scale-") as base:
        bench = Bench(args, base)
        print(
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
            f"figures: {', '.join(bench.figures)}",
            file=sys.stderr,
        )
        steps: list[Callable[[], None]] = []
        if set(PER_SIZE) & set(bench.figures):
            sizes = [Size(n, SMALL_PAYLOAD) for n in args.n]
            sizes += [Size(args.big_records, BIG_PAYLOAD)] if args.big_records else []
            steps += [lambda size=size: bench.measure_size(size) for size in sizes]
        if {"build", "dicts"} & set(bench.figures):
            steps.append(bench.measure_building)
        for step in steps:
            step()
            if args.json:
                args.json.write_text(json.dumps(summary(bench), indent=1, default=str))
        print_report(bench)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
