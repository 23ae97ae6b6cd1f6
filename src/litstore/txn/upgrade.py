"""Upgrading a store to format 7: its newest version's key index written on disk, then its config switched.

:func:`upgrade` (what ``Store.upgrade`` and ``litstore upgrade`` do) takes two steps,
in this order:

1. **Commit** an :class:`~litstore.txn.change.Upgrade` (:func:`commit_index`): a
   version with the head's records, chunks, counts and fingerprint, an empty manifest
   delta (so a ``diff`` of the two is empty and composing reads nothing more), copies
   of the head's split indexes, and one key run of every record, built from the
   composed manifest (:func:`litstore.txn.keyruns.full_run`). Its commit record is
   created with put-if-absent like any commit's. A writer that loses the race to it
   catches up, finds that it touched no key, and commits on top of it; if the upgrade
   loses, it writes the run again for the newest head, or stops if that head has its
   index already (another upgrade won).
2. **Switch** ``litstore.json``'s ``format_version`` to 7 (:func:`switch_format`): one
   atomic write of the config, nothing else in it changed. A format-3 or 4 store has
   its index already: its upgrade is this switch, after which upserts and deletes
   write deletion vectors, and then one more :class:`~litstore.txn.change.Upgrade`
   commit whose run of every record carries a key filter (format 5), since its old
   runs have none (they still read, at a page per run a key). (Any writer carries its parent's deletion vectors, so a
   writer still holding the format-3 config copies chunks on write, as format 3 does,
   without losing a row another writer marked dead.)

Committing first means a format-3 reader finds the index the moment the config says
format 3, and that a failed commit leaves the store exactly as it was. A crash
between the steps leaves a format-2 store whose history holds one version with key
runs, which format-2 readers and writers ignore (a format-2 commit lists no runs of
its own, never its parent's); running the upgrade again finds the head indexed and
only switches, or, if writes came meanwhile, commits again first.

Writers that read the config before the switch keep committing format-2 versions (no
runs) until they open the store again. For such a version, and for every version
from before the upgrade, a format-3 reader composes the manifest as format 2 does
(:func:`litstore.read.keyruns.has_key_index`), and the next format-3 commit on it
writes a run of every record: no lookup misses a key. If such a version became the
head while the upgrade switched the config, the upgrade commits once more.

Older litstore releases cannot read the upgrade's commit record (its operation and
key runs are new to them), and releases before format 3 refuse the switched config.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore._litdata.index import ChunkInfo
from litstore.errors import ConflictError, IntegrityError, StorageError
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.format.models import STORE_FORMAT_VERSION, StoreConfig, Version, declared_fields
from litstore.read import chunkhashes, log
from litstore.storage import Storage
from litstore.txn import keyruns
from litstore.txn.change import Upgrade
from litstore.txn.checkpoint import checkpoint_spacing
from litstore.txn.race import catch_up, commit_time, copy_indexes, pause, put_commit_record
from litstore.txn.stage import write_chunk_hashes

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

#: The store format an upgrade switches to: every commit writes a key run with a key filter, upserts and
#: deletes deletion vectors, and commit records list chunks and vectors by delta (format 6: the switch alone,
#: since a format-6 commit on a version listed in full lists by delta on it), records listed in full naming no
#: dropped chunks (format 7: the switch alone). The newest format this litstore reads.
FORMAT = STORE_FORMAT_VERSION
_MAX_ATTEMPTS = 50


def upgrade(
    head: VersionReader,
    rebuild: bool = False,
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> VersionReader:
    """Make the store of ``head`` a store of the newest format (:data:`FORMAT`) whose newest version has its key
    index (with key filters) on disk.

    ``head`` should be the newest version (a newer one is caught up with). Nothing is
    committed if the store is format 5 or later already and its head's runs open, unless
    ``rebuild`` (only the config is switched); a store left between the steps by a crash
    is only switched. Returns the new head, read under the store's config as it is now.

    Raises:
        ConflictError: other writers kept committing first; the config is unchanged
            unless the index was committed.
        UncertainCommitError: whether the index's commit record was created is unknown.
    """
    stored = log.read_config(head.storage)
    head = catch_up(head.reconfigured(stored))[0]
    change = Upgrade(rebuild=rebuild)
    head = commit_index(head, change, message, metadata, progress)
    if stored.format_version >= FORMAT:
        return head
    head = catch_up(head.reconfigured(switch_format(head.storage)))[0]
    # A writer that held the format-2 config may have committed a version without runs before the switch;
    # a format-3 or 4 store's runs have no key filters: one run of every record with its filter replaces them.
    return commit_index(head, Upgrade(rebuild=not _filtered(head)), message, metadata, progress)


def _filtered(head: VersionReader) -> bool:
    """Whether every key run of ``head`` carries a key filter (format 5); ``False`` if a run does not open."""
    try:
        runs = head.key_runs()
        runs.check()
    except IntegrityError:
        return False
    return runs.filtered()


def switch_format(storage: Any) -> StoreConfig:
    """Set the stored config's ``format_version`` to :data:`FORMAT` (if it is lower); the config as it is now.

    One atomic write of ``litstore.json`` (readers see the old config or the new one),
    everything in it but the format as it was. Two upgrades racing write the same bytes.
    """
    config = log.read_config(storage)
    if config.format_version >= FORMAT:
        return config
    upgraded = StoreConfig.model_validate({**config.model_dump(), "format_version": FORMAT})
    # Durable before any version is committed under it: such versions must never meet the old config.
    storage.write(layout.CONFIG, upgraded.model_dump_json(indent=1).encode(), durable=True)
    return upgraded


def commit_index(
    head: VersionReader,
    change: Upgrade,
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> VersionReader:
    """Commit ``change`` on ``head`` (or, if other writers committed since, on the newest version) if it is
    :meth:`~litstore.txn.change.Upgrade.needed`; the new head (``head`` itself if nothing was committed).

    Raises:
        ConflictError: other writers kept committing first; nothing was committed.
        UncertainCommitError: whether the commit record was created is unknown; its files are kept.
    """
    for attempt in range(_MAX_ATTEMPTS):
        if not change.needed(head):
            return head
        manifest = head.manifest()
        version, written = _write(head, manifest, message, metadata, progress)
        # UncertainCommitError propagates with the files kept: the record may name them.
        if put_commit_record(head, version, written):
            return head.successor(version, head.chunks(), head.built_index, functools.partial(_same, manifest))
        for path in written:
            with contextlib.suppress(StorageError):  # an unreferenced file: gc removes it
                head.storage.delete(path)
        head = catch_up(head)[0]
        if head.version.operation == "upgrade":
            change = Upgrade()  # another upgrade rebuilt the index: rebuild no more than the runs need
        time.sleep(pause(attempt))
    raise ConflictError(f"gave up after {_MAX_ATTEMPTS} attempts to commit the key index; nothing was committed")


def write_sidecars(storage: Storage, chunks: Sequence[ChunkInfo], manifest: pa.Table) -> list[str]:
    """Write the hashes sidecar of each of ``chunks`` that has none, from ``manifest`` (the version listing
    them); the paths written.

    Chunks from before format 3 have no sidecar, so streaming them would compose the
    manifest; with one, it starts in O(chunks). A chunk whose rows the manifest does
    not list exactly once each (a damaged store) gets none: streaming it then goes
    through the manifest, which names the damage. A sidecar written here but not
    committed (the upgrade lost its race) is still right: chunks never change.
    """
    missing = chunkhashes.missing(storage, chunks)
    if not missing:
        return []
    chunk_column = manifest.column("chunk").cast(pa.string())
    listed = pc.is_in(chunk_column, pa.array([chunk.filename for chunk in missing], pa.string()))
    rows = pa.table({"chunk": chunk_column, "row": manifest.column("row"), "content": manifest.column("content_hash")})
    rows = rows.filter(listed).sort_by([("chunk", "ascending"), ("row", "ascending")])
    names = rows.column("chunk").to_pylist()
    numbers = rows.column("row").to_numpy()
    contents = np.frombuffer(b"".join(rows.column("content").to_pylist()), dtype=np.uint8).reshape(-1, 16)
    starts = {name: index for index, name in reversed(list(enumerate(names)))}
    written = []
    for chunk in missing:
        start, count = starts.get(chunk.filename), chunk.num_items
        if start is None or names[start : start + count] != [chunk.filename] * count:
            continue  # the manifest lists fewer rows in it
        if start + count < len(names) and names[start + count] == chunk.filename:
            continue  # or more
        if not np.array_equal(numbers[start : start + count], np.arange(count)):
            continue
        written.append(write_chunk_hashes(storage, chunk.filename, contents[start : start + count].tobytes()))
    return written


def _same(manifest: pa.Table) -> pa.Table:
    return manifest  # the new version's manifest is its parent's


def _write(
    head: VersionReader,
    manifest: pa.Table,
    message: str | None,
    metadata: dict[str, Any] | None,
    progress: bool,
) -> tuple[Version, list[str]]:
    """The version's files (an empty delta, the parent's split indexes, one key run, perhaps a checkpoint)
    and its commit record, not yet created."""
    storage, config, parent = head.storage, head.config, head.version
    number = parent.number + 1
    transaction = layout.new_transaction()
    fields = declared_fields(config, parent)
    written: list[str] = []
    delta = layout.manifest_delta(number, transaction)
    empty = manifest_format.held_delta_schema(config.key_type, fields).empty_table()
    storage.write(delta, manifest_format.to_parquet(empty, key_hash=config.stores_key_hash))
    written.append(delta)
    checkpoint = None
    pending_rows = parent.pending_rows
    if number % checkpoint_spacing(config.checkpoint_interval, sum(parent.counts.values())) == 0:  # as commits do
        checkpoint = layout.manifest_checkpoint(number, transaction)
        storage.write(checkpoint, manifest_format.to_parquet(manifest, key_hash=config.stores_key_hash))
        written.append(checkpoint)
        pending_rows = 0
    indexes = copy_indexes(head, number, transaction)
    written.extend(indexes.values())
    # Durable before the record that relies on them; not among ``written``, which a lost race removes: a
    # sidecar's path is its chunk's, and a rival upgrade's version may rely on the same file.
    storage.sync(write_sidecars(storage, [chunk for chunks in head.chunks().values() for chunk in chunks], manifest))
    # With its key filter even before the switch to format 5: a format-2 reader ignores key runs, and
    # this litstore reads a filtered run under any format (so the switch needs no second run).
    run = keyruns.full_run(manifest, progress)
    key_runs, run_files = keyruns.write_runs(storage, number, transaction, run, (), filtered=True)
    written.extend(run_files)
    version = Version(
        number=number,
        parent=parent.number,
        operation="upgrade",
        created_at=commit_time(parent),
        counts=dict(parent.counts),
        fingerprint=parent.fingerprint,
        transaction=transaction,
        manifest=delta,
        checkpoint=checkpoint,
        pending_rows=pending_rows,
        indexes=indexes,
        message=message,
        metadata=metadata or {},
        fields=parent.fields,
        key_runs=key_runs,
        deletions=head.deletions.refs,  # the same rows dead, listed in full
    )
    return version, written
