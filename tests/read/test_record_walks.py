"""Chain walks read commit records ahead, concurrently, where each read is a round trip."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import litstore
from litstore.format import layout
from litstore.read import listings, log, manifests
from litstore.storage import Storage


class _RoundTrips:
    """Forwards every ``Storage`` call, says reads are round trips, and makes the first two commit-record
    reads wait for each other: a walk that reads records one at a time breaks the barrier."""

    concurrent_reads = 8

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self._barrier = threading.Barrier(2, timeout=10)
        self._waited = 0
        self._lock = threading.Lock()
        self.records_read: list[str] = []

    def read(self, path: str) -> bytes:
        if path.startswith(f"{layout.VERSIONS}/"):
            with self._lock:
                self.records_read.append(path)
                wait, self._waited = self._waited < 2, self._waited + 1
            if wait:
                self._barrier.wait()
        return self._inner.read(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(chunk_bytes=1024)
    for start in range(0, 120, 10):
        store.append([{"id": f"k{i:03d}", "text": "x" * 40} for i in range(start, start + 10)])
    store.delete(["k003", "k017"])
    head = store.head().version
    assert head.number == 13 and all(store.at(n).version.listed_by_delta for n in range(1, 14))
    return store


def test_a_listing_walk_reads_records_ahead_concurrently(store: litstore.Store) -> None:
    head = store.head().version
    expected = listings.read_listing(store.storage, head)
    remote = _RoundTrips(store.storage)

    assert listings.read_listing(remote, head) == expected  # type: ignore[arg-type]
    # Records 12 down to 0, read in batches of 8: nothing below 0, each read once.
    assert sorted(remote.records_read) == sorted(layout.version_record(n) for n in range(13))


def test_a_manifest_walk_reads_records_ahead_concurrently(store: litstore.Store) -> None:
    head = store.head().version
    names = set(store.storage.names(layout.MANIFESTS))
    expected = log.manifest_chain(store.storage, head, names)
    remote = _RoundTrips(store.storage)

    assert log.manifest_chain(remote, head, names) == expected  # type: ignore[arg-type]
    assert len(expected[0]) == 13 and expected[1] is None  # (deltas of versions 13 to 1, no checkpoint)
    assert manifests.compose_manifest(remote, store.config, head.number).num_rows == 118  # type: ignore[arg-type]


def test_a_walk_stops_where_the_chain_does_and_raises_only_what_it_reaches(store: litstore.Store) -> None:
    remote = _RoundTrips(store.storage)
    below = log.records_below(remote, 13)  # type: ignore[arg-type]
    first = [next(below) for _ in range(3)]
    below.close()

    assert [record.number for record in first] == [12, 11, 10]
    assert len(remote.records_read) <= 8  # one batch in flight, never the whole chain
