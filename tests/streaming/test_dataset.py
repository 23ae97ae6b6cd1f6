"""Streaming pinned versions through litdata: ``store.dataset(...)`` and ``StreamingDataLoader``.

The tests read one small store (4 KiB chunks, so each split spans several chunks; built
once per module, reopened by each test; a test that writes builds its own) with this
history, kept alongside as a plain-dict model of what each version holds:

    version 1  append  k000..k239
    version 2  upsert  every 6th of k000..k239 replaced (rev 1), k240..k299 added
    version 3  delete  every 5th of k000..k299 (from k002), some of them replaced ones
    version 4  append  k300..k339

Each test checks what litdata actually yields (every key of the version exactly once,
each record equal to ``store.at(v)[key]`` and to the model) and that streaming reads the
committed chunks in place: no chunk data is copied and the store root is never written.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice, zip_longest
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from litdata import StreamingDataLoader

import litstore
from litstore import StreamStateError
from litstore.streaming import VersionDataset
from tests.conftest import tree_state

SPLITS = litstore.HashSplit(train=0.8, val=0.1, test=0.1)
CHUNK_BYTES = 4096
DIM = 32  # float32 values per record: ~170 bytes a record, ~20 records a chunk

APPENDED, UPSERTED, DELETED, LATEST = 1, 2, 3, 4
VERSIONS = (APPENDED, UPSERTED, DELETED, LATEST)

Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "label": i % 5, "rev": rev, "x": np.arange(DIM, dtype=np.float32) + i + 1000 * rev}


@dataclass
class History:
    """A store that went through append, upsert, delete, append, and what each version holds."""

    store: litstore.Store
    expected: dict[int, dict[str, Record]]  # version -> key -> record

    @property
    def root(self) -> Path:
        return Path(self.store.root)

    def keys(self, version: int, split: str | None = None) -> set[str]:
        return {key for key, record in self.expected[version].items() if split in (None, SPLITS.assign(key, record))}


def _build(store: litstore.Store) -> History:
    model: dict[str, Record] = {}
    expected: dict[int, dict[str, Record]] = {}

    def commit(version: litstore.Version, number: int) -> None:
        assert version.number == number
        expected[number] = dict(model)

    appended = [_record(i) for i in range(240)]
    model.update((r["id"], r) for r in appended)
    commit(store.append(appended), APPENDED)

    upserted = [_record(i, rev=1) for i in range(0, 240, 6)] + [_record(i) for i in range(240, 300)]
    model.update((r["id"], r) for r in upserted)
    commit(store.upsert(upserted), UPSERTED)

    deleted = [f"k{i:03d}" for i in range(2, 300, 5)]
    assert any(int(key[1:]) % 6 == 0 for key in deleted), "some deleted records should be replaced ones"
    for key in deleted:
        del model[key]
    commit(store.delete(deleted), DELETED)

    appended = [_record(i) for i in range(300, 340)]
    model.update((r["id"], r) for r in appended)
    commit(store.append(appended), LATEST)

    chunks = store.at(DELETED).chunks()
    assert len(chunks["train"]) >= 4, "the train split should span several chunks"
    return History(store, expected)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> History:
    """The store, built once for the module; tests only read it."""
    root = tmp_path_factory.mktemp("streaming") / "store"
    return _build(litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES))


@pytest.fixture
def history(built: History) -> History:
    """The module's store, opened afresh for this test (its root outside the test's tmp_path)."""
    return History(litstore.open(built.root), built.expected)


@pytest.fixture
def own_history(make_store: Callable[..., litstore.Store]) -> History:
    """A store of this test's own, for tests that write to it."""
    return _build(make_store(key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES))


# -- helpers ---------------------------------------------------------------------


def keep_list(batch: list[Record]) -> list[Record]:
    """collate_fn: the batch as the list of records (module level, so workers can pickle it)."""
    return batch


def _flatten(batches: Iterable[list[Record]]) -> list[Record]:
    return [record for batch in batches for record in batch]


def _assert_same_record(actual: Record, expected: Record) -> None:
    assert sorted(actual) == sorted(expected), (actual, expected)
    for field, value in expected.items():
        if isinstance(value, np.ndarray):
            assert isinstance(actual[field], np.ndarray), (field, actual[field])
            assert actual[field].dtype == value.dtype and actual[field].shape == value.shape
            assert np.array_equal(actual[field], value), (actual["id"], field)
        else:
            assert actual[field] == value, (actual["id"], field, actual[field], value)


def _assert_epoch(history: History, version: int, records: list[Record], split: str | None = None) -> None:
    """``records`` hold every key of ``version`` (and ``split``) exactly once, with its content."""
    counts = Counter(record["id"] for record in records)
    repeated = {key: n for key, n in counts.items() if n > 1}
    assert not repeated, f"keys yielded more than once: {sorted(repeated)[:10]}"
    expected_keys = history.keys(version, split)
    assert set(counts) == expected_keys, (
        f"missing {sorted(expected_keys - set(counts))[:10]}, unexpected {sorted(set(counts) - expected_keys)[:10]}"
    )
    snapshot = history.store.at(version)
    for record in records:
        _assert_same_record(record, snapshot[record["id"]])
        _assert_same_record(record, history.expected[version][record["id"]])


def _regular_bin_files(directory: str | Path) -> list[str]:
    """Regular (non-symlink) ``.bin`` files under ``directory``, without following symlinks."""
    found = []
    for folder, _, files in os.walk(directory, followlinks=False):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".bin") and not os.path.islink(path):
                found.append(path)
    return found


def _loader(dataset: VersionDataset, batch_size: int = 4, num_workers: int = 0) -> StreamingDataLoader:
    return StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=keep_list)


# -- one epoch yields exactly the version ----------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_one_epoch_yields_exactly_the_version(history: History, version: int) -> None:
    dataset = history.store.dataset(version=version)
    assert isinstance(dataset, VersionDataset)
    assert len(dataset) == len(history.expected[version])
    _assert_epoch(history, version, list(dataset))


def test_default_version_is_the_latest(history: History) -> None:
    _assert_epoch(history, LATEST, list(history.store.dataset()))
    # A snapshot's dataset defaults to the snapshot's version, not the store's latest.
    _assert_epoch(history, UPSERTED, list(history.store.at(UPSERTED).dataset()))


@pytest.mark.parametrize("version", (APPENDED, UPSERTED, DELETED))
@pytest.mark.parametrize("split", ("train", "val", "test"))
def test_one_epoch_of_a_split_yields_exactly_that_split(history: History, version: int, split: str) -> None:
    assert history.keys(version, split), "every split should hold records"
    dataset = history.store.dataset(version=version, split=split)
    assert len(dataset) == len(history.keys(version, split))
    _assert_epoch(history, version, list(dataset), split)


@pytest.mark.parametrize("version", (UPSERTED, DELETED))
def test_splits_partition_the_version(history: History, version: int) -> None:
    seen = {split: {r["id"] for r in history.store.dataset(version=version, split=split)} for split in SPLITS.names}
    assert set().union(*seen.values()) == history.keys(version)
    assert sum(len(keys) for keys in seen.values()) == len(history.keys(version))


@pytest.mark.parametrize(("version", "split"), [(UPSERTED, None), (DELETED, "train"), (LATEST, "val")])
def test_shuffled_loader_with_two_workers_yields_each_record_once(
    history: History, version: int, split: str | None
) -> None:
    dataset = history.store.dataset(version=version, split=split, shuffle=True, seed=7)
    assert dataset.shuffle
    _assert_epoch(history, version, _flatten(_loader(dataset, batch_size=8, num_workers=2)), split)


def test_shuffle_reaches_litdata(history: History) -> None:
    """``shuffle=True`` changes the order (so the keyword really reaches StreamingDataset), not the set."""
    plain = [r["id"] for r in history.store.dataset(version=DELETED)]
    shuffled = [r["id"] for r in history.store.dataset(version=DELETED, shuffle=True, seed=3)]
    assert plain != shuffled
    assert sorted(plain) == sorted(shuffled)


# -- no copy of chunk data --------------------------------------------------------


def test_streaming_reads_chunks_in_place(history: History, views: Path, tmp_path: Path) -> None:
    before = tree_state(history.root)
    store_bins = sorted(_regular_bin_files(history.root))
    assert len(store_bins) >= 4

    datasets = [
        history.store.dataset(version=DELETED),
        history.store.dataset(version=APPENDED, split="train", shuffle=True),
    ]
    _assert_epoch(history, DELETED, list(datasets[0]))
    _assert_epoch(history, APPENDED, _flatten(_loader(datasets[1], batch_size=8, num_workers=2)), "train")

    for dataset in datasets:
        view = Path(dataset.input_dir.path)
        assert view.is_relative_to(views), "view directories live under $LITSTORE_VIEWS"
        assert not view.resolve().is_relative_to(history.root.resolve()), "the view is outside the store root"
        assert _regular_bin_files(view) == [], "chunk data was copied into the view directory"
        link = view / "fragments"
        assert link.is_symlink()
        assert link.resolve() == (history.root / "fragments").resolve()
    assert datasets[0].input_dir.path != datasets[1].input_dir.path

    # No chunk copy anywhere under this test's directory (which holds the views; the store is elsewhere).
    assert not history.root.resolve().is_relative_to(tmp_path.resolve())
    assert _regular_bin_files(tmp_path) == []
    assert sorted(_regular_bin_files(history.root)) == store_bins
    assert tree_state(history.root) == before, "streaming wrote to the store root"


# -- mid-epoch resume ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_workers", "shuffle", "split"),
    [(0, False, None), (0, True, "train"), (2, False, None), (2, True, "train")],
)
def test_mid_epoch_resume_yields_each_record_once(
    history: History, num_workers: int, shuffle: bool, split: str | None
) -> None:
    version, taken = DELETED, 6

    def loader() -> StreamingDataLoader:
        dataset = history.store.dataset(version=version, split=split, shuffle=shuffle, seed=11)
        return _loader(dataset, batch_size=4, num_workers=num_workers)

    first_loader = loader()
    first = _flatten(islice(first_loader, taken))
    assert len(first) == 4 * taken
    state = first_loader.state_dict()
    assert state["dataset"]["litstore"]["version"] == version
    assert state["dataset"]["litstore"]["split"] == split

    resumed = loader()
    resumed.load_state_dict(state)
    rest = _flatten(resumed)
    assert rest, "the resumed loader yielded nothing"
    assert len(first) + len(rest) == len(history.keys(version, split))
    _assert_epoch(history, version, first + rest, split)

    if num_workers == 0:
        # Without workers the order is deterministic: the halves are the uninterrupted epoch.
        full = [r["id"] for r in _flatten(loader())]
        assert [r["id"] for r in first + rest] == full


def test_state_from_another_version_is_refused(history: History) -> None:
    saved_on = _loader(history.store.dataset(version=APPENDED, split="train"))
    _flatten(islice(saved_on, 3))
    state = saved_on.state_dict()

    other = _loader(history.store.dataset(version=DELETED, split="train"))
    with pytest.raises(StreamStateError) as caught:
        other.load_state_dict(state)
    assert isinstance(caught.value, litstore.LitstoreError)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert re.search(rf"\bversion {APPENDED}\b", message), message
    assert re.search(rf"\bversion {DELETED}\b", message), message

    # The refused loader still streams its own version from the start.
    _assert_epoch(history, DELETED, _flatten(other), "train")


def test_state_from_another_split_is_refused(history: History) -> None:
    saved_on = _loader(history.store.dataset(version=DELETED, split="train"))
    _flatten(islice(saved_on, 2))
    other = _loader(history.store.dataset(version=DELETED, split="val"))
    with pytest.raises(StreamStateError, match="val"):
        other.load_state_dict(saved_on.state_dict())


# -- DDP ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ddp_rank(rank: int, world_size: int, port: int, root: str, version: int, views: str, out: str) -> None:
    """One DDP rank: stream ``version``'s train split and write what it saw to ``out/rank<r>.json``."""
    os.environ["LITSTORE_VIEWS"] = views
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        dataset = litstore.open(root).dataset(version=version, split="train", drop_last=False)
        records = [{"id": r["id"], "label": r["label"], "rev": r["rev"], "x": r["x"].tolist()} for r in dataset]
        seen = {
            "world_size": dataset.distributed_env.world_size,
            "rank": dataset.distributed_env.global_rank,
            "records": records,
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.integration
def test_ddp_ranks_share_the_split_without_overlap(history: History, views: Path, tmp_path: Path) -> None:
    version, world_size = DELETED, 2
    before = tree_state(history.root)
    out = tmp_path / "ranks"
    out.mkdir()
    args = (world_size, _free_port(), str(history.root), version, str(views), str(out))
    context = mp.start_processes(_ddp_rank, args=args, nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + 120
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the DDP ranks did not finish within 120 s")

    shares = []
    for rank in range(world_size):
        seen = json.loads((out / f"rank{rank}.json").read_text())
        assert (seen["world_size"], seen["rank"]) == (world_size, rank), "litdata did not detect the DDP env"
        keys = [r["id"] for r in seen["records"]]
        assert keys, f"rank {rank} got no records"
        assert len(keys) == len(set(keys)), f"rank {rank} saw a record twice"
        shares.append(set(keys))
        for record in seen["records"]:
            expected = history.expected[version][record["id"]]
            assert record["label"] == expected["label"] and record["rev"] == expected["rev"]
            assert record["x"] == expected["x"].tolist()
    assert shares[0].isdisjoint(shares[1]), f"ranks overlap on {sorted(shares[0] & shares[1])[:10]}"
    assert shares[0] | shares[1] == history.keys(version, "train")
    assert tree_state(history.root) == before


# -- two pinned versions in one process -----------------------------------------------


def test_two_pinned_versions_stream_side_by_side(history: History) -> None:
    before = tree_state(history.root)
    old = history.store.dataset(version=APPENDED)
    _assert_epoch(history, APPENDED, list(old))
    new = history.store.dataset(version=DELETED)
    _assert_epoch(history, DELETED, list(new))
    assert old.input_dir.path != new.input_dir.path
    # The versions differ in content, not only in keys: a mix-up would show.
    replaced = [key for key in history.keys(APPENDED) & history.keys(DELETED) if int(key[1:]) % 6 == 0]
    assert replaced

    from_old: list[Record] = []
    from_new: list[Record] = []
    for a, b in zip_longest(iter(old), iter(new)):
        if a is not None:
            from_old.append(a)
        if b is not None:
            from_new.append(b)
    _assert_epoch(history, APPENDED, from_old)
    _assert_epoch(history, DELETED, from_new)

    # A fresh dataset on either version does not disturb the other's view.
    _assert_epoch(history, APPENDED, list(history.store.dataset(version=APPENDED)))
    _assert_epoch(history, DELETED, list(new))
    _assert_epoch(history, APPENDED, list(old))
    for dataset in (old, new):
        assert (Path(dataset.input_dir.path) / "index.json").is_file()
    assert tree_state(history.root) == before


def test_two_pinned_versions_interleave_in_loaders(history: History) -> None:
    old = _loader(history.store.dataset(version=APPENDED, split="train", shuffle=True), batch_size=8)
    new = _loader(history.store.dataset(version=DELETED, split="train", shuffle=True), batch_size=8)
    from_old: list[Record] = []
    from_new: list[Record] = []
    for a, b in zip_longest(old, new):
        from_old.extend(a or [])
        from_new.extend(b or [])
    _assert_epoch(history, APPENDED, from_old, "train")
    _assert_epoch(history, DELETED, from_new, "train")


# -- errors ---------------------------------------------------------------------------


def test_unknown_split_raises_split_error(history: History, views: Path) -> None:
    with pytest.raises(litstore.SplitError, match="nope"):
        history.store.dataset(split="nope")
    with pytest.raises(litstore.SplitError, match="nope"):
        history.store.dataset(version=APPENDED, split="nope")
    assert not list(views.rglob("nope")), "a view was made for an unknown split"


def test_empty_split_raises(own_history: History) -> None:
    history = own_history
    store = history.store
    val = sorted(history.keys(LATEST, "val"))
    emptied = store.delete(val)
    assert emptied.counts["val"] == 0
    with pytest.raises(litstore.LitstoreError, match="val") as caught:
        store.dataset(split="val")
    assert not isinstance(caught.value, litstore.SplitError), "val is a known split; it is only empty"
    # The other splits of that version, and val in older versions, still stream.
    assert {r["id"] for r in store.dataset(split="train")} == history.keys(LATEST, "train")
    _assert_epoch(history, LATEST, list(store.dataset(version=LATEST, split="val")), "val")


def test_empty_version_raises(history: History) -> None:
    with pytest.raises(litstore.LitstoreError):
        history.store.dataset(version=0)
    with pytest.raises(litstore.LitstoreError):
        history.store.dataset(version=0, split="train")
