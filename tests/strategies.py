"""Hypothesis strategies for litstore keys, values and records, and a strict comparison of records.

``values`` draws every kind of value the codec promises to store: bools, ``None``, ints of
any size, floats (NaN, infinities and -0.0 included), str, bytes, numpy arrays of many
dtypes and shapes (0-d, empty, non-contiguous), numpy scalars, torch tensors (bfloat16
included), and lists, tuples and dicts of those. :func:`assert_records_equal` compares two
such values strictly: same types (a tuple is not a list, ``1`` is not ``1.0`` or ``True``),
same dtypes, shapes and bytes, and NaN equal to NaN.

Known codec bugs are kept out of these strategies so that the general properties keep
guarding everything else; ``tests/store/test_properties.py`` has a failing test for each of them
(structured dtypes, empty numpy string scalars, empty tensors with unusual strides,
non-str/int dict keys, lone surrogates).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

KEY_FIELD = "id"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1

# -- keys -------------------------------------------------------------------------------------

AWKWARD_STRINGS = (
    "",
    " ",
    "\x00",
    "\t\n",
    "é",
    "e\u0301",  # the same glyph as "é", but a different key
    "ß",
    "İ",
    "日本語",
    "🐱",
    "👩\u200d👩\u200d👧",
    "\u200b",
    "\ufeff",
    "\U0010ffff",
    "a" * 40,
)

str_keys: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(AWKWARD_STRINGS),
    st.text(max_size=12),
    st.text(alphabet=st.characters(min_codepoint=0x80, exclude_categories=("Cs",)), max_size=6),
    st.text(alphabet="🐱🐶🦊👍🏽é日\u0301\x00 ", max_size=6),
)

int_keys: st.SearchStrategy[int] = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from((INT64_MIN, INT64_MIN + 1, -1, 0, 1, 2**31, 2**32, INT64_MAX - 1, INT64_MAX)),
)


def keys_for(key_type: str) -> st.SearchStrategy[Any]:
    """Keys of a store whose ``key_type`` is ``"str"`` or ``"int"``."""
    return str_keys if key_type == "str" else int_keys


# -- scalar leaves ----------------------------------------------------------------------------

python_ints: st.SearchStrategy[int] = st.one_of(
    st.integers(),
    st.integers(INT64_MIN, UINT64_MAX),
    st.integers(min_value=UINT64_MAX - 2, max_value=2**200),  # around and beyond MessagePack's range
    st.integers(min_value=-(2**200), max_value=INT64_MIN + 2),
)

python_floats: st.SearchStrategy[float] = st.one_of(
    st.floats(),  # NaN and infinities included
    st.sampled_from((0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308)),
)

NUMPY_DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    ">i4",  # non-native byte order
    ">f8",
    "<U3",
    "S3",
    "datetime64[s]",
    "timedelta64[ms]",
)

# Scalars of string dtypes are left out: an empty np.str_ / np.bytes_ cannot be decoded (see
# test_empty_numpy_string_scalars_round_trip).
NUMPY_SCALAR_DTYPES = tuple(name for name in NUMPY_DTYPES if name not in ("<U3", "S3"))

array_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)


@st.composite
def numpy_arrays(draw: st.DrawFn, dtypes: tuple[str, ...] = NUMPY_DTYPES) -> np.ndarray:
    """Arrays of several dtypes and shapes (0-d and empty ones too), sometimes non-contiguous."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    array = draw(hnp.arrays(dtype, array_shapes))
    layout = draw(st.sampled_from(("c", "transposed", "strided")))
    if layout == "transposed" and array.ndim >= 2:
        array = array.T
    elif layout == "strided" and array.ndim >= 1:
        array = np.concatenate([array, array])[::2]
    return array


@st.composite
def numpy_scalars(draw: st.DrawFn) -> np.generic:
    dtype = np.dtype(draw(st.sampled_from(NUMPY_SCALAR_DTYPES)))
    scalar = draw(hnp.arrays(dtype, ()))[()]
    assert isinstance(scalar, np.generic)
    return scalar


TORCH_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.float8_e4m3fn,
    torch.complex64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.uint16,
    torch.bool,
)

_NUMPY_FOR_TORCH = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.complex64: "complex64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.uint16: "uint16",
    torch.bool: "bool",
}


@st.composite
def tensors(draw: st.DrawFn, dtypes: tuple[torch.dtype, ...] = TORCH_DTYPES) -> torch.Tensor:
    """CPU tensors of several dtypes and shapes (0-d and empty ones too), sometimes non-contiguous."""
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(array_shapes)
    if math.prod(shape) == 0:
        # Empty tensors with strides other than torch's defaults (torch.from_numpy of an empty
        # array, an empty slice) cannot be encoded: see test_codec_stores_faithfully_or_refuses.
        return torch.zeros(shape, dtype=dtype)
    if dtype in _NUMPY_FOR_TORCH:
        tensor = torch.from_numpy(draw(hnp.arrays(np.dtype(_NUMPY_FOR_TORCH[dtype]), shape)))
    else:  # bfloat16, float8: no numpy twin; convert from float32
        tensor = torch.from_numpy(draw(hnp.arrays(np.dtype("float32"), shape))).to(dtype)
    if tensor.dim() >= 2 and draw(st.booleans()):
        tensor = tensor.transpose(0, 1)
    return tensor


leaves: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    python_ints,
    python_floats,
    st.text(max_size=8),
    st.binary(max_size=8),
    numpy_arrays(),
    numpy_scalars(),
    tensors(),
)

# Dict keys inside values: str, and ints MessagePack can hold natively (a mix of both too).
dict_keys: st.SearchStrategy[Any] = st.one_of(st.text(max_size=6), st.integers(INT64_MIN, UINT64_MAX))


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=6), children, max_size=3),
        st.dictionaries(dict_keys, children, max_size=3),
    )


values: st.SearchStrategy[Any] = st.recursive(leaves, _containers, max_leaves=8)
"""Any value the codec promises to store, nested in lists, tuples and dicts."""

# -- records ----------------------------------------------------------------------------------

field_names = st.text(max_size=8).filter(lambda name: name != KEY_FIELD)
record_bodies = st.dictionaries(field_names, values, max_size=4)


@st.composite
def records(draw: st.DrawFn, key_type: str, min_size: int = 0, max_size: int = 12) -> list[dict[str, Any]]:
    """A list of records with unique keys of ``key_type``; each is ``{"id": key, ...fields}``."""
    keys = draw(st.lists(keys_for(key_type), unique=True, min_size=min_size, max_size=max_size))
    return [{KEY_FIELD: key, **draw(record_bodies)} for key in keys]


@st.composite
def batchings(draw: st.DrawFn, items: list[Any], max_cuts: int = 4) -> list[list[Any]]:
    """``items`` cut into consecutive batches (possibly empty ones), in order."""
    cuts = sorted(draw(st.lists(st.integers(0, len(items)), max_size=max_cuts)))
    bounds = [0, *cuts, len(items)]
    return [items[start:end] for start, end in itertools.pairwise(bounds)]


def reorder_dicts(value: Any, rng: random.Random) -> Any:
    """A copy of ``value`` in which every dict, at any depth, has its entries in a shuffled order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: reorder_dicts(item, rng) for key, item in items}
    if isinstance(value, list):
        return [reorder_dicts(item, rng) for item in value]
    if isinstance(value, tuple):
        return tuple(reorder_dicts(item, rng) for item in value)
    return value


# -- comparison -------------------------------------------------------------------------------


def _floats_equal(actual: float, expected: float) -> bool:
    if math.isnan(actual) or math.isnan(expected):
        return math.isnan(actual) and math.isnan(expected)
    return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)


def _arrays_equal(actual: np.ndarray, expected: np.ndarray) -> bool:
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    if np.ascontiguousarray(actual).tobytes() != np.ascontiguousarray(expected).tobytes():
        return False
    if expected.dtype.kind in "biufc":
        return bool(np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc"))
    return True


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    if not tensor.numel():  # .contiguous() keeps odd strides on empty tensors; view() would fail
        return b""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def _tensors_equal(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if actual.dtype != expected.dtype or actual.shape != expected.shape or actual.device != expected.device:
        return False
    return _tensor_bytes(actual) == _tensor_bytes(expected)


def _stored_type(value: Any) -> type:
    """The type a value comes back as: bytearray and memoryview come back as bytes."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes
    return type(value)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def assert_records_equal(actual: Any, expected: Any, path: str = "record") -> None:
    """Assert that ``actual`` is ``expected`` as litstore stores it, naming the first difference.

    Strict: types must match exactly (tuple vs list, int vs float vs bool, numpy scalar vs
    Python scalar); arrays and tensors must match in type, dtype, shape and bytes (so NaN
    equals NaN and -0.0 differs from 0.0); floats compare with NaN equal to NaN; dicts compare
    their keys (with types) and values, in any order.
    """
    kind = _stored_type(expected)
    where = f"{path}: expected {_describe(expected)}, got {_describe(actual)}"
    assert type(actual) is kind, f"{path}: type {type(actual).__name__} != {kind.__name__}; {where}"
    if kind is dict:
        actual_keys = {(type(key), key) for key in actual}
        expected_keys = {(type(key), key) for key in expected}
        assert actual_keys == expected_keys, (
            f"{path}: keys differ: missing {expected_keys - actual_keys}, extra {actual_keys - expected_keys}"
        )
        for key in expected:
            assert_records_equal(actual[key], expected[key], f"{path}[{key!r}]")
    elif kind is list or kind is tuple:
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}; {where}"
        for index, (got, want) in enumerate(zip(actual, expected)):
            assert_records_equal(got, want, f"{path}[{index}]")
    elif kind is float:
        assert _floats_equal(actual, expected), where
    elif isinstance(expected, np.ndarray):
        assert _arrays_equal(actual, expected), f"{where} (dtype {actual.dtype}/{expected.dtype})"
    elif isinstance(expected, np.generic):
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes(), where
    elif isinstance(expected, torch.Tensor):
        assert _tensors_equal(actual, expected), f"{where} (dtype {actual.dtype}/{expected.dtype})"
    elif kind is bytes:
        assert actual == bytes(expected), where
    else:  # None, bool, int, str
        assert actual == expected, where


def records_equal(actual: Any, expected: Any) -> bool:
    """Whether :func:`assert_records_equal` passes."""
    try:
        assert_records_equal(actual, expected)
    except AssertionError:
        return False
    return True


# -- paths into nested values -----------------------------------------------------------------

Path = tuple[Any, ...]


def leaf_paths(value: Any, prefix: Path = ()) -> list[Path]:
    """The path (dict keys and list/tuple indexes) of every non-container or empty value inside ``value``."""
    if isinstance(value, (dict, list, tuple)) and not value:
        return [prefix]
    if isinstance(value, dict):
        return [path for key, item in value.items() for path in leaf_paths(item, (*prefix, key))]
    if isinstance(value, (list, tuple)):
        return [path for index, item in enumerate(value) for path in leaf_paths(item, (*prefix, index))]
    return [prefix]


def dict_paths(value: Any, prefix: Path = ()) -> list[Path]:
    """The path of every non-empty dict inside ``value`` (``()`` for ``value`` itself)."""
    found: list[Path] = []
    if isinstance(value, dict):
        if value:
            found.append(prefix)
        for key, item in value.items():
            found.extend(dict_paths(item, (*prefix, key)))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found.extend(dict_paths(item, (*prefix, index)))
    return found


def get_at(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def replace_at(value: Any, path: Path, change: Callable[[Any], Any]) -> Any:
    """A copy of ``value`` with the item at ``path`` replaced by ``change(item)``; containers are rebuilt."""
    if not path:
        return change(value)
    step, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {
            key: replace_at(item, rest, change) if key == step and type(key) is type(step) else item
            for key, item in value.items()
        }
    items = [replace_at(item, rest, change) if index == step else item for index, item in enumerate(value)]
    return tuple(items) if isinstance(value, tuple) else items
