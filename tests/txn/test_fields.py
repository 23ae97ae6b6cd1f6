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
from litstore.format import codec
from litstore.read.version import VersionReader
from tests.conftest import reopen, stored_state, tree_state
from tests.read.test_get_many import _swap_rows
from tests.read.test_record_check import _plant

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


@pytest.mark.parametrize("format_version", [2, 3, 4, 5, 6, 7])
def test_add_fields_checkpoint_holds_the_parent_s_rows_and_the_new_columns(
    make_any_store: Callable[..., litstore.Store], format_version: int
) -> None:
    """Every format and backend: a chain with upserts and deletes; an addition some records do not fit names
    exactly those (by key) and changes nothing; one they all fit commits the parent's rows, plus the values."""
    store = make_any_store(
        key="id", splits=SPLITS, chunk_bytes=2048, checkpoint_interval=3, format_version=format_version
    )
    for start in range(0, 240, 60):
        store.append([{"id": f"d{i:03d}", "n": i, **({"m": i} if i % 13 else {})} for i in range(start, start + 60)])
    store.upsert([{"id": f"d{i:03d}", "n": 1000 + i} for i in range(0, 240, 7)])
    store.delete([f"d{i:03d}" for i in range(1, 240, 11)])
    before, parent = stored_state(store), reopen(store).head().manifest()
    with pytest.raises(litstore.SchemaError) as caught:
        store.add_fields({"m": int})
    assert sorted(key for _, key in caught.value.culprits) == sorted(k for k, r in store.items() if "m" not in r)
    assert stored_state(store) == before
    store.add_fields({"n": int, "m": "int64?"})
    fresh = reopen(store)
    written = fresh.head().manifest()
    assert written.drop_columns(["n", "m"]).sort_by("key").equals(parent.sort_by("key"))
    expected = {key: (record["n"], record.get("m")) for key, record in fresh.items()}
    assert (
        dict(
            zip(
                written["key"].to_pylist(),
                zip(written["n"].to_pylist(), written["m"].to_pylist(), strict=True),
                strict=True,
            )
        )
        == expected
    )
    assert fresh.verify().ok


def _a_list(size: int) -> bytes:
    """A canonical payload of ``size`` bytes that is not a record: a list."""
    return next(packed for length in range(size) if len(packed := codec.encode(["x" * length])) == size)


def test_add_fields_refuses_a_committed_payload_that_is_not_a_record(make_store: Callable[..., litstore.Store]) -> None:
    """A stranger's store committed a list where a record belongs (its content hash matches): the addition fails
    with the readers' own error, naming the key, not an AttributeError; the store is left exactly as it was."""
    store = make_store(key="id", chunk_bytes=4096)
    store.append([{"id": f"k{i:03d}", "n": i, "text": "x" * (i % 30)} for i in range(300)])
    _plant(store, "k037", _a_list)
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.DamagedRecordError, match="k037"):
        litstore.open(store.root).add_fields({"n": int})
    assert tree_state(Path(store.root)) == before


def test_add_fields_never_gives_a_key_another_key_s_values(make_store: Callable[..., litstore.Store]) -> None:
    """A manifest row (and key-run entry) of key k210 points at k250's record, hash and all: a lookup of k210
    refuses it, and so does the addition, rather than commit k250's value as k210's."""
    store = make_store(key="id", chunk_bytes=4096)
    store.append([{"id": f"k{i:03d}", "n": i} for i in range(300)])
    _swap_rows(store, "k210", "k250")
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IntegrityError, match="'k210'"):
        litstore.open(store.root).add_fields({"n": int})
    assert tree_state(Path(store.root)) == before
