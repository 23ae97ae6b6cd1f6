"""What a commit does, as values: each change plans itself against the version it goes on.

A change is a frozen value made before anything is committed, and
:func:`litstore.txn.commit` publishes any one of them as one new version::

    Write(fragments, mode="append" | "upsert", unchanged=...)   staged records in
    Delete(keys, missing_ok=...)                                 records out
    Compaction(chunks, chunk_bytes)                              chunks rewritten live, records as they were
    FieldAddition(fields)                                        more declared fields, records as they were
    Upgrade(rebuild=...)                                         the key index on disk, records as they were
    Merge(fragments, deletes)                                    another branch's changes in, its deletes out

Planning is a method of the change (:meth:`Write.plan`, ...), so a writer that lost a
race plans the same change again on the newest version. Each change checks its own
arguments when it is made, with the messages a user sees from ``Store``: a mode typo
or a list that is not of staged fragments is refused before anything is written.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.errors import SHOWN_CULPRITS, IntegrityError, InvalidArgumentError, SchemaError
from litstore.format import fields as field_format
from litstore.format import hashing
from litstore.format.models import Operation, check_message, check_metadata
from litstore.read.checked import asked_keys
from litstore.read.groups import by_chunk
from litstore.read.keyindex import content_matrix
from litstore.read.keyruns import has_key_index
from litstore.txn.plan import Mode, Plan, plan
from litstore.txn.stage import StagedFragment

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

#: The modes a write takes: ``append`` refuses keys the parent has, ``upsert`` replaces them.
MODES: tuple[Mode, ...] = typing.get_args(Mode)


def check_mode(mode: object) -> Mode:
    """``mode`` if it is one a write takes.

    Raises:
        InvalidArgumentError: it is not ``"append"`` or ``"upsert"``.
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    return mode  # type: ignore[return-value]  # (one of MODES)


def check_arguments(mode: object, message: object, metadata: object) -> tuple[str | None, dict[str, Any]]:
    """``message`` and ``metadata`` as a commit record holds them, if ``mode``, ``message`` and ``metadata``
    are what a commit takes; checked where a write starts, before anything is written.

    Found only when the commit record is built, they would fail after the manifest,
    indexes and fragments were written.

    Raises:
        InvalidArgumentError: the argument named in the message is not one a commit takes
            (see :func:`~litstore.format.models.check_metadata`).
    """
    check_mode(mode)
    return check_message(message), check_metadata(metadata)


def _fragments(fragments: object) -> tuple[StagedFragment, ...]:
    listed = tuple(fragments) if isinstance(fragments, (list, tuple)) else None
    if listed is None or not all(isinstance(staged, StagedFragment) for staged in listed):
        raise InvalidArgumentError(
            f"fragments must be a list of StagedFragment (what stage returns), got {fragments!r}"
        )
    return listed


@dataclass(frozen=True)
class Write:
    """Publish staged fragments: ``append`` refuses keys the parent has, ``upsert`` replaces changed ones.

    ``unchanged`` names keys the caller left out of ``fragments`` because the parent
    held their content (``Store.upsert`` drops them before staging): a rival's change
    to them is still a conflict, never a write silently lost.

    ``checked_on``: the version an ``append``'s keys were already found absent from
    before staging (``Store.append`` checks each run as it comes, to name culprits by
    input position); planned on that very version, the check is not made again. On any
    other parent (a rival committed first) it is.
    """

    fragments: Sequence[StagedFragment]
    mode: Mode = "append"
    unchanged: Collection[Any] = frozenset()
    checked_on: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", _fragments(self.fragments))
        check_mode(self.mode)
        object.__setattr__(self, "unchanged", frozenset(self.unchanged))

    @property
    def operation(self) -> Operation:
        return self.mode

    def plan(self, parent: VersionReader) -> Plan:
        checked = self.mode == "append" and self.checked_on == parent.version.number
        return plan(parent, self.fragments, self.mode, unchanged=frozenset(self.unchanged), keys_checked=checked)


@dataclass(frozen=True)
class Delete:
    """Remove records by key; a key the parent lacks is a ``KeyNotFoundError`` unless ``missing_ok``."""

    keys: Iterable[Any]
    missing_ok: bool = False
    fragments: tuple[StagedFragment, ...] = field(default=(), init=False)
    operation: Operation = field(default="delete", init=False)

    def __post_init__(self) -> None:
        if isinstance(self.keys, (str, bytes)) or not isinstance(self.keys, Iterable):
            raise InvalidArgumentError(
                f"delete takes a list of keys, not one key: delete([{self.keys!r}]) deletes the record of that key, "
                f"and delete(where={self.keys!r}) the records whose declared fields match that SQL condition"
            )
        object.__setattr__(self, "keys", tuple(hashing.normalize_key(key) for key in self.keys))

    def plan(self, parent: VersionReader) -> Plan:
        return plan(parent, (), "upsert", deletes=tuple(self.keys), missing_ok=self.missing_ok)


@dataclass(frozen=True)
class Merge:
    """Apply another branch's changes as one version: its records of the keys it changed (staged in
    ``fragments``, copied from its stored bytes) replace or join the parent's, and the keys it deleted go.

    Planned as an upsert with deletes, so a rival that changed the same keys first is a
    ``ConflictError`` and one that changed others is rebased over (see ``branches.merge``).
    """

    fragments: Sequence[StagedFragment]
    deletes: tuple[Any, ...] = ()
    operation: Operation = field(default="merge", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", _fragments(self.fragments))
        object.__setattr__(self, "deletes", tuple(hashing.normalize_key(key) for key in self.deletes))

    def plan(self, parent: VersionReader) -> Plan:
        return plan(parent, self.fragments, "upsert", deletes=self.deletes)


@dataclass(frozen=True)
class Compaction:
    """Move the live records of ``chunks`` (of the parent) into new chunks of about ``chunk_bytes``; records and
    fingerprint stay as they were.

    The rewritten chunks leave the version with their deletion vectors: their dead rows
    are not copied. A chunk of ``chunks`` the parent no longer lists (a rival's delete
    emptied it) is skipped. :meth:`chosen` picks the chunks by the compaction policy.
    """

    chunks: frozenset[str]
    chunk_bytes: int
    fragments: tuple[StagedFragment, ...] = field(default=(), init=False)
    operation: Operation = field(default="compact", init=False)

    @classmethod
    def chosen(cls, parent: VersionReader, chunk_bytes: int, min_fill: float, min_live: float) -> Compaction | None:
        """The compaction of ``parent`` that its policy asks for, or ``None`` if there is nothing to gain.

        In each split, a chunk is rewritten when its live fraction (live rows over rows,
        from the commit record: nothing is read) is below ``min_live``, or when its live
        bytes (its size times its live fraction) are below ``min_fill`` times
        ``chunk_bytes`` and the split has another chunk to merge it with (a second such
        small chunk, or a chunk rewritten for its dead rows). A chunk with no dead rows
        counts its whole size, so a store without deletion vectors compacts as before.
        """
        rewrite: set[str] = set()
        deletions = parent.deletions
        for chunks in parent.chunks().values():
            holey, small = [], []
            for chunk in chunks:
                live = deletions.live_count(chunk.filename, chunk.num_items) / max(chunk.num_items, 1)
                if live < min_live:
                    holey.append(chunk.filename)
                elif chunk.num_bytes * live < min_fill * chunk_bytes:
                    small.append(chunk.filename)
            if holey or len(small) >= 2:
                rewrite.update(holey + small)
        return cls(frozenset(rewrite), chunk_bytes) if rewrite else None

    def plan(self, parent: VersionReader) -> Plan:
        listed = {chunk.filename for chunks in parent.chunks().values() for chunk in chunks}
        return plan(parent, (), "upsert", rewrite=frozenset(self.chunks) & listed, chunk_bytes=self.chunk_bytes)


@dataclass(frozen=True)
class FieldAddition:
    """Declare more fields (name -> type name, as :func:`litstore.format.fields.declare` gives them), their
    values read from every record of the parent; records, chunks and fingerprint stay as they were."""

    fields: Mapping[str, str]
    fragments: tuple[StagedFragment, ...] = field(default=(), init=False)
    operation: Operation = field(default="add_fields", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", dict(self.fields))

    def plan(self, parent: VersionReader) -> Callable[[Iterable[pa.Table]], Iterator[pa.Table]]:
        """What makes the version's manifest of ``parent``'s: a function of ``parent``'s manifest rows, a row
        group at a time, yielding each with a column for every new field, its values read from the records
        those rows name (so the whole manifest is never held, at any size).

        It raises, once every row has been read, :class:`~litstore.errors.SchemaError`
        naming each record that lacks a valid value of a new field.
        """
        return functools.partial(_with_values, parent, dict(self.fields))


@dataclass(frozen=True)
class Upgrade:
    """Write the parent's key index on disk as one run of every record (format 3): a version with the same
    records, chunks and fingerprint (see :mod:`litstore.txn.upgrade`).

    Needed where the parent has no index on disk, or one whose runs are missing, cut short
    or damaged in their footer; ``rebuild`` writes it even so (a damaged page is found only
    when a lookup reads it).
    """

    rebuild: bool = False
    fragments: tuple[StagedFragment, ...] = field(default=(), init=False)
    operation: Operation = field(default="upgrade", init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rebuild, bool):
            raise InvalidArgumentError(f"rebuild must be True or False, got {self.rebuild!r}")

    def needed(self, parent: VersionReader) -> bool:
        """Whether ``parent`` needs its key index written: it has none, its runs do not open, or ``rebuild``."""
        if self.rebuild or not has_key_index(parent.version):
            return True
        try:
            parent.key_runs().check()
        except IntegrityError:
            return True
        return False


def _with_values(head: VersionReader, new: dict[str, str], parts: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """``parts`` (rows of ``head``'s manifest) each with a column for every one of the ``new`` fields (see
    :meth:`FieldAddition.plan`); held: one part and the records it names, a chunk at a time."""
    problems: list[tuple[int, Any, str]] = []  # (position in the manifest, key, what is wrong)
    position = 0
    for rows in parts:
        values = _values(head, new, rows, position, problems)
        for name, type_name in new.items():
            rows = rows.append_column(name, pa.array(values[name], field_format.arrow_type(type_name)))
        position += rows.num_rows
        yield rows
    if problems:
        shown = "; ".join(f"key {key!r}: {detail}" for _, key, detail in problems[:SHOWN_CULPRITS])
        more = f"; and {len(problems) - SHOWN_CULPRITS} more" if len(problems) > SHOWN_CULPRITS else ""
        noun = "record" if len(problems) == 1 else "records"
        raise SchemaError(
            f"cannot add fields {list(new)}: {len(problems)} {noun} of version {head.version.number} do not fit: "
            f"{shown}{more}; nothing was committed",
            [(where, key) for where, key, _ in problems],
        )


def _values(
    head: VersionReader, new: dict[str, str], rows: pa.Table, first: int, problems: list[tuple[int, Any, str]]
) -> dict[str, list[Any]]:
    """Each new field's value of the records ``rows`` name, in row order (``None`` where it does not fit: the
    record is added to ``problems``, with its position counted from ``first``).

    Each record is read where its row says, checked against the row's content hash, and
    must be a record holding the row's key (as a lookup checks): a manifest row pointing at
    another key's record never gives its key that record's values.

    Raises:
        IntegrityError: a record is damaged, not a record, or another key's.
    """
    values: dict[str, list[Any]] = {name: [None] * rows.num_rows for name in new}
    if not rows.num_rows:
        return values
    chunks = pc.dictionary_encode(rows.column("chunk")).combine_chunks()
    chunk_ids = chunks.indices.to_numpy().astype(np.uint32)
    numbers = rows.column("row").to_numpy().astype(np.uint32)
    contents = content_matrix(rows.column("content_hash"))
    keys = rows.column("key").to_pylist()
    key_field = head.config.key
    failed: list[tuple[int, str]] = []  # (row, what is wrong)
    for chunk_id, positions, places in by_chunk(chunk_ids, numbers):
        chunk = chunks.dictionary[chunk_id].as_py()
        held = head.chunk_cache.holds(chunk)
        payloads = head.chunk_cache.payloads(chunk, places)
        # Damaged records are named by the part's keys: the manifest is not composed for it.
        records = head.check.records(chunk, places, payloads, contents[positions], asked_keys(keys, positions))
        if not held:  # mapped for this part only: a walk of every record must not keep every chunk mapped
            head.chunk_cache.release(chunk)
        ats = positions.tolist()
        head.check.keyed(chunk, places.tolist(), records, [keys[at] for at in ats], key_field, "the manifest")
        for at, record in zip(ats, records, strict=True):
            for name, type_name in new.items():
                value, reason = field_format.check_value(record.get(name), type_name)
                if reason is not None:
                    if name not in record and not type_name.endswith("?"):
                        reason = "missing, and the field is not Optional"
                    failed.append((at, f"declared field {name!r}: {reason}"))
                    break
                values[name][at] = value
    failed.sort()
    problems.extend((first + at, keys[at], detail) for at, detail in failed)
    return values


#: Every change a commit publishes.
Change = Write | Delete | Merge | Compaction | FieldAddition | Upgrade
