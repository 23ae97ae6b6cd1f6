"""Planning a change: which records a new version writes, replaces, moves and drops.

Deletions and replacements are copy-on-write at chunk level: a chunk that loses any
row leaves the new version, and its remaining live rows are *moved* (their stored
bytes copied unchanged) into the new fragment. A version's chunks therefore never
contain holes, so streaming it reads every byte it downloads, and older versions
keep reading their own chunks untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute

from litstore import manifest
from litstore.chunks import ChunkCache
from litstore.errors import KeyNotFoundError, SplitError, describe
from litstore.hashing import is_key
from litstore.records import Batch

NEW, REPLACED, MOVED = 0, 1, 2


@dataclass(frozen=True)
class Removal:
    """Records leaving the live set: their keys, content hashes and splits."""

    keys: list[Any] = field(default_factory=list)
    content_hashes: list[bytes] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Change:
    """Everything a new version writes and drops relative to its parent.

    ``batch`` holds the records to write (new, replaced and moved ones, told apart by
    ``kinds``); ``replaced`` and ``deleted`` hold the parent's records that leave;
    ``dropped_chunks`` are the parent's chunks the new version no longer lists.
    """

    batch: Batch
    kinds: np.ndarray
    replaced: Removal = field(default_factory=Removal)
    deleted: Removal = field(default_factory=Removal)
    dropped_chunks: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not len(self.batch) and not len(self.deleted)

    def touched_keys(self) -> set[Any]:
        """Keys this change adds, replaces or deletes (not those it only moves)."""
        written = {key for key, kind in zip(self.batch.keys, self.kinds.tolist()) if kind != MOVED}
        return written | set(self.deleted.keys)

    def count(self, kind: int) -> int:
        return int(np.count_nonzero(self.kinds == kind))


def plan_append(batch: Batch) -> Change:
    return Change(batch=batch, kinds=np.full(len(batch), NEW, dtype=np.int8))


def plan_upsert(batch: Batch, parent: pa.Table, cache: ChunkCache) -> Change:
    """Insert new keys, replace keys whose content changed, skip unchanged records.

    Raises:
        SplitError: a replacement would move a key to another split.
    """
    existing = manifest.rows_for_keys(parent, pa.array(batch.keys, parent.schema.field("key").type))
    positions = existing.column("position").to_numpy()
    old_contents = existing.column("content_hash").to_pylist()
    old_splits = existing.column("split").to_pylist()
    kinds = np.full(len(batch), NEW, dtype=np.int8)
    keep = np.ones(len(batch), dtype=bool)
    replaced = Removal()
    dirty: set[str] = set()
    moved_split: list[tuple[int, Any, str, str]] = []
    for position, content, split, chunk in zip(
        positions.tolist(), old_contents, old_splits, existing.column("chunk").to_pylist()
    ):
        if content == batch.content_hashes[position]:
            keep[position] = False
            continue
        if split != batch.splits[position]:
            moved_split.append((position, batch.keys[position], split, batch.splits[position]))
            continue
        kinds[position] = REPLACED
        replaced.keys.append(batch.keys[position])
        replaced.content_hashes.append(content)
        replaced.splits.append(split)
        dirty.add(chunk)
    if moved_split:
        shown = [f"{key!r} ({old} -> {new})" for _, key, old, new in moved_split]
        raise SplitError(
            f"{len(moved_split)} records would move to another split, which would leak data between splits: "
            + ", ".join(shown[:5])
            + (f" and {len(shown) - 5} more" if len(shown) > 5 else ""),
            [(position, key) for position, key, _, _ in moved_split],
        )
    written = _select(batch, keep)
    return _with_moved(written, kinds[keep], parent, cache, dirty, set(replaced.keys), replaced, Removal())


def plan_delete(keys: Sequence[Any], parent: pa.Table, cache: ChunkCache, missing_ok: bool) -> Change:
    """Remove ``keys``.

    Raises:
        KeyNotFoundError: some keys are not live and ``missing_ok`` is false.
    """
    unique = list(dict.fromkeys(keys))
    key_type = parent.schema.field("key").type
    kind = "str" if pa.types.is_string(key_type) else "int"
    valid = [key for key in unique if is_key(key, kind)]
    found = manifest.rows_for_keys(parent, pa.array(valid, key_type))
    present = set(found.column("key").to_pylist())
    missing = [key for key in unique if key not in present or not is_key(key, kind)]
    if missing and not missing_ok:
        raise KeyNotFoundError(
            f"{len(missing)} of {len(unique)} keys to delete are not in the store: {describe(missing)}"
        )
    deleted = Removal(
        keys=found.column("key").to_pylist(),
        content_hashes=found.column("content_hash").to_pylist(),
        splits=found.column("split").to_pylist(),
    )
    dirty = set(found.column("chunk").to_pylist())
    empty = Batch([], np.empty(0, np.uint64), [], [], [])
    return _with_moved(empty, np.empty(0, np.int8), parent, cache, dirty, present, Removal(), deleted)


def _select(batch: Batch, keep: np.ndarray) -> Batch:
    indices = np.flatnonzero(keep).tolist()
    return Batch(
        keys=[batch.keys[i] for i in indices],
        key_hashes=batch.key_hashes[keep],
        splits=[batch.splits[i] for i in indices],
        payloads=[batch.payloads[i] for i in indices],
        content_hashes=[batch.content_hashes[i] for i in indices],
    )


def _with_moved(
    batch: Batch,
    kinds: np.ndarray,
    parent: pa.Table,
    cache: ChunkCache,
    dirty: set[str],
    leaving: set[Any],
    replaced: Removal,
    deleted: Removal,
) -> Change:
    """Add the live rows of ``dirty`` chunks that are not ``leaving`` to the batch, as moved."""
    survivors = manifest.rows_in_chunks(parent, sorted(dirty))
    if leaving:
        staying = pa.compute.invert(pa.compute.is_in(survivors.column("key"), pa.array(list(leaving))))
        survivors = survivors.filter(staying)
    moved_keys: list[Any] = survivors.column("key").to_pylist()
    moved_hashes = survivors.column("key_hash").to_numpy()
    moved_splits: list[str] = survivors.column("split").to_pylist()
    moved_contents: list[bytes] = survivors.column("content_hash").to_pylist()
    moved_payloads: list[bytes] = []
    chunks = survivors.column("chunk").to_numpy(zero_copy_only=False)
    rows = survivors.column("row").to_numpy()
    bounds = np.flatnonzero(chunks[1:] != chunks[:-1]) + 1  # survivors come sorted by chunk, row
    for start, end in zip([0, *bounds.tolist()], [*bounds.tolist(), len(chunks)], strict=True):
        if end > start:
            moved_payloads.extend(bytes(payload) for payload in cache.payloads(str(chunks[start]), rows[start:end]))
    combined = Batch(
        keys=batch.keys + moved_keys,
        key_hashes=np.concatenate([batch.key_hashes, moved_hashes.astype(np.uint64)]),
        splits=batch.splits + moved_splits,
        payloads=batch.payloads + moved_payloads,
        content_hashes=batch.content_hashes + moved_contents,
    )
    all_kinds = np.concatenate([kinds, np.full(len(moved_keys), MOVED, dtype=np.int8)])
    return Change(combined, all_kinds, replaced, deleted, frozenset(dirty))
