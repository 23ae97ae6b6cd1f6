"""Facts about litdata 0.2.76 that litstore relies on; each would break litstore if it changed.

- litdata's own ``StreamingDataset`` reads a litstore version's split (its index.json and
  the chunks it names) and yields exactly the bytes litstore's reader returns;
- the ``config`` block litstore writes into index files is the one litdata's
  ``BinaryWriter`` writes for ``bytes`` items, and litstore's index document is
  litdata's (less its ``updated_at`` stamp);
- the chunk layout ``num_items | offsets[num_items + 1] | (size | payload)*`` that
  :mod:`litstore._litdata` parses is the layout ``BinaryWriter`` writes;
- the pinned litdata version is the one installed.
"""

from __future__ import annotations

import json
import os
import random
import tomllib
import warnings
from pathlib import Path
from typing import Any

import litdata
import pytest
from litdata import StreamingDataset
from litdata.streaming.writer import BinaryWriter

import litstore
from litstore import _litdata
from litstore._litdata import chunk as chunk_layout
from litstore._litdata import index as litdata_index
from litstore._litdata import writer as litdata_writer
from litstore.format import codec, layout
from litstore.read.chunks import ChunkCache
from litstore.storage.local import LocalStorage
from tests.conftest import tree_state

PINNED = "0.2.76"
SPLITS = litstore.HashSplit(train=0.6, val=0.2, test=0.2)


def _records(prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i:03d}", "value": i * 7, "blob": bytes((i * 3 + j) % 256 for j in range(i % 50))}
        for i in range(count)
    ]


def _payloads(count: int) -> list[bytes]:
    """Bytes items of varied lengths (1 to 97 bytes)."""
    return [bytes((i + j) % 251 for j in range(1 + (i * 13) % 97)) for i in range(count)]


def _write_with_litdata(directory: Path, payloads: list[bytes], chunk_bytes: int) -> dict[str, Any]:
    """Write ``payloads`` with litdata's own ``BinaryWriter`` and return its merged index.json."""
    writer = BinaryWriter(str(directory), chunk_bytes=chunk_bytes)
    for index, payload in enumerate(payloads):
        writer.add_item(index, payload)
    writer.done()
    writer.merge()
    document: dict[str, Any] = json.loads((directory / "index.json").read_text())
    return document


def _index_file(tmp_path: Path, root: Path, snapshot: Any, split: str) -> Path:
    """The litdata index of ``split`` in ``snapshot``'s version: the file its commit record names, or (a format-6
    record listed by delta, which names none) the document streaming's views hand litdata, from its chunks."""
    record = json.loads((root / layout.version_record(snapshot.version.number)).read_text())
    if record.get("indexes"):
        return root / str(record["indexes"][split])
    assert record.get("listed_by_delta"), record
    made = tmp_path / f"index-{snapshot.version.number}-{split}.json"
    made.write_bytes(litdata_index.index_document(snapshot.chunks()[split], snapshot.config.chunk_bytes))
    return made


def _litdata_view(tmp_path: Path, root: Path, index_file: Path, name: str) -> Path:
    """A directory litdata can read: the split's index.json beside the store's ``fragments/``.

    Chunk file names in a litstore index are relative to the store root
    (``fragments/<frag>/chunk-...bin``), so the index needs the fragments next to it.
    """
    view = tmp_path / name
    view.mkdir()
    (view / "index.json").write_bytes(index_file.read_bytes())
    os.symlink(root / "fragments", view / "fragments", target_is_directory=True)
    return view


# -- (a) litdata reads what litstore writes -----------------------------------------


@pytest.fixture
def filled_store(make_store: Any) -> litstore.Store:
    """Three appends (so each split spans chunks of three fragments) into 2 KiB chunks."""
    store: litstore.Store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    for prefix in ("a", "b", "c"):
        store.append(_records(prefix, 80))
    return store


@pytest.mark.parametrize("version", [1, 3])
def test_streaming_dataset_reads_litstore_chunks(filled_store: litstore.Store, tmp_path: Path, version: int) -> None:
    root = Path(filled_store.root)
    snapshot = filled_store.at(version)
    before = tree_state(root)
    reader = ChunkCache(LocalStorage(root))
    splits_read = 0
    for split, chunks in snapshot.chunks().items():
        fragments = {chunk.filename.split("/")[1] for chunk in chunks}
        assert len(fragments) == version, "the split should span chunks of every append"
        index_file = _index_file(tmp_path, root, snapshot, split)
        dataset = StreamingDataset(input_dir=str(_litdata_view(tmp_path, root, index_file, f"v{version}-{split}")))
        assert len(dataset) == snapshot.version.counts[split] == sum(chunk.num_items for chunk in chunks)

        expected = [bytes(reader.payload(chunk.filename, row)) for chunk in chunks for row in range(chunk.num_items)]
        by_index = [dataset[i] for i in range(len(dataset))]
        assert all(isinstance(item, (bytes, memoryview)) for item in by_index)
        assert [bytes(item) for item in by_index] == expected
        assert [bytes(item) for item in dataset] == expected  # iteration, in index order

        keys = set()
        for item in by_index:
            record = codec.decode(item)
            assert record == snapshot[record["id"]]
            keys.add(record["id"])
        assert keys == {row["key"] for row in snapshot.manifest().to_pylist() if row["split"] == split}
        splits_read += 1
    assert splits_read == len(SPLITS.names)
    assert tree_state(root) == before, "reading with litdata must not change the store"


# -- (b) the index config and document ------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [512, 4096, 64 * 1024 * 1024])
def test_index_config_is_litdata_config_for_bytes_items(tmp_path: Path, chunk_bytes: int) -> None:
    document = _write_with_litdata(tmp_path, _payloads(60), chunk_bytes)
    assert document["config"] == litdata_index.index_config(chunk_bytes)
    if chunk_bytes == 512:
        assert len(document["chunks"]) > 3


@pytest.mark.parametrize("chunk_bytes", [512, 4096])
def test_index_document_is_litdata_index_less_updated_at(tmp_path: Path, chunk_bytes: int) -> None:
    document = _write_with_litdata(tmp_path, _payloads(60), chunk_bytes)
    assert "updated_at" in document
    del document["updated_at"]
    chunks = [litdata_index.ChunkInfo.from_index_entry(entry) for entry in document["chunks"]]
    ours = json.loads(litdata_index.index_document(chunks, chunk_bytes))
    assert ours == document
    assert litdata_index.parse_index_document(litdata_index.index_document(chunks, chunk_bytes), "index.json") == chunks


@pytest.mark.parametrize("chunk_bytes", [64, 512, 1024, 4096])
def test_litstore_writer_writes_what_binary_writer_writes(tmp_path: Path, chunk_bytes: int) -> None:
    """litstore builds chunks itself; they are BinaryWriter's, byte for byte, boundaries included.

    The payloads mix empty items, small ones and items larger than a whole chunk.
    """
    rng = random.Random(chunk_bytes)
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 60, 300, 1500])) for _ in range(150)]
    plain, ours = tmp_path / "litdata", tmp_path / "litstore"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # litdata warns about items larger than a chunk
        document = _write_with_litdata(plain, payloads, chunk_bytes)
    ours.mkdir()
    written = litdata_writer.write_chunks(
        str(ours), "frag", "fragments/frag", payloads, first_chunk=0, chunk_bytes=chunk_bytes
    )
    assert len(written) == len(document["chunks"]) > 3
    for info, entry in zip(written, document["chunks"], strict=True):
        assert info.filename == f"fragments/frag/chunk-frag-{entry['filename'].removeprefix('chunk-0-')}"
        assert info.to_index_entry() == {**entry, "filename": info.filename}
        assert (ours / Path(info.filename).name).read_bytes() == (plain / entry["filename"]).read_bytes()
    assert sorted(os.listdir(ours)) == sorted(Path(info.filename).name for info in written), "no index file"


# -- (c) the chunk byte layout ----------------------------------------------------------


def test_chunk_layout_parsed_by_litstore_holds_the_items(tmp_path: Path) -> None:
    payloads = _payloads(120)
    document = _write_with_litdata(tmp_path, payloads, 1024)
    assert len(document["chunks"]) > 3
    found: list[bytes] = []
    for entry in document["chunks"]:
        data = (tmp_path / entry["filename"]).read_bytes()
        assert len(data) == entry["chunk_bytes"]
        offsets = chunk_layout.item_offsets(data, entry["filename"])
        count = entry["chunk_size"]
        assert len(offsets) == count + 1
        assert int.from_bytes(data[:4], "little") == count
        assert offsets[0] == 4 * (count + 2) and offsets[-1] == len(data)
        for row in range(count):
            assert chunk_layout.item_size_matches(data, offsets, row)
            found.append(bytes(chunk_layout.item_payload(data, offsets, row)))
    assert found == payloads  # in order, across chunks

    dataset = StreamingDataset(input_dir=str(tmp_path))
    assert [bytes(dataset[i]) for i in range(len(dataset))] == payloads


def test_chunk_layout_with_store_records(filled_store: litstore.Store) -> None:
    """Every row of every chunk of a store decodes, through the raw layout, to the record under its key."""
    root = Path(filled_store.root)
    locations = {(row["chunk"], row["row"]): row["key"] for row in filled_store.manifest().to_pylist()}
    seen = 0
    for chunks in filled_store.chunks().values():
        for chunk in chunks:
            data = (root / chunk.filename).read_bytes()
            offsets = chunk_layout.item_offsets(data, chunk.filename)
            assert len(offsets) - 1 == chunk.num_items
            for row in range(chunk.num_items):
                record = codec.decode(chunk_layout.item_payload(data, offsets, row))
                assert record["id"] == locations[(chunk.filename, row)]
                assert record == filled_store[record["id"]]
                seen += 1
    assert seen == len(filled_store) == len(locations)


# -- (d) the pin ---------------------------------------------------------------------------


def test_litdata_version_is_the_pinned_one() -> None:
    assert litdata.__version__ == PINNED
    assert _litdata.LITDATA_VERSION == PINNED
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert f"litdata=={PINNED}" in pyproject["project"]["dependencies"]
