"""Writing: :class:`Store`, a handle on a store that reads its head and commits new versions.

A ``Store`` holds the :class:`~litstore.snapshot.Snapshot` of the latest version it
knows (:meth:`Store.head`); every read on the store goes to that snapshot, and every
write commits a new version through :mod:`litstore.txn` and moves the handle to it.
Snapshots never change, so one taken before a write still reads the old version.
A ``Store`` sees its own writes; versions committed by other writers become visible
after :meth:`Store.refresh` or when a store is opened. A ``Store`` object is not
thread-safe; give each thread or process its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pydantic

from litstore import huggingface, txn
from litstore._litdata.index import ChunkInfo
from litstore.branches import Branches
from litstore.errors import (
    ConflictError,
    InvalidArgumentError,
    MissingFileError,
    SchemaError,
    StoreExistsError,
    StoreNotFoundError,
    UncertainCommitError,
    VersionNotFoundError,
    first_problem,
)
from litstore.format import config as config_format
from litstore.format import layout
from litstore.format.models import (
    DEFAULT_STORE_FORMAT,
    MAIN_BRANCH,
    FieldSplit,
    HashSplit,
    SplitRule,
    StoreConfig,
    Tag,
    Version,
    check_chunk_bytes,
    check_message,
    check_metadata,
    size_in_bytes,
)
from litstore.read import log
from litstore.read.version import VersionReader
from litstore.snapshot import MISSING, Key, Record, Snapshot, VersionRef
from litstore.storage import Storage, branched, open_storage
from litstore.tags import Tags
from litstore.txn import leases
from litstore.txn.change import check_arguments

if TYPE_CHECKING:
    import pandas
    import polars

    from litstore.ops.audit import AuditReport
    from litstore.ops.diff import Diff
    from litstore.ops.gc import GCReport
    from litstore.ops.verify import VerifyReport
    from litstore.streaming import VersionDataset

Root = str | os.PathLike[str]

#: What ``Store.at`` reads as a branch's name rather than a tag's (tag names hold no ':').
_BRANCH_PREFIX = "branch:"
#: Writes encode and sort records in runs of this much payload: what bounds a write's memory.
_RUN_BYTES = 16 * 1024 * 1024


class Store:
    """A keyed, versioned dataset: read its latest version, write new ones.

    Create one with :meth:`Store.create`, open one with :func:`litstore.open`.

    Writing (each call commits one new version and returns its :class:`Version`):
        append(records), upsert(records), update(changes), delete(keys | where=), ingest(...), compact(), upgrade(),
        stage(records) + commit(fragments); tags: ``store.tags``, tag(), delete_tag();
        gc() removes what no kept version needs.

    Reading the head (``store.head()``, a :class:`Snapshot`): ``store[key]``, get(),
    get_many(), keys(), items(), ``len(store)``, manifest(), sql(), to_arrow(),
    to_pandas(), dataset() (a litdata ``StreamingDataset``), verify(), audit().

    History: version, versions(), at(version), diff(old, new, fields=...), refresh().

    A store pickles (Ray tasks, spawned workers, ``datasets.Dataset.from_generator``) as
    its root, storage options and schema, and is opened again at its newest version when
    unpickled; a :class:`Snapshot` (``store.head()``) comes back pinned to its version.
    """

    def __init__(self, head: Snapshot) -> None:
        if not isinstance(head, Snapshot):
            raise InvalidArgumentError(
                f"Store({head!r}) takes a Snapshot: open a store with litstore.open(root), or make one with "
                "litstore.Store.create(root, key=...)"
            )
        self._head = head

    def __repr__(self) -> str:
        version = self._head.version
        counts = ", ".join(f"{split}={count}" for split, count in sorted(version.counts.items()))
        return f"<Store {self._head.root} at version {version.number}: {len(self)} records ({counts})>"

    def __reduce__(self) -> tuple[Any, ...]:
        # A Store pickles as its root, options and model, and comes back at the newest version, as
        # litstore.open would (Ray tasks, spawned workers); pickle store.head() to pin a version.
        storage = self.storage
        return (_reopen, (storage.url, dict(storage.options), self._head.model))

    # -- opening -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        root: Root,
        key: str = "id",
        splits: SplitRule | str | dict[str, float] | None = None,
        *,
        key_type: type | None = None,
        schema: type[pydantic.BaseModel] | None = None,
        fields: dict[str, Any] | None = None,
        chunk_bytes: int | str = 64 * 1024 * 1024,
        checkpoint_interval: int = 64,
        storage_options: dict[str, Any] | None = None,
        format_version: int | None = None,
    ) -> Store:
        """Create an empty store (version 0) at ``root``.

        Args:
            root: a local directory (created if needed; it must not hold other files),
                ``s3://bucket/prefix`` or ``memory://name``.
            key: the record field that holds each record's key.
            splits: ``HashSplit(train=0.9, val=0.1)`` (or the dict ``{"train": 0.9,
                "val": 0.1}``) to split by key hash, a field name (or ``FieldSplit``) to
                take the split from each record, or ``None`` for a single split ``"train"``.
            key_type: ``str`` or ``int``; defaults to the schema's key annotation, else ``str``.
            schema: a pydantic model every record is validated against. Its scalar
                fields (int, float, str, bool, or Optional of one) are declared fields.
            fields: record fields to copy into the manifest as typed columns, e.g.
                ``{"label": int, "source": str, "score": float | None}``: every write
                checks them (a field may be missing or ``None`` only if Optional), and
                ``sql()`` and ``select(where=...)`` filter by them. More can be added
                later with :meth:`add_fields`.
            chunk_bytes: target size of a chunk file, in bytes or as litdata writes it
                (``"64MB"``; ``"64MiB"`` for binary units).
            checkpoint_interval: write a full manifest every this many versions
                (also whenever the deltas since the last one outgrow the live
                records), and a full listing of the chunks too. A store of more than
                2M records (with the default) spaces its manifest checkpoints by its
                size, ``checkpoint_interval`` times a power of two (512 versions at
                16M records), so their share of each commit does not grow with it.
            storage_options: for ``s3://`` roots, keyword arguments of boto3's S3
                client (``endpoint_url``, credentials, ...), also used for streaming.
            format_version: the store's data format: 7 by default, where each commit
                also writes a key run (the key index on disk, with a key filter) and
                each chunk a hashes sidecar, so a lookup, ``get_many``, ``in``, an
                append's key check, a near ``diff``, ``items()`` or ``dataset()`` in a
                fresh process reads what its answer needs instead of composing the
                manifest, upserts and deletes mark rows dead in deletion vectors, and
                commit records list chunks and deletion vectors by delta (and, listed
                in full, name no dropped chunks). 6 names them there too, 5 lists chunks
                in full in every commit, 4 writes runs without key filters, 3 copies
                chunks on change instead, 2 writes no key index: each for litstore
                releases that know only that format, which refuse a newer store by its
                config (:meth:`upgrade` moves a store to 7).

        Raises:
            StoreExistsError: ``root`` already holds a store, or other files.
            InvalidArgumentError: an argument is invalid (the message says which).
        """
        try:
            rule: SplitRule
            if splits is None:
                rule = HashSplit(train=1.0)
            elif isinstance(splits, str):
                rule = FieldSplit(field=splits)
            elif isinstance(splits, dict):
                rule = HashSplit(splits)  # fractions by split name, as HF's and sklearn's splits are given
            elif not isinstance(splits, (HashSplit, FieldSplit)):
                raise InvalidArgumentError(
                    f"splits is a HashSplit, a dict of fractions such as {{'train': 0.9, 'val': 0.1}}, a field "
                    f"name or a FieldSplit, not {type(splits).__name__}"
                )
            else:
                rule = splits
            config = StoreConfig(
                key=key,
                key_type=config_format.resolve_key_type(key, key_type, schema),
                splits=rule,
                record_schema=config_format.schema_ref(schema) if schema is not None else None,
                fields=config_format.declared_fields(key, schema, fields),
                chunk_bytes=size_in_bytes(chunk_bytes),
                checkpoint_interval=checkpoint_interval,
                created_at=datetime.now(UTC),
                format_version=DEFAULT_STORE_FORMAT if format_version is None else format_version,
            )
        except pydantic.ValidationError as exc:
            raise InvalidArgumentError(f"cannot create a store: {first_problem(exc, 'argument')}") from None
        check_chunk_bytes(config.chunk_bytes)
        storage = open_storage(root, storage_options)
        if storage.exists(layout.CONFIG) or log.version_numbers(storage):
            raise StoreExistsError(f"{storage.url} already holds a store; open it with litstore.open()")
        strangers = [name for name in storage.names("") if name not in layout.TOP_LEVEL] if _is_dir(storage) else []
        if strangers:
            raise StoreExistsError(
                f"{storage.url} is not empty (it holds {', '.join(sorted(strangers)[:5])}); "
                "create a store in an empty or new directory"
            )
        if not storage.put_if_absent(layout.CONFIG, config.model_dump_json(indent=1).encode()):
            raise StoreExistsError(f"{storage.url} already holds a store; open it with litstore.open()")
        version = config_format.initial_version(config)
        storage.put_if_absent(layout.version_record(0), version.model_dump_json(indent=1).encode())
        return cls(Snapshot(storage, config, version, schema))

    @classmethod
    def open(
        cls,
        root: Root,
        *,
        schema: type[pydantic.BaseModel] | None = None,
        storage_options: dict[str, Any] | None = None,
        branch: str | None = None,
    ) -> Store:
        """Open the store at ``root`` at its latest version (of ``branch``, if given: see :mod:`litstore.branches`).

        Args:
            schema: the store's record model, if it declares one. litstore never
                imports code named by a store's files: reads work without the model,
                writes need it, and it must match the schema recorded at creation.
            storage_options: for ``s3://`` roots, keyword arguments of boto3's S3 client.
            branch: a branch of the store (``store.branches``); ``None`` or ``"main"``: the store's own line.

        Raises:
            StoreNotFoundError: there is no store at ``root``.
            VersionNotFoundError: there is no such branch.
            SchemaError: ``schema`` does not match the store's.
            IntegrityError: the store's metadata is damaged.
        """
        storage = open_storage(root, storage_options)
        try:
            config = log.read_config(storage)
        except MissingFileError:
            raise StoreNotFoundError(f"no litstore store at {storage.url} (no {layout.CONFIG})") from None
        config_format.check_schema(config, schema)
        if branch is not None:
            storage = branched.open_branch(storage, branch)
        number = log.head_number(storage)
        if number is None:  # a creator died between writing the config and version 0
            storage.put_if_absent(
                layout.version_record(0), config_format.initial_version(config).model_dump_json().encode()
            )
            number = 0
        return cls(Snapshot(storage, config, log.read_version(storage, number), schema))

    # -- the head ----------------------------------------------------------------

    def head(self) -> Snapshot:
        """The snapshot of the latest version this handle knows (see :meth:`refresh`)."""
        return self._head

    def refresh(self) -> Version:
        """Move to the latest committed version, including other writers' commits."""
        number = log.head_number(self.storage)
        if number is not None and number != self._head.version.number:
            self._head = self._wrap(self._head.reader.successor(log.read_version(self.storage, number)))
        return self._head.version

    @property
    def storage(self) -> Storage:
        """The backend the store lives on."""
        return self._head.storage

    @property
    def root(self) -> str:
        """Where the store lives."""
        return self._head.root

    @property
    def config(self) -> StoreConfig:
        """The store's configuration, fixed at creation."""
        return self._head.config

    @property
    def version(self) -> Version:
        """The commit record of the head."""
        return self._head.version

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names the store's rule can assign."""
        return self._head.splits

    @property
    def fields(self) -> dict[str, str]:
        """The declared fields (name -> type) of the head's manifest (see ``Store.create(fields=...)``)."""
        return self._head.fields

    @property
    def tags(self) -> Tags:
        """The store's tags (a mapping of name to version number); a branch has tags of its own."""
        return Tags(self)

    @property
    def branch(self) -> str:
        """The line of versions this handle reads and writes: ``"main"`` or a branch's name."""
        return branched.branch_of(self.storage)

    @property
    def branches(self) -> Branches:
        """The store's branches (a mapping of name to ``Branch``); ``branches.create(name, from_=...)``."""
        return Branches(self)

    def merge(
        self,
        source: str,
        into: str = MAIN_BRANCH,
        *,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Apply branch ``source``'s changes since it parted from ``into`` to ``into``, by key, as one version of
        ``into``; return ``into``'s head (see :func:`litstore.branches.merge`). This handle moves to it if it is
        on ``into``.

        Raises:
            MergeConflictError: both changed some keys differently (named); nothing was committed.
            ConflictError: a writer of ``into`` changed the same keys meanwhile; nothing was committed.
        """
        from litstore.branches import merge

        message, metadata = check_message(message), check_metadata(metadata)
        reader = merge(self.storage, source, into, message=message, metadata=metadata, progress=progress)
        if into == self.branch:
            self._head = self._wrap(self._head.reader.successor(reader.version, reader.chunks()))
        return reader.version

    def restore(
        self, version: VersionRef, *, message: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Version:
        """Commit a new version (on this handle's line) with exactly the records, chunks and fingerprint of
        ``version``; return it (see :mod:`litstore.txn.restore`). Nothing is copied or encoded again. If the head
        already holds those records, nothing is committed.

        Raises:
            VersionNotFoundError: no such version (or gc expired it).
            ConflictError: another writer changed records meanwhile; nothing was committed.
        """
        from litstore.txn.restore import commit_restore

        message, metadata = check_message(message), check_metadata(metadata)
        self.refresh()
        target = self._head.at(version).reader
        self._head = self._wrap(commit_restore(self._head.reader, target, message, metadata))
        return self.version

    # -- writing -----------------------------------------------------------------

    def stage(
        self, records: Iterable[Any], *, lease: timedelta | None = None, progress: bool = False
    ) -> txn.StagedFragment:
        """Validate and write ``records`` into a new fragment, not yet part of any version.

        Commit one or more staged fragments, from any process, with :meth:`commit`.
        gc leaves the fragment alone for ``lease`` (default one day) after it was staged;
        a commit after that may find it removed (``StagedFragmentExpiredError``).
        Staging no records writes nothing (the fragment is empty).

        Raises:
            KeyFieldError, DuplicateKeyError, SchemaError, SplitError: the records were
                rejected; nothing was written.
        """
        self._require_model()
        seconds = leases.lease_seconds(lease)
        return txn.stage(self.storage, self.config, self._runs(records, progress), progress, lease=seconds)

    def commit(
        self,
        fragments: Sequence[txn.StagedFragment],
        *,
        mode: Literal["append", "upsert"] = "append",
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Publish staged fragments as one new version and return it (see :func:`litstore.txn.commit`).

        Raises:
            DuplicateKeyError: a key is staged twice, or (``append``) is already in the store.
            SplitError: (``upsert``) a replacement would move a key to another split.
            ConflictError: another writer committed changes to the same keys first.
            InvalidArgumentError: ``mode`` is not ``"append"`` or ``"upsert"``, ``message``
                or ``metadata`` cannot go in a commit record, or ``fragments`` is not a
                list of staged fragments; nothing was written.
        """
        message, metadata = check_arguments(mode, message, metadata)
        change = txn.Write(fragments, mode)
        self._head = self._wrap(
            txn.commit(self._head.reader, change, message=message, metadata=metadata, progress=progress)
        )
        return self._head.version

    def append(
        self,
        records: Iterable[Any],
        *,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Add new records as one new version and return it.

        ``records`` are dicts (or instances of the store's schema) whose keys are not
        in the store yet; ``append`` never replaces a record. An empty batch commits
        nothing and returns the current version.

        Raises:
            KeyFieldError, DuplicateKeyError, SchemaError, SplitError: the batch was
                rejected; the store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        metadata = huggingface.source_inputs(records, metadata)
        message, metadata = check_arguments("append", message, metadata)
        self._require_model()
        runs = self._checked_runs(records, "append", progress, [])
        return self._write(runs, "append", message, metadata, progress)

    def upsert(
        self,
        records: Iterable[Any],
        *,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Insert new keys and replace existing ones, as one new version; return it.

        A record whose content is unchanged is neither rewritten nor counted; if no
        record changes, nothing is committed and the current version is returned.

        Raises:
            KeyFieldError, DuplicateKeyError, SchemaError, SplitError: the batch was
                rejected (a replacement may not move a key to another split); the
                store is unchanged.
            ConflictError: another writer committed first; nothing was committed.
        """
        metadata = huggingface.source_inputs(records, metadata)
        message, metadata = check_arguments("upsert", message, metadata)
        self._require_model()
        unchanged: list[Key] = []
        runs = self._checked_runs(records, "upsert", progress, unchanged)
        return self._write(runs, "upsert", message, metadata, progress, unchanged)

    def update(
        self,
        changes: Mapping[Any, Any],
        *,
        where: str | None = None,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Set some top-level fields of existing records, as one new version; return it.

        ``changes`` is ``{key: {field: value, ...}, ...}``; with ``where`` (a SQL condition
        on the manifest's columns and declared fields, as :meth:`select` takes), it is
        ``{field: value, ...}``, set on every record the condition selects. A field a
        record lacks is added. Every other field keeps its stored bytes (media values are
        not decoded and encoded again: see :mod:`litstore.txn.update`), so
        ``diff(fields=True)`` names exactly the fields set. Conflicts as :meth:`upsert`
        does: a rival that changed the same keys first makes it a ``ConflictError``.
        Records that come out unchanged are not counted; if none changes, nothing is committed.

        Raises:
            KeyNotFoundError: some keys are not in the store (named); nothing was committed.
            SchemaError, SplitError: a new value cannot be stored, does not fit a declared
                field or the schema, or would move a record to another split.
            InvalidArgumentError: ``changes`` is not of that shape, or sets the key field.
            QueryError: DuckDB rejected ``where``.
            ConflictError: another writer changed these records first; nothing was committed.
        """
        from litstore.txn import update

        message, metadata = check_arguments("upsert", message, metadata)
        self._require_model()
        if where is None:
            checked = update.check_changes(changes, self.config.key)
        else:
            values = update.check_values(changes, self.config.key)
            checked = {key: values for key in self.select(where)} if values else {}
        unchanged: list[Key] = []
        runs = update.updated_runs(self._head.reader, checked, self._head.model, unchanged)
        return self._write(runs, "upsert", message, metadata, progress, unchanged)

    def delete(
        self,
        keys: Iterable[Key] | None = None,
        *,
        where: str | None = None,
        missing_ok: bool = False,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Remove ``keys``, or the records whose manifest row matches ``where`` (see :meth:`select`), as one new
        version and return it.

        Raises:
            KeyNotFoundError: some keys are not in the store (unless ``missing_ok``);
                the error names them and the store is unchanged.
            InvalidArgumentError: both or neither of ``keys`` and ``where`` were given.
            QueryError: DuckDB rejected ``where``.
            ConflictError: another writer committed first; nothing was committed.
        """
        message, metadata = check_message(message), check_metadata(metadata)
        if (keys is None) == (where is None):
            raise InvalidArgumentError("delete takes a list of keys or where= (a SQL condition), one of the two")
        change = txn.Delete(self.select(where) if where is not None else keys or (), missing_ok)
        if not change.keys:
            return self.version
        self._head = self._wrap(
            txn.commit(self._head.reader, change, message=message, metadata=metadata, progress=progress)
        )
        return self.version

    def _runs(self, records: Iterable[Any], progress: bool) -> Iterator[txn.Batch]:
        """``records`` validated and encoded, in runs of bounded size (see :func:`litstore.txn.prepare_runs`)."""
        run_bytes = _RUN_BYTES
        fields = self._head.fields  # the head's declared fields (add_fields may have added some)
        return txn.prepare_runs(records, self.config, self._head.model, False, run_bytes, fields)

    def _checked_runs(
        self, records: Iterable[Any], mode: Literal["append", "upsert"], progress: bool, unchanged: list[Key]
    ) -> Iterator[txn.Batch]:
        """Runs of ``records`` checked against the head before they are written.

        ``append``: keys the head has are refused, naming their input positions;
        ``upsert``: records whose content the head already holds are left out, their
        keys added to ``unchanged`` (the commit checks nobody changed them meanwhile).
        """
        offset = 0
        for run in self._runs(records, progress):
            if mode == "append":
                txn.refuse_existing(self._head.reader, run, offset)
                offset += len(run)
                yield run
            else:
                kept, left_out = txn.without_unchanged(self._head.reader, run)
                unchanged += left_out
                yield kept

    def _write(
        self,
        runs: Iterator[txn.Batch],
        mode: Literal["append", "upsert"],
        message: str | None,
        metadata: dict[str, Any] | None,
        progress: bool,
        unchanged: Sequence[Key] = (),
    ) -> Version:
        """Stage ``runs`` and commit them; ``unchanged`` (filled while ``runs`` are read) as :func:`txn.commit` says."""
        try:
            staged = txn.stage(self.storage, self.config, runs, progress)
        except VersionNotFoundError as exc:  # checking the runs read the head's manifest, and gc had expired it
            raise ConflictError(
                f"version {self.version.number}, which this handle writes on, was expired by gc since it was "
                f"read ({exc}): Store.refresh() moves to the newest version; then write again"
            ) from exc
        fragments = [staged]
        if not len(staged):
            txn.discard(self.storage, staged)
            if not unchanged:
                return self.version
            fragments = []
        try:
            checked_on = self.version.number if mode == "append" else None  # (_checked_runs checked the head)
            change = txn.Write(fragments, mode, unchanged, checked_on=checked_on)
            self._head = self._wrap(
                txn.commit(self._head.reader, change, message=message, metadata=metadata, progress=progress)
            )
        except BaseException as exc:
            if fragments and not isinstance(exc, UncertainCommitError):  # the record may reference the fragment
                txn.discard(self.storage, staged)
            raise
        return self.version

    def ingest(
        self,
        fn: Callable[[Any], Any],
        inputs: Iterable[Any],
        *,
        num_workers: int | None = None,
        mode: Literal["append", "upsert"] = "append",
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Run ``fn`` over ``inputs`` in parallel and commit every record it returns as one version.

        Like LitData's ``optimize(fn, inputs, num_workers)``: ``fn(input)`` returns a
        record, an iterable of records, or ``None``; it runs in ``num_workers`` worker
        processes (default: one per CPU; ``0``: in this process), each of which stages
        its records as a fragment, streaming, in bounded memory. One commit at the end
        makes one version, with the same ``mode`` semantics as :meth:`append` and
        :meth:`upsert`. ``fn`` must be importable by the workers (a module-level function).

        Raises:
            IngestError: ``fn`` failed on an input (the error names it), or a worker
                process died; nothing was committed.
            DuplicateKeyError: two inputs produced the same key, or (``append``) a key the
                store has; nothing was committed.
            KeyFieldError, SchemaError, SplitError: a record ``fn`` made was rejected.
            InvalidArgumentError: ``mode``, ``message``, ``metadata`` or ``num_workers`` cannot
                be used; refused before ``fn`` runs on any input.
            KeyboardInterrupt: Ctrl-C: the workers are interrupted (and killed if they do not
                stop within a few seconds); nothing was committed.
        """
        from litstore.ingest import ingest

        message, metadata = check_message(message), check_metadata(metadata)
        return ingest(
            self, fn, inputs, num_workers=num_workers, mode=mode, message=message, metadata=metadata, progress=progress
        )

    def compact(
        self,
        *,
        target_chunk_bytes: int | str | None = None,
        min_fill: float = 0.5,
        min_live: float = 0.8,
        message: str | None = None,
        progress: bool = False,
    ) -> Version:
        """Rewrite under-filled chunks and chunks with many dead rows into full ones, as a new version with
        identical records.

        Many small appends leave many small chunks, which stream slower (and cost a
        download each on S3); upserts and deletes in a format-4 store leave dead rows in
        chunks (deletion vectors), which take space and are skipped by every read. In
        each split, a chunk whose live fraction (live rows over rows) is below
        ``min_live``, and the chunks whose live bytes are below ``min_fill`` times
        ``target_chunk_bytes`` (default: the store's ``chunk_bytes``) when there are two
        of them or a chunk rewritten for its dead rows to merge them with, have their
        live rows rewritten together into chunks of about ``target_chunk_bytes``; dead
        rows and their deletion vectors are left behind. The version has one key run of
        every record and a manifest checkpoint. Records, content hashes, splits and
        the fingerprint are unchanged (a ``diff`` of the two versions is empty); older
        versions keep reading their own chunks until ``gc``. If nothing is to be
        rewritten, nothing is committed. Races with other writers like any commit:
        rebases (moving the live rows again if a rival marked rows dead in a chunk it
        rewrites), or raises ``ConflictError``.

        Raises:
            InvalidArgumentError: ``min_fill`` is not in (0, 1], ``min_live`` not in [0, 1], or
                ``target_chunk_bytes`` is not positive.
        """
        message = check_message(message)
        if isinstance(min_fill, bool) or not isinstance(min_fill, (int, float)) or not 0 < min_fill <= 1:
            raise InvalidArgumentError(f"min_fill must be in (0, 1], got {min_fill!r}")
        if isinstance(min_live, bool) or not isinstance(min_live, (int, float)) or not 0 <= min_live <= 1:
            raise InvalidArgumentError(
                f"min_live must be in [0, 1] (0: never rewrite a chunk for its dead rows), got {min_live!r}"
            )
        target = (
            self.config.chunk_bytes
            if target_chunk_bytes is None
            else size_in_bytes(target_chunk_bytes, "target_chunk_bytes")
        )
        if isinstance(target, bool) or not isinstance(target, int) or target <= 0:
            raise InvalidArgumentError(f"target_chunk_bytes must be a positive whole number, got {target!r}")
        if target_chunk_bytes is not None:
            check_chunk_bytes(target, "target_chunk_bytes")
        change = txn.Compaction.chosen(self._head.reader, target, min_fill, min_live)
        if change is None:
            return self.version
        self._head = self._wrap(txn.commit(self._head.reader, change, message=message, progress=progress))
        return self.version

    def add_fields(
        self, fields: dict[str, Any], *, message: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Version:
        """Declare more fields (as in :meth:`create`), reading their values from every record; a new version.

        The new version has the same records, chunks and fingerprint; its manifest
        carries the new columns. Older versions keep the fields they had.

        Raises:
            InvalidArgumentError: a name or type cannot be declared, or is declared already.
            SchemaError: some records lack a valid value (the error names them; in its ``culprits``,
                ``(position, key)``, the position counts the version's rows in the order its manifest
                files are read, not the order of ``manifest()``); nothing was committed.
        """
        from litstore.format import fields as field_format

        message, metadata = check_message(message), check_metadata(metadata)
        declared = field_format.declare(fields, self.config.key)
        if not declared:
            return self.version
        self._head = self._wrap(
            txn.commit(self._head.reader, txn.FieldAddition(declared), message=message, metadata=metadata)
        )
        return self.version

    def upgrade(
        self,
        *,
        rebuild: bool = False,
        message: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Version:
        """Move the store to format 7 (a format-5 or 6 store is switched, nothing rewritten): its key index on
        disk with key filters, deletion vectors for upserts and deletes, and commit records that list chunks and
        deletion vectors by delta (and, listed in full, name no dropped chunks).

        On a format-1 or 2 store, first commits a version with the newest version's
        records, chunks and fingerprint (a ``diff`` of the two is empty) whose commit
        record lists one key run of every record; then switches ``litstore.json`` to
        format 7. From then on every commit writes a key run with its key filter, so a
        lookup, ``get_many``, ``in`` or an append's key check in a fresh process reads a
        few blocks and pages of the index instead of composing the manifest, and an
        upsert or delete marks the rows it supersedes dead instead of copying the live
        rows of every chunk it touches. A format-3 or 4 store has its index already: it
        is switched, then given one such version whose single run carries a key filter.
        Versions from before keep reading as they did. Races with other writers like any
        commit: they rebase onto it. Safe to stop at any point and run again (see
        :mod:`litstore.txn.upgrade`).

        On a format-5, 6 or 7 store whose newest version's runs all open, nothing is committed
        and the head is returned as it is, unless ``rebuild`` (write the index again
        from the manifest, as when a lookup reported a damaged key run); a version is
        also committed if the runs are missing or cut short. Builds the index in the
        memory of the newest version's manifest plus 48 bytes a record; ``progress``
        shows a bar while it hashes the keys. Once upgraded, litstore releases before
        format 7 refuse the store.

        Raises:
            ConflictError: other writers kept committing first; nothing was committed.
            InvalidArgumentError: ``rebuild``, ``message`` or ``metadata`` is not one an upgrade takes.
        """
        from litstore.txn import upgrade

        message, metadata = check_message(message), check_metadata(metadata)
        txn.Upgrade(rebuild=rebuild)  # checks the argument before anything is read
        self.refresh()
        reader = upgrade.upgrade(self._head.reader, rebuild, message, metadata, progress)
        self._head = self._wrap(reader)
        return self.version

    def tag(self, name: str, version: VersionRef | None = None, *, move: bool = False) -> Tag:
        """Name ``version`` (default: the latest) ``name``: ``store.tags.create(...)``."""
        return self.tags.create(name, version, move=move)

    def delete_tag(self, name: str) -> None:
        """Remove tag ``name``: ``store.tags.delete(name)``."""
        self.tags.delete(name)

    def gc(
        self,
        keep_last: int | None = None,
        older_than: timedelta | datetime | None = None,
        *,
        dry_run: bool = True,
        grace: timedelta | None = None,
        break_leases: bool = False,
        progress: bool = False,
    ) -> GCReport:
        """Expire old versions and delete the files no kept version references (see :mod:`litstore.ops.gc`).

        **A dry run unless** ``dry_run=False``: by default the report says what would be
        expired and removed and nothing is touched, as ``litstore gc`` without ``--yes``
        and Delta's ``VACUUM ... DRY RUN`` (before litstore 0.2 the default deleted).

        Kept: the latest version, every tagged version, the last ``keep_last``
        versions and those created after ``older_than``. With neither, every version
        is kept and only debris of writers that never committed is removed. Files
        younger than ``grace`` (default one hour) are never removed unless an expired
        version referenced them, so a live writer never loses its files, and staged
        fragments are kept while their lease holds (``Store.stage(lease=)``, one day by
        default) unless ``break_leases`` (then a commit of one raises
        ``StagedFragmentExpiredError``). Ages are judged by the storage's clock.
        """
        from litstore.ops import gc

        self.refresh()
        return gc.collect(
            self._head.reader,
            keep_last,
            older_than,
            dry_run=dry_run,
            grace=grace,
            break_leases=break_leases,
            progress=progress,
        )

    def _require_model(self) -> None:
        if self.config.record_schema is not None and self._head.model is None:
            raise SchemaError(
                f"this store validates records against {self.config.record_schema.qualname}; "
                "pass that model as litstore.open(root, schema=...) to write"
            )

    # -- reading: the head's snapshot ---------------------------------------------

    def __len__(self) -> int:
        return len(self._head)

    def __getitem__(self, key: Key) -> Record:
        return self._head[key]

    def __contains__(self, key: object) -> bool:
        return key in self._head

    def __iter__(self) -> Iterator[Key]:
        return iter(self._head)

    def get(self, key: Key, default: Any = None) -> Any:
        """The record with ``key`` at the head, or ``default``."""
        return self._head.get(key, default)

    def get_many(self, keys: Sequence[Key], default: Any = MISSING) -> list[Any]:
        """The records with ``keys`` at the head (see :meth:`Snapshot.get_many`)."""
        return self._head.get_many(keys, default)

    def keys(self) -> list[Key]:
        """Every key at the head."""
        return self._head.keys()

    def items(self) -> Iterator[tuple[Key, Record]]:
        """``(key, record)`` of every record at the head, in storage order."""
        return self._head.items()

    def values(self) -> Iterator[Record]:
        """Every record at the head, in storage order."""
        return self._head.values()

    def to_arrow(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every record at the head as an Arrow table; see :meth:`Snapshot.to_arrow`."""
        return self._head.to_arrow(columns)

    def iter_batches(self, batch_size: int = 65536, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The head's records as Arrow record batches; see :meth:`Snapshot.iter_batches`."""
        return self._head.iter_batches(batch_size, columns)

    def to_pandas(self, columns: Sequence[str] | None = None) -> pandas.DataFrame:
        """Every record at the head as a pandas ``DataFrame``; see :meth:`Snapshot.to_pandas`."""
        return self._head.to_pandas(columns)

    def to_polars(self, columns: Sequence[str] | None = None) -> polars.DataFrame:
        """Every record at the head as a polars ``DataFrame``; see :meth:`Snapshot.to_polars`."""
        return self._head.to_polars(columns)

    def to_huggingface(self, split: str | None = None, *, features: Any = None) -> Any:
        """The head as a ``datasets.DatasetDict`` (or one split's ``Dataset``); see :meth:`Snapshot.to_huggingface`."""
        return self._head.to_huggingface(split, features=features)

    def manifest(self) -> pa.Table:
        """The head's manifest."""
        return self._head.manifest()

    def chunks(self) -> dict[str, list[ChunkInfo]]:
        """The head's chunks per split."""
        return self._head.chunks()

    def sql(self, sql: str, version: VersionRef | None = None) -> pa.Table:
        """DuckDB over the manifest of ``version`` (default: the head); see :meth:`Snapshot.sql`."""
        return self._view(version).sql(sql)

    def verify(
        self,
        version: VersionRef | None = None,
        expected_keys: Iterable[Key] | None = None,
        *,
        progress: bool = False,
        num_workers: int = 0,
    ) -> VerifyReport:
        """Check ``version`` (default: the head) against its data; see :meth:`Snapshot.verify`."""
        return self._view(version).verify(expected_keys, progress=progress, num_workers=num_workers)

    def dataset(self, version: VersionRef | None = None, split: str | None = None, **kwargs: Any) -> VersionDataset:
        """Stream ``version`` (default: the head), or a subset (``where=``, ``keys=``); see :meth:`Snapshot.dataset`."""
        return self._view(version).dataset(split, **kwargs)

    def select(self, where: str, version: VersionRef | None = None) -> list[Key]:
        """Keys of ``version`` (default: the head) whose manifest row matches ``where``; see :meth:`Snapshot.select`."""
        return self._view(version).select(where)

    def diff(self, old: VersionRef, new: VersionRef | None = None, *, fields: bool = False) -> Diff:
        """Keys added, removed and changed from ``old`` to ``new`` (default: the head); see :meth:`Snapshot.diff`.

        ``fields=True`` also names the fields that changed (reading the changed records only).
        """
        return self._head.diff(old, new, fields=fields)

    def audit(self, version: VersionRef | None = None, **options: Any) -> AuditReport:
        """Identical (or near) records under different keys, and across splits, in ``version`` (default: the head).

        ``options`` (``fields``, ``near``, ``threshold``, ``image_distance``, ``examples``,
        ``progress``) are those of :meth:`Snapshot.audit`.
        """
        return self._view(version).audit(**options)

    def at(self, version: VersionRef) -> Snapshot:
        """A read-only snapshot of ``version``: a number, a tag name, a ``Version``, or ``"branch:NAME"`` (the
        newest version of that branch; ``"branch:main"``: of the store's own line)."""
        if isinstance(version, str) and version.startswith(_BRANCH_PREFIX):
            name = version.removeprefix(_BRANCH_PREFIX)
            storage = branched.open_branch(self.storage, name)
            return Snapshot(
                storage, self.config, log.read_version(storage, log.head_number(storage) or 0), self._head.model
            )
        return self._head.at(version)

    def versions(self) -> list[Version]:
        """Every committed version that is not expired, oldest first."""
        return self._head.versions()

    @property
    def lookup_index_bytes(self) -> int:
        """Memory taken by the head's key index."""
        return self._head.lookup_index_bytes

    def _wrap(self, reader: VersionReader) -> Snapshot:
        """The head's snapshot of ``reader``'s version (what a write or refresh moved to)."""
        return Snapshot.of(reader, self._head.model)

    def _view(self, version: VersionRef | None) -> Snapshot:
        """The snapshot a call that takes ``version`` reads: the head's, or that version's."""
        return self._head if version is None else self._head.at(version)


def open(  # noqa: A001
    root: Root,
    *,
    schema: type[pydantic.BaseModel] | None = None,
    storage_options: dict[str, Any] | None = None,
    branch: str | None = None,
) -> Store:
    """Open the store at ``root`` at its latest version (see :meth:`Store.open`)."""
    return Store.open(root, schema=schema, storage_options=storage_options, branch=branch)


def _reopen(root: str, storage_options: dict[str, Any], schema: type[pydantic.BaseModel] | None) -> Store:
    """How a pickled :class:`Store` comes back: opened again at ``root``, at its newest version."""
    return Store.open(root, schema=schema, storage_options=storage_options or None)


def _is_dir(storage: Storage) -> bool:
    return storage.local_path(layout.CONFIG) is not None
