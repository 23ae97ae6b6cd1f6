"""Functions the S3 tests run in spawned child processes (``tests/store/test_s3.py``).

They live apart from the tests so that a spawned child imports litstore and nothing
heavier: the test module imports litdata (and so torch), seconds of start-up per child.
"""

from __future__ import annotations

import random
import traceback
from typing import Any

import litstore

Record = dict[str, Any]

#: Records each version of the reader test appends.
BATCH = 5
#: Versions the writer of the reader test may commit for each round of reads the reader finishes.
PER_ROUND = 2


def batch(number: int) -> list[Record]:
    """The records version ``number`` of the reader test appends."""
    return [{"id": f"v{number:03d}-{i}", "v": number, "i": i} for i in range(BATCH)]


def expected_at(number: int) -> dict[str, Record]:
    return {record["id"]: record for n in range(1, number + 1) for record in batch(n)}


def read_while_appending(
    url: str, options: dict[str, Any], ready: Any, done: Any, checks: Any, allowance: Any, queue: Any
) -> None:
    """Child: read versions of the store, again and again, until the writer is done.

    After each round it lets the writer commit ``PER_ROUND`` more versions (``allowance``).
    """
    try:
        store = litstore.open(url, storage_options=options)
        ready.set()
        rng = random.Random(3)
        seen: list[int] = []
        problems: list[str] = []
        while True:
            finished = done.is_set()
            latest = store.refresh().number
            for number in sorted({latest, rng.randint(0, latest)}):
                view = store.at(number)
                expected = expected_at(number)
                if view.version.number != number or len(view) != len(expected):
                    problems.append(f"version {number}: {len(view)} records, expected {len(expected)}")
                keys = sorted(expected)
                if set(view.keys()) != set(expected) or view.get_many(keys, default=None) != [
                    expected[key] for key in keys
                ]:
                    problems.append(f"version {number} does not read back its records")
                report = view.verify(expected_keys=keys)
                if not report.ok:
                    problems.append(report.summary())
                seen.append(number)
            checks.value += 1
            for _ in range(PER_ROUND):
                allowance.release()
            if finished:
                break
        queue.put(("ok", seen, problems))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        queue.put(("error", [], [traceback.format_exc()]))


def append_batches(url: str, options: dict[str, Any], name: str, batches: int, barrier: Any, queue: Any) -> None:
    """Child: append ``batches`` batches of keys only this child uses, as fast as it can."""
    try:
        store = litstore.open(url, storage_options=options)
        barrier.wait(timeout=180)
        versions = [
            store.append([{"id": f"{name}-{b:02d}-{i}", "writer": name} for i in range(4)]).number
            for b in range(batches)
        ]
        queue.put((name, versions, None))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        queue.put((name, [], traceback.format_exc()))
