"""Planning a commit: what a new version adds, replaces, deletes, moves, marks dead and drops.

Format 4 (deletion vectors): a replaced or deleted record's row is marked dead in its
chunk (:attr:`Plan.deletions`); the chunk stays, its other rows untouched, so the cost
of a change follows the change. The keys are found in the key runs, not the manifest.

Formats 1-3 (copy-on-write at chunk level): a chunk that loses any row leaves the new
version, and its remaining live rows are *moved* (their stored bytes copied
unchanged) into a new fragment, so a version's chunks never contain holes.

In every format a staged chunk holding a record the plan skips (an upsert whose record
turns out unchanged) is copied without it, and a compaction moves the live rows of the
chunks it rewrites. Older versions keep reading their own chunks untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore import query
from litstore.errors import ConflictError, DuplicateKeyError, KeyNotFoundError, SplitError, describe
from litstore.format import hashing
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind, columns, held_schema
from litstore.format.models import declared_fields
from litstore.read.groups import by_chunk
from litstore.txn.records import Batch
from litstore.txn.stage import StagedFragment

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

Mode = Literal["append", "upsert"]


@dataclass(frozen=True)
class Removal:
    """Records leaving the live set: their keys, content hashes and splits."""

    keys: list[Any] = field(default_factory=list)
    content_hashes: list[bytes] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, rows: pa.Table) -> Removal:
        return cls(
            rows.column("key").to_pylist(), rows.column("content_hash").to_pylist(), rows.column("split").to_pylist()
        )

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Plan:
    """Everything a new version changes relative to its parent.

    Attributes:
        rows: the delta rows of every record the version writes (manifest columns
            plus ``change``: added, replaced or moved), located where they are now;
            ``chunk`` dictionary-encoded (:func:`~litstore.format.manifest.held_schema`).
        relocate: for each of ``rows``, whether its chunk is dropped, so its bytes
            must be copied into a new fragment before committing.
        replaced, deleted: the parent's records that leave.
        dropped_chunks: chunks of the parent the version no longer lists.
        staged_chunks: the staged chunks the version lists, per split.
        chunk_bytes: target size of the chunks moved rows are written to (default:
            the store's ``chunk_bytes``).
        entering_fingerprint: the fingerprint sum of the added and replaced rows.
        deletions: rows of the parent's chunks the version marks dead (format 4), by chunk:
            sorted ``uint32`` row numbers, added to the chunk's dead rows where it publishes.
        unchanged: keys this version leaves as the parent had them while the caller
            asked for that state (staged records the plan skips, those the caller left
            out for that reason, keys to delete that the parent lacks): the version
            does not write them, but a writer who changed them first is a conflict.
    """

    rows: pa.Table
    relocate: np.ndarray
    replaced: Removal
    deleted: Removal
    dropped_chunks: frozenset[str]
    staged_chunks: dict[str, list[Any]]
    chunk_bytes: int | None = None
    entering_fingerprint: int = 0
    unchanged: frozenset[Any] = frozenset()
    deletions: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def touched_chunks(self) -> frozenset[str]:
        """The parent's chunks this version drops or marks rows of: a rival that dropped one means planning again."""
        return self.dropped_chunks | frozenset(self.deletions)

    @property
    def empty(self) -> bool:
        return not self.rows.num_rows and not len(self.deleted)

    def count(self, kind: ChangeKind) -> int:
        """How many of :attr:`rows` are of change ``kind``."""
        return int(pc.sum(pc.equal(self.rows.column("change"), str(kind))).as_py() or 0)

    def touched_keys(self) -> set[Any]:
        """Keys this version adds, replaces, deletes or found unchanged (not those it only moves)."""
        entering = pc.not_equal(self.rows.column("change"), str(ChangeKind.MOVED))
        return set(self.rows.filter(entering).column("key").to_pylist()) | set(self.deleted.keys) | self.unchanged


def plan(
    parent: VersionReader,
    fragments: Sequence[StagedFragment],
    mode: Mode,
    deletes: Sequence[Any] = (),
    missing_ok: bool = False,
    rewrite: frozenset[str] = frozenset(),
    chunk_bytes: int | None = None,
    unchanged: frozenset[Any] = frozenset(),
    keys_checked: bool = False,
) -> Plan:
    """Plan publishing ``fragments`` and deleting ``deletes`` on top of ``parent``.

    ``append`` refuses keys the parent has; ``upsert`` replaces them, skips records
    whose content is unchanged, and refuses to move a key to another split.
    ``unchanged``: keys the caller left out of ``fragments`` because ``parent`` held
    their content; like skipped records, they join the plan's touched keys.
    ``rewrite`` names chunks of the parent to drop and move whole (compaction), into
    chunks of ``chunk_bytes``. ``keys_checked``: an append's keys are known to be absent
    from ``parent`` (checked against it before staging).

    Raises:
        DuplicateKeyError: a key is staged twice, staged and deleted, or (append) already live.
        SplitError: (upsert) a replacement would move a key to another split.
        KeyNotFoundError: a key to delete is not live and ``missing_ok`` is false.
        ConflictError: a fragment was staged with other declared fields than ``parent`` has.
    """
    key_type = parent.config.key_type
    staged = _staged_rows(fragments, key_type, declared_fields(parent.config, parent.version))
    staged_keys = staged.column("key")
    twice = query.duplicate_keys(staged, hashes_are_true=True)
    if twice:
        raise DuplicateKeyError(f"{len(twice)} keys are staged more than once: {describe(twice)}")
    skipped = np.zeros(staged.num_rows, dtype=bool)
    replacing = np.zeros(staged.num_rows, dtype=bool)
    leaving: list[pa.Table] = []
    replaced = Removal()
    if mode == "append":
        existing = [] if keys_checked else parent.existing_keys(staged_keys, staged.column("key_hash").to_numpy())
        if existing:
            raise DuplicateKeyError(
                f"{len(existing)} keys are already in the store (append never replaces; use upsert): "
                f"{describe(existing)}"
            )
    elif staged.num_rows:
        found = parent.rows_for_keys(staged_keys.combine_chunks(), staged.column("key_hash").to_numpy())
        positions = found.column("position").to_numpy()
        same = np.asarray(
            pc.equal(found.column("content_hash"), staged.column("content_hash").take(positions)), dtype=bool
        )
        skipped[positions[same]] = True
        changed = found.filter(pa.array(~same))
        changed_positions = changed.column("position").to_numpy()
        new_splits = staged.column("split").take(changed_positions).to_pylist()
        moving = [
            (key, old, new)
            for key, old, new in zip(changed.column("key").to_pylist(), changed.column("split").to_pylist(), new_splits)
            if old != new
        ]
        if moving:
            shown = ", ".join(f"{key!r} ({old} -> {new})" for key, old, new in moving[:5])
            raise SplitError(
                f"{len(moving)} records would move to another split, which would leak data between splits: {shown}"
            )
        replacing[changed_positions] = True
        replaced = Removal.of(changed)
        leaving.append(changed)
    deleted = Removal()
    if deletes:
        unique = list(dict.fromkeys(deletes))
        valid = [key for key in unique if hashing.is_key(key, key_type)]
        found = parent.rows_for_keys(pa.array(valid, staged.schema.field("key").type))
        present = set(found.column("key").to_pylist())
        missing = [key for key in unique if not hashing.is_key(key, key_type) or key not in present]
        if missing and not missing_ok:
            raise KeyNotFoundError(
                f"{len(missing)} of {len(unique)} keys to delete are not in the store: {describe(missing)}"
            )
        both = present & set(staged_keys.to_pylist())
        if both:
            raise DuplicateKeyError(
                f"{len(both)} keys are both written and deleted: {describe(sorted(both, key=repr))}"
            )
        deleted = Removal.of(found)
        leaving.append(found)
        # Deleting a key the parent lacks (missing_ok) says it must be absent: a rival adding it is a conflict.
        unchanged = unchanged | frozenset(key for key in missing if hashing.is_key(key, key_type))
    deletions: dict[str, np.ndarray] = {}
    if parent.config.writes_deletion_vectors:
        deletions = _dead_rows(leaving, rewrite)
        dropped = rewrite
    else:
        dropped = frozenset(name for table in leaving for name in table.column("chunk").to_pylist()) | rewrite
    staged_dropped = set(staged.filter(pa.array(skipped)).column("chunk").to_pylist())
    entering = staged.filter(pa.array(~skipped)) if skipped.any() else staged  # filtering copies every column
    kept = replacing[~skipped] if skipped.any() else replacing
    entering_kinds = pc.if_else(pa.array(kept), str(ChangeKind.REPLACED), str(ChangeKind.ADDED))
    moved = _survivors(parent, dropped, set(replaced.keys) | set(deleted.keys))
    rows = pa.concat_tables(
        [
            entering.append_column("change", entering_kinds.cast(pa.string())),
            moved.append_column("change", pa.array([str(ChangeKind.MOVED)] * moved.num_rows, pa.string())),
        ]
    )
    chunk_names, chunk_codes = manifest_format.chunk_codes(rows.column("chunk"))
    relocate = np.isin(np.array(chunk_names, dtype=object), list(dropped | staged_dropped))[chunk_codes]
    staged_chunks: dict[str, list[Any]] = {}
    for fragment in fragments:
        for split, chunks in fragment.chunks.items():
            staged_chunks.setdefault(split, []).extend(
                chunk for chunk in chunks if chunk.filename not in staged_dropped
            )
    skipped_rows = staged.filter(pa.array(skipped))
    staged_sum = sum((int(fragment.fingerprint, 16) for fragment in fragments), 0)
    entering_fingerprint = staged_sum - hashing.fingerprint_sum(
        skipped_rows.column("key").to_pylist(), skipped_rows.column("content_hash").to_pylist()
    )
    skipped_keys = frozenset(skipped_rows.column("key").to_pylist())
    return Plan(
        rows,
        relocate.astype(bool),
        replaced,
        deleted,
        dropped,
        staged_chunks,
        chunk_bytes,
        entering_fingerprint,
        unchanged | skipped_keys,
        deletions,
    )


def _dead_rows(leaving: list[pa.Table], rewrite: frozenset[str]) -> dict[str, np.ndarray]:
    """The rows (``chunk``, ``row``) of ``leaving`` by chunk, sorted, less the chunks rewritten whole."""
    if not leaving:
        return {}
    plain = pa.schema([("chunk", pa.string()), ("row", pa.uint32())])
    rows = pa.concat_tables([table.select(["chunk", "row"]).cast(plain) for table in leaving])
    if not rows.num_rows:
        return {}
    names, codes = manifest_format.chunk_codes(rows.column("chunk"))
    numbers = rows.column("row").to_numpy().astype(np.uint32)
    dead: dict[str, np.ndarray] = {}
    for code, _, chunk_rows in by_chunk(codes, numbers):
        if names[code] not in rewrite:
            dead[names[code]] = chunk_rows
    return dead


def refuse_existing(parent: VersionReader, batch: Batch, offset: int = 0) -> None:
    """Raise :class:`DuplicateKeyError` naming the batch's keys that ``parent`` already holds.

    ``offset`` is the input position of the batch's first record (for runs of a stream).
    """
    existing = parent.existing_keys(batch.key_column, batch.key_hashes)
    if existing:
        positions = {key: offset + position for position, key in enumerate(batch.keys)}
        raise DuplicateKeyError(
            f"{len(existing)} keys are already in the store (append never replaces; use upsert): {describe(existing)}",
            [(positions[key], key) for key in existing],
        )


def without_unchanged(parent: VersionReader, batch: Batch) -> tuple[Batch, list[Any]]:
    """``batch`` less the records whose content ``parent`` already holds under the same key, and their keys.

    The keys left out must reach the commit (``commit(unchanged=...)``): if another
    writer changes them before it, the upsert is a conflict, not a silent no-op.

    Raises:
        SplitError: a changed record would move its key to another split.
    """
    if not len(batch):
        return batch, []
    found = parent.rows_for_keys(batch.key_column, batch.key_hashes)
    positions = found.column("position").to_numpy()
    keep = np.ones(len(batch), dtype=bool)
    moving: list[tuple[int, Any, str, str]] = []
    contents = batch.contents
    for position, content, split in zip(
        positions.tolist(), found.column("content_hash").to_pylist(), found.column("split").to_pylist()
    ):
        if content == contents[position].tobytes():
            keep[position] = False
        elif split != batch.splits[position]:
            moving.append((position, batch.keys[position], split, batch.splits[position]))
    if moving:
        shown = [f"{key!r} ({old} -> {new})" for _, key, old, new in moving]
        raise SplitError(
            f"{len(moving)} records would move to another split, which would leak data between splits: "
            + ", ".join(shown[:5])
            + (f" and {len(shown) - 5} more" if len(shown) > 5 else ""),
            [(position, key) for position, key, _, _ in moving],
        )
    if keep.all():
        return batch, []
    return batch.select(keep), [batch.keys[i] for i in np.flatnonzero(~keep).tolist()]


def _staged_rows(fragments: Sequence[StagedFragment], key_type: str, fields: dict[str, str]) -> pa.Table:
    """The rows of ``fragments``, their key hashes derived again from their keys.

    A fragment may come from another process (a Ray task, an ingest worker) or have
    been changed in memory: the key index and the duplicate check trust key hashes,
    so none is taken from a fragment (about 0.1 s a million keys).
    """
    target = held_schema(key_type, fields)
    tables = []
    for fragment in fragments:
        rows = fragment.rows
        if not rows.num_rows:
            tables.append(target.empty_table())
            continue
        if rows.schema.names != target.names:
            staged = [name for name in rows.schema.names if name not in columns()]
            raise ConflictError(
                f"fragment {fragment.transaction} was staged with declared fields {staged}, but the store now "
                f"declares {list(fields)} (add_fields committed meanwhile): stage the records again"
            )
        rows = rows.cast(target)
        hashes = pa.array(hashing.key_hash_array(rows.column("key")), pa.uint64())
        tables.append(rows.set_column(rows.schema.get_field_index("key_hash"), "key_hash", hashes))
    return pa.concat_tables(tables) if tables else target.empty_table()


def _survivors(parent: VersionReader, dropped: frozenset[str], leaving: set[Any]) -> pa.Table:
    """The parent's live rows in ``dropped`` chunks that stay in the new version."""
    fields = declared_fields(parent.config, parent.version)
    if not dropped:
        return held_schema(parent.config.key_type, fields).empty_table()
    survivors = parent.rows_in_chunks(sorted(dropped), list(leaving))
    return survivors.select(columns(fields)).cast(held_schema(parent.config.key_type, fields))
