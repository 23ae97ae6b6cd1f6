"""Stores and snapshots pickle (Ray tasks, spawned workers, HF ``from_generator``): they come back opened again.

A :class:`~litstore.Snapshot` comes back pinned to its version, a :class:`~litstore.Store`
at the newest version of its root, with the same storage options and schema.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pydantic
import pytest

import litstore


class Pet(pydantic.BaseModel):
    id: str
    label: int


def _records(start: int, count: int) -> list[dict[str, object]]:
    return [{"id": f"k{i:03d}", "label": i} for i in range(start, start + count)]


def test_a_snapshot_comes_back_pinned_to_its_version(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    store.append(_records(0, 10))
    snapshot = store.head()
    snapshot["k001"]  # its caches (a lock among them) are built
    store.upsert([{"id": "k001", "label": -1}])
    back = pickle.loads(pickle.dumps(snapshot))
    assert back is not snapshot and back.version == snapshot.version == 1
    assert back["k001"] == {"id": "k001", "label": 1} and len(back) == 10
    assert dict(back.items()) == dict(snapshot.items())
    older = pickle.loads(pickle.dumps(store.at(0)))
    assert older.version == 0 and len(older) == 0


def test_a_store_comes_back_at_its_newest_version_and_writes(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    store.append(_records(0, 5))
    store.head().get_many(["k000", "k004"])
    data = pickle.dumps(store)
    store.append(_records(5, 5))  # committed after pickling: the unpickled store sees it
    back = pickle.loads(data)
    assert isinstance(back, litstore.Store) and back.version == 2 and len(back) == 10
    back.append(_records(10, 1))
    assert store.refresh() == 3 and store["k010"] == {"id": "k010", "label": 10}


def test_a_store_keeps_its_schema_through_pickling(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", schema=Pet)
    store.append([Pet(id="a", label=1)])
    back = pickle.loads(pickle.dumps(store))
    back.append([Pet(id="b", label=2)])  # a store with a schema writes only when opened with it
    assert pickle.loads(pickle.dumps(back.head())).model is Pet


def test_a_snapshot_whose_version_gc_expired_says_so(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append(_records(0, 3))
    data = pickle.dumps(store.head())
    store.append(_records(3, 3))
    store.gc(keep_last=1, grace=timedelta(0), dry_run=False)
    with pytest.raises(litstore.VersionNotFoundError, match="the oldest version kept is 2"):
        pickle.loads(data)


def test_a_snapshot_of_a_store_made_again_at_its_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id")
    store.append(_records(0, 3))
    data = pickle.dumps(store.head())
    for path in sorted(root.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    root.rmdir()
    again = litstore.Store.create(root, key="id")
    again.append(_records(5, 3))  # a version 1, of another commit
    with pytest.raises(litstore.VersionNotFoundError, match="another commit than the one pickled"):
        pickle.loads(data)


def _count_in_child(snapshot: litstore.Snapshot, store: litstore.Store) -> tuple[int, int, object]:
    return len(snapshot), len(store), snapshot["k002"]


@pytest.mark.integration
def test_a_spawned_worker_reads_what_it_was_handed(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append(_records(0, 4))
    snapshot = store.head()
    store.append(_records(4, 4))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        counted = pool.apply(_count_in_child, (snapshot, store))
    assert counted == (4, 8, {"id": "k002", "label": 2})
