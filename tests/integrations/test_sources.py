"""Records in: every source feeds ``store.append`` and reads back as it was written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from litdata.streaming.writer import BinaryWriter
from PIL import Image

import litstore
from litstore import sources
from tests.conftest import tree_state

MakeStore = Callable[..., litstore.Store]


def _png(path: Path, seed: int, size: tuple[int, int] = (5, 7)) -> np.ndarray:
    """Write a small RGB PNG and return its pixels (H, W, 3)."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format="PNG")
    return pixels


def _chw(pixels: np.ndarray) -> np.ndarray:
    return pixels.transpose(2, 0, 1)


# -- JSON Lines ---------------------------------------------------------------------------


def _manifest(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """LitData's image recipe: a JSONL manifest whose ``image`` paths are relative to it."""
    pixels = {f"img-{i}": _png(tmp_path / "data" / "images" / f"img-{i}.png", i) for i in range(3)}
    lines = [json.dumps({"id": name, "image": f"images/{name}.png", "label": i}) for i, name in enumerate(pixels)]
    manifest = tmp_path / "data" / "train.jsonl"
    manifest.write_text("\n".join(lines[:2]) + "\n\n" + lines[2] + "\n")
    return manifest, pixels


def test_jsonl_images_relative_to_the_manifest_are_stored_and_decode(tmp_path: Path, store: litstore.Store) -> None:
    manifest, pixels = _manifest(tmp_path)
    version = store.append(sources.jsonl(manifest))
    assert version.added == 3
    for i, (name, expected) in enumerate(pixels.items()):
        record = store[name]
        assert record["label"] == i
        np.testing.assert_array_equal(record["image"].numpy(), _chw(expected))


def test_jsonl_key_fills_the_line_number_and_keeps_other_values(tmp_path: Path, store: litstore.Store) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"text": "a", "score": 0.5, "tags": ["x"]}\n{"id": 7, "text": "b"}\n')
    records = list(sources.jsonl(manifest, key="id", image_fields=()))
    assert records == [{"text": "a", "score": 0.5, "tags": ["x"], "id": 1}, {"id": 7, "text": "b"}]


def test_jsonl_is_lazy(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a"}\nnot json\n')
    records = sources.jsonl(manifest)
    assert next(records) == {"id": "a"}  # the bad line is not read until it is reached
    with pytest.raises(litstore.InvalidRecordError, match="line 2"):
        next(records)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"id": "a"}\n{"id": "b",\n', r"line 2: not valid JSON"),
        ('{"id": "a"}\n[1, 2]\n', r"line 2: a line must be a JSON object, not list"),
        ('{"id": "a"}\n\n{"id": "c", "image": "missing.png"}\n', r"line 3, field 'image': there is no image file"),
        (b'{"id": "a"}\n{"id": "\xff"}\n', r"line 2: not UTF-8"),
    ],
)
def test_jsonl_bad_lines_name_their_line_and_write_nothing(
    tmp_path: Path, store: litstore.Store, content: str | bytes, match: str
) -> None:
    manifest = tmp_path / "m.jsonl"
    if isinstance(content, bytes):
        manifest.write_bytes(content)
    else:
        manifest.write_text(content)
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.InvalidRecordError, match=match) as caught:
        store.append(sources.jsonl(manifest))
    assert caught.value.culprits
    assert tree_state(Path(store.root)) == before
    assert len(store) == 0


def test_jsonl_missing_manifest_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(litstore.MissingFileError, match="no manifest"):
        sources.jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(litstore.InvalidArgumentError, match="folder"):
        sources.jsonl(tmp_path)
    (tmp_path / "m.jsonl").write_text("")
    with pytest.raises(litstore.InvalidArgumentError, match="image_fields"):
        sources.jsonl(tmp_path / "m.jsonl", image_fields="image")


# -- image folders ------------------------------------------------------------------------


def test_image_folder_labels_from_class_folders_in_key_order(tmp_path: Path, store: litstore.Store) -> None:
    root = tmp_path / "pets"
    pixels = {
        "dog/b.png": _png(root / "dog" / "b.png", 1),
        "cat/2.PNG": _png(root / "cat" / "2.PNG", 2),
        "cat/1.png": _png(root / "cat" / "1.png", 3),
        "cat/sub/3.png": _png(root / "cat" / "sub" / "3.png", 4),
    }
    (root / "README.txt").write_text("not an image")
    (root / "cat" / "notes.txt").write_text("not an image")
    _png(root / "top.png", 5)  # no class folder: skipped
    _png(root / ".cache" / "x.png", 6)  # hidden: skipped
    (root / "empty").mkdir()  # no images: not a class

    records = list(sources.image_folder(root))
    assert [record["id"] for record in records] == ["cat/1.png", "cat/2.PNG", "cat/sub/3.png", "dog/b.png"]
    assert [(record["label"], record["label_index"]) for record in records] == [
        ("cat", 0), ("cat", 0), ("cat", 0), ("dog", 1),
    ]  # fmt: skip

    store.append(sources.image_folder(root))
    for key, expected in pixels.items():
        np.testing.assert_array_equal(store[key]["image"].numpy(), _chw(expected))
    assert store["dog/b.png"]["label_index"] == 1


def test_image_folder_key_name_and_errors(tmp_path: Path) -> None:
    _png(tmp_path / "a" / "x.png", 0)
    assert next(sources.image_folder(tmp_path, key="path"))["path"] == "a/x.png"
    with pytest.raises(litstore.MissingFileError):
        sources.image_folder(tmp_path / "nope")
    with pytest.raises(litstore.InvalidArgumentError, match="a file"):
        sources.image_folder(tmp_path / "a" / "x.png")
    (tmp_path / "empty").mkdir()
    with pytest.raises(litstore.InvalidArgumentError, match="no image"):
        sources.image_folder(tmp_path / "empty")


# -- Parquet ---------------------------------------------------------------------------------


def test_parquet_rows_from_files_and_folders_in_batches(tmp_path: Path, store: litstore.Store) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    rows = [
        {"id": f"r{i:03d}", "n": i, "x": i / 4, "blob": bytes([i % 256]), "tags": ["a"] * (i % 3), "meta": {"k": i}}
        for i in range(250)
    ]
    pq.write_table(pa.Table.from_pylist(rows[:100]), folder / "part-0.parquet", row_group_size=30)
    pq.write_table(pa.Table.from_pylist(rows[100:]), folder / "part-1.parquet", row_group_size=30)

    assert list(sources.parquet(folder, batch_size=7)) == rows
    assert list(sources.parquet([folder / "part-1.parquet", folder / "part-0.parquet"])) == rows[100:] + rows[:100]
    assert list(sources.parquet(folder / "part-0.parquet")) == rows[:100]

    store.append(sources.parquet(folder, batch_size=64))
    assert len(store) == 250
    assert store["r123"] == rows[123]


def test_parquet_round_trips_an_export_with_tensors_and_timestamps(tmp_path: Path, make_store: MakeStore) -> None:
    first = make_store(key="id", key_type=int)
    first.append([{"id": i, "pixels": np.full((2, 3), i, dtype=np.uint8), "w": np.float32(i)} for i in range(5)])
    pq.write_table(first.to_arrow(), tmp_path / "export.parquet")
    stamps = pa.table({"id": [1, 2], "at": pa.array([0, None], type=pa.timestamp("us"))})
    pq.write_table(stamps, tmp_path / "stamps.parquet")

    second = make_store(key="id", key_type=int)
    second.append(sources.parquet(tmp_path / "export.parquet"))
    for i in range(5):
        record = second[i]
        assert record["pixels"].dtype == np.uint8
        np.testing.assert_array_equal(record["pixels"], np.full((2, 3), i, dtype=np.uint8))
        assert record["w"] == i
    stamped = list(sources.parquet(tmp_path / "stamps.parquet"))
    assert stamped[0]["at"] == np.datetime64(0, "us") and stamped[1]["at"] is None
    third = make_store(key="id", key_type=int)
    third.append(stamped)
    assert third[1]["at"] == np.datetime64(0, "us")


def test_parquet_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(litstore.MissingFileError):
        sources.parquet(tmp_path / "nope.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(litstore.InvalidArgumentError, match="Parquet"):
        sources.parquet(tmp_path / "bad.parquet")
    with pytest.raises(litstore.InvalidArgumentError, match="batch_size"):
        sources.parquet(tmp_path / "bad.parquet", batch_size=0)


# -- LitData folders ---------------------------------------------------------------------------


def test_litdata_dir_dict_items_are_records(tmp_path: Path, store: litstore.Store) -> None:
    writer = BinaryWriter(str(tmp_path / "opt"), chunk_bytes=256)
    items = [{"id": f"k{i}", "label": i, "vector": np.arange(i + 1, dtype=np.float32)} for i in range(20)]
    for index, item in enumerate(items):
        writer.add_item(index, item)
    writer.done()
    writer.merge()

    store.append(sources.litdata_dir(tmp_path / "opt"))
    assert len(store) == 20
    for item in items:
        record = store[item["id"]]
        assert record["label"] == item["label"]
        np.testing.assert_array_equal(np.asarray(record["vector"]), item["vector"])


def test_litdata_dir_other_items_are_wrapped(tmp_path: Path, make_store: MakeStore) -> None:
    writer = BinaryWriter(str(tmp_path / "opt"), chunk_bytes=64)
    payloads = [bytes([i]) * (i + 1) for i in range(10)]
    for index, payload in enumerate(payloads):
        writer.add_item(index, payload)
    writer.done()
    writer.merge()

    store = make_store(key="id", key_type=int)
    store.append(sources.litdata_dir(tmp_path / "opt"))
    assert [bytes(store[i]["item"]) for i in range(10)] == payloads


def test_litdata_dir_without_index(tmp_path: Path) -> None:
    with pytest.raises(litstore.MissingFileError, match=r"index\.json"):
        sources.litdata_dir(tmp_path)


# -- Hugging Face --------------------------------------------------------------------------------


def test_huggingface_rows_and_images(tmp_path: Path, store: litstore.Store) -> None:
    datasets = pytest.importorskip("datasets", reason="the datasets package is not installed")
    png = tmp_path / "a.png"
    pixels = _png(png, 9)
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["cat", "dog"]),
            "image": datasets.Image(),
            "scores": datasets.List(datasets.Value("float32")),
        }
    )
    data = {
        "id": ["a", "b"],
        "label": [1, 0],
        "image": [{"bytes": png.read_bytes(), "path": None}, {"bytes": None, "path": str(png)}],
        "scores": [[0.5, 1.5], []],
    }
    dataset = datasets.Dataset.from_dict(data, features=features)
    store.append(sources.huggingface(dataset, allow_outside=True))  # row "b" is only a path
    for key in ("a", "b"):
        np.testing.assert_array_equal(store[key]["image"].numpy(), _chw(pixels))
    assert store["a"]["label"] == 1 and store["a"]["scores"] == [0.5, 1.5]
    assert store["b"]["scores"] == []


def test_huggingface_accepts_any_iterable_of_dicts(store: litstore.Store) -> None:
    store.append(sources.huggingface([{"id": "x", "v": 1}, {"id": "y", "v": 2}]))
    assert store["y"]["v"] == 2
    with pytest.raises(litstore.InvalidRecordError, match="row 1 is a list"):
        list(sources.huggingface([{"id": "x"}, ["not", "a", "dict"]]))
    with pytest.raises(litstore.InvalidArgumentError):
        sources.huggingface(42)
