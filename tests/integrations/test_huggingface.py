"""Hugging Face both ways: ``sources.huggingface`` in, ``to_huggingface`` out, with features, splits and image bytes.

Every dataset is built in memory (``datasets.Dataset.from_dict``): no hub access.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import litdata
import numpy as np
import pytest
from PIL import Image

import litstore
from litstore import sources
from tests.conftest import tree_state

datasets = pytest.importorskip("datasets", reason="the datasets package is not installed")

MakeStore = Callable[..., litstore.Store]

FEATURES = datasets.Features(
    {
        "label": datasets.ClassLabel(names=["cat", "dog", "fox"]),
        "image": datasets.Image(),
        "grid": datasets.Array2D(shape=(2, 3), dtype="float32"),
        "scores": datasets.List(datasets.Value("float32")),
        "caption": datasets.Value("string"),
        "count": datasets.Value("int32"),
    }
)


def _png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _split(seed: int, rows: int, features: Any = FEATURES) -> Any:
    return datasets.Dataset.from_dict(
        {
            "label": [(seed + i) % 3 for i in range(rows)],
            "image": [{"bytes": _png(seed + i), "path": None} for i in range(rows)],
            "grid": [np.full((2, 3), seed + i, dtype=np.float32) for i in range(rows)],
            "scores": [[0.25 * i] * (i % 3) for i in range(rows)],
            "caption": [f"caption {seed} {i}" for i in range(rows)],
            "count": [seed * 10 + i for i in range(rows)],
        },
        features=features,
    )


def _image_bytes(dataset: Any, column: str = "image") -> list[bytes]:
    return [value["bytes"] for value in dataset.cast_column(column, datasets.Image(decode=False))[column]]


def test_a_dataset_dict_round_trips_with_features_rows_and_image_bytes(make_store: MakeStore) -> None:
    original = datasets.DatasetDict({"train": _split(0, 7), "validation": _split(100, 4), "test": _split(200, 3)})
    store = make_store(key="id", key_type="int", splits="split")  # the default names include "validation"
    store.append(sources.huggingface(original, key="id"))

    assert store.versions()[-1].metadata["huggingface"]["added"] == ["id", "split"]
    assert {split: store.sql(f"SELECT count(*) FROM manifest WHERE split = '{split}'").column(0)[0].as_py()
            for split in original} == {"train": 7, "validation": 4, "test": 3}  # fmt: skip
    back = store.to_huggingface()
    assert isinstance(back, datasets.DatasetDict) and list(back) == ["train", "validation", "test"]
    for split, dataset in original.items():
        assert back[split].features == dataset.features
        assert back[split].features["label"].names == ["cat", "dog", "fox"]
        assert back[split].to_dict() == dataset.to_dict()
        assert _image_bytes(back[split]) == _image_bytes(dataset)  # the PNG files themselves, never re-encoded
    one = store.to_huggingface("validation")
    assert isinstance(one, datasets.Dataset) and one.to_dict() == original["validation"].to_dict()


def test_features_survive_later_writes_and_a_version_keeps_its_own(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type="int", splits={"train": 1.0})
    first = store.append(sources.huggingface(_split(0, 4), key="id"))
    store.append([{"id": 10, "label": 2, "caption": "added by hand", "count": 5}])  # no features recorded
    relabelled = datasets.Features({**FEATURES, "label": datasets.ClassLabel(names=["a", "b", "c"])})
    store.upsert(sources.huggingface(_split(50, 4, relabelled), key="id"))  # new content: a new commit

    head = store.to_huggingface("train")
    assert head.features["label"].names == ["a", "b", "c"]
    assert head.num_rows == 5 and head[4]["caption"] == "added by hand" and head[4]["image"] is None
    assert store.at(first).to_huggingface("train").features["label"].names == ["cat", "dog", "fox"]


def test_values_that_no_longer_fit_their_feature_name_the_column_and_features_overrides(
    make_store: MakeStore,
) -> None:
    store = make_store(key="id", key_type="int", splits={"train": 1.0})
    store.append(sources.huggingface(_split(0, 3), key="id"))
    store.upsert([{"id": i, "label": name} for i, name in enumerate(["owl", "cat", "dog"])])  # names, not indexes
    with pytest.raises(litstore.InvalidArgumentError, match=r"column 'label'.*features="):
        store.to_huggingface()  # "owl" is no class of the recorded ClassLabel
    back = store.to_huggingface("train", features={"label": datasets.Value("string")})
    assert back["label"] == ["owl", "cat", "dog"]  # key order: 0, 1, 2


def test_a_store_not_from_hugging_face_gets_inferred_features(make_store: MakeStore) -> None:
    store = make_store(key="id", splits={"train": 0.5, "test": 0.5})
    png = _png(3)
    store.append(
        {
            "id": f"k{i}",
            "photo": litdata.Image(bytes=png),
            "mask": np.full((2, 2), i, dtype=np.int16),
            "vector": np.arange(3, dtype=np.float64),
            "ragged": np.arange(i + 1),
            "n": i,
        }
        for i in range(8)
    )
    back = store.to_huggingface()
    features = back["train"].features
    assert features["photo"] == datasets.Image()
    assert features["mask"] == datasets.Array2D(shape=(2, 2), dtype="int16")
    assert features["vector"] == datasets.List(datasets.Value("float64"), length=3)
    assert features["ragged"] == datasets.List(datasets.Value("int64"))
    rows = sorted(back["train"].to_list() + back["test"].to_list(), key=lambda row: row["n"])
    assert [row["id"] for row in rows] == [f"k{i}" for i in range(8)] and rows[5]["mask"] == [[5, 5], [5, 5]]
    assert _image_bytes(back["train"], "photo")[0] == png
    with pytest.raises(litstore.InvalidArgumentError, match="'validation' is not a split"):
        store.to_huggingface("validation")


def test_non_image_media_is_refused_with_what_to_use(make_store: MakeStore) -> None:
    store = make_store(key="id")
    store.append([{"id": "a", "notes": litstore.Media("text", b"plain words")}])
    with pytest.raises(litstore.InvalidArgumentError, match=r"'notes'.*to_arrow"):
        store.to_huggingface()


def test_appending_a_dataset_itself_points_to_the_source(make_store: MakeStore) -> None:
    store = make_store(key="id", key_type="int")
    before = tree_state(Path(store.root))
    for given in (_split(0, 2), datasets.DatasetDict({"train": _split(0, 2)})):
        with pytest.raises(litstore.InvalidArgumentError, match=r"sources\.huggingface"):
            store.append(given)
    assert tree_state(Path(store.root)) == before
    decoded_rows = [dict(row, id=i) for i, row in enumerate(_split(0, 2))]  # images as PIL
    with pytest.raises(litstore.SchemaError, match=r"sources\.huggingface"):
        store.append(decoded_rows)


def test_dataset_dict_split_field_clash_and_different_features_are_refused() -> None:
    clash = datasets.Dataset.from_dict({"split": ["x"], "v": [1]})
    with pytest.raises(litstore.InvalidArgumentError, match="column 'split' already"):
        sources.huggingface(datasets.DatasetDict({"train": clash}))
    renamed = list(sources.huggingface(datasets.DatasetDict({"train": clash}), split_field="part"))
    assert renamed == [{"split": "x", "v": 1, "part": "train"}]
    other = datasets.Dataset.from_dict({"v": ["text"]})
    with pytest.raises(litstore.InvalidArgumentError, match="different features"):
        sources.huggingface(datasets.DatasetDict({"train": clash, "test": other}))


def test_a_field_split_takes_validation_by_default(make_store: MakeStore) -> None:
    store = make_store(key="id", splits="split")
    store.append([{"id": "a", "split": "validation"}, {"id": "b", "split": "val"}, {"id": "c", "split": "train"}])
    assert sorted(store.splits) == ["test", "train", "val", "validation"]
    assert store.dataset(split="validation").__len__() == 1
