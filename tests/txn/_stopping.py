"""Ingest functions that misbehave, and a caller to run them in: imported by ingest's worker processes.

Inputs of the ``"<directory>:<i>"`` functions name a directory in which each worker
process that runs them leaves a file named after its pid, so a test can find the workers.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from pathlib import Path

import pydantic

import litstore


def _mark(line: str) -> int:
    """Leave this process's pid in the input's directory; the input's number."""
    directory, number = line.rsplit(":", 1)
    Path(directory, str(os.getpid())).touch()
    return int(number)


def hanging(line: str) -> dict[str, object]:
    """An ingest ``fn`` that never returns (until interrupted)."""
    _mark(line)
    time.sleep(3600)
    raise AssertionError("slept an hour")


def hanging_deaf(line: str) -> dict[str, object]:
    """An ingest ``fn`` that ignores Ctrl-C and never returns: only killing its process ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return hanging(line)


def slow_record(line: str) -> dict[str, object]:
    """An ingest ``fn`` taking 5 ms an input, each record 256 KiB: a worker writes a run of chunks every ~0.4 s."""
    number = _mark(line)
    time.sleep(0.005)
    return {"id": f"k{number:06d}", "blob": bytes([number % 251]) * (256 << 10)}


def exiting_on_7(i: int) -> dict[str, object]:
    """An ingest ``fn`` that calls ``sys.exit`` on input 7."""
    if i == 7:
        sys.exit(3)
    return {"id": f"k{i:04d}"}


class Fatal(BaseException):
    """A ``BaseException`` that is not an ``Exception``, as some libraries raise."""


def fatal_on_4(i: int) -> dict[str, object]:
    """An ingest ``fn`` that raises a ``BaseException`` subclass on input 4."""
    if i == 4:
        raise Fatal("input 4 is beyond repair")
    return {"id": f"k{i:04d}"}


def number_on_3(i: int) -> object:
    """An ingest ``fn`` that returns a number, not a record, for input 3."""
    return i if i == 3 else {"id": f"k{i:04d}"}


def text_on_5(i: int) -> object:
    """An ingest ``fn`` that returns a string, not a record, for input 5."""
    return "k0005" if i == 5 else {"id": f"k{i:04d}"}


def keys_on_6(i: int) -> object:
    """An ingest ``fn`` that returns a list of keys, not records, for input 6."""
    return ["k0006", "k0106"] if i == 6 else [{"id": f"k{i:04d}"}]


def main() -> None:
    """``python -c 'from tests.txn._stopping import main; main()' ROOT DIRECTORY FN COUNT``: ingest with 2 workers."""
    root, directory, name, count = sys.argv[1:]
    fn = globals()[name]
    litstore.open(root).ingest(fn, [f"{directory}:{i}" for i in range(int(count))], num_workers=2, progress=False)


class Sample(pydantic.BaseModel):
    """A schema model that reads records from any object's attributes."""

    model_config = pydantic.ConfigDict(from_attributes=True)
    id: str
    value: int


def objects_of(i: int) -> list[object]:
    """An ingest ``fn`` returning objects that only a ``from_attributes`` model takes as records."""
    return [types.SimpleNamespace(id=f"k{i:04d}", value=i)]
