"""The storage contract on :class:`S3Storage`, against moto's S3 server on loopback.

Each test gets a fresh bucket (``tests/s3_server.py``); the store root is a prefix in
it, and once the bucket itself, since key prefixes are where S3 paths go wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from litstore.storage.base import RemoteInput, Storage
from litstore.testing import StorageTests

pytestmark = pytest.mark.integration


class TestS3Storage(StorageTests):
    @pytest.fixture
    def storage(self, s3_endpoint: str, s3_bucket: str) -> Storage:
        from litstore.storage.s3 import S3Storage

        return S3Storage(f"s3://{s3_bucket}/stores/one", {"endpoint_url": s3_endpoint})


class TestS3StorageAtBucketRoot(StorageTests):
    @pytest.fixture
    def storage(self, s3_endpoint: str, s3_bucket: str) -> Storage:
        from litstore.storage.s3 import S3Storage

        return S3Storage(f"s3://{s3_bucket}", {"endpoint_url": s3_endpoint})


def test_litdata_input_is_the_url_with_the_options(s3_endpoint: str, s3_bucket: str) -> None:
    from litstore.storage.s3 import S3Storage

    options = {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}
    source = S3Storage(f"s3://{s3_bucket}/stores/one", options).litdata_input()
    assert source == RemoteInput(f"s3://{s3_bucket}/stores/one", options, plain_http=True, endpoint=s3_endpoint)
    assert source.plain_http  # moto on loopback: litdata needs litstore's plain-http downloader
    https = S3Storage(f"s3://{s3_bucket}", {"endpoint_url": "https://s3.example.com"}).litdata_input()
    assert not https.plain_http


def test_object_store_and_fsspec_options_reach_the_same_store(s3_endpoint: str, s3_bucket: str, tmp_path: Path) -> None:
    """A store made with object_store's keys (as Lance, Delta or polars users pass them) opens with fsspec's,
    and streams with them: litdata gets the mapped boto3 arguments."""
    import litstore

    url = f"s3://{s3_bucket}/stores/keys"
    object_store = {
        "aws_endpoint": s3_endpoint,
        "allow_http": "true",
        "aws_region": "us-east-1",
        "aws_access_key_id": "litstore-test",
        "aws_secret_access_key": "litstore-test",
        "timeout": "30s",
    }
    store = litstore.Store.create(url, key="id", chunk_bytes=1024, storage_options=object_store)
    store.append([{"id": f"k{i:02d}", "n": i} for i in range(30)])
    fsspec = {"key": "litstore-test", "secret": "litstore-test", "client_kwargs": {"endpoint_url": s3_endpoint}}
    reopened = litstore.open(url, storage_options=fsspec)
    assert reopened["k07"]["n"] == 7
    assert sorted(record["n"] for record in reopened.dataset(views_dir=tmp_path / "views")) == list(range(30))
