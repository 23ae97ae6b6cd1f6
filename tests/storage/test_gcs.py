"""``gs://`` stores through obstore, against fake-gcs-server on loopback (``tests/gcs_server.py``).

Written through litstore: a store created on gs:// goes through append, upsert,
delete, a tag and gc, and reads back as the same history does locally; two spawned
processes appending at once both land (their commits race on ``ifGenerationMatch=0``,
which fake-gcs-server checks); a chunk over object_store's multipart threshold is
uploaded in parts. Copied in: a store written locally and put into the bucket through
the JSON API, as another tool would, reads back through litstore's backend. Network
faults are :class:`StorageError` naming the endpoint, as on S3 and Azure. The storage
contract: ``tests/storage/test_objectstore.py``; streaming:
``tests/streaming/test_object_stores.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.errors import StorageError
from litstore.storage.objectstore import ObjectStorage
from tests.gcs_server import XmlWriteAdapter, upload
from tests.store import _s3_workers as workers

pytestmark = pytest.mark.integration


def _records(count: int) -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "n": i, "blob": bytes([i % 251]) * 40} for i in range(count)]


@pytest.fixture
def copied(tmp_path: Path, gcs_endpoint: str, gcs_bucket: str) -> tuple[str, litstore.Store]:
    """A store written locally (two versions, a tag, a delete), copied to ``gs://bucket/stores/pets``."""
    local = litstore.Store.create(tmp_path / "pets", key="id", chunk_bytes=2048)
    local.append(_records(60))
    local.tags.create("first", 1)
    local.upsert([{"id": "k005", "n": -5, "blob": b"new"}])
    local.delete(["k007"])
    assert upload(gcs_endpoint, gcs_bucket, "stores/pets", tmp_path / "pets") > 10
    return f"gs://{gcs_bucket}/stores/pets", local


def test_a_store_copied_to_gcs_reads_as_it_does_locally(
    copied: tuple[str, litstore.Store], gcs_options: dict[str, Any]
) -> None:
    url, local = copied
    remote = litstore.open(url, storage_options=gcs_options)
    assert remote.version.number == local.version.number == 3 and len(remote) == len(local) == 59
    assert remote["k005"] == {"id": "k005", "n": -5, "blob": b"new"}
    assert "k007" not in remote and remote.get("k007") is None
    keys = [f"k{i:03d}" for i in range(0, 60, 3)]
    assert remote.get_many(keys, default=None) == local.get_many(keys, default=None)
    assert dict(remote.head().items()) == dict(local.head().items())
    assert remote.at("first")["k005"]["n"] == 5
    assert remote.diff("first", 3).summary() == local.diff("first", 3).summary()
    assert remote.verify().ok
    assert remote.sql("SELECT count(*) AS n FROM manifest").column("n").to_pylist() == [59]


def test_network_faults_on_gcs_are_storage_errors_naming_the_endpoint(
    copied: tuple[str, litstore.Store], gcs_options: dict[str, Any]
) -> None:
    url, _ = copied
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    options = {**gcs_options, "base_url": dead, "timeout": "5s", "connect_timeout": "2s"}
    with pytest.raises(StorageError, match=dead.replace(".", r"\.")):
        litstore.open(url, storage_options=options)


def test_a_gs_url_without_a_bucket_is_refused() -> None:
    with pytest.raises(StorageError, match="gs://"):
        litstore.open("gs:///prefix")


def _history(store: litstore.Store) -> None:
    """1: 60 records; 2: k005 changed and k060 added; 3: k007 deleted; the tag ``first`` on 1."""
    store.append(_records(60))
    store.upsert([{"id": "k005", "n": -5, "blob": b"new"}, {"id": "k060", "n": 60, "blob": b"added"}])
    store.delete(["k007"])
    store.tags.create("first", 1)


def test_a_store_written_on_gcs_reads_back_as_the_same_history_does_locally(
    tmp_path: Path, gcs_bucket: str, gcs_options: dict[str, Any], gcs_adapter: XmlWriteAdapter
) -> None:
    url = f"gs://{gcs_bucket}/stores/pets"
    remote = litstore.Store.create(url, key="id", chunk_bytes=2048, storage_options=gcs_options)
    local = litstore.Store.create(tmp_path / "pets", key="id", chunk_bytes=2048)
    seen = len(gcs_adapter.seen)
    for store in (remote, local):
        _history(store)
    assert any(request.startswith("PUT ") for request in gcs_adapter.seen[seen:])  # written through the XML API
    reopened = litstore.open(url, storage_options=gcs_options)
    assert reopened.version.number == local.version.number == 3
    assert dict(reopened.head().items()) == dict(local.head().items())
    assert reopened["k005"]["n"] == -5 and reopened["k060"]["blob"] == b"added" and "k007" not in reopened
    assert dict(reopened.at("first").items()) == dict(local.at("first").items())
    assert reopened.diff("first", 3).summary() == local.diff("first", 3).summary()
    assert reopened.verify().ok
    assert [version.operation for version in reopened.versions()] == [v.operation for v in local.versions()]


def _files(storage: ObjectStorage) -> set[str]:
    """Every file under the store root."""
    return {info.path for name in storage.names("") for info in storage.walk(name)} | {
        name for name in storage.names("") if storage.exists(name)
    }


def test_gc_on_gcs_removes_what_only_expired_versions_hold(gcs_bucket: str, gcs_options: dict[str, Any]) -> None:
    url = f"gs://{gcs_bucket}/stores/pets"
    store = litstore.Store.create(url, key="id", chunk_bytes=2048, storage_options=gcs_options)
    _history(store)
    storage = ObjectStorage(url, gcs_options)
    before = _files(storage)
    report = store.gc(dry_run=False, keep_last=1)
    assert report.kept_versions == [1, 3] and report.expired_versions == [0, 2]
    removed = set(report.removed_files)
    assert removed and removed <= before
    assert not removed & _files(storage)
    reopened = litstore.open(url, storage_options=gcs_options)
    assert reopened.verify().ok and reopened.verify(1).ok
    with pytest.raises(litstore.VersionNotFoundError):
        reopened.at(2)
    reopened.append(_records(70)[65:])
    assert len(reopened) == 65 and reopened.verify().ok


def test_a_chunk_past_the_multipart_threshold_is_uploaded_in_parts(
    gcs_bucket: str, gcs_options: dict[str, Any], gcs_adapter: XmlWriteAdapter
) -> None:
    """obstore uploads a file over 5 MiB as an XML API multipart upload (the adapter assembles it)."""
    url = f"gs://{gcs_bucket}/stores/big"
    store = litstore.Store.create(url, key="id", storage_options=gcs_options)
    records = [{"id": f"b{i}", "blob": os.urandom(1 << 20)} for i in range(7)]
    seen = len(gcs_adapter.seen)
    store.append(records)
    assert any("partNumber=2&uploadId=" in request for request in gcs_adapter.seen[seen:])
    reopened = litstore.open(url, storage_options=gcs_options)
    assert reopened.get_many([record["id"] for record in records]) == records
    assert reopened.verify().ok


def test_two_processes_appending_at_once_both_land_on_gcs(gcs_bucket: str, gcs_options: dict[str, Any]) -> None:
    """Their commit records race on put-if-absent (``ifGenerationMatch=0``): every commit gets its own version."""
    url = f"gs://{gcs_bucket}/stores/contended"
    litstore.Store.create(url, storage_options=gcs_options)
    batches = 6
    context = multiprocessing.get_context("spawn")  # obstore does not survive a fork
    barrier, queue = context.Barrier(2), context.Queue()
    children = [
        context.Process(target=workers.append_batches, args=(url, gcs_options, name, batches, barrier, queue))
        for name in ("left", "right")
    ]
    for child in children:
        child.start()
    try:
        outcomes = [queue.get(timeout=240) for _ in children]
    finally:
        for child in children:
            child.join(timeout=60)
            if child.is_alive():
                child.kill()
    assert [error for _, _, error in outcomes if error] == []
    committed = sorted(version for _, versions, _ in outcomes for version in versions)
    assert committed == list(range(1, 2 * batches + 1))
    store = litstore.open(url, storage_options=gcs_options)
    expected = {f"{name}-{b:02d}-{i}" for name in ("left", "right") for b in range(batches) for i in range(4)}
    assert sorted(store.keys()) == sorted(expected)
    assert store.verify(expected_keys=expected).ok
