"""Writing chunk files in litdata's layout, byte for byte what ``BinaryWriter`` writes.

litstore stores every record as a single ``bytes`` leaf (its canonical encoding, see
:mod:`litstore.format.codec`), so every chunk of every fragment has the same litdata
config and any set of chunks forms a valid litdata index. For such items the chunk
layout is simple (:mod:`litstore._litdata.chunk`), and :class:`ChunkWriter` builds it
directly from an Arrow array of payloads: the framing, boundaries and header are
computed column-wise, so a chunk costs a few bulk copies rather than Python work per
record (``BinaryWriter.add_item`` infers types, flattens and looks up a serializer for
every item). ``tests/_litdata/test_litdata_facts.py`` proves the files and index entries
identical to ``BinaryWriter``'s, chunk boundaries included, and that litdata's own
reader reads them.

Chunk boundaries follow ``BinaryWriter``: items are taken greedily while the sum of
their serialized sizes (4-byte leaf size + payload) stays within ``chunk_bytes``; an
item that alone exceeds it gets a chunk of its own. The writer is incremental, so a
stream of any length is written with only the current chunk in memory.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import xxhash

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, InvalidArgumentError
from litstore.format.columnar import sized, value_offsets
from litstore.format.layout import CHUNK_SIZE_LIMIT

_U32 = np.dtype("<u4")

Payloads: TypeAlias = "pa.Array | pa.ChunkedArray | Iterable[bytes | memoryview]"


def write_chunk_file(directory: str, filename: str, parts: Iterable[bytes | memoryview]) -> None:
    """Write one finished chunk file from its parts, in order (the single place chunk bytes reach the disk)."""
    with open(os.path.join(directory, filename), "wb") as out:
        for part in parts:
            out.write(part)


def as_payload_array(payloads: Payloads) -> pa.LargeBinaryArray:
    """``payloads`` as one contiguous Arrow ``large_binary`` array (no copy if it is one already)."""
    if isinstance(payloads, pa.ChunkedArray):
        payloads = payloads.combine_chunks() if payloads.num_chunks != 1 else payloads.chunk(0)
    if not isinstance(payloads, pa.Array):
        items = [bytes(item) if isinstance(item, memoryview) else item for item in payloads]
        payloads = pa.array(items, pa.large_binary())
    if payloads.type != pa.large_binary():
        payloads = payloads.cast(pa.large_binary())
    return payloads


def _header(item_sizes: np.ndarray) -> bytes:
    """The header of a chunk whose framed items have ``item_sizes``: the item count and every item's offset."""
    count = len(item_sizes)
    header = 4 * (count + 2)
    offsets = np.empty(count + 2, dtype=np.int64)
    offsets[0] = count
    offsets[1] = header
    np.cumsum(item_sizes, out=offsets[2:])
    offsets[2:] += header
    return offsets.astype(_U32).tobytes()


def _item_bytes(items: pa.LargeBinaryArray) -> memoryview:
    """The bytes of ``items``, back to back, where Arrow holds them (no copy)."""
    ends = value_offsets(items)
    if not len(items):
        return memoryview(b"")
    return memoryview(items.buffers()[2])[int(ends[0]) : int(ends[-1])]


class ChunkWriter:
    """Writes records, in order, as the chunks of one fragment into a local directory.

    Chunks are named ``<prefix>/chunk-<fragment>-<n>.bin`` with ``n`` drawn from
    ``numbers`` (one counter shared by the writers of one fragment). Feed records
    with :meth:`add` (payloads) or :meth:`add_items` (payloads already in litdata's
    item framing, as :func:`~litstore.format.columnar.encode_table` makes them), any
    number of calls, then call :meth:`close`; :attr:`chunks` lists what was written.
    Item ``i`` of the stream is row ``i - start`` of the chunk whose cumulative
    ``num_items`` range holds it.
    """

    def __init__(self, directory: str, fragment: str, prefix: str, numbers: Iterator[int], chunk_bytes: int) -> None:
        self._directory = directory
        self._fragment = fragment
        self._prefix = prefix
        self._numbers = numbers
        self._chunk_bytes = chunk_bytes
        self._pending: list[pa.LargeBinaryArray] = []
        self._pending_bytes = 0
        self.chunks: list[ChunkInfo] = []

    def add(self, payloads: Payloads) -> None:
        """Append payloads (an Arrow binary array or any iterable of bytes), writing every chunk that fills up."""
        self.add_items(sized(as_payload_array(payloads)))

    def add_items(self, items: pa.LargeBinaryArray) -> None:
        """Append framed items (each payload after its 4-byte little-endian size), writing every chunk that fills up."""
        limit = self._chunk_bytes
        while len(items):
            ends = np.cumsum(np.diff(value_offsets(items))) + self._pending_bytes
            fits = int(np.searchsorted(ends, limit, side="right"))  # items that keep the chunk within limit
            if not fits:
                if self._pending:
                    self._write()
                    continue
                fits = 1  # a lone item larger than a chunk gets a chunk of its own
            self._pending.append(items.slice(0, fits))
            self._pending_bytes = int(ends[fits - 1])
            items = items.slice(fits)
            if len(items) or self._pending_bytes > limit:
                self._write()

    def close(self) -> list[ChunkInfo]:
        """Write the last, partly filled chunk; returns every chunk written."""
        if self._pending:
            self._write()
        return self.chunks

    def _write(self) -> None:
        name = f"chunk-{self._fragment}-{next(self._numbers)}.bin"
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        header = _header(np.concatenate([np.diff(value_offsets(piece)) for piece in pending]))
        parts: list[bytes | memoryview] = [header, *map(_item_bytes, pending)]
        size = sum(map(len, parts))
        if size >= CHUNK_SIZE_LIMIT:
            raise InvalidArgumentError(
                f"a chunk of {size:,} bytes cannot be written (litdata's limit is 4 GiB): "
                "use a smaller chunk_bytes, or smaller records"
            )
        built = xxhash.xxh3_128()
        for part in parts:
            built.update(part)
        write_chunk_file(self._directory, name, parts)
        if _landed_digest(os.path.join(self._directory, name), size) != built.digest():
            raise IntegrityError(f"chunk {self._prefix}/{name} did not land intact: its bytes are not the ones written")
        self.chunks.append(ChunkInfo(f"{self._prefix}/{name}", sum(map(len, pending)), size))


def _landed_digest(path: str, size: int) -> bytes | None:
    """The hash of the file at ``path`` read back, or ``None`` if it is not ``size`` bytes long.

    Read through one reused 1 MiB buffer, not mapped: a mapped chunk's pages would count
    in the writer's resident memory while it is hashed (a whole chunk more at the peak).
    """
    hasher = xxhash.xxh3_128()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        if os.fstat(handle.fileno()).st_size != size:
            return None
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
    return hasher.digest()


def write_chunks(
    directory: str,
    fragment: str,
    prefix: str,
    payloads: Sequence[bytes | memoryview],
    first_chunk: int,
    chunk_bytes: int,
) -> list[ChunkInfo]:
    """Write ``payloads``, in order, as litdata chunks of one fragment into ``directory``."""
    writer = ChunkWriter(directory, fragment, prefix, itertools.count(first_chunk), chunk_bytes)
    writer.add(payloads)
    return writer.close()
