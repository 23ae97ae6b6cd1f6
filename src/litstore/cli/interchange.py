"""Records outside the store: their JSON form, and JSONL and Parquet files of them.

JSON has no bytes, no arrays and only str object keys, so :func:`to_json` writes two
kinds of marker objects, each an object with one key, and the ``json.loads`` object hook
:func:`json_object_hook` reads them back:

- ``{"$base64": "<standard base64>"}`` is a bytes value;
- ``{"$media": {"format": "image:png", "base64": "<standard base64>"}}`` is a media
  value (``litdata.Image``, ...) in its stored form: litdata's data format and the
  stored bytes (the PNG file), read back as a :class:`litstore.Media` that stores the
  same bytes (checked to decode, as every read will decode it);
- ``{"$map": [[key, value], ...]}`` is a dict written as its items: a dict with a key
  that is not a str (``{1: "a", "1": "b"}`` stays two entries; ``None``, float, bool and
  bytes keys keep their type), and a dict whose only key is ``"$base64"``, ``"$media"``
  or ``"$map"`` (so a stored ``{"$base64": "aGk="}`` comes back a dict, not bytes).

Any object whose only key is ``"$base64"``, ``"$media"`` or ``"$map"`` is a marker, and
one of the wrong shape is refused. Records are exported with their media left encoded
(:func:`litstore.keeping_media`): nothing is decoded. numpy arrays, numpy scalars and torch tensors become nested lists
and Python scalars (their dtype and shape are not kept), tuples become lists. A record
made of JSON values, bytes and dicts with any keys therefore survives export and import
unchanged. Parquet files are written and read by the library (:meth:`Snapshot.to_arrow`,
:func:`litstore.sources.parquet`): bytes stay binary, arrays of one shape a fixed-shape
tensor column, and a field whose name is not a str gets back its name from the file's
schema metadata (:func:`litstore.export.field_names`).

JSONL is read by :func:`litstore.sources.jsonl` itself (JSON Lines): lines end at ``\n``
only (a lone ``\r``, ``\u2028`` or form feed inside a line is part of it), each line is
strict UTF-8, and lines of whitespace alone are skipped. A string in an image field
(``image`` unless told otherwise) is the path of an image file relative to the file's
folder, read, checked to decode and stored as LitData's image recipe stores it; a path
that names no file, or leads out of the folder, refuses the line.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from litstore import export, sources
from litstore.cli import display
from litstore.errors import IntegrityError, InvalidArgumentError, UnsupportedValueError
from litstore.format.stored_media import Media
from litstore.snapshot import Key, Snapshot

#: The JSON object that stands for a bytes value: ``{"$base64": "<standard base64>"}``.
BASE64_FIELD = "$base64"

#: The JSON object that stands for a media value: ``{"$media": {"format": ..., "base64": ...}}``.
MEDIA_FIELD = "$media"

#: The JSON object that stands for a dict by its items: ``{"$map": [[key, value], ...]}``.
MAP_FIELD = "$map"

_MARKERS = frozenset({BASE64_FIELD, MEDIA_FIELD, MAP_FIELD})


def to_plain(value: Any, *, json_form: bool = False, path: str = "") -> Any:
    """``value`` as plain Python: dict, list, str, int, float, bool, None and bytes, or its JSON form.

    numpy arrays, numpy scalars and torch tensors become (nested) lists and Python
    scalars through their ``tolist()``; tuples become lists. With ``json_form``, bytes and
    the dicts JSON cannot hold become markers (see the module docstring).

    Raises:
        UnsupportedValueError: a value of another type (``path`` names where it is).
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes_to_json(bytes(value)) if json_form else bytes(value)
    if type(value) is Media:
        if not json_form:
            raise UnsupportedValueError(path, value, "media values have no plain form; use the JSON form")
        return {MEDIA_FIELD: {"format": value.format, "base64": base64.b64encode(value.data).decode("ascii")}}
    if isinstance(value, dict):
        plain = {k: to_plain(v, json_form=json_form, path=f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if json_form and (not _all_str(plain) or (len(plain) == 1 and plain.keys() <= _MARKERS)):
            return {MAP_FIELD: [[to_plain(k, json_form=True, path=path), v] for k, v in plain.items()]}
        return plain
    if isinstance(value, (list, tuple)):
        return [to_plain(v, json_form=json_form, path=f"{path}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return to_plain(tolist(), json_form=json_form, path=path)
    raise UnsupportedValueError(path, value, f"values of type {type(value).__name__} have no JSON or Parquet form")


def _all_str(mapping: dict[Any, Any]) -> bool:
    return all(isinstance(key, str) for key in mapping)


def bytes_to_json(data: bytes) -> dict[str, str]:
    """``{"$base64": ...}``: how bytes are written to JSON (:func:`json_object_hook` reads it back)."""
    return {BASE64_FIELD: base64.b64encode(data).decode("ascii")}


def json_object_hook(obj: dict[str, Any]) -> Any:
    """The ``json.loads`` object hook of the JSON form: markers (see the module docstring) back to bytes and dicts.

    Raises:
        InvalidArgumentError: an object whose only key is a marker's but whose value is not that marker's.
    """
    if len(obj) != 1 or not obj.keys() <= _MARKERS:
        return obj
    if MEDIA_FIELD in obj:
        return _media(obj[MEDIA_FIELD])
    if BASE64_FIELD in obj:
        encoded = obj[BASE64_FIELD]
        if not isinstance(encoded, str):
            raise InvalidArgumentError(f"a {BASE64_FIELD!r} object holds a base64 string, not {_brief(encoded)}")
        try:
            return base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise InvalidArgumentError(f"invalid base64 in a {BASE64_FIELD!r} value: {exc}") from None
    items = obj[MAP_FIELD]
    if not isinstance(items, list) or not all(isinstance(item, list) and len(item) == 2 for item in items):
        raise InvalidArgumentError(f"a {MAP_FIELD!r} object holds a list of [key, value] pairs, not {_brief(items)}")
    mapping: dict[Any, Any] = {}
    for key, value in items:
        try:
            if key in mapping:
                raise InvalidArgumentError(f"a {MAP_FIELD!r} object has the key {key!r} twice")
        except TypeError:
            raise InvalidArgumentError(f"a {MAP_FIELD!r} key cannot be a list or an object: {_brief(key)}") from None
        mapping[key] = value
    return mapping


def _media(described: Any) -> Media:
    """The :class:`Media` a ``$media`` marker describes, checked to decode."""
    if not isinstance(described, dict) or set(described) != {"format", "base64"}:
        raise InvalidArgumentError(
            f"a {MEDIA_FIELD!r} object holds {{'format': ..., 'base64': ...}}, not {_brief(described)}"
        )
    kind, encoded = described["format"], described["base64"]
    if not isinstance(kind, str) or not isinstance(encoded, str):
        raise InvalidArgumentError(
            f"a {MEDIA_FIELD!r} object holds a format and base64 as strings, not {_brief(described)}"
        )
    try:
        media = Media(kind, base64.b64decode(encoded, validate=True))
    except binascii.Error as exc:
        raise InvalidArgumentError(f"invalid base64 in a {MEDIA_FIELD!r} value: {exc}") from None
    try:
        media.decode()
    except IntegrityError as exc:
        raise InvalidArgumentError(f"a {kind!r} media value does not decode, so no read could use it: {exc}") from None
    return media


def _brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 60 else text[:59] + "…"


def to_json(value: Any) -> Any:
    """``value`` in the form ``--json`` and JSONL export print (see the module docstring for the markers)."""
    return to_plain(value, json_form=True)


def file_kind(path: Path) -> str:
    """``"jsonl"`` or ``"parquet"``, from the file name.

    Raises:
        InvalidArgumentError: the name ends otherwise.
    """
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("jsonl", "parquet"):
        raise InvalidArgumentError(f"{path}: the file name must end in .jsonl or .parquet")
    return kind


def write_jsonl(path: Path, records: Iterator[dict[Any, Any]]) -> None:
    """Write one JSON object a line (see :func:`to_json`; control characters as ``\\uXXXX`` escapes).

    Read ``records`` with their media left encoded (:func:`litstore.keeping_media`) to
    export them as ``$media`` markers.
    """
    with path.open("w", encoding="utf-8") as stream:
        for record in records:
            stream.write(display.json_text(to_json(record)) + "\n")


def write_parquet(path: Path, snapshot: Snapshot, keys: set[Key] | None = None) -> None:
    """Write the records of ``snapshot`` (only those with ``keys``, if given), typed by :meth:`Snapshot.to_arrow`."""
    table = snapshot.to_arrow()
    if keys is not None:
        key_column = table.column(snapshot.config.key)
        table = table.filter(pc.is_in(key_column, pa.array(list(keys), key_column.type)))
    pq.write_table(table, path)


def read_records(
    path: Path, *, image_fields: tuple[str, ...] = ("image",), allow_outside: bool = False
) -> Iterator[dict[Any, Any]]:
    """The records in a JSONL file (see the module docstring) or a Parquet file.

    JSONL lines come from :func:`litstore.sources.jsonl`, which reads the string values
    of ``image_fields`` as image paths relative to the file's folder (``allow_outside``:
    also paths out of it). Parquet rows come from :func:`litstore.sources.parquet`, with
    the field names that are not str given back (:func:`litstore.export.field_names`).

    Raises:
        InvalidArgumentError: the file cannot be read.
        InvalidRecordError: a line is not a JSON object, or an image path names no image
            file in the folder or one that does not decode (the message names the line).
    """
    kind = file_kind(path)
    try:
        if kind == "jsonl":
            yield from sources.jsonl(
                path, image_fields=image_fields, allow_outside=allow_outside, object_hook=json_object_hook
            )
        else:
            yield from _parquet_records(path)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror or exc}") from None


def _parquet_records(path: Path) -> Iterator[dict[Any, Any]]:
    try:
        names = export.field_names(pq.read_schema(path))
    except pa.ArrowInvalid as exc:
        raise InvalidArgumentError(f"cannot read {path} as Parquet: {exc}") from None
    for record in sources.parquet(path):
        yield {names.get(column, column): value for column, value in record.items()} if names else record
