"""Functions run in child processes by the commit tests (importable by spawned workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import litstore


def record(i: int, rev: int = 0) -> dict[str, object]:
    return {"id": f"k{i:04d}", "value": i * 10 + rev, "blob": bytes([i % 251]) * (50 + i % 30)}


def stage_range(root: str, start: int, stop: int) -> litstore.StagedFragment:
    """Open the store in this process and stage records ``start..stop``; nothing is committed."""
    return litstore.open(root).stage([record(i) for i in range(start, stop)])


def records_of_line(line: str) -> list[dict[str, object]]:
    """An ingest ``fn``: one input line ``"start:count"`` -> that many records."""
    start, count = (int(part) for part in line.split(":"))
    return [record(i) for i in range(start, start + count)]


def one_record(i: int) -> dict[str, object] | None:
    """An ingest ``fn`` returning one record (or nothing for odd inputs above 1000)."""
    return None if i > 1000 and i % 2 else record(i)


def failing_on_13(i: int) -> dict[str, object]:
    """An ingest ``fn`` that fails on input 13."""
    if i == 13:
        raise ValueError("input 13 is broken")
    return record(i)


def failing_generator(i: int) -> object:
    """An ingest ``fn`` whose generator fails half-way through input 7."""
    for j in range(3):
        if i == 7 and j == 2:
            raise OSError("shard 7 is truncated")
        yield record(i * 10 + j)


def failing_first_slow_after(line: str) -> dict[str, object]:
    """An ingest ``fn`` over ``"<directory>:<i>"``: input 0 fails, every other input leaves a file and takes 20 ms."""
    directory, number = line.rsplit(":", 1)
    if number == "0":
        raise ValueError("input 0 is broken")
    time.sleep(0.02)
    Path(directory, number).touch()
    return record(int(number))


#: The environment variable ``marked_record`` reads.
MARK = "LITSTORE_TEST_INGEST_MARK"


def marked_record(i: int) -> dict[str, object]:
    """An ingest ``fn`` recording the value of ``MARK`` in the worker's environment (``"<unset>"``: none)."""
    return {"id": f"k{i:04d}", "mark": os.environ.get(MARK, "<unset>")}


def exiting_on_7(i: int) -> dict[str, object]:
    """An ingest ``fn`` that ends its worker process on input 7, as if it were killed."""
    if i == 7:
        os._exit(1)
    return record(i)


def records_of_line_in_two_workers(line: str) -> list[dict[str, object]]:
    """``records_of_line`` over ``"<directory>:<start>:<count>"``, whose first input in each worker process waits
    until a second worker process has taken an input too: two workers each stage a fragment, however fast one
    of them is (the other takes the inputs the first holds back)."""
    directory, rest = line.split(":", 1)
    mine = Path(directory, str(os.getpid()))
    if not mine.exists():
        mine.touch()
        deadline = time.monotonic() + 120
        while len(os.listdir(directory)) < 2:
            assert time.monotonic() < deadline, "no second worker took an input"
            time.sleep(0.005)
    return records_of_line(rest)
