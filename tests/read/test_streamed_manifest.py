"""``sql()``, ``select()`` and ``keys()`` of a large version: the manifest streamed a row group at a time.

Above :data:`litstore.read.version.STREAMED_ROWS` rows a version's manifest is not
composed into one Arrow table: its files are read a row group at a time
(:func:`litstore.read.manifests.stream_manifest`) into a table DuckDB holds in bounded
memory (:func:`litstore.query.query_streamed`). Here the threshold is set to 0 so that
small stores take that path, which must answer exactly as the composed one does, never
compose the manifest, keep the sandbox, and check every row group as a whole file is
checked.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore import IntegrityError, QueryError
from litstore.format import hashing, layout
from litstore.read import version as version_module
from litstore.read.manifests import MentionedKeys
from tests.conftest import tree_state

QUERIES = [
    "SELECT * FROM manifest ORDER BY key",
    "SELECT split, count(*) AS n FROM manifest GROUP BY split ORDER BY split",
    "SELECT label, count(*) AS n, min(key) AS first FROM manifest GROUP BY label ORDER BY label",
    "SELECT a.key, b.label FROM manifest a JOIN manifest b ON a.label = b.label AND a.key < b.key ORDER BY 1, 2",
    "SELECT key FROM manifest WHERE label = (SELECT max(label) FROM manifest) ORDER BY key",
]


@pytest.fixture
def history(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """A format-3 store whose head is a checkpoint with deltas on top: appends, upserts, deletes, moves."""
    store = make_store(
        key="id", splits=litstore.HashSplit(train=0.7, val=0.3), fields={"label": int}, checkpoint_interval=3
    )
    store.append([{"id": f"k{i:04d}", "label": i % 7} for i in range(300)])
    store.upsert([{"id": f"k{i:04d}", "label": 100 + i % 3} for i in range(0, 300, 4)])
    store.delete([f"k{i:04d}" for i in range(0, 300, 5)])  # version 3: a checkpoint
    store.append([{"id": f"n{i:04d}", "label": i % 5} for i in range(50)])
    store.upsert([{"id": f"k{i:04d}", "label": 200} for i in range(1, 300, 9)])  # 7 deleted keys come back
    assert store.version.number == 5 and store.at(5).version.checkpoint is None
    return store


@pytest.fixture
def streamed(history: litstore.Store, monkeypatch: pytest.MonkeyPatch) -> litstore.Store:
    """``history``, reopened; from here on every version is streamed and composing a manifest raises."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the streamed path composed the manifest")

    monkeypatch.setattr(version_module, "STREAMED_ROWS", 0)
    monkeypatch.setattr(version_module, "compose_manifest", refuse)
    monkeypatch.setattr(version_module.VersionReader, "manifest", refuse)
    return litstore.open(history.root)


def _answers(store: litstore.Store, number: int) -> dict[str, Any]:
    snapshot = litstore.open(store.root).at(number)
    answers: dict[str, Any] = {query: snapshot.sql(query) for query in QUERIES}
    answers["select"] = snapshot.select("label < 3 OR split = 'val'")
    answers["keys"] = snapshot.keys()
    return answers


def test_both_paths_answer_alike_at_every_version(history: litstore.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Empty; deltas alone (deletions among them); a checkpoint and deltas that supersede some of its rows.
    numbers = [0, 2, 5]
    composed = {number: _answers(history, number) for number in numbers}
    monkeypatch.setattr(version_module, "STREAMED_ROWS", 0)
    for number in numbers:
        streamed = _answers(history, number)
        assert streamed.keys() == composed[number].keys()
        for name, answer in composed[number].items():
            if isinstance(answer, pa.Table):
                assert streamed[name].schema == answer.schema, name
                assert streamed[name].equals(answer), (number, name)
            else:
                assert streamed[name] == answer, (number, name)
    assert len(composed[5]["keys"]) == 300 - 60 + 7 + 50
    assert composed[5]["SELECT * FROM manifest ORDER BY key"].num_rows == len(composed[5]["keys"])


def test_the_streamed_path_never_composes_the_manifest(streamed: litstore.Store) -> None:
    store = streamed
    rows = store.sql("SELECT count(*) AS n, count(DISTINCT key) AS d FROM manifest").to_pylist()
    assert rows == [{"n": 297, "d": 297}]
    assert store.sql("SELECT count(*) AS n FROM manifest a JOIN manifest b USING (key)").to_pylist() == [{"n": 297}]
    assert store.select("label = 200") == [f"k{i:04d}" for i in range(1, 300, 9)]
    assert store.keys()[:3] == ["k0001", "k0002", "k0003"]
    with pytest.raises(QueryError, match="nope"):
        store.sql("SELECT nope FROM manifest")


def test_a_held_manifest_is_queried_in_place(history: litstore.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store = litstore.open(history.root)
    manifest = store.manifest()  # composed and held: no reason to stream it again
    monkeypatch.setattr(version_module, "STREAMED_ROWS", 0)
    monkeypatch.setattr(version_module, "consume_manifest", None)  # calling it would raise
    assert store.sql("SELECT count(*) AS n FROM manifest").to_pylist() == [{"n": manifest.num_rows}]
    assert store.keys() == sorted(manifest.column("key").to_pylist())


ESCAPES = {
    "COPY TO a file": "COPY (SELECT * FROM manifest) TO '{target}' (FORMAT csv)",
    "read the spill directory": "SELECT * FROM glob('{spill}/litstore-sql-*/*')",
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "ATTACH": "ATTACH '{target}' AS other",
    "SET temp_directory": "SET temp_directory = '{target}'",
    "SET memory_limit": "SET memory_limit = '100GB'",
    "SET enable_external_access": "SET enable_external_access = true",
    "RESET lock_configuration": "SET lock_configuration = false",
    "a Python variable": "SELECT * FROM SECRET_TABLE",
}

SECRET_TABLE = pa.table({"secret": ["a Python object in scope, not given to the query"]})


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_the_streamed_path_keeps_the_sandbox(streamed: litstore.Store, tmp_path: Path, name: str) -> None:
    target = tmp_path / "written.out"
    sql = ESCAPES[name].format(target=target, spill=tempfile.gettempdir())
    store = streamed
    before = tree_state(tmp_path)

    with pytest.raises(QueryError):
        store.sql(f"SELECT count(*) FROM manifest; {sql}")

    assert not target.exists()
    assert tree_state(tmp_path) == before
    assert not list(Path(tempfile.gettempdir()).glob("litstore-sql-*/*"))  # the spill directory is gone


def _rewritten(store: litstore.Store, change: Callable[[pa.Table], pa.Table], checkpoint: bool) -> str:
    """Rewrite the newest checkpoint (or newest delta) of ``store`` as ``change`` makes it, in row groups of 10."""
    version = store.version
    path = layout.manifest_checkpoint(3, store.at(3).version.transaction) if checkpoint else version.manifest
    assert path is not None
    file = Path(store.root) / path
    pq.write_table(change(pq.read_table(file)), file, row_group_size=10)
    return path


def _chunk_in_last_group(table: pa.Table, name: str) -> pa.Table:
    chunks = table.column("chunk").to_pylist()
    chunks[-1] = name
    return table.set_column(table.schema.get_field_index("chunk"), "chunk", pa.array(chunks, pa.string()))


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "delta"])
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda table: _chunk_in_last_group(table, "../../outside.bin"), id="a chunk outside the layout"),
        pytest.param(lambda table: table.drop_columns(["content_hash"]), id="a column missing"),
        pytest.param(
            lambda table: table.set_column(0, "key", pa.array(range(table.num_rows), pa.int64())), id="keys of ints"
        ),
    ],
)
def test_a_damaged_row_group_is_an_integrity_error(
    streamed: litstore.Store, checkpoint: bool, damage: Callable[[pa.Table], pa.Table]
) -> None:
    path = _rewritten(streamed, damage, checkpoint)
    store = litstore.open(streamed.root)
    for call in (lambda: store.sql("SELECT count(*) FROM manifest"), store.keys, lambda: store.select("label = 1")):
        with pytest.raises(IntegrityError, match=f"manifest file {path} is damaged"):
            call()


def test_key_hashes_in_a_file_are_never_believed(streamed: litstore.Store) -> None:
    """A checkpoint whose ``key_hash`` column lies (all zero): hashes are derived from the keys."""
    history = streamed
    truth = litstore.open(history.root).at(3).sql("SELECT key, key_hash FROM manifest ORDER BY key")

    def lying(table: pa.Table) -> pa.Table:
        zeros = pa.array(np.zeros(table.num_rows, dtype=np.uint64))
        if "key_hash" in table.column_names:
            return table.set_column(table.schema.get_field_index("key_hash"), "key_hash", zeros)
        return table.add_column(1, "key_hash", zeros)

    _rewritten(history, lying, checkpoint=True)
    store = litstore.open(history.root)
    assert store.at(3).sql("SELECT key, key_hash FROM manifest ORDER BY key").equals(truth)
    assert len(store.keys()) == 297  # the deltas after it still supersede its rows by key


def test_mentioned_keys_that_share_a_hash_are_told_apart_by_key() -> None:
    mentioned = MentionedKeys("str")
    # Two keys of one delta given the same hash (key hashes are derived from keys; here set by hand).
    mentioned.add([(pa.array(["a", "b"]), np.array([7, 7], dtype=np.uint64))])
    mentioned.add([(pa.array(["c"]), np.array([9], dtype=np.uint64))])
    table = pa.table(
        {
            "key": pa.array(["b", "x", "c", "y", "a"]),
            "key_hash": pa.array(np.array([7, 7, 9, 9, 7], dtype=np.uint64)),
        }
    )
    assert mentioned.marks(table).tolist() == [True, False, True, False, True]
    assert len(mentioned) == 3


def test_mentioned_int_keys() -> None:
    mentioned = MentionedKeys("int")
    keys = pa.array([5, -3, 2**62], pa.int64())
    mentioned.add([(keys, hashing.key_hash_array(keys))])
    asked = pa.array([2**62, 4, -3], pa.int64())
    table = pa.table({"key": asked, "key_hash": pa.array(hashing.key_hash_array(asked), pa.uint64())})
    assert mentioned.marks(table).tolist() == [True, False, True]
