"""Canonical record bytes for a whole Arrow table at once, column by column.

:func:`encode_table` gives, for every row of a table of flat records, exactly the bytes
:func:`litstore.format.codec.encode` gives for that row as a dict (``table.to_pylist()``),
without building a Python object per row: each column's MessagePack encoding is computed
with numpy and pyarrow kernels, then the pieces of every row (map header, sorted keys,
values) are joined by one pyarrow kernel. It is what lets ``Store.append`` take a
``pyarrow.Table``, a pandas or a polars DataFrame at the speed of a memory copy.

Only column types whose per-row Python value is a MessagePack native take this path:
integers, float32/float64, bool, null, string, binary (every width and view variant)
and dictionary columns of those (categoricals). For any other type :func:`encode_table`
returns ``None`` and the caller encodes row by row, so both paths always agree.

The MessagePack rules reproduced here are those of ``msgpack.Packer(use_bin_type=True)``:
the smallest int encoding (fixint, then 8/16/32/64-bit, unsigned for non-negative values),
floats as big-endian float64 (float32 widened exactly as Python widens it), ``str8`` for
text, ``bin`` for bytes. ``tests/format/test_columnar.py`` checks them against msgpack
itself at every boundary.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from operator import itemgetter
from typing import Any, TypeAlias

import msgpack
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from litstore.errors import InvalidArgumentError, describe

_NIL = 0xC0
_FALSE = 0xC2
_FLOAT64 = 0xCB

# Size classes of a MessagePack int: each class's lower bound on the magnitude (for a
# negative value, the magnitude is ``~value`` = ``-value - 1``), its header byte and how
# many big-endian bytes follow the header. Class 0 (fixint) is the value's own low byte.
_WIDTHS = np.array([0, 1, 2, 4, 8], dtype=np.int64)
_UNSIGNED_BOUNDS = (128, 2**8, 2**16, 2**32)
_UNSIGNED_HEADERS = np.array([0, 0xCC, 0xCD, 0xCE, 0xCF], dtype=np.uint8)
_SIGNED_BOUNDS = (32, 2**7, 2**15, 2**31)
_SIGNED_HEADERS = np.array([0, 0xD0, 0xD1, 0xD2, 0xD3], dtype=np.uint8)
_BOUNDS_PAIRS = tuple(zip(_SIGNED_BOUNDS, _UNSIGNED_BOUNDS, strict=True))

# Length classes of text (fixstr, str8, str16, str32) and bytes (bin8, bin16, bin32).
_STR_BOUNDS = (32, 2**8, 2**16)
_STR_HEADERS = np.array([0xA0, 0xD9, 0xDA, 0xDB], dtype=np.uint8)
_STR_WIDTHS = np.array([0, 1, 2, 4], dtype=np.int64)
_BIN_BOUNDS = (2**8, 2**16)
_BIN_HEADERS = np.array([0xC4, 0xC5, 0xC6], dtype=np.uint8)
_BIN_WIDTHS = np.array([1, 2, 4], dtype=np.int64)
_MAX_LENGTH = 2**32 - 1  # msgpack refuses longer str and bytes

# Rows below which consecutive record batches are merged before encoding (see _batches).
_BATCH_ROWS = 65536

# Python types whose values pa.array gives back exactly as they were (see from_dicts).
_PLAIN_TYPES = frozenset((int, float, bool, str, bytes))

# A row's encoding is a sequence of parts: bytes shared by every row, or one value per row.
_Part: TypeAlias = bytes | pa.LargeBinaryArray


def value_offsets(array: pa.LargeBinaryArray | pa.LargeStringArray) -> np.ndarray:
    """The ``len(array) + 1`` int64 offsets of each value of ``array`` in its data buffer (a view, no copy)."""
    return np.frombuffer(array.buffers()[1], np.int64, count=len(array) + 1, offset=8 * array.offset)


def as_table(records: object) -> pa.Table | None:
    """``records`` as an Arrow table, or ``None`` if it is not a table of some kind.

    A ``pyarrow.Table`` comes back as it is, a ``RecordBatch`` as a one-batch table, a
    pandas DataFrame without its index (``preserve_index=False``: the index is a view
    of the rows, not part of the records) and a polars DataFrame via ``to_arrow()``.
    Anything else (a list of dicts, a generator) gives ``None``. pandas and polars are
    recognised by the module of the type and never imported here, so that a caller who
    does not use them never pays their import time.

    A pandas DataFrame goes through Arrow as pandas users expect of it: NaN in a float
    column is a missing value (stored as ``None``), array cells become lists, column
    names become str. Pass ``df.to_dict("records")`` to store the rows' Python values
    exactly instead.

    Raises:
        InvalidArgumentError: the table's column names repeat (a record cannot hold one
            key twice), a text column is not valid UTF-8, or a pandas DataFrame cannot
            be converted to Arrow (a column mixes value types).
    """
    table: pa.Table | None
    if isinstance(records, pa.Table):
        table = records
    elif isinstance(records, pa.RecordBatch):
        table = pa.Table.from_batches([records])
    elif _is_frame(records, "pandas"):
        _check_names([str(name) for name in records.columns], "DataFrame")  # type: ignore[attr-defined]
        try:
            table = pa.Table.from_pandas(records, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"the DataFrame cannot be converted to Arrow: {exc}") from exc
    elif _is_frame(records, "polars"):
        table = records.to_arrow()  # type: ignore[attr-defined]
    else:
        return None
    _check_names(table.column_names, "table")
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if _is_text(kind):
            try:
                column.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise InvalidArgumentError(f"column {name!r} of the table is not valid UTF-8 text: {exc}") from exc
    return table


def from_dicts(records: list[Any]) -> pa.Table | None:
    """Flat dict ``records`` as an Arrow table whose rows are those dicts exactly, or ``None``.

    A table is made only when every record is a ``dict`` with the same ``str`` keys (at least one) and
    each key's values are of one exact type among ``int``, ``float``, ``bool``, ``str``
    and ``bytes`` (``None`` allowed anywhere): then ``table.to_pylist() == records``
    value for value and type for type, so :func:`encode_table` gives the bytes
    ``codec.encode`` gives each record. Anything else (missing keys, ``1`` beside
    ``2.5``, numpy scalars, str subclasses, nested values, ints past 64 bits, lone
    surrogates) gives ``None``: the caller encodes those records one by one.

    Building the table uses ``pa.array``, which imports pandas the first time where it
    is installed.
    """
    if not records or set(map(type, records)) != {dict}:
        return None
    names = list(records[0])
    if not names or set(map(len, records)) != {len(names)}:
        return None
    if set(map(type, itertools.chain.from_iterable(records))) != {str}:
        return None  # a field name that is not a plain str, in any record
    columns = []
    for name in names:
        try:  # with every record as long as the first, each has exactly its keys if each has every one
            values = list(map(itemgetter(name), records))
        except KeyError:
            return None
        kinds = set(map(type, values)) - {type(None)}
        if len(kinds) > 1 or not kinds <= _PLAIN_TYPES:
            return None
        try:
            columns.append(_column(values, next(iter(kinds), None)))
        except (OverflowError, UnicodeEncodeError, pa.ArrowException):
            return None
    return pa.Table.from_arrays(columns, names=names)


def _column(values: list[Any], kind: type | None) -> pa.Array:
    """``values``, all ``kind`` or ``None``, as an Arrow array of the type that gives them back exactly."""
    if kind is None:
        return pa.nulls(len(values))
    if kind is int:
        try:
            return pa.array(values, pa.int64())
        except (OverflowError, pa.ArrowInvalid):
            return pa.array(values, pa.uint64())  # ints past int64 that fit in 64 bits unsigned
    arrow_type = {float: pa.float64, bool: pa.bool_, str: pa.string, bytes: pa.large_binary}[kind]()
    return pa.array(values, arrow_type)


def encode_table(table: pa.Table, sized: bool = False) -> pa.LargeBinaryArray | None:
    """The canonical bytes of every row of ``table``, or ``None`` where this path cannot make them.

    Row ``i`` of the result equals ``codec.encode(table.slice(i, 1).to_pylist()[0])``,
    preceded, if ``sized``, by its length as 4 little-endian bytes (litdata's item
    framing: the bytes a chunk file holds, made in the same single copy).
    The result is a ``LargeBinaryArray`` (64-bit offsets, so tables past 2 GiB never
    overflow) without nulls, with one item per row. ``None`` means some column has a
    type this path does not encode (timestamps, lists, structs, decimals, float16, ...),
    a text column is not valid UTF-8, or a value is too long for MessagePack: the
    caller then encodes row by row, which stores or rejects such values itself.

    Raises:
        InvalidArgumentError: the table's column names repeat.
    """
    _check_names(table.column_names, "table")
    names = sorted(table.column_names)
    if not all(_supported(table.schema.field(name).type) for name in names):
        return None
    header = _map_header(len(names))
    if not names:
        return _join([header], table.num_rows, sized)
    keys = [msgpack.packb(name, use_bin_type=True) for name in names]
    encoded: list[pa.LargeBinaryArray] = []
    for batch in _batches(table.select(names)):
        if not batch.num_rows:
            continue
        parts: list[_Part] = [header]
        for key, column in zip(keys, batch.columns, strict=True):
            cells = _encode_column(column)
            if cells is None:
                return None
            parts.append(key)
            parts.extend(cells)
        encoded.append(_join(parts, batch.num_rows, sized))
    if not encoded:
        return _join([header], 0, sized)
    return encoded[0] if len(encoded) == 1 else pa.concat_arrays(encoded)


def _batches(table: pa.Table) -> Iterator[pa.RecordBatch]:
    """``table``'s rows as record batches of at least :data:`_BATCH_ROWS` rows where it has enough.

    Each batch costs a fixed overhead, so many small ones (a table grown by appends) are
    merged; a batch big enough on its own is used as it is, without a copy.
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in table.to_batches():
        pending.append(batch)
        rows += batch.num_rows
        if rows >= _BATCH_ROWS:
            yield _merged(pending)
            pending, rows = [], 0
    if pending:
        yield _merged(pending)


def _merged(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of the rows of ``batches``; text and bytes widened to 64-bit offsets so that it never overflows."""
    if len(batches) == 1:
        return batches[0]
    wide = pa.schema([field.with_type(_wide_type(field.type)) for field in batches[0].schema])
    merged = pa.Table.from_batches(batches).cast(wide)
    return pa.RecordBatch.from_arrays([column.combine_chunks() for column in merged.columns], schema=wide)


def _wide_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(kind):  # dictionaries may differ between batches; decode them
        return _wide_type(kind.value_type)
    if pa.types.is_string(kind):
        return pa.large_string()
    if pa.types.is_binary(kind):
        return pa.large_binary()
    return kind


def _is_frame(value: object, package: str) -> bool:
    """Whether ``value`` is a ``DataFrame`` of ``package`` (or of a subclass), without importing it."""
    return any(
        kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] == package for kind in type(value).__mro__
    )


def _check_names(names: list[str], what: str) -> None:
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise InvalidArgumentError(f"the {what} has repeated column names: {describe(repeated)}")


def _supported(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _supported(kind.value_type)
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_float32(kind)
        or pa.types.is_float64(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
        or _is_text(kind)
        or _is_bytes(kind)
    )


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def _is_bytes(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_fixed_size_binary(kind)
    )


def _map_header(size: int) -> bytes:
    if size <= 15:
        return bytes([0x80 | size])
    if size <= 0xFFFF:
        return b"\xde" + size.to_bytes(2, "big")
    return b"\xdf" + size.to_bytes(4, "big")


def _encode_column(column: pa.Array) -> list[_Part] | None:
    """The parts that encode each value of ``column``, or ``None`` if one cannot be encoded here."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _encode_column(column.dictionary_decode())
    if pa.types.is_null(kind):
        return [bytes([_NIL])]
    valid = _bits(column, 0) if column.null_count else None
    if pa.types.is_boolean(kind):
        cells = (_FALSE + _bits(column, 1)).astype(np.uint8).reshape(-1, 1)
        return [_cells_array(cells, np.zeros(len(column), dtype=np.int64), valid)]
    if pa.types.is_integer(kind):
        return [_int_cells(_numbers(column), valid)]
    if pa.types.is_floating(kind):
        return [_float_cells(_numbers(column), valid)]
    text = _is_text(kind)
    if text and not _valid_utf8(column):
        return None
    values = column.cast(pa.large_binary())
    lengths = np.diff(_numbers(values, count=len(values) + 1))
    if valid is not None:
        lengths[~valid] = 0
    if len(lengths) and int(lengths.max()) > _MAX_LENGTH:
        return None
    header = _length_cells(lengths, valid, text)
    return [header, values.fill_null(_binary_scalar(b"")) if valid is not None else values]


# Reading an array's buffers directly: pyarrow's own conversions to and from Python and
# numpy (pa.scalar, pa.array, Array.to_numpy, fill_null with a Python value) import
# pandas when it is installed, which costs a caller who never uses pandas a third of a second.


def _bits(column: pa.Array, buffer: int) -> npt.NDArray[np.bool_]:
    """The bitmap ``buffer`` of ``column`` (0: validity, 1: a bool array's values), one bool per row."""
    packed = np.frombuffer(column.buffers()[buffer], dtype=np.uint8)
    bits = np.unpackbits(packed, count=column.offset + len(column), bitorder="little")
    return bits[column.offset :].astype(np.bool_)


def _numbers(column: pa.Array, count: int | None = None) -> npt.NDArray[Any]:
    """The fixed-width values (or the offsets, of a large binary ``column``) in buffer 1, from the array's offset.

    Null rows hold whatever the buffer holds there; callers mask them.
    """
    if count is None:
        kind = column.type
        letter = "f" if pa.types.is_floating(kind) else "u" if pa.types.is_unsigned_integer(kind) else "i"
        dtype = np.dtype(f"={letter}{kind.bit_width // 8}")
        count = len(column)
    else:
        dtype = np.dtype(np.int64)
    values: npt.NDArray[Any] = np.frombuffer(column.buffers()[1], dtype=dtype, count=column.offset + count)
    return values[column.offset :]


def _binary_scalar(data: bytes) -> pa.Scalar:
    """``data`` as a large binary scalar, made without pa.scalar (see above)."""
    offsets = np.array([0, len(data)], dtype=np.int64)
    array = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return array[0]


def _valid_utf8(column: pa.Array) -> bool:
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _int_cells(values: npt.NDArray[Any], valid: npt.NDArray[np.bool_] | None) -> pa.LargeBinaryArray:
    """MessagePack ints, each in the smallest encoding msgpack picks for it."""
    if values.dtype.kind == "u" or (len(values) and values.min() >= 0):
        magnitude = values.astype(np.uint64)
        negative = None
        wide = magnitude.astype(">u8")
    else:
        signed = values.astype(np.int64)
        negative = signed < 0
        magnitude = np.where(negative, ~signed, signed).astype(np.uint64)
        wide = signed.astype(">i8")
    if negative is None:
        size = sum((magnitude >= bound).astype(np.int64) for bound in _UNSIGNED_BOUNDS)
        headers = _UNSIGNED_HEADERS[size]
    else:
        size = sum((magnitude >= np.where(negative, low, high)).astype(np.int64) for low, high in _BOUNDS_PAIRS)
        headers = np.where(negative, _SIGNED_HEADERS[size], _UNSIGNED_HEADERS[size])
    cells = np.empty((len(values), 9), dtype=np.uint8)
    cells[:, 1:] = wide.view(np.uint8).reshape(-1, 8)
    fixint = size == 0
    headers[fixint] = cells[fixint, 8]  # a fixint is its own low byte
    return _cells_array(cells, 8 - _WIDTHS[size], valid, headers)


def _float_cells(values: npt.NDArray[Any], valid: npt.NDArray[np.bool_] | None) -> pa.LargeBinaryArray:
    """MessagePack float64s; float32 values are widened as Python widens them (NaN payloads included)."""
    cells = np.empty((len(values), 9), dtype=np.uint8)
    cells[:, 0] = _FLOAT64
    with np.errstate(invalid="ignore"):  # widening a signalling NaN quiets it, as Python's float() does
        wide = values.astype(np.float64)
    cells[:, 1:] = wide.astype(">f8").view(np.uint8).reshape(-1, 8)
    return _cells_array(cells, np.zeros(len(values), dtype=np.int64), valid)


def _length_cells(lengths: npt.NDArray[Any], valid: npt.NDArray[np.bool_] | None, text: bool) -> pa.LargeBinaryArray:
    """The MessagePack str (``text``) or bin headers of values of ``lengths`` bytes."""
    lengths = lengths.astype(np.uint64)
    bounds, all_headers, widths = (
        (_STR_BOUNDS, _STR_HEADERS, _STR_WIDTHS) if text else (_BIN_BOUNDS, _BIN_HEADERS, _BIN_WIDTHS)
    )
    size = sum((lengths >= bound).astype(np.int64) for bound in bounds)
    headers = all_headers[size]
    if text:
        fixstr = size == 0
        headers[fixstr] |= lengths[fixstr].astype(np.uint8)
    cells = np.empty((len(lengths), 9), dtype=np.uint8)
    cells[:, 1:] = lengths.astype(">u8").view(np.uint8).reshape(-1, 8)
    return _cells_array(cells, 8 - widths[size], valid, headers)


def _cells_array(
    cells: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    valid: npt.NDArray[np.bool_] | None,
    headers: npt.NDArray[np.uint8] | None = None,
) -> pa.LargeBinaryArray:
    """One binary value per row: ``cells[row, starts[row]:]``, with ``headers[row]`` at its start.

    Each row of ``cells`` holds a value's bytes right-aligned, so that the value's
    encoding is a suffix of the row; a null row becomes MessagePack nil.
    """
    rows = np.arange(len(cells))
    width = cells.shape[1]
    if headers is not None:
        cells[rows, starts] = headers
    if valid is not None:
        starts = np.where(valid, starts, width - 1)
        cells[~valid, width - 1] = _NIL
    lengths = width - starts
    offsets = np.zeros(len(cells) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if len(cells) and (starts == starts[0]).all():
        data = np.ascontiguousarray(cells[:, int(starts[0]) :])
    else:
        data = cells[np.arange(width) >= starts[:, None]]
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(cells), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def sized(values: pa.LargeBinaryArray) -> pa.LargeBinaryArray:
    """Each value preceded by its length as 4 little-endian bytes (see :func:`encode_table`)."""
    return _join([values], len(values), True)


def _length_prefixes(lengths: npt.NDArray[np.int64]) -> pa.LargeBinaryArray:
    """Each of ``lengths`` as 4 little-endian bytes, one value per row."""
    if len(lengths) and int(lengths.max()) >= 2**32:
        raise InvalidArgumentError(f"a record of {int(lengths.max()):,} bytes is larger than a chunk item can be")
    raw = pa.py_buffer(lengths.astype("<u4").tobytes())
    prefixes = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(lengths), [None, raw])
    result: pa.LargeBinaryArray = prefixes.cast(pa.large_binary())
    return result


def _join(parts: list[_Part], rows: int, sized: bool = False) -> pa.LargeBinaryArray:
    """Each row's parts joined end to end (after its length, if ``sized``); runs of shared bytes are joined once."""
    if sized:
        lengths = np.zeros(rows, dtype=np.int64)
        for part in parts:
            lengths += len(part) if isinstance(part, bytes) else np.diff(value_offsets(part))
        parts = [_length_prefixes(lengths), *parts]
    merged: list[_Part] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    arrays = [part for part in merged if not isinstance(part, bytes)]
    if not arrays:
        shared = b"".join(part for part in merged if isinstance(part, bytes))
        offsets = np.arange(rows + 1, dtype=np.int64) * len(shared)
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(shared * rows)]
        )
    args = [_binary_scalar(part) if isinstance(part, bytes) else part for part in merged]
    result: pa.LargeBinaryArray = pc.binary_join_element_wise(*args, _binary_scalar(b""))
    return result
