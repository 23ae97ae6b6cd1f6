"""Format-3 writes put a hashes sidecar beside every chunk they write; gc keeps and removes it with its chunk.

Every kind of write is covered: append, upsert and delete (whose copy-on-write moves
write new chunks), compaction, a staged fragment committed later, parallel
``ingest`` (marked ``integration``) and ``litstore.ray`` (in ``tests/integrations/test_ray.py``,
which has a Ray instance running). Each sidecar must
parse as its chunk's and hold exactly the content hashes the manifest committed for
the chunk's rows, in row order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import litstore
from litstore.format import chunkhashes, layout

from ._workers import records_of_line_in_two_workers

SPLITS = litstore.HashSplit(train=0.8, val=0.2)


def _record(i: int, rev: int = 0) -> dict[str, Any]:
    return {"id": f"k{i:04d}", "value": i * 10 + rev, "blob": bytes([i % 251]) * (40 + i % 30)}


def _format3(make_store: Callable[..., litstore.Store], **options: Any) -> litstore.Store:
    return make_store(key="id", splits=SPLITS, chunk_bytes=2048, format_version=3, **options)


def _assert_hashes_match_manifest(store: litstore.Store) -> int:
    """Every chunk of every version has a sidecar holding its rows' committed content hashes; how many chunks."""
    seen = 0
    for version in store.versions():
        snapshot = store.at(version.number)
        manifest = snapshot.manifest()
        for chunks in snapshot.chunks().values():
            for chunk in chunks:
                data = Path(store.root, layout.chunk_hashes(chunk.filename)).read_bytes()
                hashes = chunkhashes.parse(chunk.filename, data, chunk.num_items)
                rows = manifest.filter(pc.equal(manifest.column("chunk").cast(pa.string()), chunk.filename))
                order = np.argsort(rows.column("row").to_numpy())
                assert rows.column("row").to_numpy()[order].tolist() == list(range(chunk.num_items))
                committed = b"".join(rows.column("content_hash").take(pa.array(order)).to_pylist())
                assert bytes(hashes) == committed, chunk.filename
                seen += 1
    return seen


def _chunk_files(root: str | Path) -> tuple[set[str], set[str]]:
    """The chunks and the sidecars under ``root/fragments``, each without its suffix."""
    bins, sidecars = set(), set()
    for path in Path(root, layout.FRAGMENTS).rglob("chunk-*"):
        (bins if path.suffix == ".bin" else sidecars).add(str(path.with_suffix("")))
    return bins, sidecars


def test_every_write_kind_writes_a_sidecar_for_each_chunk(make_store: Callable[..., litstore.Store]) -> None:
    store = _format3(make_store)
    store.append([_record(i) for i in range(300)])
    store.upsert([_record(i, rev=1) for i in range(0, 300, 7)] + [_record(i) for i in range(300, 340)])
    store.delete([f"k{i:04d}" for i in range(1, 340, 9)])
    staged = store.stage([_record(i) for i in range(400, 430)])
    store.commit([staged])
    store.compact()
    kinds = [version.operation for version in store.versions()[1:]]
    assert [str(kind) for kind in kinds] == ["append", "upsert", "delete", "append", "compact"]
    assert any(version.dropped_chunks for version in store.versions()), "no write moved records"
    assert _assert_hashes_match_manifest(store) >= 20
    bins, sidecars = _chunk_files(store.root)
    assert bins == sidecars, "a chunk without its sidecar, or a sidecar without its chunk"


def test_format_2_writes_no_sidecars(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048, format_version=2)
    store.append([_record(i) for i in range(100)])
    store.delete(["k0003"])
    bins, sidecars = _chunk_files(store.root)
    assert bins and not sidecars


def test_write_chunk_hashes_gives_an_old_chunk_its_sidecar(make_store: Callable[..., litstore.Store]) -> None:
    """What an upgrade uses: a sidecar written afterwards for a committed chunk, from the manifest's hashes."""
    store = _format3(make_store)
    store.append([_record(i) for i in range(50)])
    chunk = store.chunks()["train"][0]
    sidecar = Path(store.root, layout.chunk_hashes(chunk.filename))
    written = sidecar.read_bytes()
    sidecar.unlink()
    manifest = store.manifest()
    rows = manifest.filter(pc.equal(manifest.column("chunk").cast(pa.string()), chunk.filename))
    hashes = b"".join(rows.sort_by("row").column("content_hash").to_pylist())
    assert litstore.txn.write_chunk_hashes(store.storage, chunk.filename, hashes) == layout.chunk_hashes(chunk.filename)
    assert sidecar.read_bytes() == written


def test_layout_names_sidecars_as_the_stores_own_files() -> None:
    fragment = "0123456789abcdef0123"
    chunk = layout.chunk(fragment, 4)
    sidecar = layout.chunk_hashes(chunk)
    assert sidecar == f"fragments/{fragment}/chunk-{fragment}-4.hashes"
    assert layout.is_own_file(sidecar) and layout.is_chunk_file(sidecar) and layout.is_chunk_file(chunk)
    assert not layout.is_chunk(sidecar)
    other = "fedcba9876543210fedc"
    assert not layout.is_chunk_file(f"fragments/{fragment}/chunk-{other}-4.hashes"), "another fragment's name"
    with pytest.raises(ValueError, match="not a chunk path"):
        layout.chunk_hashes(f"fragments/{fragment}/lease-{other}.json")


def test_gc_removes_sidecars_with_their_chunks_and_keeps_live_ones(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = _format3(make_store)
    store.append([_record(i) for i in range(200)])
    store.delete([f"k{i:04d}" for i in range(0, 200, 3)])  # drops chunks, moves their live records
    dropped = {name for version in store.versions() for name in version.dropped_chunks}
    assert dropped
    report = store.gc(dry_run=False, keep_last=1, grace=timedelta(0))
    removed = set(report.removed_files)
    assert {layout.chunk_hashes(name) for name in dropped} <= removed
    assert dropped <= removed
    bins, sidecars = _chunk_files(store.root)
    assert bins == sidecars
    assert _assert_hashes_match_manifest(store)
    assert store.verify().ok


def test_gc_removes_a_dead_fragments_sidecars(make_store: Callable[..., litstore.Store]) -> None:
    store = _format3(make_store)
    store.append([_record(i) for i in range(20)])
    staged = store.stage([_record(i) for i in range(100, 140)])  # never committed
    prefix = Path(store.root, layout.fragment(staged.transaction))
    assert any(path.suffix == ".hashes" for path in prefix.iterdir())
    report = store.gc(dry_run=False, grace=timedelta(0), break_leases=True)
    assert not any(path.endswith(".bin") or path.endswith(".hashes") for path in map(str, _walk(prefix)))
    assert any(path.endswith(".hashes") for path in report.removed_files)


def _walk(directory: Path) -> list[Path]:
    return [Path(folder, name) for folder, _, names in os.walk(directory) for name in names]


def test_a_staged_fragment_with_sidecars_commits_after_gc_left_it(
    make_store: Callable[..., litstore.Store],
) -> None:
    """The lease and presence checks of a commit see the sidecars as the fragment's files, not as strangers."""
    store = _format3(make_store)
    staged = store.stage([_record(i) for i in range(60)])
    store.gc(dry_run=False, grace=timedelta(0))  # the lease holds: nothing of the fragment goes
    store.commit([staged])
    assert _assert_hashes_match_manifest(store)


@pytest.mark.integration
def test_parallel_ingest_writes_sidecars(make_store: Callable[..., litstore.Store], tmp_path: Path) -> None:
    store = _format3(make_store)
    (tmp_path / "workers").mkdir()
    lines = [f"{tmp_path / 'workers'}:{start}:50" for start in range(0, 400, 50)]
    store.ingest(records_of_line_in_two_workers, lines, num_workers=2, progress=False)
    assert len(store.version.fragments) >= 2
    assert _assert_hashes_match_manifest(store) >= 4
    bins, sidecars = _chunk_files(store.root)
    assert bins == sidecars
