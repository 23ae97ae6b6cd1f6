"""Writing one new version: chunks, self-check, manifest delta, split indexes, commit.

The order is what makes a crash harmless: everything a version references is
written before its commit record, and the commit record is created with
put-if-absent. A writer that dies earlier leaves only files no version references
(``gc`` removes them); a writer that loses the race to another writer commits
nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from litstore import _litdata, hashing, layout, manifest
from litstore._litdata import ChunkInfo
from litstore.chunks import ChunkCache
from litstore.errors import ConflictError, IntegrityError
from litstore.models import Operation, StoreConfig, Version
from litstore.changes import MOVED, NEW, REPLACED, Change, Removal
from litstore.records import Batch
from litstore.storage import LocalStorage


@dataclass(frozen=True)
class Written:
    """What a committed write produced, for the caller to update its in-memory state."""

    version: Version
    chunks: dict[str, list[ChunkInfo]]  # split -> chunks of the new version
    record_chunks: list[str]  # chunk of each record of the change's batch, in batch order
    record_rows: np.ndarray  # row of each batch record inside its chunk


def new_fragment_id() -> str:
    return uuid.uuid4().hex[:20]


def write_version(
    storage: LocalStorage,
    config: StoreConfig,
    parent: Version,
    parent_chunks: dict[str, list[ChunkInfo]],
    change: Change,
    operation: Operation,
    parent_manifest: pa.Table | None = None,
) -> Written:
    """Write ``change`` as version ``parent.number + 1`` and commit it.

    Records of each split are written in key-hash order, so the chunks depend on
    the set of records, not on the order they came in. ``parent_manifest`` is
    needed only when this version is due a manifest checkpoint.

    Raises:
        IntegrityError: the written chunks do not hold every record exactly once.
        ConflictError: another writer committed this version number first.
    """
    batch = change.batch
    number = parent.number + 1
    fragment = new_fragment_id()
    fragment_dir = layout.fragment(fragment)
    record_chunks: list[str] = [""] * len(batch)
    record_rows = np.zeros(len(batch), dtype=np.uint32)
    new_chunks: dict[str, list[ChunkInfo]] = {}
    split_names = np.array(batch.splits, dtype=object)
    next_chunk = 0
    for split in sorted(set(batch.splits)):
        members = np.flatnonzero(split_names == split)
        order = members[np.argsort(batch.key_hashes[members], kind="stable")]
        order = _break_hash_ties(order, batch)
        written = _litdata.write_chunks(
            storage.make_directory(fragment_dir),
            fragment,
            fragment_dir,
            [batch.payloads[i] for i in order],
            first_chunk=next_chunk,
            chunk_bytes=config.chunk_bytes,
        )
        next_chunk += len(written)
        new_chunks[split] = written
        start = 0
        for chunk in written:
            for row, position in enumerate(order[start : start + chunk.num_items]):
                record_chunks[position] = chunk.filename
                record_rows[position] = row
            start += chunk.num_items
        if start != len(order):
            raise IntegrityError(f"litdata wrote {start} of {len(order)} records of split {split!r}")
    _check_landed(storage, batch, record_chunks, record_rows)

    delta = _delta(config, number, batch, record_chunks, record_rows, change.deleted)
    manifest_path = layout.manifest_delta(number)
    storage.write(manifest_path, manifest.to_parquet(delta))

    chunks = _version_chunks(parent_chunks, new_chunks, change.dropped_chunks)
    for split, split_chunks in chunks.items():
        if split_chunks:
            storage.write(layout.split_index(number, split), _litdata.index_document(split_chunks, config.chunk_bytes))

    checkpoint_path = None
    if number % config.checkpoint_interval == 0 and parent_manifest is not None:
        checkpoint_path = layout.manifest_checkpoint(number)
        full = manifest.compose(config.key_type, parent_manifest, [delta])
        storage.write(checkpoint_path, manifest.to_parquet(full))

    counts = dict(parent.counts)
    entering = np.flatnonzero(change.kinds != MOVED).tolist()
    for position in np.flatnonzero(change.kinds == NEW).tolist():
        counts[batch.splits[position]] = counts.get(batch.splits[position], 0) + 1
    for split in change.deleted.splits:
        counts[split] -= 1
    fingerprint = (
        int(parent.fingerprint, 16)
        + hashing.fingerprint_sum([batch.keys[i] for i in entering], [batch.content_hashes[i] for i in entering])
        - hashing.fingerprint_sum(change.replaced.keys, change.replaced.content_hashes)
        - hashing.fingerprint_sum(change.deleted.keys, change.deleted.content_hashes)
    )
    version = Version(
        number=number,
        parent=parent.number,
        operation=operation,
        created_at=datetime.now(timezone.utc),
        counts=counts,
        fingerprint=hashing.fingerprint_hex(fingerprint),
        added=change.count(NEW),
        replaced=change.count(REPLACED),
        removed=len(change.deleted),
        fragments=(fragment,) if len(batch) else (),
        manifest=manifest_path,
        checkpoint=checkpoint_path,
    )
    commit(storage, version)
    return Written(version, chunks, record_chunks, record_rows)


def commit(storage: LocalStorage, version: Version) -> None:
    """Publish ``version`` by creating its commit record, if no one else has.

    Raises:
        ConflictError: a commit record for this number already exists.
    """
    if not storage.put_if_absent(layout.version_record(version.number), version.model_dump_json(indent=1).encode()):
        raise ConflictError(
            f"version {version.number} was committed by another writer first; nothing was committed. "
            "Reopen the store and retry."
        )


def _break_hash_ties(order: np.ndarray, batch: Batch) -> np.ndarray:
    """Order records that share a key hash by content, so equal input gives equal chunks."""
    hashes = batch.key_hashes[order]
    if len(hashes) < 2 or not np.any(hashes[1:] == hashes[:-1]):
        return order
    return np.array(sorted(order, key=lambda i: (int(batch.key_hashes[i]), batch.content_hashes[i])))


def _check_landed(storage: LocalStorage, batch: Batch, record_chunks: list[str], record_rows: np.ndarray) -> None:
    """Read the new chunks back: each record must sit, intact, exactly where it is said to be."""
    reader = ChunkCache(storage)
    expected_rows: dict[str, int] = {}
    for chunk in record_chunks:
        expected_rows[chunk] = expected_rows.get(chunk, 0) + 1
    for chunk, count in expected_rows.items():
        stored = len(reader.offsets(chunk)) - 1
        if stored != count:
            raise IntegrityError(f"chunk {chunk} holds {stored} records, {count} were written to it")
    for position, (chunk, row) in enumerate(zip(record_chunks, record_rows)):
        if hashing.content_hash(reader.payload(chunk, int(row))) != batch.content_hashes[position]:
            raise IntegrityError(f"record {batch.keys[position]!r} did not land intact in chunk {chunk} row {row}")


def _delta(
    config: StoreConfig,
    number: int,
    batch: Batch,
    record_chunks: list[str],
    record_rows: np.ndarray,
    deleted: Removal,
) -> pa.Table:
    columns = {
        "key": list(batch.keys),
        "key_hash": batch.key_hashes,
        "content_hash": list(batch.content_hashes),
        "split": list(batch.splits),
        "chunk": record_chunks,
        "row": record_rows,
    }
    added = manifest.make_delta(config.key_type, number, columns)
    if not len(deleted):
        return added
    removed_columns = {
        "key": deleted.keys,
        "key_hash": hashing.key_hashes(deleted.keys),
        "content_hash": deleted.content_hashes,
        "split": deleted.splits,
        "chunk": [""] * len(deleted),
        "row": np.zeros(len(deleted), dtype=np.uint32),
    }
    removed = manifest.make_delta(config.key_type, number, removed_columns, deleted=[True] * len(deleted))
    return pa.concat_tables([removed, added])


def _version_chunks(
    parent_chunks: dict[str, list[ChunkInfo]], new_chunks: dict[str, list[ChunkInfo]], dropped: frozenset[str]
) -> dict[str, list[ChunkInfo]]:
    chunks: dict[str, list[ChunkInfo]] = {}
    for split in sorted(set(parent_chunks) | set(new_chunks)):
        kept = [chunk for chunk in parent_chunks.get(split, []) if chunk.filename not in dropped]
        chunks[split] = kept + new_chunks.get(split, [])
    return chunks
