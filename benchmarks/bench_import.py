"""How long ``import litstore`` takes, and which heavy modules it pulls in.

Runs ``python -c "import litstore"`` in fresh interpreters (best of ``--rounds``) for
this checkout and, with ``--compare REV``, for another git revision checked out into
a temporary worktree, in the same run. Prints wall time and whether torch, litdata,
duckdb or boto3 were imported.

    python benchmarks/bench_import.py --compare ea9165f
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "litdata", "duckdb", "boto3")
PROBE = f"import sys, litstore, json; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"


def measure(source: Path, rounds: int) -> tuple[float, list[str]]:
    """Best wall time of ``import litstore`` from ``source`` (a ``src`` directory), and the heavy modules seen."""
    best, heavy = float("inf"), []
    for _ in range(rounds):
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-c", PROBE],
            env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
        best = min(best, time.perf_counter() - start)
        heavy = json.loads(result.stdout)
    return best, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", help="a git revision to measure too (e.g. the commit before a change)")
    args = parser.parse_args()
    rows = [("this checkout", *measure(ROOT / "src", args.rounds))]
    if args.compare:
        with tempfile.TemporaryDirectory() as scratch:
            tree = Path(scratch) / "tree"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.compare],
                check=True,
                capture_output=True,
            )
            try:
                rows.append((args.compare, *measure(tree / "src", args.rounds)))
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    print(f"import litstore, best of {args.rounds} fresh interpreters (warm file cache)")
    for name, seconds, heavy in rows:
        print(f"  {name:>16}: {seconds:6.3f} s   heavy modules imported: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
