"""Manifest rows a writer holds: chunk names dictionary-encoded in memory, plain strings on disk."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import manifest as manifest_format

from ._workers import record


def test_staged_rows_hold_each_chunk_name_once_and_the_delta_file_holds_plain_strings(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id", splits="split", chunk_bytes=4096)
    records = [{**record(number), "split": "train" if number % 3 else "val"} for number in range(200)]
    fragment = store.stage(records)
    chunk = fragment.rows.column("chunk")
    assert chunk.type == manifest_format.HELD_CHUNK
    names, codes = manifest_format.chunk_codes(chunk)
    assert sorted(names) == sorted(c.filename for listed in fragment.chunks.values() for c in listed)
    assert len(names) > 2 and len(codes) == 200
    assert len(pickle.loads(pickle.dumps(fragment))) == 200  # fragments travel between processes

    version = store.commit([fragment])
    assert version.manifest is not None
    delta = pq.read_table(Path(store.root) / version.manifest)
    assert delta.schema.field("chunk").type == pa.string()
    assert sorted(set(delta.column("chunk").to_pylist())) == sorted(names)
    assert store["k0007"] == records[7]


@pytest.mark.parametrize("format_version", [3, 4])
def test_a_replacement_moves_the_survivors_of_its_chunk_and_every_record_reads_back(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    """Format 3 moves the survivors of the replaced record's chunk; format 4 marks its row dead instead."""
    store = make_store(key="id", chunk_bytes=4096, format_version=format_version)
    records = [record(number) for number in range(120)]
    store.append(records)
    changed = {**records[5], "value": -1}
    version = store.upsert([changed])
    if format_version == 3:
        assert version.replaced == 1 and version.dropped_chunks and not version.deletions
    else:
        assert version.replaced == 1 and not version.dropped_chunks
        assert [ref.dead for ref in version.deletions] == [1]
    reopened = litstore.Store.open(store.root)
    assert reopened["k0005"] == changed
    assert all(reopened[f"k{n:04d}"] == records[n] for n in range(120) if n != 5)
    assert reopened.verify().ok
