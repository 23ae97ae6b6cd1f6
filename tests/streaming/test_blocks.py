"""Streaming chunks bigger than one decoded block: the same records, in litdata's order, damage found per item.

The streaming fast path checks and decodes a local chunk a block of
``litstore.read.decoded.BLOCK_ITEMS`` items at a time, and steps through litdata's
item order itself. These tests use chunks of several blocks (the other streaming
tests use small chunks of one block) and compare with litdata's own reader over the
same view directory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from litdata import StreamingDataLoader, StreamingDataset

import litstore
from litstore import IntegrityError
from litstore._litdata import chunk as chunk_layout
from litstore.format import codec, hashing, layout
from litstore.read.decoded import BLOCK_ITEMS
from tests.planting import restamp

Record = dict[str, Any]
COUNT = 3 * BLOCK_ITEMS + 100  # one chunk of four blocks, the last one short


def _record(i: int) -> Record:
    return {"id": f"k{i:04d}", "label": i % 7, "text": f"record {i}" * (i % 3)}


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """``COUNT`` small records in one append: a single chunk holds them all."""
    made = make_store(key="id")
    made.append([_record(i) for i in range(COUNT)])
    chunks = {row["chunk"] for row in made.head().manifest().to_pylist()}
    assert len(chunks) == 1, "the records should share one chunk"
    return litstore.open(made.root)


def _location(store: litstore.Store, key: str) -> tuple[str, int]:
    row = next(entry for entry in store.head().manifest().to_pylist() if entry["key"] == key)
    return row["chunk"], row["row"]


def _stored_order(store: litstore.Store) -> list[Record]:
    """The records in the order of their rows in the chunk (the order streaming yields them unshuffled)."""
    rows = sorted(store.head().manifest().to_pylist(), key=lambda entry: entry["row"])
    return [_record(int(entry["key"][1:])) for entry in rows]


def _edit_payload(store: litstore.Store, key: str, edit: Callable[[bytearray, int, int], None]) -> tuple[str, int]:
    """Apply ``edit(data, start, end)`` to the chunk holding ``key`` (its payload at ``start:end``)."""
    chunk, row = _location(store, key)
    path = Path(store.root) / chunk
    data = bytearray(path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk)
    edit(data, int(offsets[row]) + chunk_layout.ITEM_HEADER, int(offsets[row + 1]))
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    return chunk, row


def _flip_last_byte(data: bytearray, start: int, end: int) -> None:
    data[end - 1] ^= 0x01  # inside the last string: still decodes, to other text


def _break_type_byte(data: bytearray, start: int, end: int) -> None:
    data[start] = 0xC1  # the one byte MessagePack never uses: the payload cannot decode


def _stream_until_error(dataset: Any) -> tuple[list[Record], IntegrityError | None]:
    records: list[Record] = []
    iterator = iter(dataset)
    while True:
        try:
            records.append(next(iterator))
        except StopIteration:
            return records, None
        except IntegrityError as error:
            return records, error


@pytest.mark.parametrize("shuffle", [False, True])
def test_stream_is_litdata_readers_order_over_the_same_view(
    store: litstore.Store, tmp_path: Path, shuffle: bool
) -> None:
    dataset = store.dataset(views_dir=tmp_path / "views", shuffle=shuffle, seed=5)
    plain = StreamingDataset(dataset.input_dir.path, shuffle=shuffle, seed=5, transform=codec.decode)

    for _ in range(2):  # two epochs: with shuffle, the second has another order
        ours = list(dataset)
        assert ours == list(plain)
        assert sorted(ours, key=lambda record: record["id"]) == [_record(i) for i in range(COUNT)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_two_workers_sharing_one_chunk_yield_each_record_once(
    store: litstore.Store, tmp_path: Path, shuffle: bool
) -> None:
    dataset = store.dataset(views_dir=tmp_path / "views", shuffle=shuffle, seed=3)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2, collate_fn=lambda batch: batch)
    streamed = [record for batch in loader for record in batch]
    assert sorted(streamed, key=lambda record: record["id"]) == [_record(i) for i in range(COUNT)]


def test_damaged_item_in_a_later_block_is_an_integrity_error_naming_it(store: litstore.Store, tmp_path: Path) -> None:
    expected = _stored_order(store)
    damaged = 2 * BLOCK_ITEMS + 17
    key = expected[damaged]["id"]
    chunk, row = _edit_payload(store, key, _flip_last_byte)
    assert row == damaged

    records, error = _stream_until_error(litstore.open(store.root).dataset(views_dir=tmp_path / "views"))
    assert error is not None, "the damaged record streamed"
    for part in (repr(key), chunk, f"row {row}"):
        assert part in str(error)
    assert records == expected[:damaged], "the records before it stream unchanged"

    unchecked = list(litstore.open(store.root).dataset(views_dir=tmp_path / "views", verify_records=False))
    assert len(unchecked) == COUNT
    assert unchecked[damaged] != expected[damaged], "unchecked, the damaged record streams as it is stored"
    assert unchecked[:damaged] + unchecked[damaged + 1 :] == expected[:damaged] + expected[damaged + 1 :]


def test_undecodable_item_streamed_unchecked_is_an_integrity_error_naming_its_row(
    store: litstore.Store, tmp_path: Path
) -> None:
    expected = _stored_order(store)
    damaged = BLOCK_ITEMS + 40
    key = expected[damaged]["id"]
    chunk, row = _edit_payload(store, key, _break_type_byte)
    assert row == damaged

    records, error = _stream_until_error(
        litstore.open(store.root).dataset(views_dir=tmp_path / "views", verify_records=False)
    )
    assert error is not None, "an item that does not decode streamed"
    for part in (chunk, f"row {row}"):
        assert part in str(error)
    assert records == expected[:damaged], "the items of its block before it still decode"

    checked, error = _stream_until_error(litstore.open(store.root).dataset(views_dir=tmp_path / "views"))
    assert error is not None and repr(key) in str(error)
    assert checked == records


def test_committed_item_holding_two_records_never_shifts_the_records_after_it(
    store: litstore.Store, tmp_path: Path
) -> None:
    """A hostile writer commits (with a matching content hash) an item that holds a foreign record,
    4 filler bytes and a second record: read back to back, the next items would each take the
    record before them. The item is refused, naming it; no other key streams a foreign record."""
    expected = _stored_order(store)
    hostile = BLOCK_ITEMS + 10
    key = expected[hostile]["id"]
    payload = b""

    def plant(data: bytearray, start: int, end: int) -> None:
        nonlocal payload
        head = codec.encode({"id": "foreign"}) + b"\0\0\0\0"
        tail = next(
            packed
            for size in range(end - start)
            if len(packed := codec.encode({"t": "x" * size})) == end - start - len(head)
        )
        payload = head + tail
        data[start:end] = payload

    chunk, row = _edit_payload(store, key, plant)
    for path in sorted((Path(store.root) / layout.MANIFESTS).glob("*.parquet")):
        table = pq.read_table(path)
        hashes = [
            hashing.content_hash(payload) if listed == key else content
            for listed, content in zip(table.column("key").to_pylist(), table.column("content_hash").to_pylist())
        ]
        column = table.schema.get_field_index("content_hash")
        pq.write_table(
            table.set_column(column, "content_hash", pa.array(hashes, table.schema.field(column).type)), path
        )
    restamp(store.root)  # the chunk's hashes sidecar and the key runs commit the hash too

    records, error = _stream_until_error(litstore.open(store.root).dataset(views_dir=tmp_path / "views"))
    assert error is not None, "an item holding two records streamed"
    for part in (chunk, f"row {row}", "matches its committed content hash but is not one canonical record"):
        assert part in str(error)
    assert records == expected[:hostile]


def _swallowing_pair() -> tuple[bytes, bytes, bytes]:
    """Items 0 and 1 of a chunk: item 0 holds a record, filler, and the start of a bin8 value
    that swallows item 1's framing and payload; both content hashes are the committed ones."""
    first, second = codec.encode({"id": "k0", "v": 0}), codec.encode({"id": "k1", "v": 1})
    framing = len(second).to_bytes(4, "little")
    payload = first + b"\0\0\0\0" + b"\xc4" + bytes([len(framing) + len(second)])
    items = [len(payload).to_bytes(4, "little") + payload, framing + second]
    offsets = [16]
    for item in items:
        offsets.append(offsets[-1] + len(item))
    header = (2).to_bytes(4, "little") + b"".join(offset.to_bytes(4, "little") for offset in offsets)
    return header + b"".join(items), payload, second


def test_an_item_swallowing_the_next_one_is_refused_by_the_block_decoder() -> None:
    from litstore.read.decoded import DecodedChunk

    chunk, payload, second = _swallowing_pair()
    decoded = DecodedChunk(chunk, "c.bin", hashing.content_hash(payload) + hashing.content_hash(second))
    with pytest.raises(IntegrityError, match="row 0"):
        decoded.take(0)
    assert decoded.take(1) == {"id": "k1", "v": 1}  # the item after it keeps its own record


def test_get_many_decoding_refuses_a_payload_holding_two_records() -> None:
    first, second = codec.encode({"id": "k0"}), codec.encode({"id": "k1"})
    with pytest.raises(IntegrityError, match="exactly one record"):
        codec.decode_each([first + second, b""])
    with pytest.raises(IntegrityError):
        codec.decode_each([first + second[:3], second[3:]])
    assert codec.decode_each([first, second]) == [{"id": "k0"}, {"id": "k1"}]


@pytest.mark.parametrize(
    "dead",
    [
        [],
        [0],  # the first row
        [COUNT - 1],  # the last row
        [0, 1, 2, COUNT - 3, COUNT - 2, COUNT - 1],  # runs of dead rows at both ends
        list(range(BLOCK_ITEMS - 3, BLOCK_ITEMS + 40)),  # a run of dead rows across a block boundary
        list(range(1, COUNT, 2)),  # every other row: live items' blocks span twice the rows, a run per item
        list(range(0, COUNT, 3)) + list(range(2 * BLOCK_ITEMS, 3 * BLOCK_ITEMS)),
        [row for row in range(COUNT) if row != 300],  # all but one row dead
        list(range(1, COUNT)),  # all but the first
        list(range(COUNT - 1)),  # all but the last
    ],
    ids=[
        "none",
        "first",
        "last",
        "runs-at-both-ends",
        "run-across-blocks",
        "every-other",
        "mixed",
        "all-but-one",
        "all-but-first",
        "all-but-last",
    ],
)
def test_live_rows_of_a_chunk_of_several_blocks_decode_as_the_records_at_those_rows(
    store: litstore.Store, dead: list[int]
) -> None:
    """A chunk's live items are decoded a block at a time from the runs of them (a new run after each dead row):
    never a neighbour's record, whichever rows are dead around them and wherever a block of live items starts.
    The dead rows hold bytes that are no record: reading one would fail the block."""
    import numpy as np

    from litstore.read.decoded import DecodedChunk

    head = store.head()
    chunk = head.manifest().column("chunk")[0].as_py()
    data = bytearray((Path(store.root) / chunk).read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk)
    for row in dead:  # the framing kept, the payload not a record
        data[int(offsets[row]) + chunk_layout.ITEM_HEADER : int(offsets[row + 1])] = b"\xc1" * (
            int(offsets[row + 1]) - int(offsets[row]) - chunk_layout.ITEM_HEADER
        )
    hashes = b"".join(
        hashing.content_hash(codec.encode(record)) for record in _stored_order(store)
    )  # every row's, in row order
    live = np.setdiff1d(np.arange(COUNT), np.array(dead, dtype=np.int64))
    stored = _stored_order(store)
    for rows in (live, live.astype(np.uint32)):  # as a test gives them, and as a deletion vector does
        decoded = DecodedChunk(bytes(data), chunk, hashes, None, rows)
        assert len(decoded) == len(live)
        # Each block decodes in one pass: no item falls back to being decoded alone, which would hide a wrong run.
        blocks = [decoded._decode_block(block) for block in range(-(-len(live) // BLOCK_ITEMS))]
        assert [record for records in blocks for record in records] == [stored[row] for row in live.tolist()]
        decoded = DecodedChunk(bytes(data), chunk, hashes, None, rows)
        assert [decoded.take(item) for item in range(len(decoded))] == [stored[row] for row in live.tolist()]
    # The same runs, given to the codec by hand.
    starts, ends = offsets[live], offsets[live + 1]
    for first in range(0, len(live), BLOCK_ITEMS):
        block_starts, block_ends = starts[first : first + BLOCK_ITEMS], ends[first : first + BLOCK_ITEMS]
        heads = np.flatnonzero(block_starts[1:] != block_ends[:-1]) + 1
        firsts = [int(block_starts[0]), *block_starts[heads].tolist()]
        lasts = [*block_ends[heads - 1].tolist(), int(block_ends[-1])]
        packed = np.cumsum(block_ends - block_starts).tolist()
        assert codec.decode_framed_runs(memoryview(bytes(data)), firsts, lasts, packed) == [
            stored[row] for row in live[first : first + BLOCK_ITEMS].tolist()
        ]


def test_runs_that_do_not_add_up_to_their_items_are_refused_not_misread() -> None:
    """``decode_framed_runs`` given runs shorter or longer than the items' framing, or placed wrong, returns
    ``None`` (the caller then decodes item by item), never records cut from the wrong bytes."""
    payloads = [codec.encode({"id": f"k{i}"}) for i in range(3)]
    framed = b"".join(len(payload).to_bytes(4, "little") + payload for payload in payloads)
    ends = list(itertools.accumulate(4 + len(payload) for payload in payloads))
    view = memoryview(framed)
    assert codec.decode_framed_runs(view, [0], [len(framed)], ends) == [{"id": "k0"}, {"id": "k1"}, {"id": "k2"}]
    assert codec.decode_framed_runs(view, [0, ends[0]], [ends[0], len(framed)], ends) == [
        {"id": "k0"},
        {"id": "k1"},
        {"id": "k2"},
    ]  # the same items as two runs
    assert codec.decode_framed_runs(view, [0], [len(framed) - 1], ends) is None  # a run cut short
    assert codec.decode_framed_runs(view, [0, 0], [len(framed), 4], ends) is None  # more bytes than the items
    assert codec.decode_framed_runs(view, [0, ends[0] + 1], [ends[0], len(framed)], ends) is None  # a run misplaced
    assert codec.decode_framed_runs(view, [], [], []) == []
