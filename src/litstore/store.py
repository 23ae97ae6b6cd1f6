"""Writing: :class:`Store`, a :class:`~litstore.snapshot.Snapshot` of the latest version that writes.

Each write commits a new version and moves the store to it (see
:mod:`litstore.writer` for the commit protocol). A ``Store`` sees its own writes;
versions committed by other writers become visible after :meth:`Store.refresh` or
when a store is opened. A ``Store`` object is not thread-safe; give each thread or
process its own.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from importlib import import_module
from typing import Any, Literal

import numpy as np
import pydantic
from pydantic.errors import PydanticUserError

from litstore import hashing, layout, manifest
from litstore._litdata import ChunkInfo
from litstore.changes import Change, plan_append, plan_delete, plan_upsert
from litstore.errors import (
    ConflictError,
    DuplicateKeyError,
    SchemaError,
    StoreExistsError,
    StoreNotFoundError,
    TagError,
    VersionNotFoundError,
    describe,
)
from litstore.gc import DEFAULT_GRACE, GCReport, choose_kept, collect
from litstore.keyindex import KeyIndex
from litstore.models import (
    FieldSplit,
    HashSplit,
    Operation,
    SchemaRef,
    SplitRule,
    StoreConfig,
    Tag,
    Version,
    check_tag_name,
)
from litstore.records import prepare
from litstore.snapshot import Key, Snapshot, checkpoint_of, compose_manifest, read_version
from litstore.storage import open_storage
from litstore.writer import discard, publish, stage

_MAX_COMMIT_ATTEMPTS = 200

#: An empty fingerprint (the sum over no records).
_EMPTY_FINGERPRINT = hashing.fingerprint_hex(0)


class Store(Snapshot):
    """A keyed, versioned dataset: read its latest version, write new ones.

    Create one with :meth:`Store.create`, open one with :func:`litstore.open`.
    """

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str],
        key: str = "id",
        splits: SplitRule | str | None = None,
        *,
        key_type: type | None = None,
        schema: type[pydantic.BaseModel] | None = None,
        chunk_bytes: int = 64 * 1024 * 1024,
        checkpoint_interval: int = 64,
        storage_options: dict[str, Any] | None = None,
    ) -> Store:
        """Create an empty store (version 0) at ``root``.

        Args:
            root: a local directory (created if needed) or ``s3://bucket/prefix``; it
                must not hold a store yet.
            key: the record field that holds each record's key.
            splits: ``HashSplit(train=0.9, val=0.1)`` to split by key hash, a field
                name (or ``FieldSplit``) to take the split from each record, or ``None``
                for a single split ``"train"``.
            key_type: ``str`` or ``int``; defaults to the schema's key annotation, else ``str``.
            schema: a pydantic model every record is validated against.
            chunk_bytes: target size of a chunk file.
            checkpoint_interval: write a full manifest at least every this many
                versions (also whenever the deltas since the last one outgrow the
                live records).
            storage_options: for ``s3://`` roots, keyword arguments of boto3's S3
                client (``endpoint_url``, credentials, ...), also used for streaming.

        Raises:
            StoreExistsError: ``root`` already holds a store.
        """
        rule: SplitRule
        if splits is None:
            rule = HashSplit(train=1.0)
        elif isinstance(splits, str):
            rule = FieldSplit(field=splits)
        else:
            rule = splits
        resolved_key_type = _resolve_key_type(key, key_type, schema)
        config = StoreConfig(
            key=key,
            key_type=resolved_key_type,
            splits=rule,
            record_schema=_schema_ref(schema) if schema is not None else None,
            chunk_bytes=chunk_bytes,
            checkpoint_interval=checkpoint_interval,
            created_at=datetime.now(UTC),
        )
        storage = open_storage(root, storage_options)
        if storage.exists(layout.CONFIG) or layout.version_numbers(storage.names(layout.VERSIONS)):
            raise StoreExistsError(f"{storage.url} already holds a store; open it with litstore.open()")
        if not storage.put_if_absent(layout.CONFIG, config.model_dump_json(indent=1).encode()):
            raise StoreExistsError(f"{storage.url} already holds a store; open it with litstore.open()")
        version = _initial_version(config)
        storage.put_if_absent(layout.version_record(0), version.model_dump_json(indent=1).encode())
        return cls(storage, config, version, schema)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        schema: type[pydantic.BaseModel] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Store:
        """Open the store at ``root`` (a local directory or ``s3://bucket/prefix``) at its latest version.

        Args:
            storage_options: for ``s3://`` roots, keyword arguments of boto3's S3 client.
            schema: the store's record model, if it declares one and the model cannot
                be imported by name. Reads work without it; writes need it.

        Raises:
            StoreNotFoundError: there is no store at ``root``.
        """
        storage = open_storage(root, storage_options)
        if not storage.exists(layout.CONFIG):
            raise StoreNotFoundError(f"no litstore store at {storage.url} (no {layout.CONFIG})")
        config = StoreConfig.model_validate_json(storage.read(layout.CONFIG))
        model = _resolve_schema(config, schema)
        numbers = layout.version_numbers(storage.names(layout.VERSIONS))
        if not numbers:  # a creator died between writing the config and version 0
            storage.put_if_absent(layout.version_record(0), _initial_version(config).model_dump_json().encode())
            numbers = [0]
        return cls(storage, config, read_version(storage, numbers[-1]), model)

    def refresh(self) -> Version:
        """Move to the latest committed version, including other writers' commits."""
        numbers = layout.version_numbers(self._storage.names(layout.VERSIONS))
        if numbers and numbers[-1] != self._version.number:
            self._move_to(read_version(self._storage, numbers[-1]), None)
        return self._version

    # -- writing -----------------------------------------------------------------

    def append(self, records: Iterable[Any], *, progress: bool = False) -> Version:
        """Add new records as one new version and return it.

        ``records`` are dicts (or instances of the store's schema) whose keys are not
        in the store yet; ``append`` never replaces a record. An empty batch commits
        nothing and returns the current version.

        Raises:
            KeyFieldError, DuplicateKeyError, SchemaError, SplitError: the batch was
                rejected; the store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        self._require_model()
        batch = prepare(records, self._config, self._model, progress)
        if not len(batch):
            return self._version
        _, found = self._key_index().first_positions(batch.key_hashes)
        existing = [key for key, hit in zip(batch.keys, found) if hit and key in self]
        if existing:
            culprits = [(batch.keys.index(key), key) for key in existing]
            raise DuplicateKeyError(
                f"{len(existing)} keys are already in the store (append never replaces; use upsert): "
                f"{describe(existing)}",
                culprits,
            )
        return self._commit(lambda: plan_append(batch), "append", progress)

    def upsert(self, records: Iterable[Any], *, progress: bool = False) -> Version:
        """Insert new keys and replace existing ones, as one new version; return it.

        A record whose content is unchanged is neither rewritten nor counted; if no
        record changes, nothing is committed and the current version is returned.

        Raises:
            KeyFieldError, DuplicateKeyError, SchemaError, SplitError: the batch was
                rejected (a replacement may not move a key to another split); the
                store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        self._require_model()
        batch = prepare(records, self._config, self._model, progress)
        if not len(batch):
            return self._version
        return self._commit(lambda: plan_upsert(batch, self.manifest(), self._cache), "upsert", progress)

    def delete(self, keys: Iterable[Key], *, missing_ok: bool = False, progress: bool = False) -> Version:
        """Remove ``keys`` as one new version and return it.

        Raises:
            KeyNotFoundError: some keys are not in the store (unless ``missing_ok``);
                the error names them and the store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        keys = list(keys)
        if not keys:
            return self._version
        return self._commit(lambda: plan_delete(keys, self.manifest(), self._cache, missing_ok), "delete", progress)

    def tag(self, name: str, version: int | Version | None = None, *, move: bool = False) -> Tag:
        """Name ``version`` (default: the latest) ``name``; ``store.at(name)`` then reads it.

        A tag never moves silently: tagging an existing name with another version
        raises unless ``move=True``.

        Raises:
            TagError: the name is invalid, or it names another version and ``move`` is false.
            VersionNotFoundError: no such version.
        """
        try:
            check_tag_name(name)
        except ValueError as exc:
            raise TagError(str(exc)) from exc
        number = self._version.number if version is None else self._resolve(version)
        tag = Tag(name=name, version=number, created_at=datetime.now(UTC))
        data = tag.model_dump_json(indent=1).encode()
        if self._storage.put_if_absent(layout.tag(name), data):
            return tag
        current = self._read_tag(name)
        if current.version == number:
            return current
        if not move:
            raise TagError(
                f"tag {name!r} already names version {current.version}; pass move=True to point it at {number}"
            )
        self._storage.write(layout.tag(name), data)
        return tag

    def delete_tag(self, name: str) -> None:
        """Remove tag ``name`` (the version it named stays).

        Raises:
            VersionNotFoundError: there is no such tag.
        """
        self._read_tag(name)
        self._storage.delete(layout.tag(name))

    def gc(
        self,
        keep_last: int | None = None,
        older_than: timedelta | datetime | None = None,
        *,
        dry_run: bool = False,
        grace: timedelta = DEFAULT_GRACE,
        progress: bool = False,
    ) -> GCReport:
        """Expire old versions and delete the files no kept version references.

        Kept: the latest version, every tagged version, the last ``keep_last``
        versions and those created after ``older_than`` (a duration or a time). With
        neither, every version is kept and only debris of writers that never
        committed is removed. Files younger than ``grace`` are never removed unless an
        expired version referenced them, so a live writer never loses its files.
        Returns what was removed (or, with ``dry_run``, what would be).
        """
        self.refresh()
        versions = self.versions()
        kept = choose_kept(versions, self.tags().values(), keep_last, older_than)
        manifest_names = set(self._storage.names(layout.MANIFESTS))

        def write_checkpoint(version: Version) -> None:
            assert version.transaction is not None
            full = compose_manifest(self._storage, self._config, version.number)
            path = layout.manifest_checkpoint(version.number, version.transaction)
            self._storage.write(path, manifest.to_parquet(full))
            manifest_names.add(path.removeprefix(f"{layout.MANIFESTS}/"))

        return collect(
            self._storage,
            versions,
            kept,
            lambda version: checkpoint_of(version, manifest_names) is not None,
            write_checkpoint,
            dry_run,
            grace,
            progress,
        )

    # -- internals -----------------------------------------------------------------

    def _commit(self, plan: Callable[[], Change], operation: Operation, progress: bool = False) -> Version:
        """Stage the planned change once, then publish it, rebasing over other writers' commits.

        When another writer commits first, the store catches up with it. If that
        writer added, replaced or deleted any key this change touches, nothing is
        committed and :class:`ConflictError` names the keys. If it only rewrote a chunk
        this change also rewrites, the change is planned and staged again. Otherwise
        the staged fragment is published on top of the new head.
        """
        change = plan()
        if change.empty:
            return self._version
        staged = stage(self._storage, self._config, change, progress)
        for attempt in range(_MAX_COMMIT_ATTEMPTS):
            try:
                version, chunks = publish(
                    self._storage,
                    self._config,
                    self._version,
                    self.chunks(),
                    change,
                    staged,
                    operation,
                    self.manifest,
                )
            except ConflictError:
                try:
                    touched, dropped = self._catch_up()
                except ConflictError:
                    discard(self._storage, staged)
                    raise
                clash = sorted(touched & change.touched_keys(), key=repr)
                if clash:
                    discard(self._storage, staged)
                    raise ConflictError(
                        f"another writer committed changes to {len(clash)} of the same keys first "
                        f"(now at version {self._version.number}): {describe(clash)}; nothing was committed"
                    ) from None
                if dropped & change.dropped_chunks:
                    discard(self._storage, staged)
                    change = plan()
                    if change.empty:
                        return self._version
                    staged = stage(self._storage, self._config, change, progress)
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                continue
            index = self._key_index()
            dropped_ids = [number for number, name in enumerate(index.chunks) if name in change.dropped_chunks]
            removed = np.flatnonzero(np.isin(index.chunk_ids, np.array(dropped_ids, dtype=np.uint32)))
            new_index = index.with_changes(removed, change.batch.key_hashes, staged.record_chunks, staged.record_rows)
            self._move_to(version, new_index, chunks)
            return version
        discard(self._storage, staged)
        raise ConflictError(f"gave up after {_MAX_COMMIT_ATTEMPTS} attempts to commit; nothing was committed")

    def _catch_up(self) -> tuple[set[Any], set[str]]:
        """Move to the latest version; return the keys and chunks the skipped commits changed."""
        touched: set[Any] = set()
        dropped: set[str] = set()
        start = self._version.number
        numbers = layout.version_numbers(self._storage.names(layout.VERSIONS))
        for number in (n for n in numbers if n > start):
            try:
                version = read_version(self._storage, number)
            except VersionNotFoundError:
                self.refresh()
                raise ConflictError(
                    f"version {number}, committed while this store was at version {start}, has since been expired "
                    "by gc, so this write cannot be checked against it; nothing was committed. "
                    f"The store is now at version {self._version.number}: retry the write."
                ) from None
            if version.manifest is not None:
                touched.update(
                    manifest.touched_keys(manifest.from_parquet(self._storage.read(version.manifest), version.manifest))
                )
            dropped.update(version.dropped_chunks)
            self._move_to(version, None)
        return touched, dropped

    def _require_model(self) -> None:
        if self._config.record_schema is not None and self._model is None:
            raise SchemaError(
                f"this store validates records against {self._config.record_schema.qualname}, which could not be "
                "imported; pass it as litstore.open(root, schema=...) to write"
            )

    def _move_to(
        self, version: Version, index: KeyIndex | None, chunks: dict[str, list[ChunkInfo]] | None = None
    ) -> None:
        self._version = version
        self._index = index
        self._manifest = None
        self._chunks = chunks


def open(  # noqa: A001
    root: str | os.PathLike[str],
    *,
    schema: type[pydantic.BaseModel] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Store:
    """Open the store at ``root`` at its latest version (see :meth:`Store.open`)."""
    return Store.open(root, schema=schema, storage_options=storage_options)


def _initial_version(config: StoreConfig) -> Version:
    return Version(
        number=0,
        parent=None,
        operation="create",
        created_at=config.created_at,
        counts={name: 0 for name in config.splits.names},
        fingerprint=_EMPTY_FINGERPRINT,
    )


def _resolve_key_type(
    key: str, key_type: type | None, schema: type[pydantic.BaseModel] | None
) -> Literal["str", "int"]:
    if key_type is None and schema is not None and key in schema.model_fields:
        key_type = int if schema.model_fields[key].annotation is int else str
    if key_type in (None, str, "str"):
        return "str"
    if key_type in (int, "int"):
        return "int"
    raise ValueError(f"key_type must be str or int, got {key_type!r}")


def _schema_ref(schema: type[pydantic.BaseModel]) -> SchemaRef:
    try:
        json_schema = schema.model_json_schema()
    except PydanticUserError:
        json_schema = {}
    return SchemaRef(qualname=f"{schema.__module__}:{schema.__qualname__}", json_schema=json_schema)


def _resolve_schema(config: StoreConfig, schema: type[pydantic.BaseModel] | None) -> type[pydantic.BaseModel] | None:
    declared = config.record_schema
    if declared is None:
        return schema
    if schema is None:
        module_name, _, qualname = declared.qualname.partition(":")
        try:
            found: Any = import_module(module_name)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            return None
        schema = found
    assert schema is not None
    if _schema_ref(schema).json_schema != declared.json_schema:
        raise SchemaError(
            f"{schema.__qualname__} does not match the schema this store was created with ({declared.qualname})"
        )
    return schema
