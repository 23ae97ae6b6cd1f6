"""Records out as Arrow, pandas and polars: what ``VersionReader.to_arrow`` and friends return.

A store has no fixed schema, so each column's Arrow type is inferred from the values
it holds (the key field is always the first column, the others follow in name order):

- ``None``, bool, int, float, str and bytes become Arrow scalars (``bytes`` -> binary);
  a column mixing ints and floats becomes float64;
- dicts become structs, lists and tuples become lists, numpy scalars keep their dtype;
- numpy arrays (and torch tensors, converted to numpy) become a fixed-shape tensor
  column (``pyarrow.FixedShapeTensorArray``) when every row of the column has the same
  shape and dtype, else nested lists of the dtype;
- media values (``litdata.Image`` and friends) keep their stored bytes: a column of
  them is a struct of ``format`` (litdata's data format, such as ``"image:png"``) and
  ``data`` (the bytes as stored: the PNG file), marked by the field metadata
  ``{"litstore.media": "stored"}`` (:data:`MEDIA_METADATA`); records are read for
  export with their media left encoded (:func:`litstore.keeping_media`), so nothing
  is decoded, and :func:`media_rows` (which :func:`litstore.sources.parquet` uses)
  gives the column back as :class:`~litstore.Media` values that store the same bytes;
- a column Arrow cannot type (mixed types such as ints and strings, dicts with non-str
  keys, ints past 64 bits, lone surrogates, bfloat16 tensors, ...) falls back to
  **binary**: each value is its canonical litstore encoding (decode it with
  :func:`litstore.format.codec.decode`), and the column's field metadata holds
  ``{"litstore.encoding": "msgpack"}``. Export therefore never fails on a stored record.

Field names that are not strings (a store keeps int, float, bool, bytes and ``None``
field names as they are) get columns of their own, never merged with a string field of
the same text nor dropped: the column of such a name is ``<int 1>``, ``<None>``,
``<bytes b'x'>`` (:func:`column_name`), with `` #2``, `` #3``, ... appended should a string
field of the batch already have that name. The table's schema metadata then records, under
``litstore.field_names`` (:data:`FIELD_NAMES_METADATA`), which name each such column
stands for, and :func:`field_names` reads it back; a Parquet file written from the table
keeps it. ``{1: "a", "1": "b"}`` is therefore two columns, ``<int 1>`` and ``1``.

A field a record lacks is null in that record's row. Types are inferred per batch, so
two batches of :func:`iter_batches` may type a column differently (a column all null in
one batch, for instance, or a column suffixed `` #2`` in one batch only); :func:`to_arrow`
unifies them and, where Arrow cannot, converts the whole version as one batch so that the
table has one schema.

pandas and polars are optional: importing them happens only in :func:`to_pandas` and
:func:`to_polars`, which say what to install when they are missing.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from litstore.errors import InvalidArgumentError, MissingDependencyError
from litstore.format import codec
from litstore.format.stored_media import Media, keeping_media

if TYPE_CHECKING:
    import pandas
    import polars

    from litstore.read.version import VersionReader

#: Field metadata marking a column whose values are canonical litstore encodings.
ENCODING_METADATA = {b"litstore.encoding": b"msgpack"}

#: Field metadata marking a column of media in their stored form (see the module docstring).
MEDIA_METADATA = {b"litstore.media": b"stored"}

#: The Arrow type of a media column: litdata's data format and the stored bytes.
MEDIA_TYPE = pa.struct([pa.field("format", pa.string(), nullable=False), pa.field("data", pa.binary(), nullable=False)])

#: Schema metadata naming the field each column of a non-str field name stands for (see the module docstring).
FIELD_NAMES_METADATA = b"litstore.field_names"

#: Rows per batch unless the caller says otherwise.
DEFAULT_BATCH_SIZE = 65536

# What pyarrow raises when values do not fit one Arrow type (ArrowInvalid is a ValueError, ArrowTypeError a
# TypeError, ArrowNotImplementedError a NotImplementedError; a lone surrogate raises UnicodeEncodeError).
_ARROW_FAILURES = (ValueError, TypeError, NotImplementedError, OverflowError)


def iter_batches(
    snapshot: VersionReader, batch_size: int = DEFAULT_BATCH_SIZE, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of ``snapshot`` as Arrow record batches of at most ``batch_size`` rows, in storage order.

    Memory holds one batch of records at a time, whatever the size of the version.

    ``columns`` names fields whose names are str (see :func:`to_arrow`).

    Raises:
        InvalidArgumentError: ``batch_size`` is not a positive int, or ``columns`` is not a list of names.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive int, not {batch_size!r}")
    names = _selected(snapshot.config.key, columns)
    return _batches(keeping_media(snapshot.values()), snapshot.config.key, names, batch_size)


def to_arrow(snapshot: VersionReader, columns: Sequence[str] | None = None) -> pa.Table:
    """Every record of ``snapshot`` as one Arrow table (see the module docstring for the types and column names).

    ``columns`` names fields whose names are str; without it, every field has a column,
    whatever the type of its name.

    Raises:
        InvalidArgumentError: a column in ``columns`` is a field no record has.
    """
    key = snapshot.config.key
    names = _selected(key, columns)
    batches = list(_batches(keeping_media(snapshot.values()), key, names, DEFAULT_BATCH_SIZE))
    table = _concatenated(batches) if batches else _empty(snapshot, names)
    if table is None:
        # The batches typed or named a column differently: type and name it once from all its values.
        del batches
        table = pa.Table.from_batches(
            list(_batches(keeping_media(snapshot.values()), key, names, max(len(snapshot), 1)))
        )
    if names is not None:
        unseen = {name for name in names if table.column(name).null_count == len(table)}
        for record in keeping_media(snapshot.values()) if unseen else ():
            unseen -= set(record)
            if not unseen:
                break
        if unseen:
            raise InvalidArgumentError(
                f"no record of version {snapshot.version.number} has the field(s) {sorted(unseen)}"
            )
    return table


def to_pandas(snapshot: VersionReader, columns: Sequence[str] | None = None) -> pandas.DataFrame:
    """Every record as a pandas ``DataFrame``; tensor columns hold one numpy array per row.

    Columns are named as :func:`to_arrow` names them (``<int 1>`` for the field ``1``).

    Raises:
        MissingDependencyError: pandas is not installed.
    """
    _require("pandas")
    table = to_arrow(snapshot, columns)
    tensors = {name: tensor_rows(table.column(name)) for name in table.column_names if _is_tensor(table, name)}
    frame = table.drop_columns(list(tensors)).to_pandas()
    for name, rows in tensors.items():
        frame.insert(table.column_names.index(name), name, _object_series(rows, frame.index))
    return frame


def to_polars(snapshot: VersionReader, columns: Sequence[str] | None = None) -> polars.DataFrame:
    """Every record as a polars ``DataFrame``; tensor columns become polars ``Array`` columns of their shape.

    Columns are named as :func:`to_arrow` names them (``<int 1>`` for the field ``1``).

    Raises:
        MissingDependencyError: polars is not installed.
    """
    polars_module = _require("polars")
    table = to_arrow(snapshot, columns)
    for name in table.column_names:
        if _is_tensor(table, name):
            nested = pa.chunked_array([_nested_storage(chunk) for chunk in table.column(name).chunks])
            table = table.set_column(table.column_names.index(name), name, nested)
    frame: polars.DataFrame = polars_module.from_arrow(table)
    return frame


def tensor_rows(column: pa.ChunkedArray | pa.Array) -> list[np.ndarray | None]:
    """The rows of a fixed-shape tensor column as numpy arrays (``None`` where null)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    rows: list[np.ndarray | None] = []
    for chunk in chunks:
        shape = tuple(chunk.type.shape)
        arrays = _flat_values(chunk).to_numpy(zero_copy_only=False).reshape((len(chunk), *shape))
        valid = chunk.is_valid().to_numpy(zero_copy_only=False).tolist()
        rows.extend(array.copy() if ok else None for array, ok in zip(arrays, valid, strict=True))
    return rows


def media_rows(column: pa.ChunkedArray | pa.Array) -> list[Media | None]:
    """The rows of a media column (:data:`MEDIA_TYPE`) as :class:`~litstore.Media` values (``None`` where null)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    rows: list[Media | None] = []
    for chunk in chunks:
        valid = chunk.is_valid().to_pylist()
        formats = chunk.field("format").to_pylist()
        datas = chunk.field("data").to_pylist()
        rows.extend(
            Media(kind, data) if ok and kind is not None and data is not None else None
            for kind, data, ok in zip(formats, datas, valid, strict=True)
        )
    return rows


def is_media_field(field: pa.Field) -> bool:
    """Whether ``field`` is a media column as this module writes it (its type and metadata)."""
    return bool(field.metadata == MEDIA_METADATA and field.type == MEDIA_TYPE)


def record_batch(records: Sequence[dict[Any, Any]], names: Sequence[Any]) -> pa.RecordBatch:
    """``records`` as one batch with a column for each field in ``names`` (a field a record lacks is null).

    A name that is not a str gets the column :func:`column_name` gives it (suffixed where a
    str name in ``names`` has that text), recorded in the schema metadata (see the module docstring).
    """
    fields, arrays = [], []
    columns = _column_names(names)
    for name, column in zip(names, columns, strict=True):
        array, metadata = _column([record.get(name) for record in records])
        fields.append(pa.field(column, array.type, metadata=metadata))
        arrays.append(array)
    renamed = {column: name for name, column in zip(names, columns, strict=True) if not isinstance(name, str)}
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=_names_metadata(renamed)))


def column_name(name: Any) -> str:
    """The column of field ``name``: a str name as it is, any other ``<TYPE REPR>`` (``<int 1>``), ``<None>``."""
    if isinstance(name, str):
        return name
    return "<None>" if name is None else f"<{type(name).__name__} {name!r}>"


def field_names(schema: pa.Schema) -> dict[str, Any]:
    """The non-str field names the columns of ``schema`` stand for (``{"<int 1>": 1}``); ``{}`` if none.

    ``schema`` is that of a table or batch from this module, or of a Parquet file written from one.

    Raises:
        InvalidArgumentError: the ``litstore.field_names`` metadata is not what this module writes.
    """
    raw = (schema.metadata or {}).get(FIELD_NAMES_METADATA)
    if raw is None:
        return {}
    what = f"the schema's {FIELD_NAMES_METADATA.decode()} metadata"
    try:
        described = json.loads(raw)
        names = {column: _field_name(kind, text) for column, (kind, text) in described.items()}
    except (ValueError, TypeError, AttributeError) as exc:  # JSONDecodeError and a bad repr are ValueErrors
        raise InvalidArgumentError(f"{what} is not a map of column to [type, repr]: {exc}") from None
    if not set(names) <= set(schema.names):
        raise InvalidArgumentError(f"{what} names columns the schema lacks: {sorted(set(names) - set(schema.names))}")
    return names


def _names_metadata(renamed: dict[str, Any]) -> dict[bytes, bytes] | None:
    """Schema metadata recording the field each renamed column stands for (``None`` when none is)."""
    if not renamed:
        return None
    described = {column: [_type_name(name), repr(name)] for column, name in renamed.items()}
    return {FIELD_NAMES_METADATA: json.dumps(described, sort_keys=True).encode()}


def _type_name(name: Any) -> str:
    return "None" if name is None else type(name).__name__


def _field_name(kind: str, text: str) -> Any:
    """The field name whose type is ``kind`` and whose ``repr`` is ``text``."""
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)  # float's repr of nan and inf reads back through float(), not literal_eval
    if kind == "bool" and text in ("True", "False"):
        return text == "True"
    if kind == "None" and text == "None":
        return None
    if kind == "bytes" and text[:2] in ("b'", 'b"'):
        try:
            value = ast.literal_eval(text)
        except SyntaxError as exc:
            raise ValueError(f"{text!r} is not a bytes repr") from exc
        if isinstance(value, bytes):
            return value
    raise ValueError(f"{text!r} is not the repr of a {kind} field name")


# -- internals -------------------------------------------------------------------


def _selected(key: str, columns: Sequence[str] | None) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(name, str) for name in columns):
        raise InvalidArgumentError(f"columns must be a list of field names, not {columns!r}")
    return list(dict.fromkeys([key, *columns]))


def _batches(
    records: Iterable[dict[str, Any]], key: str, names: list[str] | None, batch_size: int
) -> Iterator[pa.RecordBatch]:
    batch: list[dict[str, Any]] = []
    for record in records:
        batch.append(record)
        if len(batch) == batch_size:
            yield record_batch(batch, names or _names(batch, key))
            batch = []
    if batch:
        yield record_batch(batch, names or _names(batch, key))


def _names(records: Sequence[dict[Any, Any]], key: str) -> list[Any]:
    """The key field, then every other field of ``records`` in the order of their column names."""
    seen: set[Any] = set()
    for record in records:
        seen.update(record)
    seen.discard(key)
    return [key, *sorted(seen, key=lambda name: (column_name(name), not isinstance(name, str), _type_name(name)))]


def _column_names(names: Sequence[Any]) -> list[str]:
    """The column of each field in ``names``: :func:`column_name`, with `` #2``, ... where a str name has that text."""
    taken = {name for name in names if isinstance(name, str)}
    columns = []
    for name in names:
        column = column_name(name)
        if not isinstance(name, str):
            base, number = column, 2
            while column in taken:
                column, number = f"{base} #{number}", number + 1
            taken.add(column)
        columns.append(column)
    return columns


def _concatenated(batches: list[pa.RecordBatch]) -> pa.Table | None:
    """The batches as one table, or ``None`` where they typed or named a column in ways that do not unify."""
    for name in {name for batch in batches for name in batch.schema.names}:
        fields = [batch.schema.field(name) for batch in batches if name in batch.schema.names]
        typed = {field.metadata == ENCODING_METADATA for field in fields if field.type != pa.null()}
        if len(typed) > 1:  # raw bytes in one batch, canonical encodings in another
            return None
    renamed: dict[str, Any] = {}
    plain: set[str] = set()
    for batch in batches:
        names = field_names(batch.schema)
        plain.update(set(batch.schema.names) - set(names))
        for column, name in names.items():
            if column != column_name(name) and len(batches) > 1:
                return None  # a suffix this batch needed: another may name the column differently
            renamed[column] = name
    if not plain.isdisjoint(renamed):
        return None  # a column that is a str field in one batch and another field in another
    try:
        table = pa.concat_tables([pa.Table.from_batches([batch]) for batch in batches], promote_options="permissive")
    except _ARROW_FAILURES:
        return None
    return table.replace_schema_metadata(_names_metadata(renamed))


def _empty(snapshot: VersionReader, names: list[str] | None) -> pa.Table:
    key = snapshot.config.key
    key_type = pa.int64() if snapshot.config.key_type == "int" else pa.string()
    fields = [pa.field(key, key_type), *(pa.field(name, pa.null()) for name in (names or [key])[1:])]
    return pa.schema(fields).empty_table()


def _column(values: list[Any]) -> tuple[pa.Array, dict[bytes, bytes] | None]:
    """One column as an Arrow array, and its field metadata (media, or a fall back to canonical encodings)."""
    converted = [_numpy(value) for value in values]
    present = [value for value in converted if value is not None]
    if present and all(type(value) is Media for value in present):
        media = [None if value is None else {"format": value.format, "data": value.data} for value in values]
        return pa.array(media, type=MEDIA_TYPE), MEDIA_METADATA
    if present and all(isinstance(value, np.ndarray) and value.ndim for value in present):
        arrays = _array_column(converted, present)
        if arrays is not None:
            return arrays, None
    if _mixed(present):
        return _encoded(values), ENCODING_METADATA
    try:
        return pa.array([_plain(value) for value in converted]), None
    except _ARROW_FAILURES:
        return _encoded(values), ENCODING_METADATA


def _array_column(values: list[Any], present: list[np.ndarray]) -> pa.Array | None:
    """A column of numpy arrays as fixed-shape tensors, or nested lists; ``None`` if Arrow cannot hold them."""
    dtype, shape = present[0].dtype, present[0].shape
    if any(array.dtype != dtype or array.ndim != len(shape) for array in present):
        return None
    try:
        value_type = pa.from_numpy_dtype(dtype)
        if all(array.shape == shape for array in present) and math.prod(shape):
            stacked = np.zeros((len(values), *shape), dtype=dtype)
            for row, value in enumerate(values):
                if value is not None:
                    stacked[row] = value
            nulls = np.array([value is None for value in values])
            storage = pa.FixedSizeListArray.from_arrays(
                pa.array(stacked.reshape(-1), type=value_type),
                math.prod(shape),
                mask=pa.array(nulls) if nulls.any() else None,
            )
            return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(value_type, list(shape)), storage)
        nested = value_type
        for _ in shape:
            nested = pa.list_(nested)
        return pa.array([None if value is None else value.tolist() for value in values], type=nested)
    except _ARROW_FAILURES:
        return None


def _numpy(value: Any) -> Any:
    """Torch tensors as numpy arrays (where numpy has their dtype); anything else as it is."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        try:
            return value.detach().cpu().numpy()
        except (TypeError, RuntimeError):  # bfloat16 and other dtypes numpy lacks
            return value
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | float | np.integer | np.floating):
        return "number"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def _mixed(present: list[Any]) -> bool:
    """Whether the values are of different kinds (ints and floats together are one kind: numbers)."""
    return len({_kind(value) for value in present}) > 1


def _plain(value: Any) -> Any:
    """``value`` with numpy arrays and torch tensors as lists and tuples as lists, for ``pyarrow.array``."""
    value = _numpy(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is not None and not isinstance(value, bool | int | float | str | bytes | np.generic):
        raise TypeError(f"{type(value).__name__} has no Arrow type")
    return value


def _encoded(values: list[Any]) -> pa.Array:
    return pa.array([None if value is None else codec.encode(value) for value in values], type=pa.binary())


def _is_tensor(table: pa.Table, name: str) -> bool:
    return isinstance(table.schema.field(name).type, pa.FixedShapeTensorType)


def _nested_storage(chunk: pa.ExtensionArray) -> pa.Array:
    """A fixed-shape tensor chunk as fixed-size lists nested once per dimension (polars reads them as ``Array``)."""
    shape = list(chunk.type.shape)
    values = _flat_values(chunk)
    for size in reversed(shape[1:]):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    nulls = chunk.storage.is_null() if chunk.null_count else None
    return pa.FixedSizeListArray.from_arrays(values, shape[0], mask=nulls)


def _flat_values(chunk: pa.ExtensionArray) -> pa.Array:
    """Every element of a fixed-shape tensor chunk, row after row, null rows included."""
    storage = chunk.storage
    size = storage.type.list_size
    return storage.values[storage.offset * size : (storage.offset + len(storage)) * size]


def _object_series(rows: list[np.ndarray | None], index: Any) -> Any:
    import pandas

    series = pandas.Series([None] * len(rows), index=index, dtype=object)
    for position, row in enumerate(rows):
        series.iat[position] = row
    return series


def _require(name: str) -> Any:
    """Import the optional dependency ``name``, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{name} is not installed; pip install {name} (or pip install 'litstore[export]')"
        ) from exc
