"""Reading a LitData-optimized folder someone else wrote, without litdata's reader.

litdata's ``StreamingDataset`` decodes every leaf of an item with the serializer the
folder's ``index.json`` names, ``pickle`` included, so reading a stranger's folder with
it runs whatever the folder's author chose. This module reads such a folder itself:

- :func:`read_layout` reads ``index.json`` and refuses, before a byte of any chunk is
  read, a folder whose ``data_format`` names a serializer outside
  :data:`~litstore._litdata.formats.MEDIA_FORMATS` (``graph``, ...) other than ``json``
  and ``pickle``, or that litstore cannot read without litdata (compressed or
  encrypted chunks, another item loader, MDS shards). litdata stores a ``None`` leaf
  with ``pickle``, so a ``pickle`` leaf is read only if its bytes are exactly a pickled
  ``None`` (compared, never unpickled) and refused otherwise; ``json`` leaves (lists
  and dicts) decode through :func:`json_leaf`, which bounds what litdata's decoder does not;
- :func:`chunk_items` decodes one chunk file. A chunk is ``num_items |
  offsets[num_items + 1] | item ...`` (little-endian uint32, as
  :mod:`~litstore._litdata.chunk` describes) and an item is ``sizes[leaves] | leaf
  ...``; each leaf decodes through :func:`~litstore._litdata.media.decode_media` and
  the item is rebuilt from the config's ``data_spec`` (torch's pytree JSON), for
  ``dict``, ``list`` and ``tuple`` nodes only. Items litdata wrote as a trailing Arrow
  IPC table instead (dicts of text and numbers) are read with pyarrow, validated in
  full before a value is taken.

Every problem is a :class:`~litstore.errors.LitstoreError` naming the file and item:
``InvalidArgumentError`` for the folder as a whole, ``InvalidRecordError`` for a chunk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from litstore._litdata.chunk import ITEM_HEADER
from litstore._litdata.formats import MEDIA_FORMATS
from litstore._litdata.media import decode_media
from litstore.errors import IntegrityError, InvalidArgumentError, InvalidRecordError

#: What ends a chunk whose rows litdata also (or only) wrote as an Arrow IPC table.
ARROW_FOOTER_MAGIC = b"LDARW01\0"

#: How deep a ``data_spec`` tree may nest (litstore's records nest at most 64 deep).
MAX_TREE_DEPTH = 64

# Serializers outside MEDIA_FORMATS whose leaves this module decodes itself: litdata stores a
# None leaf with its pickle serializer (its rows are often Arrow rows, never decoded here).
_OWN = frozenset({"json", "pickle"})

#: ``pickle.dumps(None)`` at every protocol: the only pickle leaves read, compared, never unpickled.
PICKLED_NONE = frozenset({b"N.", *(bytes([0x80, protocol]) + b"N." for protocol in range(2, 6))})

# torch pytree node types litstore rebuilds, by their serialized name.
_DICTS = frozenset({"builtins.dict", "collections.OrderedDict"})
_SEQUENCES: dict[str, Callable[[list[Any]], Any]] = {"builtins.list": list, "builtins.tuple": tuple}

Build = Callable[[Iterator[Any]], Any]


@dataclass(frozen=True)
class ChunkEntry:
    """One chunk file as the folder's ``index.json`` lists it."""

    filename: str
    num_items: int


@dataclass(frozen=True)
class FolderLayout:
    """What :func:`read_layout` learnt from a folder's ``index.json``: enough to decode its chunks."""

    chunks: tuple[ChunkEntry, ...]
    formats: tuple[str, ...]
    build: Build


def read_layout(document: bytes, where: str) -> FolderLayout:
    """The chunks and item layout of a LitData ``index.json`` (its bytes), checked before any chunk is read.

    Raises:
        InvalidArgumentError: the document is not a LitData index, names a serializer
            outside :data:`MEDIA_FORMATS` (``pickle`` runs code when read), or asks for
            a reader litstore does not have (compression, encryption, MDS, another
            item loader).
    """
    try:
        index = json.loads(document)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"{where} is not valid JSON: {exc}") from None
    config = index.get("config") if isinstance(index, dict) else None
    if not isinstance(config, dict) or not isinstance(index.get("chunks"), list):
        raise InvalidArgumentError(f"{where} is not a LitData index: it needs a 'config' and a 'chunks' list")
    formats = _formats(config, where)
    _refuse_other_readers(config, where)
    build, leaves = _tree(config.get("data_spec"), where)
    if leaves != len(formats):
        raise InvalidArgumentError(f"{where}: data_spec has {leaves} leaves but data_format names {len(formats)}")
    return FolderLayout(tuple(_chunk_entry(entry, where) for entry in index["chunks"]), formats, build)


def chunk_items(data: bytes, layout: FolderLayout, entry: ChunkEntry, where: str, first: int) -> Iterator[Any]:
    """The items of one chunk file (its bytes), in order; ``first`` is the first one's position in the folder.

    Raises:
        InvalidRecordError: (while iterating) the chunk or an item is damaged or does
            not decode; the message names the chunk and the item.
    """
    offsets = _offsets(data, entry, where, first)
    end = int(offsets[-1])
    footer = _arrow_footer(data, end, where, first)
    if footer is not None:
        if len(footer) != entry.num_items:
            raise InvalidRecordError(f"{where}: its Arrow rows are not its {entry.num_items} items", [(first, None)])
        yield from footer
        return
    if end != len(data):
        raise InvalidRecordError(f"{where}: its item offsets do not fit its {len(data)} bytes", [(first, None)])
    for row in range(entry.num_items):
        item = memoryview(data)[int(offsets[row]) : int(offsets[row + 1])]
        yield _item(item, layout, f"{where} item {row}", first + row)


# -- the index ---------------------------------------------------------------------------


def _formats(config: dict[str, Any], where: str) -> tuple[str, ...]:
    formats = config.get("data_format")
    if not isinstance(formats, list) or not formats or not all(isinstance(name, str) for name in formats):
        raise InvalidArgumentError(f"{where}: config.data_format is not a list of serializer names")
    refused = sorted({name for name in formats if name.partition(":")[0] not in MEDIA_FORMATS and name not in _OWN})
    if refused:
        raise InvalidArgumentError(
            f"{where}: items are stored with litdata's {', '.join(map(repr, refused))} serializer, which "
            "litstore never reads (pickle and graph run code chosen by whoever wrote the folder; only "
            f"{', '.join(sorted(MEDIA_FORMATS | _OWN))} are read, a 'pickle' leaf only if it is None). Rewrite "
            "the folder without them, or read it "
            "with litdata yourself if you trust its author"
        )
    return tuple(formats)


def _refuse_other_readers(config: dict[str, Any], where: str) -> None:
    loader = config.get("item_loader", "PyTreeLoader")
    if loader != "PyTreeLoader":
        raise InvalidArgumentError(
            f"{where}: items written by litdata's {loader!r} loader are not read, only PyTreeLoader's"
        )
    if config.get("format") is not None:
        raise InvalidArgumentError(f"{where}: {config['format']!r} shards are not read, only LitData chunks")
    for name in ("compression", "ipc_compression", "encryption"):
        if config.get(name) is not None:
            raise InvalidArgumentError(
                f"{where}: the chunks use {name} {config[name]!r}, which litstore does not read; "
                "optimize the folder again without it"
            )


def _chunk_entry(entry: Any, where: str) -> ChunkEntry:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where}: a 'chunks' entry is a {type(entry).__name__}, not an object")
    filename, size = entry.get("filename"), entry.get("chunk_size")
    if not isinstance(filename, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidArgumentError(f"{where}: a 'chunks' entry lacks a filename or a chunk_size: {entry!r:.200}")
    return ChunkEntry(filename, size)


def _tree(spec: Any, where: str) -> tuple[Build, int]:
    """A function rebuilding an item from its decoded leaves, and how many leaves it takes."""
    try:
        parsed = json.loads(spec) if isinstance(spec, str) else None
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"{where}: config.data_spec is not valid JSON: {exc}") from None
    if not (isinstance(parsed, list) and len(parsed) == 2 and parsed[0] == 1):
        raise InvalidArgumentError(f"{where}: config.data_spec is not a torch pytree spec (protocol 1)")
    return _node(parsed[1], where, 0)


def _node(node: Any, where: str, depth: int) -> tuple[Build, int]:
    if depth > MAX_TREE_DEPTH:
        raise InvalidArgumentError(f"{where}: config.data_spec nests deeper than {MAX_TREE_DEPTH}")
    if not isinstance(node, dict) or not isinstance(node.get("children_spec"), list):
        raise InvalidArgumentError(f"{where}: config.data_spec holds a node that is not a pytree node")
    kind, children = node.get("type"), node["children_spec"]
    if kind is None:
        if children:
            raise InvalidArgumentError(f"{where}: config.data_spec holds a leaf with children")
        return next, 1
    built = [_node(child, where, depth + 1) for child in children]
    builds, leaves = [build for build, _ in built], sum(count for _, count in built)
    if kind in _SEQUENCES:
        make = _SEQUENCES[kind]
        return (lambda values: make([build(values) for build in builds])), leaves
    if kind in _DICTS:
        keys = _dict_keys(node.get("context"), len(children), where)
        return (lambda values: {key: build(values) for key, build in zip(keys, builds, strict=True)}), leaves
    raise InvalidArgumentError(
        f"{where}: items hold {kind!r} nodes; litstore rebuilds only dicts, lists and tuples from a LitData folder"
    )


def _dict_keys(context: Any, count: int, where: str) -> list[Any]:
    try:
        keys = json.loads(context) if isinstance(context, str) else None
    except ValueError:
        keys = None
    scalar = (str, int, float, bool, type(None))
    if not isinstance(keys, list) or len(keys) != count or not all(isinstance(key, scalar) for key in keys):
        raise InvalidArgumentError(f"{where}: config.data_spec holds a dict node whose keys do not match its children")
    return keys


# -- the chunks --------------------------------------------------------------------------


def _offsets(data: bytes, entry: ChunkEntry, where: str, first: int) -> np.ndarray:
    """The ``num_items + 1`` item offsets of a chunk; items litdata wrote only as Arrow rows are empty."""
    if len(data) < 4:
        raise InvalidRecordError(f"{where} is {len(data)} bytes long, too short for a header", [(first, None)])
    (count,) = struct.unpack_from("<I", data, 0)
    if count != entry.num_items:
        raise InvalidRecordError(
            f"{where} holds {count} items, not the {entry.num_items} index.json says it does", [(first, None)]
        )
    header = 4 * (count + 2)
    if header > len(data):
        raise InvalidRecordError(f"{where} has a header cut short", [(first, None)])
    offsets = np.frombuffer(data, "<u4", count=count + 1, offset=4).astype(np.int64)
    if offsets[0] != header or np.any(np.diff(offsets) < 0) or offsets[-1] > len(data):
        raise InvalidRecordError(f"{where}: its item offsets do not fit its {len(data)} bytes", [(first, None)])
    return offsets


def _item(item: memoryview, layout: FolderLayout, where: str, position: int) -> Any:
    count = len(layout.formats)
    if len(item) < ITEM_HEADER * count:
        raise InvalidRecordError(f"{where}: its header is cut short", [(position, None)])
    sizes = np.frombuffer(item, "<u4", count=count).astype(np.int64)
    start = ITEM_HEADER * count
    if start + int(sizes.sum()) != len(item):
        raise InvalidRecordError(f"{where}: its leaf sizes do not add up to its {len(item)} bytes", [(position, None)])
    leaves: list[Any] = []
    for data_format, size in zip(layout.formats, sizes.tolist(), strict=True):
        leaf = bytes(item[start : start + size])
        start += size
        if data_format == "pickle":
            if leaf not in PICKLED_NONE:
                raise InvalidRecordError(
                    f"{where}: a leaf is stored with litdata's 'pickle' serializer, which runs code chosen by whoever "
                    "wrote the folder when it is read; litstore reads a pickle leaf only if it is None",
                    [(position, None)],
                )
            leaves.append(None)
            continue
        try:
            leaves.append(json_leaf(leaf) if data_format == "json" else decode_media(data_format, leaf))
        except IntegrityError as exc:
            raise InvalidRecordError(f"{where}: {exc}", [(position, None)]) from None
    return layout.build(iter(leaves))


def _arrow_footer(data: bytes, end: int, where: str, first: int) -> list[Any] | None:
    """The rows of a chunk's trailing Arrow IPC table (after its last item), or ``None`` if it has none."""
    if len(data) - end < 12 or data[-8:] != ARROW_FOOTER_MAGIC:
        return None
    (length,) = struct.unpack_from("<I", data, len(data) - 12)
    start = len(data) - 12 - length
    if length == 0 or start < end:
        raise InvalidRecordError(f"{where}: its Arrow rows overlap its items", [(first, None)])
    source = pa.py_buffer(memoryview(data)[start : start + length])
    try:
        opened = pa.ipc.open_file(source) if data[start : start + 6] == b"ARROW1" else pa.ipc.open_stream(source)
        table = opened.read_all()
        table.validate(full=True)
        return list(table.to_pylist())
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise InvalidRecordError(f"{where}: its Arrow rows do not decode: {exc}", [(first, None)]) from None


# -- litdata's "json" leaves --------------------------------------------------------------

# The tags of litdata's compact nested encoding (litdata.streaming.serializers._NEST_*, _REC_*).
_JSON, _STRS, _I64S, _F64S, _BOOLS, _DICT, _RECS, _STR, _I64, _F64, _BOOL, _NONE = range(12)
_REC_NONE, _REC_STR, _REC_I64, _REC_F64, _REC_BOOL = range(0x10, 0x15)

#: How many key-less records a ``json`` leaf may claim (they take no bytes, so their count is not bounded by them).
MAX_EMPTY_RECORDS = 1 << 16


def json_leaf(data: bytes) -> Any:
    """A list or dict litdata stored with its ``json`` serializer, decoded within the bounds of ``data``.

    litdata's own decoder allocates as many items as a count in the bytes claims and
    recurses without a limit; this one checks every count against the bytes left and
    nests at most :data:`MAX_TREE_DEPTH` deep, and the value must end where the leaf does.

    Raises:
        IntegrityError: the bytes do not decode.
    """
    try:
        if not data or data[0] > 0x20:  # the legacy form: JSON text
            return json.loads(data)
        value, end = _nested(data, 0, 0)
    except RecursionError:
        raise IntegrityError("a 'json' leaf nests too deep") from None
    except (ValueError, struct.error, IndexError) as exc:
        raise IntegrityError(f"a 'json' leaf does not decode: {exc}") from None
    if end != len(data):
        raise IntegrityError("a 'json' leaf does not end where its bytes do")
    return value


def _nested(raw: bytes, offset: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_TREE_DEPTH:
        raise ValueError(f"nested deeper than {MAX_TREE_DEPTH}")
    tag, offset = raw[offset], offset + 1
    if tag in (_STR, _I64, _F64, _BOOL, _NONE):
        return _scalar(raw, offset, tag)
    (count,) = struct.unpack_from("<I", raw, offset)
    offset += 4
    left = len(raw) - offset
    if tag == _JSON:
        _fits(count, 1, left)
        return json.loads(raw[offset : offset + count]), offset + count
    if tag in (_I64S, _F64S):
        _fits(count, 8, left)
        values = np.frombuffer(raw, "<i8" if tag == _I64S else "<f8", count=count, offset=offset)
        return values.tolist(), offset + 8 * count
    if tag == _BOOLS:
        _fits(count, 1, left)
        return [bool(byte) for byte in raw[offset : offset + count]], offset + count
    if tag == _STRS:
        _fits(count, 4, left)
        strings = []
        for _ in range(count):
            text, offset = _text(raw, offset)
            strings.append(text)
        return strings, offset
    if tag == _DICT:
        _fits(count, 5, left)
        mapping = {}
        for _ in range(count):
            key, offset = _text(raw, offset)
            mapping[key], offset = _nested(raw, offset, depth + 1)
        return mapping, offset
    if tag == _RECS:
        return _records(raw, offset, count)
    raise ValueError(f"unknown tag {tag}")


def _records(raw: bytes, offset: int, count: int) -> tuple[list[dict[str, Any]], int]:
    (width,) = struct.unpack_from("<I", raw, offset)
    offset += 4
    _fits(width, 4, len(raw) - offset)
    keys = []
    for _ in range(width):
        key, offset = _text(raw, offset)
        keys.append(key)
    if width == 0 and count > MAX_EMPTY_RECORDS:
        raise ValueError(f"{count} records without fields")
    _fits(count * width, 1, len(raw) - offset)
    rows = []
    for _ in range(count):
        row: dict[str, Any] = {}
        for key in keys:
            kind, offset = raw[offset], offset + 1
            if not _REC_NONE <= kind <= _REC_BOOL:
                raise ValueError(f"unknown record tag {kind}")
            row[key], offset = _scalar(raw, offset, (_NONE, _STR, _I64, _F64, _BOOL)[kind - _REC_NONE])
        rows.append(row)
    return rows, offset


def _scalar(raw: bytes, offset: int, tag: int) -> tuple[Any, int]:
    if tag == _STR:
        return _text(raw, offset)
    if tag == _I64:
        return struct.unpack_from("<q", raw, offset)[0], offset + 8
    if tag == _F64:
        return struct.unpack_from("<d", raw, offset)[0], offset + 8
    if tag == _BOOL:
        return bool(raw[offset]), offset + 1
    return None, offset


def _text(raw: bytes, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<I", raw, offset)
    offset += 4
    _fits(length, 1, len(raw) - offset)
    return raw[offset : offset + length].decode("utf-8"), offset + length


def _fits(count: int, size: int, left: int) -> None:
    if count * size > left:
        raise ValueError(f"it claims {count} values in {left} bytes")
