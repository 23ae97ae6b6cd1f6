"""litdata media values (``litdata.Image``, ...) inside records: serialized by litdata.

Only importing this module imports litdata (and torch); the media codec that
:mod:`litstore._litdata` installs in :mod:`litstore.format.codec` does so the first
time a record holds a media value.

Which data formats are stored and decoded is :mod:`.formats`' concern (never a
serializer that unpickles). Images (``image``, ``jpeg``) are decoded by PIL straight
into the tensor litdata's reader gives, where that is the same tensor (PNG and JPEG
of 8-bit modes; ``tests/_litdata/test_media_decode.py`` holds them equal to litdata's
own serializer), so a read never imports torchvision; other images go to litdata.
A decoded value's fingerprint (:func:`fingerprint`) is what tells that it changed in
place since it was read (see :mod:`litstore.format.stored_media`).
"""

from __future__ import annotations

import io
import math
import struct
import sys
from copy import copy
from typing import Any

import numpy as np
import torch
import xxhash
from litdata.constants import _TORCH_DTYPES_MAPPING
from litdata.streaming.serializers import _SERIALIZERS, _decode_image_tensor, _jpeg_has_exif_app1
from litdata.types import _MediaRef
from PIL import Image as PILImage

from litstore._litdata.formats import MEDIA_FORMATS, serializer_name
from litstore.errors import IntegrityError, UnsupportedValueError

# What litdata's serializers raise on bad values or damaged bytes (PIL's UnidentifiedImageError is an OSError).
_SERIALIZER_FAILURES = (
    ValueError, TypeError, KeyError, IndexError, OSError, RuntimeError, EOFError, struct.error,
    PILImage.DecompressionBombError,
)  # fmt: skip

# The PIL modes whose RGB conversion is the one torchvision's decoders make (8 bits a sample).
_PIL_RGB_MODES = frozenset({"1", "L", "LA", "RGB", "RGBA", "P", "PA"})
_PNG = b"\x89PNG\r\n\x1a\n"

#: Images this process decodes with PIL before it hands them to torchvision (see :func:`decode_image`).
PIL_DECODES = 256
_pil_decodes = 0


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
    name = serializer_name(data_format)
    if name is None:
        raise IntegrityError(f"stored media format {data_format!r} is not one litstore decodes")
    if name == "tensor":
        _check_tensor_header(data)
    try:
        if name in ("image", "jpeg"):
            return decode_image(data)
        serializer = copy(_SERIALIZERS[name])
        serializer.setup(data_format)
        return serializer.deserialize(data)
    except _SERIALIZER_FAILURES as exc:
        raise IntegrityError(f"stored {data_format!r} media bytes do not decode: {exc!r}") from exc


def decode_image(data: bytes) -> torch.Tensor:
    """Image bytes as litdata's reader decodes them: an RGB ``uint8`` tensor, channels first.

    PNG (8 bits a sample, one frame) and JPEG (gray or colour, without an EXIF
    orientation, which litdata applies through PIL itself) are decoded by PIL, whose
    RGB conversion gives the tensor torchvision's decoders give, so that a lookup
    never pays torchvision's import (1-2 s, and hundreds of MiB). torchvision decodes
    a 224x224 JPEG about 20% faster than PIL, so once torchvision is imported, or
    after :data:`PIL_DECODES` images in this process (a stream, not a lookup), images
    go to litdata's own decoder, as do all other images.
    """
    global _pil_decodes
    if _pil_decodes < PIL_DECODES and "torchvision" not in sys.modules:
        if data.startswith(_PNG) and data[24:25] in (b"\x01", b"\x02", b"\x04", b"\x08"):
            pixels = _pil_rgb(data)
        elif data.startswith(b"\xff\xd8") and not _jpeg_has_exif_app1(data):
            pixels = _pil_rgb(data)
        else:
            pixels = None
        if pixels is not None:
            _pil_decodes += 1
            return torch.from_numpy(pixels)
    decoded: torch.Tensor = _decode_image_tensor(data)
    return decoded


def _pil_rgb(data: bytes) -> np.ndarray | None:
    """The RGB pixels, channels first, of a one-frame image of an 8-bit mode; ``None`` for other images."""
    with PILImage.open(io.BytesIO(data)) as image:
        if image.mode not in _PIL_RGB_MODES or getattr(image, "n_frames", 1) != 1:
            return None
        rgb = image.convert("RGB")
    # PIL's band split writes the planes in C; a permuted copy in torch took 10x longer on a busy machine.
    return np.stack([np.asarray(band) for band in rgb.split()])


def fingerprint(value: Any) -> Any:
    """What a decoded media value is now (dtype, shape and an xxh3 of its bytes), to tell an in-place change.

    ``None`` for values whose content this cannot read (decoder objects): those are
    not remembered, and are written back as litdata serializes them.
    """
    if isinstance(value, torch.Tensor):
        if value.layout is not torch.strided or value.device.type != "cpu":
            return None
        try:
            flat: Any = value.detach().numpy() if value.is_contiguous() else None
        except TypeError:  # a dtype numpy lacks (bfloat16)
            flat = None
        if flat is None:
            flat = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy() if value.numel() else b""
        return ("tensor", value.dtype, tuple(value.shape), xxhash.xxh3_64_intdigest(flat))
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return None
        contiguous: Any = np.ascontiguousarray(value)
        return ("ndarray", value.dtype.str, value.shape, xxhash.xxh3_64_intdigest(contiguous))
    if isinstance(value, PILImage.Image):
        return ("pil", value.mode, value.size, xxhash.xxh3_64_intdigest(value.tobytes()))
    return None


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
