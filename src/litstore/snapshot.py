"""Reading one committed version: :class:`Snapshot`, frozen.

A :class:`Snapshot` reads exactly one committed version and never changes: its
version, lookups, key listing, iteration, manifest, ``sql``, ``verify``, ``diff``
and ``dataset`` all see that version, whatever other writers do. A
:class:`~litstore.store.Store` hands out snapshots (``store.head()``,
``store.at(v)``); a write makes a new one and leaves the old ones as they were.

A ``Snapshot`` is the user's facade over the version's engine,
:class:`~litstore.read.version.VersionReader` (``snapshot.reader``), which caches what
it has read (the key index, the manifest, open chunks): give each thread or process
its own. Every method answers for this version only; ``Store`` has the forms that
take a version. A snapshot pickles as its store's location and its version, so it can
be handed to Ray tasks or spawned workers: unpickling opens the store again, pinned to
the same version (its caches are not sent).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
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
    MissingFileError,
    QueryError,
    SplitError,
    StoreNotFoundError,
    VersionNotFoundError,
    describe,
)
from litstore.format import config as config_format
from litstore.format import hashing, layout
from litstore.format.models import StoreConfig, Version
from litstore.read import chunkhashes, listings, log
from litstore.read.chunkhashes import ChunkHashes
from litstore.read.chunks import confirm_item_count
from litstore.read.keyindex import KeyIndex
from litstore.read.manifests import ManifestCache
from litstore.read.version import MISSING, Key, Record, VersionReader
from litstore.storage import Storage, open_storage

if TYPE_CHECKING:
    import pandas
    import polars

    from litstore.ops.audit import AuditReport
    from litstore.ops.diff import Diff
    from litstore.ops.verify import VerifyReport
    from litstore.streaming import VersionDataset

__all__ = ["MISSING", "Key", "Record", "Snapshot", "VersionRef"]

#: What names a version: its number, its commit record, a tag name, or a time.
VersionRef = int | str | Version | datetime
_Default = TypeVar("_Default")


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
        self._reader = VersionReader(
            storage, config, version, manifests=manifests, chunks=chunks, index=index, composed=composed
        )
        self._model = model

    @classmethod
    def of(cls, reader: VersionReader, model: type[pydantic.BaseModel] | None = None) -> Snapshot:
        """The snapshot of the version ``reader`` reads (sharing its caches)."""
        snapshot = cls.__new__(cls)
        snapshot._reader = reader
        snapshot._model = model
        return snapshot

    def __repr__(self) -> str:
        counts = ", ".join(f"{split}={count}" for split, count in sorted(self.version.counts.items()))
        return f"<Snapshot {self.storage.url} version {self.version.number}: {len(self)} records ({counts})>"

    def __reduce__(self) -> tuple[Any, ...]:
        # The location and the version, never the reader: its caches and locks stay in this process.
        storage, version = self.storage, self.version
        return (_reopen, (storage.url, dict(storage.options), version.number, version.transaction, self._model))

    # -- what this is ------------------------------------------------------------

    @property
    def reader(self) -> VersionReader:
        """The version's engine (what the commit protocol, ``ops`` and exports work on)."""
        return self._reader

    @property
    def root(self) -> str:
        """Where the store lives."""
        return self._reader.storage.url

    @property
    def storage(self) -> Storage:
        """The backend the store lives on."""
        return self._reader.storage

    @property
    def config(self) -> StoreConfig:
        """The store's configuration, fixed at creation."""
        return self._reader.config

    @property
    def model(self) -> type[pydantic.BaseModel] | None:
        """The pydantic model records are validated against, if the store has one."""
        return self._model

    @property
    def version(self) -> Version:
        """The commit record of the version this view reads."""
        return self._reader.version

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names the store's rule can assign."""
        return tuple(self.config.splits.names)

    @property
    def fields(self) -> dict[str, str]:
        """The declared fields (name -> type) this version's manifest carries as columns."""
        return self._reader.fields

    # -- lookups -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._reader)

    def __getitem__(self, key: Key) -> Record:
        record = self._reader.find(key)
        if record is None:
            raise KeyNotFoundError(f"key {key!r} is not in version {self.version.number}{_kind_hint(key, self.config)}")
        return record

    def __contains__(self, key: object) -> bool:
        return self._reader.find(key) is not None

    def get(self, key: Key, default: _Default | None = None) -> Record | _Default | None:
        """The record with ``key``, or ``default`` if there is none."""
        record = self._reader.find(key)
        return default if record is None else record

    def get_many(self, keys: Sequence[Key], default: Any = MISSING) -> list[Any]:
        """The records with ``keys``, in the same order.

        Keys that are missing raise :class:`KeyNotFoundError` naming them, unless a
        ``default`` is given to stand in for them. Every record is checked against its
        committed content hash and its key, as ``snapshot[key]`` checks one.
        """
        return self._reader.get_many(keys, default)

    def keys(self) -> list[Key]:
        """Every key of this version, sorted."""
        return self._reader.keys()

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def items(self) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` for every record, in storage order (fast: chunk by chunk)."""
        return self._reader.items()

    def values(self) -> Iterator[Record]:
        """Every record, in storage order."""
        return self._reader.values()

    # -- the manifest --------------------------------------------------------------

    def manifest(self) -> pa.Table:
        """This version's manifest: one row per live record (see :mod:`litstore.format.manifest`)."""
        return self._reader.manifest()

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The chunks of each split of this version, as its litdata index files list them.

        ``num_items`` counts every row a chunk holds; in a format-4 store some may be
        dead (superseded by an upsert or delete): :meth:`live_rows` says which are not.
        """
        return self._reader.chunks()

    def live_rows(self, chunk: str) -> np.ndarray:
        """The rows of ``chunk`` (a ``filename`` of :meth:`chunks`) that hold this version's records, in order.

        Raises:
            KeyNotFoundError: the version lists no such chunk.
            IntegrityError: the chunk's deletion vector is damaged, or the chunk does not hold the items the
                version lists (checked before an array of that many rows is made).
        """
        listed = {info.filename: info for infos in self._reader.chunks().values() for info in infos}
        info = listed.get(chunk)
        if info is None:
            raise KeyNotFoundError(
                f"version {self.version.number} lists no chunk {chunk!r}; chunks() lists those it does"
            )
        live = self._reader.deletions.live(chunk, info.num_items)
        if live is None:
            confirm_item_count(self.storage, chunk, info.num_items)  # before an array of that many rows
            return np.arange(info.num_items, dtype=np.uint32)
        return live

    @property
    def lookup_index_bytes(self) -> int:
        """Memory taken by this version's in-memory key index (built on first lookup)."""
        return self._reader.key_index().nbytes

    def sql(self, sql: str) -> pa.Table:
        """Run a DuckDB query in which ``manifest`` is this version's manifest.

        Raises:
            QueryError: DuckDB rejected the query.
        """
        try:
            return self._reader.sql(sql)
        except query.DatabaseError as exc:
            hint = ""
            if "Referenced column" in str(exc) or "not found in FROM clause" in str(exc):
                declared = ", ".join(repr(name) for name in self.fields) or "none"
                hint = (
                    f". The manifest's columns are key (each record's {self.config.key!r}), key_hash, "
                    f"content_hash, split, chunk, row and the declared fields ({declared}): declare another "
                    "record field with store.add_fields({name: type}) to query it"
                )
            raise QueryError(f"query failed: {exc}{hint}") from exc

    def verify(
        self,
        expected_keys: Iterable[Key] | None = None,
        *,
        progress: bool = False,
        num_workers: int = 0,
    ) -> VerifyReport:
        """Check this version against its data and return a report.

        Reads every chunk of the version: see :mod:`litstore.ops.verify` for what is
        checked. ``expected_keys``, if given, must be exactly the version's keys.
        ``num_workers`` processes read and hash the chunks (0: this one).
        """
        from litstore.ops import verify

        # Read everything from storage again: verify must not trust what is in memory.
        chunks = listings.read_listing(self.storage, self.version).chunks
        return verify.verify(self.storage, self.config, self.version, chunks, expected_keys, progress, num_workers)

    def dataset(
        self,
        split: str | None = None,
        *,
        verify_records: bool = True,
        views_dir: str | os.PathLike[str] | None = None,
        where: str | None = None,
        keys: Iterable[Key] | None = None,
        **kwargs: Any,
    ) -> VersionDataset:
        """A litdata ``StreamingDataset`` over exactly the live records of this version's ``split``.

        ``where`` (a SQL condition on the manifest's columns, see :meth:`select`) or
        ``keys`` stream only those records: they are copied once, in the split's
        order, into chunks of the private view directory (cached per version and
        subset), so a subset streams as fast per record as a whole split. A loader
        state saved on a subset resumes only on the same subset of the same version.

        ``split`` defaults to all splits. Keyword arguments go
        to ``StreamingDataset`` (``shuffle``, ``seed``, ``drop_last``, ``transform``,
        ...). Items are decoded records. The chunks are read in place, never copied;
        pass the result to ``litdata.StreamingDataLoader`` as it is. ``dataset[key]`` (and
        ``dataset.get_by_key(key)``, for int keys) is the item it yields for ``key``;
        ``KeyNotFoundError`` if this version, ``split`` or subset does not hold it.

        Args:
            verify_records: check each item's bytes against the content hash its version
                committed for it (xxh3-128, well under a microsecond a record): read from
                each chunk's hashes sidecar as it is streamed where every chunk has one
                (format 3), else from the manifest, composed once here. ``False`` streams
                without the check and without reading either.
            views_dir: where the private view directories live (see
                :mod:`litstore.streaming`); default ``$LITSTORE_VIEWS``, else the temp directory.
            where: stream only the records whose manifest row matches this condition.
            keys: stream only the records with these keys.
            order (keyword): ``"litdata"`` (default, litdata's own order) or ``"global"``: one
                sequence of global batches whatever the world size and worker count, and loader
                states that resume exactly at any of them (local stores; see :mod:`litstore.order`).
            check_ranks (keyword): ``False`` turns off the guard against a distributed job
                whose ranks litdata cannot see (``WORLD_SIZE`` > 1 from torchrun or SLURM, but no
                process group yet and no ``GLOBAL_RANK``: every rank would stream the same
                share), which otherwise raises ``InvalidArgumentError`` saying what to do.

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
        if where is not None and keys is not None:
            raise InvalidArgumentError("pass where= or keys=, not both")
        if split is not None and split not in self.splits:
            raise SplitError(f"unknown split {split!r}; this store's splits are {self.splits}")
        from litstore import streaming

        listed = self.chunks()
        deletions = self._reader.deletions
        for name in sorted(set(listed) | set(self.version.counts)):
            if split not in (None, name):
                continue
            # Live items: a format-4 chunk's dead rows are in its file and its index entry, not in the version.
            indexed = sum(chunk.num_items for chunk in streaming.live_chunks(listed.get(name, []), deletions))
            if indexed != self.version.counts.get(name, 0):
                raise IntegrityError(
                    f"the index of split {name!r} of version {self.version.number} lists {indexed} live items, "
                    f"but the version holds {self.version.counts.get(name, 0)} records: the index is damaged"
                )
        chunks = [chunk for name, chunks in sorted(listed.items()) if split in (None, name) for chunk in chunks]
        if not chunks:
            raise LitstoreError(f"version {self.version.number} has no records in {split or 'any split'}")
        if where is not None or keys is not None:
            subset = self._subset(chunks, split, where, keys)
            return streaming.open_subset(
                self.storage, self.config, self.version, split, subset, verify_records, views_dir, **kwargs
            )
        records, hashes = None, None
        if verify_records and self.config.writes_key_runs and chunkhashes.all_present(self.storage, chunks):
            hashes = ChunkHashes(self.storage, self.config, self.version)  # no manifest: each chunk's sidecar
        elif verify_records:
            records = streaming.stream_records(self.manifest(), chunks, deletions=deletions)
        return streaming.open_dataset(
            self.storage,
            self.config,
            self.version,
            split,
            chunks,
            records,
            views_dir,
            hashes=hashes,
            deletions=deletions,
            opener=functools.partial(_reopen, *self.__reduce__()[1]),
            **kwargs,
        )

    def select(self, where: str) -> list[Key]:
        """Keys of this version whose manifest row matches the SQL condition ``where``.

        ``where`` is a DuckDB condition on the manifest's columns (``split``, the key,
        the declared fields), e.g. ``"label IN (1, 2) AND split = 'train'"``, run
        like :meth:`sql`. Keys come sorted.

        Raises:
            QueryError: DuckDB rejected the condition.
            InvalidArgumentError: ``where`` is not a non-empty string.
        """
        if not isinstance(where, str) or not where.strip():
            raise InvalidArgumentError(f"where must be a non-empty SQL condition, got {where!r}")
        found = self.sql(f'SELECT "key" FROM manifest WHERE ({where}\n) ORDER BY "key"')
        if found.num_columns != 1 or found.column_names[0] != "key":
            raise QueryError(f"where {where!r} is not a condition on the manifest's rows")
        return list(found.column(0).to_pylist())

    def _subset(self, chunks: list[ChunkInfo], split: str | None, where: str | None, keys: Any) -> pa.Table:
        """``key``, ``content_hash``, ``chunk``, ``row`` of the subset's records of ``chunks``, in stream order.

        ``row`` is each record's row in its chunk file: the subset's live records, copied
        from there into a view of its own, which has no dead rows.
        """
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
        valid = [key for key in wanted if hashing.is_key(key, self.config.key_type)]
        found = self._reader.located(valid)
        deletions = self._reader.deletions
        if found is not None:  # from the key index on disk: what the subset holds, in stream order
            members = streaming.in_stream_order(found, chunks, deletions)
        else:
            ordered = streaming.stream_records(self.manifest(), chunks, located=True, deletions=deletions)
            key_type = ordered.schema.field("key").type
            members = ordered.filter(pc.is_in(ordered.column("key"), pa.array(valid, key_type)))
        where_said = f"where {where!r}" if where is not None else f"the {len(wanted)} keys given"
        if keys is not None and members.num_rows != len(wanted):
            present = set(members.column("key").to_pylist())
            missing = [key for key in wanted if key not in present]
            raise KeyNotFoundError(
                f"{len(missing)} of {len(wanted)} keys are not in version {self.version.number} "
                f"({split or 'all splits'}): {describe(missing)}"
            )
        if not members.num_rows:
            raise LitstoreError(
                f"the subset ({where_said}) holds no records of version {self.version.number} in "
                f"{split or 'any split'}: there is nothing to stream"
            )
        return members

    def to_arrow(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every record as an Arrow table; ``columns`` picks top-level fields (the key always comes first).

        Column types are inferred from the values; see :mod:`litstore.export`.
        """
        from litstore import export

        return export.to_arrow(self._reader, columns)

    def iter_batches(self, batch_size: int = 65536, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The records as Arrow record batches of at most ``batch_size`` rows; memory holds one batch."""
        from litstore import export

        return export.iter_batches(self._reader, batch_size, columns)

    def to_pandas(self, columns: Sequence[str] | None = None) -> pandas.DataFrame:
        """Every record as a pandas ``DataFrame`` (pandas is optional: ``pip install pandas``)."""
        from litstore import export

        return export.to_pandas(self._reader, columns)

    def to_polars(self, columns: Sequence[str] | None = None) -> polars.DataFrame:
        """Every record as a polars ``DataFrame`` (polars is optional: ``pip install polars``)."""
        from litstore import export

        return export.to_polars(self._reader, columns)

    def to_huggingface(self, split: str | None = None, *, features: Any = None) -> Any:
        """The records as a ``datasets.DatasetDict`` of every split, or (``split`` given) one ``datasets.Dataset``.

        Images keep their stored bytes, and the features a commit recorded from Hugging Face
        (ClassLabel names, dtypes) come back; see :mod:`litstore.huggingface`.
        """
        from litstore import huggingface

        return huggingface.to_huggingface(self._reader, split, features)

    def audit(
        self,
        *,
        fields: Sequence[str] | None = None,
        near: bool = False,
        threshold: float = 0.8,
        image_distance: int = 3,
        examples: int = 5,
        progress: bool = False,
    ) -> AuditReport:
        """Records of this version with identical content under different keys (or, ``near=True``, near content).

        Compares ``fields`` (default: every field but the key and a field split's field, so
        the same example in train and test is found under either kind of split). Reads every
        record once, chunk by chunk, media undecoded (see :mod:`litstore.ops.audit`); the
        report names identical records that sit in different splits (leakage). ``near=True``
        also groups texts and bytes of estimated Jaccard similarity ``threshold`` or more
        (MinHash) and images whose difference hashes are at most ``image_distance`` bits apart.
        """
        from litstore.ops import audit

        return audit.audit(
            self._reader,
            fields=fields,
            near=near,
            threshold=threshold,
            image_distance=image_distance,
            examples=examples,
            progress=progress,
        )

    def versions(self) -> list[Version]:
        """Every committed version that is not expired, oldest first."""
        return self._reader.versions()

    def at(self, version: VersionRef) -> Snapshot:
        """A read-only view of ``version``: a number, a tag name, a ``Version``, or a time (the version current then).

        A negative number counts back from the newest version kept (``-1`` is the
        newest, ``-2`` the one before, as Deep Lake's ``history[-1]``), and ``"latest"``
        is the newest version unless a tag has that name.

        A time picks the newest version whose recorded time is at or before it. Recorded
        times are the writers' clocks, never earlier than the parent's (so they only grow
        along the version chain); a writer whose clock is ``s`` slow can make a time
        pick a version committed up to ``s`` after it.

        Raises:
            VersionNotFoundError: no such version or tag.
            InvalidArgumentError: ``version`` is not a version number, tag name, ``Version`` or time.
        """
        record = self._record_of(version)
        if record.number == self.version.number:
            return self
        return Snapshot.of(self._reader.successor(record), self._model)

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
        diff = Diff.of(old_view.reader, new_view.reader)
        return diff.with_fields(old_view.reader, new_view.reader) if fields else diff

    def resolve(self, version: VersionRef) -> int:
        """The version number ``version`` means (a number, a tag name, a ``Version`` or a time).

        Raises:
            VersionNotFoundError: no such version or tag.
            InvalidArgumentError: ``version`` is of another type, or not a whole number.
        """
        if isinstance(version, str):
            return self._tagged(version)
        return self._record_of(version).number

    def _tagged(self, name: str) -> int:
        """The version tag ``name`` names; ``"latest"`` (unless a tag has that name) is the newest version.

        Raises:
            VersionNotFoundError: no such tag (an all-digit name says to pass the number as an int).
        """
        try:
            return log.find_tag(self.storage, name).version
        except VersionNotFoundError as exc:
            if name == "latest":
                newest = log.head_number(self.storage)
                if newest is not None:
                    return newest
            if name.strip().lstrip("-").isdigit():
                raise VersionNotFoundError(f"{exc}; for version {int(name)}, pass the int {int(name)}") from None
            raise

    def _record_of(self, version: VersionRef) -> Version:
        """The commit record of the version ``version`` means, read once (none for this version's own).

        Raises:
            VersionNotFoundError: no such version or tag, or gc expired it.
            InvalidArgumentError: ``version`` is of another type, or not a whole number.
        """
        if isinstance(version, str):
            number = self._tagged(version)
        elif isinstance(version, datetime):
            return self._current_at(version)
        elif isinstance(version, Version):
            number = version.number
        elif isinstance(version, (int, np.integer)) and not isinstance(version, (bool, np.bool_)):
            number = int(version)
        else:
            shown = version if not isinstance(version, float) or math.isfinite(version) else str(version)
            raise InvalidArgumentError(
                f"a version is a whole number, a tag name, a Version or a datetime, not {shown!r} "
                f"({type(version).__name__})"
            )
        if number == self.version.number:
            return self.version
        try:
            if number < 0:  # counted back from the newest version kept: -1 is the newest, as in git's HEAD~0
                listed = self.versions()
                if -number > len(listed):
                    raise VersionNotFoundError(f"version {number} does not exist: {len(listed)} versions are kept")
                return listed[number]
            return log.read_version(self.storage, number)
        except VersionNotFoundError as exc:
            numbers = [kept.number for kept in self.versions()]  # (gc's tombstones are not versions kept)
            kept = f"; the oldest version kept is {numbers[0]} and the latest is {numbers[-1]}" if numbers else ""
            raise VersionNotFoundError(f"{exc}{kept}") from None

    def _current_at(self, when: datetime) -> Version:
        """The newest version committed at or before ``when`` (naive times are UTC)."""
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        found = [version for version in self.versions() if version.created_at <= when]
        if not found:
            raise VersionNotFoundError(f"no version kept was committed at or before {when:%Y-%m-%d %H:%M:%S %Z}")
        return found[-1]


def _reopen(
    root: str,
    storage_options: dict[str, Any],
    number: int,
    transaction: str | None,
    model: type[pydantic.BaseModel] | None = None,
) -> Snapshot:
    """The snapshot of version ``number`` of the store at ``root``: how a pickled :class:`Snapshot` comes back.

    Raises:
        VersionNotFoundError: gc expired the version since, or the store at ``root`` was
            made again and its version ``number`` is another commit (``transaction`` differs).
        StoreNotFoundError, StorageError: the store cannot be reached from here.
    """
    storage = open_storage(root, storage_options or None)
    try:
        config = log.read_config(storage)
    except MissingFileError:
        raise StoreNotFoundError(f"no litstore store at {storage.url} (no {layout.CONFIG})") from None
    config_format.check_schema(config, model)
    head = Snapshot(storage, config, log.read_version(storage, log.head_number(storage) or 0), model)
    snapshot = head if head.version.number == number else head.at(number)
    if snapshot.version.transaction != transaction:
        raise VersionNotFoundError(
            f"version {number} of {head.root} is another commit than the one pickled (transaction "
            f"{snapshot.version.transaction} instead of {transaction}): the store was made again at that root"
        )
    return snapshot


def _kind_hint(key: object, config: StoreConfig) -> str:
    """Why a key of the wrong kind can never be found: this store's keys are all of one type."""
    wanted = str if config.key_type == "str" else int
    if isinstance(key, wanted) and not isinstance(key, bool):
        return ""
    return f": this store's keys are {config.key_type}s, and {key!r} is of type {type(key).__name__}"
