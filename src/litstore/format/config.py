"""Building a new store's configuration from ``Store.create``'s arguments, and checking a schema.

Pure: no I/O. Turns what a user passes (a key type, a pydantic model, declared
fields) into the :class:`~litstore.format.models.StoreConfig` and version 0 a store
starts with, and checks a model given to ``litstore.open`` against the one recorded.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic.errors import PydanticUserError

from litstore.errors import InvalidArgumentError, SchemaError
from litstore.format import hashing
from litstore.format.models import SchemaRef, StoreConfig, Version


def initial_version(config: StoreConfig) -> Version:
    """Version 0 of a new store: no records, every split empty."""
    return Version(
        number=0,
        parent=None,
        operation="create",
        created_at=config.created_at,
        counts={name: 0 for name in config.splits.names},
        fingerprint=hashing.fingerprint_hex(0),
    )


def declared_fields(key: str, schema: type[pydantic.BaseModel] | None, fields: dict[str, Any] | None) -> dict[str, str]:
    """The declared fields of a new store: the schema's scalar fields, then ``fields``."""
    from litstore.format import fields as field_format

    declared = field_format.from_model(schema, key) if schema is not None else {}
    declared.update(field_format.declare(fields, key) if fields is not None else {})
    return declared


def resolve_key_type(key: str, key_type: type | None, schema: type[pydantic.BaseModel] | None) -> Literal["str", "int"]:
    """``"str"`` or ``"int"``: ``key_type``, else the schema's annotation of the key field, else str."""
    if key_type is None and schema is not None and key in schema.model_fields:
        key_type = int if schema.model_fields[key].annotation is int else str
    if key_type in (None, str, "str"):
        return "str"
    if key_type in (int, "int"):
        return "int"
    raise InvalidArgumentError(f"key_type must be str or int, got {key_type!r}")


def schema_ref(schema: type[pydantic.BaseModel]) -> SchemaRef:
    """How a store records its schema: a name for people, the JSON schema for checking (never imported)."""
    try:
        json_schema = schema.model_json_schema()
    except PydanticUserError:
        json_schema = {}
    return SchemaRef(qualname=f"{schema.__module__}:{schema.__qualname__}", json_schema=json_schema)


def check_schema(config: StoreConfig, schema: type[pydantic.BaseModel] | None) -> None:
    """Refuse a ``schema`` that is not the one the store records (never import one by name)."""
    declared = config.record_schema
    if schema is None:
        return
    if declared is None:
        raise SchemaError(f"this store declares no schema; open it without schema= (got {schema.__qualname__})")
    if schema_ref(schema).json_schema != declared.json_schema:
        raise SchemaError(
            f"{schema.__qualname__} does not match the schema this store was created with ({declared.qualname})"
        )
