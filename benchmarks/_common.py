"""Helpers shared by the benchmark scripts (run them as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import gc
import resource
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@contextmanager
def workdir(keep: str | None, prefix: str = "litstore-bench-") -> Iterator[Path]:
    """A scratch directory: a temporary one, or ``keep`` (which must be empty) to look at afterwards."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as directory:
            yield Path(directory)
        return
    path = Path(keep)
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"--keep {keep}: directory exists and is not empty")
    path.mkdir(parents=True, exist_ok=True)
    yield path


def cpu_seconds() -> float:
    """CPU time (user + system) of this process (all threads) and of its children that have exited."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds and CPU seconds (this process and its reaped children) of one action."""

    wall: float
    cpu: float

    def __add__(self, other: Timing) -> Timing:
        return Timing(self.wall + other.wall, self.cpu + other.cpu)


def timed(action: Callable[[], Any]) -> tuple[Timing, Any]:
    """The timing of ``action`` and its result; garbage is collected first, outside the timing."""
    gc.collect()
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = action()
    return Timing(time.perf_counter() - wall, cpu_seconds() - cpu), result


def total(timings: Sequence[Timing]) -> Timing:
    return sum(timings, Timing(0.0, 0.0))


def peak_rss_bytes(pid: int | None = None) -> int:
    """The peak resident memory (VmHWM), in bytes, of this process or of the live process ``pid``."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dir_bytes(path: Path) -> int:
    """Bytes of all files under ``path`` (symlinks not followed)."""
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file() and not file.is_symlink())


def mib(size: float) -> str:
    return f"{size / 2**20:,.1f} MiB"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    line = "  ".join(f"{{:<{width}}}" for width in widths)
    print(line.format(*header))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line.format(*row))


def print_markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A GitHub markdown table (pipes in cells escaped), ready to paste into the README."""
    for cells in (header, ["---"] * len(header), *rows):
        print("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |")


def kept_litstore(size_dir: Path) -> str:
    """The name (``litstore-<format>``) of the newest-format litstore store ``bench_scale.py --keep`` left in
    ``size_dir`` (``n<N>-32``): the scripts that reuse kept stores follow the format bench_scale builds."""
    kinds = [path.name for path in size_dir.glob("litstore-*") if path.name.removeprefix("litstore-").isdigit()]
    if not kinds:
        raise SystemExit(f"no litstore store in {size_dir}: build one with bench_scale.py --keep")
    return max(kinds, key=lambda name: int(name.removeprefix("litstore-")))


def compile_litstore() -> None:
    """Write the bytecode of litstore's modules (and of these scripts), as an installed package has it.

    A package pip installs from PyPI comes compiled; an editable install run under
    ``PYTHONDONTWRITEBYTECODE`` (containers, CI images) compiles every module again in
    every fresh process, about 0.2 s that would count against litstore in each probe's
    imports and, inside the clock, in every fork server an ingest starts.
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("litstore")
    folders = [*(spec.submodule_search_locations or [] if spec else []), str(Path(__file__).parent)]
    for folder in folders:
        compileall.compile_dir(folder, quiet=1)
