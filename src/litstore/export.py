"""Records out as Arrow, pandas and polars: what ``Snapshot.to_arrow`` and friends return.

A store has no fixed schema, so each column's Arrow type is inferred from the values
it holds (the key field is always the first column, the others follow in name order):

- ``None``, bool, int, float, str and bytes become Arrow scalars (``bytes`` -> binary);
  a column mixing ints and floats becomes float64;
- dicts become structs, lists and tuples become lists, numpy scalars keep their dtype;
- numpy arrays (and torch tensors, converted to numpy; a stored ``litdata.Image`` is a
  ``uint8`` tensor) become a fixed-shape tensor column (``pyarrow.FixedShapeTensorArray``)
  when every row of the column has the same shape and dtype, else nested lists of the dtype;
- a column Arrow cannot type (mixed types such as ints and strings, dicts with non-str
  keys, ints past 64 bits, lone surrogates, bfloat16 tensors, ...) falls back to
  **binary**: each value is its canonical litstore encoding (decode it with
  :func:`litstore.format.codec.decode`), and the column's field metadata holds
  ``{"litstore.encoding": "msgpack"}``. Export therefore never fails on a stored record.

A field a record lacks is null in that record's row. Types are inferred per batch, so
two batches of :func:`iter_batches` may type a column differently (a column all null in
one batch, for instance); :func:`to_arrow` unifies them and, where Arrow cannot, converts
the whole version as one batch so that the table has one schema.

pandas and polars are optional: importing them happens only in :func:`to_pandas` and
:func:`to_polars`, which say what to install when they are missing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from litstore.errors import InvalidArgumentError, MissingDependencyError
from litstore.format import codec

if TYPE_CHECKING:
    import pandas
    import polars

    from litstore.snapshot import Snapshot

#: Field metadata marking a column whose values are canonical litstore encodings.
ENCODING_METADATA = {b"litstore.encoding": b"msgpack"}

#: Rows per batch unless the caller says otherwise.
DEFAULT_BATCH_SIZE = 65536

# What pyarrow raises when values do not fit one Arrow type (ArrowInvalid is a ValueError, ArrowTypeError a
# TypeError, ArrowNotImplementedError a NotImplementedError; a lone surrogate raises UnicodeEncodeError).
_ARROW_FAILURES = (ValueError, TypeError, NotImplementedError, OverflowError)


def iter_batches(
    snapshot: Snapshot, batch_size: int = DEFAULT_BATCH_SIZE, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of ``snapshot`` as Arrow record batches of at most ``batch_size`` rows, in storage order.

    Memory holds one batch of records at a time, whatever the size of the version.

    Raises:
        InvalidArgumentError: ``batch_size`` is not a positive int, or ``columns`` is not a list of names.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive int, not {batch_size!r}")
    names = _selected(snapshot.config.key, columns)
    return _batches(snapshot.values(), snapshot.config.key, names, batch_size)


def to_arrow(snapshot: Snapshot, columns: Sequence[str] | None = None) -> pa.Table:
    """Every record of ``snapshot`` as one Arrow table (see the module docstring for the types).

    Raises:
        InvalidArgumentError: a column in ``columns`` is a field no record has.
    """
    key = snapshot.config.key
    names = _selected(key, columns)
    batches = list(_batches(snapshot.values(), key, names, DEFAULT_BATCH_SIZE))
    table = _concatenated(batches) if batches else _empty(snapshot, names)
    if table is None:
        # The batches typed a column differently: type it once from all its values.
        del batches
        table = pa.Table.from_batches(list(_batches(snapshot.values(), key, names, max(len(snapshot), 1))))
    if names is not None:
        unseen = {name for name in names if table.column(name).null_count == len(table)}
        for record in snapshot.values() if unseen else ():
            unseen -= set(record)
            if not unseen:
                break
        if unseen:
            raise InvalidArgumentError(
                f"no record of version {snapshot.version.number} has the field(s) {sorted(unseen)}"
            )
    return table


def to_pandas(snapshot: Snapshot, columns: Sequence[str] | None = None) -> pandas.DataFrame:
    """Every record as a pandas ``DataFrame``; tensor columns hold one numpy array per row.

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


def to_polars(snapshot: Snapshot, columns: Sequence[str] | None = None) -> polars.DataFrame:
    """Every record as a polars ``DataFrame``; tensor columns become polars ``Array`` columns of their shape.

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


def record_batch(records: Sequence[dict[str, Any]], names: Sequence[str]) -> pa.RecordBatch:
    """``records`` as one batch with the columns ``names`` (a field a record lacks is null)."""
    fields, arrays = [], []
    for name in names:
        array, encoded = _column([record.get(name) for record in records])
        fields.append(pa.field(name, array.type, metadata=ENCODING_METADATA if encoded else None))
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


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


def _names(records: Sequence[dict[str, Any]], key: str) -> list[str]:
    """The key field, then every other field of ``records`` in name order."""
    seen: set[str] = set()
    for record in records:
        seen.update(str(name) for name in record)
    seen.discard(key)
    return [key, *sorted(seen)]


def _concatenated(batches: list[pa.RecordBatch]) -> pa.Table | None:
    """The batches as one table, or ``None`` where they typed a column in ways that do not unify."""
    for name in {name for batch in batches for name in batch.schema.names}:
        fields = [batch.schema.field(name) for batch in batches if name in batch.schema.names]
        typed = {field.metadata == ENCODING_METADATA for field in fields if field.type != pa.null()}
        if len(typed) > 1:  # raw bytes in one batch, canonical encodings in another
            return None
    try:
        return pa.concat_tables([pa.Table.from_batches([batch]) for batch in batches], promote_options="permissive")
    except _ARROW_FAILURES:
        return None


def _empty(snapshot: Snapshot, names: list[str] | None) -> pa.Table:
    key = snapshot.config.key
    key_type = pa.int64() if snapshot.config.key_type == "int" else pa.string()
    fields = [pa.field(key, key_type), *(pa.field(name, pa.null()) for name in (names or [key])[1:])]
    return pa.schema(fields).empty_table()


def _column(values: list[Any]) -> tuple[pa.Array, bool]:
    """One column as an Arrow array, and whether it fell back to canonical encodings."""
    converted = [_numpy(value) for value in values]
    present = [value for value in converted if value is not None]
    if present and all(isinstance(value, np.ndarray) and value.ndim for value in present):
        arrays = _array_column(converted, present)
        if arrays is not None:
            return arrays, False
    if _mixed(present):
        return _encoded(values), True
    try:
        return pa.array([_plain(value) for value in converted]), False
    except _ARROW_FAILURES:
        return _encoded(values), True


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
