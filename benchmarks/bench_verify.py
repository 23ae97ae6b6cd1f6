"""verify and gc against their floors: each in a fresh process, time and peak resident memory.

Run it with ``python benchmarks/bench_verify.py [--n 200000] [--workers 0 2] [--keep DIR]``.

Builds, untimed, a store of ``N`` small records (``{"id": "rec-%09d", "label": int,
"payload": 32 bytes}``, appended as Arrow tables of 500,000 rows) and nine small writes
of 100 records after it, and, if ``pylance`` is installed, a Lance dataset of the same
writes. Then each operation runs in a fresh Python process (imports done before the
clock starts; page cache warm) and reports its wall time and its peak resident memory
(``VmHWM``, imports included), and its CPU time (worker processes included): on a
shared machine the CPU time is the steadier figure.

- ``floor``: read every chunk file the latest version lists and xxh3-128 every item's
  payload, the fastest way litstore has (:func:`litstore.format.hashing.content_hashes`):
  what any check of the data must do at least;
- ``verify``: ``store.verify()`` (and ``verify(num_workers=W)`` for each ``--workers``);
- ``gc``: ``store.gc(dry_run=False)`` with nothing to remove (every version kept, nothing older
  than the grace period);
- ``lance cleanup``: ``cleanup_old_versions()`` on the Lance dataset (nothing to
  remove either: every version is younger than its default two weeks).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD_STEP = 500_000
SMALL_WRITES = 9
PAYLOAD = b"x" * 32

_PROBE = r"""
import json, resource, sys, time
def cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
op, root, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
import pandas, pyarrow as pa  # pyarrow imports pandas on its first array anyway: an import, not timed
if op == "lance-cleanup":
    import lance
else:
    import litstore
    import numpy as np
    from litstore._litdata import chunk as chunk_layout
    from litstore.format import hashing
    from litstore.read import log
start, start_cpu = time.perf_counter(), cpu()
result = {}
if op == "lance-cleanup":
    stats = lance.dataset(root).cleanup_old_versions()
    result["removed"] = stats.old_versions
elif op == "floor":
    store = litstore.open(root)
    items = 0
    for chunks in log.read_chunks(store.storage, store.version).values():
        for chunk in chunks:
            with open(f"{root}/{chunk.filename}", "rb") as file:
                data = file.read()
            offsets = chunk_layout.item_offsets(data, chunk.filename)
            encoded = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            items += len(hashing.content_hashes(encoded, skip=4))  # litstore's fastest way, as writes hash
    result["items"] = items
elif op == "verify":
    store = litstore.open(root)
    report = store.verify(num_workers=workers) if workers else store.verify()
    assert report.ok, report.summary()
    result["records"] = report.records_checked
elif op == "gc":
    report = litstore.open(root).gc(dry_run=False)
    assert not report.removed_files, report.summary()
result["seconds"] = time.perf_counter() - start
result["cpu"] = cpu() - start_cpu  # workers' time counts once they have exited
status = open("/proc/self/status").read().splitlines()
result["peak_mib"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(json.dumps(result))
"""


def _table(start: int, stop: int, prefix: str = "rec") -> object:
    import pyarrow as pa

    return pa.table(
        {
            "id": [f"{prefix}-{i:09d}" for i in range(start, stop)],
            "label": pa.array(range(start, stop), pa.int64()),
            "payload": pa.array([PAYLOAD] * (stop - start), pa.binary()),
        }
    )


def build(root: Path, n: int, lance_too: bool) -> dict[str, str]:
    """A litstore store (and a Lance dataset) of ``n`` records, then nine writes of 100."""
    import litstore

    roots = {"litstore": str(root / "litstore")}
    store = litstore.Store.create(roots["litstore"], key="id")
    tables = [_table(start, min(start + BUILD_STEP, n)) for start in range(0, n, BUILD_STEP)]
    tables += [_table(100 * write, 100 * (write + 1), "new") for write in range(SMALL_WRITES)]
    for table in tables:
        store.append(table)
    if lance_too:
        import lance

        roots["lance"] = str(root / "lance")
        for number, table in enumerate(tables):
            lance.write_dataset(table, roots["lance"], mode="append" if number else "create")
    return roots


def probe(op: str, root: str, workers: int = 0) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, "-c", _PROBE, op, root, str(workers)], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--workers", type=int, nargs="*", default=[0, 2], help="verify's num_workers (0: serial)")
    parser.add_argument("--ops", nargs="*", default=["floor", "verify", "gc", "lance-cleanup"])
    parser.add_argument("--keep", type=Path, default=None, help="build under this directory, or reuse it")
    args = parser.parse_args()
    try:
        import lance  # noqa: F401

        lance_too = "lance-cleanup" in args.ops
    except ImportError:
        lance_too = False
        print("pylance is not installed: litstore only")
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    built = base / f"n{args.n}"
    if (built / "roots.json").exists():
        roots = json.loads((built / "roots.json").read_text())
    else:
        roots = build(built, args.n, lance_too)
        (built / "roots.json").write_text(json.dumps(roots))
    try:
        rows: list[tuple[str, dict[str, float]]] = []
        for op in args.ops:
            if op == "verify":
                rows += [(f"verify w={workers}", probe(op, roots["litstore"], workers)) for workers in args.workers]
            elif op == "lance-cleanup":
                if "lance" in roots:
                    rows.append((op, probe(op, roots["lance"])))
            else:
                rows.append((op, probe(op, roots["litstore"])))
        print(f"N = {args.n:,} records (~40 B each) + {SMALL_WRITES} writes of 100; fresh process per operation")
        floor = next((result["seconds"] for name, result in rows if name == "floor"), None)
        for name, result in rows:
            ratio = f"  {floor / result['seconds']:.2f}x floor speed" if floor and name.startswith("verify") else ""
            print(
                f"{name:<16}{result['seconds'] * 1000:>10.1f} ms wall {result['cpu'] * 1000:>10.1f} ms cpu "
                f"{result['peak_mib']:>7.0f} MiB peak{ratio}"
            )
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
