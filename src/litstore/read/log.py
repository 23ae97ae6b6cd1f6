"""The version log: reading commit records, tags, split indexes and manifest files of a store.

Every reader of a store's metadata comes here (snapshots, the commit protocol, gc,
tags, streaming); nothing here writes. This module reads single files and walks a
version's manifest chain (:func:`manifest_chain`); what the chain composes to is
:mod:`litstore.read.manifests`'s. Writing a checkpoint is the commit's job
(:mod:`litstore.txn.commit`, :mod:`litstore.txn.fields`) or gc's.

Everything here reads what committed writers left and trusts none of it: a damaged
or crafted file raises :class:`~litstore.errors.IntegrityError` naming it, never a
parsing library's own error, and every file name read from metadata is checked
against :mod:`litstore.format.layout` before it is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pydantic

from litstore._litdata.index import ChunkInfo, parse_index_document
from litstore.errors import IntegrityError, StorageError, VersionNotFoundError, first_problem
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.format.models import (
    COMMIT_RECORD,
    ExpiredVersion,
    StoreConfig,
    Tag,
    Version,
    check_tag_name,
)
from litstore.storage import MissingFileError, Storage, branched


def version_numbers(storage: Storage) -> list[int]:
    """The numbers of every commit record (live or tombstone), ascending."""
    return layout.version_numbers(storage.names(layout.VERSIONS))


#: How many records past a writer's head :func:`versions_after` looks up before it lists instead.
MAX_PROBES = 8
#: The most bytes of ``versions/head.hint`` read: a decimal number and a newline.
_HINT_BYTES = 24
_HINT = re.compile(rb"(\d{1,18})\n?")


def head_hint(storage: Storage) -> int | None:
    """The number ``versions/head.hint`` holds; ``None`` if it is missing, unreadable or not a number.

    Never an error: the hint only saves a listing (:func:`head_number`). At most
    a few bytes are read, whatever the file's size.
    """
    try:
        data = storage.read_range(layout.HEAD_HINT, 0, _HINT_BYTES)
    except StorageError:  # missing, a link or a directory: as good as no hint
        return None
    match = _HINT.fullmatch(data)
    return int(match.group(1)) if match else None


def head_number(storage: Storage) -> int | None:
    """The number of the newest commit record (live or tombstone); ``None`` if there is none.

    The same number as the last of :func:`version_numbers`, found in O(1) lookups
    when the hint is exact: its record exists and the next two do not (the second
    lookup finds a record past a missing one, a gap in a damaged store, which the
    listing would see). Any other hint (missing, garbage, pointing past the last
    record or behind it) falls back to listing ``versions/``, so a planted or stale
    hint costs what a listing costs and never hides a version. A commit landing
    meanwhile may or may not be seen, as with a listing.

    A hint behind the head is listed rather than probed past: it is behind only if a
    writer died between its record and its hint, or a writer older than the hint
    committed, or the store's files were copied in part (an old hint with some newer
    records), where probing could stop at a gap a listing steps over.
    """
    hint = head_hint(storage)
    if hint is None or not storage.exists(layout.version_record(hint)):
        return _listed_head(storage)
    if storage.exists(layout.version_record(hint + 1)) or storage.exists(layout.version_record(hint + 2)):
        return _listed_head(storage)
    return hint


def versions_after(storage: Storage, number: int) -> list[int]:
    """The numbers of the commit records after ``number``, ascending: the versions a writer whose head is
    ``number`` (a record it read) has not seen.

    Looks up ``number + 1``, ``number + 2`` ... until one is missing and the one after
    it too; lists ``versions/`` instead if that takes more than :data:`MAX_PROBES`
    lookups or finds a gap, so the answer is the listing's (save for commits landing
    meanwhile). The caller reads each of these records anyway, so the lookups cost
    what it reads; the listing, the whole history.
    """
    top = number
    for _ in range(MAX_PROBES):
        if not storage.exists(layout.version_record(top + 1)):
            break
        top += 1
    else:
        return _listed_after(storage, number)
    if storage.exists(layout.version_record(top + 2)):  # a gap: let the listing show what is past it
        return _listed_after(storage, number)
    return list(range(number + 1, top + 1))


def _listed_head(storage: Storage) -> int | None:
    numbers = version_numbers(storage)
    return numbers[-1] if numbers else None


def _listed_after(storage: Storage, number: int) -> list[int]:
    return [found for found in version_numbers(storage) if found > number]


def read_record(storage: Storage, number: int) -> Version | ExpiredVersion:
    """``versions/<number>.json``: a live commit record or a gc tombstone.

    Raises:
        VersionNotFoundError: there is no such record.
        IntegrityError: the record is damaged, or is not the record of ``number``.
    """
    path = layout.version_record(number)
    try:
        data = storage.read(path)
    except MissingFileError as exc:
        raise VersionNotFoundError(f"version {number} does not exist") from exc
    try:
        record = COMMIT_RECORD.validate_json(data)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"commit record {path} is damaged: {first_problem(exc, 'document')}") from exc
    if record.number != number:
        raise IntegrityError(f"commit record {path} says it is version {record.number}")
    return record


def records_below(storage: Storage, number: int) -> Iterator[Version | ExpiredVersion]:
    """The commit records of versions ``number - 1``, ``number - 2``, ... down to 0, as the caller walks down.

    A chain walk (a manifest's, a listing's) reads one small record after another; where a
    read is a network round trip (``storage.concurrent_reads`` above 1) the next
    ``concurrent_reads`` records are read at once, so a walk of 63 records on S3 waits for
    8 round trips, not 63. A walk that stops early leaves at most a batch read for nothing.
    Each record raises what :func:`read_record` raises when the walk reaches it, not before.
    """
    batch = max(1, storage.concurrent_reads)
    if batch == 1:
        for below in range(number - 1, -1, -1):
            yield read_record(storage, below)
        return
    with ThreadPoolExecutor(max_workers=batch) as pool:
        for top in range(number - 1, -1, -batch):
            numbers = range(top, max(top - batch, -1), -1)
            futures = [pool.submit(read_record, storage, below) for below in numbers]
            try:
                for future in futures:
                    yield future.result()
            finally:
                for future in futures:
                    future.cancel()


def read_version(storage: Storage, number: int) -> Version:
    """The commit record of version ``number``.

    Raises:
        VersionNotFoundError: there is no such version, or gc expired it.
        IntegrityError: the record is damaged.
    """
    return live(read_record(storage, number))


def live(record: Version | ExpiredVersion) -> Version:
    """``record`` if it is a live version's; ``VersionNotFoundError`` if it is a gc tombstone."""
    if isinstance(record, ExpiredVersion):
        raise VersionNotFoundError(
            f"version {record.number} was expired by gc at {record.expired_at:%Y-%m-%d %H:%M} UTC"
        )
    return record


#: litdata's item offsets are 32-bit: no chunk reaches 4 GiB (writes refuse one).
_CHUNK_LIMIT = 1 << 32


def read_chunks(storage: Storage, version: Version) -> dict[str, list[ChunkInfo]]:
    """The chunks each split's litdata index lists, every name checked against the layout.

    Raises:
        IntegrityError: an index is damaged or names a file that is not a chunk of this store.
    """
    chunks: dict[str, list[ChunkInfo]] = {}
    for split, path in version.indexes.items():
        listed = parse_index_document(storage.read(path), path)
        for chunk in listed:
            try:
                layout.check_chunk(chunk.filename)
            except ValueError as exc:
                raise IntegrityError(f"index {path} is damaged: {exc}") from exc
            # Readers size arrays by a chunk's item count (its dead rows, its sidecar): a count no chunk of
            # that size can hold (a 4-byte offset per item) is refused here, never allocated.
            if not 0 <= chunk.num_bytes < _CHUNK_LIMIT or not 0 <= chunk.num_items <= chunk.num_bytes // 4:
                raise IntegrityError(
                    f"index {path} is damaged: chunk {chunk.filename} is listed with {chunk.num_items} items in "
                    f"{chunk.num_bytes} bytes, which no litdata chunk can be"
                )
        chunks[split] = listed
    return chunks


def read_manifest_file(
    storage: Storage,
    config: StoreConfig,
    path: str,
    delta: bool,
    fields: dict[str, str] | None = None,
    superseded: Callable[[pa.Table], np.ndarray] | None = None,
) -> pa.Table:
    """A manifest delta (``delta=True``) or checkpoint with the declared ``fields``, its chunk names checked.

    Key hashes are derived from the keys, never read from the file (see
    :mod:`litstore.format.manifest`). ``superseded`` marks rows newer files replace: row
    groups that hold only such rows are not read (the caller drops such rows anyway).

    Raises:
        IntegrityError: the file is damaged or names a chunk outside the layout.
    """
    data = storage.read(path)
    groups = None
    if superseded is not None:
        groups = manifest_format.row_groups_needed(data, path, config.key_type, superseded)
    table = manifest_format.from_parquet(data, path, config.key_type, delta, fields, groups)
    _check_chunk_names(table, path, delta)
    return table


def read_manifest_row_groups(
    storage: Storage,
    config: StoreConfig,
    path: str,
    delta: bool,
    fields: dict[str, str] | None = None,
    key_hash: bool = True,
) -> Iterator[pa.Table]:
    """:func:`read_manifest_file`, one row group at a time, each checked as that checks a whole file
    (``key_hash=False``: without the ``key_hash`` column; see ``manifest.row_groups_from_parquet``).

    Nothing is read until the first group is asked for. Holds one decoded row group and
    the file's bytes (compressed: a few bytes a row), or locally the open file, read a
    group at a time (a checkpoint of a hundred million records is gigabytes).

    Raises:
        IntegrityError: the file is damaged or names a chunk outside the layout.
    """
    with storage.reading(path) as handle:
        for table in manifest_format.row_groups_from_parquet(handle, path, config.key_type, delta, fields, key_hash):
            _check_chunk_names(table, path, delta)
            yield table


def _check_chunk_names(table: pa.Table, path: str, delta: bool) -> None:
    """Raise :class:`IntegrityError` if a row of ``table`` (read from ``path``) names a chunk outside the layout."""
    for name in table.column("chunk").unique().to_pylist():
        if name == "" and delta:
            continue  # deleted rows have no chunk
        try:
            layout.check_chunk(name)
        except ValueError as exc:
            raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc


def checkpoint_of(version: Version, manifest_names: set[str]) -> str | None:
    """The full-manifest checkpoint of ``version``: written with its commit or later by gc."""
    if version.checkpoint is not None:
        return version.checkpoint
    if version.transaction is None:
        return None
    path = layout.manifest_checkpoint(version.number, version.transaction)
    return path if path.removeprefix(f"{layout.MANIFESTS}/") in manifest_names else None


def manifest_chain(storage: Storage, version: Version, checkpoints: set[str]) -> tuple[list[str], str | None]:
    """The files ``version``'s manifest is composed of: its deltas, newest first, down to the newest
    checkpoint at or below it (``None``: none; ``checkpoints`` are the names in the manifests directory).

    gc writes a checkpoint for each version it keeps whose chain passes through one it expires,
    and only then tombstones: a walk that meets a tombstone below a version was racing that gc
    (its ``checkpoints`` were listed before the checkpoint was written), so it lists them again
    and walks once more.

    Raises:
        VersionNotFoundError: ``version`` itself was expired.
    """
    try:
        return _walk_chain(storage, version, checkpoints)
    except VersionNotFoundError:
        read_version(storage, version.number)  # (raises if the version itself is gone)
        return _walk_chain(storage, version, set(storage.names(layout.MANIFESTS)))


def _walk_chain(storage: Storage, version: Version, checkpoints: set[str]) -> tuple[list[str], str | None]:
    deltas: list[str] = []
    below = records_below(storage, version.number)
    current = version
    while current.number > 0:
        checkpoint = checkpoint_of(current, checkpoints)
        if checkpoint is not None:
            return deltas, checkpoint
        if current.manifest is not None:
            deltas.append(current.manifest)
        if current.number == 1:
            break
        current = live(next(below))
    return deltas, None


def tag_names(storage: Storage) -> list[str]:
    """The names of every tag of the line ``storage`` is (its own: :func:`visible_tag_names` also has its bases')."""
    return [name.removesuffix(".json") for name in storage.names(layout.TAGS) if name.endswith(".json")]


def visible_tag_names(storage: Storage) -> list[str]:
    """The names of every tag a line sees, sorted: the names of its own files under ``tags/`` (a stray one
    included: its lookup fails), and on a branch the tags of the lines it starts from that name a version of
    its history (up to where it left each line), as :func:`find_tag` resolves them: the nearest line holding
    a name decides. A line's own names cost one listing; a base line's tags are read."""
    names = set(tag_names(storage))
    decided = set(names)
    for _, view, newest in branched.base_lines(storage):
        for name in tag_names(view):
            if name in decided:
                continue
            decided.add(name)
            try:
                tag = read_tag(view, name)
            except VersionNotFoundError:
                continue  # a stray file, or a tag deleted since the listing
            if tag.version <= newest:
                names.add(name)
    return sorted(names)


def find_tag(storage: Storage, name: str) -> Tag:
    """Tag ``name`` as a line sees it: its own, else (on a branch) a tag of a line it starts from that names a
    version of its history (:func:`visible_tag_names`).

    Raises:
        VersionNotFoundError: no such tag, or one of a base line naming a version this branch does not hold
            (the message says how to read it).
        IntegrityError: the tag file is damaged.
    """
    try:
        return read_tag(storage, name)
    except VersionNotFoundError as exc:
        missing = exc
    for line, view, newest in branched.base_lines(storage):
        try:
            tag = read_tag(view, name)
        except VersionNotFoundError:
            continue
        if tag.version <= newest:
            return tag
        raise VersionNotFoundError(
            f"tag {name!r} names version {tag.version} of {line!r}, which is not in this branch's history (it "
            f"left {line!r} at version {newest}): read it with store.at('branch:{line}').at({name!r})"
        )
    raise missing


def read_tag(storage: Storage, name: str) -> Tag:
    """Tag ``name`` of the line ``storage`` is (its own tags only: :func:`find_tag` also sees its bases').

    Raises:
        VersionNotFoundError: there is no such tag (or the name is not a valid tag name).
        IntegrityError: the tag file is damaged.
    """
    try:
        check_tag_name(name)
    except ValueError as exc:
        raise VersionNotFoundError(f"there is no tag {name!r}: {exc}") from exc
    path = layout.tag(name)
    try:
        data = storage.read(path)
    except MissingFileError as exc:
        raise VersionNotFoundError(f"there is no tag {name!r}; tags: {sorted(tag_names(storage))}") from exc
    try:
        tag = Tag.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"tag file {path} is damaged: {first_problem(exc, 'document')}") from exc
    if tag.name != name:
        raise IntegrityError(f"tag file {path} says it is tag {tag.name!r}")
    return tag


def read_config(storage: Storage) -> StoreConfig:
    """``litstore.json``.

    Raises:
        MissingFileError: there is none.
        IntegrityError: it is damaged or of a newer format.
    """
    data = storage.read(layout.CONFIG)
    try:
        return StoreConfig.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"store config {layout.CONFIG} is damaged: {first_problem(exc, 'document')}") from exc
