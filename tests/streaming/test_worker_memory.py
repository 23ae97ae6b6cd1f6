"""What a streaming process holds while it streams a chunk: a few blocks, never a Python object per item.

A DataLoader worker over a store of small records streams chunks of half a million
items (64 MiB). Two things used to cost it memory per item of those chunks: litdata's
item loader mapping the next chunks ahead (a Python list of each one's item offsets,
36 bytes an item, for up to four chunks), which litstore never reads from for a
local store, and :class:`~litstore.read.decoded.DecodedChunk` keeping a list slot
and a widened copy of the offsets for every item of the chunk it decodes.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

import litstore
from litstore.format import codec, hashing
from litstore.read.decoded import BLOCK_ITEMS, DecodedChunk

ITEMS = 100_000  # a chunk of small records, as a worker streams them
Record = dict[str, Any]


def _chunk(count: int) -> tuple[bytes, bytes, list[Record]]:
    """A chunk file of ``count`` small records in litdata's item framing, their content hashes, and the records."""
    records = [{"id": f"k{i:06d}", "label": i % 7} for i in range(count)]
    payloads = [codec.encode(record) for record in records]
    offsets = [4 * (count + 2)]
    for payload in payloads:
        offsets.append(offsets[-1] + 4 + len(payload))
    header = count.to_bytes(4, "little") + b"".join(offset.to_bytes(4, "little") for offset in offsets)
    items = b"".join(len(payload).to_bytes(4, "little") + payload for payload in payloads)
    return header + items, hashing.content_hash_rows(payloads).tobytes(), records


@pytest.fixture(scope="module")
def chunk() -> tuple[bytes, bytes, list[Record]]:
    return _chunk(ITEMS)


def test_a_decoded_chunk_holds_its_blocks_not_a_slot_per_item(chunk: tuple[bytes, bytes, list[Record]]) -> None:
    """Mapping a chunk and streaming its first blocks allocates a block's worth, whatever the chunk holds: a
    list slot and a widened offset for each item were 16 bytes an item (1.6 MB here), held until the next chunk."""
    data, hashes, records = chunk
    tracemalloc.start()
    try:
        decoded = DecodedChunk(data, "c.bin", hashes)
        same = all(decoded.take(item) == records[item] for item in range(3 * BLOCK_ITEMS))
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert same
    # The offsets are checked a fixed number at a time (:mod:`litstore._litdata.chunk`): a few hundred KB at most.
    assert peak < 4 * ITEMS, f"{peak} bytes traced at most while streaming 3 blocks of a {ITEMS}-item chunk"
    assert held < ITEMS // 2, f"{held} bytes still held after streaming 3 whole blocks"


def test_items_taken_in_any_order_and_again_are_the_records_at_their_places(
    chunk: tuple[bytes, bytes, list[Record]],
) -> None:
    data, hashes, records = chunk
    decoded = DecodedChunk(data, "c.bin", hashes)
    order = list(range(len(decoded)))
    random.Random(7).shuffle(order)
    assert [decoded.take(item) for item in order] == [records[item] for item in order]
    assert decoded.take(5) == decoded.take(5) == records[5]  # asked again: its block is decoded again
    with pytest.raises(IndexError, match=f"has {ITEMS} items"):
        decoded.take(ITEMS)


def test_a_local_stream_maps_no_chunk_ahead_in_litdatas_item_loader(
    make_store: Callable[..., litstore.Store],
) -> None:
    """litstore decodes a local store's chunks itself; litdata's item loader would map up to four of a
    worker's chunks ahead, each with its offsets as a Python list, and never read them."""
    made = make_store(key="id", chunk_bytes=4096)
    made.append([{"id": f"k{i:04d}", "label": i} for i in range(900)])
    store = litstore.open(made.root)
    assert sum(len(chunks) for chunks in store.chunks().values()) > 4
    dataset = store.dataset()
    iterator = iter(dataset)
    streamed = [next(iterator)]
    loader = dataset.cache._reader._item_loader
    assert dict(loader._mapped) == {}
    streamed += [next(iterator) for _ in range(len(dataset) - 1)]  # (iter() again would start a new epoch)
    assert dict(loader._mapped) == {}
    assert sorted(streamed, key=lambda record: record["id"]) == [{"id": f"k{i:04d}", "label": i} for i in range(900)]
    assert dataset[3] == streamed[3]  # litdata's per-item path maps the chunk when asked
