"""Which rows a version holds: the one rule that composes a manifest, and a cache of composed ones.

A version's manifest is not stored whole: it is the newest checkpoint at or below the
version with the deltas of the versions after it applied (:mod:`litstore.format.manifest`,
:func:`litstore.read.log.manifest_chain`). :func:`compose` applies them and is the only
code that does: :func:`compose_manifest` composes a version from its files, a commit
composes its new version in memory from the parent's manifest and its own delta
(:mod:`litstore.txn.commit`), and a diff composes only the touched keys' rows of a
version (:func:`litstore.ops.diff.touched_rows`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import StoreConfig, Version, declared_fields
from litstore.read import log
from litstore.storage import MissingFileError, Storage

#: Marks the rows of a table (``key``, ``key_hash``) whose keys newer deltas mention.
Superseded: TypeAlias = Callable[[pa.Table], np.ndarray]
_Result = TypeVar("_Result")

#: A checkpoint to compose on: none, a table, or a function that reads one, given what the deltas superseded.
Checkpoint: TypeAlias = pa.Table | Callable[[Superseded | None], pa.Table | None] | None


class ManifestCache:
    """The composed manifests of the few most recently used versions of one store.

    Shared by a store and every snapshot taken from it, so ``store.diff(a, b)`` twice,
    or ``store.at(v)`` taken again, does not compose the same manifests again. Safe
    because a committed version never changes: entries are keyed by version number
    and the commit's transaction id. ``litstore.open`` starts with an empty cache.
    """

    def __init__(self, capacity: int = 4) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[int, str | None], pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, str | None]) -> pa.Table | None:
        with self._lock:
            table = self._entries.get(key)
            if table is not None:
                self._entries.move_to_end(key)
            return table

    def put(self, key: tuple[int, str | None], table: pa.Table) -> None:
        with self._lock:
            self._entries[key] = table
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


def compose_manifest(storage: Storage, config: StoreConfig, number: int) -> pa.Table:
    """The manifest of version ``number``, composed from its files: the newest checkpoint at or below it, then deltas.

    Raises:
        VersionNotFoundError: gc expired a version of its chain.
        IntegrityError: a manifest file or commit record is damaged.
    """
    if number <= 0:
        return manifest_format.empty(config.key_type, config.fields)
    version = log.read_version(storage, number)
    try:
        return _compose_version(storage, config, version)
    except MissingFileError:
        # gc removed a delta of the chain after it was walked, having first checkpointed the
        # version if it keeps it: walk again (or learn that the version itself is gone).
        log.read_version(storage, number)
        return _compose_version(storage, config, version)


def _compose_version(storage: Storage, config: StoreConfig, version: Version) -> pa.Table:
    # The declared fields of the target version: every file of its chain has them, because
    # add_fields writes a checkpoint, where the chain of every later version stops.
    fields = declared_fields(config, version)
    pending, path = log.manifest_chain(storage, version, set(storage.names(layout.MANIFESTS)))
    rows_mentioned = 0  # rows of the deltas read so far

    def checkpoint(superseded: Superseded | None) -> pa.Table | None:
        if path is None:
            return None
        # Probing row groups costs a read of the key column: worth it only when the deltas
        # mention half the keys the version holds or more (a rewrite that moved most records).
        if superseded is not None and 2 * rows_mentioned < version.total:
            superseded = None
        return log.read_manifest_file(storage, config, path, delta=False, fields=fields, superseded=superseded)

    def deltas() -> Iterator[pa.Table]:
        nonlocal rows_mentioned
        for delta in pending:
            table = log.read_manifest_file(storage, config, delta, delta=True, fields=fields)
            rows_mentioned += table.num_rows
            yield table

    return compose(config.key_type, deltas(), checkpoint, fields)


def compose(
    key_type: str,
    deltas: Iterable[pa.Table],
    checkpoint: Checkpoint,
    fields: dict[str, str] | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows a version holds: ``deltas`` (newest first) applied on top of ``checkpoint``.

    The rule: for each key, the rows of the newest delta that mentions it decide, all of
    them (so a key a delta wrote twice stays visible to ``verify``); if they are
    deletions, the version does not hold the key. The checkpoint's rows stand for the
    keys no delta mentions. Rows come in no particular order, in the manifest's schema
    (fixed columns, then the declared ``fields``), or only its ``columns``.

    ``deltas`` are taken as they are read: each is cut down to the rows no newer one
    superseded before the next is asked for, so a long chain of large deltas (rewrites
    that moved every record) is held one file at a time beside the result.
    ``checkpoint`` is taken last, and may be a function: it is called with one that
    marks the rows the deltas superseded (``None``: no delta), so that it may leave out
    parts of the file that hold only such rows
    (:func:`litstore.format.manifest.row_groups_needed`).

    Keys are matched by key hash (:func:`mentioned_rows`) when ``columns`` has
    ``key_hash``, else by key: a diff composes only ``key``, ``content_hash``,
    ``split`` (and reads ``change``), with ``split`` and ``change`` still
    dictionary-encoded. Done with Arrow set operations (an anti-join per delta):
    several times cheaper than a window over every row, which is what composing a
    large version costs.
    """
    full = manifest_format.schema(key_type, fields)
    target = full if columns is None else pa.schema([full.field(name) for name in columns])
    names, by_hash = target.names, "key_hash" in target.names
    parts: list[pa.Table] = []
    mentioned: tuple[pa.Array, pa.Array | None] | None = None  # the keys of newer deltas (and their key hashes)
    for delta in deltas:
        if mentioned is not None:
            delta = _without_keys(delta, *mentioned)
        parts.append(without_change(delta, ChangeKind.DELETED).select(names).cast(target))
        keys = _one_array(delta.column("key"))
        hashes = _one_array(delta.column("key_hash")) if by_hash else None
        if mentioned is not None:
            keys = pa.concat_arrays([mentioned[0], keys])
            if hashes is not None and mentioned[1] is not None:
                hashes = pa.concat_arrays([mentioned[1], hashes])
        mentioned = (keys, hashes)
        del delta
    if callable(checkpoint):
        known = mentioned
        base = checkpoint(None if known is None else lambda table: _mentioned(table, *known))
    else:
        base = checkpoint
    if base is not None:
        if mentioned is not None and len(mentioned[0]):
            base = _without_keys(base, *mentioned)
        parts.append(base.select(names).cast(target))
    if not parts:  # (not target.empty_table(): like pa.array, it imports pandas the first time)
        return pa.table([pa.nulls(0, field.type) for field in target], schema=target)
    return pa.concat_tables(parts[::-1])


def stream_manifest(
    storage: Storage, config: StoreConfig, number: int, columns: Sequence[str] | None = None
) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """The rows of version ``number`` that :func:`compose_manifest` composes, as tables of a row group or less.

    For the calls that need every row of a large version once (``sql()``, ``keys()``):
    the version's files are read one row group at a time, each checked as
    :func:`litstore.read.log.read_manifest_file` checks a whole file, and no table of the
    whole version is made (see :func:`stream_compose` for what it holds). The rows come
    in another order than :func:`compose_manifest`'s. Returns the rows' schema (the
    manifest's, or only its ``columns``) and the tables; files are read as the tables
    are asked for.

    Raises:
        VersionNotFoundError: gc expired a version of its chain.
        IntegrityError: a manifest file or commit record is damaged (as the tables are read).
    """
    if number <= 0:
        fields: dict[str, str] = dict(config.fields)
        pending: list[str] = []
        path = None
    else:
        version = log.read_version(storage, number)
        fields = declared_fields(config, version)
        pending, path = log.manifest_chain(storage, version, set(storage.names(layout.MANIFESTS)))
    full = manifest_format.schema(config.key_type, fields)
    target = full if columns is None else pa.schema([full.field(name) for name in columns])
    hashed = "key_hash" in target.names
    deltas = [log.read_manifest_row_groups(storage, config, delta, True, fields, hashed) for delta in pending]
    checkpoint = None if path is None else log.read_manifest_row_groups(storage, config, path, False, fields, hashed)
    return target, stream_compose(config.key_type, deltas, checkpoint, fields, columns)


def consume_manifest(
    storage: Storage,
    config: StoreConfig,
    number: int,
    consume: Callable[[pa.Schema, Iterator[pa.Table]], _Result],
    columns: Sequence[str] | None = None,
) -> _Result:
    """``consume(*stream_manifest(...))``, once more if gc removed a file of the version's chain meanwhile.

    gc checkpoints a version it keeps before it removes the deltas of versions it expires,
    so a walk made after the removal finds that checkpoint; ``consume`` must take every
    table before it returns (``sql()``, ``keys()``), so nothing was handed out twice.

    Raises:
        VersionNotFoundError: gc expired the version itself.
        IntegrityError: a manifest file or commit record is damaged.
    """
    try:
        return consume(*stream_manifest(storage, config, number, columns))
    except MissingFileError:
        return consume(*stream_manifest(storage, config, number, columns))


def stream_compose(
    key_type: str,
    deltas: Sequence[Iterable[pa.Table]],
    checkpoint: Iterable[pa.Table] | None,
    fields: dict[str, str] | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[pa.Table]:
    """The rows :func:`compose` gives for ``deltas`` (newest first) and ``checkpoint``, each given in parts.

    Each delta and the checkpoint is an iterable of tables of whole rows, a file's row
    groups, taken one at a time (without ``key_hash`` where ``columns`` leave it out: it
    is then derived only for rows that may hide or be hidden): a part's rows whose key a
    newer delta mentions are left out, the rest (less deletions) yielded at once. What is
    held beside one part is the keys and key hashes of the deltas read so far
    (:class:`MentionedKeys`: O(rows since the checkpoint), never a table of the
    version); those of the last file are not kept, nor those of added rows: an added key
    is one the parent did not hold, so no older file has a live row of it that a newer
    mention does not already hide (a store built by appends holds no keys at all here).
    Yields only non-empty tables, in the manifest's schema or only its ``columns``.
    """
    full = manifest_format.schema(key_type, fields)
    target = full if columns is None else pa.schema([full.field(name) for name in columns])
    mentioned = MentionedKeys(key_type)
    for position, delta in enumerate(deltas):
        keep_keys = checkpoint is not None or position < len(deltas) - 1  # an older file will be read
        found: list[tuple[pa.Array, np.ndarray]] = []
        for part in delta:
            if len(mentioned):
                part = _hashed(part)
                gone = mentioned.marks(part)
                if gone.any():
                    part = part.filter(pa.array(~gone))
            if keep_keys:
                hiding = _hashed(without_change(part, ChangeKind.ADDED))
                found.append((_one_array(hiding.column("key")), _one_array(hiding.column("key_hash")).to_numpy()))
            kept = without_change(part, ChangeKind.DELETED)
            if kept.num_rows:
                yield kept.select(target.names).cast(target)
        mentioned.add(found)
        del found
    if checkpoint is not None:
        for part in checkpoint:
            if len(mentioned):
                part = _hashed(part)
                gone = mentioned.marks(part)
                if gone.any():
                    part = part.filter(pa.array(~gone))
            if part.num_rows:
                yield part.select(target.names).cast(target)


def _hashed(part: pa.Table) -> pa.Table:
    """``part`` with its ``key_hash`` column, derived from its keys if it was read without one."""
    if "key_hash" in part.column_names:
        return part
    return part.append_column("key_hash", pa.array(hashing.key_hash_array(part.column("key")), pa.uint64()))


class MentionedKeys:
    """The keys newer deltas mention, one sorted run per delta: which rows of an older file do they supersede?

    :func:`mentioned_rows` builds a hash table of every mentioned key hash for each table
    it is asked about; a stream asks about every row group of a file, so here each
    delta's keys are sorted by key hash once, when it is added (no copy of the keys added
    before), and a group's rows are found by binary search in each run, then confirmed by
    key (a hash several keys of a run share is settled by comparing with each of them).
    Holds about 30 bytes a key of text.
    """

    def __init__(self, key_type: str) -> None:
        # Text keys held as large strings: the keys of one delta of many millions of rows may pass 2 GiB.
        self._key_type = pa.large_string() if key_type == "str" else pa.int64()
        self._runs: list[tuple[np.ndarray, pa.Array]] = []  # (sorted key hashes, their keys)

    def __len__(self) -> int:
        return sum(len(hashes) for hashes, _ in self._runs)

    def add(self, parts: Sequence[tuple[pa.Array, np.ndarray]]) -> None:
        """Mention the keys of ``parts`` (keys, and their key hashes): one delta's."""
        parts = [(keys, hashes) for keys, hashes in parts if len(keys)]
        if not parts:
            return
        hashes = np.concatenate([hashes for _, hashes in parts])
        order = np.argsort(hashes, kind="stable")
        keys = pa.concat_arrays([keys.cast(self._key_type) for keys, _ in parts]).take(pa.array(order))
        self._runs.append((hashes[order], keys))

    def marks(self, table: pa.Table) -> np.ndarray:
        """Which rows of ``table`` (``key``, ``key_hash``) hold a mentioned key."""
        gone = np.zeros(table.num_rows, dtype=bool)
        wanted = _one_array(table.column("key_hash")).to_numpy()
        keys = _one_array(table.column("key")).cast(self._key_type)
        for hashes, listed in self._runs:
            first = np.searchsorted(hashes, wanted, side="left")
            hit = ~gone & (first < len(hashes))
            hit[hit] = hashes[first[hit]] == wanted[hit]
            positions = np.flatnonzero(hit)
            if not len(positions):
                continue
            candidates = keys.take(pa.array(positions))
            same = pc.equal(candidates, listed.take(pa.array(first[positions]))).to_numpy(zero_copy_only=False)
            unsure = np.flatnonzero(~same)
            if len(unsure):  # a hash shared by several keys of the run: compare with each
                starts = first[positions[unsure]]
                stops = np.searchsorted(hashes, wanted[positions[unsure]], side="right")
                for index, start, stop in zip(unsure.tolist(), starts.tolist(), stops.tolist(), strict=True):
                    if stop - start > 1:
                        alike = listed.slice(start, stop - start)
                        same[index] = bool(pc.any(pc.equal(alike, candidates[index])).as_py())
            gone[positions[same]] = True
        return gone


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """``column`` combined (a column of no chunks combines by pa.array, which imports pandas the first time)."""
    return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)


def keys_at(manifest: pa.Table, chunk: str, rows: np.ndarray) -> list[Any]:
    """The keys ``manifest`` lists at ``rows`` of ``chunk``, in that order (``None`` where it lists none)."""
    at = pc.and_(pc.equal(manifest.column("chunk"), chunk), pc.is_in(manifest.column("row"), pa.array(rows)))
    listed = manifest.filter(at)
    keys = dict(zip(listed.column("row").to_pylist(), listed.column("key").to_pylist(), strict=True))
    return [keys.get(row) for row in rows.tolist()]


def without_change(delta: pa.Table, kind: ChangeKind) -> pa.Table:
    """The rows of ``delta`` whose ``change`` (plain or dictionary-encoded) is not ``kind``: ``delta`` if none is."""
    change = delta.column("change")
    if pa.types.is_dictionary(change.type):
        # Comparing the dictionary indices: several times cheaper than comparing every row's string.
        masks = []
        for chunk in change.chunks:
            codes = [code for code, value in enumerate(chunk.dictionary.to_pylist()) if value == str(kind)]
            # Made from a buffer: pa.array imports pandas the first time (a third of a second a process).
            wanted = pa.Array.from_buffers(pa.int64(), len(codes), [None, pa.py_buffer(np.array(codes, np.int64))])
            masks.append(pc.is_in(chunk.indices, value_set=wanted.cast(chunk.indices.type)))
        found = pa.chunked_array(masks, pa.bool_())
    else:
        found = pc.equal(change, str(kind))
    return delta.filter(pc.invert(found)) if pc.any(found).as_py() else delta


def _without_keys(table: pa.Table, keys: pa.Array, hashes: pa.Array | None) -> pa.Table:
    """``table`` without its rows whose key is one of ``keys`` (whose key hashes are ``hashes``, if known)."""
    if hashes is None:
        found = pc.is_in(table.column("key"), value_set=keys)
        return table.filter(pc.invert(found)) if pc.any(found).as_py() else table
    gone = mentioned_rows(table, keys, hashes)
    return table.filter(pa.array(~gone)) if gone.any() else table


def _mentioned(table: pa.Table, keys: pa.Array, hashes: pa.Array | None) -> np.ndarray:
    """Which rows of ``table`` hold one of ``keys``, by key hash if ``hashes`` are known."""
    if hashes is None:
        return np.asarray(pc.is_in(table.column("key"), value_set=keys).to_numpy(zero_copy_only=False), dtype=bool)
    return mentioned_rows(table, keys, hashes)


def mentioned_rows(table: pa.Table, keys: pa.Array, hashes: pa.Array) -> np.ndarray:
    """Which rows of ``table`` (``key``, ``key_hash``) hold one of ``keys`` (whose key hashes are ``hashes``).

    Matched by key hash (integers), then each matched row's key compared with the one key
    it matched: no hash table of strings, whether few rows match (appends) or nearly all
    (a rewrite that moved every record). Key hashes are derived from keys when files are
    read, so equal keys have equal hashes; a hash two of ``keys`` share is settled by
    comparing with all of them.
    """
    gone = np.zeros(table.num_rows, dtype=bool)
    where = pc.index_in(table.column("key_hash"), value_set=hashes)  # the first of keys with the row's hash
    positions = np.flatnonzero(where.is_valid().to_numpy(zero_copy_only=False))
    if not len(positions):
        return gone
    taken = pa.array(positions)
    candidates = table.column("key").take(taken)
    partners = keys.take(where.take(taken))
    same = pc.equal(candidates, partners).to_numpy(zero_copy_only=False)
    mentioned = hashes.to_numpy()
    ordered = np.sort(mentioned)
    shared = ordered[1:][ordered[1:] == ordered[:-1]]  # hashes that more than one of keys have
    if len(shared):
        unsure = np.flatnonzero(~same & np.isin(table.column("key_hash").to_numpy()[positions], shared))
        if len(unsure):
            alike = keys.filter(pa.array(np.isin(mentioned, shared)))
            found = pc.is_in(candidates.take(pa.array(unsure)), value_set=alike).to_numpy(zero_copy_only=False)
            same[unsure[found]] = True
    gone[positions[same]] = True
    return gone
