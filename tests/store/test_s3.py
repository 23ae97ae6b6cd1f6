"""litstore on S3: every operation against a real S3 endpoint (moto's server on loopback).

The store talks to the server over HTTP exactly as it would to S3 (see
``tests/s3_server.py``). Each test gets its own bucket. Besides checking that every
operation works remotely, the tests check what matters most about a remote store:

- lookups read only the bytes they need (one ranged GET of the record once the
  chunk's header is known), never whole chunks;
- a pinned version streams through ``litdata.StreamingDataLoader`` with worker
  processes and yields exactly its records;
- a reader in another process always sees complete versions while a writer commits;
- two writer processes committing at once both land (the conditional PUT works).
"""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from litdata import StreamingDataLoader

import litstore
from litstore.format import layout
from tests.store import _s3_workers as workers

#: Against moto's S3 server over HTTP: seconds a test, so not in the fast loop.
pytestmark = pytest.mark.integration

SPLITS = litstore.HashSplit(train=0.75, val=0.25)
CHUNK_BYTES = 1024  # ~10 records a chunk: every split of every version spans several chunks

Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:04d}", "n": i, "rev": rev, "blob": bytes([i % 251]) * 40, "tags": ["a", str(i)]}


def _options(endpoint: str) -> dict[str, Any]:
    return {"endpoint_url": endpoint}


def _url(bucket: str, prefix: str = "stores/one") -> str:
    return f"s3://{bucket}/{prefix}"


def _objects(endpoint: str, bucket: str) -> dict[str, int]:
    """Every object in ``bucket``: key -> size."""
    client = boto3.client("s3", endpoint_url=endpoint)
    found: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for entry in page.get("Contents", []):
            found[entry["Key"]] = int(entry["Size"])
    return found


@dataclass
class History:
    """A store on S3 that went through append, upsert, delete; what each version holds."""

    store: litstore.Store
    url: str
    endpoint: str
    bucket: str
    expected: dict[int, dict[str, Record]]

    @property
    def options(self) -> dict[str, Any]:
        return _options(self.endpoint)


@pytest.fixture
def views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Streaming views (and litdata's chunk cache) under this test's temporary directory."""
    directory = tmp_path / "views"
    monkeypatch.setenv("LITSTORE_VIEWS", str(directory))
    return directory


@pytest.fixture
def history(s3_endpoint: str, s3_bucket: str) -> History:
    """version 1: append k0000..k0059; 2: upsert 6 changed + 10 new; 3: delete 8 (some replaced)."""
    url = _url(s3_bucket)
    store = litstore.Store.create(
        url, key="id", splits=SPLITS, chunk_bytes=CHUNK_BYTES, storage_options=_options(s3_endpoint)
    )
    expected: dict[int, dict[str, Record]] = {0: {}}
    first = [_record(i) for i in range(60)]
    assert store.append(first).number == 1
    expected[1] = {record["id"]: record for record in first}
    changes = [_record(i, rev=1) for i in range(0, 60, 10)] + [_record(i) for i in range(60, 70)]
    assert store.upsert(changes).number == 2
    expected[2] = {**expected[1], **{record["id"]: record for record in changes}}
    gone = [f"k{i:04d}" for i in range(0, 70, 9)]
    assert store.delete(gone).number == 3
    expected[3] = {key: record for key, record in expected[2].items() if key not in gone}
    return History(store, url, s3_endpoint, s3_bucket, expected)


def _reads_exactly(view: litstore.Snapshot, expected: dict[str, Record]) -> None:
    assert len(view) == len(expected)
    assert set(view.keys()) == set(expected)
    assert dict(view.items()) == expected
    keys = sorted(expected)[::3]
    assert view.get_many(keys) == [expected[key] for key in keys]
    for key in keys[::3]:
        assert view[key] == expected[key]
        assert key in view


def test_store_lives_in_the_bucket(history: History) -> None:
    objects = _objects(history.endpoint, history.bucket)
    assert "stores/one/litstore.json" in objects
    assert {f"stores/one/{layout.version_record(n)}" for n in range(4)} <= set(objects)
    chunks = {name for name in objects if name.startswith("stores/one/fragments/") and name.endswith(".bin")}
    listed = {f"stores/one/{chunk.filename}" for split in history.store.chunks().values() for chunk in split}
    assert listed <= chunks
    assert sum(len(split) for split in history.store.chunks().values()) >= 4  # several chunks per version


def test_lookups_and_versions_read_back_on_s3(history: History) -> None:
    store = history.store
    _reads_exactly(store, history.expected[3])
    with pytest.raises(litstore.KeyNotFoundError):
        store["k0000"]  # deleted in version 3
    assert store.get("k0000") is None
    assert store.get_many(["k0001", "nope"], default=None) == [history.expected[3]["k0001"], None]
    with pytest.raises(litstore.KeyNotFoundError, match="nope"):
        store.get_many(["k0001", "nope"])

    reopened = litstore.open(history.url, storage_options=history.options)
    assert reopened.version.number == 3
    assert reopened.version.fingerprint == store.version.fingerprint
    for number in (0, 1, 2, 3):
        _reads_exactly(reopened.at(number), history.expected[number])
    assert [version.number for version in reopened.versions()] == [0, 1, 2, 3]
    assert [version.operation for version in reopened.versions()] == ["create", "append", "upsert", "delete"]


def test_tags_on_s3(history: History) -> None:
    store = history.store
    store.tag("first", 1)
    store.tag("release")
    reopened = litstore.open(history.url, storage_options=history.options)
    assert dict(reopened.tags) == {"first": 1, "release": 3}
    _reads_exactly(reopened.at("first"), history.expected[1])
    with pytest.raises(litstore.TagError):
        reopened.tag("first", 2)
    reopened.tag("first", 2, move=True)
    _reads_exactly(reopened.at("first"), history.expected[2])
    reopened.delete_tag("release")
    with pytest.raises(litstore.VersionNotFoundError):
        reopened.at("release")
    reopened.tag("latest", 1)  # a tag named "latest" is the tag; without one, "latest" is the newest version
    assert reopened.at("latest").version.number == 1
    reopened.delete_tag("latest")
    assert reopened.at("latest").version.number == 3


def test_sql_and_diff_on_s3(history: History) -> None:
    store = history.store
    counts = store.sql("SELECT split, count(*) AS n FROM manifest GROUP BY split ORDER BY split").to_pylist()
    expected_counts = Counter(SPLITS.assign(key, record) for key, record in history.expected[3].items())
    assert {row["split"]: row["n"] for row in counts} == dict(expected_counts)
    old = store.sql("SELECT count(*) AS n FROM manifest", version=1).to_pylist()
    assert old == [{"n": 60}]

    diff = store.diff(1)
    added = set(diff.added.column("key").to_pylist())
    removed = set(diff.removed.column("key").to_pylist())
    changed = set(diff.changed.column("key").to_pylist())
    v1, v3 = history.expected[1], history.expected[3]
    assert added == set(v3) - set(v1)
    assert removed == set(v1) - set(v3)
    assert changed == {key for key in set(v1) & set(v3) if v1[key] != v3[key]}
    assert changed  # some replaced records survived the delete
    swapped = store.diff(3, 1)
    assert set(swapped.added.column("key").to_pylist()) == removed


def test_verify_on_s3_and_a_missing_chunk(history: History) -> None:
    store = history.store
    for number in range(4):
        report = store.verify(number, expected_keys=history.expected[number])
        assert report.ok, report.summary()
    victim = store.chunks()["train"][0].filename
    boto3.client("s3", endpoint_url=history.endpoint).delete_object(Bucket=history.bucket, Key=f"stores/one/{victim}")
    report = litstore.open(history.url, storage_options=history.options).verify()
    assert not report.ok
    assert report.missing_chunks == [victim]


def keep_list(batch: list[Record]) -> list[Record]:
    return batch


def _stream(dataset: Any, num_workers: int) -> list[Record]:
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=num_workers, collate_fn=keep_list)
    return [record for batch in loader for record in batch]


@pytest.mark.integration
@pytest.mark.usefixtures("views")
def test_pinned_version_streams_exactly_its_records_from_s3(history: History) -> None:
    store = history.store
    for number in (1, 3):
        streamed = _stream(store.dataset(number), num_workers=2)
        keys = [record["id"] for record in streamed]
        assert Counter(keys).most_common(1)[0][1] == 1, "a record streamed twice"
        assert set(keys) == set(history.expected[number])
        assert {record["id"]: record for record in streamed} == history.expected[number]
    val = _stream(store.dataset(3, split="val"), num_workers=2)
    assert {record["id"] for record in val} == {
        key for key, record in history.expected[3].items() if SPLITS.assign(key, record) == "val"
    }


def test_gc_on_s3(history: History) -> None:
    store = history.store
    store.tag("first", 1)
    before = _objects(history.endpoint, history.bucket)
    report = store.gc(dry_run=False, keep_last=1)
    assert report.kept_versions == [1, 3]
    assert report.expired_versions == [0, 2]
    after = _objects(history.endpoint, history.bucket)
    removed = {f"stores/one/{path}" for path in report.removed_files}
    assert removed and removed <= set(before)
    assert not removed & set(after)
    assert report.removed_bytes == sum(before[path] for path in removed)
    assert f"stores/one/{layout.version_record(2)}" in after  # a tombstone now

    reopened = litstore.open(history.url, storage_options=history.options)
    for number in (1, 3):
        _reads_exactly(reopened.at(number), history.expected[number])
        assert reopened.verify(number, expected_keys=history.expected[number]).ok
    for number in (0, 2):
        with pytest.raises(litstore.VersionNotFoundError):
            reopened.at(number)
    reopened.append([_record(500)])
    assert reopened.verify().ok


# -- bytes read by lookups ---------------------------------------------------------

RECORDS = 2000
PAYLOAD = 1024
HEADER_GUESS = 64 * 1024  # litstore.chunks reads this much of a remote chunk first


def test_remote_lookups_read_only_the_bytes_they_need(s3_endpoint: str, s3_bucket: str) -> None:
    url = _url(s3_bucket, "big")
    rng = random.Random(7)
    records = [{"id": f"r{i:04d}", "blob": rng.randbytes(PAYLOAD)} for i in range(RECORDS)]
    store = litstore.Store.create(url, chunk_bytes=16 * 1024 * 1024, storage_options=_options(s3_endpoint))
    store.append(records)
    (chunk,) = store.chunks()["train"]
    header = 4 * (RECORDS + 2)
    item_size = (chunk.num_bytes - header) // RECORDS  # every item has the same size here
    assert item_size * RECORDS + header == chunk.num_bytes
    assert PAYLOAD < item_size < PAYLOAD + 64
    assert chunk.num_bytes > 16 * (HEADER_GUESS + item_size)

    for reader in (store, litstore.open(url, storage_options=_options(s3_endpoint))):
        storage = reader.storage
        assert reader.lookup_index_bytes > 0  # builds the key index: manifest reads are not lookups
        start = storage.bytes_read
        assert reader["r1234"] == records[1234]
        first = storage.bytes_read - start
        assert item_size <= first <= HEADER_GUESS + item_size + 256, first

        for i in rng.sample(range(RECORDS), 25):
            start = storage.bytes_read
            assert reader[f"r{i:04d}"] == records[i]
            assert item_size <= storage.bytes_read - start < 2 * item_size

        start = storage.bytes_read
        assert "absent" not in reader
        assert storage.bytes_read == start

        wanted = rng.sample(range(RECORDS), 40)
        start = storage.bytes_read
        assert reader.get_many([f"r{i:04d}" for i in wanted]) == [records[i] for i in wanted]
        assert storage.bytes_read - start < len(wanted) * 2 * item_size

    snapshot = litstore.open(url, storage_options=_options(s3_endpoint)).at(1)
    snapshot.lookup_index_bytes  # noqa: B018 - builds the index
    start = snapshot.storage.bytes_read
    snapshot["r0000"]
    snapshot["r1999"]
    assert snapshot.storage.bytes_read - start <= HEADER_GUESS + 2 * item_size + 256


# -- other processes ---------------------------------------------------------------


@pytest.mark.integration
def test_reader_process_sees_only_complete_versions_while_another_appends(s3_endpoint: str, s3_bucket: str) -> None:
    url = _url(s3_bucket, "shared")
    options = _options(s3_endpoint)
    store = litstore.Store.create(url, storage_options=options)
    store.append(workers.batch(1))
    context = multiprocessing.get_context("spawn")
    ready, done, checks, queue = context.Event(), context.Event(), context.Value("i", 0), context.Queue()
    # The writer commits while the reader reads, PER_ROUND versions for each round of reads the reader
    # finishes: every round overlaps commits, and the store stays a few dozen versions deep (each version
    # is one more chunk for each verify to fetch) instead of racing to 80 versions while the rounds slow.
    allowance = context.Semaphore(workers.PER_ROUND)
    child = context.Process(
        target=workers.read_while_appending, args=(url, options, ready, done, checks, allowance, queue)
    )
    child.start()
    try:
        assert ready.wait(timeout=180), "the reader process did not start"
        number = 1
        # Keep committing until the reader has checked several versions mid-stream.
        while number < 80 and (checks.value < 6 or number < 10):
            assert allowance.acquire(timeout=180), "the reader stopped reading"
            number = store.append(workers.batch(number + 1)).number
        done.set()
        status, seen, problems = queue.get(timeout=180)
        child.join(timeout=60)
    finally:
        if child.is_alive():
            child.kill()
    assert status == "ok", problems
    assert problems == []
    assert len(seen) >= 6
    assert len(set(seen)) >= 3, f"the reader did not overlap with the writer: it read versions {sorted(set(seen))}"
    assert max(seen) == number  # its last round (after the writer finished) read the final version
    assert store.verify(expected_keys=workers.expected_at(number)).ok


def _gather(queue: Any, count: int, processes: Iterable[Any]) -> dict[str, list[int]]:
    results: dict[str, list[int]] = {}
    errors: list[str] = []
    for _ in range(count):
        name, versions, error = queue.get(timeout=240)
        results[name] = versions
        if error:
            errors.append(error)
    for process in processes:
        process.join(timeout=60)
    assert not errors, "\n".join(errors)
    return results


@pytest.mark.integration
def test_two_processes_appending_at_once_both_land_on_s3(s3_endpoint: str, s3_bucket: str) -> None:
    url = _url(s3_bucket, "contended")
    options = _options(s3_endpoint)
    litstore.Store.create(url, storage_options=options)
    batches = 8
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(2), context.Queue()
    children = [
        context.Process(target=workers.append_batches, args=(url, options, name, batches, barrier, queue))
        for name in ("left", "right")
    ]
    for child in children:
        child.start()
    try:
        results = _gather(queue, 2, children)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    committed = sorted(results["left"] + results["right"])
    assert committed == list(range(1, 2 * batches + 1))  # every commit got its own version number

    store = litstore.open(url, storage_options=options)
    assert store.version.number == 2 * batches
    expected = {f"{name}-{b:02d}-{i}" for name in ("left", "right") for b in range(batches) for i in range(4)}
    keys = store.keys()
    assert len(keys) == len(set(keys)) == len(expected)
    assert set(keys) == expected
    assert store.verify(expected_keys=expected).ok
    for version in store.versions()[1:]:
        assert version.added == 4 and version.operation == "append"
        assert version.parent == version.number - 1
