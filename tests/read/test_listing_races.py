"""A reader composing a format-6 listing while gc expires the versions below it.

gc writes the listing of each kept version listed by delta on one it expires, then writes
tombstones newest first and removes what only expired versions need (their listings too).
A reader that walked past a version just before gc tombstoned it meets a tombstone lower
down, where the version it stands on has no listing of its own: the walk must find the
listing gc wrote higher up instead of calling the store damaged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import litstore
from litstore.format import layout
from litstore.read.listings import read_listing
from litstore.storage import Storage


class _GcOnRead:
    """Forwards every ``Storage`` call; the first read of ``trigger`` runs ``action`` first."""

    def __init__(self, inner: Storage, trigger: str, action: Callable[[], Any]) -> None:
        self._inner = inner
        self._trigger = trigger
        self._action: Callable[[], Any] | None = action

    def read(self, path: str) -> bytes:
        if path == self._trigger and self._action is not None:
            action, self._action = self._action, None
            action()
        return self._inner.read(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_listing_walk_that_gc_cuts_below_it_reads_the_kept_versions_listing(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(chunk_bytes=1024)
    for start in range(0, 50, 10):
        store.append([{"id": f"k{i:03d}", "text": "x" * 40} for i in range(start, start + 10)])
    store.delete(["k003", "k017"])
    head = store.head()
    assert head.version.number == 6
    assert all(store.at(n).version.listed_by_delta for n in range(2, 7))
    expected = read_listing(store.storage, head.version)

    def gc() -> None:
        litstore.open(store.root).gc(dry_run=False, keep_last=1, grace=timedelta(0))

    # The walk has read records 6 and 5 (both live); gc then expires 0-5, and the walk reads 4.
    racing = _GcOnRead(store.storage, layout.version_record(4), gc)
    listing = read_listing(racing, head.version)  # type: ignore[arg-type]

    assert listing == expected
    assert [version.number for version in litstore.open(store.root).versions()] == [6]
