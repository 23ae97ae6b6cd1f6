"""The engine of one committed version: config, commit record, chunks, manifest, key index, checked reads.

:class:`VersionReader` is what every part of litstore that reads a version works on:
the user's :class:`~litstore.snapshot.Snapshot` is a facade over one, and the commit
protocol (``txn``), ``ops`` and the exports take one. It reads lazily and caches
what it read (the manifest through a :class:`~litstore.read.manifests.ManifestCache`
shared with its successors, the key index, open chunks); a write passes its caches
on to the next version's reader (:meth:`VersionReader.successor`). Give each thread
or process its own.

Every record it returns was checked against the content hash its version committed
and decoded by its :class:`~litstore.read.checked.RecordCheck` (the one path every
reader takes), and checked against its key, so damage is a
:class:`~litstore.errors.DamagedRecordError` naming key, chunk and row, never another
record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from litstore import query
from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, KeyNotFoundError, VersionNotFoundError, describe
from litstore.format import hashing, keyrun
from litstore.format import manifest as manifest_format
from litstore.format.models import ExpiredVersion, StoreConfig, Version, declared_fields
from litstore.read import chunkhashes, keyruns, listings, log
from litstore.read.checked import RecordCheck, asked_keys
from litstore.read.chunks import ChunkCache
from litstore.read.deletions import Deletions
from litstore.read.groups import by_chunk, chunk_order, chunk_runs
from litstore.read.keyindex import KeyIndex
from litstore.read.keyruns import RunReader
from litstore.read.manifests import ManifestCache, compose_manifest, consume_manifest, keys_at
from litstore.read.memory import release_freed
from litstore.storage import Storage

Record = dict[str, Any]
Key = str | int
# Records decoded at once when iterating a version: bounds memory, keeps one decode pass.
_DECODE_BATCH = 1024
# Records get_many checks and decodes at once: about a megabyte, so they are still in cache when decoded.
_CHECK_BATCH = 1024
#: Versions of more rows than this are streamed by ``sql()`` and ``keys()`` rather than composed whole: above it,
#: holding the composed manifest costs more memory than streaming costs time (``benchmarks/bench_sql.py``).
STREAMED_ROWS = 1_000_000
#: ``get_many``'s default: a missing key raises instead of standing in for a record.
MISSING: Any = object()


class VersionReader:
    """Reads one committed version of a store; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        config: StoreConfig,
        version: Version,
        *,
        manifests: ManifestCache | None = None,
        chunks: dict[str, list[ChunkInfo]] | None = None,
        index: KeyIndex | None = None,
        composed: Callable[[], pa.Table] | None = None,
        runs: dict[str, RunReader] | None = None,
        listing: listings.VersionListing | None = None,
    ) -> None:
        self._storage = storage
        self._config = config
        self._version = version
        self._manifests = manifests if manifests is not None else ManifestCache()
        self._chunks = chunks if listing is None else listing.chunks
        self._listing = listing
        self._index = index
        self._manifest: pa.Table | None = None
        self._composed = composed  # composes the manifest from the parent's in memory, instead of the files
        self._cache = ChunkCache(storage)
        self._check = RecordCheck(version.number, self._keys_at)
        self._run_readers = runs if runs is not None else {}  # open key runs, shared with successors
        self._deletions: Deletions | None = None

    def __repr__(self) -> str:
        return f"<VersionReader {self._storage.url} version {self._version.number}>"

    @property
    def storage(self) -> Storage:
        """The backend the store lives on."""
        return self._storage

    @property
    def config(self) -> StoreConfig:
        """The store's configuration, fixed at creation."""
        return self._config

    @property
    def version(self) -> Version:
        """The commit record of the version this reads."""
        return self._version

    @property
    def fields(self) -> dict[str, str]:
        """The declared fields (name -> type) this version's manifest carries as columns."""
        return declared_fields(self._config, self._version)

    @property
    def chunk_cache(self) -> ChunkCache:
        """The chunks this reader has open (for the commit protocol's copy-on-write)."""
        return self._cache

    @property
    def check(self) -> RecordCheck:
        """Checks and decodes this version's records, naming damaged ones (keys from the manifest)."""
        return self._check

    @property
    def deletions(self) -> Deletions:
        """The dead rows of this version's chunks (format 4), read as needed."""
        if self._deletions is None:
            self._deletions = Deletions(self._storage, self._version.number, self.listing().deletions)
        return self._deletions

    @property
    def built_listing(self) -> listings.VersionListing | None:
        """The listing, if it is at hand without reading anything (else ``None``; nothing is read)."""
        if self._listing is None and self._chunks is not None and not self._version.listed_by_delta:
            self._listing = listings.VersionListing(self._chunks, self._version.deletions)
        return self._listing

    def listing(self) -> listings.VersionListing:
        """This version's chunks and deletion vectors, composed from its chain where it is listed by delta."""
        if self._listing is None:
            if self._chunks is not None and not self._version.listed_by_delta:
                self._listing = listings.VersionListing(self._chunks, self._version.deletions)
            else:
                self._listing = listings.read_listing(self._storage, self._version)
                if self._chunks is None:
                    self._chunks = self._listing.chunks
        return self._listing

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
        chunks: dict[str, list[ChunkInfo]] | None = None,
        index: KeyIndex | None = None,
        composed: Callable[[], pa.Table] | None = None,
        listing: listings.VersionListing | None = None,
    ) -> VersionReader:
        """A reader of another ``version`` of the same store, sharing this one's manifest cache.

        ``chunks`` (or its whole ``listing``) and ``index``, if given, are that version's (a write knows them);
        ``composed``, if given, makes that version's manifest when it is first asked for
        (a writer that holds its parent's manifest and the delta it committed), instead
        of reading the manifest files again.
        """
        return VersionReader(
            self._storage,
            self._config,
            version,
            manifests=self._manifests,
            chunks=chunks,
            index=index,
            composed=composed,
            runs=self._run_readers,
            listing=listing,
        )

    def reconfigured(self, config: StoreConfig) -> VersionReader:
        """This reader under ``config``, the store's config as ``Store.upgrade`` left it (its format changed);
        ``self`` if it is the one this reader has. The caches are shared."""
        if config == self._config:
            return self
        return VersionReader(
            self._storage,
            config,
            self._version,
            manifests=self._manifests,
            chunks=self._chunks,
            index=self._index,
            composed=self._composed,
            runs=self._run_readers,
            listing=self._listing,
        )

    def at(self, number: int) -> VersionReader:
        """A reader of version ``number`` (this one, if it is its number).

        Raises:
            VersionNotFoundError: no such version (or it was expired).
        """
        if number == self._version.number:
            return self
        return self.successor(log.read_version(self._storage, number))

    def __len__(self) -> int:
        return self._version.total

    def versions(self) -> list[Version]:
        """Every committed version of the store that is not expired, oldest first."""
        versions = []
        for number in log.version_numbers(self._storage):
            try:
                versions.append(log.read_version(self._storage, number))
            except VersionNotFoundError:
                continue  # expired by gc
        return versions

    def manifest(self) -> pa.Table:
        """This version's manifest: one row per live record (see :mod:`litstore.format.manifest`)."""
        if self._manifest is None:
            key = (self._version.number, self._version.transaction)
            cached = self._manifests.get(key)
            if cached is None:
                if self._composed is not None:
                    cached = self._composed()
                else:
                    cached = compose_manifest(self._storage, self._config, self._version.number)
                release_freed()  # composing a large manifest leaves hundreds of MiB freed in Arrow's pool
                self._manifests.put(key, cached)
            self._composed = None  # what it held (the parent's manifest) is no longer needed
            self._manifest = cached
        return self._manifest

    def _held_manifest(self) -> pa.Table | None:
        """The manifest if this reader or the cache it shares already holds it (nothing is composed)."""
        if self._manifest is None:
            return self._manifests.get((self._version.number, self._version.transaction))
        return self._manifest

    def _manifest_if_small(self) -> pa.Table | None:
        """The manifest, if it is held already or the version has at most :data:`STREAMED_ROWS` rows; else ``None``."""
        held = self._held_manifest()
        if held is None and self._version.total <= STREAMED_ROWS:
            return self.manifest()
        return held

    def sql(self, sql: str) -> pa.Table:
        """Run a DuckDB query in which ``manifest`` is this version's manifest, in :mod:`litstore.query`'s sandbox.

        A version of at most :data:`STREAMED_ROWS` rows (or whose manifest is held) is
        queried in place, its manifest composed and kept. A larger one is streamed
        (:func:`~litstore.read.manifests.stream_manifest`) into a table DuckDB holds in
        bounded memory (:func:`~litstore.query.query_streamed`): no Arrow table of the version.

        Raises:
            duckdb.Error: DuckDB rejected the query (callers translate it).
            IntegrityError: a manifest file is damaged.
        """
        manifest = self._manifest_if_small()
        if manifest is not None:
            return query.query(sql, {"manifest": manifest})
        return consume_manifest(
            self._storage,
            self._config,
            self._version.number,
            lambda schema, parts: query.query_streamed(sql, "manifest", schema, parts),
        )

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The chunks of each split of this version, as its litdata index files list them."""
        if self._chunks is None:
            self._chunks = self.listing().chunks
        return self._chunks

    def key_index(self) -> KeyIndex:
        """The key index of this version: built from the manifest on first use, or passed on by a write."""
        if self._index is None:
            self._index = KeyIndex.from_manifest(self.manifest())
            release_freed()
        return self._index

    def find(self, key: object) -> Record | None:
        """The record with ``key``, checked against its content hash and its key; ``None`` if there is none.

        Raises:
            IntegrityError: the record's bytes are not the committed ones.
        """
        key = hashing.normalize_key(key)
        if not hashing.is_key(key, self._config.key_type):
            return None
        if self._reads_runs():
            return self._find_in_runs(key)  # type: ignore[arg-type]
        index = self.key_index()
        key_field = self._config.key
        for position in index.positions(hashing.key_hash(key)):  # type: ignore[arg-type]
            chunk, row = index.location(position)
            record = self._check.record(chunk, row, self._cache.payload(chunk, row), index.content(position), key)
            if not isinstance(record, dict):
                raise self._check.malformed(chunk, row, f"a {type(record).__name__}, not a dict", key)
            if key_field not in record:
                raise self._keyless(chunk, row)
            if record.get(key_field) == key:
                return record
        return None

    def places(self, key: object) -> list[tuple[str, int]]:
        """``(chunk, row)`` where the record with ``key`` may be: the key index's entries with its hash, normally
        one (none: not in this version). Nothing is read from the chunks; check the key of what is read there."""
        key = hashing.normalize_key(key)
        if not hashing.is_key(key, self._config.key_type):
            return []
        found = self.located([key])  # type: ignore[list-item]
        if found is not None:
            return list(zip(found.column("chunk").to_pylist(), found.column("row").to_pylist(), strict=True))
        index = self.key_index()
        return [index.location(position) for position in index.positions(hashing.key_hash(key))]  # type: ignore[arg-type]

    def _keyless(self, chunk: str, row: int) -> IntegrityError:
        """The error for a record without the key field: every record holds its key, so the config names another."""
        return IntegrityError(
            f"the record at chunk {chunk}, row {row} (version {self._version.number}) has no field "
            f"{self._config.key!r}, which the store's config names as its key: the config or the record is damaged"
        )

    def get_many(self, keys: Sequence[Key], default: Any = MISSING) -> list[Any]:
        """The records with ``keys``, in the same order.

        Keys that are missing raise :class:`KeyNotFoundError` naming them, unless a
        ``default`` is given to stand in for them. Every record is checked against its
        committed content hash and its key, as ``snapshot[key]`` checks one.
        """
        if self._reads_runs():
            return self._get_many_in_runs(list(keys), default)
        index = self.key_index()
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
                record = self.find(key)
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

    # -- the key index on disk (format 3) ---------------------------------------------

    def _reads_runs(self) -> bool:
        """Whether lookups read the key runs: a format-3 version that has them, unless its index is in memory
        already. A version committed without them (before ``Store.upgrade``) composes its manifest instead."""
        return self._config.writes_key_runs and self._index is None and keyruns.has_key_index(self._version)

    def located(self, keys: Sequence[Key]) -> pa.Table | None:
        """``key``, ``content_hash``, ``chunk``, ``row`` of those of ``keys`` (normalized) this version holds,
        from its key index on disk; ``None`` if it reads no runs (compose the manifest instead).

        What a subset of a large version costs: the subset's keys, not the version's rows.
        """
        if not self._reads_runs():
            return None
        status, names, entries = self._locate(list(keys))
        live = np.flatnonzero(status == keyruns.LIVE)
        key_type = pa.string() if self._config.key_type == "str" else pa.int64()
        contents = entries["content"][live].tobytes()
        return pa.table(
            {
                "key": pa.array([keys[i] for i in live.tolist()], key_type),
                "content_hash": pa.FixedSizeBinaryArray.from_buffers(
                    pa.binary(16), len(live), [None, pa.py_buffer(contents)]
                ),
                "chunk": pa.array([names[i] for i in live.tolist()], pa.string()),
                "row": pa.array(entries["row"][live].astype(np.int64), pa.int64()),
            }
        )

    def key_runs(self) -> keyruns.KeyRuns:
        """This version's key index on disk (format 3)."""
        return keyruns.KeyRuns(self._storage, self._version.key_runs, self._run_readers)

    def _locate(self, keys: list[Any], hashes: np.ndarray | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
        """For each of ``keys`` (normalized): LIVE, DELETED or ABSENT in the runs, its chunk and its entry.

        ``hashes`` are the keys' key hashes, if the caller has them (a write does).
        """
        count = len(keys)
        if not self._version.key_runs or not count:
            return np.zeros(count, dtype=np.uint8), [""] * count, np.zeros(count, dtype=keyrun.ENTRY)
        key_type = self._config.key_type
        valid: np.ndarray | None = None  # None: every key can be one of this store's
        if key_type != "str" or not set(map(type, keys)) <= {str}:  # (an int may lie outside int64)
            valid = np.fromiter((hashing.is_key(key, key_type) for key in keys), dtype=bool, count=count)
            stand_in = "" if key_type == "str" else 0
            keys = [key if ok else stand_in for key, ok in zip(keys, valid.tolist(), strict=True)]
        # Hashed without Arrow (the first pa.array of a process imports pandas, 0.3-0.4 s), in C loops.
        identities = _identities(keys, key_type)
        if hashes is None:
            hashes = np.fromiter(map(xxhash.xxh3_64_intdigest, identities), dtype=np.uint64, count=count)
        prints = np.frombuffer(b"".join(map(xxhash.xxh3_128_digest, identities)), dtype="V16")
        status, names, entries = self._find(hashes, prints)
        if valid is not None:
            status[~valid] = keyruns.ABSENT
        return status, names, entries

    def _find(self, hashes: np.ndarray, prints: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
        """:meth:`_locate` of keys given by their key hashes and keyprints."""
        try:
            return self.key_runs().find_many(hashes, prints)
        except IntegrityError as exc:
            record = log.read_record(self._storage, self._version.number)
            if isinstance(record, ExpiredVersion):  # gc expired it under this handle, and removed its files
                raise VersionNotFoundError(
                    f"version {self._version.number} was expired by gc while this handle read it: its key index "
                    "is gone. Store.refresh() moves to the newest version."
                ) from exc
            raise IntegrityError(
                f"the key index on disk of version {self._version.number} is damaged: {exc}. No record was "
                "returned from it. `litstore upgrade --rebuild ROOT` (Store.upgrade(rebuild=True)) commits the "
                "newest version again with its index written anew from its manifest; store.verify() checks the "
                "records"
            ) from exc

    def indexed_rows(self, keys: pa.Array) -> pa.Table:
        """The rows (``key``, ``content_hash``, ``split``) of those of ``keys`` this version holds, from its key runs.

        What a diff needs of the keys a few commits touched, without the manifest: the
        run entries give each key's chunk and committed content hash, and the split of
        a chunk is the split whose index lists it (:meth:`chunks`: O(chunks)). No
        record is read, so nothing here is confirmed by a record's key: a lying entry
        gives a wrong content hash, which a diff's fingerprint check catches. Format 3.

        Raises:
            IntegrityError: a run is damaged, or an entry names a chunk no split index of the version lists.
            VersionNotFoundError: gc expired the version while this handle read it.
        """
        return self._rows_in_runs(keys).select(["key", "content_hash", "split"])

    def rows_for_keys(self, keys: pa.Array, hashes: np.ndarray | None = None) -> pa.Table:
        """``position`` (into ``keys``, distinct), ``key``, ``content_hash``, ``split``, ``chunk`` and ``row`` of
        those of ``keys`` this version holds, by position: what a write plans with.

        Read from the key runs where the version has them (the keys' pages and the split
        indexes: the cost follows the keys, not the store), else from the manifest.
        ``hashes``: the keys' key hashes, if the caller has them.

        Raises:
            IntegrityError: a run is damaged, or an entry names a chunk no split index lists.
        """
        if not self._reads_runs():
            found = query.rows_for_keys(self.manifest(), keys)
            return found.select(["position", "key", "content_hash", "split", "chunk", "row"])
        return self._rows_in_runs(keys, hashes)

    def rows_in_chunks(self, chunks: Sequence[str], leaving: Sequence[Key] = ()) -> pa.Table:
        """This version's manifest rows stored in ``chunks``, less those of ``leaving`` keys, by chunk and row:
        the rows a compaction moves.

        Taken from the manifest where it is held or small; a larger version's manifest is
        streamed (:func:`~litstore.read.manifests.consume_manifest`), a row group at a time,
        and only the rows in ``chunks`` are kept: memory follows the chunks rewritten, not
        the store (a compaction after 100 small appends to 16M records held 6.1 GiB).

        Raises:
            IntegrityError: a manifest file is damaged.
            VersionNotFoundError: gc expired a version of the chain while it was read.
        """
        wanted = sorted(chunks)
        manifest = self._manifest_if_small()
        if manifest is None:

            def in_chunks(schema: pa.Schema, parts: Iterator[pa.Table]) -> pa.Table:
                found = [query.rows_in_chunks(part, wanted) for part in parts]
                return pa.concat_tables([part for part in found if part.num_rows] or [schema.empty_table()])

            manifest = consume_manifest(self._storage, self._config, self._version.number, in_chunks)
        excluded = query.key_mask(manifest, list(leaving)) if leaving else None
        return query.rows_in_chunks(manifest, wanted, excluded)

    def _rows_in_runs(self, keys: pa.Array, hashes: np.ndarray | None = None) -> pa.Table:
        """:meth:`rows_for_keys` from the key runs: what :meth:`indexed_rows` projects too."""
        listed = keys.to_pylist()
        status, names, entries = self._locate(listed, hashes)
        live = np.flatnonzero(status == keyruns.LIVE)
        found_names = [names[i] for i in live.tolist()]
        # Arrays made from buffers: pa.array imports pandas the first time (a third of a second a process).
        where = pa.Array.from_buffers(pa.int64(), len(live), [None, pa.py_buffer(live.astype(np.int64))])
        contents = pa.py_buffer(np.ascontiguousarray(entries["content"][live]).tobytes())
        rows = np.ascontiguousarray(entries["row"][live], dtype=np.uint32)
        return pa.table(
            {
                "position": where,
                "key": keys.take(where).cast(manifest_format.schema(self._config.key_type).field("key").type),
                "content_hash": pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(live), [None, contents]),
                "split": _strings(self._splits_of(found_names, listed, live)),
                "chunk": _strings(found_names),
                "row": pa.Array.from_buffers(pa.uint32(), len(live), [None, pa.py_buffer(rows)]),
            }
        )

    def _splits_of(self, names: list[str], keys: list[Any], live: np.ndarray) -> list[str]:
        """The split of each chunk of ``names`` (where the runs put ``keys[live]``), from the split indexes.

        Raises:
            IntegrityError: a chunk is one no split index of the version lists (the index is damaged).
        """
        chunks = self.chunks() if names else {}
        splits = {chunk.filename: split for split, listed_chunks in chunks.items() for chunk in listed_chunks}
        found: list[str] = []
        for name, position in zip(names, live.tolist(), strict=True):
            split = splits.get(name)
            if split is None:
                raise IntegrityError(
                    f"the key index of version {self._version.number} puts key {keys[position]!r} in chunk "
                    f"{name}, which no split index of the version lists: the index is damaged; "
                    "store.verify() checks the version"
                )
            found.append(split)
        return found

    def _find_in_runs(self, key: Key) -> Record | None:
        records = self._get_many_in_runs([key], None)
        return records[0]  # type: ignore[no-any-return]

    def _get_many_in_runs(self, keys: list[Any], default: Any) -> list[Any]:
        keys = [hashing.normalize_key(key) for key in keys]
        status, names, entries = self._locate(keys)
        live = np.flatnonzero(status == keyruns.LIVE)
        results: list[Any] = [default] * len(keys)
        by_chunk: dict[str, list[int]] = {}
        for position in live.tolist():
            by_chunk.setdefault(names[position], []).append(position)
        key_field = self._config.key
        for chunk, positions in by_chunk.items():
            where = np.array(positions, dtype=np.intp)
            order = np.argsort(entries["row"][where], kind="stable")
            where = where[order]
            rows = entries["row"][where].astype(np.int64)
            contents = np.frombuffer(entries["content"][where].tobytes(), dtype=np.uint8).reshape(-1, 16)
            for first in range(0, len(where), _CHECK_BATCH):
                last = first + _CHECK_BATCH
                payloads = self._cache.payloads(chunk, rows[first:last])
                asked = asked_keys(keys, where[first:last])
                decoded = self._check.records(chunk, rows[first:last], payloads, contents[first:last], asked)
                positions = where[first:last].tolist()
                wanted = [keys[position] for position in positions]
                self._check.keyed(chunk, rows[first:last].tolist(), decoded, wanted, key_field, "the key index")
                for position, record in zip(positions, decoded, strict=True):
                    results[position] = record
        if default is MISSING and len(live) < len(keys):
            missing = [keys[i] for i in np.flatnonzero(status != keyruns.LIVE).tolist()]
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
        index = self.key_index()
        # np.take gathers the (n, 16) content hashes ten times faster than fancy indexing.
        chunk_ids, contents = index.chunk_ids[places], np.take(index.contents, places, axis=0)
        records: list[Any] = []
        for chunk_id, start, end in chunk_runs(chunk_ids):
            chunk = index.chunks[chunk_id]
            for first in range(start, end, _CHECK_BATCH):  # hashed, then decoded while still in cache
                last = min(first + _CHECK_BATCH, end)
                batch, asked = rows[first:last], asked_keys(keys, hits[first:last])
                payloads = self._cache.payloads(chunk, batch)
                records += self._check.records(chunk, batch, payloads, contents[first:last], asked)
        return records

    def existing_keys(
        self, keys: Iterable[Key] | pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None
    ) -> list[Key]:
        """Those of ``keys`` that this version holds, in the order given.

        ``hashes`` are the keys' key hashes, if the caller has them; only keys whose hash
        is present are looked at one by one, so checking a large batch of new keys costs
        one vectorised search.
        """
        if self._reads_runs():
            if isinstance(keys, (pa.Array, pa.ChunkedArray)) and self._is_key_column(keys):
                # An append's batch: hashed a column at a time, only the keys found made Python objects
                # (500k new keys against a 500k-entry run: 0.35 -> 0.2 s, most of it the list and the prints).
                if not self._version.key_runs or not len(keys):
                    return []
                hashes = hashing.key_hash_array(keys) if hashes is None else hashes
                prints = np.ascontiguousarray(hashing.keyprint_rows(keys)).view("V16").reshape(-1)
                status, _, _ = self._find(hashes, prints)
                live = np.flatnonzero(status == keyruns.LIVE)
                return keys.take(pa.array(live, pa.int64())).to_pylist() if len(live) else []
            listed = keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else list(keys)
            status, _, _ = self._locate(listed, hashes)
            return [listed[i] for i in np.flatnonzero(status == keyruns.LIVE).tolist()]
        if hashes is None:
            keys = keys if isinstance(keys, (pa.Array, pa.ChunkedArray)) else list(keys)
            hashes = hashing.key_hashes(keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys)
        found = self.key_index().contains(hashes)
        hits = np.flatnonzero(found).tolist()
        if isinstance(keys, (pa.Array, pa.ChunkedArray)):
            candidates = keys.take(pa.array(hits, pa.int64())).to_pylist() if hits else []
        else:
            listed = keys if isinstance(keys, list) else list(keys)
            candidates = [listed[i] for i in hits]
        return [key for key in candidates if self.find(key) is not None]

    def _is_key_column(self, keys: pa.Array | pa.ChunkedArray) -> bool:
        """Whether ``keys`` is an Arrow column of this store's key type without nulls (hashed as its keys are)."""
        kind = keys.type
        if self._config.key_type == "str":
            typed = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        else:
            typed = pa.types.is_int64(kind)
        return typed and not keys.null_count

    def keys(self) -> list[Key]:
        """Every key of this version, sorted.

        A version of more than :data:`STREAMED_ROWS` rows, whose manifest is not held, is
        streamed for its key column alone (the keys, not the manifest, are held).
        """
        manifest = self._manifest_if_small()
        if manifest is not None:
            column = manifest.column("key")
        else:

            def keys_of(schema: pa.Schema, parts: Iterator[pa.Table]) -> pa.ChunkedArray:
                return pa.chunked_array(
                    [chunk for part in parts for chunk in part.column("key").chunks], schema[0].type
                )

            column = consume_manifest(self._storage, self._config, self._version.number, keys_of, ["key"])
        return list(column.take(pc.sort_indices(column)).to_pylist())

    def items(self) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` for every record, in storage order (fast: chunk by chunk).

        A format-3 version whose chunks all have their hashes sidecars is read chunk by
        chunk as its split indexes list them, each item checked against its sidecar: no
        manifest, no key index, memory of one batch. Otherwise the key index says where
        each record is.
        """
        for _, batch in self._batches(splits=False):
            yield from batch

    def split_items(self) -> Iterator[tuple[str, Key, Record]]:
        """``(split, key, record)`` for every record, as :meth:`items` walks them."""
        for split, batch in self._batches(splits=True):
            for key, record in batch:
                yield split, key, record

    def _batches(self, *, splits: bool) -> Iterator[tuple[str, list[tuple[Key, Record]]]]:
        """The records as :meth:`items` walks them, a decoded batch at a time, each with its split (``""`` unless
        ``splits``: a version read through its key index learns them from its manifest's rows)."""
        if self._index is None and self._config.writes_key_runs:
            listed = [(split, chunk) for split, chunks in sorted(self.chunks().items()) for chunk in chunks]
            if chunkhashes.all_present(self._storage, [chunk for _, chunk in listed]):
                self.check_live_counts()
                yield from self._items_in_chunks(listed)
                return
        index = self.key_index()
        split_of: dict[str, str] = {}
        if splits:
            placed = self.manifest().select(["chunk", "split"]).group_by(["chunk", "split"]).aggregate([])
            split_of = dict(zip(placed["chunk"].to_pylist(), placed["split"].to_pylist(), strict=True))
        for chunk_id, where, rows in by_chunk(index.chunk_ids, index.rows):
            chunk = index.chunks[chunk_id]
            for start in range(0, len(rows), _DECODE_BATCH):
                batch = rows[start : start + _DECODE_BATCH]
                expected = index.contents[where[start : start + _DECODE_BATCH]]
                yield (
                    split_of.get(chunk, ""),
                    list(self._keyed(chunk, batch, self._cache.payloads(chunk, batch), expected)),
                )

    def sidecar_rows(
        self, sidecars: chunkhashes.ChunkHashes, chunk: str, num_items: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The live rows of ``chunk``, listed with ``num_items`` items (int64, in row order), and the content hash
        of each of its items from its hashes sidecar, ``(num_items, 16)``: what a read of every live record of
        the chunk checks them against. The sidecar is read first: a file that is there, as long as the listed
        item count, bounds that count before anything is sized by it.

        Raises:
            IntegrityError: the sidecar or the deletion vector is missing or damaged.
        """
        hashes = np.frombuffer(sidecars.of(chunk, num_items), dtype=np.uint8).reshape(-1, 16)
        live = self.deletions.live(chunk, num_items)
        return (np.arange(num_items, dtype=np.int64) if live is None else live.astype(np.int64)), hashes

    def check_live_counts(self, split: str | None = None) -> None:
        """Each split's chunks (or ``split``'s), less their dead rows, hold as many rows as the version has records,
        and none is listed with no live row (reads nothing).

        Raises:
            IntegrityError: they do not: an index or a deletion vector is damaged (a vector marking a
                live row dead would otherwise make a walk of the rows silently shorter, and a chunk
                an index lost would be left out of a read of every chunk).
        """
        listed = self.chunks()
        for name in sorted(set(listed) | set(self._version.counts)):
            if split not in (None, name):
                continue
            lives = [self.deletions.live_count(chunk.filename, chunk.num_items) for chunk in listed.get(name, [])]
            live, committed = sum(lives), self._version.counts.get(name, 0)
            if live != committed or any(count < 1 for count in lives):
                raise IntegrityError(
                    f"the chunks of split {name!r} of version {self._version.number} hold {live} live rows "
                    f"(their index's items less their deletion vectors' dead rows), but the version holds "
                    f"{committed} records: an index or a deletion vector is damaged; store.verify() lists what is wrong"
                )

    def _items_in_chunks(
        self, listed: Sequence[tuple[str, ChunkInfo]]
    ) -> Iterator[tuple[str, list[tuple[Key, Record]]]]:
        """The live items of ``listed`` (``(split, chunk)``), a batch at a time, checked against the chunks' sidecars.

        A walk to the end of a version with deletion vectors also checks that what it
        yielded adds up to the version's fingerprint: a vector that swaps a live row for
        a dead one (its count kept) would otherwise yield a superseded record in place of
        the live one. (0.5 us a record, about 15% of the walk; a version without dead
        rows has no such swap to find, and each of its rows is checked on its own.)

        Raises:
            IntegrityError: an item is not what its sidecar says, a deletion vector is
                damaged, or (at the end) the records do not add up to the fingerprint.
        """
        sidecars = chunkhashes.ChunkHashes(self._storage, self._config, self._version)
        summing = bool(self.deletions)
        fingerprint: int | None = 0
        for split, chunk in listed:
            held = self._cache.holds(chunk.filename)
            self._cache.read_through(chunk.filename)
            rows, hashes = self.sidecar_rows(sidecars, chunk.filename, chunk.num_items)
            for start in range(0, len(rows), _DECODE_BATCH):
                batch = rows[start : start + _DECODE_BATCH]
                payloads = self._cache.payloads(chunk.filename, batch)
                found = list(self._keyed(chunk.filename, batch, payloads, hashes[batch]))
                if summing:
                    term = _pair_sum([key for key, _ in found], hashes[batch], self._config.key_type)
                    fingerprint = None if term is None or fingerprint is None else fingerprint + term
                yield split, found
            if not held:  # resident memory of one chunk at a time, not of every chunk walked
                self._cache.release(chunk.filename)
        if not summing:
            return
        summed = "keys not of the store's type" if fingerprint is None else hashing.fingerprint_hex(fingerprint)
        if summed != self._version.fingerprint:
            raise IntegrityError(
                f"the records of version {self._version.number}, read chunk by chunk, do not add up to its "
                f"fingerprint {self._version.fingerprint} (they give {summed}): a deletion vector, an index or a "
                "sidecar is damaged; store.verify() lists what is wrong"
            )

    def _keyed(
        self, chunk: str, rows: np.ndarray, payloads: Sequence[bytes] | Sequence[memoryview], expected: np.ndarray
    ) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` of the items at ``rows`` of ``chunk``, checked against ``expected`` and decoded."""
        key_field = self._config.key
        records = self._check.records(chunk, rows, payloads, expected)
        for row, record in zip(rows.tolist(), records, strict=True):
            if not isinstance(record, dict):
                raise self._check.malformed(chunk, row, f"a {type(record).__name__}, not a dict")
            if key_field not in record:
                raise self._keyless(chunk, row)
            yield record[key_field], record

    def values(self) -> Iterator[Record]:
        """Every record, in storage order."""
        for _, record in self.items():
            yield record

    def _keys_at(self, chunk: str, rows: np.ndarray) -> list[Key | None]:
        """The keys the manifest lists at ``rows`` of ``chunk``, in that order (to name damaged records)."""
        return keys_at(self.manifest(), chunk, rows)


def _strings(values: list[str]) -> pa.Array:
    """``values`` as an Arrow string array, made from buffers (see :meth:`VersionReader._rows_in_runs`)."""
    encoded = [value.encode() for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded)), out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def _pair_sum(keys: list[Any], contents: np.ndarray, key_type: str) -> int | None:
    """The fingerprint terms of ``keys`` with their content hashes (rows of ``contents``), summed; ``None`` if a
    key is not of ``key_type`` (no committed record has such a key)."""
    if not keys:
        return 0
    # Arrays made from buffers: pa.array imports pandas the first time (a third of a second a process).
    column: pa.Array
    if key_type == "str":
        if set(map(type, keys)) != {str}:
            return None
        encoded = _identities(keys, key_type)
        offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(keys)), out=offsets[1:])
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        column = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(keys), buffers)
    else:
        if set(map(type, keys)) != {int} or not -(2**63) <= min(keys) <= max(keys) < 2**63:
            return None
        raw = np.array(keys, "<i8").tobytes()
        column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(keys), [None, pa.py_buffer(raw)])
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(keys), [None, pa.py_buffer(np.ascontiguousarray(contents).tobytes())]
    )
    return hashing.digest_sum(hashing.pair_hashes(column, fixed))


def _identities(keys: list[Any], key_type: str) -> list[bytes]:
    """:func:`~litstore.format.hashing.key_bytes` of each of ``keys`` (all of the store's key type)."""
    if key_type == "str":
        try:
            return list(map(str.encode, keys))  # valid UTF-8: one C loop
        except UnicodeEncodeError:  # a lone surrogate: encoded with surrogatepass
            pass
    return list(map(hashing.key_bytes, keys))
