"""The public face of litstore: :class:`Store` (read and write) and :class:`Snapshot`.

A :class:`Snapshot` reads one committed version and never changes: lookups, key
listing, iteration, the manifest, ``sql`` and ``verify`` all see exactly that
version. A :class:`Store` is a snapshot of its latest version that can also write;
each write commits a new version and moves the store to it.

Concurrency: a ``Store`` sees its own writes. Versions committed by other writers
become visible after :meth:`Store.refresh` (or when a new store is opened). A
``Store`` object is not thread-safe; give each thread or process its own.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from importlib import import_module
from typing import Any, Literal, TypeVar

import numpy as np
import pyarrow as pa
import pydantic
from pydantic.errors import PydanticUserError

from litstore import _litdata, codec, hashing, layout, manifest, streaming
from litstore import verify as verification
from litstore._litdata import ChunkInfo
from litstore.changes import Change, plan_append, plan_delete, plan_upsert
from litstore.chunks import ChunkCache
from litstore.diff import Diff
from litstore.errors import (
    ConflictError,
    DuplicateKeyError,
    KeyNotFoundError,
    LitstoreError,
    QueryError,
    SchemaError,
    SplitError,
    StoreExistsError,
    StoreNotFoundError,
    TagError,
    VersionNotFoundError,
    describe,
)
from litstore.gc import DEFAULT_GRACE, GCReport, choose_kept, collect
from litstore.keyindex import KeyIndex
from litstore.models import HashSplit, Operation, SchemaRef, SplitRule, StoreConfig, Tag, Version, check_tag_name
from litstore.records import prepare
from litstore.s3 import S3Storage
from litstore.storage import Storage, open_storage
from litstore.streaming import VersionDataset
from litstore.writer import discard, publish, stage

Record = dict[str, Any]
Key = str | int
_Default = TypeVar("_Default")
_RAISE: Any = object()

_MAX_COMMIT_ATTEMPTS = 200

#: An empty fingerprint (the sum over no records).
_EMPTY_FINGERPRINT = hashing.fingerprint_hex(0)


class Snapshot:
    """A read-only view of one committed version.

    Supports ``snapshot[key]``, ``key in snapshot``, ``len(snapshot)`` and iteration
    over keys, like a read-only dict. Obtain one with :meth:`Store.at`.
    """

    def __init__(
        self,
        storage: Storage,
        config: StoreConfig,
        version: Version,
        model: type[pydantic.BaseModel] | None = None,
    ) -> None:
        self._storage = storage
        self._config = config
        self._version = version
        self._model = model
        self._index: KeyIndex | None = None
        self._manifest: pa.Table | None = None
        self._chunks: dict[str, list[ChunkInfo]] | None = None
        self._cache = ChunkCache(storage)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._storage.url!r}, version={self._version.number}, records={len(self)})"

    # -- what this is ------------------------------------------------------------

    @property
    def root(self) -> str:
        """Where the store lives."""
        return self._storage.url

    @property
    def config(self) -> StoreConfig:
        """The store's configuration, fixed at creation."""
        return self._config

    @property
    def version(self) -> Version:
        """The commit record of the version this view reads."""
        return self._version

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names the store's rule can assign."""
        return tuple(self._config.splits.names)

    # -- lookups -----------------------------------------------------------------

    def __len__(self) -> int:
        return self._version.total

    def __getitem__(self, key: Key) -> Record:
        record = self._find(key)
        if record is None:
            raise KeyNotFoundError(f"key {key!r} is not in version {self._version.number}")
        return record

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (str, int)) and self._find(key) is not None

    def get(self, key: Key, default: _Default | None = None) -> Record | _Default | None:
        """The record with ``key``, or ``default`` if there is none."""
        record = self._find(key)
        return default if record is None else record

    def get_many(self, keys: Sequence[Key], default: Any = _RAISE) -> list[Any]:
        """The records with ``keys``, in the same order.

        Keys that are missing raise :class:`KeyNotFoundError` naming them, unless a
        ``default`` is given to stand in for them.
        """
        keys = list(keys)
        index = self._key_index()
        key_field = self._config.key
        valid = [self._valid_key(key) for key in keys]
        hashes = hashing.key_hashes(key if ok else "" for key, ok in zip(keys, valid))
        positions, found = index.first_positions(hashes)
        results: list[Any] = [None] * len(keys)
        missing: list[Key] = []
        payload = self._cache.payload
        decode = codec.decode
        chunk_ids = index.chunk_ids
        order = np.argsort(np.where(found, chunk_ids[np.minimum(positions, max(len(index) - 1, 0))], -1), kind="stable")
        for i in order.tolist():
            key = keys[i]
            record = None
            if found[i] and valid[i]:
                position = int(positions[i])
                chunk, row = index.location(position)
                record = decode(payload(chunk, row))
                if record[key_field] != key:
                    record = self._find(key)
            if record is None:
                if default is _RAISE:
                    missing.append(key)
                record = default
            results[i] = record
        if missing:
            raise KeyNotFoundError(
                f"{len(missing)} of {len(keys)} keys are not in version {self._version.number}: {describe(missing)}"
            )
        return results

    def keys(self) -> list[Key]:
        """Every key of this version, in manifest (key-hash) order."""
        return list(self.manifest().column("key").to_pylist())

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def items(self) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` for every record, in storage order (fast: chunk by chunk)."""
        key_field = self._config.key
        for chunk in self._live_locations():
            name, rows = chunk
            for row in rows:
                record = codec.decode(self._cache.payload(name, row))
                yield record[key_field], record

    def values(self) -> Iterator[Record]:
        """Every record, in storage order."""
        for _, record in self.items():
            yield record

    # -- the manifest --------------------------------------------------------------

    def manifest(self) -> pa.Table:
        """This version's manifest: one row per live record (see :mod:`litstore.manifest`)."""
        if self._manifest is None:
            self._manifest = _compose(self._storage, self._config, self._version.number)
        return self._manifest

    def sql(self, query: str, version: int | Version | None = None) -> pa.Table:
        """Run a DuckDB query in which ``manifest`` is the manifest of ``version``.

        ``version`` defaults to the version this view reads.

        Raises:
            QueryError: DuckDB rejected the query.
            VersionNotFoundError: no such version.
        """
        if version is not None and int(version) != self._version.number:
            return self.at(version).sql(query)
        try:
            return manifest.query(query, {"manifest": self.manifest()})
        except manifest.QueryError as exc:
            raise QueryError(f"query failed: {exc}") from exc

    def verify(
        self,
        version: int | Version | None = None,
        expected_keys: Iterable[Key] | None = None,
        *,
        progress: bool = False,
    ) -> verification.VerifyReport:
        """Check ``version`` (default: this view's) against its data and return a report.

        Reads every chunk of the version: see :func:`litstore.verify.verify` for what
        is checked. ``expected_keys``, if given, must be exactly the version's keys.
        """
        if version is not None and int(version) != self._version.number:
            return self.at(version).verify(expected_keys=expected_keys, progress=progress)
        return verification.verify(
            self._storage, self._config, self._version, self.manifest(), self.chunks(), expected_keys, progress
        )

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The chunks of each split of this version, as its litdata index files list them."""
        if self._chunks is None:
            self._chunks = _read_chunks(self._storage, self._version)
        return self._chunks

    def dataset(
        self, version: int | str | Version | None = None, split: str | None = None, **kwargs: Any
    ) -> VersionDataset:
        """A litdata ``StreamingDataset`` over exactly the live records of ``version`` and ``split``.

        ``version`` defaults to this view's version, ``split`` to all splits. Keyword
        arguments go to ``StreamingDataset`` (``shuffle``, ``seed``, ``drop_last``,
        ``transform``, ...). Items are decoded records. The chunks are read in place,
        never copied; pass the result to ``litdata.StreamingDataLoader`` as it is.

        Raises:
            SplitError: ``split`` is not one of the store's splits.
            LitstoreError: the version has no records in ``split``.
        """
        if version is not None and self._resolve(version) != self._version.number:
            return self.at(version).dataset(split=split, **kwargs)
        if split is not None and split not in self.splits:
            raise SplitError(f"unknown split {split!r}; this store's splits are {self.splits}")
        chunks = [chunk for name, listed in sorted(self.chunks().items()) if split in (None, name) for chunk in listed]
        if not chunks:
            raise LitstoreError(f"version {self._version.number} has no records in {split or 'any split'}")
        view = streaming.view(
            self._storage.url,
            self._storage.is_local,
            self._version.number,
            self._version.transaction or "initial",
            split,
            chunks,
            self._config.chunk_bytes,
        )
        identity = {
            "root": self._storage.url,
            "version": self._version.number,
            "split": split,
            "fingerprint": self._version.fingerprint,
        }
        if self._storage.is_local:
            return VersionDataset(str(view), identity, **kwargs)
        assert isinstance(self._storage, S3Storage)
        kwargs.setdefault("cache_dir", str(view / "cache"))
        kwargs.setdefault("storage_options", self._storage.storage_options)
        return VersionDataset(
            self._storage.url,
            identity,
            plain_http=self._storage.uses_plain_http,
            index_path=str(view / "index.json"),
            **kwargs,
        )

    @property
    def lookup_index_bytes(self) -> int:
        """Memory taken by this version's in-memory key index (built on first lookup)."""
        return self._key_index().nbytes

    # -- history -----------------------------------------------------------------

    def versions(self) -> list[Version]:
        """Every committed version, oldest first."""
        numbers = layout.version_numbers(self._storage.names(layout.VERSIONS))
        return [_read_version(self._storage, number) for number in numbers]

    def at(self, version: int | str | Version) -> Snapshot:
        """A read-only view of ``version``: a number, a tag name, or a ``Version``.

        Raises:
            VersionNotFoundError: no such version or tag.
        """
        number = self._resolve(version)
        if number == self._version.number:
            snapshot = Snapshot(self._storage, self._config, self._version, self._model)
            snapshot._index, snapshot._manifest, snapshot._chunks = self._index, self._manifest, self._chunks
            return snapshot
        return Snapshot(self._storage, self._config, _read_version(self._storage, number), self._model)

    def tags(self) -> dict[str, int]:
        """Every tag and the version it names."""
        return {name: self._read_tag(name).version for name in self._tag_names()}

    def diff(self, old: int | str | Version, new: int | str | Version | None = None) -> Diff:
        """Keys added, removed and changed from ``old`` to ``new`` (default: this version).

        Reads the two manifests only, never chunk data. Either order works: swapping
        the versions swaps added and removed.
        """
        old_view = self.at(old)
        new_view = self if new is None else self.at(new)
        return Diff.between(old_view.version.number, new_view.version.number, old_view.manifest(), new_view.manifest())

    # -- internals -----------------------------------------------------------------

    def _resolve(self, version: int | str | Version) -> int:
        """The version number that ``version`` (number, tag name or Version) means."""
        if isinstance(version, str):
            return self._read_tag(version).version
        number = int(version)
        if number != self._version.number and (number < 0 or not self._storage.exists(layout.version_record(number))):
            numbers = layout.version_numbers(self._storage.names(layout.VERSIONS))
            raise VersionNotFoundError(
                f"version {version!r} does not exist; the oldest version kept is {numbers[0]} "
                f"and the latest is {numbers[-1]}"
            )
        return number

    def _read_tag(self, name: str) -> Tag:
        try:
            check_tag_name(name)
        except ValueError as exc:
            raise VersionNotFoundError(f"there is no tag {name!r}: {exc}") from exc
        if not self._storage.exists(layout.tag(name)):
            raise VersionNotFoundError(f"there is no tag {name!r}; tags: {sorted(self._tag_names())}")
        return Tag.model_validate_json(self._storage.read(layout.tag(name)))

    def _tag_names(self) -> list[str]:
        return [name.removesuffix(".json") for name in self._storage.names(layout.TAGS) if name.endswith(".json")]

    def _valid_key(self, key: object) -> bool:
        if self._config.key_type == "str":
            return isinstance(key, str)
        return isinstance(key, int) and not isinstance(key, bool) and -(2**63) <= key < 2**63

    def _key_index(self) -> KeyIndex:
        if self._index is None:
            self._index = KeyIndex.from_manifest(self.manifest())
        return self._index

    def _find(self, key: Key) -> Record | None:
        if not self._valid_key(key):
            return None
        index = self._key_index()
        key_field = self._config.key
        for position in index.positions(hashing.key_hash(key)):
            chunk, row = index.location(position)
            record = codec.decode(self._cache.payload(chunk, row))
            if record[key_field] == key:
                return record  # type: ignore[no-any-return]
        return None

    def _live_locations(self) -> Iterator[tuple[str, list[int]]]:
        """Live rows grouped by chunk, chunks in index order, rows ascending."""
        index = self._key_index()
        order = np.lexsort((index.rows, index.chunk_ids))
        chunk_ids, rows = index.chunk_ids[order], index.rows[order]
        boundaries = np.flatnonzero(np.diff(chunk_ids)) + 1
        for ids, chunk_rows in zip(np.split(chunk_ids, boundaries), np.split(rows, boundaries)):
            if len(ids):
                yield index.chunks[int(ids[0])], chunk_rows.tolist()


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
            checkpoint_interval: write a full manifest every this many versions.
            storage_options: for ``s3://`` roots, keyword arguments of boto3's S3
                client (``endpoint_url``, credentials, ...), also used for streaming.

        Raises:
            StoreExistsError: ``root`` already holds a store.
        """
        from litstore.models import FieldSplit

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
        return cls(storage, config, _read_version(storage, numbers[-1]), model)

    def refresh(self) -> Version:
        """Move to the latest committed version, including other writers' commits."""
        numbers = layout.version_numbers(self._storage.names(layout.VERSIONS))
        if numbers and numbers[-1] != self._version.number:
            self._move_to(_read_version(self._storage, numbers[-1]), None)
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
        return self._commit(lambda: plan_append(batch), "append")

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
        return self._commit(lambda: plan_upsert(batch, self.manifest(), self._cache), "upsert")

    def delete(self, keys: Iterable[Key], *, missing_ok: bool = False) -> Version:
        """Remove ``keys`` as one new version and return it.

        Raises:
            KeyNotFoundError: some keys are not in the store (unless ``missing_ok``);
                the error names them and the store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        keys = list(keys)
        if not keys:
            return self._version
        return self._commit(lambda: plan_delete(keys, self.manifest(), self._cache, missing_ok), "delete")

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
            full = _compose(self._storage, self._config, version.number)
            path = layout.manifest_checkpoint(version.number, version.transaction)
            self._storage.write(path, manifest.to_parquet(full))
            manifest_names.add(path.removeprefix(f"{layout.MANIFESTS}/"))

        return collect(
            self._storage,
            versions,
            kept,
            lambda version: _checkpoint_of(version, manifest_names) is not None,
            write_checkpoint,
            dry_run,
            grace,
            progress,
        )

    # -- internals -----------------------------------------------------------------

    def _commit(self, plan: Callable[[], Change], operation: Operation) -> Version:
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
        staged = stage(self._storage, self._config, change)
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
                    self._manifest_if_checkpoint_due(),
                )
            except ConflictError:
                touched, dropped = self._catch_up()
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
                    staged = stage(self._storage, self._config, change)
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
            version = _read_version(self._storage, number)
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

    def _manifest_if_checkpoint_due(self) -> pa.Table | None:
        if (self._version.number + 1) % self._config.checkpoint_interval:
            return None
        return self.manifest()

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


def _read_version(storage: Storage, number: int) -> Version:
    return Version.model_validate_json(storage.read(layout.version_record(number)))


def _read_chunks(storage: Storage, version: Version) -> dict[str, list[ChunkInfo]]:
    return {split: _litdata.parse_index_document(storage.read(path), path) for split, path in version.indexes.items()}


def _compose(storage: Storage, config: StoreConfig, number: int) -> pa.Table:
    """The manifest of version ``number``: the newest checkpoint at or below it, then deltas."""
    checkpoints = set(storage.names(layout.MANIFESTS))
    pending: list[str] = []
    checkpoint = None
    while number > 0:
        version = _read_version(storage, number)
        path = _checkpoint_of(version, checkpoints)
        if path is not None:
            checkpoint = manifest.from_parquet(storage.read(path), path)
            break
        if version.manifest is not None:
            pending.append(version.manifest)
        number -= 1
    deltas = [manifest.from_parquet(storage.read(path), path) for path in reversed(pending)]
    return manifest.compose(config.key_type, checkpoint, deltas)


def _checkpoint_of(version: Version, manifest_names: set[str]) -> str | None:
    """The full-manifest checkpoint of ``version``: written with its commit or later by gc."""
    if version.checkpoint is not None:
        return version.checkpoint
    if version.transaction is None:
        return None
    path = layout.manifest_checkpoint(version.number, version.transaction)
    return path if path.removeprefix(f"{layout.MANIFESTS}/") in manifest_names else None


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
