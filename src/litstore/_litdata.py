"""The one module that touches litdata's writer, chunk format and serializers.

litstore stores every record as a single ``bytes`` leaf: the record's canonical
encoding (see :mod:`litstore.codec`). litdata's ``BinaryWriter`` writes those leaves
into chunk files, so every chunk of every fragment has the same litdata config
(``data_format == ["bytes"]``) and any set of chunks forms a valid litdata index.
Typed leaves would not: litdata records numpy dtypes and tree shapes in the config,
so chunks written from differently shaped records could not share one index.

A chunk file, as litdata 0.2.76 writes it (all integers little-endian uint32)::

    num_items | offsets[num_items + 1] | item 0 | item 1 | ...
    item = size | payload            (one leaf: size == len(payload))

``offsets[i]`` is the absolute byte position of item ``i`` and ``offsets[-1]`` is the
file size. litstore reads items straight from this layout (a memory-mapped slice),
which is what makes a lookup cost microseconds instead of litdata's milliseconds;
``tests/test_litdata_facts.py`` checks that litdata reads the same bytes back.

A version's split index (``versions/<v>/<split>/index.json``) is a litdata index whose
chunk ``filename`` entries are paths relative to the store root
(``fragments/<frag>/chunk-<frag>-<n>.bin``); chunk names are unique store-wide
because litdata's remote downloader keys its cache by file name.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Sequence
from copy import copy
from dataclasses import dataclass
from typing import Any, cast

import litdata
import numpy as np
from litdata.streaming.downloader import (
    _OBSTORE_CLIENT_OPTIONS,
    S3Downloader,
    _cached_obstore_store,
    _obstore_credential_provider,
    register_downloader,
)
from litdata.streaming.serializers import _SERIALIZERS
from litdata.streaming.writer import BinaryWriter
from litdata.types import _MediaRef
from tqdm.auto import tqdm

from litstore.errors import IntegrityError

LITDATA_VERSION: str = litdata.__version__

_U32 = np.dtype("<u4")


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk as a litdata index lists it; ``filename`` is relative to the store root."""

    filename: str
    num_items: int
    num_bytes: int

    def to_index_entry(self) -> dict[str, Any]:
        return {"chunk_bytes": self.num_bytes, "chunk_size": self.num_items, "dim": None, "filename": self.filename}

    @classmethod
    def from_index_entry(cls, entry: dict[str, Any]) -> ChunkInfo:
        return cls(filename=entry["filename"], num_items=int(entry["chunk_size"]), num_bytes=int(entry["chunk_bytes"]))


class _FragmentWriter(BinaryWriter):
    """litdata's writer with store-wide unique chunk names and no per-rank index file."""

    def __init__(self, directory: str, fragment: str, first_chunk: int, chunk_bytes: int) -> None:
        super().__init__(directory, chunk_bytes=chunk_bytes, chunk_index=first_chunk)
        self._fragment = fragment

    def get_chunk_filename(self, file_compression: bool | None = None) -> str:
        return f"chunk-{self._fragment}-{self._chunk_index}.bin"

    def write_chunks_index(self) -> str:
        return ""  # litstore writes the index of each version itself.

    @property
    def rank(self) -> int:
        return 0  # chunk names carry the fragment id, not a worker rank.

    def chunk_entries(self) -> list[dict[str, Any]]:
        return list(self._chunks_info)


def write_chunks(
    directory: str,
    fragment: str,
    prefix: str,
    payloads: Sequence[bytes],
    first_chunk: int,
    chunk_bytes: int,
    progress: bool = False,
) -> list[ChunkInfo]:
    """Write ``payloads``, in order, as litdata chunks of one fragment into ``directory``.

    Returns the chunks written, named ``<prefix>/chunk-<fragment>-<n>.bin`` with ``n``
    counting up from ``first_chunk``. Item ``i`` of the input is row ``i - start`` of
    the chunk whose cumulative ``num_items`` range holds it.
    """
    writer = _FragmentWriter(directory, fragment, first_chunk, chunk_bytes)
    items = tqdm(payloads, desc=f"writing {prefix}", unit="rec", disable=not progress)
    for index, payload in enumerate(items):
        writer.add_item(index, payload)
    writer.done()
    return [
        ChunkInfo(
            filename=f"{prefix}/{entry['filename']}", num_items=entry["chunk_size"], num_bytes=entry["chunk_bytes"]
        )
        for entry in writer.chunk_entries()
    ]


def index_config(chunk_bytes: int) -> dict[str, Any]:
    """The litdata ``config`` block shared by every litstore chunk (one ``bytes`` leaf)."""
    return {
        "chunk_bytes": chunk_bytes,
        "chunk_size": None,
        "compression": None,
        "compression_batch_size": None,
        "compression_level": None,
        "data_format": ["bytes"],
        "data_spec": '[1, {"type": null, "context": null, "children_spec": []}]',
        "encryption": None,
        "ipc_compression": None,
        "item_loader": "PyTreeLoader",
        "types": "bytes",
    }


def index_document(chunks: Sequence[ChunkInfo], chunk_bytes: int) -> bytes:
    """The bytes of a litdata ``index.json`` listing ``chunks``."""
    document = {"chunks": [chunk.to_index_entry() for chunk in chunks], "config": index_config(chunk_bytes)}
    return json.dumps(document, sort_keys=True).encode()


def parse_index_document(data: bytes, path: str) -> list[ChunkInfo]:
    """The chunks listed by a litdata ``index.json`` written by :func:`index_document`.

    Raises:
        IntegrityError: the file at ``path`` is not such an index.
    """
    try:
        return [ChunkInfo.from_index_entry(entry) for entry in json.loads(data)["chunks"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"index {path} is damaged: {exc!r}") from exc


def item_offsets(chunk: bytes | memoryview | mmap.mmap, name: str) -> np.ndarray:
    """The ``num_items + 1`` item offsets of a chunk, checked against its length.

    Raises:
        IntegrityError: the header is cut short or the offsets do not fit the chunk.
    """
    size = len(chunk)
    if size < 4:
        raise IntegrityError(f"chunk {name} is {size} bytes long, too short for a header")
    num_items = int(np.frombuffer(chunk, _U32, count=1)[0])
    header = 4 * (num_items + 2)
    if header > size:
        raise IntegrityError(f"chunk {name} claims {num_items} items but is only {size} bytes long")
    offsets = np.frombuffer(chunk, _U32, count=num_items + 1, offset=4).astype(np.int64)
    if offsets[0] != header or offsets[-1] != size or np.any(np.diff(offsets) < 4):
        raise IntegrityError(f"chunk {name} has item offsets that do not fit its {size} bytes")
    return offsets


def header_size(head: bytes, name: str) -> int:
    """The byte length of a chunk's header, given at least its first 4 bytes."""
    if len(head) < 4:
        raise IntegrityError(f"chunk {name} is {len(head)} bytes long, too short for a header")
    return 4 * (int(np.frombuffer(head, _U32, count=1)[0]) + 2)


def header_offsets(head: bytes, name: str) -> np.ndarray:
    """The item offsets of a remote chunk from its header bytes alone (size unknown)."""
    num_items = int(np.frombuffer(head, _U32, count=1)[0])
    offsets = np.frombuffer(head, _U32, count=num_items + 1, offset=4).astype(np.int64)
    if offsets[0] != 4 * (num_items + 2) or np.any(np.diff(offsets) < 4):
        raise IntegrityError(f"chunk {name} has a damaged header")
    return offsets


def item_payload(chunk: bytes | memoryview | mmap.mmap, offsets: np.ndarray, row: int) -> memoryview:
    """The payload of item ``row``: the bytes after its 4-byte leaf size."""
    start, end = int(offsets[row]), int(offsets[row + 1])
    view = memoryview(chunk)[start + 4 : end]
    return view


def item_size_matches(chunk: bytes | memoryview | mmap.mmap, offsets: np.ndarray, row: int) -> bool:
    """Whether item ``row``'s leaf size field agrees with its offsets."""
    start, end = int(offsets[row]), int(offsets[row + 1])
    declared = int(np.frombuffer(chunk, _U32, count=1, offset=start)[0])
    return declared == end - start - 4


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


def file_size(path: str) -> int:
    return os.path.getsize(path)


class _PlainHttpS3Downloader(S3Downloader):
    """litdata's S3 downloader, except that its obstore client may use plain http.

    litdata builds its obstore client with fixed client options, which override
    obstore's ``AWS_ALLOW_HTTP`` setting, so it refuses ``http://`` endpoints such as a
    local MinIO or moto server. Against an ``https://`` endpoint this class behaves
    exactly like litdata's.
    """

    def _get_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        def build() -> Any:
            meta = self._client.client.meta
            config: dict[str, Any] = {"endpoint": meta.endpoint_url, "virtual_hosted_style_request": False}
            if meta.region_name:
                config["region"] = meta.region_name
            return S3Store(
                bucket,
                config=config,  # type: ignore[arg-type]
                credential_provider=_obstore_credential_provider(self._client),
                client_options=cast(Any, {**_OBSTORE_CLIENT_OPTIONS, "allow_http": True}),
            )

        return _cached_obstore_store(self, build)


def allow_plain_http_s3() -> None:
    """Let litdata in this process download chunks from ``s3://`` over a plain-http endpoint."""
    register_downloader("s3://", _PlainHttpS3Downloader, overwrite=True)
