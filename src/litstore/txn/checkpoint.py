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

from collections.abc import Iterable

import pyarrow as pa

from litstore.errors import MissingFileError
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.format.models import declared_fields
from litstore.read import log, manifests
from litstore.read.version import VersionReader


def write_checkpoint(head: VersionReader, delta: pa.Table, path: str) -> int:
    """Write at ``path`` the manifest of the version ``delta`` makes of ``head``'s; the rows written.

    Written again from a fresh walk of the chain if gc removed one of its files meanwhile
    (gc checkpoints the versions it keeps before it removes what only expired ones need).

    Raises:
        VersionNotFoundError: gc expired a version of the head's chain.
        IntegrityError: a file of the chain is damaged.
        StorageError: the checkpoint cannot be written (nothing is published).
    """
    try:
        return _write_checkpoint(head, delta, path)
    except MissingFileError:
        return _write_checkpoint(head, delta, path)


def _write_checkpoint(head: VersionReader, delta: pa.Table, path: str) -> int:
    storage, config, parent = head.storage, head.config, head.version
    fields = declared_fields(config, parent)
    pending: list[str] = []
    base: str | None = None
    if parent.number > 0:
        pending, base = log.manifest_chain(storage, parent, set(storage.names(layout.MANIFESTS)))
    schema = manifest_format.schema(config.key_type, fields)
    if not config.stores_key_hash:  # not written: rows are hashed only where a delta needs it
        schema = schema.remove(schema.get_field_index("key_hash"))
    hashed = config.stores_key_hash
    deltas: list[Iterable[pa.Table]] = [[manifest_format.decoded(delta)]]
    deltas += [log.read_manifest_row_groups(storage, config, name, True, fields, hashed) for name in pending]
    checkpoint = None if base is None else log.read_manifest_row_groups(storage, config, base, False, fields, hashed)
    parts = manifests.stream_compose(config.key_type, deltas, checkpoint, fields, schema.names)
    with storage.writing(path) as handle:
        return manifest_format.write_parquet(parts, schema, handle, key_hash=config.stores_key_hash)
