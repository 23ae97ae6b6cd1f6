"""A checkpoint that a newer rewrite superseded is read only for its keys, and the manifest is the same.

After an upsert or delete that moved every record (copy-on-write), the newest delta
mentions every key, so no row of the checkpoint below it survives. Composing then
reads only the checkpoint's key column to learn so, and skips its row groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import litstore
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.read import log


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    names = ["key", "key_hash", "content_hash", "split", "chunk", "row"]
    return sorted(zip(*(table.column(name).to_pylist() for name in names), strict=True))


@pytest.fixture
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_format, "_SLICE_ROWS", 16)  # files of many row groups from few records


def test_a_superseded_checkpoint_is_skipped_and_the_manifest_is_unchanged(
    tmp_path: Path, small_row_groups: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    # Format 3: copy-on-write, so version 3 supersedes every row of the checkpoint.
    store = litstore.Store.create(root, key="id", chunk_bytes=1 << 20, checkpoint_interval=2, format_version=3)
    store.append([{"id": f"k{i:03d}", "v": i} for i in range(200)])
    store.upsert([{"id": "k001", "v": -1}])  # version 2: a checkpoint (interval 2), one chunk rewritten
    # Version 3 touches both chunks (k001's own and the moved rest): every row is rewritten or moved.
    store.upsert([{"id": "k001", "v": -11}, {"id": "k002", "v": -2}])
    expected = _rows(store.manifest())
    assert store.head().version.total == 200

    reads: list[Any] = []
    original = manifest_format.from_parquet

    def recording(data: bytes, path: str, *args: Any) -> pa.Table:
        reads.append((path, args[-1] if len(args) == 4 else None))
        return original(data, path, *args)

    monkeypatch.setattr(manifest_format, "from_parquet", recording)
    fresh = litstore.open(root)
    assert _rows(fresh.manifest()) == expected
    checkpoint_reads = [groups for path, groups in reads if path.endswith(".checkpoint.parquet")]
    assert checkpoint_reads == [[]], "the superseded checkpoint was read whole"
    assert fresh["k001"] == {"id": "k001", "v": -11} and fresh["k002"] == {"id": "k002", "v": -2}
    assert fresh.verify().ok


def test_only_row_groups_of_superseded_rows_are_skipped(tmp_path: Path, small_row_groups: None) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=1 << 20, checkpoint_interval=2)
    store.append([{"id": f"k{i:03d}", "v": i} for i in range(100)])
    store.upsert([{"id": "k001", "v": -1}])  # version 2: a checkpoint of 100 rows, in row groups of 16
    head = store.head()
    path = log.checkpoint_of(head.version, set(head.storage.names(layout.MANIFESTS)))
    assert path is not None
    whole = log.read_manifest_file(head.storage, head.config, path, delta=False)
    keys = whole.column("key").to_pylist()
    gone = set(keys[:32]) | {keys[40]}  # the first two row groups whole, one row of the third

    def superseded(table: pa.Table) -> np.ndarray:
        return np.array([key in gone for key in table.column("key").to_pylist()], dtype=bool)

    part = log.read_manifest_file(head.storage, head.config, path, delta=False, superseded=superseded)
    assert _rows(part) == _rows(whole.slice(32))  # the third group is read whole; the caller drops its row
