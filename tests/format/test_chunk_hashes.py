"""The byte layout of a chunk's hashes sidecar (:mod:`litstore.format.chunkhashes`), pinned."""

from __future__ import annotations

import struct

import pytest
import xxhash

from litstore.errors import IntegrityError
from litstore.format import chunkhashes

CHUNK = "fragments/0123456789abcdef0123/chunk-0123456789abcdef0123-0.bin"
HASHES = bytes(range(48))  # three items


def test_the_layout_is_header_hashes_and_a_checksum_over_the_chunk_name() -> None:
    data = chunkhashes.encode(CHUNK, HASHES)
    head = b"LSCHASH1" + struct.pack("<Q", 3)
    checksum = xxhash.xxh3_64_intdigest(CHUNK.encode() + head + HASHES)
    assert data == head + HASHES + struct.pack("<Q", checksum)
    assert len(data) == chunkhashes.size(3) == 16 + 48 + 8
    assert bytes(chunkhashes.parse(CHUNK, data, 3)) == HASHES


def test_a_chunk_of_no_items_has_a_sidecar_of_header_and_footer() -> None:
    data = chunkhashes.encode(CHUNK, b"")
    assert len(data) == 24
    assert bytes(chunkhashes.parse(CHUNK, data, 0)) == b""


def test_hashes_of_a_partial_item_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes each"):
        chunkhashes.encode(CHUNK, b"x" * 17)


@pytest.mark.parametrize(
    ("data", "count", "reason"),
    [
        (chunkhashes.encode(CHUNK, HASHES)[:-1], 3, "bytes long"),
        (chunkhashes.encode(CHUNK, HASHES), 2, "bytes long"),
        (b"", 0, "bytes long"),
        (b"LSKRUN01" + chunkhashes.encode(CHUNK, HASHES)[8:], 3, "magic"),
        (chunkhashes.encode(CHUNK, HASHES)[:-1] + b"\x00", 3, "checksum"),
        (chunkhashes.encode(CHUNK.replace("-0.bin", "-1.bin"), HASHES), 3, "checksum"),
    ],
    ids=["cut", "another count", "empty", "magic", "checksum", "another chunk"],
)
def test_a_sidecar_that_is_not_its_chunks_is_refused(data: bytes, count: int, reason: str) -> None:
    with pytest.raises(IntegrityError, match=reason) as caught:
        chunkhashes.parse(CHUNK, data, count)
    assert CHUNK in str(caught.value)


def test_a_count_that_disagrees_with_the_index_is_refused_before_the_checksum() -> None:
    head = b"LSCHASH1" + struct.pack("<Q", 4)
    checksum = xxhash.xxh3_64_intdigest(CHUNK.encode() + head + HASHES)
    with pytest.raises(IntegrityError, match="lists 4 items, but the chunk's index entry says 3"):
        chunkhashes.parse(CHUNK, head + HASHES + struct.pack("<Q", checksum), 3)
