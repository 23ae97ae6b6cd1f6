"""The storage contract on :class:`MemoryStorage` (``memory://<name>``)."""

from __future__ import annotations

import uuid

import pytest

import litstore
from litstore.errors import LitstoreError
from litstore.storage.base import Storage
from litstore.storage.memory import MemoryStorage
from litstore.testing import StorageTests


class TestMemoryStorage(StorageTests):
    @pytest.fixture
    def storage(self) -> Storage:
        return MemoryStorage(f"memory://storage-test-{uuid.uuid4().hex}")


def test_a_memory_store_cannot_be_streamed() -> None:
    store = litstore.Store.create(f"memory://stream-test-{uuid.uuid4().hex}")
    store.append([{"id": "a"}])
    assert store.storage.litdata_input() is None
    with pytest.raises(LitstoreError, match="litdata cannot stream from memory://"):
        store.dataset()
