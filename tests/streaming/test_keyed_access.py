"""``dataset[key]`` and ``dataset.get_by_key(key)``: the item the dataset yields for a key, within its
version, split and subset (litdata's keyed access, answered by the version's key index)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import litstore
from tests.streaming.test_dataset import (
    APPENDED,
    CHUNK_BYTES,
    DELETED,
    LATEST,
    SPLITS,
    UPSERTED,
    History,
    _assert_same_record,
    _build,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> History:
    root = tmp_path_factory.mktemp("keyed") / "store"
    return _build(litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES))


def _labelled(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "seen": True}


@pytest.mark.parametrize("version", [APPENDED, UPSERTED, DELETED, LATEST])
def test_every_key_of_the_version_gives_its_record(built: History, version: int) -> None:
    dataset = litstore.open(built.root).dataset(version=version)
    for key, expected in built.expected[version].items():
        _assert_same_record(dataset[key], expected)
    gone = sorted(set(built.expected[UPSERTED]) - set(built.expected[DELETED]))
    later = sorted(set(built.expected[LATEST]) - set(built.expected[version]))
    for key in (gone if version >= DELETED else []) + later[:3] + ["nope"]:
        with pytest.raises(litstore.KeyNotFoundError, match=f"version {version}"):
            dataset[key]


def test_a_split_holds_only_its_own_keys(built: History) -> None:
    store = litstore.open(built.root)
    train = store.dataset(version=DELETED, split="train")
    keys = built.keys(DELETED, "train")
    others = built.keys(DELETED) - keys
    assert keys and others
    for key in keys:
        _assert_same_record(train.get_by_key(key), built.expected[DELETED][key])
    for key in others:
        with pytest.raises(litstore.KeyNotFoundError, match="split 'train'"):
            train[key]


def test_a_key_gives_what_streaming_yields_for_it_transformed(built: History) -> None:
    dataset = litstore.open(built.root).dataset(version=DELETED, transform=_labelled, shuffle=True)
    streamed = {record["id"]: record for record in dataset}
    assert all(record["seen"] for record in streamed.values())
    for key, record in streamed.items():
        _assert_same_record(dataset[key], record)


def test_a_subset_holds_only_its_keys(built: History) -> None:
    store = litstore.open(built.root)
    chosen = sorted(built.keys(DELETED))[::7]
    for subset in (
        store.dataset(version=DELETED, keys=chosen),
        store.dataset(version=DELETED, split="train", where="key LIKE '%3'"),
    ):
        members = {record["id"] for record in subset}
        for key in members:
            _assert_same_record(subset[key], built.expected[DELETED][key])
        outside = sorted(built.keys(DELETED) - members)[:5]
        for key in outside:
            with pytest.raises(litstore.KeyNotFoundError, match="in this subset"):
                subset[key]


def test_keyed_access_survives_pickling(built: History) -> None:
    dataset = litstore.open(built.root).dataset(version=UPSERTED, split="val")
    key = sorted(built.keys(UPSERTED, "val"))[0]
    dataset[key]  # the snapshot is opened and cached here; a pickled copy opens its own
    copy = pickle.loads(pickle.dumps(dataset))
    _assert_same_record(copy[key], built.expected[UPSERTED][key])


@pytest.mark.parametrize("format_version", [2, 3, 4])
def test_int_keys_go_through_get_by_key_and_ints_stay_positions(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    store = make_store(key="n", key_type=int, format_version=format_version, chunk_bytes=512)
    store.append([{"n": n, "x": np.full(8, n)} for n in range(100)])
    store.delete([3, 50])
    store.upsert([{"n": 7, "x": np.zeros(8)}])
    dataset = store.dataset()
    for n in (0, 7, 99):
        record = dataset.get_by_key(n)
        assert record["n"] == n and np.array_equal(record["x"], np.zeros(8) if n == 7 else np.full(8, n))
    assert dataset[0]["n"] == next(iter(dataset))["n"]  # an int is litdata's position, as in litdata
    for missing in (3, 50, 100, "7"):
        with pytest.raises(litstore.KeyNotFoundError):
            dataset.get_by_key(missing)
