"""Reading manifests: a small cache of composed ones, and the rows a diff of two versions needs."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import ExpiredVersion, StoreConfig, Version
from litstore.read import log
from litstore.storage import Storage


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


#: What a diff needs of a manifest row; deltas add their ``change``.
DIFF_COLUMNS = ("key", "content_hash", "split")
_DELTA_COLUMNS = (*DIFF_COLUMNS, "change")
# The fast diff reads the deltas between the versions in place of the newer one's chain
# (its newest checkpoint, then deltas): worth it unless the deltas it reads instead of
# that checkpoint are this many times bigger. It reads 4 of a delta's 8 columns and
# joins only the touched rows: a full-size delta costs it about a tenth of what
# composing and joining a whole manifest of that size costs (1M keys: 0.05 s of 1.2 s).
_DELTA_BYTES_RATIO = 4.0
# Manifest files read at once: Parquet decoding releases the GIL, and remote reads overlap.
_CONCURRENT_READS = 4


def touched_rows(storage: Storage, config: StoreConfig, old: Version, new: Version) -> tuple[pa.Table, pa.Table] | None:
    """The rows (:data:`DIFF_COLUMNS`) of ``old`` and of ``new`` for every key the commits between them touched.

    A key that no commit between the two versions added, replaced or deleted has the
    same content hash and split in both: those commits' deltas mention it not at all
    or as ``moved``, and a moved row carries its parent's content hash and split. So
    the diff of these rows is the diff of the two versions, found by reading the
    deltas between them and looking the touched keys up in the older version's chain
    (checkpoint and deltas), without composing either version. Either order works.

    Returns None when the log cannot say which keys were touched (gc expired a
    version between them, a delta is missing, a version wrote only a checkpoint and
    is not an ``add_fields`` of its parent's records), when the deltas between
    them are much bigger than the newer version's checkpoint they would stand in
    for, or when the rows found do not account for the difference of the two
    versions' fingerprints (:func:`_accounts_for`: a delta edited after its commit):
    the caller then compares whole manifests.

    Raises:
        IntegrityError: a manifest file or commit record is damaged.
        VersionNotFoundError: gc expired a version of the older one's chain.
    """
    low, high = sorted((old, new), key=lambda version: version.number)
    sizes = {info.path: info.size for info in storage.walk(layout.MANIFESTS)}
    names = {path.removeprefix(f"{layout.MANIFESTS}/") for path in sizes}
    between = _deltas_between(storage, low, high, sizes, names)
    if between is None:
        return None
    paths, announced = between
    chain, checkpoint = log.manifest_chain(storage, low, names) if paths else ([], None)
    low_chain: list[tuple[str, Sequence[str]]] = [(path, _DELTA_COLUMNS) for path in chain]
    if checkpoint is not None:
        low_chain.append((checkpoint, DIFF_COLUMNS))
    # The older version's chain is read, and each of its files searched for the touched
    # keys once they are known, while the deltas between are read and searched; unless
    # their commit records say they only moved records (compact) or declared fields.
    keys: Future[pa.Array | None] = Future()

    def search(path: str, columns: Sequence[str]) -> pa.Table:
        table = _read(storage, config, path, columns)
        wanted = keys.result()
        return table if wanted is None else _with_keys(table, wanted)

    with ThreadPoolExecutor(max_workers=_CONCURRENT_READS) as pool:
        try:
            pending = [pool.submit(_read, storage, config, path, _DELTA_COLUMNS, ChangeKind.MOVED) for path in paths]
            low_files: list[Future[pa.Table]] = []
            if announced:
                low_files = [pool.submit(search, path, columns) for path, columns in low_chain]
            touched = _newest([_without(delta.result(), ChangeKind.MOVED) for delta in pending], config.key_type)
            keys.set_result(touched.column("key").combine_chunks() if touched.num_rows else None)
        finally:
            if not keys.done():
                keys.set_result(None)  # a read failed: let the searches end
        high_rows = _live(touched, config.key_type)
        if touched.num_rows:
            low_files = low_files or [pool.submit(search, path, columns) for path, columns in low_chain]
        high_sum = _fingerprint(high_rows)  # while the older version's chain is read
        if touched.num_rows:
            low_rows = _compose([file.result() for file in low_files], checkpoint is not None, config.key_type)
        else:
            low_rows = high_rows  # both empty
    if not _accounts_for(low, high, _fingerprint(low_rows), high_sum):
        return None
    return (low_rows, high_rows) if old is low else (high_rows, low_rows)


def _accounts_for(low: Version, high: Version, low_sum: int | None, high_sum: int | None) -> bool:
    """Whether the touched keys' rows, of fingerprint sums ``low_sum`` and ``high_sum``, explain ``low`` -> ``high``.

    A fingerprint is a sum over live records, so the records the rows leave out cancel
    from ``high``'s minus ``low``'s exactly when they are the same in both. A delta
    row edited after its commit (a ``replaced`` relabelled ``moved``) hides its key
    from the touched ones; the sums then differ (but for a 2**-128 chance), and the
    caller compares whole manifests instead. Trusts the commit records' fingerprints,
    which ``verify()`` checks against the manifest.
    """
    if high_sum is None or low_sum is None:
        return False
    expected = int(high.fingerprint, 16) - int(low.fingerprint, 16)
    return (expected - (high_sum - low_sum)) % hashing.FINGERPRINT_MODULUS == 0


def _fingerprint(rows: pa.Table) -> int | None:
    """The fingerprint sum of ``rows`` (:data:`DIFF_COLUMNS`), or None if a row lacks its key or content hash."""
    keys, contents = rows.column("key"), rows.column("content_hash")
    if keys.null_count or contents.null_count:
        return None
    return hashing.fingerprint_of(keys, contents)


def _deltas_between(
    storage: Storage, low: Version, high: Version, sizes: dict[str, int], names: set[str]
) -> tuple[list[str], bool] | None:
    """The deltas of the versions after ``low`` up to ``high`` (newest first), and whether any announces a change.

    None where those deltas cannot stand in for the newer version's chain: see :func:`touched_rows`.
    """
    paths: list[str] = []
    announced = False  # whether a commit record counts an added, replaced or removed record
    checkpoint_bytes: int | None = None  # the newest checkpoint after ``low``
    instead_bytes = 0  # bytes of the deltas at or below that checkpoint
    version = high
    while version.number > low.number:
        parent = low if version.number - 1 == low.number else log.read_record(storage, version.number - 1)
        if isinstance(parent, ExpiredVersion):
            return None
        announced = announced or bool(version.added or version.replaced or version.removed)
        checkpoint = log.checkpoint_of(version, names)
        if checkpoint_bytes is None and checkpoint in sizes:
            checkpoint_bytes = sizes[checkpoint]
        if version.manifest is not None:
            if version.manifest not in sizes:
                return None
            paths.append(version.manifest)
            instead_bytes += sizes[version.manifest] if checkpoint_bytes is not None else 0
        elif version.operation != "add_fields" or version.fingerprint != parent.fingerprint:
            return None  # add_fields writes no delta: it keeps its parent's records exactly
        version = parent
    if checkpoint_bytes is not None and instead_bytes > _DELTA_BYTES_RATIO * checkpoint_bytes:
        return None
    return paths, announced


def _with_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """The rows of ``table`` whose key is in ``keys``."""
    return table.filter(pc.is_in(table.column("key"), value_set=keys))


def _compose(tables: list[pa.Table], has_checkpoint: bool, key_type: str) -> pa.Table:
    """The manifest composed of ``tables`` (deltas newest first, then the checkpoint if ``has_checkpoint``).

    Composed as :func:`litstore.query.compose` composes a whole one, but only the few
    rows of the touched keys.
    """
    deltas = tables[:-1] if has_checkpoint else tables
    newest = _newest(deltas, key_type)
    rows = _live(newest, key_type)
    if not has_checkpoint:
        return rows
    base = tables[-1]
    if newest.num_rows:
        base = base.filter(pc.invert(pc.is_in(base.column("key"), value_set=newest.column("key").combine_chunks())))
    return pa.concat_tables([_plain(base, key_type), rows])


def _read(
    storage: Storage, config: StoreConfig, path: str, columns: Sequence[str], skip: ChangeKind | None = None
) -> pa.Table:
    return manifest_format.columns_from_parquet(storage.read(path), path, config.key_type, columns, skip)


def _without(delta: pa.Table, kind: ChangeKind) -> pa.Table:
    """The rows of ``delta`` whose change is not ``kind``."""
    change = delta.column("change")
    if not pa.types.is_dictionary(change.type):
        return delta.filter(pc.not_equal(change, str(kind)))
    # Comparing the dictionary indices: several times cheaper than comparing every row's string.
    masks = []
    for chunk in change.chunks:
        codes = [code for code, value in enumerate(chunk.dictionary.to_pylist()) if value == str(kind)]
        masks.append(pc.invert(pc.is_in(chunk.indices, value_set=pa.array(codes, chunk.indices.type))))
    return delta.filter(pa.chunked_array(masks, pa.bool_()))


def _newest(deltas: Sequence[pa.Table], key_type: str) -> pa.Table:
    """For each key, the rows of the first of ``deltas`` (newest first) that mentions it, deletions included."""
    kept: list[pa.Table] = []
    mentioned: pa.Array | None = None
    for delta in deltas:
        if mentioned is not None and len(mentioned):
            delta = delta.filter(pc.invert(pc.is_in(delta.column("key"), value_set=mentioned)))
        kept.append(delta)
        keys = delta.column("key").combine_chunks()
        mentioned = keys if mentioned is None else pa.concat_arrays([mentioned, keys])
    if not kept:
        schema = manifest_format.delta_schema(key_type)
        return pa.schema([schema.field(name) for name in _DELTA_COLUMNS]).empty_table()
    return pa.concat_tables(kept)


def _live(rows: pa.Table, key_type: str) -> pa.Table:
    """Those of ``rows`` that are not deletions, as plain :data:`DIFF_COLUMNS`."""
    if not rows.num_rows:
        return _empty(key_type)
    return _plain(_without(rows, ChangeKind.DELETED), key_type)


def _plain(rows: pa.Table, key_type: str) -> pa.Table:
    """The :data:`DIFF_COLUMNS` of ``rows``, dictionary-encoded ones decoded."""
    return rows.select(DIFF_COLUMNS).cast(_empty(key_type).schema)


def _empty(key_type: str) -> pa.Table:
    schema = manifest_format.schema(key_type)
    return pa.schema([schema.field(name) for name in DIFF_COLUMNS]).empty_table()
