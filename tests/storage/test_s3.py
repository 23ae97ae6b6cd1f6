"""The storage contract on :class:`S3Storage`, against moto's S3 server on loopback.

Each test gets a fresh bucket (``tests/s3_server.py``); the store root is a prefix in
it, and once the bucket itself, since key prefixes are where S3 paths go wrong.
"""

from __future__ import annotations

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
