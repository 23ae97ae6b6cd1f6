"""litstore.ray: a Ray Dataset written as one version, a pinned version read back as a Ray Dataset.

One local Ray instance (2 CPUs) serves the whole module. Every write spreads its
blocks over several write tasks, each staging its own fragments; the driver commits
them once. The failure tests compare every file of the store before and after: a
rejected write must leave no version and no staged fragment behind.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
ray = pytest.importorskip("ray")

import litstore  # noqa: E402
import litstore.ray as litstore_ray  # noqa: E402
import litstore.read.version  # noqa: E402
from litstore.format import layout  # noqa: E402
from tests.conftest import tree_state  # noqa: E402
from tests.read.test_get_many import _swap_rows  # noqa: E402
from tests.txn.test_chunk_hashes import _assert_hashes_match_manifest, _chunk_files, _format3  # noqa: E402
from tests.txn.test_chunk_hashes import _record as _sidecar_record  # noqa: E402

pytestmark = pytest.mark.integration

SPLITS = litstore.HashSplit(train=0.75, val=0.25)
COUNT = 2000
BLOCKS = 8
CHUNK_BYTES = 16 * 1024  # several chunks per split per fragment


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    """A local Ray instance for the module: 2 CPUs, no dashboard, quiet progress output."""
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def _record(row: dict[str, Any], rev: int = 0) -> dict[str, Any]:
    i = int(row["id"])
    return {"id": f"k{i:05d}", "n": i, "rev": rev, "vector": np.full(4, i + rev, dtype=np.float32), "tag": f"t{i % 7}"}


def _expected(rev: int = 0, count: int = COUNT) -> dict[str, dict[str, Any]]:
    return {record["id"]: record for record in (_record({"id": i}, rev) for i in range(count))}


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """A record with arrays as (dtype, list), so records compare with ``==``."""
    return {
        name: (str(value.dtype), value.tolist()) if isinstance(value, np.ndarray) else value
        for name, value in record.items()
    }


def _by_key(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    keys = [row["id"] for row in rows]
    assert len(keys) == len(set(keys)), "a record was read twice"
    return {row["id"]: _plain(row) for row in rows}


def _dataset(rev: int = 0, count: int = COUNT) -> Any:
    return ray.data.range(count, override_num_blocks=BLOCKS).map(lambda row: _record(row, rev))


def _store(root: Path | str, **options: Any) -> litstore.Store:
    return litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, **options)


def _fragments(root: Path) -> set[str]:
    directory = root / "fragments"
    return set(os.listdir(directory)) if directory.exists() else set()


def test_write_commits_every_block_as_one_version(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    version = litstore_ray.write(_dataset(), store, message="from ray")
    assert version.number == 1
    assert [v.number for v in store.versions()] == [0, 1]
    assert store.version.message == "from ray"
    assert len(_fragments(tmp_path / "store")) >= 2, "the blocks were not staged by several tasks"
    reopened = litstore.open(tmp_path / "store")
    assert len(reopened) == COUNT
    for key, record in _expected().items():
        assert _plain(reopened[key]) == _plain(record)
    assert reopened.verify(expected_keys=list(_expected())).ok


def test_upsert_replaces_and_adds_in_one_version(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=1000), str(tmp_path / "store"))
    version = litstore_ray.write(_dataset(rev=1, count=1500), tmp_path / "store", mode="upsert")
    assert version.number == 2
    store.refresh()
    assert len(store) == 1500
    assert _plain(store["k00010"]) == _plain(_record({"id": 10}, rev=1))
    assert _plain(store["k01400"]) == _plain(_record({"id": 1400}, rev=1))
    assert store.verify().ok


def test_keys_duplicated_across_tasks_commit_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _store(root)
    litstore_ray.write(_dataset(count=200), store)
    before = tree_state(root)
    # Keys k00000..k00099 appear twice, in different blocks (each block stages alone).
    twice = ray.data.range(400, override_num_blocks=BLOCKS).map(lambda row: _record({"id": int(row["id"]) % 200 + 200}))
    with pytest.raises(litstore.DuplicateKeyError, match="staged more than once"):
        litstore_ray.write(twice, store)
    assert tree_state(root) == before
    assert [v.number for v in litstore.open(root).versions()] == [0, 1]


def test_a_bad_record_in_one_task_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _store(root)
    before = tree_state(root)

    def record(row: dict[str, Any]) -> dict[str, Any]:
        made = _record(row)
        if row["id"] == COUNT - 1:  # in the last block: the other tasks have staged theirs by then
            made["id"] = None
        return made

    with pytest.raises(litstore.KeyFieldError, match="key field 'id'"):
        litstore_ray.write(ray.data.range(COUNT, override_num_blocks=BLOCKS).map(record), store)
    assert tree_state(root) == before
    assert litstore.open(root).version.number == 0


def test_appending_existing_keys_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _store(root)
    litstore_ray.write(_dataset(count=300), store)
    before = tree_state(root)
    with pytest.raises(litstore.DuplicateKeyError):
        litstore_ray.write(_dataset(count=400), store)
    assert tree_state(root) == before


def test_an_empty_dataset_commits_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    assert litstore_ray.write(ray.data.range(0).map(_record), store).number == 0
    assert litstore.open(tmp_path / "store").version.number == 0


def test_read_gives_the_records_of_a_pinned_version_and_split(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=1200), store)
    store.tag("first")
    litstore_ray.write(_dataset(rev=1, count=1200), store, mode="upsert")
    store.delete([f"k{i:05d}" for i in range(100)])

    newest = litstore_ray.read(store)
    assert newest.count() == 1100
    expected_new = {key: _plain(r) for key, r in _expected(rev=1, count=1200).items() if int(key[1:]) >= 100}
    assert _by_key(newest.take_all()) == expected_new

    pinned = litstore_ray.read(str(tmp_path / "store"), "first")
    expected_old = {key: _plain(r) for key, r in _expected(count=1200).items()}
    assert _by_key(pinned.take_all()) == expected_old
    assert _by_key(litstore_ray.read(store, 1).take_all()) == expected_old

    val = _by_key(litstore_ray.read(store, 1, split="val").take_all())
    assert val == {key: r for key, r in expected_old.items() if SPLITS.assign(key, r) == "val"}
    assert 0 < len(val) < 1200

    narrow = litstore_ray.read(store, 1, columns=["id", "n"]).take_all()
    assert sorted(narrow, key=lambda row: row["id"]) == [{"id": key, "n": int(key[1:])} for key in sorted(expected_old)]


def test_read_takes_read_lance_s_arguments(tmp_path: Path) -> None:
    """``filter`` (a SQL condition on declared fields, run on the driver), ``override_num_blocks``,
    ``concurrency``, ``num_cpus`` and ``ray_remote_args``, as ``ray.data.read_lance`` takes them."""
    store = litstore.Store.create(
        tmp_path / "store", key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, fields={"n": "int"}
    )
    litstore_ray.write(_dataset(count=600), store)
    store.delete(["k00010"])
    chosen = litstore_ray.read(
        store,
        filter="n < 50 AND n % 2 = 0",
        override_num_blocks=3,
        concurrency=2,
        num_cpus=0.5,
        ray_remote_args={"num_gpus": 0, "resources": {}},
    )
    expected = {key: _plain(r) for key, r in _expected(count=600).items() if r["n"] < 50 and r["n"] % 2 == 0}
    del expected["k00010"]
    assert _by_key(chosen.take_all()) == expected
    assert litstore_ray.read(store, override_num_blocks=4).materialize().num_blocks() >= 4
    assert litstore_ray.read(store, filter="n > 10000").count() == 0
    with pytest.raises(litstore.QueryError):
        litstore_ray.read(store, filter="no_such_field = 1")
    with pytest.raises(litstore.InvalidArgumentError):
        litstore_ray.read(store, filter="  ")


def test_read_of_a_store_with_holes_in_most_chunks_gives_only_live_records(tmp_path: Path) -> None:
    """Format 4: superseded and deleted records stay in their chunks as dead rows; each read task takes its
    chunks' live rows from their deletion vectors, so none is read, and each task's row count is what it yields."""
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=800), store)
    store.upsert([_record({"id": i}, rev=2) for i in range(0, 800, 5)])
    store.delete([f"k{i:05d}" for i in range(1, 800, 7)])
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    holed = {ref.chunk for ref in store.head().reader.deletions.refs}
    assert len(holed & set(listed)) > len(listed) // 2  # holes in most of the first append's chunks

    expected = {key: _plain(record) for key, record in store.items()}
    dataset = litstore_ray.read(store)
    assert dataset.count() == len(store) == len(expected)
    assert _by_key(dataset.take_all()) == expected
    assert {row["rev"] for row in dataset.take_all() if int(row["id"][1:]) % 5 == 0} == {2}


def test_read_of_a_whole_version_is_planned_from_its_chunks_not_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver holds O(chunks): the chunk list and each chunk's live count; each task reads its chunks'
    hashes sidecars and deletion vectors. No manifest is composed on the driver (the tasks are other processes)."""
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=900), store)
    store.upsert([_record({"id": i}, rev=3) for i in range(0, 900, 4)])
    store.delete([f"k{i:05d}" for i in range(2, 900, 9)])
    expected = {key: _plain(record) for key, record in store.items()}

    def composed(self: object) -> None:
        raise AssertionError("the driver composed the manifest")

    monkeypatch.setattr(litstore.read.version.VersionReader, "manifest", composed)
    reopened = litstore.open(tmp_path / "store")
    assert _by_key(litstore_ray.read(reopened).take_all()) == expected
    val = _by_key(litstore_ray.read(reopened, split="val").take_all())
    assert val == {key: record for key, record in expected.items() if SPLITS.assign(key, record) == "val"}


def test_read_without_every_sidecar_checks_against_the_manifest(tmp_path: Path) -> None:
    """A chunk without its hashes sidecar (written before sidecars existed) sends the read through the manifest,
    whose content hashes still check every record."""
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=300), store)
    chunk = next(iter(store.chunks().values()))[0]
    (tmp_path / "store" / layout.chunk_hashes(chunk.filename)).unlink()
    expected = {key: _plain(record) for key, record in _expected(count=300).items()}
    assert _by_key(litstore_ray.read(litstore.open(tmp_path / "store")).take_all()) == expected


def test_read_refuses_a_damaged_sidecar(tmp_path: Path) -> None:
    """A sidecar whose hashes were changed is damaged (its checksum): the task that reads it fails, naming the
    chunk; no record is checked against hashes that are not the committed ones."""
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=300), store)
    chunk = next(iter(store.chunks().values()))[0]
    path = tmp_path / "store" / layout.chunk_hashes(chunk.filename)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match=chunk.filename):
        litstore_ray.read(litstore.open(tmp_path / "store")).take_all()


def _lose_a_chunk(root: Path, counted_too: bool = False) -> int:
    """Drop the first chunk of split ``train`` from the newest version's index (format 2-5: its ``index.json``),
    as damage would; ``counted_too``: also take its items off the commit record's count, as a stranger's store
    consistent with itself would. The items the chunk held."""
    store = litstore.open(root)
    record_path = root / layout.version_record(store.version.number)
    record = json.loads(record_path.read_bytes())
    index_path = root / record["indexes"]["train"]
    index = json.loads(index_path.read_bytes())
    lost = index["chunks"].pop(0)
    index_path.write_text(json.dumps(index))
    if counted_too:
        record["counts"]["train"] -= lost["chunk_size"]
        record_path.write_text(json.dumps(record))
    return int(lost["chunk_size"])


@pytest.mark.parametrize("format_version", [2, 3])
@pytest.mark.parametrize("filtered", [False, True])
def test_read_refuses_an_index_that_lost_a_chunk(tmp_path: Path, format_version: int, filtered: bool) -> None:
    """The chunks each split lists must hold the version's record count, whichever way the read is planned (the
    manifest, the key index, the chunk list): the records of a chunk the index lost are never silently left out
    (``dataset()`` refuses the same store)."""
    root = tmp_path / "store"
    _store(root, format_version=format_version, fields={"n": "int"}).append(list(_expected(count=300).values()))
    _lose_a_chunk(root)
    with pytest.raises(litstore.IntegrityError, match=r"hold \d+ live rows"):
        litstore_ray.read(root, filter="n >= 0" if filtered else None).take_all()


def test_read_refuses_a_key_index_naming_a_chunk_the_version_does_not_list(tmp_path: Path) -> None:
    """A stranger's store whose counts agree with its index, but whose key index (and manifest) still name a
    chunk the index does not list: a filtered read fails rather than leave the chunk's matches out."""
    root = tmp_path / "store"
    _store(root, format_version=3, fields={"n": "int"}).append(list(_expected(count=300).values()))
    lost = _lose_a_chunk(root, counted_too=True)
    assert len(litstore_ray.read(root).take_all()) == 300 - lost  # consistent with its own chunk list
    with pytest.raises(litstore.IntegrityError, match="does not list"):
        litstore_ray.read(root, filter="n >= 0").take_all()


def test_filtered_read_refuses_a_key_index_naming_a_dead_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Format 4+: an upsert leaves the key's old record in its chunk as a dead row. A key index that still names
    that row (hash and all) fails the read task, as streaming a subset does, rather than give the superseded record."""
    root = tmp_path / "store"
    store = _store(root, fields={"n": "int"})
    store.append(list(_expected(count=300).values()))
    store.upsert([_record({"id": 4}, rev=1)])
    old = store.at(1).manifest()
    old = old.filter(pc.equal(old.column("key"), "k00004")).select(["key", "content_hash", "chunk", "row"])
    monkeypatch.setattr(litstore.read.version.VersionReader, "located", lambda self, keys: old)  # the driver's
    with pytest.raises(litstore.IntegrityError, match="dead"):
        litstore_ray.read(litstore.open(root), filter="n = 4").take_all()


def test_read_task_checks_a_listed_item_count_against_the_sidecar_before_allocating(tmp_path: Path) -> None:
    """A commit record may list a chunk with as many items as its stated size allows (a quarter of it, up to
    2^30): a read task finds that count wrong from the chunk's sidecar, a file that is there, before it allocates
    anything by it."""
    root = tmp_path / "store"
    store = _store(root)
    litstore_ray.write(_dataset(count=300), store)
    record_path = root / layout.version_record(store.version.number)
    record = json.loads(record_path.read_bytes())
    split, chunks = next((split, chunks) for split, chunks in record["added_chunks"].items() if chunks)
    huge = 1 << 24  # rows by it: 128 MiB
    record["counts"][split] += huge - chunks[0]["items"]
    chunks[0].update(items=huge, size=4 * huge + 8)
    record_path.write_text(json.dumps(record))
    source = litstore_ray._VersionDatasource(root, None, None, None, None)
    (task,) = [task for task in source.get_read_tasks(16) if task.metadata.num_rows >= huge]
    tracemalloc.start()
    try:
        with pytest.raises(litstore.IntegrityError, match=chunks[0]["chunk"]):
            list(task())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak >> 20} MiB allocated by a count the chunk's files do not bear out"


@pytest.mark.parametrize("format_version", [2, 7])
def test_filtered_read_never_gives_a_key_another_key_s_record(tmp_path: Path, format_version: int) -> None:
    """The manifest row and key-index entry of k00210 point at k00250's record, hash and all (a stranger's store,
    consistent with itself): a filtered read refuses it, as a lookup does, rather than give k00250's record
    for k00210 (and k00250's twice)."""
    store = _store(tmp_path / "store", format_version=format_version, fields={"n": "int"})
    store.append(list(_expected(count=300).values()))
    _swap_rows(store, "k00210", "k00250")
    with pytest.raises(litstore.IntegrityError, match="'k00210'"):
        litstore_ray.read(litstore.open(tmp_path / "store"), filter="n IN (210, 250)").take_all()


def test_read_is_pinned_while_the_store_moves_on(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=500), store)
    dataset = litstore_ray.read(store)  # resolved to version 1 here
    store.upsert([_record({"id": i}, rev=5) for i in range(500)])
    assert {row["rev"] for row in dataset.take_all()} == {0}


def test_read_refuses_unknown_versions_and_splits(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=50), store)
    with pytest.raises(litstore.VersionNotFoundError):
        litstore_ray.read(store, 7)
    with pytest.raises(litstore.VersionNotFoundError):
        litstore_ray.read(store, "no-such-tag")
    with pytest.raises(litstore.SplitError):
        litstore_ray.read(store, split="test")


def test_read_refuses_a_damaged_chunk(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    litstore_ray.write(_dataset(count=50), store)
    chunk = next(iter(store.chunks().values()))[0]
    path = tmp_path / "store" / chunk.filename
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="do not match their committed content hash"):
        litstore_ray.read(store).take_all()  # Ray re-raises the task's error as a subclass of it


def test_a_transform_of_one_store_written_to_another(tmp_path: Path) -> None:
    source = _store(tmp_path / "source")
    litstore_ray.write(_dataset(count=1000), source)

    def double(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["n"] = batch["n"] * 2
        batch["vector"] = batch["vector"] * 2
        return batch

    target = _store(tmp_path / "target")
    version = litstore_ray.write(litstore_ray.read(source, 1).map_batches(double, batch_size=128), target)
    assert version.number == 1
    for key, record in _expected(count=1000).items():
        got = target[key]
        assert got["n"] == 2 * record["n"]
        np.testing.assert_array_equal(got["vector"], record["vector"] * 2)
        assert got["vector"].dtype == np.float32
    assert target.verify().ok


def test_write_and_read_on_s3(s3_endpoint: str, s3_bucket: str) -> None:
    # Ray's workers started before the test server set credentials in the environment: pass them explicitly.
    options = {
        "endpoint_url": s3_endpoint,
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region_name": os.environ["AWS_DEFAULT_REGION"],
    }
    url = f"s3://{s3_bucket}/stores/ray"
    _store(url, storage_options=options)
    assert litstore_ray.write(_dataset(count=400), url, storage_options=options).number == 1
    version = litstore_ray.write(_dataset(rev=2, count=200), url, mode="upsert", storage_options=options)
    assert version.number == 2
    store = litstore.open(url, storage_options=options)
    assert _plain(store["k00042"]) == _plain(_record({"id": 42}, rev=2))
    assert store.verify().ok
    expected = {key: _plain(r) for key, r in _expected(count=400).items()}
    assert _by_key(litstore_ray.read(url, 1, storage_options=options).take_all()) == expected
    with pytest.raises(litstore.DuplicateKeyError):
        litstore_ray.write(_dataset(count=10), url, storage_options=options)
    assert litstore.open(url, storage_options=options).version.number == 2


def test_ray_write_writes_sidecars(make_store: Callable[..., litstore.Store]) -> None:
    """A format-3 write from Ray tasks puts a hashes sidecar beside every chunk (``tests/txn/test_chunk_hashes.py``
    covers every other kind of write; this one lives here, where a Ray instance is running)."""
    store = _format3(make_store)
    data = ray.data.range(400, override_num_blocks=4).map(lambda row: _sidecar_record(int(row["id"])))
    litstore_ray.write(data, store)
    store = litstore.open(store.root)
    assert len(store.version.fragments) >= 2
    assert _assert_hashes_match_manifest(store) >= 4
    bins, sidecars = _chunk_files(store.root)
    assert bins == sidecars


def test_ray_keeps_media_bytes(make_store: Callable[..., litstore.Store]) -> None:
    """Records read from a store through Ray and written to another keep their media's stored bytes."""
    import io

    import litdata
    import torch
    from PIL import Image

    def png(seed: int) -> bytes:
        buffer = io.BytesIO()
        pixels = np.random.default_rng(seed).integers(0, 255, (8, 8, 3)).astype(np.uint8)
        Image.fromarray(pixels).save(buffer, format="PNG")
        return buffer.getvalue()

    source = make_store(key="id")
    source.append(
        [{"id": f"k{index}", "image": litdata.Image(bytes=png(index)), "label": index} for index in range(20)]
    )
    rows = litstore_ray.read(source).take_all()
    assert all(isinstance(row["image"], litstore.Media) for row in rows)
    target = make_store(key="id")
    litstore_ray.write(litstore_ray.read(source), target)
    hashes = [store.manifest().sort_by("key").column("content_hash") for store in (source, litstore.open(target.root))]
    assert hashes[0].equals(hashes[1])
    assert torch.equal(litstore.open(target.root)["k3"]["image"], source["k3"]["image"])


def test_a_write_is_quiet_unless_verbose(tmp_path: Path) -> None:
    import logging

    class Collected(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.levels: list[int] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.levels.append(record.levelno)

    store = _store(tmp_path / "quiet")
    logger = logging.getLogger("ray.data")  # where every Ray Data logger's records go
    level, collected = logger.level, Collected()
    logger.addHandler(collected)
    try:
        litstore_ray.write(_dataset(count=200), store)
        quiet = [found for found in collected.levels if found == logging.INFO]
        litstore_ray.write(_dataset(rev=1, count=200), store, mode="upsert", verbose=True)
        loud = [found for found in collected.levels if found == logging.INFO]
    finally:
        logger.removeHandler(collected)
    assert not quiet and loud
    assert logger.level == level and store.version.number == 2
