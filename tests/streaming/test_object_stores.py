"""Streaming ``az://`` and ``gs://`` stores: litdata downloads their chunks through litstore's obstore backend.

Against Azurite (``tests/azurite_server.py``) and fake-gcs-server (``tests/gcs_server.py``).
What a local or S3 stream guarantees holds here too: exactly the pinned version's
records, each checked against its committed content hash (a chunk changed in the
bucket is an :class:`IntegrityError`, and so is one removed from it, named, as on
S3: ``tests/storage/test_s3_faults.py``); a download fault is a
:class:`StorageError` naming the endpoint, never damage. obstore does not survive a
fork, so DataLoader workers are started with ``multiprocessing_context="spawn"``;
forked ones get a :class:`StorageError` saying so, not a hang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from litdata import StreamingDataLoader

import litstore
from litstore.errors import IntegrityError, StorageError
from litstore.storage.objectstore import ObjectStorage
from tests.loopback import Forwarder

pytestmark = pytest.mark.integration

Record = dict[str, Any]


def _records(count: int) -> list[Record]:
    return [{"id": f"k{i:03d}", "n": i, "blob": bytes([i % 251]) * 40} for i in range(count)]


def _history(store: litstore.Store) -> None:
    """Version 1: 60 records; 2: k005 changed; 3: k007 deleted."""
    store.append(_records(60))
    store.upsert([{"id": "k005", "n": -5, "blob": b"new"}])
    store.delete(["k007"])


def _pairs(records: Any) -> list[tuple[str, int]]:
    return sorted((record["id"], record["n"]) for record in records)


def _expected(version: int) -> list[tuple[str, int]]:
    pairs = [(f"k{i:03d}", i) for i in range(60)]
    if version >= 2:
        pairs[5] = ("k005", -5)
    if version >= 3:
        del pairs[7]
    return pairs


def _keep_list(items: list[Record]) -> list[Record]:
    return items


def _loaded(dataset: Any, **options: Any) -> list[Record]:
    loader = StreamingDataLoader(dataset, batch_size=8, collate_fn=_keep_list, timeout=120, **options)
    return [record for batch in loader for record in batch]


@pytest.fixture
def azure_url(azurite_options: dict[str, Any], azure_container: str) -> str:
    url = f"az://{azure_container}/pets"
    _history(litstore.Store.create(url, key="id", chunk_bytes=1024, storage_options=azurite_options))
    return url


@pytest.fixture
def gcs_url(gcs_options: dict[str, Any], gcs_bucket: str) -> str:
    url = f"gs://{gcs_bucket}/stores/pets"
    store = litstore.Store.create(url, key="id", chunk_bytes=1024, storage_options=gcs_options)
    _history(store)
    store.tags.create("first", 1)
    return url


def test_an_azure_store_streams_each_pinned_version(
    azure_url: str, azurite_options: dict[str, Any], tmp_path: Path
) -> None:
    store = litstore.open(azure_url, storage_options=azurite_options)
    for version in (1, 2, 3):
        assert _pairs(store.dataset(version, views_dir=tmp_path / "views")) == _expected(version)
    dataset = store.dataset(views_dir=tmp_path / "views")
    assert dataset["k005"] == {"id": "k005", "n": -5, "blob": b"new"}
    assert "az://" in repr(dataset)


def test_a_gcs_store_streams_each_pinned_version(gcs_url: str, gcs_options: dict[str, Any], tmp_path: Path) -> None:
    store = litstore.open(gcs_url, storage_options=gcs_options)
    assert _pairs(store.dataset("first", views_dir=tmp_path / "views")) == _expected(1)
    assert _pairs(store.dataset(views_dir=tmp_path / "views")) == _expected(3)


def test_a_branch_of_an_azure_store_streams_its_own_records(
    azure_url: str, azurite_options: dict[str, Any], tmp_path: Path
) -> None:
    store = litstore.open(azure_url, storage_options=azurite_options)
    store.branches.create("relabel", from_=2)
    side = litstore.open(azure_url, branch="relabel", storage_options=azurite_options)
    side.update({"k009": {"n": 900}})
    streamed = dict(_pairs(side.dataset(views_dir=tmp_path / "views")))
    assert streamed["k009"] == 900 and streamed["k007"] == 7 and len(streamed) == 60


def _chunk_path(store: litstore.Store) -> str:
    """The chunk version 2's upsert wrote: its one row, k005, is live."""
    (chunk,) = [chunk for chunk in store.head().chunks()["train"] if chunk.num_items == 1]
    return chunk.filename


@pytest.mark.parametrize("service", ["az", "gs"])
def test_a_chunk_changed_or_removed_in_the_bucket_is_damage_not_a_record(
    service: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url: str = request.getfixturevalue(f"{'azure' if service == 'az' else 'gcs'}_url")
    options: dict[str, Any] = request.getfixturevalue("azurite_options" if service == "az" else "gcs_options")
    store = litstore.open(url, storage_options=options)
    storage = ObjectStorage(url, options)
    chunk = _chunk_path(store)
    data = bytearray(storage.read(chunk))
    data[-1] ^= 0xFF  # a byte of the chunk's last record
    storage.write(chunk, bytes(data))
    with pytest.raises(IntegrityError, match="k005"):
        list(store.dataset(views_dir=tmp_path / "views"))
    storage.delete(chunk)
    with pytest.raises(IntegrityError) as missing:
        list(store.dataset(views_dir=tmp_path / "other-views"))
    assert not isinstance(missing.value, StorageError)
    assert f"its chunk {chunk} is not there" in str(missing.value) and "store.gc" in str(missing.value)


def test_a_download_that_cannot_connect_is_a_storage_error_naming_the_endpoint(
    azure_url: str, azurite_options: dict[str, Any], tmp_path: Path
) -> None:
    parts = urlsplit(azurite_options["endpoint"])
    assert parts.port is not None
    forwarder = Forwarder(parts.port)
    endpoint = f"http://127.0.0.1:{forwarder.port}{parts.path}"
    options = {**azurite_options, "endpoint": endpoint, "timeout": "5s", "connect_timeout": "2s"}
    store = litstore.open(azure_url, storage_options=options)
    first, head = (store.dataset(version, views_dir=tmp_path / "views") for version in (1, 3))
    forwarder.close()
    with pytest.raises(StorageError) as downloading:
        list(first)  # no deletion vector: the first read is litdata's download of a chunk
    assert "could not download a chunk" in str(downloading.value) and "not damage" in str(downloading.value)
    with pytest.raises(StorageError) as reading:
        list(head)  # the first read is the deletion vector of a chunk, through the backend
    for raised in (downloading, reading):
        assert not isinstance(raised.value, IntegrityError)
        assert endpoint in str(raised.value)


def test_spawned_workers_stream_an_azure_store(azure_url: str, azurite_options: dict[str, Any], tmp_path: Path) -> None:
    store = litstore.open(azure_url, storage_options=azurite_options)
    streamed = _loaded(store.dataset(views_dir=tmp_path / "views"), num_workers=2, multiprocessing_context="spawn")
    assert _pairs(streamed) == _expected(3)


def test_forked_workers_are_told_to_spawn_not_hung(
    azure_url: str, azurite_options: dict[str, Any], tmp_path: Path
) -> None:
    store = litstore.open(azure_url, storage_options=azurite_options)
    dataset = store.dataset(views_dir=tmp_path / "views")
    with pytest.raises(StorageError, match="spawn"):
        _loaded(dataset, num_workers=2, multiprocessing_context="fork")
