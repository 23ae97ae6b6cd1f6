"""Records outside the store: their JSON form, and JSONL and Parquet files of them.

JSON has no bytes and no arrays, so :func:`to_json` writes a bytes value as the object
``{"$base64": "<standard base64>"}`` and :func:`json_to_bytes` reads that object back as
bytes; numpy arrays, numpy scalars and torch tensors become nested lists and Python
scalars (their dtype and shape are not kept), tuples become lists. A record made of
JSON values and bytes therefore survives export and import unchanged. Parquet files are
written and read by the library (:meth:`Snapshot.to_arrow`, :func:`litstore.sources.parquet`):
bytes stay binary, arrays of one shape a fixed-shape tensor column.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from litstore import sources
from litstore.errors import InvalidArgumentError, UnsupportedValueError
from litstore.snapshot import Key, Snapshot

#: The JSON object that stands for a bytes value: ``{"$base64": "<standard base64>"}``.
BASE64_FIELD = "$base64"


def to_plain(value: Any, *, binary: Callable[[bytes], Any] = bytes, path: str = "") -> Any:
    """``value`` as plain Python (dict, list, str, int, float, bool, None, and ``binary(bytes)``).

    numpy arrays, numpy scalars and torch tensors become (nested) lists and Python
    scalars through their ``tolist()``; tuples become lists; dict keys that are not
    strings become strings. Bytes go through ``binary``: kept for Parquet, or
    :func:`bytes_to_json` for JSON.

    Raises:
        UnsupportedValueError: a value of another type (``path`` names where it is).
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return binary(bytes(value))
    if isinstance(value, dict):
        return {str(k): to_plain(v, binary=binary, path=f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v, binary=binary, path=f"{path}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return to_plain(tolist(), binary=binary, path=path)
    raise UnsupportedValueError(path, value, f"values of type {type(value).__name__} have no JSON or Parquet form")


def bytes_to_json(data: bytes) -> dict[str, str]:
    """``{"$base64": ...}``: how bytes are written to JSON (:func:`json_to_bytes` reads it back)."""
    return {BASE64_FIELD: base64.b64encode(data).decode("ascii")}


def json_to_bytes(obj: dict[str, Any]) -> Any:
    """A ``json.loads`` object hook: ``{"$base64": ...}`` back to bytes, any other object as it is."""
    if obj.keys() == {BASE64_FIELD} and isinstance(obj[BASE64_FIELD], str):
        try:
            return base64.b64decode(obj[BASE64_FIELD], validate=True)
        except binascii.Error as exc:
            raise InvalidArgumentError(f"invalid base64 in a {BASE64_FIELD!r} value: {exc}") from None
    return obj


def to_json(value: Any) -> Any:
    """``value`` in the form ``--json`` and JSONL export print (bytes as ``{"$base64": ...}``)."""
    return to_plain(value, binary=bytes_to_json)


def file_kind(path: Path) -> str:
    """``"jsonl"`` or ``"parquet"``, from the file name.

    Raises:
        InvalidArgumentError: the name ends otherwise.
    """
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("jsonl", "parquet"):
        raise InvalidArgumentError(f"{path}: the file name must end in .jsonl or .parquet")
    return kind


def write_jsonl(path: Path, records: Iterator[dict[str, Any]]) -> None:
    """Write one JSON object a line (see :func:`to_json`)."""
    with path.open("w", encoding="utf-8") as stream:
        for record in records:
            stream.write(json.dumps(to_json(record), ensure_ascii=False) + "\n")


def write_parquet(path: Path, snapshot: Snapshot, keys: set[Key] | None = None) -> None:
    """Write the records of ``snapshot`` (only those with ``keys``, if given), typed by :meth:`Snapshot.to_arrow`."""
    table = snapshot.to_arrow()
    if keys is not None:
        key_column = table.column(snapshot.config.key)
        table = table.filter(pc.is_in(key_column, pa.array(list(keys), key_column.type)))
    pq.write_table(table, path)


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records in a JSONL file (one object a line, ``{"$base64": ...}`` as bytes) or a Parquet file.

    Parquet rows come from :func:`litstore.sources.parquet`.

    Raises:
        InvalidArgumentError: the file cannot be read, or a line is not a JSON object.
    """
    kind = file_kind(path)
    try:
        if kind == "jsonl":
            yield from _jsonl_records(path)
        else:
            yield from sources.parquet(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _jsonl_records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line, object_hook=json_to_bytes)
            except (json.JSONDecodeError, InvalidArgumentError) as exc:
                raise InvalidArgumentError(f"{path} line {number}: {exc}") from None
            if not isinstance(record, dict):
                raise InvalidArgumentError(f"{path} line {number}: a record is a JSON object, got {line.strip()[:40]}")
            yield record
