"""Restoring: a new version whose records are exactly those of an earlier one.

:func:`commit_restore` (``Store.restore(version)``) commits, on the head, a version
that *is* the target's state: it lists the target's chunks (its split indexes copied),
the target's dead rows, the target's manifest as its checkpoint, one key run of every
record, and the target's counts, declared fields and fingerprint. Nothing is
re-encoded and no chunk is copied: the target's chunks are shared, as every version
shares its parent's.

Its delta holds what differs from the head (keys the target has and the head lacks or
holds with other content as ``added``/``replaced``, keys the head has and the target
lacks as ``deleted``), so a diff of the head and the restored version, and a rival
writer catching up with it, see exactly the keys it changed. The deletion blocks of
every chunk with dead rows are written anew in its own deletions file, so a rival
compaction planned on the head moves its rows again rather than dropping rows the
restore revived.

Races: a rival that commits first and changed any key makes the restore a
:class:`~litstore.errors.ConflictError` (planning it again would silently revert the
rival's write); a rival that changed no key (a compaction, a field addition) is
planned over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.errors import ConflictError, StorageError
from litstore.format import deletions as deletion_format
from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import DeletionRef, KeyRunRef, Version, declared_fields
from litstore.txn import keyruns
from litstore.txn.race import catch_up, commit_time, copy_indexes, put_commit_record

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

_MAX_ATTEMPTS = 20


def commit_restore(
    head: VersionReader, target: VersionReader, message: str | None = None, metadata: dict[str, Any] | None = None
) -> VersionReader:
    """Commit, on ``head``, a version with ``target``'s records, chunks, dead rows, fields and fingerprint.

    If ``head`` already holds ``target``'s records (equal fingerprints and counts), nothing
    is committed and ``head`` is returned.

    Raises:
        ConflictError: another writer changed records first; nothing was committed.
    """
    for _ in range(_MAX_ATTEMPTS):
        if (head.version.fingerprint, head.version.counts) == (target.version.fingerprint, target.version.counts):
            return head
        version, written = _write(head, target, message, metadata)
        if put_commit_record(head, version, written):  # UncertainCommitError propagates with the files kept
            return head.successor(version, target.chunks())
        for path in written:
            try:
                head.storage.delete(path)
            except StorageError:
                pass  # an unreferenced file: gc removes it
        start = head.version.number
        head, touched, _, _ = catch_up(head)
        if touched:
            raise ConflictError(
                f"another writer changed {len(touched)} records since version {start}, on which the restore of "
                f"version {target.version.number} was planned; nothing was committed. Look at the new versions, "
                "then restore again if you still want to"
            )
    raise ConflictError(f"gave up after {_MAX_ATTEMPTS} attempts to restore; nothing was committed")


def _write(
    head: VersionReader, target: VersionReader, message: str | None, metadata: dict[str, Any] | None
) -> tuple[Version, list[str]]:
    """The restored version's files and its commit record, not yet created."""
    storage, config, parent = head.storage, head.config, head.version
    number = parent.number + 1
    transaction = layout.new_transaction()
    fields = declared_fields(config, target.version)
    full = target.manifest()
    delta, replaced_keys, replaced_hashes, removed = _delta(head.manifest(), full, config.key_type, fields, number)
    written: list[str] = []
    manifest_path = layout.manifest_delta(number, transaction)
    delta_file = delta
    if config.writes_deletion_vectors:
        delta_file = manifest_format.with_old_content_hashes(delta, replaced_keys, replaced_hashes)
    storage.write(manifest_path, manifest_format.to_parquet(delta_file, key_hash=config.stores_key_hash))
    written.append(manifest_path)
    checkpoint = layout.manifest_checkpoint(number, transaction)
    storage.write(checkpoint, manifest_format.to_parquet(full, key_hash=config.stores_key_hash))
    written.append(checkpoint)
    indexes = copy_indexes(target, number, transaction)
    written.extend(indexes.values())
    refs, dead_file = _deletions(target, number, transaction)
    if dead_file is not None:
        storage.write(layout.deletions(number, transaction), dead_file)
        written.append(layout.deletions(number, transaction))
    key_runs: tuple[KeyRunRef, ...] = ()
    if config.writes_key_runs:
        key_runs, run_files = keyruns.write_runs(
            storage, number, transaction, keyruns.full_run(full), (), config.writes_key_filters
        )
        written.extend(run_files)
    listed = {chunk.filename for chunks in target.chunks().values() for chunk in chunks}
    dropped = {chunk.filename for chunks in head.chunks().values() for chunk in chunks} - listed
    changes = delta.column("change")
    version = Version(
        number=number,
        parent=parent.number,
        operation="restore",
        created_at=commit_time(parent),
        counts=dict(target.version.counts),
        fingerprint=target.version.fingerprint,
        added=int(pc.sum(pc.equal(changes, str(ChangeKind.ADDED))).as_py() or 0),
        replaced=len(replaced_keys),
        removed=removed,
        transaction=transaction,
        dropped_chunks=tuple(sorted(dropped)) if config.names_dropped_chunks_in_full else (),  # (listed in full)
        manifest=manifest_path,
        checkpoint=checkpoint,
        pending_rows=0,
        indexes=indexes,
        message=message,
        metadata={"restored_from": target.version.number, **(metadata or {})},
        fields=target.version.fields,
        key_runs=key_runs,
        deletions=refs,
    )
    return version, written


def _delta(
    parent: pa.Table, full: pa.Table, key_type: str, fields: dict[str, str], number: int
) -> tuple[pa.Table, list[Any], list[bytes], int]:
    """The delta from the ``parent`` manifest to ``full`` (the target's), the replaced keys with the parent's
    content hashes, and how many keys it deletes."""
    parent_keys = parent.column("key").combine_chunks()
    target_keys = full.column("key").combine_chunks()
    position = pc.index_in(target_keys, value_set=parent_keys)
    old = pc.take(parent.column("content_hash").combine_chunks(), position)
    same = pc.fill_null(pc.equal(full.column("content_hash").combine_chunks(), old), False)
    entering = pc.invert(same)
    rows = full.filter(entering)
    was = old.filter(entering)
    kinds = pc.if_else(pc.is_null(was), str(ChangeKind.ADDED), str(ChangeKind.REPLACED))
    target = manifest_format.held_schema(key_type, fields)
    parts = [rows.select(target.names).cast(target).append_column("change", kinds.cast(pa.string()))]
    gone = parent.filter(pc.invert(pc.is_in(parent_keys, value_set=target_keys)))
    if gone.num_rows:
        count = gone.num_rows
        keys = gone.column("key").to_pylist()
        values: dict[str, Any] = {
            "key": keys,
            "key_hash": hashing.key_hashes(keys),
            "content_hash": gone.column("content_hash").to_pylist(),
            "split": gone.column("split").to_pylist(),
            "chunk": [""] * count,
            "row": np.zeros(count, dtype=np.uint32),
        }
        values.update((name, [None] * count) for name in fields)  # deleted rows carry no field values
        table = pa.Table.from_arrays([pa.array(values[field.name], field.type) for field in target], schema=target)
        parts.append(table.append_column("change", pa.array([str(ChangeKind.DELETED)] * count, pa.string())))
    delta = pa.concat_tables(parts)
    delta = delta.append_column("version", pa.array(np.full(delta.num_rows, number, dtype=np.int64)))
    replacing = pc.is_valid(was)
    replaced_keys = rows.column("key").filter(replacing).to_pylist()
    replaced_hashes = was.filter(replacing).to_pylist()
    return (
        delta.cast(manifest_format.held_delta_schema(key_type, fields)),
        replaced_keys,
        replaced_hashes,
        gone.num_rows,
    )


def _deletions(target: VersionReader, number: int, transaction: str) -> tuple[tuple[DeletionRef, ...], bytes | None]:
    """The target's dead rows, every chunk's block written anew in version ``number``'s deletions file."""
    if not target.deletions:
        return (), None
    sizes = {chunk.filename: chunk.num_items for chunks in target.chunks().values() for chunk in chunks}
    blocks = [(ref.chunk, target.deletions.dead(ref.chunk, sizes[ref.chunk])) for ref in target.deletions.refs]
    encoded = [deletion_format.encode(rows) for _, rows in blocks]
    data, places = deletion_format.file_bytes(encoded)
    path = layout.deletions(number, transaction)
    refs = tuple(
        DeletionRef(
            chunk=name,
            path=path,
            offset=offset,
            length=length,
            dead=len(rows),
            checksum=deletion_format.checksum(name, block),
        )
        for (name, rows), block, (offset, length) in zip(blocks, encoded, places, strict=True)
    )
    return refs, data
