"""What the stager checks after writing a fragment's chunks: a chunk file that does not hold
what was built (cut short, a record's bytes or size field changed, two records swapped)
stops the write with an ``IntegrityError``, and the store is left exactly as it was.

The chunk files are damaged as they are written, through the one place chunk bytes reach
the disk (``litstore._litdata.writer.write_chunk_file``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import litstore
from litstore._litdata import writer as litdata_writer
from litstore.errors import IntegrityError, InvalidArgumentError

Damage = Callable[[bytearray], None]


@contextmanager
def damaged_chunks(damage: Damage) -> Iterator[None]:
    """Every chunk file written in this block is written, then ``damage`` is done to its bytes."""
    original = litdata_writer.write_chunk_file

    def write_chunk_file(directory: str, filename: str, parts: Iterable[bytes | memoryview]) -> None:
        data = bytearray(b"".join(parts))
        damage(data)
        original(directory, filename, [bytes(data)])

    litdata_writer.write_chunk_file = write_chunk_file  # type: ignore[assignment]
    try:
        yield
    finally:
        litdata_writer.write_chunk_file = original  # type: ignore[assignment]


def _offsets(data: bytearray) -> np.ndarray:
    count = int.from_bytes(data[:4], "little")
    return np.frombuffer(bytes(data[4 : 4 * (count + 2)]), "<u4").astype(np.int64)


def _flip_payload_byte(row: int) -> Damage:
    def damage(data: bytearray) -> None:
        offsets = _offsets(data)
        if row < len(offsets) - 1:
            data[int(offsets[row + 1]) - 1] ^= 0xFF

    return damage


def _wrong_size_field(data: bytearray) -> None:
    start = int(_offsets(data)[0])
    data[start : start + 4] = (int.from_bytes(data[start : start + 4], "little") - 1).to_bytes(4, "little")


def _cut_short(data: bytearray) -> None:
    del data[len(data) // 2 :]


def _header_only(data: bytearray) -> None:
    del data[int(_offsets(data)[0]) :]


def _swap_first_two(data: bytearray) -> None:
    """Rows 0 and 1 trade places (both the same size, so the header still fits them)."""
    offsets = _offsets(data)
    a, b, c = (int(offset) for offset in offsets[:3])
    assert b - a == c - b
    data[a:c] = data[b:c] + data[a:b]


def _records(count: int) -> list[dict[str, object]]:
    return [{"id": f"k{number:04d}", "value": number, "blob": bytes([number % 251]) * 64} for number in range(count)]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_flip_payload_byte(0), id="first-record-byte"),
        pytest.param(_flip_payload_byte(32), id="sampled-record-byte"),
        pytest.param(_wrong_size_field, id="size-field"),
        pytest.param(_cut_short, id="cut-short"),
        pytest.param(_header_only, id="header-only"),
        pytest.param(_swap_first_two, id="swapped-records"),
    ],
)
def test_a_chunk_that_did_not_land_as_built_stops_the_write(
    make_store: Callable[..., litstore.Store], damage: Damage
) -> None:
    store = make_store(key="id")
    store.append(_records(10))
    before = (store.version, sorted(p.name for p in (Path(store.root) / "fragments").iterdir()))
    with damaged_chunks(damage), pytest.raises(IntegrityError, match="chunk"):
        store.append([{**record, "id": f"n{index:04d}"} for index, record in enumerate(_records(100))])
    reopened = litstore.open(store.root)
    assert reopened.version == before[0]
    assert sorted(p.name for p in (Path(store.root) / "fragments").iterdir()) == before[1]
    assert len(reopened) == 10 and reopened.verify().ok


def test_an_undamaged_write_passes_the_same_checks(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    with damaged_chunks(lambda data: None):
        store.append(_records(100))
    assert len(store) == 100 and store["k0042"] == _records(100)[42]
    listed = [chunk for chunks in store.chunks().values() for chunk in chunks]
    assert listed and all(os.path.getsize(Path(store.root) / chunk.filename) == chunk.num_bytes for chunk in listed)


def _flip_unsampled_byte(data: bytearray) -> None:
    """Row 1, which the sampled check never looks at: only the whole read-back sees it."""
    offsets = _offsets(data)
    if len(offsets) > 3:
        data[int(offsets[2]) - 1] ^= 0xFF


def test_damage_to_a_row_the_sample_skips_stops_the_write(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    with damaged_chunks(_flip_unsampled_byte), pytest.raises(IntegrityError, match="did not land intact"):
        store.append(_records(100))
    assert len(litstore.open(store.root)) == 0


def test_a_chunk_past_litdatas_4_gib_offsets_is_refused(tmp_path: Path) -> None:
    writer = litdata_writer.ChunkWriter(str(tmp_path), "f", "fragments/f", iter(range(10)), 2**40)
    huge = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2, [None, pa.py_buffer(np.array([0, 4, 2**32], dtype=np.int64)), pa.allocate_buffer(2**32)]
    )
    writer.add_items(huge)
    with pytest.raises(InvalidArgumentError, match="4 GiB"):
        writer.close()
    assert os.listdir(tmp_path) == []
