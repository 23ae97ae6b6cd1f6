"""The storage contract on :class:`S3Storage`, against moto's S3 server on loopback.

Each test gets a fresh bucket (``tests/s3_server.py``); the store root is a prefix in
it, and once the bucket itself, since key prefixes are where S3 paths go wrong.
"""

from __future__ import annotations

import pytest

from litstore.storage.base import Storage
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
