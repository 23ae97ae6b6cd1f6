"""Reading one committed version: :class:`Snapshot`, frozen.

A :class:`Snapshot` reads exactly one committed version and never changes: its
version, lookups, key listing, iteration, manifest, ``sql``, ``verify``, ``diff``
and ``dataset`` all see that version, whatever other writers do. A
:class:`~litstore.store.Store` hands out snapshots (``store.head()``,
``store.at(v)``); a write makes a new one and leaves the old ones as they were.
A ``Snapshot`` caches what it has read (the key index, the manifest, open chunks);
give each thread or process its own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from litstore import query
from litstore._litdata.index import ChunkInfo
from litstore.errors import (
    IntegrityError,
    InvalidArgumentError,
    KeyNotFoundError,
    LitstoreError,
    QueryError,
    SplitError,
    VersionNotFoundError,
    describe,
)
from litstore.format import codec, hashing
from litstore.format.models import StoreConfig, Version, declared_fields
from litstore.read import log
from litstore.read.chunks import ChunkCache, mismatched
from litstore.read.groups import by_chunk, chunk_order, chunk_runs
from litstore.read.keyindex import KeyIndex
from litstore.read.manifests import ManifestCache
from litstore.storage import Storage
from litstore.txn.stage import release_freed

if TYPE_CHECKING:
    import pandas
    import polars

    from litstore.ops.audit import AuditReport
    from litstore.ops.diff import Diff
    from litstore.ops.verify import VerifyReport
    from litstore.streaming import VersionDataset

Record = dict[str, Any]
Key = str | int
#: What names a version: its number, its commit record, or a tag name.
VersionRef = int | str | Version | datetime
# Records decoded at once when iterating a version: bounds memory, keeps one decode pass.
_DECODE_BATCH = 1024
# Records get_many checks and decodes at once: about a megabyte, so they are still in cache when decoded.
_CHECK_BATCH = 1024
_Default = TypeVar("_Default")
#: ``get_many``'s default: a missing key raises instead of standing in for a record.
MISSING: Any = object()


class Snapshot:
    """A read-only view of one committed version.

    Supports ``snapshot[key]``, ``key in snapshot``, ``len(snapshot)`` and iteration
    over keys, like a read-only dict. Obtain one with ``store.head()`` or ``store.at(v)``.

    Main attributes and methods: version (its :class:`Version`), get(), get_many(),
    keys(), items(), manifest(), sql(), to_arrow(), dataset(), verify(), audit(),
    diff(), at(), versions().
    """

    def __init__(
        self,
        storage: Storage,
        config: StoreConfig,
        version: Version,
        model: type[pydantic.BaseModel] | None = None,
        *,
        manifests: ManifestCache | None = None,
        chunks: dict[str, list[ChunkInfo]] | None = None,
        index: KeyIndex | None = None,
        composed: Callable[[], pa.Table] | None = None,
    ) -> None:
        self._storage = storage
        self._config = config
        self._version = version
        self._model = model
        self._manifests = manifests if manifests is not None else ManifestCache()
        self._chunks = chunks
        self._index = index
        self._manifest: pa.Table | None = None
        self._composed = composed  # composes the manifest from the parent's in memory, instead of the files
        self._cache = ChunkCache(storage)

    def __repr__(self) -> str:
        counts = ", ".join(f"{split}={count}" for split, count in sorted(self._version.counts.items()))
        return f"<Snapshot {self._storage.url} version {self._version.number}: {len(self)} records ({counts})>"

    # -- what this is ------------------------------------------------------------

    @property
    def root(self) -> str:
        """Where the store lives."""
        return self._storage.url

    @property
    def storage(self) -> Storage:
        """The backend the store lives on."""
        return self._storage

    @property
    def config(self) -> StoreConfig:
        """The store's configuration, fixed at creation."""
        return self._config

    @property
    def model(self) -> type[pydantic.BaseModel] | None:
        """The pydantic model records are validated against, if the store has one."""
        return self._model

    @property
    def version(self) -> Version:
        """The commit record of the version this view reads."""
        return self._version

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names the store's rule can assign."""
        return tuple(self._config.splits.names)

    @property
    def chunk_cache(self) -> ChunkCache:
        """The chunks this snapshot has open (for the commit protocol's copy-on-write)."""
        return self._cache

    @property
    def built_index(self) -> KeyIndex | None:
        """The key index, if a lookup already built it (else ``None``; nothing is built)."""
        return self._index

    @property
    def built_manifest(self) -> pa.Table | None:
        """The manifest, if something already composed it (else ``None``; nothing is composed)."""
        return self._manifest

    def successor(
        self,
        version: Version,
        chunks: dict[str, list[ChunkInfo]] | None,
        index: KeyIndex | None,
        composed: Callable[[], pa.Table] | None = None,
    ) -> Snapshot:
        """A snapshot of a later ``version`` of the same store, sharing this one's caches.

        ``composed``, if given, makes that version's manifest when it is first asked for
        (a writer that holds its parent's manifest and the delta it committed), instead
        of reading the manifest files again.
        """
        return Snapshot(
            self._storage,
            self._config,
            version,
            self._model,
            manifests=self._manifests,
            chunks=chunks,
            index=index,
            composed=composed,
        )

    # -- lookups -----------------------------------------------------------------

    def __len__(self) -> int:
        return self._version.total

    def __getitem__(self, key: Key) -> Record:
        record = self._find(key)
        if record is None:
            raise KeyNotFoundError(f"key {key!r} is not in version {self._version.number}")
        return record

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not None

    def get(self, key: Key, default: _Default | None = None) -> Record | _Default | None:
        """The record with ``key``, or ``default`` if there is none."""
        record = self._find(key)
        return default if record is None else record

    def get_many(self, keys: Sequence[Key], default: Any = MISSING) -> list[Any]:
        """The records with ``keys``, in the same order.

        Keys that are missing raise :class:`KeyNotFoundError` naming them, unless a
        ``default`` is given to stand in for them. Every record is checked against its
        committed content hash and its key, as ``snapshot[key]`` checks one.
        """
        index = self._key_index()
        keys, hashes, valid = self._lookup_hashes(list(keys))
        positions, found = index.first_positions(hashes)
        if valid is not None:
            found &= valid
        hits = np.flatnonzero(found)
        places = positions[hits]
        rows = index.rows[places]
        order = chunk_order(index.chunk_ids[places], rows)  # each chunk read front to back
        hits, places, rows = hits[order], places[order], rows[order]
        records = self._checked_records(keys, hits, places, rows)
        if len(hits) == len(keys):  # all found: the records back in the order asked, then their keys checked
            back = np.empty(len(keys), dtype=np.intp)
            back[hits] = np.arange(len(keys))
            results = list(map(records.__getitem__, back.tolist()))
            try:
                if list(map(dict.get, results, repeat(self._config.key))) == keys:
                    return results
            except TypeError:  # a record that is not a dict: checked one by one below
                pass
        results = [default] * len(keys)
        key_field = self._config.key
        for i, record in zip(hits.tolist(), records, strict=True):
            key = keys[i]
            if not isinstance(record, dict) or record.get(key_field) != key:
                # A key-hash collision: the key's own record, if any, is at another position of its hash.
                record = self._find(key)
                if record is None:
                    found[i] = False
                    record = default
            results[i] = record
        if default is MISSING and not found.all():
            missing = [keys[i] for i in np.flatnonzero(~found).tolist()]
            raise KeyNotFoundError(
                f"{len(missing)} of {len(keys)} keys are not in version {self._version.number}: {describe(missing)}"
            )
        return results

    def _lookup_hashes(self, keys: list[Any]) -> tuple[list[Any], np.ndarray, np.ndarray | None]:
        """``get_many``'s keys normalized, their key hashes, and which can be keys at all (``None``: all)."""
        if self._config.key_type == "str" and set(map(type, keys)) <= {str}:
            return keys, hashing.str_key_hashes(keys), None  # the common case: nothing to check one by one
        keys = [hashing.normalize_key(key) for key in keys]
        key_type = self._config.key_type
        valid = np.fromiter((hashing.is_key(key, key_type) for key in keys), dtype=bool, count=len(keys))
        if valid.all():
            return keys, hashing.key_hashes(keys), None
        return keys, hashing.key_hashes(key if ok else "" for key, ok in zip(keys, valid.tolist(), strict=True)), valid

    def _checked_records(self, keys: list[Any], hits: np.ndarray, places: np.ndarray, rows: np.ndarray) -> list[Any]:
        """The decoded records at index ``places`` (sorted by chunk and row), each checked against its content hash.

        ``hits`` are the positions in ``keys`` they were asked for, to name damaged ones.
        """
        index = self._key_index()
        # np.take gathers the (n, 16) content hashes ten times faster than fancy indexing.
        chunk_ids, contents = index.chunk_ids[places], np.take(index.contents, places, axis=0)
        records: list[Any] = []
        for chunk_id, start, end in chunk_runs(chunk_ids):
            chunk = index.chunks[chunk_id]
            for first in range(start, end, _CHECK_BATCH):  # hashed, then decoded while still in cache
                last = min(first + _CHECK_BATCH, end)
                payloads = self._cache.payloads(chunk, rows[first:last])
                damaged = mismatched(payloads, contents[first:last])
                if len(damaged):
                    asked = [keys[i] for i in hits[first + damaged].tolist()]
                    raise self._damaged(chunk, rows[first + damaged], asked)
                try:
                    records += self._cache.decode(chunk, payloads)
                except IntegrityError as exc:
                    asked = [keys[i] for i in hits[first:last].tolist()]
                    raise self._undecodable(chunk, payloads, rows[first:last], asked) from exc
        return records

    def _undecodable(
        self, chunk: str, payloads: Sequence[bytes | memoryview], rows: np.ndarray, keys: Sequence[Key]
    ) -> IntegrityError:
        """The error naming the first of ``payloads`` that matches its content hash yet is not one canonical record."""
        for payload, row, key in zip(payloads, rows.tolist(), keys, strict=True):
            try:
                codec.decode_each([payload])
            except IntegrityError as exc:
                return IntegrityError(
                    f"the record of key {key!r} (version {self._version.number}; chunk {chunk}, row {row}) matches "
                    f"its committed content hash but is not one canonical record: {exc}"
                )
        return IntegrityError(f"records of chunk {chunk} do not decode together, yet each decodes alone")

    def existing_keys(
        self, keys: Iterable[Key] | pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None
    ) -> list[Key]:
        """Those of ``keys`` that this version holds, in the order given.

        ``hashes`` are the keys' key hashes, if the caller has them; only keys whose hash
        is present are looked at one by one, so checking a large batch of new keys costs
        one vectorised search.
        """
        if hashes is None:
            keys = keys if isinstance(keys, (pa.Array, pa.ChunkedArray)) else list(keys)
            hashes = hashing.key_hashes(keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys)
        found = self._key_index().contains(hashes)
        hits = np.flatnonzero(found).tolist()
        if isinstance(keys, (pa.Array, pa.ChunkedArray)):
            candidates = keys.take(pa.array(hits, pa.int64())).to_pylist() if hits else []
        else:
            listed = keys if isinstance(keys, list) else list(keys)
            candidates = [listed[i] for i in hits]
        return [key for key in candidates if key in self]

    def keys(self) -> list[Key]:
        """Every key of this version, sorted."""
        column = self.manifest().column("key")
        return list(column.take(pc.sort_indices(column)).to_pylist())

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def items(self) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` for every record, in storage order (fast: chunk by chunk)."""
        key_field = self._config.key
        index = self._key_index()
        for chunk_id, where, rows in by_chunk(index.chunk_ids, index.rows):
            chunk = index.chunks[chunk_id]
            for start in range(0, len(rows), _DECODE_BATCH):
                batch = rows[start : start + _DECODE_BATCH]
                payloads = self._cache.payloads(chunk, batch)
                damaged = mismatched(payloads, index.contents[where[start : start + _DECODE_BATCH]])
                if len(damaged):
                    raise self._damaged(chunk, batch[damaged])
                for row, record in zip(batch.tolist(), self._cache.decode(chunk, payloads), strict=True):
                    if not isinstance(record, dict) or key_field not in record:
                        raise self._damaged(chunk, np.array([row]))
                    yield record[key_field], record

    def values(self) -> Iterator[Record]:
        """Every record, in storage order."""
        for _, record in self.items():
            yield record

    # -- the manifest --------------------------------------------------------------

    def manifest(self) -> pa.Table:
        """This version's manifest: one row per live record (see :mod:`litstore.format.manifest`)."""
        if self._manifest is None:
            key = (self._version.number, self._version.transaction)
            cached = self._manifests.get(key)
            if cached is None:
                if self._composed is not None:
                    cached = self._composed()
                else:
                    cached = log.compose_manifest(self._storage, self._config, self._version.number)
                release_freed()  # composing a large manifest leaves hundreds of MiB freed in Arrow's pool
                self._manifests.put(key, cached)
            self._composed = None  # what it held (the parent's manifest) is no longer needed
            self._manifest = cached
        return self._manifest

    def sql(self, sql: str, version: VersionRef | None = None) -> pa.Table:
        """Run a DuckDB query in which ``manifest`` is the manifest of ``version`` (default: this one).

        Raises:
            QueryError: DuckDB rejected the query.
            VersionNotFoundError: no such version.
        """
        if version is not None and (view := self.at(version)) is not self:
            return view.sql(sql)
        try:
            return query.query(sql, {"manifest": self.manifest()})
        except query.DatabaseError as exc:
            raise QueryError(f"query failed: {exc}") from exc

    def verify(
        self,
        version: VersionRef | None = None,
        expected_keys: Iterable[Key] | None = None,
        *,
        progress: bool = False,
    ) -> VerifyReport:
        """Check ``version`` (default: this one) against its data and return a report.

        Reads every chunk of the version: see :mod:`litstore.ops.verify` for what is
        checked. ``expected_keys``, if given, must be exactly the version's keys.
        """
        if version is not None and (view := self.at(version)) is not self:
            return view.verify(expected_keys=expected_keys, progress=progress)
        from litstore.ops import verify

        # Read everything from storage again: verify must not trust what is in memory.
        listed = log.compose_manifest(self._storage, self._config, self._version.number)
        chunks = log.read_chunks(self._storage, self._version)
        return verify.verify(self._storage, self._config, self._version, listed, chunks, expected_keys, progress)

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The chunks of each split of this version, as its litdata index files list them."""
        if self._chunks is None:
            self._chunks = log.read_chunks(self._storage, self._version)
        return self._chunks

    def dataset(
        self,
        version: VersionRef | None = None,
        split: str | None = None,
        *,
        verify_records: bool = True,
        views_dir: str | os.PathLike[str] | None = None,
        where: str | None = None,
        keys: Iterable[Key] | None = None,
        **kwargs: Any,
    ) -> VersionDataset:
        """A litdata ``StreamingDataset`` over exactly the live records of ``version`` and ``split``.

        ``where`` (a SQL condition on the manifest's columns, see :meth:`select`) or
        ``keys`` stream only those records: they are copied once, in the split's
        order, into chunks of the private view directory (cached per version and
        subset), so a subset streams as fast per record as a whole split. A loader
        state saved on a subset resumes only on the same subset of the same version.

        ``version`` defaults to this one, ``split`` to all splits. Keyword arguments go
        to ``StreamingDataset`` (``shuffle``, ``seed``, ``drop_last``, ``transform``,
        ...). Items are decoded records. The chunks are read in place, never copied;
        pass the result to ``litdata.StreamingDataLoader`` as it is.

        Args:
            verify_records: check each item's bytes against the content hash the
                manifest committed for it (xxh3-128, well under a microsecond a record);
                ``False`` streams without the check and without reading the manifest.
            views_dir: where the private view directories live (see
                :mod:`litstore.streaming`); default ``$LITSTORE_VIEWS``, else the temp directory.
            where: stream only the records whose manifest row matches this condition.
            keys: stream only the records with these keys.

        Raises:
            SplitError: ``split`` is not one of the store's splits.
            LitstoreError: the version (or the subset) has no records in ``split``, or
                ``views_dir`` is not private to this user.
            QueryError: DuckDB rejected ``where``.
            KeyNotFoundError: some of ``keys`` are not in the version's ``split``.
            InvalidArgumentError: both ``where`` and ``keys`` were given.
            IntegrityError: the version's index does not list all of its records, or
                (while streaming) an item is not what was committed.
        """
        if version is not None and (view := self.at(version)) is not self:
            return view.dataset(
                split=split, verify_records=verify_records, views_dir=views_dir, where=where, keys=keys, **kwargs
            )
        if where is not None and keys is not None:
            raise InvalidArgumentError("pass where= or keys=, not both")
        if split is not None and split not in self.splits:
            raise SplitError(f"unknown split {split!r}; this store's splits are {self.splits}")
        listed = self.chunks()
        for name in sorted(set(listed) | set(self._version.counts)):
            if split not in (None, name):
                continue
            indexed = sum(chunk.num_items for chunk in listed.get(name, []))
            if indexed != self._version.counts.get(name, 0):
                raise IntegrityError(
                    f"the index of split {name!r} of version {self._version.number} lists {indexed} items, "
                    f"but the version holds {self._version.counts.get(name, 0)} records: the index is damaged"
                )
        chunks = [chunk for name, chunks in sorted(listed.items()) if split in (None, name) for chunk in chunks]
        if not chunks:
            raise LitstoreError(f"version {self._version.number} has no records in {split or 'any split'}")
        from litstore import streaming

        if where is not None or keys is not None:
            subset = self._subset(chunks, split, where, keys)
            return streaming.open_subset(
                self._storage, self._config, self._version, split, subset, verify_records, views_dir, **kwargs
            )
        records = streaming.stream_records(self.manifest(), chunks) if verify_records else None
        return streaming.open_dataset(
            self._storage, self._config, self._version, split, chunks, records, views_dir, **kwargs
        )

    def select(self, where: str, version: VersionRef | None = None) -> list[Key]:
        """Keys of ``version`` (default: this one) whose manifest row matches the SQL condition ``where``.

        ``where`` is a DuckDB condition on the manifest's columns (``split``, the key,
        the declared fields), e.g. ``"label IN (1, 2) AND split = 'train'"``, run
        like :meth:`sql`. Keys come sorted.

        Raises:
            QueryError: DuckDB rejected the condition.
            InvalidArgumentError: ``where`` is not a non-empty string.
        """
        if version is not None and (view := self.at(version)) is not self:
            return view.select(where)
        if not isinstance(where, str) or not where.strip():
            raise InvalidArgumentError(f"where must be a non-empty SQL condition, got {where!r}")
        found = self.sql(f'SELECT "key" FROM manifest WHERE ({where}\n) ORDER BY "key"')
        if found.num_columns != 1 or found.column_names[0] != "key":
            raise QueryError(f"where {where!r} is not a condition on the manifest's rows")
        return list(found.column(0).to_pylist())

    def _subset(self, chunks: list[ChunkInfo], split: str | None, where: str | None, keys: Any) -> pa.Table:
        """``key``, ``content_hash``, ``chunk``, ``row`` of the subset's records of ``chunks``, in stream order."""
        from litstore import streaming

        wanted: list[Key]
        if where is not None:
            wanted = self.select(where)
        else:
            if isinstance(keys, (str, bytes)):
                raise InvalidArgumentError(f"keys is a list of keys, not one key: use keys=[{keys!r}]")
            if not isinstance(keys, Iterable):
                raise InvalidArgumentError(f"keys is a list of keys, got {type(keys).__name__}")
            wanted = list(dict.fromkeys(hashing.normalize_key(key) for key in keys))  # type: ignore[misc,union-attr]
        ordered = streaming.stream_records(self.manifest(), chunks, located=True)
        key_type = ordered.schema.field("key").type
        valid = [key for key in wanted if hashing.is_key(key, self._config.key_type)]
        members = ordered.filter(pc.is_in(ordered.column("key"), pa.array(valid, key_type)))
        where_said = f"where {where!r}" if where is not None else f"the {len(wanted)} keys given"
        if keys is not None and members.num_rows != len(wanted):
            present = set(members.column("key").to_pylist())
            missing = [key for key in wanted if key not in present]
            raise KeyNotFoundError(
                f"{len(missing)} of {len(wanted)} keys are not in version {self._version.number} "
                f"({split or 'all splits'}): {describe(missing)}"
            )
        if not members.num_rows:
            raise LitstoreError(
                f"the subset ({where_said}) holds no records of version {self._version.number} in "
                f"{split or 'any split'}: there is nothing to stream"
            )
        return members

    @property
    def lookup_index_bytes(self) -> int:
        """Memory taken by this version's in-memory key index (built on first lookup)."""
        return self._key_index().nbytes

    # -- export (see litstore.export) ----------------------------------------------

    def to_arrow(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every record as an Arrow table; ``columns`` picks top-level fields (the key always comes first).

        Column types are inferred from the values; see :mod:`litstore.export`.
        """
        from litstore import export

        return export.to_arrow(self, columns)

    def iter_batches(self, batch_size: int = 65536, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The records as Arrow record batches of at most ``batch_size`` rows; memory holds one batch."""
        from litstore import export

        return export.iter_batches(self, batch_size, columns)

    def to_pandas(self, columns: Sequence[str] | None = None) -> pandas.DataFrame:
        """Every record as a pandas ``DataFrame`` (pandas is optional: ``pip install pandas``)."""
        from litstore import export

        return export.to_pandas(self, columns)

    def to_polars(self, columns: Sequence[str] | None = None) -> polars.DataFrame:
        """Every record as a polars ``DataFrame`` (polars is optional: ``pip install polars``)."""
        from litstore import export

        return export.to_polars(self, columns)

    def audit(self, version: VersionRef | None = None, *, examples: int = 5, progress: bool = False) -> AuditReport:
        """Records of ``version`` (default: this one) with identical content under different keys.

        Reads and decodes every record once, chunk by chunk (see :mod:`litstore.ops.audit`);
        the report also names identical records that sit in different splits (leakage).
        """
        if version is not None and (view := self.at(version)) is not self:
            return view.audit(examples=examples, progress=progress)
        from litstore.ops import audit

        return audit.audit(self, examples=examples, progress=progress)

    # -- history -----------------------------------------------------------------

    def versions(self) -> list[Version]:
        """Every committed version that is not expired, oldest first."""
        versions = []
        for number in log.version_numbers(self._storage):
            try:
                versions.append(log.read_version(self._storage, number))
            except VersionNotFoundError:
                continue  # expired by gc
        return versions

    def at(self, version: VersionRef) -> Snapshot:
        """A read-only view of ``version``: a number, a tag name, a ``Version``, or a time (the version current then).

        Raises:
            VersionNotFoundError: no such version or tag.
            InvalidArgumentError: ``version`` is not a version number, tag name, ``Version`` or time.
        """
        number = self.resolve(version)
        if number == self._version.number:
            return self
        return self.successor(log.read_version(self._storage, number), None, None)

    def diff(self, old: VersionRef, new: VersionRef | None = None, *, fields: bool = False) -> Diff:
        """Keys added, removed and changed from ``old`` to ``new`` (default: this version).

        Reads the two manifests only, never chunk data. Either order works: swapping
        the versions swaps added and removed. With ``fields=True`` the changed records
        (only those) are read from both versions to name the top-level fields that
        differ: a ``fields`` column on ``changed`` and ``Diff.field_counts``.
        """
        from litstore.ops.diff import Diff

        old_view = self.at(old)
        new_view = self if new is None else self.at(new)
        diff = Diff.of(old_view, new_view)
        return diff.with_fields(old_view, new_view) if fields else diff

    def resolve(self, version: VersionRef) -> int:
        """The version number ``version`` means (a number, a tag name, a ``Version`` or a time).

        Raises:
            VersionNotFoundError: no such version or tag.
            InvalidArgumentError: ``version`` is of another type, or not a whole number.
        """
        if isinstance(version, str):
            return log.read_tag(self._storage, version).version
        if isinstance(version, datetime):
            return self._current_at(version)
        if isinstance(version, Version):
            number = version.number
        elif isinstance(version, (int, np.integer)) and not isinstance(version, (bool, np.bool_)):
            number = int(version)
        else:
            shown = version if not isinstance(version, float) or math.isfinite(version) else str(version)
            raise InvalidArgumentError(
                f"a version is a whole number, a tag name, a Version or a datetime, not {shown!r} "
                f"({type(version).__name__})"
            )
        if number != self._version.number:
            try:
                if number < 0:
                    raise VersionNotFoundError(f"version {number} does not exist")
                log.read_version(self._storage, number)
            except VersionNotFoundError as exc:
                numbers = log.version_numbers(self._storage)
                kept = f"; the oldest version kept is {numbers[0]} and the latest is {numbers[-1]}" if numbers else ""
                raise VersionNotFoundError(f"{exc}{kept}") from None
        return number

    def _current_at(self, when: datetime) -> int:
        """The newest version committed at or before ``when`` (naive times are UTC)."""
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        numbers = [version.number for version in self.versions() if version.created_at <= when]
        if not numbers:
            raise VersionNotFoundError(f"no version kept was committed at or before {when:%Y-%m-%d %H:%M:%S %Z}")
        return numbers[-1]

    @property
    def fields(self) -> dict[str, str]:
        """The declared fields (name -> type) this version's manifest carries as columns."""
        return declared_fields(self._config, self._version)

    # -- internals -----------------------------------------------------------------

    def _key_index(self) -> KeyIndex:
        if self._index is None:
            self._index = KeyIndex.from_manifest(self.manifest())
            release_freed()
        return self._index

    def _find(self, key: object) -> Record | None:
        key = hashing.normalize_key(key)
        if not hashing.is_key(key, self._config.key_type):
            return None
        index = self._key_index()
        key_field = self._config.key
        for position in index.positions(hashing.key_hash(key)):  # type: ignore[arg-type]
            chunk, row = index.location(position)
            payload = self._cache.payload(chunk, row)
            if hashing.content_hash(payload) != index.content(position):
                raise self._damaged(chunk, np.array([row]), [key])  # type: ignore[list-item]
            record = codec.decode(payload, f"chunk {chunk} row {row}")
            if not isinstance(record, dict):
                raise self._damaged(chunk, np.array([row]), [key])  # type: ignore[list-item]
            if key_field not in record:  # every record holds its key: the config names another field
                raise IntegrityError(
                    f"the record at chunk {chunk}, row {row} (version {self._version.number}) has no field "
                    f"{key_field!r}, which the store's config names as its key: the config or the record is damaged"
                )
            if record.get(key_field) == key:
                return record
        return None

    def _damaged(self, chunk: str, rows: np.ndarray, keys: Sequence[Key] | None = None) -> IntegrityError:
        """The error for records of ``chunk`` at ``rows`` whose bytes are not what was committed.

        ``keys`` are the keys asked for; without them the manifest names the records.
        """
        if keys is None:
            manifest = self.manifest()
            at = pc.and_(pc.equal(manifest.column("chunk"), chunk), pc.is_in(manifest.column("row"), pa.array(rows)))
            keys = manifest.filter(at).column("key").to_pylist()
        places = describe([f"row {row}" for row in rows.tolist()])
        return IntegrityError(
            f"{len(rows)} record(s) of version {self._version.number} do not match their committed content hash "
            f"(keys {describe(list(keys))}; chunk {chunk}, {places}): the chunk is damaged; "
            "store.verify() lists every damaged record"
        )
