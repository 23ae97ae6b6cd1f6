"""litdata media values (``litdata.Image``, ...) inside records: serialized by litdata.

Only importing this module imports litdata (and torch); the codec does so the first
time a record holds a media value.
"""

from __future__ import annotations

from copy import copy
from typing import Any

from litdata.streaming.serializers import _SERIALIZERS
from litdata.types import _MediaRef


def is_media(value: Any) -> bool:
    """Whether ``value`` is one of litdata's media types (``litdata.Image``, ...)."""
    return isinstance(value, _MediaRef)


def encode_media(value: Any) -> tuple[str, bytes]:
    """Serialize a litdata media value with litdata's own serializer: ``(format, bytes)``."""
    for name, serializer in _SERIALIZERS.items():
        if serializer.can_serialize(value):
            data, data_format = serializer.serialize(value)
            return data_format or name, bytes(data)
    raise TypeError(f"litdata has no serializer for {type(value).__name__}")


def decode_media(data_format: str, data: bytes) -> Any:
    """Decode media bytes exactly as litdata's streaming reader would."""
    serializer = copy(_SERIALIZERS[data_format.split(":", 1)[0]])
    serializer.setup(data_format)
    return serializer.deserialize(data)
