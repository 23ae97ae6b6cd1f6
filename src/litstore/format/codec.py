"""Canonical encoding of records: the bytes litstore stores, hashes and decodes.

A record is encoded with MessagePack after putting it in canonical form, so that the
same record always gives the same bytes and therefore the same content hash:

- dict entries are sorted by key (field order and dict order never matter; a record
  comes back with its keys in sorted order);
- ints, floats (as float64), bools, ``None``, str and bytes are MessagePack natives;
  ``bytearray`` and ``memoryview`` are stored as bytes and come back as ``bytes``;
- lists stay lists and tuples come back as tuples;
- numpy arrays and scalars keep dtype, shape and bytes; torch tensors keep dtype,
  shape and bytes (they come back on the CPU, without autograd history);
- ints outside MessagePack's 64-bit range keep their exact value;
- litdata media values (``litdata.Image`` and friends) are stored with litdata's own
  serializer and come back decoded exactly as litdata's ``StreamingDataset`` decodes
  them (an ``Image`` comes back as a ``uint8`` tensor).

Anything else raises :class:`UnsupportedValueError` naming the value's path.
"""

from __future__ import annotations

import sys
from typing import Any

import msgpack
import numpy as np

from litstore.errors import IntegrityError, UnsupportedValueError

_TUPLE = 1
_NDARRAY = 2
_NPSCALAR = 3
_TENSOR = 4
_BIGINT = 5
_MEDIA = 6

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1

# Lone surrogates ("\ud800") are valid Python str; keep them rather than fail.
_PACKER_OPTIONS: dict[str, Any] = {"use_bin_type": True, "unicode_errors": "surrogatepass"}


# Dict keys MessagePack reads back as they were written (hashable, same type).
_KEY_TYPES = (str, int, float, bool, bytes, type(None))


def _sorted_keys(mapping: dict[Any, Any], path: str) -> list[Any]:
    """The keys of ``mapping`` in canonical order: all-str keys as text, all-int keys as numbers."""
    keys = list(mapping)
    if all(type(key) is str for key in keys):
        return sorted(keys)
    if all(type(key) is int for key in keys) and all(_INT_MIN <= key <= _UINT_MAX for key in keys):
        return sorted(keys)
    for key in keys:
        if type(key) not in _KEY_TYPES or (type(key) is int and not _INT_MIN <= key <= _UINT_MAX):
            raise UnsupportedValueError(
                path, key, f"dict key {key!r} ({type(key).__name__}) cannot be stored; use str, int, float or bytes"
            )
    # Mixed or non-str keys (NaN included) sort by their encoding: total and stable.
    return sorted(keys, key=_pack)


def _canonical(value: Any, path: str) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _canonical(value[key], f"{path}.{key}" if path else str(key)) for key in _sorted_keys(value, path)}
    if kind is str or kind is float or kind is bool or kind is bytes or value is None:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _UINT_MAX else msgpack.ExtType(_BIGINT, str(value).encode())
    if kind is list:
        return [_canonical(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if kind is tuple:
        items = [_canonical(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return msgpack.ExtType(_TUPLE, _pack(items))
    if isinstance(value, np.ndarray):
        _check_dtype(value.dtype, value, path)
        body = [value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes()]
        return msgpack.ExtType(_NDARRAY, _pack(body))
    if isinstance(value, np.generic):
        _check_dtype(value.dtype, value, path)
        return msgpack.ExtType(_NPSCALAR, _pack([value.dtype.str, value.tobytes()]))
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        body = [str(value.dtype).removeprefix("torch."), list(value.shape), raw]
        return msgpack.ExtType(_TENSOR, _pack(body))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return _canonical(dict(value), path)
    if isinstance(value, (str, int, float)):  # subclasses such as IntEnum store as their base type
        return _canonical(_builtin(value), path)
    if type(value).__module__.startswith("litdata"):
        from litstore._litdata import media

        if media.is_media(value):
            data_format, data = media.encode_media(value)
            return msgpack.ExtType(_MEDIA, _pack([data_format, data]))
    raise UnsupportedValueError(path, value)


def _check_dtype(dtype: np.dtype[Any], value: Any, path: str) -> None:
    if dtype.hasobject:
        raise UnsupportedValueError(path, value, "numpy object arrays cannot be stored")
    if dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedValueError(path, value, f"structured numpy dtype {dtype} cannot be stored")


def _builtin(value: Any) -> Any:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    raise AssertionError(value)


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, **_PACKER_OPTIONS)
    return packed


def encode(record: Any) -> bytes:
    """The canonical bytes of ``record``.

    Raises:
        UnsupportedValueError: a value has a type litstore cannot store.
    """
    return _pack(_canonical(record, ""))


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(_unpack(data))
    if code == _NDARRAY:
        dtype, shape, raw = _unpack(data)
        if not raw or np.dtype(dtype).itemsize == 0:  # empty, or zero-width strings: nothing to read
            return np.zeros(shape, dtype=np.dtype(dtype))
        return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()
    if code == _NPSCALAR:
        dtype, raw = _unpack(data)
        if np.dtype(dtype).itemsize == 0:  # np.str_("") and np.bytes_(b"")
            return np.dtype(dtype).type()
        return np.frombuffer(raw, dtype=np.dtype(dtype))[0]
    if code == _TENSOR:
        import torch

        dtype_name, shape, raw = _unpack(data)
        dtype = getattr(torch, dtype_name)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if code == _BIGINT:
        return int(data.decode())
    if code == _MEDIA:
        from litstore._litdata import media

        data_format, raw = _unpack(data)
        return media.decode_media(data_format, raw)
    raise ValueError(f"unknown extension type {code} in stored record")


_UNPACK_OPTIONS: dict[str, Any] = {
    "raw": False,
    "ext_hook": _ext_hook,
    "strict_map_key": False,
    "use_list": True,
    "unicode_errors": "surrogatepass",
}


def _unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, **_UNPACK_OPTIONS)


# What decoding damaged or hostile bytes can raise, from msgpack, numpy, torch or litdata.
_DECODE_FAILURES = (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError)


def decode_all(data: bytes, where: str = "records") -> list[Any]:
    """The records whose canonical bytes, back to back, are ``data``.

    Raises:
        IntegrityError: the bytes are not canonical records (``where`` names them).
    """
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1), **_UNPACK_OPTIONS)
    unpacker.feed(data)
    try:
        return list(unpacker)
    except _DECODE_FAILURES as exc:
        raise IntegrityError(f"{where}: stored bytes do not decode: {exc!r}") from exc


def decode(data: bytes | memoryview, where: str = "record") -> Any:
    """The record whose canonical bytes are ``data``.

    Raises:
        IntegrityError: the bytes are not a canonical record (``where`` names it).
    """
    try:
        return _unpack(data)
    except _DECODE_FAILURES as exc:
        raise IntegrityError(f"{where}: stored bytes do not decode: {exc!r}") from exc
