"""Subsets: select(where) and dataset(where=/keys=) stream exactly the matching records of a version."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from litdata import StreamingDataLoader

import litstore
from litstore import HashSplit, KeyNotFoundError, LitstoreError, QueryError, StreamStateError

MakeStore = Callable[..., litstore.Store]


@pytest.fixture
def store(make_store: MakeStore) -> litstore.Store:
    made = make_store(key="id", splits=HashSplit(train=0.8, val=0.2), fields={"label": int}, chunk_bytes=1024)
    made.append([{"id": f"k{i:03d}", "label": i % 5, "text": "t" * 30} for i in range(150)])
    made.delete([f"k{i:03d}" for i in range(0, 150, 7)])  # copy-on-write: the version has its own chunks
    return made


def _matching(store: litstore.Store, labels: Iterable[int], split: str | None = None) -> set[str]:
    rows = store.sql("SELECT key, label, split FROM manifest").to_pylist()
    return {row["key"] for row in rows if row["label"] in set(labels) and split in (None, row["split"])}


def _keep_list(batch: list[Any]) -> list[Any]:
    return batch


def _ids(loader: Iterable[list[dict[str, Any]]]) -> list[str]:
    return [record["id"] for batch in loader for record in batch]


def test_select_returns_the_matching_keys(store: litstore.Store) -> None:
    keys = store.select("label IN (1, 2)")
    assert set(keys) == _matching(store, (1, 2)) and len(keys) == len(set(keys))
    assert store.select("label = 1 AND split = 'val'") == [k for k in keys if k in _matching(store, (1,), "val")]
    assert store.select("label = 1", version=1) == [k for k in store.at(1).keys() if int(k[1:]) % 5 == 1]


@pytest.mark.parametrize("where", ["label IN (1, 2", "no_such_column = 1", "label = 1) UNION SELECT 'x' --"])
def test_a_bad_where_raises_query_error(store: litstore.Store, where: str) -> None:
    with pytest.raises(QueryError):
        store.select(where)
    with pytest.raises(QueryError):
        store.dataset(where=where)


@pytest.mark.parametrize("split", [None, "train"])
def test_dataset_where_streams_exactly_the_matching_records_shuffled(store: litstore.Store, split: str | None) -> None:
    dataset = store.dataset(split=split, where="label IN (1, 2)", shuffle=True, seed=3)
    ids = [record["id"] for record in dataset]
    assert len(ids) == len(set(ids)) and set(ids) == _matching(store, (1, 2), split)
    assert all(store[record_id] == store.get(record_id) for record_id in ids[:3])


def test_dataset_keys_streams_exactly_those_records_with_two_workers(store: litstore.Store) -> None:
    wanted = store.keys()[5:40]
    dataset = store.dataset(keys=wanted, shuffle=True)
    ids = _ids(StreamingDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_keep_list))
    assert sorted(ids) == sorted(wanted)
    with pytest.raises(KeyNotFoundError, match="k000"):
        store.dataset(keys=[*wanted, "k000"])  # deleted in the head


@pytest.mark.parametrize(("num_workers", "shuffle"), [(0, False), (2, True)])
def test_mid_epoch_resume_on_a_subset(store: litstore.Store, num_workers: int, shuffle: bool) -> None:
    def loader() -> StreamingDataLoader:
        dataset = store.dataset(split="train", where="label <> 0", shuffle=shuffle, seed=5)
        return StreamingDataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=_keep_list)

    first_loader = loader()
    first = _ids(islice(first_loader, 5))
    state = first_loader.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = _ids(resumed)
    assert rest and len(first) + len(rest) == len(set(first + rest))
    assert set(first + rest) == _matching(store, (1, 2, 3, 4), "train")


def test_a_state_from_another_subset_or_the_whole_split_is_refused(store: litstore.Store) -> None:
    saved_on = StreamingDataLoader(store.dataset(split="train", where="label = 1"), batch_size=2, collate_fn=_keep_list)
    _ids(islice(saved_on, 2))
    state = saved_on.state_dict()
    for other in (store.dataset(split="train", where="label = 2"), store.dataset(split="train")):
        with pytest.raises(StreamStateError, match="subset"):
            StreamingDataLoader(other, batch_size=2, collate_fn=_keep_list).load_state_dict(state)
    same = StreamingDataLoader(
        store.dataset(split="train", keys=store.select("label = 1 AND split = 'train'")),
        batch_size=2,
        collate_fn=_keep_list,
    )
    same.load_state_dict(state)  # the same records of the same version: the same subset


def test_an_empty_subset_is_refused(store: litstore.Store) -> None:
    with pytest.raises(LitstoreError, match="no records"):
        store.dataset(where="label = 42")
    with pytest.raises(LitstoreError, match="no records"):
        store.dataset(keys=[])


def test_a_damaged_copy_is_caught_and_a_reused_view_is_the_same(store: litstore.Store, views: Path) -> None:
    dataset = store.dataset(where="label = 3")
    assert sorted(record["id"] for record in dataset) == sorted(_matching(store, (3,)))
    copies = sorted(views.rglob("chunks/*.bin"))
    assert copies, "the subset streams from its own copy in the view directory"
    again = store.dataset(where="label = 3")
    assert sorted(views.rglob("chunks/*.bin")) == copies
    data = bytearray(copies[0].read_bytes())
    data[-1] ^= 0xFF
    copies[0].write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError):
        list(again)


def test_a_key_subset_of_a_format_3_version_reads_the_key_index_not_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subset by keys costs what it holds: its keys are found in the key runs, the manifest is never composed."""
    from litstore.read.version import VersionReader

    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1024)
    store.append([{"id": f"k{i:03d}", "v": i} for i in range(120)])
    store.upsert([{"id": f"k{i:03d}", "v": -i} for i in range(0, 120, 5)])
    wanted = [f"k{i:03d}" for i in (3, 10, 47, 99, 118)]
    expected = {key: store[key] for key in wanted}
    in_train = [key for key in wanted if key in set(litstore.open(tmp_path / "s").select("split = 'train'"))]

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the manifest was composed")

    fresh = litstore.open(tmp_path / "s")
    monkeypatch.setattr(VersionReader, "manifest", refuse)
    streamed = {record["id"]: record for record in fresh.dataset(keys=wanted, views_dir=tmp_path / "views")}
    assert streamed == expected
    train = [record["id"] for record in fresh.dataset(split="train", keys=in_train, views_dir=tmp_path / "views")]
    assert sorted(train) == sorted(in_train)
    with pytest.raises(litstore.KeyNotFoundError, match="nope"):
        fresh.dataset(keys=[*wanted, "nope"], views_dir=tmp_path / "views")
