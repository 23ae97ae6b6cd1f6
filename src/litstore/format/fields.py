"""Declared fields: record fields a store copies into its manifest as typed columns.

A store may declare scalar fields of its records (``fields={"label": int}`` or the
scalar fields of its pydantic ``schema=``). Every write checks each record's value
of each declared field, and the manifest carries one column per field, so
``store.sql`` and ``snapshot.select(where=...)`` can filter records by them without
reading any chunk.

In metadata a declared set is a ``dict`` of field name to type name: ``"int64"``,
``"float64"``, ``"string"`` or ``"bool"``, with a trailing ``"?"`` when the field may
be missing or ``None`` (a null in the manifest).

Names are compared without regard to case, with the manifest's own columns and with
each other: DuckDB, which runs ``store.sql`` and ``where=``, reads identifiers without
regard to case and renames a column whose name differs from another's only by case,
so a field ``Split`` beside the manifest's ``split`` would make ``where="Split <> 'x'"``
filter by the split column (found by a hostile review: held-out records streamed).
Pure: no I/O.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from litstore.errors import InvalidArgumentError

#: Arrow type of each field type name.
ARROW_TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}
_PYTHON_TYPES: dict[Any, str] = {int: "int64", float: "float64", str: "string", bool: "bool"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Manifest and delta columns a field may not shadow, in any case (see the module docstring).
RESERVED = frozenset({"key", "key_hash", "content_hash", "split", "chunk", "row", "change", "version"})
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a declared field type (``"int64?"`` -> ``int64``)."""
    return ARROW_TYPES[type_name.removesuffix("?")]


#: Python's names for the field types, accepted as the CLI's ``--field label:int`` accepts them.
_ALIASES = {"int": "int64", "float": "float64", "str": "string"}


def check_type_name(type_name: str) -> str:
    """The field type ``type_name`` names (``"int"`` is ``"int64"``), or ``ValueError`` saying why not."""
    base = type_name.removesuffix("?")
    base = _ALIASES.get(base, base)
    if base not in ARROW_TYPES:
        raise ValueError(
            f"field type {type_name!r} is not one of {sorted(ARROW_TYPES)} or {sorted(_ALIASES)} (optionally with '?')"
        )
    return base + type_name[len(type_name.removesuffix("?")) :]


def check_name(name: str, key: str) -> str:
    """Return ``name`` if it can be a declared field of a store keyed by ``key``, else raise ``ValueError``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"field name {name!r} must be 1-64 letters, digits or '_', not starting with a digit")
    if name.lower() in RESERVED:
        if name in RESERVED:
            raise ValueError(f"field name {name!r} is a manifest column already; rename the field")
        raise ValueError(
            f"field name {name!r} differs from the manifest column {name.lower()!r} only by case, and SQL "
            "(store.sql, where=) reads names without regard to case; rename the field"
        )
    if name == key:
        raise ValueError(f"field {name!r} is the store's key, which the manifest holds already")
    return name


def check_distinct(names: Iterable[str]) -> None:
    """Raise ``ValueError`` if two of ``names`` differ only by case (SQL could not tell them apart)."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise ValueError(
                f"fields {other!r} and {name!r} differ only by case, and SQL (store.sql, where=) reads names "
                "without regard to case; rename one of them"
            )


def already_declared(new: Iterable[str], declared: Iterable[str]) -> list[str]:
    """The names of ``new`` that are one of ``declared``, ignoring case (see :func:`check_distinct`)."""
    known = {name.lower() for name in declared}
    return [name for name in new if name.lower() in known]


def declare(fields: dict[str, Any], key: str) -> dict[str, str]:
    """The declared set in metadata form from ``{"name": int | str | float | bool | Optional[...] | "int64?"}``.

    Raises:
        InvalidArgumentError: a name or type cannot be declared.
    """
    if not isinstance(fields, dict):
        raise InvalidArgumentError(f"fields must be a dict of field name to type, not {type(fields).__name__}")
    declared: dict[str, str] = {}
    for name, annotation in fields.items():
        try:
            check_name(name, key)
            type_name = type_of(annotation)
        except ValueError as exc:
            raise InvalidArgumentError(f"cannot declare field {name!r}: {exc}") from None
        if type_name is None:
            raise InvalidArgumentError(
                f"cannot declare field {name!r} of type {annotation!r}: declared fields are int, float, str, bool "
                "or Optional of one of them"
            )
        declared[name] = type_name
    try:
        check_distinct(declared)
    except ValueError as exc:
        raise InvalidArgumentError(f"cannot declare fields: {exc}") from None
    return declared


def type_of(annotation: Any) -> str | None:
    """The field type name of a Python annotation, or ``None`` if it is not a declarable scalar.

    Raises:
        ValueError: ``annotation`` is a string that is not a field type name.
    """
    if isinstance(annotation, str):
        return check_type_name(annotation)
    if annotation in _PYTHON_TYPES:
        return _PYTHON_TYPES[annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        if len(members) == 1 and len(typing.get_args(annotation)) == 2 and members[0] in _PYTHON_TYPES:
            return _PYTHON_TYPES[members[0]] + "?"
    return None


def from_model(model: Any, key: str) -> dict[str, str]:
    """The scalar fields of a pydantic model (other than the key) as a declared set."""
    declared: dict[str, str] = {}
    for name, info in model.model_fields.items():
        if name == key or name.lower() in RESERVED or not _NAME.fullmatch(name):
            continue
        type_name = type_of(info.annotation)
        if type_name is not None:
            declared[name] = type_name
    return declared


def check_value(value: Any, type_name: str) -> tuple[Any, str | None]:
    """``(value as stored, None)`` if ``value`` fits ``type_name``, else ``(None, why not)``.

    ``bool`` is not an int; an int is a valid float. ``None`` fits only an optional type.
    """
    if value is None:
        return None, None if type_name.endswith("?") else "None, but the field is not Optional"
    base = type_name.removesuffix("?")
    kind = type(value)
    if base == "int64":
        if kind is not bool and isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                return int(value), None
            return None, f"{value} is outside the int64 range"
    elif base == "float64":
        if kind is not bool and isinstance(value, (int, float)):
            return float(value), None
    elif base == "string":
        if isinstance(value, str):
            return str(value), None
    elif kind is bool:
        return value, None
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return None, f"expected {base}, got {kind.__name__} {shown}"
