"""``add_fields`` (txn/fields.py) on a format-4 store with holes: the new version keeps its parent's dead rows.

Field values are read from every live record (``items()``); the version committed lists
the same chunks, so it must list the same deletion vectors too, or every superseded
and deleted record would be live again in it.
"""

from __future__ import annotations

from collections.abc import Callable

import litstore

SPLITS = litstore.HashSplit(train=0.5, val=0.5)


def test_add_fields_on_a_store_with_holes_keeps_its_dead_rows_dead(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    store.append([{"id": f"a{i:03d}", "n": i} for i in range(80)])
    store.upsert([{"id": f"a{i:03d}", "n": -i - 1} for i in range(0, 80, 5)])
    store.delete(["a001", "a002", "a003"])
    before = dict(store.items())
    holes = store.head().reader.deletions.refs
    assert holes and len(before) == 77

    store.add_fields({"n": "int64"})
    fresh = litstore.open(store.root)
    assert fresh.version.operation == "add_fields"
    assert fresh.version.deletions == holes
    assert dict(fresh.items()) == before
    assert sorted(fresh.manifest().column("n").to_pylist()) == sorted(record["n"] for record in before.values())
    report = fresh.verify()
    assert report.ok, report.summary()


def test_add_fields_on_a_format_3_store_copies_nothing(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048, format_version=3)
    store.append([{"id": f"a{i:03d}", "n": i} for i in range(40)])
    store.upsert([{"id": f"a{i:03d}", "n": -i - 1} for i in range(0, 40, 5)])
    before = dict(store.items())
    store.add_fields({"n": "int64"})
    fresh = litstore.open(store.root)
    assert fresh.version.deletions == () and dict(fresh.items()) == before
    assert fresh.verify().ok
