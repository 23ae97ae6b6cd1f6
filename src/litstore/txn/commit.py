"""Committing: publishing staged fragments as one new version, over any number of racing writers.

:func:`commit` plans the version against the newest head (:mod:`.plan`), copies
the live rows of chunks it drops into a new fragment, then :func:`publish` writes
what depends on the parent (the manifest delta, the split indexes, sometimes a
checkpoint) under paths unique to this attempt and creates the commit record with
put-if-absent. Its creation *is* the commit.

Losing the race to another writer: catch up with the winners. If they added,
replaced or deleted any key this commit touches, raise :class:`ConflictError` and
commit nothing. If they dropped a chunk this commit also drops or marks rows of,
or marked rows dead in a chunk this commit rewrites (a compaction), plan the change
again. Otherwise publish the same staged files on the new head, after a jittered,
growing pause (so writers in a loop do not starve one another).

A crash is harmless at any point: before the commit record exists, nothing
references the new files (``gc`` removes them later); after it, the version is
complete. A commit record whose response was lost (S3 retried the PUT and got
"exists") is recognised by its transaction id, never cleaned up as a loser's; if it
cannot be read back, :class:`~litstore.errors.UncertainCommitError` says so and nothing
the record may name (the new files, the moved rows, the staged fragments) is removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore import query
from litstore._litdata.index import ChunkInfo, index_document
from litstore.errors import (
    ConflictError,
    InvalidArgumentError,
    StagedFragmentExpiredError,
    StorageError,
    UncertainCommitError,
)
from litstore.format import deletions as deletion_format
from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import (
    DeletionRef,
    KeyRunRef,
    Operation,
    Version,
    check_message,
    check_metadata,
    declared_fields,
)
from litstore.read import manifests
from litstore.read.groups import by_chunk
from litstore.read.keyindex import KeyIndex
from litstore.read.keyruns import has_key_index
from litstore.read.listings import VersionListing, added_chunks
from litstore.read.memory import release_freed
from litstore.txn import checkpoint, claims, fields, keyruns, leases, race, upgrade
from litstore.txn.change import Change, Compaction, Delete, FieldAddition, Merge, Upgrade, Write
from litstore.txn.checkpoint import checkpoint_spacing, write_checkpoint
from litstore.txn.plan import Plan
from litstore.txn.stage import Moved, StagedFragment, discard, write_fragment

_Result = TypeVar("_Result")

if TYPE_CHECKING:
    from litstore.read.version import VersionReader
    from litstore.storage import Storage

_MAX_ATTEMPTS = 200
# A delta of fewer rows is written in the committing thread: its Parquet takes about a millisecond,
# less than a thread's start and the GIL it would share with the key runs written beside it.
_SMALL_DELTA_ROWS = 10_000


def commit(
    parent: VersionReader,
    change: Change,
    *,
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> VersionReader:
    """Publish ``change`` (:mod:`.change`) as one version; return the new head.

    The version is built on ``parent`` or, if other writers committed since, on the
    newest version, the change planned again on it. If nothing changes (every record
    unchanged, nothing deleted), no version is committed and the newest head is
    returned. The staged fragments are left as they are if the commit fails;
    ``discard`` them or let ``gc`` remove them.

    A record found unchanged still counts as written: if another writer changed its key
    after ``parent``, this is a :class:`ConflictError`, never a write silently lost.

    Raises:
        DuplicateKeyError, SplitError, KeyNotFoundError: see :func:`litstore.txn.plan.plan`.
        ConflictError: another writer committed changes to the same keys first.
        StagedFragmentExpiredError: a staged fragment's chunks are gone (see :mod:`.leases`).
        InvalidArgumentError: ``change`` is not a change, or ``message`` or ``metadata``
            cannot be committed; nothing was written.
    """
    message, metadata = check_message(message), check_metadata(metadata)
    if isinstance(change, FieldAddition):
        return fields.commit_fields(parent, change, message, metadata)
    if isinstance(change, Upgrade):
        return upgrade.commit_index(parent, change, message, metadata, progress)
    if not isinstance(change, (Write, Delete, Merge, Compaction)):
        raise InvalidArgumentError(
            "commit takes a change (txn.Write, txn.Delete, txn.Compaction, txn.FieldAddition, txn.Upgrade), "
            f"got {change!r}"
        )
    head = parent
    fragments = change.fragments
    current = change.plan(head)
    if current.empty:
        if not current.unchanged:
            return head
        head, touched, _, _ = race.catch_up(head)  # nothing to write, if nobody changed those keys since parent
        clash = race.clash(head, touched & current.unchanged)
        if clash is not None:
            raise clash
        return head
    operation = change.operation
    moves: StagedFragment | None = None
    owner = layout.new_transaction()  # who this commit is, in claims and leases
    relied_on = _secure(head, fragments, owner)
    claimed = False
    planned_fields = _fields(head)  # a rebase onto a head that declared other fields must plan again
    try:
        current, moves = _relocate(head, current, progress)
        losses = 0
        for attempt in range(_MAX_ATTEMPTS):
            if losses >= claims.CLAIM_AFTER and not claimed:
                claimed = claims.claim(head.storage, owner)
            claims.wait_for_turn(head.storage, owner)
            try:
                version, listing, composed = publish(head, current, moves, operation, message, metadata)
            except ConflictError:
                losses += 1
                head, touched, dropped, marked = race.catch_up(head, current.touched_chunks)
                clash = race.clash(head, touched & current.touched_keys())
                if clash is not None:
                    raise clash from None
                # Plan again if a rival dropped a chunk this commit drops or marks rows of, or marked rows dead in
                # a chunk whose live rows this commit moves (they are fewer now). Marks in the same chunks as a
                # rival's are merged at publish.
                if (
                    dropped & current.touched_chunks
                    or marked & current.dropped_chunks
                    or _fields(head) != planned_fields
                ):
                    planned_fields = _fields(head)
                    if moves is not None:
                        discard(head.storage, moves)
                        moves = None
                    current = change.plan(head)
                    if current.empty:
                        return head
                    current, moves = _relocate(head, current, progress)
                time.sleep(race.pause(attempt))
                continue
            if moves is not None:
                relied_on.append((moves.transaction, moves.transaction))  # its stager's: this commit
            leases.release(head.storage, relied_on)
            return head.successor(version, None, _next_index(head, current), composed, listing)
    except BaseException as exc:
        if moves is not None and not isinstance(exc, UncertainCommitError):  # a record may list the moves
            discard(head.storage, moves)
        raise
    finally:
        if claimed:
            claims.release(head.storage, owner)
    raise ConflictError(f"gave up after {_MAX_ATTEMPTS} attempts to commit; nothing was committed")


def _secure(head: VersionReader, fragments: Sequence[StagedFragment], owner: str) -> list[tuple[str, str]]:
    """Lease every staged fragment for this commit, then check that its chunks are all there; returns the
    ``(fragment, holder)`` leases to remove once committed.

    A fragment whose stager's lease this process wrote moments ago (:func:`leases.fresh`)
    is protected by it: the commit writes no lease of its own, and still lists the
    fragment after that lease existed, as the rule with gc's marks asks.

    Raises:
        StagedFragmentExpiredError: a fragment's chunks are missing (gc removed them, or
            it was staged by another store) or gc is removing them.
    """
    relied_on = []
    for fragment in fragments:
        listed = [(chunk.filename, chunk.num_bytes) for chunks in fragment.chunks.values() for chunk in chunks]
        if not listed:
            continue
        own = not leases.fresh(head.storage, fragment.transaction, fragment.lease)
        if own:
            leases.take(head.storage, fragment.transaction, owner, fragment.lease)
        try:
            leases.check_present(head.storage, fragment.transaction, listed)
        except StagedFragmentExpiredError:
            if own:
                with contextlib.suppress(StorageError):  # leave the store as it was
                    head.storage.delete(layout.lease(fragment.transaction, owner))
            raise
        relied_on.append((fragment.transaction, fragment.transaction))  # the stager's
        if own:
            relied_on.append((fragment.transaction, owner))
    return relied_on


def _relocate(head: VersionReader, current: Plan, progress: bool) -> tuple[Plan, StagedFragment | None]:
    """Copy the rows of dropped chunks into a new fragment; the plan with their new places."""
    positions = np.flatnonzero(current.relocate)
    if not len(positions):
        return current, None
    rows = query.taken(current.rows, positions)
    names, chunk_ids = manifest_format.chunk_codes(rows.column("chunk"))
    pieces, order = [], []
    for chunk_id, where, chunk_rows in by_chunk(chunk_ids, rows.column("row").to_numpy()):
        pieces.append(head.chunk_cache.items(names[chunk_id], chunk_rows))  # byte copies, read front to back
        order.append(where)
    read_order = np.concatenate(order)
    positions, rows = positions[read_order], query.taken(rows, read_order)  # in the order the items were read
    moved = Moved(rows.select(["key", "key_hash", "content_hash", "split"]), pa.concat_arrays(pieces))
    moves, sources = write_fragment(
        head.storage, head.config, moved, progress, "moving records", current.chunk_bytes, fingerprinted=False
    )
    landed = positions[sources]  # the plan's row that each row of the new fragment holds
    old_names, old_ids = manifest_format.chunk_codes(current.rows.column("chunk"))
    new_names, new_ids = manifest_format.chunk_codes(moves.rows.column("chunk"))
    ids = old_ids.astype(np.int64)
    ids[landed] = new_ids + len(old_names)
    row_values = current.rows.column("row").to_numpy().copy()
    row_values[landed] = moves.rows.column("row").to_numpy()
    used, ids = np.unique(ids, return_inverse=True)  # the dropped chunks leave the dictionary
    every_name = old_names + new_names
    chunk_column = pa.DictionaryArray.from_arrays(
        pa.array(ids.astype(np.int32)), pa.array([every_name[i] for i in used.tolist()], pa.string())
    )
    schema = current.rows.schema
    rows_table = current.rows.set_column(schema.get_field_index("chunk"), "chunk", chunk_column).set_column(
        schema.get_field_index("row"), "row", pa.array(row_values, pa.uint32())
    )
    return dataclasses.replace(current, rows=rows_table, relocate=np.zeros(len(current.relocate), dtype=bool)), moves


def publish(
    head: VersionReader,
    current: Plan,
    moves: StagedFragment | None,
    operation: Operation,
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> tuple[Version, VersionListing | None, Callable[[], pa.Table] | None]:
    """Commit ``current`` as version ``head + 1``; returns it, its listing (chunks and deletion vectors; ``None``
    where it was not composed) and,
    where ``head`` holds its manifest, what composes the new version's manifest from it in memory.

    The new version gets a full manifest checkpoint every ``checkpoint_interval`` versions
    (further apart in a large store: :func:`checkpoint_spacing`), whenever composing it
    would read more delta rows than it has live records (format 4: twice as many), so
    composing any version reads at most about two (three) times its live rows, for every
    compaction (whose delta moves many rows), and whenever its parent lists
    :data:`~litstore.txn.checkpoint.MAX_KEY_RUNS` key runs (a store growing faster than
    its spacing never reaches a multiple of it).

    A format-6 record lists its chunks and deletion vectors by delta on the parent's (the
    chunks it adds and drops, the vectors it wrote; :mod:`litstore.read.listings`), and in
    full, with split indexes as before, whenever it writes a checkpoint and every
    ``checkpoint_interval`` versions: what a small change writes follows the change, and
    a reader composes a listing from at most ``checkpoint_interval`` records.

    A format-4 delta also carries, on each replaced row, the content hash of the
    parent's row it supersedes (:data:`~litstore.format.manifest.OLD_CONTENT_HASH`):
    what a diff of near versions would otherwise look up in the key runs.

    In a format-3 store it also writes its key run (:mod:`.keyruns`): what it changed,
    merged with its parent's runs as they pile up; a compaction, or a commit whose
    parent has no key index on disk (committed before ``Store.upgrade``, or by a
    writer that held the format-2 config), writes one run of every record instead.

    Raises:
        ConflictError: another writer committed this version number first; the
            files this call wrote are removed again, the staged fragments are kept.
        UncertainCommitError: whether the commit record was created is unknown;
            nothing is removed.
        IntegrityError, StorageError: a file read was damaged or a write failed before the record was
            created: the files this call wrote are removed again (nothing names them).
    """
    written: list[str] = []  # what this attempt wrote: removed again unless its record is created
    try:
        version, listing, delta, full = _write_version(head, current, moves, operation, message, metadata, written)
    except BaseException:
        _remove(head.storage, written)  # no record names them (a damaged file met, a failed write, ^C)
        raise
    if not race.put_commit_record(head, version, written):
        _remove(head.storage, written)
        raise ConflictError(f"version {version.number} was committed by another writer first")
    return version, listing, _composer(head, delta, full)


def _write_version(
    head: VersionReader,
    current: Plan,
    moves: StagedFragment | None,
    operation: Operation,
    message: str | None,
    metadata: dict[str, Any] | None,
    written: list[str],
) -> tuple[Version, VersionListing | None, pa.Table, pa.Table | None]:
    """:func:`publish`'s files, each added to ``written`` as it is written; the version whose record would name
    them, its listing, its delta and (where composed) its full manifest."""
    storage, config, parent = head.storage, head.config, head.version
    number = parent.number + 1
    transaction = layout.new_transaction()
    delta = _delta(config.key_type, number, current, declared_fields(config, parent))
    manifest_path = layout.manifest_delta(number, transaction)
    delta_file = delta
    if config.writes_deletion_vectors:  # what a diff needs of the rows it replaces: no key-run lookup
        delta_file = manifest_format.with_old_content_hashes(
            delta, current.replaced.keys, current.replaced.content_hashes
        )
    written.append(manifest_path)  # (before it is written: a failed write may leave part of it)

    counts = dict(parent.counts)
    for split, difference in _count_changes(current).items():
        counts[split] = counts.get(split, 0) + difference
    pending_rows = parent.pending_rows + delta.num_rows
    checkpoint_path = None
    checkpointing: futures.Future[int] | None = None
    full: pa.Table | None = None
    # Format 4 writes few delta rows per change (no moved rows): it lets the chain grow to
    # twice the live rows, so a store written by appends gets no checkpoint from its first delete.
    allowed = sum(counts.values()) * (2 if config.writes_deletion_vectors else 1)
    # A checkpoint is composed in memory where the manifest is at hand (a head that built it), else streamed
    # from the files (txn/checkpoint.py): a store of any size.
    in_memory = head.built_manifest is not None
    # Spaced by size where lookups read key runs (format 3+); a format 1-2 store composes its manifest on open.
    live = sum(counts.values())
    spacing = (
        checkpoint_spacing(config.checkpoint_interval, live) if config.writes_key_runs else config.checkpoint_interval
    )
    # Also where the parent's key runs piled up: a store growing faster than the spacing never reaches a multiple.
    piled = config.writes_key_runs and len(parent.key_runs) >= checkpoint.MAX_KEY_RUNS
    if operation == "compact" or number % spacing == 0 or pending_rows > allowed or piled:
        checkpoint_path = layout.manifest_checkpoint(number, transaction)
        written.append(checkpoint_path)
        if in_memory:
            full = _applied(head.manifest(), delta, config.key_type, declared_fields(config, parent))
            storage.write(checkpoint_path, manifest_format.to_parquet(full, key_hash=config.stores_key_hash))
        else:  # in a thread: Parquet encoding and the key-run merge below both release the GIL
            checkpointing = _in_background("checkpoint", write_checkpoint, head, delta, checkpoint_path)
        pending_rows = 0
    writing_delta: futures.Future[None] | None = None
    try:  # the listing and key runs, while the delta and a streamed checkpoint are written beside them
        # In a thread as well: encoding the delta's Parquet (a second per 1M rows appended) releases the GIL,
        # and nothing below reads the file. (Inside the try: a ^C in a small delta written here still waits
        # for the checkpoint's thread, so nothing is written after the attempt's files are removed.)
        writing_delta = _in_background(
            "delta",
            _write_delta,
            storage,
            manifest_path,
            delta_file,
            config.stores_key_hash,
            inline=delta_file.num_rows < _SMALL_DELTA_ROWS,
        )
        by_delta = config.writes_listing_deltas and checkpoint_path is None and number % config.checkpoint_interval != 0
        indexes: dict[str, str] = {}
        listing: VersionListing | None = None
        if by_delta and not current.deletions and not current.dropped_chunks and head.built_listing is None:
            # An append listed by delta needs nothing of the parent's listing: it is not composed (that would read
            # up to checkpoint_interval commit records); the new version's reader composes it if asked.
            listed_refs: tuple[DeletionRef, ...] = ()
            added = added_chunks({}, _version_chunks({}, current, moves))
        else:
            deletion_refs, dead_file, emptied = _deletions(head, current, number, transaction)
            if emptied:  # every row of these chunks is dead: the version no longer lists them
                current = dataclasses.replace(current, dropped_chunks=current.dropped_chunks | emptied)
            if dead_file is not None:
                storage.write(layout.deletions(number, transaction), dead_file)
                written.append(layout.deletions(number, transaction))
            chunks = _version_chunks(head.chunks(), current, moves)
            for split, split_chunks in chunks.items():
                if split_chunks and not by_delta:
                    indexes[split] = layout.split_index(number, transaction, split)
                    storage.write(indexes[split], index_document(split_chunks, config.chunk_bytes))
                    written.append(indexes[split])
            listing = VersionListing({split: listed for split, listed in chunks.items() if listed}, deletion_refs)
            listed_refs = deletion_refs
            added = added_chunks(head.chunks(), chunks) if by_delta else {}
            if by_delta:  # only the vectors this commit wrote; the rest are the parent's
                listed_refs = tuple(ref for ref in deletion_refs if ref.path == layout.deletions(number, transaction))
        key_runs: tuple[KeyRunRef, ...] = ()  # a writer holding a format-2 config lists none, not its parent's
        if config.writes_key_runs:
            filtered = config.writes_key_filters
            run = keyruns.entries_of(current.rows, current.deleted.keys, config.key_type)
            # One run of every record: where the manifest is composed anyway (compaction, a checkpoint), which
            # bounds a version's runs by the commits since the last checkpoint, and where the parent has none.
            if not has_key_index(parent) or (full is not None and (operation == "compact" or checkpoint_path)):
                if full is None:
                    full = _applied(head.manifest(), delta, config.key_type, declared_fields(config, parent))
                key_runs, run_files = keyruns.write_runs(
                    storage, number, transaction, keyruns.full_run(full), (), filtered
                )
            elif checkpoint_path is not None:  # merged from the runs a range of key hashes at a time
                retired = current.dropped_chunks if operation == "compact" else frozenset()
                key_runs, run_files = keyruns.write_full_run(
                    storage, number, transaction, run, parent.key_runs, filtered, retired
                )
            else:
                key_runs, run_files = keyruns.write_runs(storage, number, transaction, run, parent.key_runs, filtered)
            written.extend(run_files)
        fragment_ids = sorted(
            {chunk.filename.split("/")[1] for listed in current.staged_chunks.values() for chunk in listed}
        )
        if moves is not None:
            fragment_ids.append(moves.transaction)
    finally:
        running: list[futures.Future[Any]] = [task for task in (writing_delta, checkpointing) if task is not None]
        futures.wait(running)  # errors: raised below
    assert writing_delta is not None  # (the try ended normally)
    writing_delta.result()
    if checkpointing is not None:
        checkpointing.result()
    version = Version(
        number=number,
        parent=parent.number,
        operation=operation,
        created_at=race.commit_time(parent),
        counts=counts,
        fingerprint=hashing.fingerprint_hex(int(parent.fingerprint, 16) + _fingerprint_change(current)),
        added=current.count(ChangeKind.ADDED),
        replaced=len(current.replaced),
        removed=len(current.deleted),
        transaction=transaction,
        fragments=tuple(fragment_ids),
        # (Listed in full from format 7: a compaction's 1,000 names were 66 KB every opener parsed.)
        dropped_chunks=tuple(sorted(current.dropped_chunks)) if by_delta or config.names_dropped_chunks_in_full else (),
        manifest=manifest_path,
        checkpoint=checkpoint_path,
        pending_rows=pending_rows,
        indexes=indexes,
        message=message,
        metadata=metadata or {},
        fields=parent.fields,
        key_runs=key_runs,
        deletions=listed_refs,
        listed_by_delta=by_delta,
        added_chunks=added,
    )
    return version, listing, delta, full


def _remove(storage: Storage, paths: list[str]) -> None:
    """Remove the files of an attempt that published nothing (best effort: gc removes what is left)."""
    for path in paths:
        with contextlib.suppress(StorageError):
            storage.delete(path)


def _deletions(
    head: VersionReader, current: Plan, number: int, transaction: str
) -> tuple[tuple[DeletionRef, ...], bytes | None, frozenset[str]]:
    """The deletion vectors of version ``number`` built on ``head``: every chunk's reference, the file of the
    blocks this commit writes (``None``: none), and the chunks whose every row is now dead.

    The new dead rows are added to the dead rows ``head`` has (a rival's, after a lost
    race), so no commit drops another's marks; chunks the commit does not touch keep
    their reference. Any writer carries its parent's references, whatever its format.
    """
    kept = {ref.chunk: ref for ref in head.deletions.refs if ref.chunk not in current.dropped_chunks}
    if not current.deletions:
        return tuple(kept[name] for name in sorted(kept)), None, frozenset()
    sizes = {chunk.filename: chunk.num_items for listed in head.chunks().values() for chunk in listed}
    emptied: set[str] = set()
    blocks: list[tuple[str, np.ndarray]] = []
    for name, rows in sorted(current.deletions.items()):
        merged = np.union1d(head.deletions.dead(name, sizes[name]), rows)
        kept.pop(name, None)
        if len(merged) >= sizes[name]:
            emptied.add(name)
        else:
            blocks.append((name, merged))
    path = layout.deletions(number, transaction)
    encoded = [deletion_format.encode(rows) for _, rows in blocks]
    data, places = deletion_format.file_bytes(encoded)
    for (name, rows), block, (offset, length) in zip(blocks, encoded, places, strict=True):
        kept[name] = DeletionRef(
            chunk=name,
            path=path,
            offset=offset,
            length=length,
            dead=len(rows),
            checksum=deletion_format.checksum(name, block),
        )
    return tuple(kept[name] for name in sorted(kept)), data if blocks else None, frozenset(emptied)


def _composer(head: VersionReader, delta: pa.Table, full: pa.Table | None) -> Callable[[], pa.Table] | None:
    """What makes the new version's manifest without reading files: the checkpoint just composed, or the
    parent's manifest (if the head holds it) with the delta applied, as composing from the files would."""
    if full is not None:
        return lambda: full
    parent_manifest = head.built_manifest
    if parent_manifest is None:
        return None
    key_type, fields = head.config.key_type, declared_fields(head.config, head.version)
    return lambda: _applied(parent_manifest, delta, key_type, fields)


def _applied(parent_manifest: pa.Table, delta: pa.Table, key_type: str, fields: dict[str, str]) -> pa.Table:
    """The new version's manifest: ``delta`` applied to the parent's, by the one rule (:func:`manifests.compose`)."""
    return manifests.compose(key_type, [manifest_format.decoded(delta)], parent_manifest, fields)


def _next_index(head: VersionReader, current: Plan) -> KeyIndex | None:
    """The head's key index updated by one merge, if the head had built one."""
    index = head.built_index
    if index is None or current.deletions:  # (an index in memory holds no dead rows: lookups read the runs)
        return None
    removed = np.empty(0, dtype=np.intp)
    if current.dropped_chunks:  # (looking at every entry's chunk merges the index's recent entries in)
        dropped_ids = [number for number, name in enumerate(index.chunks) if name in current.dropped_chunks]
        removed = np.flatnonzero(np.isin(index.chunk_ids, np.array(dropped_ids, dtype=np.uint32)))
    return index.with_changes(removed, current.rows)


def _count_changes(current: Plan) -> dict[str, int]:
    added = pc.equal(current.rows.column("change"), str(ChangeKind.ADDED))
    per_split = pc.value_counts(current.rows.column("split").filter(added)).to_pylist()
    counts: dict[str, int] = {str(entry["values"]): int(entry["counts"]) for entry in per_split}
    for split in current.deleted.splits:
        counts[split] = counts.get(split, 0) - 1
    return counts


def _fingerprint_change(current: Plan) -> int:
    """What the version adds to its parent's fingerprint (modulo 2**128)."""
    return (
        current.entering_fingerprint
        - hashing.fingerprint_sum(current.replaced.keys, current.replaced.content_hashes)
        - hashing.fingerprint_sum(current.deleted.keys, current.deleted.content_hashes)
    )


def _fields(snapshot: VersionReader) -> dict[str, str]:
    return declared_fields(snapshot.config, snapshot.version)


def _delta(key_type: str, number: int, current: Plan, fields: dict[str, str]) -> pa.Table:
    """The delta of the version: the rows it writes (added, replaced, moved) and those it deletes.

    Held like the plan's rows, ``chunk`` dictionary-encoded; files get plain strings.
    """
    target = manifest_format.held_schema(key_type, fields)
    rows, deleted = current.rows, current.deleted
    parts = [rows.select(target.names).cast(target).append_column("change", rows.column("change"))]
    if len(deleted):
        count = len(deleted)
        gone: dict[str, Any] = {
            "key": deleted.keys,
            "key_hash": hashing.key_hashes(deleted.keys),
            "content_hash": deleted.content_hashes,
            "split": deleted.splits,
            "chunk": [""] * count,
            "row": np.zeros(count, dtype=np.uint32),
        }
        gone.update((name, [None] * count) for name in fields)  # deleted rows carry no field values
        table = pa.Table.from_arrays([pa.array(gone[field.name], field.type) for field in target], schema=target)
        parts.append(table.append_column("change", pa.array([str(ChangeKind.DELETED)] * count, pa.string())))
    delta = pa.concat_tables(parts)
    delta = delta.append_column("version", pa.array(np.full(delta.num_rows, number, dtype=np.int64)))
    return delta.cast(manifest_format.held_delta_schema(key_type, fields))


def _version_chunks(
    parent_chunks: dict[str, list[ChunkInfo]], current: Plan, moves: StagedFragment | None
) -> dict[str, list[ChunkInfo]]:
    added: dict[str, list[ChunkInfo]] = {split: list(listed) for split, listed in current.staged_chunks.items()}
    if moves is not None:
        for split, listed in moves.chunks.items():
            added.setdefault(split, []).extend(listed)
    result: dict[str, list[ChunkInfo]] = {}
    for split in sorted(set(parent_chunks) | set(added)):
        kept = [chunk for chunk in parent_chunks.get(split, []) if chunk.filename not in current.dropped_chunks]
        result[split] = kept + added.get(split, [])
    return result


def _write_delta(storage: Storage, path: str, delta: pa.Table, key_hash: bool) -> None:
    """Write the manifest delta ``delta`` at ``path`` as Parquet."""
    storage.write(path, manifest_format.to_parquet(delta, key_hash=key_hash))
    release_freed(delta.nbytes)  # the Parquet encoder's buffers


def _in_background(
    name: str, function: Callable[..., _Result], *arguments: Any, inline: bool = False
) -> futures.Future[_Result]:
    """``function(*arguments)`` started in a thread of its own, named after ``name``; its future (the thread
    ends with it). ``inline``: run here and now instead, its outcome (result or error) in the future all the same."""
    if inline:
        done: futures.Future[_Result] = futures.Future()
        try:
            done.set_result(function(*arguments))
        except Exception as exc:  # noqa: BLE001 (raised by result(), where the thread's error would be)
            done.set_exception(exc)
        return done
    executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"litstore-{name}")
    try:
        return executor.submit(function, *arguments)
    finally:
        executor.shutdown(wait=False)
