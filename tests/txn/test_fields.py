"""``add_fields`` (txn/fields.py): the new version keeps its parent's dead rows, and its manifest is streamed.

Field values are read from the live records the parent's manifest rows name, a row group
at a time (the manifest is never composed whole); the version committed lists the same
chunks, so it must list the same deletion vectors too, or every superseded and deleted
record would be live again in it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import litstore
from litstore.read.version import VersionReader
from tests.conftest import tree_state

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


def test_add_fields_streams_the_manifest_instead_of_composing_it(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of a checkpoint and deltas (appends, an upsert, a delete) is streamed into the new checkpoint with
    the new columns: the whole manifest is never one table, yet every record gets its own value."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048, checkpoint_interval=4)
    for start in range(0, 300, 50):
        store.append([{"id": f"b{i:03d}", "n": i, "tag": f"t{i % 3}"} for i in range(start, start + 50)])
    store.upsert([{"id": f"b{i:03d}", "n": 1000 + i, "tag": "up"} for i in range(0, 300, 7)])
    store.delete([f"b{i:03d}" for i in range(1, 300, 11)])
    expected = {key: (record["n"], record["tag"]) for key, record in store.items()}

    def composed(self: VersionReader) -> None:
        raise AssertionError("add_fields composed the whole manifest")

    monkeypatch.setattr(VersionReader, "manifest", composed)
    store.add_fields({"n": int, "tag": str})
    monkeypatch.undo()
    fresh = litstore.open(store.root)
    rows = fresh.sql("SELECT key, n, tag FROM manifest")
    found = dict(zip(rows["key"].to_pylist(), zip(rows["n"].to_pylist(), rows["tag"].to_pylist()), strict=True))
    assert found == expected
    assert fresh.verify().ok


def test_add_fields_refuses_a_damaged_record_and_commits_nothing(make_store: Callable[..., litstore.Store]) -> None:
    """Each record is checked against its row's content hash as its value is read: a damaged item fails the
    addition, naming it, and the store is left exactly as it was."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    store.append([{"id": f"c{i:03d}", "n": i} for i in range(60)])
    chunk = next(iter(store.chunks().values()))[0]
    path = Path(store.root) / chunk.filename
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last record of the chunk
    path.write_bytes(bytes(data))
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IntegrityError, match=chunk.filename):
        store.add_fields({"n": int})
    assert tree_state(Path(store.root)) == before
