"""Ray Data on the commit protocol: write a ``ray.data.Dataset`` as one version, read a version as one.

:func:`write` is a Ray ``Datasink``. Every write task stages the records of its blocks
into fragments of its own (:meth:`litstore.Store.stage`), anywhere in the cluster,
and returns the small :class:`~litstore.StagedFragment` values; once every task has
finished, the driver commits them all as **one** version (:meth:`litstore.Store.commit`):
put-if-absent, rebasing over other writers, or :class:`~litstore.ConflictError`. A
failure anywhere (a bad record in a task, a key staged twice, a conflict) commits
nothing: the driver discards every fragment that was staged, the ones listed by a
small registry actor included; a fragment staged by a task still running when the
write failed is left to ``gc`` (nothing references it).

:func:`read` is a Ray ``Datasource``. The version (a number, tag or ``None`` for the
head) is resolved to a number once, on the driver, and every read task reads exactly
that version: its chunks are split into groups of about equal size, one read task
per group, and every record is checked against the content hash its version committed
(each chunk's hashes sidecar, read by the task; the driver holds O(chunks), not a
manifest) before it is handed to Ray (as pyarrow tables; numpy arrays become Ray tensor columns,
media values (``litdata.Image``, ...) stay in their stored form as
:class:`litstore.Media` objects, which :func:`write` stores as the same bytes and
``media.decode()`` decodes),
by the version's :class:`~litstore.read.checked.RecordCheck` as on every read path: a
damaged record fails the task with :class:`~litstore.errors.DamagedRecordError`.

Ray's tables are columnar, so records pass through Ray with a uniform set of fields:
a field missing from some records comes back as ``None`` in those records.

Other engines drive the same two calls; only the transport of the fragments differs:

- **Dask**: ``fragments = bag.map_partitions(lambda part: [store_of(root).stage(part)]).compute()``
  stages each partition on a worker; ``litstore.open(root).commit(fragments)`` on the client.
- **Spark**: ``rdd.mapPartitions(lambda rows: [store_of(root).stage(rows)]).collect()``
  (``StagedFragment`` pickles), then one ``commit`` on the driver.
- **torchrun / DDP**: each rank stages its shard, ``torch.distributed.gather_object``
  brings the fragments to rank 0, which commits; the other ranks wait on a barrier and
  ``refresh()``. A rank that fails before the gather leaves its fragment to ``gc``.

Reading from those engines needs no integration at all: ``store.at(v).chunks()`` lists
the pinned version's chunks and ``store.at(v).live_rows(chunk)`` the rows of each that
hold its records (format 4 leaves dead rows in place), and each worker reads its share, or streams with
``store.dataset(v)`` (litdata's ``StreamingDataset`` shards across ranks itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    import ray
    from ray.data import Dataset, Datasink, Datasource, ReadTask
    from ray.data.block import Block, BlockAccessor, BlockMetadata
    from ray.data.datasource.datasink import WriteResult
    from ray.data.extensions import ArrowPythonObjectArray, ArrowTensorArray
    from ray.exceptions import RayError
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError("litstore.ray needs Ray Data: pip install 'litstore[ray]'") from exc

from litstore import txn
from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, InvalidArgumentError, LitstoreError, SplitError, UncertainCommitError
from litstore.format.models import Version, check_message
from litstore.format.stored_media import encoded_media
from litstore.read import chunkhashes
from litstore.read.chunkhashes import ChunkHashes
from litstore.read.deletions import Deletions
from litstore.read.keyindex import content_matrix
from litstore.snapshot import Snapshot, VersionRef
from litstore.store import Store
from litstore.store import open as open_store

__all__ = ["read", "write"]

#: Records decoded (and handed to Ray) at once by a read task: bounds a task's memory.
_BLOCK_ROWS = 1024


def write(
    dataset: Dataset,
    store: Store | str | os.PathLike[str],
    *,
    mode: Literal["append", "upsert"] = "append",
    storage_options: dict[str, Any] | None = None,
    message: str | None = None,
    verbose: bool = False,
) -> Version:
    """Write every row of ``dataset`` into the store as one new version and return it.

    Ray Data logs some forty INFO lines and draws progress bars for each execution;
    while this writes they are off (warnings and errors still show) unless ``verbose``.

    Args:
        dataset: rows are records (a ``dict`` per row; tensor columns become numpy arrays).
        store: an open store or the root of one (created beforehand with ``Store.create``).
        mode: ``"append"`` (every key must be new) or ``"upsert"`` (replace existing keys).
        storage_options: for ``s3://`` roots, boto3 client arguments; every write task
            opens the store with them (pass them even with an open ``Store``: a handle
            does not carry them to other processes).
        message: the version's commit message.

    Raises:
        KeyFieldError, DuplicateKeyError, SchemaError, SplitError, UnsupportedValueError:
            records were rejected (a key appearing in two tasks included); nothing was committed.
        ConflictError: another writer committed changes to the same keys first.
        StoreNotFoundError: there is no store at ``store``.
    """
    if mode not in ("append", "upsert"):
        raise InvalidArgumentError(f"mode must be 'append' or 'upsert', not {mode!r}")
    message = check_message(message)
    root, options = _locate(store, storage_options)
    sink = _StoreDatasink(root, options, mode, message)
    try:
        with _quiet(not verbose):
            dataset.write_datasink(sink)
    except (LitstoreError, RayError) as exc:  # a task's error arrives wrapped in a RayTaskError
        cause = _litstore_cause(exc)
        if cause is None:
            raise
        raise cause from exc
    if isinstance(store, Store):
        store.refresh()
    if sink.version is None:  # an empty dataset: nothing to commit
        return open_store(root, storage_options=options).version
    return sink.version


def read(
    store: Store | str | os.PathLike[str],
    version: VersionRef | None = None,
    split: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    filter: str | None = None,  # noqa: A002 - the name ray.data.read_lance gives it
    num_cpus: float | None = None,
    memory: float | None = None,
    concurrency: int | None = None,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> Dataset:
    """A Ray dataset of the records of ``version`` (default: the newest), one row per record.

    The arguments after ``columns`` are those of ``ray.data.read_lance``, so a pipeline
    moves between the two by its first line.

    Args:
        store: an open store or the root of one.
        version: a version number, tag name or ``Version``; resolved once, here.
        split: read only this split.
        storage_options: for ``s3://`` roots (see ``Store.open``).
        columns: keep only these fields of each record.
        filter: a SQL condition on the manifest's columns (``split``, ``key``, the
            declared fields), run in litstore's DuckDB sandbox on the driver: only the
            matching records are read (the condition never reaches undeclared fields,
            which live inside the records).
        num_cpus, memory: resources of each read task (Ray's defaults if ``None``).
        concurrency: the most read tasks running at once.
        override_num_blocks: the number of read tasks (groups of chunks), instead of
            Ray's choice.
        ray_remote_args: further arguments of each read task's ``ray.remote``.

    Raises:
        VersionNotFoundError: no such version or tag.
        SplitError: the store has no split ``split``.
        QueryError: DuckDB rejected ``filter``.
        InvalidArgumentError: ``filter`` is not a non-empty string.

    The dataset runs when it is consumed, with Ray Data's logging as the caller has it
    (``logging.getLogger("ray.data").setLevel(logging.WARNING)`` and
    ``DataContext.get_current().enable_progress_bars = False`` quiet it).
    """
    source = _VersionDatasource(store, version, split, storage_options, columns, filter)
    # Ray (2.60) deprecates ray_remote_args for the parameters read_datasource names itself: those go by name.
    remote = dict(ray_remote_args or {})
    named = {name: remote.pop(name) for name in list(remote) if name in _NAMED_REMOTE_ARGS}
    options = {"num_cpus": num_cpus, "memory": memory, **named}
    dataset: Dataset = ray.data.read_datasource(
        source,
        concurrency=concurrency,
        override_num_blocks=override_num_blocks,
        **{name: value for name, value in options.items() if value is not None},
        **({"ray_remote_args": remote} if remote else {}),
    )
    return dataset


#: Task options ``ray.data.read_datasource`` takes by name (the rest of ``ray_remote_args`` pass as they are).
_NAMED_REMOTE_ARGS = frozenset(
    {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "runtime_env", "label_selector", "max_calls"}
)


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """Ray Data's INFO logging and progress bars off for the duration (if ``quiet``), as they were after."""
    if not quiet:
        yield
        return
    logger = logging.getLogger("ray.data")  # Ray configures it (level DEBUG, its own handlers, no propagation)
    context = ray.data.DataContext.get_current()
    level, bars = logger.level, context.enable_progress_bars
    logger.setLevel(max(logging.WARNING, level))
    context.enable_progress_bars = False
    try:
        yield
    finally:
        logger.setLevel(level)
        context.enable_progress_bars = bars


# -- writing -----------------------------------------------------------------------


@ray.remote(num_cpus=0)
class _FragmentRegistry:
    """Collects the fragments write tasks staged, so a failed write can discard them all."""

    def __init__(self) -> None:
        self._fragments: list[txn.StagedFragment] = []

    def add(self, fragments: list[txn.StagedFragment]) -> None:
        self._fragments.extend(fragments)

    def fragments(self) -> list[txn.StagedFragment]:
        return self._fragments


class _StoreDatasink(Datasink[list[txn.StagedFragment]]):
    """Stages blocks in the write tasks and commits them on the driver as one version."""

    def __init__(
        self,
        root: str,
        storage_options: dict[str, Any] | None,
        mode: Literal["append", "upsert"],
        message: str | None,
    ) -> None:
        self._root = root
        self._storage_options = storage_options
        self._mode = mode
        self._message = message
        self._registry: Any = None
        self.version: Version | None = None

    def get_name(self) -> str:
        return "LitstoreWrite"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        open_store(self._root, storage_options=self._storage_options)  # fail before any task if there is no store
        self._registry = _FragmentRegistry.remote()  # type: ignore[attr-defined]

    def write(self, blocks: Iterable[Block], ctx: Any) -> list[txn.StagedFragment]:
        store = open_store(self._root, storage_options=self._storage_options)
        fragments: list[txn.StagedFragment] = []
        try:
            for block in blocks:
                records = _records(block)
                if len(records):
                    fragments.append(store.stage(records))
            if self._registry is not None:
                ray.get(self._registry.add.remote(fragments))
        except BaseException:
            for fragment in fragments:
                txn.discard(store.storage, fragment)
            raise
        return fragments

    def on_write_complete(self, write_result: WriteResult[list[txn.StagedFragment]]) -> None:
        fragments = [fragment for returned in write_result.write_returns for fragment in returned]
        store = open_store(self._root, storage_options=self._storage_options)
        try:
            self.version = store.commit(fragments, mode=self._mode, message=self._message)
        except UncertainCommitError:  # the commit record may list the fragments: keep them
            self._release()
            raise
        except LitstoreError:
            self._discard(store, fragments)
            raise
        self._release()

    def on_write_failed(self, error: Exception) -> None:
        if self.version is not None:  # committed; Ray failed afterwards
            return
        store = open_store(self._root, storage_options=self._storage_options)
        staged = ray.get(self._registry.fragments.remote()) if self._registry is not None else []
        self._discard(store, staged)

    def _discard(self, store: Store, fragments: Iterable[txn.StagedFragment]) -> None:
        for fragment in fragments:
            txn.discard(store.storage, fragment)
        self._release()

    def _release(self) -> None:
        if self._registry is not None:
            ray.kill(self._registry)
            self._registry = None


def _records(block: Block) -> pa.Table | list[dict[str, Any]]:
    """The rows of ``block`` as records: its Arrow table when every column is plain, else dicts.

    A plain table is staged column by column; Ray's tensor and Python-object columns
    come out of dicts as numpy arrays.
    """
    accessor = BlockAccessor.for_block(block)
    table = accessor.to_arrow()
    if not any(isinstance(column.type, pa.ExtensionType) for column in table.columns):
        return table
    columns: dict[str, list[Any]] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if isinstance(column.type, pa.ExtensionType):  # Ray's tensor and Python-object columns
            columns[name] = list(accessor.to_numpy(name))
        else:
            columns[name] = column.to_pylist()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


# -- reading -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """Rows of one chunk of the pinned version to read: ``rows`` (in row order) with the committed content hash
    and the key of each, or (``rows`` is ``None``) every live row of the chunk, checked against its hashes
    sidecar."""

    chunk: str
    rows: np.ndarray | None
    contents: np.ndarray | None
    size_bytes: int
    num_rows: int
    num_items: int  # the rows of the chunk file, live and dead
    keys: list[Any] | None = None  # what each of ``rows`` must hold (the manifest's or key index's word for it)


class _VersionDatasource(Datasource):
    """The records of one pinned version, one read task per group of its chunks."""

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        version: VersionRef | None,
        split: str | None,
        storage_options: dict[str, Any] | None,
        columns: Sequence[str] | None,
        where: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        root, options = _locate(store, storage_options)
        handle = store if isinstance(store, Store) else open_store(root, storage_options=options)
        snapshot = handle.head() if version is None else handle.at(version)
        if split is not None and split not in snapshot.splits:
            raise SplitError(f"unknown split {split!r}; this store's splits are {snapshot.splits}")
        self._root = root
        self._storage_options = options
        self._number = snapshot.version.number
        self._columns = list(columns) if columns is not None else None
        self._pieces = _plan(snapshot, split, where)

    def get_name(self) -> str:
        return "LitstoreRead"

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(piece.size_bytes for piece in self._pieces)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        groups: list[list[_Piece]] = [[] for _ in range(max(1, min(parallelism, len(self._pieces))))]
        sizes = [0] * len(groups)
        for piece in sorted(self._pieces, key=lambda piece: -piece.size_bytes):
            smallest = sizes.index(min(sizes))
            groups[smallest].append(piece)
            sizes[smallest] += piece.size_bytes
        tasks = []
        for group, size in zip(groups, sizes, strict=True):
            if not group:
                continue
            metadata = BlockMetadata(
                num_rows=sum(piece.num_rows for piece in group), size_bytes=size, exec_stats=None, input_files=None
            )
            reader = _GroupReader(self._root, self._storage_options, self._number, self._columns, group)
            tasks.append(ReadTask(reader, metadata, per_task_row_limit=per_task_row_limit))
        return tasks


@dataclass(frozen=True)
class _GroupReader:
    """A read task's work: decode and check its chunks' rows, in blocks of :data:`_BLOCK_ROWS`."""

    root: str
    storage_options: dict[str, Any] | None
    number: int
    columns: list[str] | None
    pieces: list[_Piece]

    def __call__(self) -> Iterator[Block]:
        snapshot = open_store(self.root, storage_options=self.storage_options).at(self.number)
        reader = snapshot.reader
        cache, check, key = reader.chunk_cache, reader.check, reader.config.key
        sidecars = ChunkHashes(reader.storage, reader.config, reader.version)
        for piece in self.pieces:
            if piece.rows is None or piece.contents is None:  # every live row, checked against the chunk's sidecar
                rows, hashes = reader.sidecar_rows(sidecars, piece.chunk, piece.num_items)
                contents = hashes[rows]
            else:
                rows, contents = piece.rows, piece.contents
                if np.isin(rows, reader.deletions.dead(piece.chunk, piece.num_items)).any():  # as streaming checks
                    raise IntegrityError(
                        f"the key index of version {self.number} names rows of chunk {piece.chunk} that its deletion "
                        "vector says are dead (superseded or deleted records): the version's index or deletion "
                        "vectors are damaged; store.verify() checks them"
                    )
            for start in range(0, len(rows), _BLOCK_ROWS):
                part, expected = rows[start : start + _BLOCK_ROWS], contents[start : start + _BLOCK_ROWS]
                with encoded_media():  # media pass through Ray as litstore.Media: written back as their bytes
                    records = check.records(piece.chunk, part, cache.payloads(piece.chunk, part), expected)
                if piece.keys is not None:
                    asked = piece.keys[start : start + _BLOCK_ROWS]
                    check.keyed(piece.chunk, part.tolist(), records, asked, key, "the manifest or key index")
                yield _table(records, self.columns)


def _plan(snapshot: Snapshot, split: str | None, where: str | None) -> list[_Piece]:
    """What the read tasks of ``snapshot`` (its ``split``, the records matching ``where``) read, chunk by chunk.

    Holds O(chunks), not O(records), where the store allows: a whole version (or split)
    whose chunks all have hashes sidecars (format 3+) is planned from its chunk list
    alone, each task reading the sidecars and deletion vectors of its own chunks; a
    ``where`` subset costs the records it matches, found in the key index on disk. Only
    a version without those composes its manifest here. Whichever way, the chunks each
    split lists must hold its live record count, as streaming checks (reads nothing):
    records of a chunk the index lost are never silently left out.

    Raises:
        IntegrityError: the chunks listed do not hold the version's record counts, or
            the manifest or key index names a chunk the version does not list.
    """
    listed = snapshot.chunks()
    reader = snapshot.reader
    reader.check_live_counts(split)
    chunks = {chunk.filename: chunk for name in sorted(listed) if split in (None, name) for chunk in listed[name]}
    every = {chunk.filename for name in listed for chunk in listed[name]}
    if where is None and snapshot.config.writes_key_runs and chunkhashes.all_present(snapshot.storage, chunks.values()):
        return [_whole(chunk, reader.deletions) for chunk in chunks.values()]
    if where is None:
        return _pieces(snapshot.manifest(), chunks, every)
    keys = snapshot.select(where)
    found = reader.located(keys)
    if found is None:  # no key index on disk (format 2): the manifest's rows of those keys
        manifest = snapshot.manifest()
        found = manifest.filter(pc.is_in(manifest.column("key"), pa.array(keys, manifest.schema.field("key").type)))
    return _pieces(found, chunks, every)


def _whole(chunk: ChunkInfo, deletions: Deletions) -> _Piece:
    """Every live row of ``chunk``, found by the task that reads it; its size pro rata of the live rows."""
    live = deletions.live_count(chunk.filename, chunk.num_items)
    return _Piece(chunk.filename, None, None, chunk.num_bytes * live // max(chunk.num_items, 1), live, chunk.num_items)


def _pieces(rows: pa.Table, chunks: dict[str, ChunkInfo], listed: set[str]) -> list[_Piece]:
    """The records ``rows`` (``chunk``, ``row``, ``content_hash``) that lie in ``chunks``, grouped by chunk in
    row order; each chunk's size pro rata of its rows. ``listed``: every chunk of the version (a row outside
    ``chunks`` is another split's; one outside ``listed`` is damage, never a record silently left out).

    Raises:
        IntegrityError: a row names a chunk the version does not list.
    """
    names = np.asarray(rows.column("chunk").to_numpy(zero_copy_only=False), dtype=object)
    unlisted = set(names.tolist()) - listed
    if unlisted:
        raise IntegrityError(
            f"the manifest or key index names {len(unlisted)} chunks the version's index does not list (such as "
            f"{min(unlisted)}): the version is damaged; store.verify() lists what is wrong"
        )
    numbers = rows.column("row").to_numpy().astype(np.int64)
    contents = content_matrix(rows.column("content_hash"))
    pieces = []
    for name in sorted(set(names.tolist()) & chunks.keys()):
        members = np.flatnonzero(names == name)
        members = members[np.argsort(numbers[members], kind="stable")]
        info = chunks[name]
        size = info.num_bytes * len(members) // max(info.num_items, 1)
        keys = rows.column("key").take(pa.array(members)).to_pylist()
        pieces.append(_Piece(name, numbers[members], contents[members], size, len(members), info.num_items, keys))
    return pieces


def _table(records: list[Any], columns: list[str] | None) -> pa.Table:
    """A pyarrow table of ``records``: one column per field, numpy arrays as Ray tensor columns."""
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    if columns is not None:
        names = dict.fromkeys(name for name in columns)
    arrays = {}
    for name in names:
        values = [record.get(name) for record in records]
        arrays[name] = _column(values)
    return pa.table(arrays)


def _column(values: list[Any]) -> Any:
    """One column: tensors if every value is a numpy array, Arrow types if Arrow takes them, else Python objects."""
    if values and all(isinstance(value, np.ndarray) for value in values):
        return ArrowTensorArray.from_numpy(values)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return ArrowPythonObjectArray.from_objects(values)


def _locate(store: Store | str | os.PathLike[str], options: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """The root and storage options every task opens the store with."""
    if isinstance(store, Store):
        return store.root, options
    if not isinstance(store, (str, os.PathLike)):
        raise InvalidArgumentError(f"a store is a litstore.Store or a root, not {type(store).__name__}")
    return os.fspath(store), options


def _litstore_cause(error: BaseException) -> LitstoreError | None:
    """The litstore error Ray wrapped (task errors arrive as ``RayTaskError`` chains), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # a RayTaskError carries the task's exception
        if isinstance(cause, LitstoreError):
            return cause
        if isinstance(current, LitstoreError):
            return current
        current = current.__cause__ or current.__context__
    return None
