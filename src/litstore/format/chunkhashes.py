"""The byte layout of a chunk's hashes sidecar: the committed content hash of each of its items.

Format-3 stores write one beside every chunk, in the same fragment and at the same
time (``fragments/<frag>/chunk-<frag>-<n>.hashes`` beside ``chunk-<frag>-<n>.bin``,
:func:`litstore.format.layout.chunk_hashes`), immutable like the chunk::

    header   16 bytes: magic b"LSCHASH1", item count (u64)
    hashes   count x 16 bytes: the xxh3-128 content hash of item i, in row order
             (the manifest's ``content_hash`` of the record at that row)
    footer   8 bytes: xxh3-64 of the chunk's path (relative to the root), the header and the hashes

Streaming checks each item against it (:mod:`litstore.read.chunkhashes`), so a
DataLoader worker reads the hashes of the chunks it streams instead of the whole
version's manifest. Every item of a chunk a version lists is live in it (a write
that leaves dead items moves the live ones to new chunks), so the hashes of a chunk
are the same in every version that lists it.

A reader knows from the chunk's index entry (``num_items``) how long the sidecar
must be, and checks the length, magic, count and checksum before it uses a byte of
it (:func:`parse`). The checksum covers the chunk's path, so a sidecar copied beside
another chunk of the same item count fails it rather than checking the wrong hashes.
"""

from __future__ import annotations

import mmap
import struct
from typing import Final

import xxhash

from litstore.errors import IntegrityError

MAGIC: Final = b"LSCHASH1"
HEADER: Final = struct.Struct("<8sQ")
FOOTER: Final = struct.Struct("<Q")
#: Bytes of one item's content hash.
HASH_BYTES: Final = 16

_AFTER = "remove it to stream through the manifest instead, and run store.verify()"


def size(count: int) -> int:
    """The byte length of the sidecar of a chunk of ``count`` items."""
    return HEADER.size + HASH_BYTES * count + FOOTER.size


def encode(chunk: str, hashes: bytes | memoryview) -> bytes:
    """The sidecar of ``chunk`` (its path from the root) whose items have ``hashes`` (16 bytes each, in row order)."""
    if len(hashes) % HASH_BYTES:
        raise ValueError(f"content hashes are {HASH_BYTES} bytes each, got {len(hashes)} bytes")
    head = HEADER.pack(MAGIC, len(hashes) // HASH_BYTES)
    return head + bytes(hashes) + FOOTER.pack(_checksum(chunk, head, hashes))


def parse(chunk: str, data: bytes | memoryview | mmap.mmap, count: int) -> memoryview:
    """The content hashes (``16 * count`` bytes, a view of ``data``) the sidecar ``data`` of ``chunk`` holds,
    ``count`` being what the chunk's index entry says it holds.

    Raises:
        IntegrityError: ``data`` is not the sidecar of ``chunk`` with ``count`` items
            (cut short or too long, another magic or count, a checksum that does not match).
    """
    view = memoryview(data).cast("B")
    name = f"the hashes sidecar of chunk {chunk}"
    if len(view) != size(count):
        raise IntegrityError(
            f"{name} is {len(view)} bytes long, but the chunk holds {count} items, whose sidecar is "
            f"{size(count)} bytes: it is damaged; {_AFTER}"
        )
    magic, listed = HEADER.unpack_from(view)
    if magic != MAGIC:
        raise IntegrityError(f"{name} does not start with a sidecar's magic: it is damaged; {_AFTER}")
    if listed != count:
        raise IntegrityError(
            f"{name} lists {listed} items, but the chunk's index entry says {count}: it is damaged; {_AFTER}"
        )
    hashes = view[HEADER.size : HEADER.size + HASH_BYTES * count]
    (expected,) = FOOTER.unpack_from(view, HEADER.size + HASH_BYTES * count)
    if _checksum(chunk, view[: HEADER.size], hashes) != expected:
        raise IntegrityError(f"{name} does not match its checksum (it is damaged, or another chunk's): {_AFTER}")
    return hashes


def _checksum(chunk: str, head: bytes | memoryview, hashes: bytes | memoryview) -> int:
    digest = xxhash.xxh3_64()
    digest.update(chunk.encode("utf-8", "surrogatepass"))
    digest.update(head)
    digest.update(hashes)
    return digest.intdigest()
