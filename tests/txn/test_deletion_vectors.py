"""Format 4: an upsert or delete marks the rows it supersedes dead instead of copying chunks.

- the chunk stays listed, its other rows untouched; one deletions file per commit;
- a chunk whose every row dies leaves the version's listing;
- older versions read what they read before;
- two writers marking rows of the same chunk: the one that rebases adds its marks to the winner's;
- a writer still holding a format-3 config carries the parent's deletion vectors;
- a format-3 store's upgrade only switches the format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore import txn
from litstore.format import codec, layout

Record = dict[str, Any]


def _record(key: str, rev: int = 0) -> Record:
    return {"id": key, "rev": rev, "text": f"{key}-{rev}" * 3}


def _store(root: Path, format_version: int = 4, count: int = 200) -> litstore.Store:
    store = litstore.Store.create(root, key="id", chunk_bytes=2048, format_version=format_version)
    store.append([_record(f"a{i:03d}") for i in range(count)])
    return store


def _live(store: litstore.Store) -> dict[Any, Record]:
    return dict(litstore.open(store.root).items())


def test_a_delete_marks_rows_dead_and_leaves_its_chunks_listed(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    before = store.chunks()
    version = store.delete(["a003", "a150"])
    assert store.chunks() == before and not version.dropped_chunks and not version.fragments
    assert sum(ref.dead for ref in version.deletions) == 2
    assert {ref.path for ref in version.deletions} == {layout.deletions(version.number, version.transaction or "")}
    assert "a003" not in store and store["a004"] == _record("a004")
    expected = {f"a{i:03d}": _record(f"a{i:03d}") for i in range(200) if i not in (3, 150)}
    assert _live(store) == expected and len(store) == 198
    assert dict(store.at(1).items()) == expected | {"a003": _record("a003"), "a150": _record("a150")}


def test_an_upsert_marks_the_old_row_dead_and_writes_the_new_one_in_a_fragment(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    version = store.upsert([_record("a010", 1), _record("new", 0)])
    assert (version.added, version.replaced) == (1, 1) and len(version.fragments) == 1
    assert [ref.dead for ref in version.deletions] == [1]
    assert store["a010"] == _record("a010", 1) and litstore.open(store.root)["a010"] == _record("a010", 1)
    assert store.at(1)["a010"] == _record("a010")
    live = _live(store)
    assert live["a010"] == _record("a010", 1) and len(live) == 201


def test_marks_accumulate_and_a_chunk_whose_rows_all_die_leaves_the_listing(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    head = store.head().reader
    first = next(chunk for chunks in head.chunks().values() for chunk in chunks)
    keys = [key for key, _ in store.items()][: first.num_items]  # storage order: the first chunk's records
    store.delete(keys[:2])
    assert [ref.dead for ref in store.head().reader.deletions.refs] == [2]
    store.delete(keys[2:-1])
    assert [ref.dead for ref in store.head().reader.deletions.refs] == [first.num_items - 1]
    version = store.delete(keys[-1:])
    assert version.dropped_chunks == (first.filename,) and not version.deletions
    assert first.filename not in {chunk.filename for chunks in store.chunks().values() for chunk in chunks}
    assert len(_live(store)) == 200 - first.num_items


def test_a_writer_that_lost_adds_its_marks_to_the_winners(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    behind = store.head().reader
    keys = [key for key, _ in store.items()][:4]  # all in the first chunk
    litstore.open(store.root).delete(keys[:2])  # the winner marks two rows of the chunk
    head = txn.commit(behind, txn.Delete(keys[2:]))  # planned on version 1, published on 2
    assert head.version.number == 3 and [ref.dead for ref in head.version.deletions] == [4]
    assert not set(keys) & set(_live(store)) and len(_live(store)) == 196


def test_a_writer_holding_a_format_3_config_keeps_the_parents_marks(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root, format_version=3)
    old_writer = litstore.open(root)  # holds the format-3 config
    litstore.open(root).upgrade()  # format 3 -> 7: the config switch, then a run with its key filter
    marking = litstore.open(root)
    assert marking.config.format_version == 7 and marking.version.number == 2
    marking.delete(["a001", "a100"])
    version = old_writer.delete(["a002"])  # copy-on-write of a002's chunk, on top of the marks
    assert version.dropped_chunks and version.deletions  # a001's or a100's mark stays unless its chunk moved
    live = _live(marking)
    assert not {"a001", "a002", "a100"} & set(live) and len(live) == 197
    assert litstore.open(root).verify().ok


def test_live_rows_say_which_rows_of_a_listed_chunk_hold_records(tmp_path: Path) -> None:
    """What an engine reading chunks itself needs: the rows to read, and no other."""
    store = _store(tmp_path / "s")
    store.delete(["a000", "a001"])
    snapshot = store.head()
    read = {}
    for chunks in snapshot.chunks().values():
        for chunk in chunks:
            rows = snapshot.live_rows(chunk.filename)
            assert len(rows) == chunk.num_items - snapshot.reader.deletions.dead_count(chunk.filename)
            for payload in snapshot.reader.chunk_cache.payloads(chunk.filename, rows.astype(np.int64)):
                record = codec.decode(bytes(payload))
                read[record["id"]] = record
    assert read == _live(store)
    with pytest.raises(litstore.KeyNotFoundError, match="lists no chunk"):
        snapshot.live_rows("fragments/0123456789abcdef0123/chunk-0123456789abcdef0123-0.bin")


def test_add_fields_and_a_rebuilt_index_keep_the_dead_rows_dead(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    store.delete(["a001", "a002"])
    store.upsert([_record("a003", 1)])
    expected = _live(store)
    marked = store.head().reader.deletions.refs
    store.add_fields({"rev": int})
    assert store.head().reader.deletions.refs == marked and _live(store) == expected
    store.upgrade(rebuild=True)
    assert store.version.operation == "upgrade" and store.head().reader.deletions.refs == marked
    assert _live(store) == expected and len(litstore.open(store.root)) == 198
