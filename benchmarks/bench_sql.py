"""``sql()``, ``select()`` and ``keys()`` of a large version: composed whole, or streamed in bounded memory.

Run it with ``python benchmarks/bench_sql.py [--n 1000000 4000000] [--keep DIR]``.

For each ``N`` it builds, untimed, a format-3 store of ``N`` small records (``{"id":
"rec-%09d", "label": int, "payload": 32 bytes}``, ``label`` a declared field, written as
Arrow tables of 500,000 rows, as ``bench_scale.py`` does). Then each operation runs in a
fresh Python process, once on each path of :meth:`litstore.read.version.VersionReader.sql`
(chosen by setting ``litstore.read.version.STREAMED_ROWS``): ``composed`` (the whole
manifest as one Arrow table, registered in DuckDB) and ``streamed`` (the manifest read a
row group at a time into a DuckDB table that spills past
``litstore.query.STREAMED_MEMORY_LIMIT``). Each process reports its time (imports of
litstore, pyarrow, pandas and duckdb done before the clock starts) and its peak resident
memory (``VmHWM``, imports included).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD_STEP = 500_000
OPERATIONS = {
    "sql group by split": 'store.sql("SELECT split, count(*) AS n FROM manifest GROUP BY split")',
    "select label < 10": 'store.select("label < 10")',
    "keys()": "store.keys()",
    "self-join count": 'store.sql("SELECT count(*) FROM manifest a JOIN manifest b USING (key)")',
}

_PROBE = r"""
import json, sys, time
root, path, operation = sys.argv[1], sys.argv[2], sys.argv[3]
import duckdb, pandas, pyarrow as pa  # imports, not timed
import litstore
from litstore.read import version
version.STREAMED_ROWS = 0 if path == "streamed" else 1 << 62
start = time.perf_counter()
store = litstore.open(root)
result = eval(operation)
seconds = time.perf_counter() - start
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_mib": peak / 1024, "size": len(result)}))
"""


def build(root: Path, n: int) -> None:
    import pyarrow as pa

    import litstore

    store = litstore.Store.create(root, key="id", fields={"label": int}, format_version=3)
    for start in range(0, n, BUILD_STEP):
        stop = min(start + BUILD_STEP, n)
        store.append(
            pa.table(
                {
                    "id": [f"rec-{i:09d}" for i in range(start, stop)],
                    "label": pa.array(range(start, stop), pa.int64()),
                    "payload": pa.array([b"x" * 32] * (stop - start), pa.binary()),
                }
            )
        )


def probe(root: Path, path: str, operation: str) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root), path, operation], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--keep", type=Path, default=None, help="build under (or reuse) this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = args.keep or Path(scratch)
        for n in args.n:
            root = base / f"n{n}"
            if not (root / "litstore.json").exists():
                build(root, n)
            print(f"\nN = {n:,}")
            print(f"{'operation':<22} {'composed s':>11} {'MiB':>6} {'streamed s':>11} {'MiB':>6}")
            for name, operation in OPERATIONS.items():
                composed, streamed = probe(root, "composed", operation), probe(root, "streamed", operation)
                assert composed["size"] == streamed["size"], (name, composed, streamed)
                print(
                    f"{name:<22} {composed['seconds']:>11.2f} {composed['peak_mib']:>6.0f}"
                    f" {streamed['seconds']:>11.2f} {streamed['peak_mib']:>6.0f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
