"""Stores of format 1 (manifest files hold key hashes) stay readable and writable as format 1."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import hashing, layout


def _as_format_1(root: Path) -> None:
    """Rewrite a fresh store the way litstore of format 1 wrote it: key hashes in every manifest file."""
    config = root / layout.CONFIG
    document = json.loads(config.read_text())
    document["format_version"] = 1
    config.write_text(json.dumps(document))
    for path in (root / "manifests").glob("*.parquet"):
        table = pq.read_table(path)
        hashes = hashing.key_hashes(table.column("key").to_pylist())
        pq.write_table(table.add_column(1, "key_hash", pa.array(hashes, pa.uint64())), path)


def _manifest_columns(root: Path) -> list[list[str]]:
    return [pq.read_schema(path).names for path in sorted((root / "manifests").glob("*.parquet"))]


@pytest.mark.parametrize("format_version", [2, 3])
def test_new_stores_leave_key_hashes_out_of_their_files(tmp_path: Path, format_version: int) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", format_version=format_version)
    store.append([{"id": f"k{i}", "v": i} for i in range(50)])
    assert store.config.format_version == format_version
    assert all("key_hash" not in names for names in _manifest_columns(tmp_path / "s"))
    manifest = litstore.open(tmp_path / "s").manifest()
    assert manifest.column("key_hash").to_pylist() == hashing.key_hashes(manifest.column("key").to_pylist()).tolist()


def test_a_format_1_store_reads_and_keeps_writing_format_1(tmp_path: Path) -> None:
    root = tmp_path / "s"
    litstore.Store.create(root, key="id").append([{"id": f"k{i}", "v": i} for i in range(50)])
    _as_format_1(root)
    store = litstore.open(root)
    assert store.config.format_version == 1
    assert store["k7"] == {"id": "k7", "v": 7}
    store.upsert([{"id": "k7", "v": 70}, {"id": "new", "v": -1}])
    store.delete(["k8"])
    assert all("key_hash" in names for names in _manifest_columns(root))
    reopened = litstore.open(root)
    assert reopened.get_many(["k7", "new"]) == [{"id": "k7", "v": 70}, {"id": "new", "v": -1}]
    assert "k8" not in reopened
    assert reopened.verify().ok
    assert reopened.diff(1).removed.column("key").to_pylist() == ["k8"]


def test_a_format_1_store_whose_key_hashes_lie_is_read_by_its_keys(tmp_path: Path) -> None:
    """Every stored key hash replaced by another key's: readers derive hashes from the keys, so
    lookups, upserts (which find the rows they replace by key hash) and verify go by the keys."""
    root = tmp_path / "s"
    litstore.Store.create(root, key="id", chunk_bytes=256).append([{"id": f"k{i}", "v": i} for i in range(50)])
    _as_format_1(root)
    for path in (root / "manifests").glob("*.parquet"):
        table = pq.read_table(path)
        lying = hashing.key_hashes([f"k{(i + 1) % 50}" for i in range(50)])
        pq.write_table(table.set_column(1, "key_hash", pa.array(lying, pa.uint64())), path)
    store = litstore.open(root)
    assert store["k7"] == {"id": "k7", "v": 7}
    store.upsert([{"id": "k7", "v": 70}])
    store.delete(["k8"])
    reopened = litstore.open(root)
    assert sorted(reopened.keys()) == sorted(f"k{i}" for i in range(50) if i != 8)
    assert reopened.get_many(["k7", "k9"]) == [{"id": "k7", "v": 70}, {"id": "k9", "v": 9}]
    assert reopened.verify().ok
