"""litdata media values (``litdata.Image``, ...) inside records: serialized by litdata.

Only importing this module imports litdata (and torch); the media codec that
:mod:`litstore._litdata` installs in :mod:`litstore.format.codec` does so the first
time a record holds a media value.

A stored media value names the litdata serializer that decodes it (its "data
format", such as ``image:png``), and stored bytes may come from anyone. Some of
litdata's serializers unpickle their bytes (``pickle``, ``graph``), which would run
code chosen by whoever wrote the store, so only the serializers that decode media
(:data:`MEDIA_FORMATS`) are used, both to write and to read.
"""

from __future__ import annotations

import math
import struct
from copy import copy
from typing import Any

from litdata.constants import _TORCH_DTYPES_MAPPING
from litdata.streaming.serializers import _SERIALIZERS
from litdata.types import _MediaRef

from litstore.errors import IntegrityError, UnsupportedValueError

#: The litdata serializers a media value may be stored with: those that turn bytes into
#: arrays, tensors, text or decoder objects and never unpickle (``pickle``, ``graph`` and
#: ``json`` are left out).
MEDIA_FORMATS = frozenset(
    {
        "str", "text", "bool", "int", "float", "bytes", "file",
        "image", "pil", "jpeg", "jpeg_array", "tifffile", "video", "audio",
        "numpy", "no_header_numpy", "tensor", "no_header_tensor",
        "mesh", "pdf", "nifti",
    }
)  # fmt: skip

# trimesh.load is told the file type by the stored format; only the types litdata writes.
_MESH_TYPES = frozenset({"glb", "ply", "stl"})

# What litdata's serializers raise on bad values or damaged bytes (PIL's UnidentifiedImageError is an OSError).
_SERIALIZER_FAILURES = (ValueError, TypeError, KeyError, IndexError, OSError, RuntimeError, EOFError, struct.error)


def is_media(value: Any) -> bool:
    """Whether ``value`` is one of litdata's media types (``litdata.Image``, ...)."""
    return isinstance(value, _MediaRef)


def encode_media(value: Any, path: str = "") -> tuple[str, bytes]:
    """Serialize a litdata media value with litdata's own serializer: ``(format, bytes)``.

    Raises:
        UnsupportedValueError: the only serializer litdata has for ``value`` is not one
            of :data:`MEDIA_FORMATS` (``litdata.Tensor(bytes=...)`` without a dtype
            would be pickled, for example), or litdata could not serialize it (a
            missing file, an unknown image format, ...).
    """
    for name, serializer in _SERIALIZERS.items():
        if serializer.can_serialize(value):
            if name not in MEDIA_FORMATS:
                raise UnsupportedValueError(
                    path,
                    value,
                    f"litdata would store this {type(value).__name__} with its {name!r} serializer, "
                    "which litstore never reads back (it can run code)",
                )
            try:
                data, data_format = serializer.serialize(value)
            except _SERIALIZER_FAILURES as exc:
                raise UnsupportedValueError(path, value, f"litdata could not serialize it: {exc}") from exc
            return data_format or name, bytes(data)
    raise UnsupportedValueError(path, value, f"litdata has no serializer for {type(value).__name__}")


def decode_media(data_format: str, data: bytes) -> Any:
    """Decode media bytes exactly as litdata's streaming reader would.

    Raises:
        IntegrityError: ``data_format`` names a serializer outside :data:`MEDIA_FORMATS`,
            or the bytes do not decode.
    """
    name, _, detail = data_format.partition(":")
    if name not in MEDIA_FORMATS or (name == "mesh" and detail not in _MESH_TYPES):
        raise IntegrityError(f"stored media format {data_format!r} is not one litstore decodes")
    if name == "tensor":
        _check_tensor_header(data)
    serializer = copy(_SERIALIZERS[name])
    try:
        serializer.setup(data_format)
        return serializer.deserialize(data)
    except _SERIALIZER_FAILURES as exc:
        raise IntegrityError(f"stored {data_format!r} media bytes do not decode: {exc!r}") from exc


def _check_tensor_header(data: bytes) -> None:
    """Refuse a ``tensor`` whose header claims more elements than its bytes hold (litdata would allocate them)."""
    try:
        dtype_index, rank = struct.unpack_from(">II", data, 0)
        shape = struct.unpack_from(f">{rank}I", data, 8) if rank <= 64 else None
        dtype = _TORCH_DTYPES_MAPPING[dtype_index]
    except (struct.error, KeyError) as exc:
        raise IntegrityError(f"stored tensor media has a damaged header: {exc!r}") from exc
    if shape is None or math.prod(shape) * dtype.itemsize != len(data) - 8 - 4 * rank:
        raise IntegrityError("stored tensor media has a shape that does not match its bytes")
