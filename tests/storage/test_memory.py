"""The storage contract on :class:`MemoryStorage` (``memory://<name>``)."""

from __future__ import annotations

import uuid

import pytest

from litstore.storage.base import Storage
from litstore.storage.memory import MemoryStorage
from litstore.testing import StorageTests


class TestMemoryStorage(StorageTests):
    @pytest.fixture
    def storage(self) -> Storage:
        return MemoryStorage(f"memory://storage-test-{uuid.uuid4().hex}")
