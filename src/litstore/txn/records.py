"""Checking, encoding and hashing a batch of input records before anything is written.

:func:`prepare` looks at every record of a batch and either returns a
:class:`Batch` ready to write or raises one :class:`~litstore.errors.InvalidRecordError`
that names the offending positions and keys. Nothing is written before it returns,
so a rejected batch leaves the store exactly as it was.

Records arrive one by one (dicts, pydantic models) or as a table (Arrow, pandas,
polars), whose rows are the records. A table of plain columns is checked and
encoded column by column (:mod:`litstore.format.columnar`), with the same bytes and
the same verdicts as record by record; anything that path cannot decide at once
(an invalid or duplicate key, a bad split, a column type it does not encode) goes
through the record-by-record path, which names every culprit.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from litstore.errors import (
    SHOWN_CULPRITS,
    DuplicateKeyError,
    InvalidArgumentError,
    InvalidRecordError,
    KeyFieldError,
    SchemaError,
    SplitError,
    UnsupportedValueError,
    describe,
    first_problem,
)
from litstore.format import codec, columnar, hashing
from litstore.format import fields as field_format
from litstore.format import manifest as manifest_format
from litstore.format.models import FieldSplit, HashSplit, StoreConfig
from litstore.txn.progress import bar as progress_bar

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# The order in which problems are reported when a batch has several kinds.
_PROBLEM_ORDER: tuple[type[InvalidRecordError], ...] = (KeyFieldError, DuplicateKeyError, SchemaError, SplitError)


@dataclass
class Batch:
    """Validated records, encoded and hashed, in input order.

    ``items`` holds each record's canonical bytes after their length (litdata's item
    framing: one contiguous Arrow array of what the chunk files hold, so chunks are
    written from it in bulk); ``fields`` the value of each declared field of
    each record (an Arrow array per field, typed as its manifest column);
    ``contents`` the content hash of each record, as the rows of an ``(n, 16)`` uint8
    array (no Python object per record); ``key_column`` the keys, typed as the manifest's
    key column (``keys`` is the same as a list, made when first asked for).
    """

    key_column: pa.Array
    key_hashes: np.ndarray
    splits: list[str]
    items: pa.LargeBinaryArray
    contents: np.ndarray
    fields: dict[str, pa.Array] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.key_column)

    @cached_property
    def keys(self) -> list[Any]:
        """The keys as Python values (for the checks that name keys one by one)."""
        keys: list[Any] = self.key_column.to_pylist()
        return keys

    def select(self, keep: np.ndarray) -> Batch:
        """The records where ``keep`` is true, in order."""
        indices = np.flatnonzero(keep).tolist()
        return Batch(
            key_column=self.key_column.filter(pa.array(keep, pa.bool_())),
            key_hashes=self.key_hashes[keep],
            splits=[self.splits[i] for i in indices],
            items=self.items.filter(pa.array(keep, pa.bool_())),
            contents=self.contents[keep],
            fields={name: values.filter(pa.array(keep, pa.bool_())) for name, values in self.fields.items()},
        )


class Problems:
    """Problems found in a batch, by kind; :meth:`raise_first` raises one error naming every culprit of a kind."""

    def __init__(self) -> None:
        self.found: dict[type[InvalidRecordError], list[tuple[int, Any, str]]] = {}

    def add(self, kind: type[InvalidRecordError], position: int, key: Any, detail: str) -> None:
        self.found.setdefault(kind, []).append((position, key, detail))

    def raise_first(self) -> None:
        for kind in _PROBLEM_ORDER:
            problems = self.found.get(kind)
            if problems:
                shown = "; ".join(
                    f"position {position}" + (f" (key {key!r})" if key is not None else "") + f": {detail}"
                    for position, key, detail in problems[:SHOWN_CULPRITS]
                )
                more = len(problems) - SHOWN_CULPRITS
                noun = "record" if len(problems) == 1 else "records"
                message = f"{len(problems)} {noun} rejected by {kind.__name__}: {shown}"
                if more > 0:
                    message += f"; and {more} more"
                raise kind(message, [(position, key) for position, key, _ in problems])


def _as_mapping(record: Any, model: type[pydantic.BaseModel] | None) -> dict[str, Any]:
    if model is not None:
        instance = record if isinstance(record, model) else model.model_validate(record)
        return instance.model_dump()
    if isinstance(record, pydantic.BaseModel):
        return record.model_dump()
    if type(record) is dict:
        return record
    if isinstance(record, Mapping):
        return dict(record)
    raise TypeError(f"expected a mapping or a pydantic model, got {type(record).__name__}")


def _checked_key(record: dict[str, Any], config: StoreConfig) -> tuple[Any, str | None]:
    """The record's key as the store holds it, or ``(None, reason)`` when it has no valid one."""
    if config.key not in record:
        fields = describe(sorted(map(str, record)), 10) or "none"
        return None, f"no key field {config.key!r} (the record's fields: {fields})"
    key = hashing.normalize_key(record[config.key])
    if key is None:
        return None, f"key field {config.key!r} is None"
    if config.key_type == "str":
        if isinstance(key, str):
            if not key.isascii() and not _is_unicode(key):
                return None, f"key {key!r} is not valid Unicode (it holds a lone surrogate)"
            return str(key), None
    elif isinstance(key, int) and not isinstance(key, bool):
        if _INT64_MIN <= key <= _INT64_MAX:
            return int(key), None
        return None, f"key {key} is outside the int64 range"
    return None, f"key {key!r} is a {type(key).__name__}, the store's keys are {config.key_type}"


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_batch(records: Any) -> None:
    """Refuse a single record, or anything else that is not an iterable of records."""
    if isinstance(records, (Mapping, pydantic.BaseModel)):
        raise InvalidArgumentError(
            f"got one {type(records).__name__} where a batch belongs: pass a list of records, e.g. [record]"
        )
    if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
        raise InvalidArgumentError(f"pass a list of records, not {type(records).__name__}")


def prepare(
    records: Iterable[Any],
    config: StoreConfig,
    model: type[pydantic.BaseModel] | None = None,
    progress: bool = False,
    fields: dict[str, str] | None = None,
) -> Batch:
    """Validate, encode and hash ``records``, all of them at once (``fields``: see :func:`prepare_runs`).

    Raises:
        InvalidArgumentError: ``records`` is one record, or not an iterable of records.
        KeyFieldError, DuplicateKeyError, SchemaError, SplitError: some records are
            invalid; the error names them. Of several kinds, the first in that order.
    """
    runs = list(prepare_runs(records, config, model, progress, run_bytes=None, fields=fields))
    if runs:
        return runs[0]
    keys = pa.array([], _key_type(config))
    return Batch(keys, np.empty(0, np.uint64), [], pa.array([], pa.large_binary()), np.empty((0, 16), np.uint8))


def prepare_runs(
    records: Iterable[Any],
    config: StoreConfig,
    model: type[pydantic.BaseModel] | None = None,
    progress: bool = False,
    run_bytes: int | None = None,
    fields: dict[str, str] | None = None,
) -> Iterator[Batch]:
    """Validate, encode and hash ``records``, yielding them in runs of about ``run_bytes`` of payload.

    ``fields`` are the declared fields to check and extract from each record (default:
    the config's; a store's head may declare more, see :func:`~litstore.format.models.declared_fields`).

    Streams: only one run is in memory (``run_bytes=None``: one run of everything).
    Once a record is rejected no more runs are yielded, but the rest of the input is
    still checked, so the error raised at the end names every culprit. Keys are
    checked for duplicates within a run; the stager checks across runs.

    Raises:
        InvalidArgumentError: ``records`` is one record, or not an iterable of records.
        KeyFieldError, DuplicateKeyError, SchemaError, SplitError: some records are
            invalid; the error names them. Of several kinds, the first in that order.
    """
    declared = list((config.fields if fields is None else fields).items())
    table = columnar.as_table(records)
    if table is None:
        _check_batch(records)
    builder = _RunBuilder(config, model, run_bytes, declared)
    bar = progress_bar(progress, total=table.num_rows if table is not None else None, desc="encoding", unit="rec")
    with bar:
        blocks = _table_blocks(table, run_bytes) if table is not None else _record_blocks(records, builder)
        for position, block in blocks:
            builder.add_block(position, block)
            bar.update(len(block))
            if builder.full():
                yield builder.take()
    builder.raise_problems()
    if builder.pending() or run_bytes is None:
        yield builder.take()


#: Records checked and encoded together on the column-wise path, until their size is known;
#: then a block holds about what fills the current run (at most _MAX_BLOCK_RECORDS).
_BLOCK_RECORDS = 4096
_MAX_BLOCK_RECORDS = 1 << 16


def _table_blocks(table: pa.Table, run_bytes: int | None) -> Iterator[tuple[int, pa.Table]]:
    """``(position of the first row, rows)``: slices of ``table`` of a run or less each."""
    count = table.num_rows
    step = count if run_bytes is None else max(1, run_bytes * count // max(table.nbytes, 1))
    for start in range(0, count, max(step, 1)):
        # Clamped by hand: slicing a table without columns does not clamp its row count.
        yield start, table.slice(start, min(step, count - start))


def _record_blocks(records: Iterable[Any], builder: _RunBuilder) -> Iterator[tuple[int, list[Any]]]:
    """``(position of the first record, records)``: a small first block, then blocks about the size of a run."""
    iterator = iter(records)
    start = 0
    limit = 64
    while block := list(itertools.islice(iterator, limit)):
        yield start, block
        start += len(block)
        limit = builder.block_records()


class _RunBuilder:
    """Collects checked, encoded records into runs of about ``run_bytes`` of payload, noting every problem.

    Blocks of records go column-wise when they can (:func:`_table_batch`), record by
    record otherwise; both paths give the same bytes and the same verdicts.
    """

    def __init__(
        self,
        config: StoreConfig,
        model: type[pydantic.BaseModel] | None,
        run_bytes: int | None,
        declared: list[tuple[str, str]],
    ) -> None:
        self.config = config
        self.model = model
        self.run_bytes = run_bytes
        self.declared = declared
        self.problems = Problems()
        self.first_position: dict[Any, int] = {}  # key -> input position, within the current run
        self.pieces: list[tuple[Batch, int]] = []  # column-wise blocks of the run, with their first positions
        self.held_hashes = np.empty(0, np.uint64)  # the key hashes of those blocks, sorted
        self.indexed = 0  # how many of them have their keys in first_position
        self.size = 0  # payload bytes in the current run
        self.seen_records = 0
        self.seen_bytes = 0
        self._reset_records()

    def _reset_records(self) -> None:
        self.keys: list[Any] = []
        self.splits: list[str] = []
        self.payloads: list[bytes] = []
        self.contents: list[bytes] = []
        self.values: dict[str, list[Any]] = {name: [] for name, _ in self.declared}

    def block_records(self) -> int:
        """How many records the next block of a record stream should hold: about what fills the current run."""
        if self.run_bytes is None or not self.seen_bytes:
            return _BLOCK_RECORDS
        average = self.seen_bytes / max(self.seen_records, 1)
        room = max(self.run_bytes - self.size, self.run_bytes // 16)
        return int(max(1, min(_MAX_BLOCK_RECORDS, room / max(average, 1))))

    def add_block(self, position: int, block: pa.Table | list[Any]) -> None:
        """Check and encode ``block`` (input positions from ``position``): column-wise if it can, else one by one."""
        table = block if isinstance(block, pa.Table) else None
        if table is None and self.model is None:
            table = columnar.from_dicts(block)
        piece = None if table is None or self.model is not None else _table_batch(table, self.config, self.declared)
        if piece is not None:
            self._add_piece(position, piece)
            return
        rows = _table_rows(block) if isinstance(block, pa.Table) else block
        for offset, raw in enumerate(rows):
            self._add_record(position + offset, raw)

    def _add_piece(self, position: int, piece: Batch) -> None:
        """Add a block checked column-wise (its keys are distinct): only its keys against the run's need a look."""
        if self.keys or self.problems.found or _any_held(self.held_hashes, piece.key_hashes):
            self._index_pieces()  # a key may repeat one seen before: check key by key, naming positions
            first_position = self.first_position
            for index, key in enumerate(piece.keys):
                if first_position.setdefault(key, position + index) != position + index:
                    detail = f"same key as position {first_position[key]}"
                    self.problems.add(DuplicateKeyError, position + index, key, detail)
            self.indexed = len(self.pieces) + 1
        size = _payload_bytes(piece)
        self._count(len(piece), size)
        if not self.problems.found:
            self.pieces.append((piece, position))
            self.size += size
            added = np.sort(piece.key_hashes)
            self.held_hashes = np.insert(self.held_hashes, np.searchsorted(self.held_hashes, added), added)

    def _index_pieces(self) -> None:
        """Enter the keys of the run's column-wise blocks into ``first_position`` (done only when needed)."""
        for piece, position in self.pieces[self.indexed :]:
            for index, key in enumerate(piece.keys):
                self.first_position.setdefault(key, position + index)
        self.indexed = len(self.pieces)

    def _count(self, records: int, size: int) -> None:
        self.seen_records += records
        self.seen_bytes += size

    def _add_record(self, position: int, raw: Any) -> None:
        config = self.config
        problems = self.problems
        key_field = config.key
        if self.model is None and type(raw) is dict:
            record = raw
        else:
            try:
                record = _as_mapping(raw, self.model)
            except pydantic.ValidationError as exc:
                key = raw.get(key_field) if isinstance(raw, Mapping) else None
                problems.add(SchemaError, position, key, f"does not fit the schema: {first_problem(exc, 'record')}")
                return
            except TypeError as exc:
                problems.add(SchemaError, position, None, str(exc))
                return
        key = record.get(key_field)
        if not (config.key_type == "str" and type(key) is str and key.isascii()):  # the common case needs no more
            key, reason = _checked_key(record, config)
            if reason is not None:
                problems.add(KeyFieldError, position, None, reason)
                return
            if type(record[key_field]) is not type(key):  # np.int64(5) is stored as the key 5 it stands for
                record = {**record, key_field: key}
        self._index_pieces()
        earlier = self.first_position.setdefault(key, position)
        if earlier != position:
            problems.add(DuplicateKeyError, position, key, f"same key as position {earlier}")
            return
        rule = config.splits
        try:
            split = "" if isinstance(rule, HashSplit) else rule.assign(key, record)
        except KeyError:
            assert isinstance(rule, FieldSplit)
            problems.add(SplitError, position, key, f"no split field {rule.field!r}")
            return
        except ValueError as exc:
            problems.add(SplitError, position, key, f"unknown split {exc.args[0]!r}, expected one of {rule.names}")
            return
        try:
            payload = codec.encode(record)
        except UnsupportedValueError as exc:
            problems.add(SchemaError, position, key, str(exc))
            return
        if self.declared and not _extract_fields(record, self.declared, self.values, problems, position, key):
            return
        self._count(1, len(payload))
        if problems.found:
            return  # keep looking for problems, but stop building output
        self.keys.append(key)
        self.splits.append(split)
        self.payloads.append(payload)
        self.contents.append(hashing.content_hash(payload))
        self.size += len(payload)

    def full(self) -> bool:
        return self.run_bytes is not None and self.size >= self.run_bytes and not self.problems.found

    def pending(self) -> bool:
        return bool(self.pieces or self.keys)

    def raise_problems(self) -> None:
        self.problems.raise_first()

    def take(self) -> Batch:
        """The current run, as one batch in input order; the builder starts a new run."""
        pieces = [piece for piece, _ in self.pieces]
        if self.keys or not pieces:
            rule = self.config.splits
            splits = rule.assign_all(self.keys) if isinstance(rule, HashSplit) else self.splits
            records = encoded_batch(
                self.keys, splits, self.payloads, self.contents, self.declared, self.values, self.config
            )
            pieces = [*pieces, records]
        self.pieces, self.size, self.indexed = [], 0, 0
        self.held_hashes = np.empty(0, np.uint64)
        self.first_position.clear()
        self._reset_records()
        return pieces[0] if len(pieces) == 1 else _concat(pieces)


def _any_held(held: np.ndarray, hashes: np.ndarray) -> bool:
    """Whether any of ``hashes`` is in ``held`` (sorted): a binary search each, not a set of the run's keys."""
    if not len(held) or not len(hashes):
        return False
    places = np.minimum(np.searchsorted(held, hashes), len(held) - 1)
    return bool((held[places] == hashes).any())


def _payload_bytes(batch: Batch) -> int:
    offsets = columnar.value_offsets(batch.items)
    return int(offsets[-1] - offsets[0]) - 4 * len(batch)


def _concat(pieces: list[Batch]) -> Batch:
    """The batches ``pieces``, one after the other, as one batch."""
    return Batch(
        key_column=pa.concat_arrays([piece.key_column for piece in pieces]),
        key_hashes=np.concatenate([piece.key_hashes for piece in pieces]),
        splits=[split for piece in pieces for split in piece.splits],
        items=pa.concat_arrays([piece.items for piece in pieces]),
        contents=np.concatenate([piece.contents for piece in pieces]),
        fields={name: pa.concat_arrays([piece.fields[name] for piece in pieces]) for name in pieces[0].fields},
    )


def _table_rows(table: pa.Table, step: int = 8192) -> Iterator[dict[str, Any]]:
    for start in range(0, table.num_rows, step):
        yield from table.slice(start, min(step, table.num_rows - start)).to_pylist()


def _hash_splits(rule: object, keys: list[Any]) -> list[str]:
    assert isinstance(rule, HashSplit)
    return rule.assign_all(keys)


def encoded_batch(
    keys: list[Any],
    splits: list[str],
    payloads: list[bytes],
    contents: list[bytes],
    declared: list[tuple[str, str]],
    values: dict[str, list[Any]],
    config: StoreConfig,
) -> Batch:
    """The batch of records already checked and encoded: their keys, splits, canonical bytes, content hashes and
    the values of the ``declared`` fields (``values``: a list per field name)."""
    arrays = {name: pa.array(values[name], field_format.arrow_type(type_name)) for name, type_name in declared}
    items = columnar.sized(pa.array(payloads, pa.large_binary()))
    digests = np.frombuffer(b"".join(contents), dtype=np.uint8).reshape(-1, 16)
    batch = Batch(pa.array(keys, _key_type(config)), hashing.key_hashes(keys), splits, items, digests, arrays)
    batch.keys = keys  # (the list it was made from)
    return batch


def _key_type(config: StoreConfig) -> pa.DataType:
    """The type of the manifest's key column."""
    return manifest_format.schema(config.key_type).field("key").type


def _table_batch(table: pa.Table, config: StoreConfig, declared: list[tuple[str, str]]) -> Batch | None:
    """The batch of ``table``'s rows, checked and encoded column-wise; ``None`` if some row needs a closer look."""
    names = table.column_names
    if config.key not in names:
        return None
    key_column = table.column(config.key)
    kind = key_column.type
    if key_column.null_count:
        return None
    if config.key_type == "str":
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            return None
    elif not pa.types.is_integer(kind) or (kind == pa.uint64() and pc.max(key_column).as_py() >= 2**63):
        return None
    key_hashes = hashing.key_hash_array(key_column)
    ordered = np.sort(key_hashes)
    if np.any(ordered[1:] == ordered[:-1]):
        return None  # a duplicate key (or two keys that share a hash): named record by record
    rule = config.splits
    if isinstance(rule, HashSplit):
        splits = rule.assign_all(key_column.to_pylist()) if len(rule.names) > 1 else [rule.names[0]] * len(key_column)
    else:
        assert isinstance(rule, FieldSplit)
        if rule.field not in names or table.column(rule.field).null_count:
            return None
        splits = table.column(rule.field).to_pylist()
        if not set(splits) <= set(rule.names):
            return None
    arrays = {}
    for name, type_name in declared:
        values = table.column(name).to_pylist() if name in names else [None] * table.num_rows
        checked = [field_format.check_value(value, type_name) for value in values]
        if any(reason is not None for _, reason in checked):
            return None
        arrays[name] = pa.array([value for value, _ in checked], field_format.arrow_type(type_name))
    items = columnar.encode_table(table, sized=True)
    if items is None:
        return None
    keys = key_column.combine_chunks().cast(_key_type(config))
    return Batch(keys, key_hashes, splits, items, hashing.content_hash_array(items, skip=4), arrays)


def _extract_fields(
    record: dict[str, Any],
    declared: list[tuple[str, str]],
    values: dict[str, list[Any]],
    problems: Problems,
    position: int,
    key: Any,
) -> bool:
    """Append ``record``'s value of each declared field to ``values``; ``False`` (and a problem) if one is invalid."""
    found: list[Any] = []
    for name, type_name in declared:
        value, reason = field_format.check_value(record.get(name), type_name)
        if reason is not None:
            if name not in record and not type_name.endswith("?"):
                reason = "missing, and the field is not Optional"
            problems.add(SchemaError, position, key, f"declared field {name!r}: {reason}")
            return False
        found.append(value)
    if not problems.found:
        for (name, _), value in zip(declared, found, strict=True):
            values[name].append(value)
    return True
