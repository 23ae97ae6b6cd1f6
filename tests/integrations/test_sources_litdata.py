"""``sources.litdata_dir`` reads a stranger's LitData folder without running anything it holds.

Folders are written by litdata's own ``BinaryWriter``; where a test shows what litdata
itself would do, it reads the same folder with litdata's ``StreamingDataset``.
"""

from __future__ import annotations

import json
import pathlib
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from litdata import StreamingDataset
from litdata.streaming.writer import BinaryWriter

import litstore
from litstore import sources
from litstore._litdata.folder import json_leaf
from tests.conftest import tree_state


class Payload:
    """Unpickling this creates ``marker``: what a hostile folder's pickle leaf could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


def _write(folder: Path, items: list[Any], chunk_bytes: int = 1 << 16) -> Path:
    writer = BinaryWriter(str(folder), chunk_bytes=chunk_bytes)
    for index, item in enumerate(items):
        writer.add_item(index, item)
    writer.done()
    writer.merge()
    return folder


def _config(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "index.json").read_text())["config"])


def _edit_config(folder: Path, **changes: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    index["config"].update(changes)
    (folder / "index.json").write_text(json.dumps(index))


def test_a_pickle_folder_is_refused_before_anything_is_unpickled(tmp_path: Path, store: litstore.Store) -> None:
    marker = tmp_path / "marker"
    folder = _write(tmp_path / "hostile", [{"id": f"k{i}", "payload": Payload(marker)} for i in range(3)])
    assert "pickle" in _config(folder)["data_format"]
    assert not marker.exists()  # writing pickles; only unpickling touches the marker
    before = tree_state(Path(store.root))

    with pytest.raises(litstore.InvalidRecordError, match=r"item 0: a leaf is stored with litdata's 'pickle'"):
        store.append(sources.litdata_dir(folder))
    assert not marker.exists()
    assert tree_state(Path(store.root)) == before

    # The payload is real: litdata's own reader runs it (what litdata_dir used to do).
    assert StreamingDataset(input_dir=str(folder))[0]["id"] == "k0"
    assert marker.exists()


def test_a_config_that_hides_its_serializers_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "opt", [{"id": i, "v": np.arange(3)} for i in range(4)])
    for changes, match in [
        ({"data_format": ["int", "graph:pickle"]}, r"'graph:pickle' serializer"),
        ({"data_format": ["int", "pickle:x"]}, r"'pickle:x' serializer"),
        ({"data_format": "pickle"}, r"not a list of serializer names"),
        ({"compression": "zstd"}, r"compression 'zstd'"),
        ({"encryption": {"algorithm": "fernet"}}, r"encryption"),
        ({"item_loader": "TokensLoader"}, r"'TokensLoader' loader"),
        ({"format": "mds"}, r"'mds' shards"),
        ({"data_spec": '[1, {"type": "collections.namedtuple", "context": "{}", "children_spec": []}]'}, "namedtuple"),
        ({"data_spec": "[1, " * 100_000}, r"not valid JSON"),
        (
            {"data_spec": '[1, {"type": null, "context": null, "children_spec": []}]'},
            r"1 leaves but data_format names 2",
        ),
    ]:
        original = (folder / "index.json").read_bytes()
        _edit_config(folder, **changes)
        with pytest.raises(litstore.InvalidArgumentError, match=match):
            sources.litdata_dir(folder)
        (folder / "index.json").write_bytes(original)
    (folder / "index.json").write_text("[" * 100_000)
    with pytest.raises(litstore.InvalidArgumentError, match=r"not valid JSON"):
        sources.litdata_dir(folder)


def _same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for name in theirs:
            _same(ours[name], theirs[name])
    elif isinstance(theirs, list | tuple):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for mine, other in zip(ours, theirs, strict=True):
            _same(mine, other)
    elif isinstance(theirs, memoryview | bytes):
        assert bytes(ours) == bytes(theirs)
    elif hasattr(theirs, "shape"):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    else:
        assert ours == theirs


@pytest.mark.parametrize(
    "items",
    [
        [{"id": str(i), "text": "x" * i} for i in range(600)],  # litdata writes these as Arrow rows only
        [{"id": i, "tags": ["a", "b"][: i % 3], "score": i / 2} for i in range(40)],  # Arrow rows, nested
        [{"id": i, "v": np.arange(i + 1), "nested": {"k": [i, (i, 2.5)]}} for i in range(40)],  # pytree leaves
        [{"id": i, "t": np.full((2, 2), i, dtype=np.float32), "flag": i % 2 == 0} for i in range(40)],
        [{"id": str(i), "text": None if i % 3 == 0 else "t" * i} for i in range(30)],  # None: a pickle leaf
        [{"id": i, "v": np.arange(3), "tags": ["a"] * i, "m": {"x": [i / 2], "y": None}} for i in range(30)],
        [
            {
                "id": i,
                "v": np.arange(2),
                "recs": [{"a": i, "b": "s"}, {"a": None, "b": 1.5}],
                "s": ["a"],
                "f": [0.5],
                "n": [i, 2],
                "b": [True],
                "d": {"k": "v", "z": [1, "x"]},
            }
            for i in range(30)
        ],
        [bytes([i]) * (i + 1) for i in range(30)],
        [i * 3 for i in range(30)],
    ],
    ids=["text-rows", "nested-rows", "pytree", "arrays", "none-rows", "json-leaves", "json-records", "bytes", "ints"],
)
def test_benign_folders_read_as_litdata_reads_them(tmp_path: Path, items: list[Any]) -> None:
    folder = _write(tmp_path / "opt", items, chunk_bytes=256)
    assert len(json.loads((folder / "index.json").read_text())["chunks"]) > 1
    ours = list(sources.litdata_dir(folder))
    theirs = StreamingDataset(input_dir=str(folder))
    assert len(ours) == len(theirs) == len(items)
    for index, record in enumerate(ours):
        item = theirs[index]
        _same(record, item if isinstance(item, dict) else {"id": index, "item": item})


def test_an_image_folder_round_trips_through_the_store(tmp_path: Path, store: litstore.Store) -> None:
    import litdata
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    folder = _write(
        tmp_path / "opt", [{"id": f"k{i}", "image": litdata.Image(path=str(tmp_path / "a.png"))} for i in range(3)]
    )
    store.append(sources.litdata_dir(folder))
    np.testing.assert_array_equal(np.asarray(store["k2"]["image"]), pixels.transpose(2, 0, 1))


def _chunk(folder: Path) -> Path:
    return folder / json.loads((folder / "index.json").read_text())["chunks"][0]["filename"]


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda data: data[:2], r"too short for a header"),
        (lambda data: b"\xff\xff\xff\x00" + data[4:], r"holds 16777215 items, not the 5"),
        (lambda data: data[:20], r"header cut short"),
        (lambda data: data[:-3], r"offsets do not fit"),
        (lambda data: data[:28] + b"\xff\xff\x00\x00" + data[32:], r"item 0: its leaf sizes do not add up"),
        (lambda data: data[:36] + b"\xff\xfe" + data[38:], r"item 0: stored 'str' media bytes do not decode"),
        (lambda data: data + b"\x00" * 12 + b"LDARW01\x00", r"Arrow rows overlap"),
    ],
    ids=["cut-header", "item-count", "cut-offsets", "cut-end", "leaf-sizes", "bad-utf8", "fake-footer"],
)
def test_damaged_chunks_name_their_file_and_write_nothing(
    tmp_path: Path, store: litstore.Store, damage: Any, match: str
) -> None:
    folder = _write(tmp_path / "opt", [{"id": f"k{i}", "v": np.arange(4, dtype=np.int64) + i} for i in range(5)])
    chunk = _chunk(folder)
    chunk.write_bytes(damage(chunk.read_bytes()))
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.InvalidRecordError, match=match) as caught:
        store.append(sources.litdata_dir(folder))
    assert chunk.name in str(caught.value)
    assert tree_state(Path(store.root)) == before


def test_damaged_arrow_rows_are_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "opt", [{"id": str(i), "text": "t" * i} for i in range(20)])
    chunk = _chunk(folder)
    data = bytearray(chunk.read_bytes())
    assert data.endswith(b"LDARW01\x00")
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xa5" * 64  # inside the Arrow IPC table
    chunk.write_bytes(bytes(data))
    with pytest.raises(litstore.InvalidRecordError, match=r"Arrow rows"):
        list(sources.litdata_dir(folder))


def test_a_missing_chunk_is_an_invalid_record(tmp_path: Path) -> None:
    folder = _write(tmp_path / "opt", [{"id": i} for i in range(3)])
    _chunk(folder).unlink()
    with pytest.raises(litstore.InvalidRecordError, match=r"there is no chunk"):
        list(sources.litdata_dir(folder))


@pytest.mark.parametrize(
    ("leaf", "match"),
    [
        (bytes([1]) + struct.pack("<I", 0xFFFFFFFF), r"claims 4294967295 values"),  # litdata allocates them
        (bytes([6]) + struct.pack("<II", 0xFFFFFFFF, 0), r"4294967295 records without fields"),
        (bytes([2]) + struct.pack("<I", 3) + b"\x00" * 16, r"claims 3 values in 16 bytes"),
        ((bytes([5]) + struct.pack("<I", 1) + struct.pack("<I", 1) + b"k") * 100 + bytes([11]), r"deeper than 64"),
        (bytes([11, 11]), r"does not end where its bytes do"),
        (b"[" * 100_000, r"nests too deep"),
        (bytes([7]) + struct.pack("<I", 2) + b"\xff\xfe", r"does not decode"),
        (bytes([12]) + b"\x00" * 4, r"unknown tag 12"),
    ],
    ids=["strings", "empty-records", "ints", "deep", "trailing", "deep-legacy", "utf8", "tag"],
)
def test_json_leaves_decode_within_their_bytes(leaf: bytes, match: str) -> None:
    with pytest.raises(litstore.IntegrityError, match=match):
        json_leaf(leaf)


def test_json_leaves_decode_as_litdata_writes_them() -> None:
    from litdata.streaming.serializers import JsonLeaf, JsonSerializer

    values = [["a", "b"], [1, 2], [0.5], [True, False], {"k": [1, "x"], "n": None}, [{"a": 1, "b": "s"}], []]
    for value in values:
        data, _ = JsonSerializer().serialize(JsonLeaf(value))
        assert json_leaf(data) == value
