"""Media in their stored form, and decoded media values that remember it.

A media value (``litdata.Image`` and friends) is stored as a format name and the
bytes litdata's serializer wrote (a PNG file's bytes, say). Reads decode it as
litdata's ``StreamingDataset`` does (an image becomes a ``uint8`` tensor), and the
decoded value remembers the stored form it came from, so that writing it back
stores **the same bytes** (same content hash), not the decoded pixels:

- a value decoded from stored media is recorded in a weak registry keyed by the
  object, together with its :class:`Media` and a fingerprint of what it decoded to
  (xxh3 of a tensor's or array's bytes, with its dtype and shape);
  :func:`recall` gives the :class:`Media` back only while the fingerprint still
  matches, so a value changed in place (pixels edited, ``resize_``) is stored as
  what it now is, never as its old bytes;
- ``str`` and ``bytes`` (``litdata.Text``, ``litdata.File``) cannot be held weakly;
  they come back as :class:`MediaText` and :class:`MediaBytes`, subclasses that
  carry their :class:`Media` (they are immutable, so nothing needs checking);
- a copy (``copy.deepcopy``, ``tensor.clone()``, a batch made by a ``DataLoader``)
  is a new value: it is stored as what it is.

Where no decoded value is wanted (the command line, exports, Ray), records carry
:class:`Media` values themselves: within :func:`encoded_media` (or for the items of
:func:`keeping_media`) records are read with media left in their stored form, without
importing litdata or torch, and a
:class:`Media` is written back as exactly its bytes. ``media.decode()`` decodes one.

Pure: imports neither litdata nor torch.
"""

from __future__ import annotations

import functools
import struct
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from litstore.errors import IntegrityError

_T = TypeVar("_T")

#: How a Media is decoded: :func:`litstore.format.codec.decode_media`, set when the codec is imported
#: (this module is beneath the codec and never imports it).
_decoder: Callable[[Media], Any] | None = None

#: The fingerprint of a decoded value: ``None`` where it has none (it is then not remembered).
Fingerprint = Callable[[Any], Hashable | None]


@dataclass(frozen=True, slots=True)
class Media:
    """A media value in its stored form: litdata's data format (``"image:png"``) and the bytes it wrote.

    Written into a record, it is stored as exactly these bytes; :meth:`decode` gives
    the value a read of the record gives (an image as a ``uint8`` tensor).
    """

    format: str
    data: bytes

    def decode(self) -> Any:
        """The value litdata's reader decodes these bytes to (it remembers this :class:`Media`).

        Raises:
            IntegrityError: the format is not one litstore decodes, or the bytes do not decode.
        """
        if _decoder is None:
            raise IntegrityError(f"a {self.format!r} media value, and no record codec is loaded to decode it")
        return _decoder(self)

    def describe(self) -> str:
        """A short description read from the bytes' header, never decoded: ``<PNG 32x32, 412 bytes>``."""
        return describe(self.format, self.data)

    def __repr__(self) -> str:
        return f"Media({self.format!r}, {self.describe()})"


class MediaText(str):
    """A ``str`` decoded from stored text media (``litdata.Text``): written back as that media."""

    media: Media

    def __reduce__(self) -> tuple[Any, ...]:
        return (_media_text, (str(self), self.media))


class MediaBytes(bytes):
    """``bytes`` decoded from stored file media (``litdata.File``): written back as that media."""

    media: Media

    def __reduce__(self) -> tuple[Any, ...]:
        return (_media_bytes, (bytes(self), self.media))


def _media_text(text: str, media: Media) -> MediaText:
    value = MediaText(text)
    value.media = media
    return value


def _media_bytes(data: bytes, media: Media) -> MediaBytes:
    value = MediaBytes(data)
    value.media = media
    return value


# id(value) -> (weak reference to value, its Media, its fingerprint when decoded).
_origins: dict[int, tuple[weakref.ref[Any], Media, Hashable]] = {}


def _forget(key: int, _ref: weakref.ref[Any]) -> None:
    entry = _origins.get(key)
    if entry is not None and entry[0] is _ref:
        del _origins[key]


def remember(value: Any, media: Media, fingerprint: Fingerprint) -> Any:
    """``value``, decoded from ``media``, made to remember it (see the module docstring).

    Returns ``value`` itself, or for ``str`` and ``bytes`` a :class:`MediaText` or
    :class:`MediaBytes` equal to it. A value with no fingerprint, or that cannot be
    referenced weakly, is returned as it is and written back as what it is.
    """
    kind = type(value)
    if kind is str:
        return _media_text(value, media)
    if kind is bytes:
        return _media_bytes(value, media)
    digest = fingerprint(value)
    if digest is None:
        return value
    key = id(value)
    try:
        ref = weakref.ref(value, functools.partial(_forget, key))
    except TypeError:
        return value
    _origins[key] = (ref, media, digest)
    return value


def recall(value: Any, fingerprint: Fingerprint) -> Media | None:
    """The :class:`Media` ``value`` was decoded from, if it was and is unchanged since; else ``None``."""
    if isinstance(value, (MediaText, MediaBytes)):
        return value.media
    entry = _origins.get(id(value))
    if entry is None or entry[0]() is not value:
        return None
    return entry[1] if fingerprint(value) == entry[2] else None


class _Mode(threading.local):
    """Whether this thread's decoder leaves media in their stored form."""

    encoded = False


_mode = _Mode()


def media_left_encoded() -> bool:
    """Whether records decoded now keep their media as :class:`Media` (inside :func:`keeping_media`)."""
    return _mode.encoded


@contextmanager
def encoded_media() -> Iterator[None]:
    """Within it, records read in this thread keep their media as :class:`Media` (no decode, no import of litdata).

    For a lazy iterator of records that the caller's code consumes, :func:`keeping_media`
    limits this to the reading of each item.
    """
    before = _mode.encoded
    _mode.encoded = True
    try:
        yield
    finally:
        _mode.encoded = before


def keeping_media(items: Iterable[_T]) -> Iterator[_T]:
    """The items of ``items``, each read with media left as :class:`Media` (no decode, no import of litdata).

    Only the reading of each item is affected: the caller's code between items runs
    with the usual decoding.
    """
    iterator = iter(items)
    while True:
        with encoded_media():
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item


# -- describing media from their headers ---------------------------------------------

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_kind(data: bytes) -> str | None:
    """``"PNG"``, ``"JPEG"``, ``"GIF"``, ``"WEBP"`` or ``"BMP"`` from the bytes' signature, else ``None``."""
    if data.startswith(_PNG):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:2] == b"BM":
        return "BMP"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` read from a PNG, JPEG, GIF or BMP header; ``None`` where it cannot be read."""
    kind = image_kind(data)
    try:
        if kind == "PNG" and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if kind == "GIF":
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        if kind == "BMP":
            width, height = struct.unpack("<ii", data[18:26])
            return width, abs(height)
        if kind == "JPEG":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    index = 2
    while index + 9 <= len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker == 0xFF:  # fill byte
            index += 1
            continue
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[index + 5 : index + 9])
            return width, height
        if marker == 0xD8 or 0xD0 <= marker <= 0xD7:
            index += 2
            continue
        index += 2 + struct.unpack(">H", data[index + 2 : index + 4])[0]
    return None


def describe(data_format: str, data: bytes) -> str:
    """``<PNG 32x32, 412 bytes>`` for an image, ``<audio, 3,000 bytes>`` for other media: from headers only."""
    kind = image_kind(data) if data_format.partition(":")[0] in ("image", "jpeg") else None
    if kind is not None:
        size = image_size(data)
        shape = f" {size[0]}x{size[1]}" if size is not None else ""
        return f"<{kind}{shape}, {len(data):,} bytes>"
    return f"<{data_format}, {len(data):,} bytes>"
