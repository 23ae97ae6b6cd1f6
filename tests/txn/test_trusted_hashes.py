"""Key hashes are trusted once in memory, so none may come from outside litstore's own derivation.

Found by a hostile review: a staged fragment handed to ``commit`` (pickled from another
process, or changed in memory) carried its own key hashes into the writer's key index
and duplicate check, and a manifest file whose key column had the wrong type (numbers in
a store of text keys) got hashes of other keys. Both could hide a key, list it twice or
keep a deleted record alive.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import litstore
from litstore.format import hashing


def _lying(fragment: litstore.StagedFragment, key: str) -> litstore.StagedFragment:
    """``fragment`` with every key_hash set to ``key``'s, as another process could hand it over (pickled)."""
    rows = fragment.rows
    hashes = pa.array([hashing.key_hash(key)] * rows.num_rows, pa.uint64())
    lying = dataclasses.replace(
        fragment, rows=rows.set_column(rows.schema.get_field_index("key_hash"), "key_hash", hashes)
    )
    return pickle.loads(pickle.dumps(lying))


def test_commit_of_a_fragment_with_lying_key_hashes_cannot_duplicate_a_key(tmp_path: Path) -> None:
    """Commit used to trust a fragment's key_hash; the writer's head then cannot find 'a', so append adds it twice."""
    root = str(tmp_path / "s")
    store = litstore.Store.create(root, chunk_bytes=256)
    store.append([{"id": "b", "v": 0}])
    staged = _lying(store.stage([{"id": "a", "v": 1}]), "b")
    try:
        store.commit([staged], mode="append")
    except litstore.LitstoreError:
        return  # refused: fine
    assert store["a"] == {"id": "a", "v": 1}  # the writer's own head must see what it committed
    with pytest.raises(litstore.DuplicateKeyError):
        store.append([{"id": "a", "v": 2}])
    assert not litstore.open(root).verify().duplicate_keys


def test_delete_after_a_lying_fragment_leaves_the_writers_head_right(tmp_path: Path) -> None:
    """The in-memory composition used to keep a deleted key whose held hash lied, and a checkpoint persisted it."""
    root = str(tmp_path / "s")
    store = litstore.Store.create(root, chunk_bytes=256)
    store.append([{"id": "b", "v": 0}])
    staged = _lying(store.stage([{"id": "a", "v": 1}]), "b")
    store.head().manifest()  # the writer holds its manifest: the next ones are composed in memory
    try:
        store.commit([staged], mode="append")
    except litstore.LitstoreError:
        return
    store.delete(["a"])  # writes a checkpoint composed in memory (more delta rows than records)
    fresh = litstore.open(root)
    assert "a" not in fresh
    assert sorted(store.head().keys()) == sorted(fresh.keys())


def test_one_commit_cannot_list_a_key_twice_through_lying_hashes(tmp_path: Path) -> None:
    """Plan's duplicate check used to trust staged hashes: two lying fragments could list one key twice."""
    root = str(tmp_path / "s")
    store = litstore.Store.create(root, chunk_bytes=256)
    store.append([{"id": "z", "v": 0}])
    honest = store.stage([{"id": "a", "v": 1}])
    lying = _lying(store.stage([{"id": "a", "v": 2}]), "b")
    try:
        store.commit([honest, lying], mode="append")
    except litstore.LitstoreError:
        return
    assert not litstore.open(root).verify().duplicate_keys


def _retype_keys(root: str, to_type: pa.DataType, convert: object) -> None:
    """Rewrite every manifest file of ``root`` with its key column in ``to_type`` (values that cast back equal)."""
    import os

    import pyarrow.parquet as pq

    manifests = os.path.join(root, "manifests")
    for name in os.listdir(manifests):
        if not name.endswith(".parquet"):
            continue  # key runs (format 3) hold key hashes, not keys
        path = os.path.join(manifests, name)
        table = pq.read_table(path)
        keys = pa.array([convert(key) for key in table.column("key").to_pylist()], to_type)  # type: ignore[operator]
        pq.write_table(table.set_column(table.schema.get_field_index("key"), "key", keys), path)


def test_a_planted_int_key_column_in_a_str_store_cannot_hide_a_key(tmp_path: Path) -> None:
    """from_parquet derived key_hash from the file's int64 column, then cast it to string: '5' got 5's hash."""
    root = str(tmp_path / "s")
    litstore.Store.create(root, chunk_bytes=256).append([{"id": "5", "v": "old"}])
    _retype_keys(root, pa.int64(), int)
    reader = litstore.open(root)
    try:
        listed = reader.keys()
    except litstore.IntegrityError:
        return  # refused as damaged: fine
    if "5" in listed:
        assert reader["5"] == {"id": "5", "v": "old"}  # listed, so a lookup must find it (or raise IntegrityError)


def test_a_planted_int_key_column_cannot_keep_a_replaced_record_alive(tmp_path: Path) -> None:
    """After an upsert the planted row was not removed (hash mismatch): the key streamed twice, old record too."""
    root = str(tmp_path / "s")
    litstore.Store.create(root, chunk_bytes=256).append([{"id": "5", "v": "old"}])
    _retype_keys(root, pa.int64(), int)
    try:
        litstore.open(root).upsert([{"id": "5", "v": "new"}])
        keys = litstore.open(root).keys()
    except litstore.IntegrityError:
        return
    assert keys == ["5"]


def test_a_planted_str_key_column_in_an_int_store_cannot_hide_a_key(tmp_path: Path) -> None:
    """The same with an int store whose file holds its keys as text."""
    root = str(tmp_path / "s")
    litstore.Store.create(root, key_type=int, chunk_bytes=256).append([{"id": 7, "v": "old"}])
    _retype_keys(root, pa.string(), str)
    reader = litstore.open(root)
    try:
        listed = reader.keys()
    except litstore.IntegrityError:
        return
    if 7 in listed:
        assert reader[7] == {"id": 7, "v": "old"}
