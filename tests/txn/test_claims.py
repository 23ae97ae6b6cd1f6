"""Turns for writers that keep losing: the advisory claim orders writers, never blocks them for long."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import litstore
from litstore.format import layout
from litstore.txn import claims

from ._workers import record


def _plant(root: Path, owner: str, age: float) -> None:
    (root / layout.TURN).write_text(json.dumps({"owner": owner, "at": time.time() - age}))


def test_a_fresh_claim_by_another_writer_holds_a_commit_back_at_most_its_time_to_live(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id")
    root = Path(store.root)
    _plant(root, "another-writer", age=0.0)
    start = time.monotonic()
    version = store.append([record(1)])
    waited = time.monotonic() - start
    assert version.number == 1 and store["k0001"] == record(1)
    assert 0.5 * claims.CLAIM_TTL <= waited < claims.CLAIM_TTL + 5


def test_an_expired_or_damaged_claim_orders_nobody(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    root = Path(store.root)
    plants = (
        lambda: _plant(root, "a-dead-writer", age=60.0),
        lambda: (root / layout.TURN).write_text("{oops"),
        lambda: _plant(root, "a-writer-from-the-future", age=-3600.0),
        lambda: (root / layout.TURN).write_text('{"owner": "x", "at": NaN}'),
    )
    for plant in plants:
        plant()
        start = time.monotonic()
        store.append([record(store.version.number + 10)])
        assert time.monotonic() - start < 0.5 * claims.CLAIM_TTL


def test_a_claim_is_taken_over_once_expired_and_released_by_its_owner(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id")
    storage = store.storage
    _plant(Path(store.root), "a-dead-writer", age=60.0)
    assert claims.claim(storage, "me")
    assert not claims.claim(storage, "someone-else")
    claims.release(storage, "someone-else")  # not theirs: stays
    assert json.loads(storage.read(layout.TURN))["owner"] == "me"
    claims.release(storage, "me")
    assert not storage.exists(layout.TURN)


def test_gc_removes_a_claim_left_behind(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([record(1)])
    _plant(Path(store.root), "a-dead-writer", age=0.0)
    assert layout.TURN not in store.gc(dry_run=False).removed_files  # younger than the grace period
    assert layout.TURN in store.gc(dry_run=False, grace=timedelta(0)).removed_files
