"""The manifest's format: its columns, the kinds of change a delta records, Parquet bytes.

Columns of a manifest (one row per live record)::

    key           str or int64   the record's key
    key_hash      uint64         hashing.key_hash(key)
    content_hash  binary(16)     hashing.content_hash(canonical encoding)
    split         str            the split the record belongs to
    chunk         str            chunk file, relative to the store root
    row           uint32         item index inside the chunk

then one nullable column per declared field of the version, in declaration order
(see :mod:`litstore.format.fields`).

A delta (``manifests/<v>-<txn>.parquet``) holds what version ``v`` changed, with two
more columns: ``change`` (a :class:`ChangeKind` value) and ``version`` (``v``). The
manifest of version ``v`` is, for each key, the rows of the newest delta up to ``v``
that mentions it, unless those are deletions (see :func:`litstore.query.compose`).
Pure: no I/O beyond bytes in and out.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from litstore.errors import IntegrityError
from litstore.format.fields import arrow_type

MANIFEST_COLUMNS = ("key", "key_hash", "content_hash", "split", "chunk", "row")


class ChangeKind(StrEnum):
    """What a delta row says happened to its key in that version."""

    ADDED = "added"  # a key the parent did not have
    REPLACED = "replaced"  # new content for a key the parent had
    MOVED = "moved"  # same content, rewritten by a chunk copy-on-write
    DELETED = "deleted"  # the key left the version


def schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of a manifest whose keys are ``key_type`` (``"str"``/``"int"``) with declared ``fields``."""
    columns = [
        ("key", pa.string() if key_type == "str" else pa.int64()),
        ("key_hash", pa.uint64()),
        ("content_hash", pa.binary(16)),
        ("split", pa.string()),
        ("chunk", pa.string()),
        ("row", pa.uint32()),
    ]
    columns.extend((name, arrow_type(type_name)) for name, type_name in (fields or {}).items())
    return pa.schema(columns)


def columns(fields: dict[str, str] | None = None) -> list[str]:
    """The names of a manifest's columns: the fixed ones, then the declared ``fields``."""
    return [*MANIFEST_COLUMNS, *(fields or {})]


def delta_schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    return schema(key_type, fields).append(pa.field("change", pa.string())).append(pa.field("version", pa.int64()))


def empty(key_type: str, fields: dict[str, str] | None = None) -> pa.Table:
    return schema(key_type, fields).empty_table()


def make_delta(
    key_type: str,
    version: int,
    columns: dict[str, Any],
    changes: Sequence[ChangeKind],
    fields: dict[str, str] | None = None,
) -> pa.Table:
    """A delta table from manifest ``columns`` (fixed ones and ``fields``) and the change of each row."""
    count = len(columns["key"])
    target = schema(key_type, fields)
    arrays = [pa.array(columns[field.name], type=field.type) for field in target]
    arrays.append(pa.array([str(change) for change in changes], type=pa.string()))
    arrays.append(pa.array([version] * count, type=pa.int64()))
    return pa.Table.from_arrays(arrays, schema=delta_schema(key_type, fields))


def to_parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def from_parquet(
    data: bytes, path: str, key_type: str, delta: bool, fields: dict[str, str] | None = None
) -> pa.Table:
    """Read a manifest (``delta=False``) or delta file, checked against its schema (with ``fields``).

    Raises:
        IntegrityError: the file at ``path`` is damaged or does not have the manifest's columns.
    """
    expected = delta_schema(key_type, fields) if delta else schema(key_type, fields)
    try:
        # Reading the repetitive string columns as dictionaries, then decoding them, is
        # about 7x faster than letting Parquet decode them row by row.
        table = pq.read_table(io.BytesIO(data), read_dictionary=["split", "chunk"])
        plain = [
            field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
            for field in table.schema
        ]
        table = table.cast(pa.schema(plain)).select(list(expected.names)).cast(expected)
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
    if delta:
        kinds = set(table.column("change").unique().to_pylist())
        if not kinds <= {str(kind) for kind in ChangeKind}:
            raise IntegrityError(f"manifest file {path} is damaged: unknown change kinds {sorted(map(str, kinds))}")
    return table
