"""Checking, encoding and hashing a batch of input records before anything is written.

:func:`prepare` looks at every record of a batch and either returns a
:class:`Batch` ready to write or raises one :class:`~litstore.errors.InvalidRecordError`
that names the offending positions and keys. Nothing is written before it returns,
so a rejected batch leaves the store exactly as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pydantic
from tqdm.auto import tqdm

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
from litstore.format import codec, hashing
from litstore.format import fields as field_format
from litstore.format.models import FieldSplit, HashSplit, StoreConfig

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# The order in which problems are reported when a batch has several kinds.
_PROBLEM_ORDER: tuple[type[InvalidRecordError], ...] = (KeyFieldError, DuplicateKeyError, SchemaError, SplitError)


@dataclass
class Batch:
    """Validated records, encoded and hashed, in input order.

    ``fields`` holds the value of each declared field of each record (an Arrow array
    per field, typed as its manifest column).
    """

    keys: list[Any]
    key_hashes: np.ndarray
    splits: list[str]
    payloads: list[bytes]
    content_hashes: list[bytes]
    fields: dict[str, pa.Array] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    def select(self, keep: np.ndarray) -> Batch:
        """The records where ``keep`` is true, in order."""
        indices = np.flatnonzero(keep).tolist()
        return Batch(
            keys=[self.keys[i] for i in indices],
            key_hashes=self.key_hashes[keep],
            splits=[self.splits[i] for i in indices],
            payloads=[self.payloads[i] for i in indices],
            content_hashes=[self.content_hashes[i] for i in indices],
            fields={name: values.filter(pa.array(keep, pa.bool_())) for name, values in self.fields.items()},
        )


class _Problems:
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
    return runs[0] if runs else Batch([], np.empty(0, np.uint64), [], [], [])


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
    _check_batch(records)
    declared = list((config.fields if fields is None else fields).items())
    values: dict[str, list[Any]] = {name: [] for name, _ in declared}
    problems = _Problems()
    keys: list[Any] = []
    splits: list[str] = []
    payloads: list[bytes] = []
    contents: list[bytes] = []
    size = 0
    first_position: dict[Any, int] = {}
    rule = config.splits
    by_key = isinstance(rule, HashSplit)  # splits of a run are then computed at once, from its keys
    content_hash = hashing.content_hash
    encode = codec.encode
    key_field = config.key
    str_keys = config.key_type == "str"
    items = tqdm(records, desc="encoding", unit="rec") if progress else records
    for position, raw in enumerate(items):
        if model is None and type(raw) is dict:
            record = raw
        else:
            try:
                record = _as_mapping(raw, model)
            except pydantic.ValidationError as exc:
                key = raw.get(config.key) if isinstance(raw, Mapping) else None
                problems.add(SchemaError, position, key, f"does not fit the schema: {first_problem(exc, 'record')}")
                continue
            except TypeError as exc:
                problems.add(SchemaError, position, None, str(exc))
                continue
        key = record.get(key_field)
        if not (str_keys and type(key) is str and key.isascii()):  # the common case needs no more checks
            key, reason = _checked_key(record, config)
            if reason is not None:
                problems.add(KeyFieldError, position, None, reason)
                continue
            if type(record[key_field]) is not type(key):  # np.int64(5) is stored as the key 5 it stands for
                record = {**record, key_field: key}
        earlier = first_position.setdefault(key, position)
        if earlier != position:
            problems.add(DuplicateKeyError, position, key, f"same key as position {earlier}")
            continue
        try:
            split = "" if by_key else rule.assign(key, record)
        except KeyError:
            assert isinstance(rule, FieldSplit)
            problems.add(SplitError, position, key, f"no split field {rule.field!r}")
            continue
        except ValueError as exc:
            problems.add(SplitError, position, key, f"unknown split {exc.args[0]!r}, expected one of {rule.names}")
            continue
        try:
            payload = encode(record)
        except UnsupportedValueError as exc:
            problems.add(SchemaError, position, key, str(exc))
            continue
        if declared and not _extract_fields(record, declared, values, problems, position, key):
            continue
        if problems.found:
            continue  # keep looking for problems, but stop building output
        keys.append(key)
        splits.append(split)
        payloads.append(payload)
        contents.append(content_hash(payload))
        size += len(payload)
        if run_bytes is not None and size >= run_bytes:
            yield _batch(keys, _hash_splits(rule, keys) if by_key else splits, payloads, contents, declared, values)
            keys, splits, payloads, contents, size = [], [], [], [], 0
            values = {name: [] for name, _ in declared}
            first_position.clear()
    problems.raise_first()
    if keys or run_bytes is None:
        yield _batch(keys, _hash_splits(rule, keys) if by_key else splits, payloads, contents, declared, values)


def _hash_splits(rule: object, keys: list[Any]) -> list[str]:
    assert isinstance(rule, HashSplit)
    return rule.assign_all(keys)


def _batch(
    keys: list[Any],
    splits: list[str],
    payloads: list[bytes],
    contents: list[bytes],
    declared: list[tuple[str, str]],
    values: dict[str, list[Any]],
) -> Batch:
    arrays = {name: pa.array(values[name], field_format.arrow_type(type_name)) for name, type_name in declared}
    return Batch(keys, hashing.key_hashes(keys), splits, payloads, contents, arrays)


def _extract_fields(
    record: dict[str, Any],
    declared: list[tuple[str, str]],
    values: dict[str, list[Any]],
    problems: _Problems,
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
