"""``gs://`` stores through obstore, read from fake-gcs-server on loopback (``tests/gcs_server.py``).

fake-gcs-server does not take object_store's uploads (XML API ``PUT``), so a store is
written locally and its files put into the bucket through the JSON API, as a copy
with another tool would; every read then goes through litstore's gs:// backend:
lookups by key, batches, a walk of every record, a verify, a diff, a tag. Network
faults are :class:`StorageError` naming the endpoint, as on S3 and Azure. Streaming:
``tests/streaming/test_object_stores.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.errors import StorageError
from tests.gcs_server import upload

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
