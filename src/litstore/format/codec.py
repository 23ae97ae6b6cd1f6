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
- ``datetime`` (naive or aware) and ``date`` keep every field (``fold`` included); an
  aware datetime's tzinfo is kept as its UTC offset, so a named zone (``zoneinfo``,
  ``pytz``) comes back as the ``datetime.timezone`` of the offset it had then (the same
  instant and wall time, equal under ``==``). Subclasses (``pandas.Timestamp``) store
  as a plain ``datetime``, unless they hold nanoseconds it cannot;
- ``set`` and ``frozenset`` come back as what they were; their items are stored sorted
  by their encoding, so the order a set iterates in never changes the hash;
- litdata media values (``litdata.Image`` and friends) are stored with litdata's own
  serializer and come back decoded exactly as litdata's ``StreamingDataset`` decodes
  them (an ``Image`` comes back as a ``uint8`` tensor). This module stores such a
  value as a format name and bytes and knows nothing else about it: the
  :class:`MediaCodec` that does is installed by :mod:`litstore._litdata` when it is
  imported (``import litstore`` does), so the record format never imports litdata.
  A decoded media value remembers its stored bytes and is written back as them while
  it is unchanged, and a :class:`~litstore.format.stored_media.Media` (media in their
  stored form, as :func:`~litstore.format.stored_media.keeping_media` reads them) is
  written as exactly its bytes (see :mod:`litstore.format.stored_media`).

Anything else raises :class:`UnsupportedValueError` naming the value's path, and so
does a record nested more than :data:`MAX_DEPTH` containers deep (a record that
contains itself included).

Decoding treats the bytes as hostile: it never runs code the bytes name (media
formats are allowlisted), never recurses past :data:`MAX_DEPTH`, and checks that an
array's declared dtype and shape match its bytes before allocating anything; bytes
that break a rule raise :class:`IntegrityError`.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
import threading
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import Any, Protocol

import msgpack
import numpy as np

from litstore.errors import IntegrityError, UnsupportedValueError
from litstore.format import stored_media
from litstore.format.stored_media import Media

_TUPLE = 1
_NDARRAY = 2
_NPSCALAR = 3
_TENSOR = 4
_BIGINT = 5
_MEDIA = 6
# (10 onwards: added in format 4's lifetime; stores written before hold none, so they read as they did.)
_DATETIME = 10
_DATE = 11
_SET = 12
_FROZENSET = 13
_MICROSECOND = timedelta(microseconds=1)

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1

#: How many containers (dicts, lists, tuples) deep a record may nest, its own dict included.
MAX_DEPTH = 64

# Python's default limit on int <-> str conversion; a bigger int could not be read back
# by a process that keeps the default.
_BIGINT_MAX_DIGITS = 4300

# Lone surrogates ("\ud800") are valid Python str; keep them rather than fail.
_PACKER_OPTIONS: dict[str, Any] = {"use_bin_type": True, "unicode_errors": "surrogatepass"}


class MediaCodec(Protocol):
    """How media values become a format name and bytes, and back; see :func:`install_media_codec`."""

    def encode(self, value: Any, path: str) -> tuple[str, bytes] | None:
        """``(format, bytes)`` of ``value`` if it is a media value, else ``None``.

        Raises:
            UnsupportedValueError: a media value that cannot be stored (``path`` names it).
        """

    def decode(self, data_format: str, data: bytes) -> Any:
        """The media value stored as ``data`` in ``data_format``.

        Raises:
            IntegrityError: the format is not one that is decoded, or the bytes do not decode.
        """

    def check(self, data_format: str, path: str) -> None:
        """Refuse to store media of ``data_format`` unless reads decode it.

        Raises:
            UnsupportedValueError: the format is not one that is decoded (``path`` names the value).
        """

    def fingerprint(self, value: Any) -> Any:
        """What tells a decoded media value changed in place (hashable), or ``None`` where nothing does."""


_media_codec: MediaCodec | None = None


def install_media_codec(media: MediaCodec) -> None:
    """Store and decode media values with ``media`` (:mod:`litstore._litdata` installs litdata's).

    Without one, a media value is an unsupported value and stored media bytes do not decode.
    """
    global _media_codec
    _media_codec = media


def _fingerprint(value: Any) -> Any:
    return _media_codec.fingerprint(value) if _media_codec is not None else None


def decode_media(media: Media) -> Any:
    """The value ``media`` decodes to, as a read of a record holding it gives it (remembering ``media``).

    Raises:
        IntegrityError: the format is not one that is decoded, or the bytes do not decode.
    """
    if _media_codec is None:
        raise IntegrityError(f"a {media.format!r} media value, and no media codec is installed")
    return stored_media.remember(_media_codec.decode(media.format, media.data), media, _fingerprint)


stored_media._decoder = decode_media


def _media_extension(media: Media) -> msgpack.ExtType:
    return msgpack.ExtType(_MEDIA, _pack([media.format, media.data]))


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


def _canonical(value: Any, path: str, depth: int = 0) -> Any:
    kind = type(value)
    if kind is dict:
        _check_depth(value, path, depth)
        return {
            key: _canonical(value[key], f"{path}.{key}" if path else str(key), depth + 1)
            for key in _sorted_keys(value, path)
        }
    if kind is str or kind is float or kind is bool or kind is bytes or value is None:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _UINT_MAX else _bigint(value, path)
    if kind is list:
        _check_depth(value, path, depth)
        return [_canonical(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
    if kind is tuple:
        _check_depth(value, path, depth)
        items = [_canonical(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
        return msgpack.ExtType(_TUPLE, _pack(items))
    if kind is Media:
        if type(value.format) is not str or type(value.data) is not bytes:
            raise UnsupportedValueError(path, value, "a Media value holds a str format and bytes")
        if _media_codec is None:
            raise UnsupportedValueError(path, value, "no media codec is installed")
        _media_codec.check(value.format, path)
        return _media_extension(value)
    origin = stored_media.recall(value, _fingerprint)  # a decoded media value, unchanged since
    if origin is not None:
        return _media_extension(origin)
    if isinstance(value, np.ndarray):
        _check_dtype(value.dtype, value, path)
        body = [value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes()]
        return msgpack.ExtType(_NDARRAY, _pack(body))
    if isinstance(value, np.generic):
        _check_dtype(value.dtype, value, path)
        return msgpack.ExtType(_NPSCALAR, _pack([value.dtype.str, value.tobytes()]))
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported
    if torch is not None and isinstance(value, torch.Tensor):
        return msgpack.ExtType(_TENSOR, _pack(_tensor_body(torch, value, path)))
    if isinstance(value, datetime):
        return msgpack.ExtType(_DATETIME, _pack(_datetime_body(value, path)))
    if isinstance(value, date):
        return msgpack.ExtType(_DATE, _pack([value.year, value.month, value.day]))
    if isinstance(value, (set, frozenset)):
        _check_depth(value, path, depth)
        code = _FROZENSET if isinstance(value, frozenset) else _SET
        return msgpack.ExtType(code, _set_body(value, f"{path}{{}}", depth + 1))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return _canonical(dict(value), path, depth)
    if isinstance(value, (str, int, float)):  # subclasses such as IntEnum store as their base type
        return _canonical(_builtin(value), path, depth)
    media = _media_codec.encode(value, path) if _media_codec is not None else None
    if media is not None:
        return msgpack.ExtType(_MEDIA, _pack(list(media)))
    if type(value).__module__.startswith("PIL."):
        raise UnsupportedValueError(
            path,
            value,
            "PIL images cannot be stored as such; use litdata.Image(image=...), or for the rows of a Hugging Face "
            "dataset litstore.sources.huggingface(dataset), which stores the images' own bytes",
        )
    raise UnsupportedValueError(path, value)


def _check_depth(value: Any, path: str, depth: int) -> None:
    if depth >= MAX_DEPTH:
        shown = path if len(path) <= 80 else path[:80] + "..."
        raise UnsupportedValueError(
            shown, value, f"nested more than {MAX_DEPTH} containers deep (a value that contains itself never fits)"
        )


def _bigint(value: int, path: str) -> msgpack.ExtType:
    try:
        text = str(value)
    except ValueError:  # past this interpreter's int_max_str_digits
        text = ""
    if not text or len(text.lstrip("-")) > _BIGINT_MAX_DIGITS:
        raise UnsupportedValueError(path, value, f"ints of more than {_BIGINT_MAX_DIGITS} digits cannot be stored")
    return msgpack.ExtType(_BIGINT, text.encode())


def _datetime_body(value: datetime, path: str) -> list[Any]:
    """The fields of ``value``, its UTC offset last in microseconds (``None``: naive)."""
    if getattr(value, "nanosecond", 0):
        raise UnsupportedValueError(path, value, "a datetime with nanoseconds cannot be stored exactly")
    offset = value.utcoffset()
    if value.tzinfo is not None and offset is None:
        raise UnsupportedValueError(path, value, f"its tzinfo {value.tzinfo!r} gives no UTC offset")
    fields = [value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond]
    return [*fields, value.fold, None if offset is None else offset // _MICROSECOND]


def _set_body(value: set[Any] | frozenset[Any], path: str, depth: int) -> bytes:
    """The items of ``value`` as a MessagePack array, sorted by their canonical bytes."""
    items = sorted(_pack(_canonical(item, path, depth)) for item in value)
    header: bytes = msgpack.Packer().pack_array_header(len(items))
    return header + b"".join(items)


def _tensor_body(torch: Any, value: Any, path: str) -> list[Any]:
    if value.layout is not torch.strided or value.is_quantized or value.is_nested:
        raise UnsupportedValueError(path, value, f"{value.layout} tensors cannot be stored; convert to a dense tensor")
    if value.device.type == "meta":
        raise UnsupportedValueError(path, value, "meta tensors hold no data and cannot be stored")
    tensor = value.detach().cpu()
    try:
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    except (RuntimeError, TypeError) as exc:
        raise UnsupportedValueError(path, value, f"tensors of dtype {value.dtype} cannot be stored: {exc}") from exc
    return [str(value.dtype).removeprefix("torch."), list(value.shape), raw]


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


_PACKER = msgpack.Packer(**_PACKER_OPTIONS)
# Values whose canonical form is themselves (ints only within MessagePack's range).
_SCALARS = frozenset((str, int, float, bool, bytes, type(None)))
_STR = frozenset((str,))


def encode(record: Any) -> bytes:
    """The canonical bytes of ``record``.

    Records that are flat dicts of str keys and scalar values (the common case) take a
    fast path with the same result: their canonical form is the dict itself, keys sorted.

    Raises:
        UnsupportedValueError: a value has a type litstore cannot store.
    """
    if type(record) is dict and set(map(type, record.values())) <= _SCALARS and set(map(type, record)) <= _STR:
        try:
            packed: bytes = _PACKER.pack({key: record[key] for key in sorted(record)})
        except OverflowError:
            pass  # an int beyond 64 bits: the general path stores it as an extension
        else:
            return packed
    return _pack(_canonical(record, ""))


class _Nesting(threading.local):
    """How many tuple extensions deep the decoder of this thread is (each one recurses)."""

    depth = 0


_nesting = _Nesting()


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE or code == _SET or code == _FROZENSET:
        depth = _nesting.depth
        if depth >= MAX_DEPTH:
            raise ValueError(f"tuples or sets nested more than {MAX_DEPTH} deep")
        _nesting.depth = depth + 1
        try:
            return tuple(_unpack(data)) if code == _TUPLE else _set(data, frozen=code == _FROZENSET)
        finally:
            _nesting.depth = depth
    if code == _DATETIME:
        return _datetime(*_body(data, 9))
    if code == _DATE:
        year, month, day = _body(data, 3)
        if not type(year) is type(month) is type(day) is int:
            raise ValueError("a date whose fields are not ints")
        return date(year, month, day)
    if code == _NDARRAY:
        return _ndarray(*_body(data, 3))
    if code == _NPSCALAR:
        return _npscalar(*_body(data, 2))
    if code == _TENSOR:
        return _tensor(*_body(data, 3))
    if code == _BIGINT:
        if len(data) > _BIGINT_MAX_DIGITS + 1:
            raise ValueError(f"an int of more than {_BIGINT_MAX_DIGITS} digits")
        text = data.decode("ascii")
        value = int(text)
        if str(value) != text or _INT_MIN <= value <= _UINT_MAX:
            raise ValueError(f"a non-canonical big int {text!r}")
        return value
    if code == _MEDIA:
        data_format, raw = _body(data, 2)
        if type(data_format) is not str or type(raw) is not bytes:
            raise ValueError("a media value whose format or bytes have the wrong type")
        if stored_media.media_left_encoded():
            return Media(data_format, raw)
        if _media_codec is None:
            raise ValueError(f"a {data_format!r} media value, and no media codec is installed")
        return stored_media.remember(_media_codec.decode(data_format, raw), Media(data_format, raw), _fingerprint)
    raise ValueError(f"unknown extension type {code} in stored record")


def _datetime(*fields: Any) -> datetime:
    """The datetime stored as ``fields`` (see :func:`_datetime_body`)."""
    *parts, offset = fields
    if any(type(part) is not int for part in parts) or (offset is not None and type(offset) is not int):
        raise ValueError("a datetime whose fields are not ints")
    year, month, day, hour, minute, second, microsecond, fold = parts
    zone = None if offset is None else timezone(timedelta(microseconds=offset))
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=zone, fold=fold)


def _set(data: bytes, frozen: bool) -> set[Any] | frozenset[Any]:
    """The set stored as ``data``: one array of distinct items in the order of their bytes, and nothing after it."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1), **_UNPACK_OPTIONS)
    unpacker.feed(data)
    items, encodings = [], []
    try:
        count = unpacker.read_array_header()
        start = unpacker.tell()
        for _ in range(count):
            items.append(unpacker.unpack())
            end = unpacker.tell()
            encodings.append(data[start:end])
            start = end
    except msgpack.OutOfData:
        raise ValueError("a set cut short") from None
    if start != len(data):
        raise ValueError("a set followed by other bytes")
    if encodings != sorted(encodings):
        raise ValueError("a set whose items are not in canonical order")
    result = frozenset(items) if frozen else set(items)  # TypeError for an unhashable item
    if len(result) != count:
        raise ValueError("a set that lists an item twice")
    return result


def _body(data: bytes, length: int) -> list[Any]:
    """The list of ``length`` plain values inside an extension (never a nested extension)."""
    body = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    if type(body) is not list or len(body) != length or any(isinstance(part, msgpack.ExtType) for part in body):
        raise ValueError(f"an extension body that is not a list of {length} plain values")
    return body


def _stored_dtype(name: Any) -> np.dtype[Any]:
    if type(name) is not str:
        raise ValueError(f"a dtype named by {type(name).__name__}")
    dtype = np.dtype(name)
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"numpy dtype {name!r} is never stored (object or structured)")
    return dtype


def _stored_shape(shape: Any, itemsize: int, raw: Any) -> tuple[int, ...]:
    """``shape`` checked against the byte count of ``raw``, before anything is allocated."""
    if type(raw) is not bytes or type(shape) is not list or len(shape) > 64:
        raise ValueError("an array whose shape or bytes have the wrong type")
    if not all(type(dim) is int and dim >= 0 for dim in shape):
        raise ValueError(f"an array of shape {shape!r}")
    if itemsize and itemsize * math.prod(shape) != len(raw):
        raise ValueError(f"an array of shape {shape} and itemsize {itemsize} stored in {len(raw)} bytes")
    return tuple(shape)


def _ndarray(name: Any, shape: Any, raw: Any) -> np.ndarray:
    dtype = _stored_dtype(name)
    dims = _stored_shape(shape, dtype.itemsize, raw)
    if dtype.itemsize == 0:
        if dtype.kind != "V" or raw:  # numpy widens zero-width strings, which would allocate
            raise ValueError(f"an array of zero-width dtype {name!r}")
        return np.zeros(dims, dtype=dtype)
    if not raw:
        return np.zeros(dims, dtype=dtype)
    return np.frombuffer(raw, dtype=dtype).reshape(dims).copy()


def _npscalar(name: Any, raw: Any) -> Any:
    dtype = _stored_dtype(name)
    if type(raw) is not bytes or (dtype.itemsize and len(raw) != dtype.itemsize):
        raise ValueError(f"a numpy {name!r} scalar stored in the wrong number of bytes")
    if dtype.itemsize == 0:  # np.str_("") and np.bytes_(b"")
        return dtype.type()
    return np.frombuffer(raw, dtype=dtype)[0]


def _tensor(dtype_name: Any, shape: Any, raw: Any) -> Any:
    import torch

    dtype = getattr(torch, dtype_name, None) if type(dtype_name) is str else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{dtype_name!r} is not a torch dtype")
    dims = _stored_shape(shape, dtype.itemsize, raw)
    if not raw:
        return torch.empty(dims, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(dims)


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
# RuntimeError covers torch's errors (and RecursionError); UnicodeDecodeError is a ValueError.
_DECODE_FAILURES = (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError, RuntimeError)


# What decode_each tries first: MessagePack's defaults (str or bytes dict keys, strict
# UTF-8) and our extensions. One keyword option makes each call cheaper than five; from
# a payload these refuse on, the payloads are decoded with all the options, which agree
# with these on every payload both accept.
_fast_unpack = functools.partial(msgpack.unpackb, ext_hook=_ext_hook)
_full_unpack = functools.partial(msgpack.unpackb, **_UNPACK_OPTIONS)


def decode_each(payloads: Sequence[bytes | memoryview], where: str = "records") -> list[Any]:
    """The record each of ``payloads`` encodes, in order: :func:`decode` of each.

    Each payload must hold exactly one record: a record may not end early or run into
    the bytes after it (two records in one committed payload would otherwise shift
    every record after it). ``unpackb`` refuses both, and the payloads are decoded in
    one C loop with no per-payload Python code.

    Raises:
        IntegrityError: the bytes are not canonical records, or a payload does not hold
            exactly one (``where`` names them).
    """
    records: list[Any] = []
    try:
        records.extend(map(_fast_unpack, payloads))  # on failure, keeps the records decoded before it
    except (IntegrityError, *_DECODE_FAILURES):
        try:  # int dict keys or lone surrogates, refused by the fast options; or damage
            records.extend(map(_full_unpack, itertools.islice(payloads, len(records), None)))
        except msgpack.ExtraData as exc:
            raise IntegrityError(f"{where}: payload {len(records)} does not hold exactly one record") from exc
        except _DECODE_FAILURES as exc:
            raise IntegrityError(f"{where}: payload {len(records)}: stored bytes do not decode: {exc!r}") from exc
    return records


def decode_framed(chunk: memoryview, offsets: Any) -> list[Any] | None:
    """The records of consecutive items of a chunk in litdata's item framing (a 4-byte size before each payload).

    ``offsets`` are the item offsets from the first item's to the end of the last
    (``num_items + 1`` of them for the whole chunk); only those bytes are read. Each
    item must hold exactly one record, ending where its framing says: a committed
    item holding two records (its content hash matching) would otherwise hand every
    following item its neighbour's record. Returns ``None`` when the items cannot be
    decoded this way (damage): decode them one by one to find which.
    """
    count = len(offsets) - 1
    if not count:
        return []
    base = int(offsets[0])
    ends = (offsets[1:] - base).tolist()
    return _unpack_items((chunk[base : base + ends[-1]],), ends)


def decode_framed_runs(chunk: memoryview, firsts: list[int], lasts: list[int], ends: list[int]) -> list[Any] | None:
    """:func:`decode_framed` of items that need not be consecutive, given as runs of consecutive ones.

    Run ``j`` of the items lies at ``chunk[firsts[j]:lasts[j]]``. The runs' bytes are
    read one after the other as if they were one span, and item ``i`` ends at ``ends[i]``
    of that span (the running sum of the items' framed sizes). Only the runs are read:
    the bytes between them (a deletion vector's dead rows) are never copied, decoded or
    checked, so decoding the live items of a chunk costs what decoding as many
    consecutive items does plus a step per run. Returns ``None`` when the items cannot
    be decoded this way (damage, or runs that do not add up to ``ends[-1]``).
    """
    if not ends:
        return []
    return _unpack_items(map(chunk.__getitem__, map(slice, firsts, lasts)), ends)


def _unpack_items(pieces: Iterable[memoryview], ends: list[int]) -> list[Any] | None:
    """One record from each item of the bytes of ``pieces`` read one after the other: skip the item's 4-byte
    size, decode one record, which must end at ``ends[i]`` of those bytes; ``None`` where they do not decode so."""
    size = max(ends[-1], 1)
    # One buffer of the whole size from the start: fed piece by piece, it is never grown and copied again.
    unpacker = msgpack.Unpacker(read_size=size, max_buffer_size=size, **_UNPACK_OPTIONS)
    records: list[Any] = []
    append = records.append
    try:
        for piece in pieces:
            unpacker.feed(piece)
        skip, unpack, tell = unpacker.read_bytes, unpacker.unpack, unpacker.tell
        for end in ends:
            skip(4)
            append(unpack())
            if tell() != end:
                return None
    except (*_DECODE_FAILURES, msgpack.OutOfData, msgpack.BufferFull):
        return None
    return records


def decode(data: bytes | memoryview, where: str = "record") -> Any:
    """The record whose canonical bytes are ``data``, which must hold exactly one (as in :func:`decode_each`).

    Raises:
        IntegrityError: the bytes are not one canonical record (``where`` names it).
    """
    try:
        return _unpack(data)
    except msgpack.ExtraData as exc:
        raise IntegrityError(f"{where} does not hold exactly one record") from exc
    except (IntegrityError, *_DECODE_FAILURES) as exc:
        raise IntegrityError(f"{where}: stored bytes do not decode: {exc!r}") from exc


# -- top-level fields of stored records, without decoding the others -------------------------


def top_level_fields(data: bytes | memoryview, where: str = "record") -> dict[Any, bytes]:
    """The canonical bytes of each top-level field of the record ``data`` encodes, by field name; nothing decoded.

    The canonical bytes of a record are a MessagePack map header followed by each key's
    bytes and its value's bytes, keys in canonical order; so a field's value bytes are
    exactly :func:`encode_value` of its value, and :func:`with_fields` can change one
    field and leave every other field's stored bytes as they were (a media value is
    never decoded and encoded again).

    Raises:
        IntegrityError: ``data`` is not one record (a map), or names a field twice.
    """
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1), **_UNPACK_OPTIONS)
    unpacker.feed(data)
    fields: dict[Any, bytes] = {}
    view = memoryview(data)
    try:
        count = unpacker.read_map_header()
        for _ in range(count):
            name = unpacker.unpack()
            start = unpacker.tell()
            unpacker.skip()
            if name in fields:
                raise IntegrityError(f"{where} holds the field {name!r} twice")
            fields[name] = bytes(view[start : unpacker.tell()])
    except (*_DECODE_FAILURES, msgpack.OutOfData) as exc:
        raise IntegrityError(f"{where}: stored bytes are not one record: {exc!r}") from exc
    if unpacker.tell() != len(data):
        raise IntegrityError(f"{where} does not hold exactly one record")
    return fields


def encode_value(value: Any, path: str) -> bytes:
    """The canonical bytes of ``value`` as a top-level field of a record (``path``: its name, for errors).

    Raises:
        UnsupportedValueError: a value has a type litstore cannot store.
    """
    return _pack(_canonical(value, path, 1))


def with_fields(data: bytes | memoryview, values: dict[Any, Any], where: str = "record") -> bytes:
    """The canonical bytes of the record ``data`` encodes with its top-level fields ``values`` set (added if new).

    The same bytes as :func:`encode` of the decoded record with those fields set, made
    without decoding it: every other field's bytes are copied as they are.

    Raises:
        IntegrityError: ``data`` is not one record.
        UnsupportedValueError: a value of ``values`` has a type litstore cannot store.
    """
    fields = top_level_fields(data, where)
    for name, value in values.items():
        fields[name] = encode_value(value, str(name))
    order = _sorted_keys(fields, "")
    header: bytes = msgpack.Packer(**_PACKER_OPTIONS).pack_map_header(len(order))
    return header + b"".join(_pack(name) + fields[name] for name in order)
