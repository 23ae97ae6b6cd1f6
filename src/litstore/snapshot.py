"""Reading one committed version: :class:`Snapshot`.

A :class:`Snapshot` reads one committed version and never changes: lookups, key
listing, iteration, the manifest, ``sql``, ``verify``, ``diff`` and ``dataset`` all
see exactly that version. :class:`~litstore.store.Store` extends it with writes.
A ``Snapshot`` is not thread-safe; give each thread or process its own.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pydantic

from litstore import _litdata, codec, hashing, layout, manifest, streaming
from litstore import verify as verification
from litstore._litdata import ChunkInfo
from litstore.chunks import ChunkCache
from litstore.diff import Diff
from litstore.errors import (
    KeyNotFoundError,
    LitstoreError,
    QueryError,
    SplitError,
    VersionNotFoundError,
    describe,
)
from litstore.keyindex import KeyIndex
from litstore.models import ExpiredVersion, StoreConfig, Tag, Version, check_tag_name
from litstore.s3 import S3Storage
from litstore.storage import Storage
from litstore.streaming import VersionDataset


class _ManifestCache:
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


Record = dict[str, Any]
# Records decoded at once when iterating a version: bounds memory, keeps one decode pass.
_DECODE_BATCH = 1024
Key = str | int
_Default = TypeVar("_Default")
_RAISE: Any = object()


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
        manifests: _ManifestCache | None = None,
    ) -> None:
        self._storage = storage
        self._manifests = manifests if manifests is not None else _ManifestCache()
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
        if self._config.key_type == "str":  # the common case, without a method call per key
            valid = np.fromiter((isinstance(key, str) for key in keys), dtype=bool, count=len(keys))
        else:
            valid = np.fromiter(
                (hashing.is_key(key, self._config.key_type) for key in keys), dtype=bool, count=len(keys)
            )
        if valid.all():
            hashes = hashing.key_hashes(keys)
        else:
            hashes = hashing.key_hashes(key if ok else "" for key, ok in zip(keys, valid.tolist(), strict=True))
        positions, found = index.first_positions(hashes)
        found &= valid
        hits = np.flatnonzero(found)
        chunk_ids, rows = index.chunk_ids[positions[hits]], index.rows[positions[hits]]
        order = np.lexsort((rows, chunk_ids))  # chunk by chunk, rows ascending
        hits, chunk_ids, rows = hits[order], chunk_ids[order], rows[order]
        results: list[Any] = [default] * len(keys)
        bounds = np.flatnonzero(np.diff(chunk_ids)) + 1
        groups = zip(np.split(hits, bounds), np.split(chunk_ids, bounds), np.split(rows, bounds), strict=True)
        for group, ids, group_rows in groups:
            if not len(group):
                continue
            records = self._cache.records(index.chunks[int(ids[0])], group_rows)
            for i, record in zip(group.tolist(), records, strict=True):
                key = keys[i]
                if record[key_field] != key:  # a key-hash collision: check every position with this hash
                    record = self._find(key)
                    if record is None:
                        found[i] = False
                        record = default
                results[i] = record
        if default is _RAISE and not found.all():
            missing = [keys[i] for i in np.flatnonzero(~found).tolist()]
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
        for name, rows in self._live_locations():
            for start in range(0, len(rows), _DECODE_BATCH):
                for record in self._cache.records(name, np.asarray(rows[start : start + _DECODE_BATCH])):
                    yield record[key_field], record

    def values(self) -> Iterator[Record]:
        """Every record, in storage order."""
        for _, record in self.items():
            yield record

    # -- the manifest --------------------------------------------------------------

    def manifest(self) -> pa.Table:
        """This version's manifest: one row per live record (see :mod:`litstore.manifest`)."""
        if self._manifest is None:
            key = (self._version.number, self._version.transaction)
            cached = self._manifests.get(key)
            if cached is None:
                cached = compose_manifest(self._storage, self._config, self._version.number)
                self._manifests.put(key, cached)
            self._manifest = cached
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
        # Read everything from storage again: verify must not trust what is in memory.
        listed = compose_manifest(self._storage, self._config, self._version.number)
        chunks = read_chunks(self._storage, self._version)
        return verification.verify(self._storage, self._config, self._version, listed, chunks, expected_keys, progress)

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The chunks of each split of this version, as its litdata index files list them."""
        if self._chunks is None:
            self._chunks = read_chunks(self._storage, self._version)
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
        versions = []
        for number in layout.version_numbers(self._storage.names(layout.VERSIONS)):
            try:
                versions.append(read_version(self._storage, number))
            except VersionNotFoundError:
                continue  # expired by gc
        return versions

    def at(self, version: int | str | Version) -> Snapshot:
        """A read-only view of ``version``: a number, a tag name, or a ``Version``.

        Raises:
            VersionNotFoundError: no such version or tag.
        """
        number = self._resolve(version)
        if number == self._version.number:
            snapshot = Snapshot(self._storage, self._config, self._version, self._model, self._manifests)
            snapshot._index, snapshot._manifest, snapshot._chunks = self._index, self._manifest, self._chunks
            return snapshot
        version_record = read_version(self._storage, number)
        return Snapshot(self._storage, self._config, version_record, self._model, self._manifests)

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

    def _key_index(self) -> KeyIndex:
        if self._index is None:
            self._index = KeyIndex.from_manifest(self.manifest())
        return self._index

    def _find(self, key: Key) -> Record | None:
        if not hashing.is_key(key, self._config.key_type):
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


def read_version(storage: Storage, number: int) -> Version:
    """The commit record of version ``number``.

    Raises:
        VersionNotFoundError: gc expired the version (its record is a tombstone).
    """
    data = storage.read(layout.version_record(number))
    if b'"expired"' in data:
        expired = ExpiredVersion.model_validate_json(data)
        raise VersionNotFoundError(f"version {number} was expired by gc at {expired.expired_at:%Y-%m-%d %H:%M} UTC")
    return Version.model_validate_json(data)


def read_chunks(storage: Storage, version: Version) -> dict[str, list[ChunkInfo]]:
    return {split: _litdata.parse_index_document(storage.read(path), path) for split, path in version.indexes.items()}


def compose_manifest(storage: Storage, config: StoreConfig, number: int) -> pa.Table:
    """The manifest of version ``number``: the newest checkpoint at or below it, then deltas."""
    checkpoints = set(storage.names(layout.MANIFESTS))
    pending: list[str] = []
    checkpoint = None
    while number > 0:
        version = read_version(storage, number)
        path = checkpoint_of(version, checkpoints)
        if path is not None:
            checkpoint = manifest.from_parquet(storage.read(path), path)
            break
        if version.manifest is not None:
            pending.append(version.manifest)
        number -= 1
    deltas = [manifest.from_parquet(storage.read(path), path) for path in reversed(pending)]
    return manifest.compose(config.key_type, checkpoint, deltas)


def checkpoint_of(version: Version, manifest_names: set[str]) -> str | None:
    """The full-manifest checkpoint of ``version``: written with its commit or later by gc."""
    if version.checkpoint is not None:
        return version.checkpoint
    if version.transaction is None:
        return None
    path = layout.manifest_checkpoint(version.number, version.transaction)
    return path if path.removeprefix(f"{layout.MANIFESTS}/") in manifest_names else None
