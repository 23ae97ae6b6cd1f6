"""What each fresh process of ``bench_scale.py`` runs: one probe, given as JSON, its result printed as JSON.

Run it as ``python benchmarks/_scale_probes.py '{"op": "lookup", "kind": "litstore-3", ...}'``
(``bench_scale.py`` does). The process imports what the probe needs (numpy, pandas,
pyarrow, litstore and DuckDB, or lance; torch and litdata for ``dataset``) before the
probe starts its clock, then prints one line: the probe's figures (``seconds``, the time
the probe measured, and what else it reports), ``imports_seconds``, ``imports_mib`` (the
peak resident memory once imported) and ``peak_mib`` (``VmHWM`` at the end, imports
included). The functions ``small_block`` and ``kib_block`` are what ``Store.ingest``'s
workers run: they live at module level so that the workers can import them.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import peak_rss_bytes

SEED = 20240601
SMALL_PAYLOAD = 32
BIG_PAYLOAD = 1024
TABLE_ROWS = 500_000
TABLE_BYTES = 128 * 2**20
LOOKUPS = 10_000  # keys asked by get_many
STREAMED = 10_000  # records a dataset probe streams before reading the processes' peaks
REFERENCE_RECORDS = 10_000  # records of the store whose loader workers are the reference
SMALL_WRITE = 100  # records per append or upsert of the writes
CHANGED = 100  # random keys a change figure upserts or deletes
HOLES = 10  # the holes figure deletes one row in HOLES at random
MANY_APPENDS = 1_000  # appends of SMALL_WRITE records before compact()
INGEST_BLOCK = 1_000  # small records made per ingest input (build)
DICTS_BLOCK = 100  # 1 KiB records made per ingest input (dicts)
DICTS_APPENDS = 10
INGEST_WORKERS = 2
ITEM_HEADER = 4  # each item of a litdata chunk starts with its size (uint32); litstore hashes what follows
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


def keyed_table(numbers: list[int], payload_bytes: int, salt: str, label: int) -> Any:
    """Records of the keys ``rec-<number>`` with new content: ``label`` and payloads seeded by ``salt``."""
    import pyarrow as pa

    rng = random.Random(f"{SEED}-{salt}")
    return pa.table(
        {
            "id": [f"rec-{number:09d}" for number in numbers],
            "label": pa.array([label] * len(numbers), pa.int64()),
            "payload": pa.array([rng.randbytes(payload_bytes) for _ in numbers], pa.binary()),
        }
    )


def record_bytes(table: Any) -> int:
    """The records' own bytes: each key, an 8-byte label and the payload."""
    columns = table.to_pydict()
    return sum(len(key) + 8 + len(payload) for key, payload in zip(columns["id"], columns["payload"], strict=True))


def changed_numbers(n: int, op: str, number: int) -> list[int]:
    """The ``CHANGED`` random record numbers that round ``number`` of ``op`` touches; deletes never repeat a key."""
    if op == "upsert":
        return sorted(random.Random(f"{SEED}-upsert-{number}").sample(range(n), min(CHANGED, n)))
    picked = random.Random(f"{SEED}-delete").sample(range(n), min(CHANGED * (number + 1), n))
    return sorted(picked[CHANGED * number :])


def doomed_numbers(n: int) -> Any:
    """The record numbers the holes figure deletes: one in ``HOLES``, at random (a numpy array, sorted)."""
    import numpy as np

    return np.sort(np.random.default_rng([SEED, n, HOLES]).choice(n, n // HOLES, replace=False))


def small_block(bounds: tuple[int, int]) -> list[dict[str, Any]]:
    """The small records of one ingest input (module level: ingest workers import it)."""
    return list(record_table(*bounds, SMALL_PAYLOAD).to_pylist())


def kib_block(bounds: tuple[int, int]) -> list[dict[str, Any]]:
    """The 1 KiB records of one ingest input (module level: ingest workers import it)."""
    return list(record_table(*bounds, BIG_PAYLOAD).to_pylist())


def blocks(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(first, min(first + size, stop)) for first in range(start, stop, size)]


def lookup_key(n: int) -> str:
    return f"rec-{random.Random(SEED).randrange(max(n, 1)):09d}"


# -- probes: what each fresh process runs ----------------------------------------------------


def probe_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the store (setup): tables appended one after another, then Lance's BTREE index.

    ``holes``: then delete :func:`doomed_numbers` in one call; ``live``: leave those records
    out of the tables instead (the same live records, with no holes). ``stable_row_ids``:
    the Lance dataset keeps stable row ids (what ``delta()`` needs to report updated and
    deleted rows).
    """
    import pyarrow as pa

    root, n, payload = spec["root"], spec["n"], spec["payload"]
    step = rows_per_table(payload)
    doomed = doomed_numbers(n) if spec.get("holes") or spec.get("live") else None

    def table(first: int) -> Any:
        made = record_table(first, min(first + step, n), payload)
        if spec.get("live") and doomed is not None:
            import numpy as np

            keep = ~np.isin(np.arange(first, first + made.num_rows), doomed)
            made = made.filter(pa.array(keep))
        return made

    deleted = None
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        lance = _lance()
        stable = {"enable_stable_row_ids": True} if spec.get("stable_row_ids") else {}
        if n == 0:
            lance.write_dataset(record_table(0, 0, payload), root, **stable)
        for first in range(0, n, step):
            lance.write_dataset(table(first), root, mode="append" if first else "create", **stable)
        if n:
            lance.dataset(root).create_scalar_index("id", index_type="BTREE")
        if spec.get("holes") and doomed is not None:
            deleting = time.perf_counter()
            lance.dataset(root).delete("label IN (" + ", ".join(map(str, doomed.tolist())) + ")")
            deleted = time.perf_counter() - deleting
    else:
        store = _litstore().Store.create(root, key="id", format_version=spec["format"])
        for first in range(0, n, step):
            store.append(table(first))
        if spec.get("holes") and doomed is not None:
            keys = [f"rec-{number:09d}" for number in doomed.tolist()]
            deleting = time.perf_counter()
            store.delete(keys)
            deleted = time.perf_counter() - deleting
    return {"seconds": time.perf_counter() - start, "table_rows": step, "delete_seconds": deleted}


def probe_open(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the store and nothing else: the reference process of the change figures' memory."""
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        _lance().dataset(spec["root"])
    else:
        _litstore().open(spec["root"])
    return {"seconds": time.perf_counter() - start}


def probe_upsert(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, then upsert ``CHANGED`` random existing keys with new content (Lance: ``merge_insert`` on ``id``)."""
    n, number, root = spec["n"], spec["round"], spec["root"]
    table = keyed_table(changed_numbers(n, "upsert", number), spec["payload"], f"upsert-{number}", -1 - number)
    if spec["kind"] == LANCE:
        lance = _lance()
        start = time.perf_counter()
        dataset = lance.dataset(root)
        old = dataset.version
        stats = dataset.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(table)
        seconds = time.perf_counter() - start
        new, replaced = lance.dataset(root).version, stats["num_updated_rows"]
    else:
        start = time.perf_counter()
        store = _litstore().open(root)
        old = store.version.number
        version = store.upsert(table)
        seconds = time.perf_counter() - start
        new, replaced = version.number, version.replaced
    if replaced != table.num_rows:
        raise AssertionError(f"the upsert replaced {replaced} records, expected {table.num_rows}")
    return {"seconds": seconds, "old": old, "new": new, "records_bytes": record_bytes(table)}


def probe_delete(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, then delete ``CHANGED`` random keys (Lance: ``delete("id IN (...)")``)."""
    root = spec["root"]
    keys = [f"rec-{number:09d}" for number in changed_numbers(spec["n"], "delete", spec["round"])]
    if spec["kind"] == LANCE:
        lance = _lance()
        start = time.perf_counter()
        dataset = lance.dataset(root)
        old = dataset.version
        stats = dataset.delete("id IN (" + ", ".join(f"'{key}'" for key in keys) + ")")
        seconds = time.perf_counter() - start
        new, removed = lance.dataset(root).version, stats["num_deleted_rows"]
    else:
        start = time.perf_counter()
        store = _litstore().open(root)
        old = store.version.number
        version = store.delete(keys)
        seconds = time.perf_counter() - start
        new, removed = version.number, version.removed
    if removed != len(keys):
        raise AssertionError(f"the delete removed {removed} records, expected {len(keys)}")
    return {"seconds": seconds, "old": old, "new": new}


def probe_diff(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, then the change from version ``old`` to ``new``: ``store.diff`` (Lance: ``delta()``, its rows read)."""
    root, old, new = spec["root"], spec["old"], spec["new"]
    if spec["kind"] == LANCE:
        start = time.perf_counter()
        delta = _lance().dataset(root).delta(begin_version=old, end_version=new)
        counts = {
            "added": delta.get_inserted_rows().read_all().num_rows,
            "changed": delta.get_updated_rows().read_all().num_rows,
            "removed": delta.get_deleted_row_ids().read_all().num_rows,
        }
        seconds = time.perf_counter() - start
    else:
        start = time.perf_counter()
        diff = _litstore().open(root).diff(old, new)
        counts = {"added": diff.added.num_rows, "changed": diff.changed.num_rows, "removed": diff.removed.num_rows}
        seconds = time.perf_counter() - start
        if counts != spec["expect"]:
            raise AssertionError(f"diff {old}..{new} counted {counts}, expected {spec['expect']}")
    return {"seconds": seconds, **counts}


def probe_epoch(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, then stream one epoch: ``store.dataset()`` through a torch ``DataLoader`` (Lance: ``to_batches()``).

    ``cpu_seconds`` (the process's CPU time, all its threads) varies less than the wall
    time on a machine shared with other work; ``first_seconds``: open to the first batch.
    """
    batch_size = spec["batch_size"]
    start, cpu = time.perf_counter(), time.process_time()
    if spec["kind"] == LANCE:
        batches: Any = iter(_lance().dataset(spec["root"]).to_batches(batch_size=batch_size))
    else:
        from torch.utils.data import DataLoader

        batches = iter(DataLoader(_litstore().open(spec["root"]).dataset(), batch_size=batch_size, num_workers=0))
    streamed = batch_rows(next(batches))
    first = time.perf_counter() - start
    streamed += sum(batch_rows(batch) for batch in batches)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if streamed != spec["records"]:
        raise AssertionError(f"one epoch streamed {streamed} records, expected {spec['records']}")
    return {"seconds": seconds, "cpu_seconds": cpu, "first_seconds": first, "records": streamed}


def batch_rows(batch: Any) -> int:
    """Records in a batch: an Arrow record batch (Lance) or a collated dict of columns (a DataLoader)."""
    return int(batch.num_rows) if hasattr(batch, "num_rows") else len(batch["id"])


def probe_appends(spec: dict[str, Any]) -> dict[str, Any]:
    """``MANY_APPENDS`` appends of ``SMALL_WRITE`` records numbered from ``n`` on, in one process (setup)."""
    root, n, payload = spec["root"], spec["n"], spec["payload"]
    tables = (record_table(n + SMALL_WRITE * i, n + SMALL_WRITE * (i + 1), payload) for i in range(MANY_APPENDS))
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        lance = _lance()
        for table in tables:
            lance.write_dataset(table, root, mode="append")
    else:
        store = _litstore().open(root)
        for table in tables:
            store.append(table)
    return {"seconds": time.perf_counter() - start}


def probe_compact(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, then ``store.compact()`` (Lance: ``optimize.compact_files()``)."""
    start = time.perf_counter()
    if spec["kind"] == LANCE:
        _lance().dataset(spec["root"]).optimize.compact_files()
    else:
        _litstore().open(spec["root"]).compact()
    return {"seconds": time.perf_counter() - start}


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
    write: Callable[[Any, bool], Any]
    if spec["kind"] == LANCE:
        lance = _lance()

        def write(table: Any, appends: bool) -> Any:
            if appends:
                return lance.write_dataset(table, root, mode="append")
            upsert = lance.dataset(root).merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            return upsert.execute(table)
    else:
        store = _litstore().open(root)

        def write(table: Any, appends: bool) -> Any:
            return (store.append if appends else store.upsert)(table)

    start = time.perf_counter()
    for number in range(spec["first"], spec["last"]):
        appends = not is_upsert(number, spec["upsert_every"])
        if appends:
            write(record_table(0, SMALL_WRITE, payload, prefix=f"w{number}"), True)
        else:
            first = rng.randrange(max(n - SMALL_WRITE, 0) + 1)
            write(record_table(first, min(first + SMALL_WRITE, n), payload, label=-1 - number), False)
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
        removed = len(_litstore().open(spec["root"]).gc(dry_run=False).removed_files)
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
    "open": probe_open,
    "upsert": probe_upsert,
    "delete": probe_delete,
    "diff": probe_diff,
    "epoch": probe_epoch,
    "appends": probe_appends,
    "compact": probe_compact,
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
    modules += ["torch", "litdata"] if spec["op"] in ("dataset", "epoch") and spec["kind"] != LANCE else []
    modules += ["xxhash"] if spec["op"] == "floor" else []
    for name in modules:
        importlib.import_module(name)
    imports = {"imports_seconds": time.perf_counter() - start, "imports_mib": peak_rss_bytes() / 2**20}
    result = PROBES[spec["op"]](spec)
    print(json.dumps({**result, **imports, "peak_mib": peak_rss_bytes() / 2**20}), flush=True)


if __name__ == "__main__":
    run_probe(json.loads(sys.argv[1]))
