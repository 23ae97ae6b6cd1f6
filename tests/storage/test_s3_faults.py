"""Network faults on S3 are :class:`StorageError` naming the endpoint and the operation, never damage.

Real servers on loopback: moto's (``tests/s3_server.py``), a second moto server that is
stopped mid-test, a port nothing listens on, and a socket that accepts connections
and never answers. Every path is covered: lookups, commits, and streaming through
litdata's downloader. The opposite case too: a chunk the service answers is not there
(404) is missing data, an :class:`IntegrityError` naming the chunk, as on az:// and gs://.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from litdata import StreamingDataLoader

import litstore
from litstore.errors import IntegrityError, StorageError
from litstore.storage.base import Storage
from tests.conftest import release_frames

pytestmark = pytest.mark.integration


def _records(count: int) -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "n": i, "blob": bytes([i % 251]) * 40} for i in range(count)]


@pytest.fixture
def dead_endpoint() -> str:
    """An http endpoint on loopback that refuses connections (a port just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An http endpoint that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def _every_operation(storage: Storage) -> dict[str, Any]:
    return {
        "look up": lambda: storage.exists("versions/00000001.json"),
        "read": lambda: storage.read("versions/00000001.json"),
        "read range": lambda: storage.read_range("fragments/f/chunk-0.bin", 0, 10),
        "write": lambda: storage.write("fragments/f/chunk-0.bin", b"x"),
        "create": lambda: storage.put_if_absent("versions/00000001.json", b"{}"),
        "list": lambda: storage.names("versions"),
    }


def _assert_fault_names(error: StorageError, endpoint: str) -> None:
    assert not isinstance(error, IntegrityError)
    assert endpoint in str(error)


def test_every_operation_against_a_dead_port_is_a_storage_error(s3_endpoint: str, dead_endpoint: str) -> None:
    from litstore.storage.s3 import S3Storage

    storage = S3Storage("s3://bucket/store", {"endpoint_url": dead_endpoint})
    for action, call in _every_operation(storage).items():
        with pytest.raises(StorageError) as raised:
            call()
        _assert_fault_names(raised.value, dead_endpoint)
        assert "connect" in str(raised.value).lower(), action
    with pytest.raises(StorageError) as opened:
        litstore.open("s3://bucket/store", storage_options={"endpoint_url": dead_endpoint})
    _assert_fault_names(opened.value, dead_endpoint)


def test_https_against_a_plain_http_server_is_a_storage_error(s3_endpoint: str, s3_bucket: str) -> None:
    from litstore.storage.s3 import S3Storage

    https = s3_endpoint.replace("http://", "https://")
    storage = S3Storage(
        f"s3://{s3_bucket}/store", {"endpoint_url": https, "config": Config(retries={"total_max_attempts": 1})}
    )
    for call in _every_operation(storage).values():
        with pytest.raises(StorageError) as raised:
            call()
        _assert_fault_names(raised.value, https)


def test_a_server_that_never_answers_times_out_as_a_storage_error(s3_endpoint: str, silent_endpoint: str) -> None:
    from litstore.storage.s3 import S3Storage

    quick = Config(connect_timeout=0.2, read_timeout=0.2, retries={"total_max_attempts": 1})
    storage = S3Storage("s3://bucket/store", {"endpoint_url": silent_endpoint, "config": quick})
    for action, call in _every_operation(storage).items():
        started = time.monotonic()
        with pytest.raises(StorageError) as raised:
            call()
        assert time.monotonic() - started < 5, action
        _assert_fault_names(raised.value, silent_endpoint)
        assert "timeout" in str(raised.value).lower(), action


def test_streaming_with_only_aws_endpoint_url_set_works_over_plain_http(
    s3_endpoint: str, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's lookups and litdata's chunk downloads reach the same endpoint, named by the environment alone."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    url = f"s3://{s3_bucket}/store"
    store = litstore.Store.create(url, key="id", chunk_bytes=1024)
    store.append(_records(60))
    reopened = litstore.open(url)
    assert reopened["k007"]["n"] == 7
    streamed = list(reopened.dataset(views_dir=tmp_path / "views"))
    assert sorted(record["n"] for record in streamed) == list(range(60))


def test_streaming_and_committing_after_the_endpoint_dies_are_storage_errors(s3_endpoint: str, tmp_path: Path) -> None:
    """A download that cannot connect is reported as the network fault it is, not as a damaged chunk."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="dies")
        store = litstore.Store.create(
            "s3://dies/store", key="id", chunk_bytes=1024, storage_options={"endpoint_url": endpoint}
        )
        store.append(_records(40))
        dataset = store.dataset(views_dir=tmp_path / "views")
    finally:
        server.stop()
    with pytest.raises(StorageError) as streamed:
        list(dataset)
    _assert_fault_names(streamed.value, endpoint)
    assert "not damage" in str(streamed.value)
    with pytest.raises(StorageError) as committed:
        store.append(_records(41)[40:])
    _assert_fault_names(committed.value, endpoint)
    with pytest.raises(StorageError) as looked_up:
        store["k003"]
    _assert_fault_names(looked_up.value, endpoint)


def _keep_list(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return items


def test_a_chunk_removed_from_the_bucket_is_missing_data_on_both_download_paths(
    s3_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    """litdata downloads S3 chunks through obstore, and through boto3 in a DataLoader worker forked after obstore
    started in its parent: both 404s are the IntegrityError az:// and gs:// give, never a download fault."""
    url = f"s3://{s3_bucket}/store"
    store = litstore.Store.create(url, key="id", chunk_bytes=1024, storage_options={"endpoint_url": s3_endpoint})
    store.append(_records(60))
    assert len(list(store.dataset(views_dir=tmp_path / "warm"))) == 60  # litdata's obstore now runs in this process
    chunk = store.head().chunks()["train"][0].filename
    boto3.client("s3", endpoint_url=s3_endpoint).delete_object(Bucket=s3_bucket, Key=f"store/{chunk}")
    with pytest.raises(IntegrityError) as in_process:
        list(store.dataset(views_dir=tmp_path / "in-process"))
    loader = StreamingDataLoader(
        store.dataset(views_dir=tmp_path / "forked"),
        batch_size=8,
        num_workers=1,
        multiprocessing_context="fork",
        collate_fn=_keep_list,
        timeout=120,
    )
    with pytest.raises(IntegrityError) as forked:
        list(loader)
    release_frames(forked)
    named = f"its chunk {chunk} is not there"  # obstore's 404 names the object
    waited = f"a chunk it lists (the stream was waiting for {chunk}) is not there"  # boto3's names none
    for raised, client, says in ((in_process, "FileNotFoundError", named), (forked, "ClientError", waited)):
        assert not isinstance(raised.value, StorageError)
        message = str(raised.value)
        assert says in message and client in message, message
        assert "store.gc" in message and "store.verify()" in message
