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

from typing import Any

import msgpack
import numpy as np
import torch

from litstore import _litdata

_TUPLE = 1
_NDARRAY = 2
_NPSCALAR = 3
_TENSOR = 4
_BIGINT = 5
_MEDIA = 6

_NATIVE = (str, int, float, bool, bytes, type(None))
_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1

_PACKER_OPTIONS: dict[str, Any] = {"use_bin_type": True}


class UnsupportedValueError(TypeError):
    """A value in a record has a type litstore cannot store; ``path`` says where."""

    def __init__(self, path: str, value: Any) -> None:
        super().__init__(f"{path or 'record'}: values of type {type(value).__name__} cannot be stored")
        self.path = path


def _sort_key(key: Any) -> tuple[str, Any]:
    return (type(key).__name__, key)


def _canonical(value: Any, path: str) -> Any:
    kind = type(value)
    if kind is dict:
        try:
            keys = sorted(value)
        except TypeError:
            keys = sorted(value, key=_sort_key)
        return {key: _canonical(value[key], f"{path}.{key}" if path else str(key)) for key in keys}
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
        if value.dtype.hasobject:
            raise UnsupportedValueError(path, value)
        body = [value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes()]
        return msgpack.ExtType(_NDARRAY, _pack(body))
    if isinstance(value, np.generic):
        if value.dtype.hasobject:
            raise UnsupportedValueError(path, value)
        return msgpack.ExtType(_NPSCALAR, _pack([value.dtype.str, value.tobytes()]))
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        body = [str(value.dtype).removeprefix("torch."), list(value.shape), flat.view(torch.uint8).numpy().tobytes()]
        return msgpack.ExtType(_TENSOR, _pack(body))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return _canonical(dict(value), path)
    if isinstance(value, (str, int, float)):  # subclasses such as IntEnum store as their base type
        return _canonical(_builtin(value), path)
    if _litdata.is_media(value):
        data_format, data = _litdata.encode_media(value)
        return msgpack.ExtType(_MEDIA, _pack([data_format, data]))
    raise UnsupportedValueError(path, value)


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
        return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()
    if code == _NPSCALAR:
        dtype, raw = _unpack(data)
        return np.frombuffer(raw, dtype=np.dtype(dtype))[0]
    if code == _TENSOR:
        dtype_name, shape, raw = _unpack(data)
        dtype = getattr(torch, dtype_name)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if code == _BIGINT:
        return int(data.decode())
    if code == _MEDIA:
        data_format, raw = _unpack(data)
        return _litdata.decode_media(data_format, raw)
    raise ValueError(f"unknown extension type {code} in stored record")


def _unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False, use_list=True)


def decode(data: bytes | memoryview) -> Any:
    """The record whose canonical bytes are ``data``."""
    return _unpack(data)
