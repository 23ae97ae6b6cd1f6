"""Writing a checkpoint from files, a row group at a time: what a commit does when it holds no manifest.

A checkpoint (a version's whole manifest in one file, where the composition of later
versions stops) used to be composed in memory, one Arrow table of the version: 10 GB
at 32 million records, so a store could not grow past what one process holds. Here
the parent's chain (its newest checkpoint and the deltas after it) and the new delta
are composed by :func:`litstore.read.manifests.stream_compose`, which yields the rows
a row group at a time, and they are written as they come
(:func:`litstore.format.manifest.write_parquet`, through :meth:`Storage.writing`).
Held: one row group, the writer's buffers, and the keys the chain's deltas mention
that can hide an older row (replaced, moved and deleted keys: not added ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa

from litstore.errors import MissingFileError
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.format.models import StoreConfig, Version, declared_fields
from litstore.read import log, manifests
from litstore.read.version import VersionReader
from litstore.storage import Storage

#: What adds columns to a manifest's rows as they stream by (a field addition's values).
Extension = Callable[[Iterable[pa.Table]], Iterable[pa.Table]]

#: Live records each version between two manifest checkpoints stands for: a store of more records than
#: ``checkpoint_interval`` times this spaces its checkpoints further apart (see :func:`checkpoint_spacing`).
ROWS_PER_CHECKPOINT_VERSION = 1 << 15
#: Key runs a version may list: a commit whose parent lists this many writes a checkpoint (and its one run of every
#: record) whatever the spacing. Each commit adds at most one run, and runs past ``keyruns.MERGE_LIMIT`` entries no
#: longer merge: without it, commits of 10k records at 10^9 left ~370 runs between checkpoints, and a store growing
#: by more than ``ROWS_PER_CHECKPOINT_VERSION`` records a version (its spacing past its version number: no multiple
#: ever reached) never checkpointed again, its runs piling up for good. Every run costs each lookup and each
#: append's key check a footer and a filter block: a store built by appends of 500k kept 11 unmergeable runs at
#: 16M records (4 since a large commit merges up to 8x its run), which made an append of 100 cost 34 ms against
#: 26 ms after a checkpoint; small commits' runs merge in tiers and stay under ~10 (a binary counter of the
#: commits), so they rarely reach this bound.
MAX_KEY_RUNS = 16


def checkpoint_spacing(interval: int, live_rows: int) -> int:
    """Versions from one manifest checkpoint to the next, for a store of ``live_rows`` records:
    ``interval`` times the least power of two that makes it at least ``live_rows /``
    :data:`ROWS_PER_CHECKPOINT_VERSION`.

    A checkpoint rewrites every record's row and key-run entry (O(store)), so at a fixed
    interval its share of each commit grew with the store (7.5 s every 64 commits at
    16M records: ~120 ms a commit). Spaced by the store's size, that share stays about
    the same at any size (64 versions up to 2M records, 512 at 16M, 32,768 at 10^9).
    A commit applies it to stores with key runs only: format 1-2 (a lookup composes the
    manifest) keeps ``interval``.
    What a wider spacing costs is a longer chain for the calls that compose a whole
    manifest (``sql``, exports, ``verify``, compaction): up to the spacing's small deltas
    beside a checkpoint of the whole store. A lookup reads key runs, which merge as they
    pile up, and listings (chunks, O(chunks)) are still written in full every ``interval``
    versions. A version's chain never passes the largest spacing in force since its last
    checkpoint (one lands on every multiple of the spacing, and where the parent lists
    :data:`MAX_KEY_RUNS` runs), nor twice the live rows.
    """
    spacing = interval
    while spacing * ROWS_PER_CHECKPOINT_VERSION < live_rows:
        spacing *= 2
    return spacing


def write_checkpoint(head: VersionReader, delta: pa.Table, path: str) -> int:
    """Write at ``path`` the manifest of the version ``delta`` makes of ``head``'s; the rows written.

    Written again from a fresh walk of the chain if gc removed one of its files meanwhile
    (gc checkpoints the versions it keeps before it removes what only expired ones need).

    Raises:
        VersionNotFoundError: gc expired a version of the head's chain.
        IntegrityError: a file of the chain is damaged.
        StorageError: the checkpoint cannot be written (nothing is published).
    """
    # Durable as it is written, in the checkpoint's own thread: its fsync (hundreds of MB at 4M records)
    # overlaps the key runs the commit writes meanwhile, where the record's sync would wait for it alone.
    return _write_checkpoint(head.storage, head.config, head.version, delta, path, durable=True)


def write_version_checkpoint(storage: Storage, config: StoreConfig, version: Version, path: str) -> int:
    """Write at ``path`` the manifest of the committed ``version`` (what gc writes where it cuts a chain); the
    rows written. Streamed as a commit's is: a row group at a time, in bounded memory at any size; durable
    before it is there (readers of ``version`` take it at once).

    Raises:
        VersionNotFoundError: a version of the chain was expired (by another gc).
        IntegrityError: a file of the chain is damaged.
        StorageError: the checkpoint cannot be written.
    """
    return _write_checkpoint(storage, config, version, None, path, durable=True)


def write_extended_checkpoint(head: VersionReader, path: str, added: dict[str, str], extend: Extension) -> int:
    """Write at ``path`` ``head``'s manifest with the ``added`` fields, whose columns ``extend`` gives its rows a
    row group at a time (a field addition: :meth:`litstore.txn.change.FieldAddition.plan`); the rows written.

    Streamed as a commit's checkpoint is, and written again from a fresh walk of the
    chain if gc removed one of its files meanwhile. Whatever ``extend`` raises leaves
    nothing at ``path``.
    """
    return _write_checkpoint(head.storage, head.config, head.version, None, path, added=(added, extend))


def _write_checkpoint(
    storage: Storage,
    config: StoreConfig,
    top: Version,
    delta: pa.Table | None,
    path: str,
    durable: bool = False,
    added: tuple[dict[str, str], Extension] | None = None,
) -> int:
    """Stream ``top``'s manifest, with ``delta`` applied on it where given, to ``path`` (``durable``: readers of
    ``top`` use it as soon as it is there, so it is durable first; a commit's is synced before its record);
    ``added``: fields the rows get, and what adds their columns. Written again from a fresh walk of the chain
    if gc removed one of its files meanwhile (gc checkpoints the versions it keeps before it removes what
    only expired ones need)."""
    try:
        return _stream_checkpoint(storage, config, top, delta, path, durable, added)
    except MissingFileError:
        return _stream_checkpoint(storage, config, top, delta, path, durable, added)


def _stream_checkpoint(
    storage: Storage,
    config: StoreConfig,
    top: Version,
    delta: pa.Table | None,
    path: str,
    durable: bool,
    added: tuple[dict[str, str], Extension] | None,
) -> int:
    """:func:`_write_checkpoint` from one walk of ``top``'s chain."""
    fields = declared_fields(config, top)
    pending: list[str] = []
    base: str | None = None
    if top.number > 0:
        pending, base = log.manifest_chain(storage, top, set(storage.names(layout.MANIFESTS)))
    schema = manifest_format.schema(config.key_type, fields)
    if not config.stores_key_hash:  # not written: rows are hashed only where a delta needs it
        schema = schema.remove(schema.get_field_index("key_hash"))
    hashed = config.stores_key_hash
    deltas: list[Iterable[pa.Table]] = [] if delta is None else [[manifest_format.decoded(delta)]]
    deltas += [log.read_manifest_row_groups(storage, config, name, True, fields, hashed) for name in pending]
    checkpoint = None if base is None else log.read_manifest_row_groups(storage, config, base, False, fields, hashed)
    parts: Iterable[pa.Table] = manifests.stream_compose(config.key_type, deltas, checkpoint, fields, schema.names)
    if added is not None:
        more, extend = added
        parts = extend(parts)
        schema = manifest_format.schema(config.key_type, {**fields, **more})
    with storage.writing(path, durable=True) if durable else storage.writing(path) as handle:
        return manifest_format.write_parquet(parts, schema, handle, key_hash=config.stores_key_hash)
