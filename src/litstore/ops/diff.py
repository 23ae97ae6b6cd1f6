"""What changed between two versions: keys from their manifests, and on request which fields.

The one module that answers it. :meth:`Diff.of` reads manifests only, never chunk data:
when the version log says which keys the commits between the two versions touched, and
the versions' fingerprints confirm that those keys are all that changed, only those
keys' rows of both versions (:func:`touched_rows`, the fast path: the deltas between
the versions, and the older version's rows of those keys from the deltas, in a format-3
or format-4 store with its key runs for what the deltas do not carry, else from its
manifest chain); otherwise both
whole manifests. Either way :meth:`Diff.between` joins the two sets of rows. The
results are the same, even where a delta row was relabelled after commit.
:meth:`Diff.with_fields` then decodes the changed records alone (the old record from
the old version, the new one from the new) to name the top-level fields whose values
differ.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.errors import IntegrityError, InvalidArgumentError, MissingFileError, UnsupportedValueError, describe
from litstore.format import codec, hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import ExpiredVersion, StoreConfig, Version
from litstore.read import log
from litstore.read.manifests import compose, without_change
from litstore.read.version import VersionReader
from litstore.storage import Storage

# Changed records decoded at once by with_fields: bounds memory on large diffs.
_FIELDS_BATCH = 1024
# Stands in for a field one side lacks: never the same as a stored value.
_ABSENT: Any = object()
#: What a diff needs of a manifest row; deltas add their ``change``.
DIFF_COLUMNS = ("key", "content_hash", "split")
_DELTA_COLUMNS = (*DIFF_COLUMNS, "change")
# What the fast diff reads of each delta of a store with key runs: a format-4 delta carries
# the content hash its replaced rows supersede (null in deltas written before it did).
_INDEXED_DELTA_COLUMNS = (*_DELTA_COLUMNS, manifest_format.OLD_CONTENT_HASH)
# The fast diff reads the deltas between the versions in place of the newer one's chain
# (its newest checkpoint, then deltas): worth it unless the deltas it reads instead of
# that checkpoint are this many times bigger (in bytes, or in rows where the commit
# records tell). It reads 4 of a delta's 8 columns and joins only the touched rows: a
# full-size delta costs it about a tenth of what composing and joining a whole manifest
# of that size costs (1M keys: 0.05 s of 1.2 s).
_DELTA_SIZE_RATIO = 4.0
# Rows of both sides up to which _join matches keys by lookup rather than by Arrow's join engine.
_LOOKUP_JOIN_ROWS = 1 << 16
# Manifest files read at once: Parquet decoding releases the GIL, and remote reads overlap.
_CONCURRENT_READS = 4


@dataclass(frozen=True)
class Diff:
    """Keys added, removed and changed (same key, new content hash) from ``old`` to ``new``.

    Attributes:
        old, new: the two version numbers.
        added, removed, changed: Arrow tables with columns ``key`` and ``split``; with
            ``store.diff(a, b, fields=True)``, ``changed`` also has a ``fields`` column
            (list of str): the top-level fields whose values differ.
        counts, split_counts, field_counts: how many of each, overall, per split, per field.
        summary(): a readable account.

    A record that only moved to another chunk, with the same content, is not changed.
    """

    old: int
    new: int
    added: pa.Table
    removed: pa.Table
    changed: pa.Table

    @classmethod
    def of(cls, old_view: VersionReader, new_view: VersionReader) -> Diff:
        """The diff of two versions, from the rows of the keys touched between them when the log allows."""
        old, new = old_view.version, new_view.version
        rows = touched_rows(old_view.storage, old_view.config, old, new, views=(old_view, new_view))
        if rows is None:
            return cls.between(old.number, new.number, _summed(old_view), _summed(new_view))
        return cls.between(old.number, new.number, *rows)

    @classmethod
    def between(cls, old: int, new: int, old_manifest: pa.Table, new_manifest: pa.Table) -> Diff:
        """The diff of two manifests, or of any rows of them that hold every key whose row differs.

        Only the ``key``, ``content_hash`` and ``split`` columns are read; no record is.
        """
        added, removed, changed = _join(old_manifest, new_manifest)
        return cls(old, new, added, removed, changed)

    def with_fields(self, old_view: VersionReader, new_view: VersionReader) -> Diff:
        """This diff with a ``fields`` column on ``changed``, read from the two versions' records."""
        keys = self.changed.column("key").to_pylist()
        fields = changed_fields(old_view, new_view, keys)
        changed = self.changed.append_column("fields", pa.array(fields, pa.list_(pa.string())))
        return dataclasses.replace(self, changed=changed)

    @property
    def counts(self) -> dict[str, int]:
        """``{"added": n, "removed": n, "changed": n}``."""
        return {"added": self.added.num_rows, "removed": self.removed.num_rows, "changed": self.changed.num_rows}

    @property
    def split_counts(self) -> dict[str, dict[str, int]]:
        """Per split: ``{"train": {"added": n, "removed": n, "changed": n}, ...}``."""
        result: dict[str, dict[str, int]] = {}
        for kind, table in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            for split in table.column("split").to_pylist():
                entry = result.setdefault(split, {"added": 0, "removed": 0, "changed": 0})
                entry[kind] += 1
        return dict(sorted(result.items()))

    @property
    def has_fields(self) -> bool:
        """Whether this diff names the changed fields (it was made with ``fields=True``)."""
        return "fields" in self.changed.column_names

    @property
    def field_counts(self) -> dict[str, int]:
        """Per field, how many changed records differ in it; most changed first.

        Raises:
            InvalidArgumentError: the diff was made without ``fields=True``.
        """
        if not self.has_fields:
            raise InvalidArgumentError(
                f"the diff of versions {self.old} -> {self.new} was made without fields=True, so it does not "
                "know which fields changed; use store.diff(old, new, fields=True)"
            )
        counts = Counter(name for names in self.changed.column("fields").to_pylist() for name in names)
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def __bool__(self) -> bool:
        """True when the versions differ."""
        return any(self.counts.values())

    def summary(self, examples: int = 3) -> str:
        """A readable account: totals (and changed fields), per split, and a few example keys of each kind."""
        counts = self.counts
        changed = f"~{counts['changed']} changed"
        if self.has_fields and self.field_counts:
            changed += " (" + ", ".join(f"{name}: {count}" for name, count in self.field_counts.items()) + ")"
        lines = [f"version {self.old} -> {self.new}: +{counts['added']} added, -{counts['removed']} removed, {changed}"]
        for split, entry in self.split_counts.items():
            lines.append(f"  {split}: +{entry['added']} -{entry['removed']} ~{entry['changed']}")
        for kind, table in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            if table.num_rows:
                shown = describe(table.column("key").slice(0, examples).to_pylist(), examples)
                if table.num_rows > examples:
                    shown += f" and {table.num_rows - examples} more"
                lines.append(f"  {kind}: {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        counts = self.counts
        return (
            f"<Diff {self.old} -> {self.new}: +{counts['added']} added, -{counts['removed']} removed, "
            f"~{counts['changed']} changed>"
        )


def changed_fields(old_view: VersionReader, new_view: VersionReader, keys: Sequence[Any]) -> list[list[str]]:
    """For each of ``keys`` (in both versions), the sorted top-level fields whose values differ.

    A field present on one side only differs. Records are read in batches, so memory
    holds one batch of each version at a time.
    """
    result: list[list[str]] = []
    for start in range(0, len(keys), _FIELDS_BATCH):
        batch = keys[start : start + _FIELDS_BATCH]
        for before, after in zip(old_view.get_many(batch), new_view.get_many(batch), strict=True):
            names = sorted(set(before) | set(after), key=str)
            result.append(
                [str(name) for name in names if not _same(before.get(name, _ABSENT), after.get(name, _ABSENT))]
            )
    return result


def _same(old: Any, new: Any) -> bool:
    """Whether two decoded values are the same content: same type and the same canonical bytes.

    Canonical bytes compare numpy arrays and tensors by dtype, shape and bytes, and
    str and bytes exactly; ``1`` and ``1.0`` differ, two NaNs do not.
    """
    if type(old) is not type(new) or old is _ABSENT or new is _ABSENT:
        return False
    try:
        return codec.encode(old) == codec.encode(new)
    except UnsupportedValueError:
        # A decoded media object (a PIL image, a video reader) has no canonical bytes.
        try:
            return bool(old == new)
        except (TypeError, ValueError):
            return False


def touched_rows(
    storage: Storage,
    config: StoreConfig,
    old: Version,
    new: Version,
    *,
    views: Sequence[VersionReader] = (),
) -> tuple[pa.Table, pa.Table] | None:
    """The rows (:data:`DIFF_COLUMNS`) of ``old`` and of ``new`` for every key the commits between them touched.

    A key that no commit between the two versions added, replaced or deleted has the
    same content hash and split in both: those commits' deltas mention it not at all
    or as ``moved``, and a moved row carries its parent's content hash and split. So
    the diff of these rows is the diff of the two versions, found by reading the
    deltas between them and looking the touched keys up in the older version, without
    composing either version whole (the newer one's rows are composed, by
    :func:`litstore.read.manifests.compose`, of the deltas alone). Where the older
    version has a key index on disk (format 3 and 4), a key that the oldest delta
    touching it added or deleted takes its older row from that delta, and so does one
    it replaced where the delta carries the superseded content hash (format 4); only a
    replaced key whose delta does not (format 3, and format-4 deltas written before it
    did) is looked up in the older version's key runs (:func:`_first_touches`;
    :meth:`VersionReader.indexed_rows`: a page a key, and its split indexes). So a diff
    of near format-4 versions reads their commit records and the deltas between them,
    and nothing else, whatever the store's size. Otherwise the touched keys are
    searched for in its chain (checkpoint and deltas: the size of the store).
    ``views`` are readers of either version whose caches (open runs, chunk lists) the
    lookups may use. Either order works.

    Returns None when the log cannot say which keys were touched (gc expired a
    version between them, a delta is missing, a version wrote only a checkpoint and
    is not an ``add_fields`` of its parent's records), when the deltas between
    them are much bigger than the newer version's checkpoint they would stand in
    for, or when the rows found do not account for the difference of the two
    versions' fingerprints (:func:`_accounts_for`: a delta edited after its commit,
    a superseded content hash or a key run that lies) or for their per-split counts
    (:func:`_counts_agree`: a change kind that lies): the caller then compares whole
    manifests.

    Raises:
        IntegrityError: a manifest file, key run or commit record is damaged.
        VersionNotFoundError: gc expired a version of the older one's chain.
    """
    low, high = sorted((old, new), key=lambda version: version.number)
    if config.writes_key_runs and (low.key_runs or not low.total):
        reader = next((view for view in views if view.version.number == low.number), None)
        rows = _rows_by_index(storage, config, low, high, reader or VersionReader(storage, config, low))
    else:
        rows = _rows_by_chain(storage, config, low, high)
    if rows is None:
        return None
    low_rows, high_rows = rows
    if not _accounts_for(low, high, _fingerprint(low_rows), _fingerprint(high_rows)):
        return None
    if not _counts_agree(low, high, low_rows, high_rows):
        return None
    return (low_rows, high_rows) if old is low else (high_rows, low_rows)


def _rows_by_index(
    storage: Storage, config: StoreConfig, low: Version, high: Version, reader: VersionReader
) -> tuple[pa.Table, pa.Table] | None:
    """:func:`touched_rows` of ``low`` and ``high``, ``low``'s found in its key runs through ``reader``."""
    between = _deltas_between(storage, low, high, _recorded_rows)
    if between is None:
        return None
    paths, _ = between

    def read(path: str) -> pa.Table:
        return without_change(_read(storage, config, path, _INDEXED_DELTA_COLUMNS, ChangeKind.MOVED), ChangeKind.MOVED)

    try:
        if len(paths) == 1:  # (starting a thread to read one small delta took a few ms of a ~10 ms diff)
            deltas = [read(paths[0])]
        else:
            with ThreadPoolExecutor(max_workers=_CONCURRENT_READS) as pool:
                deltas = list(pool.map(read, paths))
    except MissingFileError:
        return None  # a delta no version's manifest needs any more (its version has a checkpoint)
    high_rows = compose(config.key_type, deltas, None, columns=DIFF_COLUMNS)
    key_type = manifest_format.schema(config.key_type).field("key").type
    looked_up, carried = _first_touches(deltas, key_type)
    low_rows = reader.indexed_rows(looked_up) if len(looked_up) else _empty_rows(key_type)
    if carried.num_rows:
        low_rows = pa.concat_tables([low_rows, carried.cast(low_rows.schema)])
    return low_rows, high_rows


def _first_touches(deltas: Sequence[pa.Table], key_type: pa.DataType) -> tuple[pa.Array, pa.Table]:
    """What the older version held of each key the ``deltas`` (newest first) touch, from the oldest delta that
    touches it: the keys to look up in its key runs, and the rows (:data:`DIFF_COLUMNS`) that delta carries.

    That delta's row was planned on the older version's records: ``added`` says the
    older version lacked the key, ``deleted`` carries its content hash and split, and a
    ``replaced`` row carries the content hash it superseded
    (:data:`~litstore.format.manifest.OLD_CONTENT_HASH`) in its own split (a key never
    changes split: the plan refuses it). Only a replaced row without one (format 3,
    older format-4 deltas) must be looked up: a diff of format-4 deltas reads no key run
    (moved rows are gone from ``deltas``; a file with another kind does not open). The
    deltas are not trusted more than the key runs: a row that lies about the older
    version's content changes the fingerprint sums (:func:`_accounts_for`), one that
    lies about its kind the per-split counts (:func:`_counts_agree`), and the diff goes
    to the whole manifests.
    """
    old_hash = manifest_format.OLD_CONTENT_HASH
    seen = pa.nulls(0, key_type)
    lookups: list[pa.Array] = []
    carried: list[pa.Table] = []
    for delta in reversed(deltas):
        keys = _one_array(delta.column("key"), key_type)
        first = delta.filter(pc.invert(pc.is_in(keys, value_set=seen))) if len(seen) else delta
        if not first.num_rows:
            continue
        known = without_change(first, ChangeKind.ADDED)  # (the deltas hold no moved row, nor other kinds)
        deleted = without_change(known, ChangeKind.REPLACED)
        replaced = without_change(known, ChangeKind.DELETED)
        has_old = pc.is_valid(replaced.column(old_hash))
        lookups.append(_one_array(replaced.filter(pc.invert(has_old)).column("key"), key_type))
        superseded = replaced.filter(has_old)
        carried.append(deleted.select(DIFF_COLUMNS))
        carried.append(
            pa.table(
                {
                    "key": superseded.column("key"),
                    "content_hash": superseded.column(old_hash),
                    "split": superseded.column("split"),
                }
            )
        )
        seen = pa.concat_arrays([seen, keys])
    looked_up = pc.unique(pa.concat_arrays(lookups)) if lookups else pa.nulls(0, key_type)
    return looked_up, pa.concat_tables(carried) if carried else _empty_rows(key_type)


def _one_array(column: pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    """``column`` as one array of ``type_`` (made without pa.array where it has no chunks: see :func:`_flat`)."""
    return column.combine_chunks().cast(type_) if column.num_chunks else pa.nulls(0, type_)


def _empty_rows(key_type: pa.DataType) -> pa.Table:
    """No rows, typed as :meth:`VersionReader.indexed_rows` gives them (made without pa.array: see :func:`_flat`)."""
    return pa.table(
        {"key": pa.nulls(0, key_type), "content_hash": pa.nulls(0, pa.binary(16)), "split": pa.nulls(0, pa.string())}
    )


def _rows_by_chain(
    storage: Storage, config: StoreConfig, low: Version, high: Version
) -> tuple[pa.Table, pa.Table] | None:
    """:func:`touched_rows` of ``low`` and ``high``, ``low``'s searched for in its manifest chain."""
    sizes = {info.path: info.size for info in storage.walk(layout.MANIFESTS)}
    names = {path.removeprefix(f"{layout.MANIFESTS}/") for path in sizes}

    def file_sizes(version: Version, parent: Version) -> tuple[int | None, int | None]:
        checkpoint = log.checkpoint_of(version, names)
        return sizes.get(version.manifest or ""), sizes.get(checkpoint) if checkpoint is not None else None

    between = _deltas_between(storage, low, high, file_sizes)
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

    key_type = manifest_format.schema(config.key_type).field("key").type
    with ThreadPoolExecutor(max_workers=_CONCURRENT_READS) as pool:
        try:
            pending = [pool.submit(_read, storage, config, path, _DELTA_COLUMNS, ChangeKind.MOVED) for path in paths]
            low_files: list[Future[pa.Table]] = []
            if announced:
                low_files = [pool.submit(search, path, columns) for path, columns in low_chain]
            deltas = [without_change(delta.result(), ChangeKind.MOVED) for delta in pending]
            touched = pa.chunked_array([part for delta in deltas for part in delta.column("key").chunks], key_type)
            keys.set_result(touched.combine_chunks() if len(touched) else None)
        finally:
            if not keys.done():
                keys.set_result(None)  # a read failed: let the searches end
        if len(touched):
            low_files = low_files or [pool.submit(search, path, columns) for path, columns in low_chain]
        # While the older version's chain is read:
        high_rows = compose(config.key_type, deltas, None, columns=DIFF_COLUMNS)
        if len(touched):
            files = [file.result() for file in low_files]
            base = files.pop() if checkpoint is not None else None
            low_rows = compose(config.key_type, files, base, columns=DIFF_COLUMNS)
        else:
            low_rows = high_rows  # both empty
    return low_rows, high_rows


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


def _counts_agree(low: Version, high: Version, low_rows: pa.Table, high_rows: pa.Table) -> bool:
    """Whether the touched keys' rows explain how each split's count changed from ``low`` to ``high``.

    The fingerprint does not cover splits: a ``deleted`` row whose split was changed
    after its commit would report the key removed from another split. Records the rows
    leave out are in the same split in both versions and cancel, as in the fingerprint.
    """

    def per_split(rows: pa.Table) -> dict[str, int]:
        counted = pc.value_counts(rows.column("split")).to_pylist() if rows.num_rows else []
        return {str(entry["values"]): int(entry["counts"]) for entry in counted}

    low_counts, high_counts = per_split(low_rows), per_split(high_rows)
    splits = set(low.counts) | set(high.counts) | set(low_counts) | set(high_counts)
    return all(
        high.counts.get(split, 0) - low.counts.get(split, 0) == high_counts.get(split, 0) - low_counts.get(split, 0)
        for split in splits
    )


def _summed(view: VersionReader) -> pa.Table:
    """``view``'s manifest, checked to add up to its version's fingerprint (a diff compares its content hashes).

    Raises:
        IntegrityError: it does not: a manifest file of the version was edited after its commit.
    """
    manifest = view.manifest()
    summed = _fingerprint(manifest)
    if summed is None or hashing.fingerprint_hex(summed) != view.version.fingerprint:
        raise IntegrityError(
            f"the manifest of version {view.version.number} does not add up to its fingerprint "
            f"{view.version.fingerprint}: a manifest file is damaged; store.verify() lists what is wrong"
        )
    return manifest


def _fingerprint(rows: pa.Table) -> int | None:
    """The fingerprint sum of ``rows`` (:data:`DIFF_COLUMNS`), or None if a row lacks its key or content hash."""
    keys, contents = rows.column("key"), rows.column("content_hash")
    if keys.null_count or contents.null_count:
        return None
    return hashing.fingerprint_of(keys, contents)


#: The sizes of ``version``'s delta (``None``: it is missing) and of its checkpoint (``None``: it has none),
#: given its parent; in any one unit: bytes of files, or rows.
Sizes: TypeAlias = Callable[[Version, Version], tuple[int | None, int | None]]


def _recorded_rows(version: Version, parent: Version) -> tuple[int | None, int | None]:
    """:data:`Sizes` in rows, from the commit records alone: no listing of the manifests.

    A commit adds its delta's rows to its parent's ``pending_rows``; one that writes a
    checkpoint resets them, so its delta holds at most a row per key of its parent and
    per key it added. Whether a delta is there is found when it is read.
    """
    if version.checkpoint is None:
        return max(version.pending_rows - parent.pending_rows, 0), None
    return parent.total + version.added, version.total


def _deltas_between(storage: Storage, low: Version, high: Version, sizes: Sizes) -> tuple[list[str], bool] | None:
    """The deltas of the versions after ``low`` up to ``high`` (newest first), and whether any announces a change.

    None where those deltas cannot stand in for the newer version's chain: see :func:`touched_rows`.
    """
    paths: list[str] = []
    announced = False  # whether a commit record counts an added, replaced or removed record
    checkpoint_size: int | None = None  # the newest checkpoint after ``low``
    instead_size = 0  # the deltas at or below that checkpoint
    version = high
    while version.number > low.number:
        parent = low if version.number - 1 == low.number else log.read_record(storage, version.number - 1)
        if isinstance(parent, ExpiredVersion):
            return None
        announced = announced or bool(version.added or version.replaced or version.removed)
        delta_size, own_checkpoint = sizes(version, parent)
        if checkpoint_size is None:
            checkpoint_size = own_checkpoint
        if version.manifest is not None:
            if delta_size is None:
                return None
            paths.append(version.manifest)
            instead_size += delta_size if checkpoint_size is not None else 0
        elif version.operation != "add_fields" or version.fingerprint != parent.fingerprint:
            return None  # add_fields writes no delta: it keeps its parent's records exactly
        version = parent
    if checkpoint_size is not None and instead_size > _DELTA_SIZE_RATIO * checkpoint_size:
        return None
    return paths, announced


def _with_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """The rows of ``table`` whose key is in ``keys``."""
    return table.filter(pc.is_in(table.column("key"), value_set=keys))


def _read(
    storage: Storage, config: StoreConfig, path: str, columns: Sequence[str], skip: ChangeKind | None = None
) -> pa.Table:
    return manifest_format.columns_from_parquet(storage.read(path), path, config.key_type, columns, skip)


def _join(old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Keys added to, removed from, and changed (content) between two manifests.

    ``old`` and ``new`` need only the columns ``key``, ``content_hash`` and ``split``:
    whole manifests, or any of their rows that include every key whose row differs.
    Each result has columns ``key`` and ``split`` (the new split for added and changed
    keys, the old one for removed keys), sorted by key: what SQL's ``FULL OUTER JOIN
    ... USING (key)`` of the two gives (a key in several rows pairs each of them).

    Done by Arrow. On the few rows of a diff of touched keys, where each key has one
    row a side, each new row's key is looked up among the old rows (``index_in``): a
    DuckDB connection, or Arrow's join engine (whose import loads pandas: a third of a
    second a process), would cost far more than the diff. Whole manifests go through
    Arrow's join (:func:`_paired`): there, checking that keys are distinct costs more
    than the join saves.
    """
    if old.num_rows + new.num_rows > _LOOKUP_JOIN_ROWS:
        return _paired(old, new)
    old, new = _flat(old), _flat(new)
    old_keys, new_keys = old.column("key").chunk(0), new.column("key").chunk(0)
    if pc.count_distinct(old_keys).as_py() < len(old_keys) or pc.count_distinct(new_keys).as_py() < len(new_keys):
        return _paired(old, new)
    partner = pc.index_in(new_keys, value_set=old_keys)  # the old row of each new row's key, or null
    added = pc.is_null(partner)
    other = pc.not_equal(new.column("content_hash"), old.column("content_hash").take(partner))
    changed = pc.and_kleene(pc.invert(added), other)  # false where added (its partner is null)
    removed = pc.invert(pc.is_in(old_keys, value_set=new_keys))
    return _by_key(new, added), _by_key(old, removed), _by_key(new, changed)


def _flat(rows: pa.Table) -> pa.Table:
    """:data:`DIFF_COLUMNS` of ``rows``, each one array (made without pa.array where a column has no chunks)."""
    columns = {}
    for name in DIFF_COLUMNS:
        column = rows.column(name)
        columns[name] = column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)
    return pa.table(columns)


def _by_key(rows: pa.Table, where: pa.Array) -> pa.Table:
    """``key`` and ``split`` of the ``rows`` that ``where`` marks, sorted by key."""
    found = rows.filter(where)
    found = found.take(pc.sort_indices(found.column("key")))
    return pa.table({"key": found.column("key"), "split": found.column("split").cast(pa.string())})


def _paired(old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """:func:`_join` by Arrow's full outer join: a key in several rows of a side pairs each of them."""
    left = pa.table(
        {
            "key": old.column("key"),
            "old_hash": old.column("content_hash"),
            "old_split": old.column("split"),
            "in_old": pa.array(np.ones(old.num_rows, dtype=bool)),
        }
    )
    right = pa.table(
        {
            "key": new.column("key"),
            "new_hash": new.column("content_hash"),
            "new_split": new.column("split"),
            "in_new": pa.array(np.ones(new.num_rows, dtype=bool)),
        }
    )
    joined = left.join(right, "key", join_type="full outer", coalesce_keys=True)
    added, removed = pc.is_null(joined.column("in_old")), pc.is_null(joined.column("in_new"))
    differs = pc.or_kleene(
        pc.or_kleene(added, removed), pc.not_equal(joined.column("old_hash"), joined.column("new_hash"))
    )
    joined = joined.filter(differs)
    joined = joined.take(pc.sort_indices(joined.column("key")))
    added, removed = pc.is_null(joined.column("in_old")), pc.is_null(joined.column("in_new"))
    split = pc.coalesce(joined.column("new_split"), joined.column("old_split"))
    result = pa.table({"key": joined.column("key"), "split": split.cast(pa.string())})
    changed = pc.invert(pc.or_(added, removed))
    return result.filter(added), result.filter(removed), result.filter(changed)
