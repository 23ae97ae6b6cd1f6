"""The storage contract on :class:`ObjectStorage` (obstore), against real emulators on loopback.

- S3 through obstore, against moto (``tests/s3_server.py``): ``s3://`` roots use boto3
  (see ``docs/design.md``, "Object storage"), but the obstore backend keeps the same
  contract there, which is what a move would need;
- Azure Blob Storage against Azurite (``tests/azurite_server.py``; skipped where the
  ``azurite`` command is missing, which ``.ci/run`` installs);
- Google Cloud Storage against fake-gcs-server, through the adapter that turns object_store's
  XML API writes into the JSON API uploads fake-gcs-server takes (``tests/gcs_server.py``).
"""

from __future__ import annotations

import multiprocessing
import socket
from typing import Any

import pytest

from litstore.storage.base import Storage
from litstore.testing import StorageTests

pytestmark = pytest.mark.integration


def _s3_options(endpoint: str) -> dict[str, object]:
    return {
        "endpoint": endpoint,
        "allow_http": True,
        "region": "us-east-1",
        "access_key_id": "litstore-test",
        "secret_access_key": "litstore-test",
    }


class TestObstoreS3(StorageTests):
    @pytest.fixture
    def storage(self, s3_endpoint: str, s3_bucket: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(f"s3://{s3_bucket}/stores/one", _s3_options(s3_endpoint))


class TestObstoreS3AtBucketRoot(StorageTests):
    @pytest.fixture
    def storage(self, s3_endpoint: str, s3_bucket: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(f"s3://{s3_bucket}", _s3_options(s3_endpoint))


class TestAzureStorage(StorageTests):
    @pytest.fixture
    def storage(self, azurite_options: dict[str, object], azure_container: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(f"az://{azure_container}/stores/one", azurite_options)


class TestAzureStorageAtContainerRoot(StorageTests):
    @pytest.fixture
    def storage(self, azurite_options: dict[str, object], azure_container: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(
            f"abfs://{azure_container}@{azurite_options['account_name']}.dfs.core.windows.net", azurite_options
        )


class TestGcsStorage(StorageTests):
    @pytest.fixture
    def storage(self, gcs_options: dict[str, object], gcs_bucket: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(f"gs://{gcs_bucket}/stores/one", gcs_options)


class TestGcsStorageAtBucketRoot(StorageTests):
    @pytest.fixture
    def storage(self, gcs_options: dict[str, object], gcs_bucket: str) -> Storage:
        from litstore.storage.objectstore import ObjectStorage

        return ObjectStorage(f"gs://{gcs_bucket}", gcs_options)


def test_an_azure_store_commits_and_looks_up(azurite_options: dict[str, object], azure_container: str) -> None:
    """Streaming it: ``tests/streaming/test_object_stores.py``."""
    import litstore

    url = f"az://{azure_container}/store"
    store = litstore.Store.create(url, key="id", chunk_bytes=1024, storage_options=azurite_options)
    store.append([{"id": f"k{i:02d}", "n": i} for i in range(30)])
    reopened = litstore.open(url, storage_options=azurite_options)
    assert reopened["k07"]["n"] == 7
    assert reopened.verify().ok


def test_unknown_options_and_a_dead_endpoint_are_litstore_errors(azurite_options: dict[str, object]) -> None:
    from litstore.errors import InvalidArgumentError, StorageError
    from litstore.storage.objectstore import ObjectStorage

    with pytest.raises(InvalidArgumentError, match="not usable"):
        ObjectStorage("az://container/store", {**azurite_options, "acount_name": "typo"})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/devstoreaccount1"
    storage = ObjectStorage("az://container/store", {**azurite_options, "endpoint": dead, "timeout": "2s"})
    with pytest.raises(StorageError) as raised:
        storage.put_if_absent("versions/00000001.json", b"{}")
    assert dead in str(raised.value) and "create" in str(raised.value)


def _exists_in_child(storage: Storage, answers: Any) -> None:
    try:
        answers.put(("returned", storage.exists("f")))
    except Exception as exc:  # noqa: BLE001 - sent back to the test
        answers.put((type(exc).__name__, str(exc)))


def test_a_process_forked_after_obstore_was_used_is_refused_not_hung(s3_endpoint: str, s3_bucket: str) -> None:
    """obstore's runtime does not survive fork: the child gets a StorageError saying what to do, not a hang."""
    from litstore.storage.objectstore import ObjectStorage

    storage = ObjectStorage(f"s3://{s3_bucket}/store", _s3_options(s3_endpoint))
    storage.write("f", b"x")
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_exists_in_child, args=(storage, answers))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    kind, message = answers.get(timeout=5)
    assert kind == "StorageError"
    assert "spawn" in message and "forked" in message
