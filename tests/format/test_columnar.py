"""The column-wise encoder gives exactly the per-record codec's bytes, or declines.

The property test draws tables of every column type the vectorised path handles (nulls,
every MessagePack int and length boundary, NaN payloads, odd column names, chunked and
sliced tables) and checks each row's bytes against ``codec.encode`` of that row as
``to_pylist`` gives it; the other tests pin the cases a random draw rarely reaches.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.errors import InvalidArgumentError
from litstore.format import codec
from litstore.format.columnar import as_table, encode_table, from_dicts

INT_TYPES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}
# Where msgpack switches int encodings, and the values either side.
INT_EDGES = sorted(
    {
        edge + step
        for base in (2**7, 2**8, 2**15, 2**16, 2**31, 2**32, 2**63)
        for edge in (base, -base)
        for step in (-1, 0, 1)
    }
    | {0, 1, -1, 31, 32, -31, -32, -33, 2**64 - 1, 2**64 - 2}
)
# Where msgpack switches str and bin headers (65535 is as far as the property test goes).
LENGTH_EDGES = (0, 1, 31, 32, 33, 255, 256, 257, 65535)


def _nan32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


NAN64_PAYLOADS = [struct.unpack("<d", struct.pack("<Q", bits))[0] for bits in (0x7FF8000000000001, 0xFFF0000000000001)]
NAN32_BITS = (0x7FC00001, 0x7F800001, 0xFFC00000, 0xFF800123)  # quiet and signalling, both signs
SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308, *NAN64_PAYLOADS]


def _ints(kind: pa.DataType) -> st.SearchStrategy[int]:
    low, high = INT_TYPES[kind]
    return st.one_of(st.integers(low, high), st.sampled_from([edge for edge in INT_EDGES if low <= edge <= high]))


def _texts() -> st.SearchStrategy[str]:
    sized = st.tuples(st.sampled_from(LENGTH_EDGES), st.sampled_from(["a", "é", "\x00"])).map(
        lambda pair: (pair[1] * pair[0]).encode()[: pair[0]].decode("utf-8", "ignore")
    )
    return st.one_of(st.text(max_size=40), sized)


def _blobs() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=40), st.sampled_from(LENGTH_EDGES).map(lambda size: b"\xff" * size))


# (arrow type, strategy of its Python values) for every supported column type.
def _column_kinds() -> list[tuple[pa.DataType, st.SearchStrategy[Any]]]:
    kinds: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [(kind, _ints(kind)) for kind in INT_TYPES]
    float64s = st.one_of(st.floats(), st.sampled_from(SPECIAL_FLOATS))
    float32s = st.one_of(st.floats(width=32), st.sampled_from(SPECIAL_FLOATS[:6]), st.sampled_from(NAN32_BITS))
    kinds += [
        (pa.float64(), float64s),
        (pa.float32(), float32s),
        (pa.bool_(), st.booleans()),
        (pa.null(), st.none()),
        *[(kind, _texts()) for kind in (pa.string(), pa.large_string(), pa.string_view())],
        *[(kind, _blobs()) for kind in (pa.binary(), pa.large_binary(), pa.binary_view())],
        (pa.binary(3), st.binary(min_size=3, max_size=3)),
        (pa.dictionary(pa.int8(), pa.string()), st.sampled_from(["", "cat", "dog", "é"])),
        (pa.dictionary(pa.uint32(), pa.large_binary()), st.sampled_from([b"", b"x", b"\x00" * 40])),
        (pa.dictionary(pa.int32(), pa.int64()), st.sampled_from([0, -1, 2**40])),
    ]
    return kinds


COLUMN_KINDS = _column_kinds()
NAMES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    st.sampled_from(["", "a", "B", "_", "é", "e\u0301", "🐱", "\x00", "a" * 40]),
)


def _array(kind: pa.DataType, values: list[Any]) -> pa.Array:
    if pa.types.is_float32(kind):  # a float32 NaN payload is drawn as its bits
        floats = np.array([0.0 if value is None else value for value in values], dtype=np.float32)
        for row, value in enumerate(values):
            if type(value) is int:
                floats[row : row + 1].view(np.uint32)[0] = value
        return pa.array(floats, mask=np.array([value is None for value in values], dtype=bool))
    if pa.types.is_dictionary(kind):
        return pa.array(values, kind.value_type).dictionary_encode().cast(kind)
    return pa.array(values, kind)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    """A table of 0 to 20 columns of supported types, maybe chunked, maybe a slice of a bigger one."""
    names = draw(st.lists(NAMES, max_size=20, unique=True))
    rows = draw(st.integers(0, 6))
    extra = draw(st.integers(0, 2))  # rows cut off by slicing, to give arrays an offset
    columns = []
    for _ in names:
        kind, values = draw(st.sampled_from(COLUMN_KINDS))
        cells = st.one_of(st.none(), values) if draw(st.booleans()) else values
        columns.append(_array(kind, draw(st.lists(cells, min_size=rows + extra, max_size=rows + extra))))
    table = (
        pa.Table.from_arrays(columns, names=names)
        if names
        else pa.table({"x": [0] * (rows + extra)}).drop_columns(["x"])
    )
    if extra:
        table = table.slice(extra)
    if rows > 1 and names and draw(st.booleans()):
        cut = draw(st.integers(1, rows - 1))
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
        first = table.column(0).combine_chunks()  # misalign one column's chunks with the rest
        table = table.set_column(0, table.field(0), pa.chunked_array([first]))
    return table


def _expected(table: pa.Table) -> list[bytes]:
    return [codec.encode(record) for record in table.to_pylist()]


def _encoded(table: pa.Table) -> list[bytes]:
    result = encode_table(table)
    assert result is not None
    assert isinstance(result, pa.LargeBinaryArray)
    assert result.null_count == 0
    assert len(result) == table.num_rows
    encoded: list[bytes] = result.to_pylist()
    return encoded


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_every_row_encodes_as_the_per_record_codec_does(table: pa.Table) -> None:
    assert _encoded(table) == _expected(table)


def test_each_row_matches_its_own_slice() -> None:
    table = pa.table({"b": [1, None, -200], "a": ["x", "é" * 20, None], "c": [1.5, math.nan, None]})
    encoded = _encoded(table)
    for row in range(table.num_rows):
        assert encoded[row] == codec.encode(table.slice(row, 1).to_pylist()[0])


def test_ints_at_every_msgpack_boundary() -> None:
    for kind, (low, high) in INT_TYPES.items():
        values = [edge for edge in INT_EDGES if low <= edge <= high]
        table = pa.table({"v": pa.array(values, kind)})
        assert _encoded(table) == [msgpack.packb({"v": value}) for value in values], kind


def test_floats_keep_nan_payloads_infinities_and_negative_zero() -> None:
    table = pa.table({"f": pa.array(SPECIAL_FLOATS, pa.float64())})
    assert _encoded(table) == _expected(table)
    assert _encoded(table)[-1][-8:] == struct.pack(">d", NAN64_PAYLOADS[-1])  # the payload survived
    single = np.array([0.0] * len(NAN32_BITS), dtype=np.float32)
    single.view(np.uint32)[:] = NAN32_BITS
    table = pa.table({"f": pa.array(np.concatenate([single, np.array([-0.0, np.inf], dtype=np.float32)]))})
    assert _encoded(table) == _expected(table)


def test_long_strings_and_bytes_take_32_bit_headers() -> None:
    table = pa.table(
        {"s": pa.array(["é" * 32768, "a" * 65536, None], pa.string()), "b": pa.array([b"\x01" * 65536, b"", None])}
    )
    encoded = _encoded(table)
    assert encoded == _expected(table)
    assert encoded[0].startswith(b"\x82\xa1b\xc6\x00\x01\x00\x00")


def test_many_columns_take_a_map16_header() -> None:
    table = pa.table({f"c{index:02d}": [index, None] for index in range(17)})
    encoded = _encoded(table)
    assert encoded == _expected(table)
    assert encoded[0].startswith(b"\xde\x00\x11")


def test_a_table_without_columns_encodes_empty_records() -> None:
    table = pa.table({"x": [1, 2, 3]}).drop_columns(["x"])
    assert _encoded(table) == [b"\x80"] * 3 == _expected(table)


def test_many_small_batches_are_encoded_as_one_array() -> None:
    batches = [
        pa.record_batch(
            {
                "k": [str(row) for row in range(start, start + 3)],
                "d": pa.array(["a", str(start)]).dictionary_encode().take([1, 0, 1]),
            }
        )
        for start in (0, 3, 6)
    ]
    table = pa.Table.from_batches([*batches, batches[0].slice(0, 0)])
    assert table.column("d").num_chunks == 4  # each chunk with its own dictionary
    assert _encoded(table) == _expected(table)
    assert _encoded(table.slice(0, 0)) == []


def test_batches_big_enough_on_their_own_are_encoded_apart_and_joined() -> None:
    big = pa.record_batch({"n": pa.array(np.arange(65536) % 300 - 150, pa.int16()), "s": ["ab"] * 65536})
    table = pa.Table.from_batches(
        [big, big.slice(5), pa.record_batch({"n": pa.array([7], pa.int16()), "s": pa.array([None], pa.string())})]
    )
    assert _encoded(table) == _expected(table)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1], pa.timestamp("s")),
        pa.array([1], pa.date32()),
        pa.array([1], pa.duration("s")),
        pa.array([np.float16(1)], pa.float16()),
        pa.array([1], pa.decimal128(5, 2)),
        pa.array([[1, 2]]),
        pa.array([{"a": 1}]),
        pa.array([1], pa.timestamp("s")).dictionary_encode(),
        pa.array([{1: 2}], pa.map_(pa.int64(), pa.int64())),
    ],
    ids=lambda column: str(column.type),
)
def test_other_column_types_are_declined(column: pa.Array) -> None:
    assert encode_table(pa.table({"ok": [1], "other": column})) is None


def test_text_that_is_not_utf8_is_declined() -> None:
    broken = pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, 1], dtype=np.int32)), pa.py_buffer(b"\xff"))
    assert encode_table(pa.table({"s": broken})) is None
    assert encode_table(pa.Table.from_arrays([pa.chunked_array([pa.array(["ok"]), broken])], names=["s"])) is None


def test_repeated_column_names_are_refused() -> None:
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(InvalidArgumentError, match="'a'"):
        encode_table(table)
    with pytest.raises(InvalidArgumentError, match="'a'"):
        as_table(table)
    with pytest.raises(InvalidArgumentError, match="'a'"):
        as_table(pd.DataFrame([[1, 2]], columns=["a", "a"]))


def test_a_pandas_frame_becomes_its_columns_without_the_index() -> None:
    frame = pd.DataFrame(
        {"id": ["x", "y", None], "n": [1, 2, 3], "kind": pd.Categorical(["a", "b", "a"]), "f": [0.5, None, 2.0]},
        index=[10, 20, 30],
    )
    table = as_table(frame)
    assert table is not None
    assert table.column_names == ["id", "n", "kind", "f"]
    assert _encoded(table) == _expected(table)
    assert table.to_pylist()[0] == {"id": "x", "n": 1, "kind": "a", "f": 0.5}


def test_a_pandas_column_arrow_cannot_hold_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="Arrow"):
        as_table(pd.DataFrame({"mixed": [1, "one"]}))


def test_a_polars_frame_with_a_categorical_encodes() -> None:
    frame = pl.DataFrame({"id": ["x", None], "kind": pl.Series(["a", "b"]).cast(pl.Categorical), "b": [b"\x00", b""]})
    table = as_table(frame)
    assert table is not None
    assert table.to_pylist() == [{"id": "x", "kind": "a", "b": b"\x00"}, {"id": None, "kind": "b", "b": b""}]
    assert _encoded(table) == _expected(table)


def test_a_record_batch_and_a_table_are_tables_and_records_are_not() -> None:
    batch = pa.record_batch({"a": [1, 2]})
    table = as_table(batch)
    assert table is not None and table.to_pylist() == [{"a": 1}, {"a": 2}]
    assert as_table(table) is table
    assert as_table([{"a": 1}]) is None
    assert as_table(iter([{"a": 1}])) is None
    assert as_table({"a": [1]}) is None


def test_importing_and_encoding_import_neither_pandas_nor_polars(tmp_path: Path) -> None:
    table = pa.table(
        {
            "b": [True, None],
            "i": pa.array([-5, None], pa.int16()),
            "f": pa.array([0.5, None], pa.float32()),
            "s": ["x", None],
            "d": pa.array(["y", None]).dictionary_encode(),
            "n": [None, None],
        }
    )
    with pa.OSFile(str(tmp_path / "table.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    # Only litstore.errors and this module are loaded (empty package shells stand in for
    # litstore and litstore.format), so that what other modules import cannot hide or fake the result.
    package = Path(litstore.__file__).parent
    code = (
        "import sys, types, pyarrow as pa\n"
        "for name, path in (('litstore', {package!r}), ('litstore.format', {fmt!r})):\n"
        "    sys.modules[name] = types.ModuleType(name)\n"
        "    sys.modules[name].__path__ = [path]\n"
        "from litstore.format.columnar import encode_table\n"
        "imported = sorted({{'pandas', 'polars', 'litstore.txn'}} & set(sys.modules))\n"
        "encoded = encode_table(pa.ipc.open_file({table!r}).read_all())\n"
        "print(len(encoded), imported, sorted({{'pandas', 'polars'}} & set(sys.modules)))"
    ).format(package=str(package), fmt=str(package / "format"), table=str(tmp_path / "table.arrow"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.split() == ["2", "[]", "[]"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_dicts_become_a_table_that_encodes_as_each_dict(table: pa.Table) -> None:
    records = table.to_pylist()
    built = from_dicts(records)
    if built is None:
        assert _declined_rightly(records)
        return
    assert _encoded(built) == [codec.encode(record) for record in records]


def _declined_rightly(records: list[dict[str, Any]]) -> bool:
    """Whether ``from_dicts`` may decline ``records``: nothing to build, or a column pa.array would not give back."""
    if not records or not records[0]:
        return True
    for name in records[0]:
        values = [record[name] for record in records]
        if len({type(value) for value in values} - {type(None)}) > 1:
            return True
        ints = [value for value in values if type(value) is int]
        if ints and not (-(2**63) <= min(ints) and max(ints) < 2**63) and not (0 <= min(ints) and max(ints) < 2**64):
            return True  # neither int64 nor uint64 holds the column
    return False


class Label(str):
    """A str subclass: codec stores it as str, but pa.array cannot be trusted to give back its type."""


@pytest.mark.parametrize(
    "records",
    [
        [],
        [{"a": 1}, {"b": 1}],
        [{"a": 1}, {"a": 2.5}],
        [{"a": True}, {"a": 1}],
        [{"a": np.int64(1)}],
        [{"a": Label("x")}],
        [{"a": [1]}],
        [{"a": {"b": 1}}],
        [{"a": 2**64}],
        [{"a": -1}, {"a": 2**63}],
        [{"a": "\ud800"}],
        [{1: "x"}],
        [("a", 1)],
    ],
    ids=repr,
)
def test_dicts_that_a_table_would_change_are_declined(records: list[Any]) -> None:
    assert from_dicts(records) is None


def test_ints_past_int64_that_fit_uint64_become_a_uint64_column() -> None:
    records = [{"a": 2**63}, {"a": 2**64 - 1}, {"a": 0}, {"a": None}]
    built = from_dicts(records)
    assert built is not None and built.schema.field("a").type == pa.uint64()
    assert _encoded(built) == [codec.encode(record) for record in records]


def test_dicts_with_nulls_and_every_plain_type_become_a_table() -> None:
    records = [
        {"i": 1, "f": math.nan, "b": True, "s": "é", "y": b"\x00", "n": None},
        {"i": None, "f": -0.0, "b": None, "s": None, "y": None, "n": None},
    ]
    table = from_dicts(records)
    assert table is not None
    assert _encoded(table) == [codec.encode(record) for record in records]
