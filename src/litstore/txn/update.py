"""Field updates: records with some top-level fields changed, made from their stored canonical bytes.

``Store.update({key: {"label": 3}})`` reads each record's stored bytes (checked against
its committed content hash), sets the named fields with
:func:`~litstore.format.codec.with_fields` and stages the results as an upsert. Only
the named fields are encoded; every other field's bytes are copied as they were stored,
so a media value is never decoded and encoded again, and ``diff(fields=True)`` of the
two versions names exactly the fields set. A record whose bytes come out the same is
left out and counted unchanged (a rival's change to it is still a conflict, as for
``upsert``).

The records are read from the version the caller writes on: a rival that commits a
change to the same keys first makes the commit a :class:`~litstore.errors.ConflictError`
(the update would otherwise overwrite what the rival wrote), while one that changed
other keys is rebased over, as for any write.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pydantic

from litstore.errors import (
    SHOWN_CULPRITS,
    IntegrityError,
    InvalidArgumentError,
    KeyNotFoundError,
    SchemaError,
    SplitError,
    UnsupportedValueError,
    describe,
    first_problem,
)
from litstore.format import codec, hashing
from litstore.format import fields as field_format
from litstore.format import manifest as manifest_format
from litstore.format.models import FieldSplit
from litstore.read.checked import mismatched
from litstore.txn.records import Batch, Problems, encoded_batch

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

#: Records read, changed and staged together: what bounds an update's memory.
RUN_RECORDS = 4096


def check_changes(changes: object, key_field: str) -> dict[Any, dict[str, Any]]:
    """``changes`` as ``{key: {field: value}}``, if it is one an update takes.

    Raises:
        InvalidArgumentError: it is not a mapping of keys to mappings of str field names,
            or it sets the key field.
    """
    if not isinstance(changes, Mapping):
        raise InvalidArgumentError(
            f"update takes {{key: {{field: value, ...}}, ...}}, not {type(changes).__name__}; to set fields of "
            "the records a condition selects, pass update({field: value}, where=...)"
        )
    checked: dict[Any, dict[str, Any]] = {}
    for key, values in changes.items():
        if not isinstance(values, Mapping):
            raise InvalidArgumentError(
                f"update takes {{key: {{field: value, ...}}}}: the value for key {key!r} is a "
                f"{type(values).__name__}, not a mapping of field names to values; to set fields of the records a "
                "condition selects, pass update({field: value}, where=...)"
            )
        checked[hashing.normalize_key(key)] = check_values(values, key_field)
    return checked


def check_values(values: object, key_field: str) -> dict[str, Any]:
    """``values`` as a dict of the top-level fields to set, if it names only str fields and not the key field.

    Raises:
        InvalidArgumentError: ``values`` is not a mapping, a field name is not a str, or is the key field.
    """
    if not isinstance(values, Mapping):
        raise InvalidArgumentError(f"update(..., where=...) takes {{field: value, ...}}, not {type(values).__name__}")
    for name in values:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"field names to update are str, got {name!r}")
        if name == key_field:
            raise InvalidArgumentError(
                f"the key field {key_field!r} cannot be updated (a record's key is what names it): delete the "
                "record and append it under its new key"
            )
    return dict(values)


def updated_runs(
    reader: VersionReader,
    changes: dict[Any, dict[str, Any]],
    model: type[pydantic.BaseModel] | None,
    unchanged: list[Any],
) -> Iterator[Batch]:
    """The changed records of ``changes`` (checked by :func:`check_changes`), in runs, ready to stage as an upsert.

    Keys whose record comes out unchanged are added to ``unchanged``. Every problem of a
    run is found before it is yielded, and none is yielded once one is found.

    Raises:
        KeyNotFoundError: some keys are not in ``reader``'s version (the error names them).
        SchemaError: a value cannot be stored, a declared field gets a value of the
            wrong type, or (a store with a record schema) a record no longer fits it.
        SplitError: a change of the split field would move a record to another split.
        DamagedRecordError: a record's stored bytes do not match their content hash.
    """
    items = list(changes.items())
    declared = list(reader.fields.items())
    for start in range(0, len(items), RUN_RECORDS):
        part = items[start : start + RUN_RECORDS]
        stored = _stored(reader, [key for key, _ in part])
        problems = Problems()
        keys: list[Any] = []
        splits: list[str] = []
        payloads: list[bytes] = []
        contents: list[bytes] = []
        values: dict[str, list[Any]] = {name: [] for name, _ in declared}
        for position, (key, new) in enumerate(part, start):
            payload, split = stored[key]
            where = f"the record of key {key!r}"
            try:
                if model is not None:
                    new = _validated(model, payload, new, where)
                updated = codec.with_fields(payload, new, where)
            except UnsupportedValueError as exc:
                problems.add(SchemaError, position, key, str(exc))
                continue
            except _SchemaMismatch as exc:
                problems.add(SchemaError, position, key, str(exc))
                continue
            if updated == payload:
                unchanged.append(key)
                continue
            kept = _split(reader, key, split, new, problems, position)
            found = _declared_values(updated, declared, problems, position, key, where)
            if kept is None or found is None or problems.found:
                continue
            for name, value in found.items():
                values[name].append(value)
            keys.append(key)
            splits.append(kept)
            payloads.append(updated)
            contents.append(hashing.content_hash(updated))
        problems.raise_first()
        if keys:
            yield encoded_batch(keys, splits, payloads, contents, declared, values, reader.config)


class _SchemaMismatch(ValueError):
    """An updated record that no longer fits the store's record schema."""


def _validated(model: type[pydantic.BaseModel], payload: bytes, new: dict[str, Any], where: str) -> dict[str, Any]:
    """The values ``new`` as the store's model gives them back, once the updated record fits it."""
    record = codec.decode(payload, where)
    try:
        dumped = model.model_validate({**record, **new}).model_dump()
    except pydantic.ValidationError as exc:
        raise _SchemaMismatch(f"no longer fits the schema: {first_problem(exc, 'record')}") from None
    return {name: dumped.get(name, value) for name, value in new.items()}


def _split(
    reader: VersionReader, key: Any, split: str, new: dict[str, Any], problems: Problems, position: int
) -> str | None:
    """The record's split, which an update may not change (as an upsert may not)."""
    rule = reader.config.splits
    if not isinstance(rule, FieldSplit) or rule.field not in new:
        return split
    try:
        moved = rule.assign(key, new)
    except ValueError as exc:
        problems.add(SplitError, position, key, f"unknown split {exc.args[0]!r}, expected one of {rule.names}")
        return None
    if moved != split:
        problems.add(
            SplitError,
            position,
            key,
            f"setting {rule.field!r} to {new[rule.field]!r} would move it from split {split!r} to {moved!r}; "
            "a record keeps its split: delete it and append it instead",
        )
        return None
    return split


def _declared_values(
    payload: bytes, declared: list[tuple[str, str]], problems: Problems, position: int, key: Any, where: str
) -> dict[str, Any] | None:
    """The value of each declared field in the updated record, decoding only those fields."""
    fields = codec.top_level_fields(payload, where)
    found: dict[str, Any] = {}
    for name, type_name in declared:
        raw = fields.get(name)
        value, reason = field_format.check_value(None if raw is None else codec.decode(raw, where), type_name)
        if reason is not None:
            if raw is None and not type_name.endswith("?"):
                reason = "missing, and the field is not Optional"
            problems.add(SchemaError, position, key, f"declared field {name!r}: {reason}")
            return None
        found[name] = value
    return found


def _stored(reader: VersionReader, keys: list[Any]) -> dict[Any, tuple[bytes, str]]:
    """The stored bytes and split of the record of each of ``keys``, each checked against its content hash.

    Raises:
        KeyNotFoundError: some keys are not in the version (named).
        DamagedRecordError, IntegrityError: a record's bytes are not the committed ones, or not its key's.
    """
    key_type = manifest_format.schema(reader.config.key_type).field("key").type
    try:
        asked = pa.array(keys, key_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        asked = None
    rows = None if asked is None else reader.rows_for_keys(asked)
    found_keys = [] if rows is None else rows.column("key").to_pylist()
    if len(set(found_keys)) < len(set(keys)):
        missing = sorted(set(keys) - set(found_keys), key=repr)
        raise KeyNotFoundError(
            f"{len(missing)} of {len(keys)} keys to update are not in version {reader.version.number}: "
            f"{describe(missing, SHOWN_CULPRITS)}; nothing was committed"
        )
    assert rows is not None
    stored: dict[Any, tuple[bytes, str]] = {}
    chunks = rows.column("chunk").to_pylist()
    by_chunk: dict[str, list[int]] = {}
    for index, chunk in enumerate(chunks):
        by_chunk.setdefault(chunk, []).append(index)
    splits = rows.column("split").to_pylist()
    row_numbers = rows.column("row").to_numpy().astype(np.int64)
    hashes = np.frombuffer(b"".join(rows.column("content_hash").to_pylist()), np.uint8).reshape(-1, 16)
    key_field = reader.config.key
    for chunk, indices in by_chunk.items():
        where = np.array(indices, dtype=np.intp)
        chunk_rows = row_numbers[where]
        payloads = reader.chunk_cache.payloads(chunk, chunk_rows)
        damaged = mismatched(payloads, hashes[where])
        if len(damaged):
            raise reader.check.mismatch(chunk, chunk_rows[damaged], [found_keys[i] for i in where[damaged]])
        for index, row, payload in zip(indices, chunk_rows.tolist(), payloads, strict=True):
            key = found_keys[index]
            data = bytes(payload)
            raw_key = codec.top_level_fields(data, f"the record at chunk {chunk}, row {row}").get(key_field)
            if raw_key is None or codec.decode(raw_key) != key:
                raise IntegrityError(
                    f"the index of version {reader.version.number} points key {key!r} at chunk {chunk}, row {row}, "
                    "which holds another record: the index is damaged; store.verify() checks the version"
                )
            stored[key] = (data, splits[index])
    return stored


def copied_runs(source: VersionReader, keys: list[Any], target_fields: dict[str, str]) -> Iterator[Batch]:
    """The records of ``keys`` in ``source``'s version, as their stored bytes (checked against their content
    hashes), in runs ready to stage into another line of the same store: what a merge copies.

    Nothing is decoded but the ``target_fields`` the target line declares, so every content hash is kept.

    Raises:
        KeyNotFoundError: some keys are not in ``source``'s version.
        SchemaError: a record lacks a valid value of a field the target declares (named).
        DamagedRecordError: a record's stored bytes do not match their content hash.
    """
    declared = list(target_fields.items())
    for start in range(0, len(keys), RUN_RECORDS):
        part = keys[start : start + RUN_RECORDS]
        stored = _stored(source, part)
        problems = Problems()
        values: dict[str, list[Any]] = {name: [] for name, _ in declared}
        payloads: list[bytes] = []
        splits: list[str] = []
        for position, key in enumerate(part, start):
            payload, split = stored[key]
            found = _declared_values(payload, declared, problems, position, key, f"the record of key {key!r}")
            if found is None:
                continue
            for name, value in found.items():
                values[name].append(value)
            payloads.append(payload)
            splits.append(split)
        problems.raise_first()
        contents = [hashing.content_hash(payload) for payload in payloads]
        yield encoded_batch(list(part), splits, payloads, contents, declared, values, source.config)
