"""Writing a new version in two steps: *stage* the data, then *publish* the commit.

:func:`stage` writes the change's records into a new fragment and reads them back
(every record must sit, intact, exactly once where it is said to be). It does not
depend on the parent version, so a writer that loses a commit race keeps its staged
fragment. :func:`publish` writes what does depend on the parent (the manifest delta,
the split indexes, sometimes a checkpoint), all under paths unique to this attempt,
and then creates the commit record with put-if-absent.

That order makes a crash harmless: a writer that dies before the commit record
exists leaves only files no version references (``gc`` removes them later), and a
committed version never references a file that is not complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from litstore import _litdata, hashing, layout, manifest
from litstore._litdata import ChunkInfo
from litstore.changes import MOVED, NEW, REPLACED, Change
from litstore.chunks import ChunkCache
from litstore.errors import ConflictError, IntegrityError
from litstore.models import Operation, StoreConfig, Version
from litstore.records import Batch
from litstore.storage import LocalStorage, Storage

_CHANGE_NAMES = {NEW: "added", REPLACED: "replaced", MOVED: "moved"}


@dataclass(frozen=True)
class Staged:
    """A change's records written to a fragment and checked; not yet part of any version."""

    transaction: str
    chunks: dict[str, list[ChunkInfo]]  # split -> new chunks
    record_chunks: list[str]  # chunk of each record of the change's batch, in batch order
    record_rows: np.ndarray  # row of each record inside its chunk


def new_transaction_id() -> str:
    return uuid.uuid4().hex[:20]


def stage(storage: Storage, config: StoreConfig, change: Change, progress: bool = False) -> Staged:
    """Write the change's records into a new fragment, in key-hash order per split.

    Key-hash order makes the chunks depend on the set of records, not on the order
    they came in.

    Raises:
        IntegrityError: the written chunks do not hold every record exactly once.
    """
    batch = change.batch
    transaction = new_transaction_id()
    fragment_dir = layout.fragment(transaction)
    record_chunks: list[str] = [""] * len(batch)
    record_rows = np.zeros(len(batch), dtype=np.uint32)
    new_chunks: dict[str, list[ChunkInfo]] = {}
    split_names = np.array(batch.splits, dtype=object)
    next_chunk = 0
    with storage.staging(fragment_dir) as directory:
        for split in sorted(set(batch.splits)):
            members = np.flatnonzero(split_names == split)
            order = _break_hash_ties(members[np.argsort(batch.key_hashes[members], kind="stable")], batch)
            written = _litdata.write_chunks(
                directory,
                transaction,
                fragment_dir,
                [batch.payloads[i] for i in order],
                first_chunk=next_chunk,
                chunk_bytes=config.chunk_bytes,
                progress=progress,
            )
            next_chunk += len(written)
            new_chunks[split] = written
            start = 0
            for chunk in written:
                for row, position in enumerate(order[start : start + chunk.num_items].tolist()):
                    record_chunks[position] = chunk.filename
                    record_rows[position] = row
                start += chunk.num_items
            if start != len(order):
                raise IntegrityError(f"litdata wrote {start} of {len(order)} records of split {split!r}")
        _check_landed(LocalStorage(directory), fragment_dir, batch, record_chunks, record_rows)
    return Staged(transaction, new_chunks, record_chunks, record_rows)


def publish(
    storage: Storage,
    config: StoreConfig,
    parent: Version,
    parent_chunks: dict[str, list[ChunkInfo]],
    change: Change,
    staged: Staged,
    operation: Operation,
    parent_manifest: Callable[[], pa.Table],
) -> tuple[Version, dict[str, list[ChunkInfo]]]:
    """Commit ``staged`` as version ``parent.number + 1``; returns it and its chunks.

    ``parent_manifest`` is called only when the new version is due a checkpoint: every
    ``checkpoint_interval`` versions, or when composing it would read more delta
    rows than it has live records (after large upserts and deletes, whose
    copy-on-write deltas are big), so composing any version reads at most about
    twice its live rows.

    Raises:
        ConflictError: another writer committed this version number first; the
            files this call wrote are removed again, the staged fragment is kept.
    """
    number = parent.number + 1
    transaction = staged.transaction
    delta = _delta(config, number, change, staged)
    written: list[str] = []
    manifest_path = layout.manifest_delta(number, transaction)
    storage.write(manifest_path, manifest.to_parquet(delta))
    written.append(manifest_path)

    chunks = _version_chunks(parent_chunks, staged.chunks, change.dropped_chunks)
    indexes: dict[str, str] = {}
    for split, split_chunks in chunks.items():
        if split_chunks:
            indexes[split] = layout.split_index(number, transaction, split)
            storage.write(indexes[split], _litdata.index_document(split_chunks, config.chunk_bytes))
    written.extend(indexes.values())

    counts = dict(parent.counts)
    for split, change_in_count in _count_changes(change).items():
        counts[split] = counts.get(split, 0) + change_in_count
    pending_rows = parent.pending_rows + delta.num_rows
    checkpoint_path = None
    if number % config.checkpoint_interval == 0 or pending_rows > sum(counts.values()):
        checkpoint_path = layout.manifest_checkpoint(number, transaction)
        full = manifest.compose(config.key_type, parent_manifest(), [delta])
        storage.write(checkpoint_path, manifest.to_parquet(full))
        written.append(checkpoint_path)
        pending_rows = 0
    version = Version(
        number=number,
        parent=parent.number,
        operation=operation,
        created_at=datetime.now(UTC),
        counts=counts,
        fingerprint=hashing.fingerprint_hex(int(parent.fingerprint, 16) + _fingerprint_change(change)),
        added=change.count(NEW),
        replaced=change.count(REPLACED),
        removed=len(change.deleted),
        transaction=transaction,
        fragments=(transaction,) if len(change.batch) else (),
        dropped_chunks=tuple(sorted(change.dropped_chunks)),
        manifest=manifest_path,
        checkpoint=checkpoint_path,
        pending_rows=pending_rows,
        indexes=indexes,
    )
    try:
        commit(storage, version)
    except ConflictError:
        for path in written:
            storage.delete(path)
        storage.delete_tree(layout.index_directory(number, transaction))
        raise
    return version, chunks


def discard(storage: Storage, staged: Staged) -> None:
    """Remove a staged fragment that will never be committed."""
    storage.delete_tree(layout.fragment(staged.transaction))


def commit(storage: Storage, version: Version) -> None:
    """Publish ``version`` by creating its commit record, if no one else has.

    Raises:
        ConflictError: a commit record for this number already exists.
    """
    if not storage.put_if_absent(layout.version_record(version.number), version.model_dump_json(indent=1).encode()):
        raise ConflictError(f"version {version.number} was committed by another writer first")


def _count_changes(change: Change) -> dict[str, int]:
    counts: dict[str, int] = {}
    for position in np.flatnonzero(change.kinds == NEW).tolist():
        split = change.batch.splits[position]
        counts[split] = counts.get(split, 0) + 1
    for split in change.deleted.splits:
        counts[split] = counts.get(split, 0) - 1
    return counts


def _fingerprint_change(change: Change) -> int:
    """What the change adds to the parent's fingerprint (modulo 2**128)."""
    batch = change.batch
    entering = np.flatnonzero(change.kinds != MOVED).tolist()
    return (
        hashing.fingerprint_sum([batch.keys[i] for i in entering], [batch.content_hashes[i] for i in entering])
        - hashing.fingerprint_sum(change.replaced.keys, change.replaced.content_hashes)
        - hashing.fingerprint_sum(change.deleted.keys, change.deleted.content_hashes)
    )


def _break_hash_ties(order: np.ndarray, batch: Batch) -> np.ndarray:
    """Order records that share a key hash by content, so equal input gives equal chunks."""
    hashes = batch.key_hashes[order]
    if len(hashes) < 2 or not np.any(hashes[1:] == hashes[:-1]):
        return order
    return np.array(sorted(order.tolist(), key=lambda i: (int(batch.key_hashes[i]), batch.content_hashes[i])))


def _check_landed(
    directory: Storage, fragment_dir: str, batch: Batch, record_chunks: list[str], record_rows: np.ndarray
) -> None:
    """Read the new chunks back from ``directory`` (the fragment's files, before any upload).

    Each record must sit, intact, exactly where it is said to be, and each chunk must
    hold exactly the records said to be in it.
    """
    reader = ChunkCache(directory)
    record_chunks = [chunk.removeprefix(fragment_dir + "/") for chunk in record_chunks]
    expected_rows: dict[str, int] = {}
    for chunk in record_chunks:
        expected_rows[chunk] = expected_rows.get(chunk, 0) + 1
    for chunk, count in expected_rows.items():
        stored = len(reader.offsets(chunk)) - 1
        if stored != count:
            raise IntegrityError(f"chunk {chunk} holds {stored} records, {count} were written to it")
    for position, (chunk, row) in enumerate(zip(record_chunks, record_rows.tolist())):
        if hashing.content_hash(reader.payload(chunk, row)) != batch.content_hashes[position]:
            raise IntegrityError(f"record {batch.keys[position]!r} did not land intact in chunk {chunk} row {row}")


def _delta(config: StoreConfig, number: int, change: Change, staged: Staged) -> pa.Table:
    batch, deleted = change.batch, change.deleted
    columns = {
        "key": batch.keys + deleted.keys,
        "key_hash": np.concatenate([batch.key_hashes, hashing.key_hashes(deleted.keys)]),
        "content_hash": batch.content_hashes + deleted.content_hashes,
        "split": batch.splits + deleted.splits,
        "chunk": staged.record_chunks + [""] * len(deleted),
        "row": np.concatenate([staged.record_rows, np.zeros(len(deleted), dtype=np.uint32)]),
    }
    changes = [_CHANGE_NAMES[int(kind)] for kind in change.kinds.tolist()] + ["deleted"] * len(deleted)
    return manifest.make_delta(config.key_type, number, columns, changes)


def _version_chunks(
    parent_chunks: dict[str, list[ChunkInfo]], new_chunks: dict[str, list[ChunkInfo]], dropped: frozenset[str]
) -> dict[str, list[ChunkInfo]]:
    chunks: dict[str, list[ChunkInfo]] = {}
    for split in sorted(set(parent_chunks) | set(new_chunks)):
        kept = [chunk for chunk in parent_chunks.get(split, []) if chunk.filename not in dropped]
        chunks[split] = kept + new_chunks.get(split, [])
    return chunks
