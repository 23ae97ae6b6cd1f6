"""A lost response is not a lost store: commits on S3 whose PUT landed but whose answer did not.

The store talks to a real S3 endpoint (moto's server on loopback, ``tests/s3_server.py``).
A botocore event handler on the store's own client interferes with the conditional PUT
of the commit record, after the server has stored it:

- the response is thrown away and botocore retries, as it does after a dropped
  connection: the retry is told the record exists (412);
- the client gives up with a connection error: litstore sees a ``StorageError``.

Either way the writer must recognise its own record (by its transaction id): the
version is committed, every file it names is still there, the store opens and
verifies, and the writer's handle is at the new version. Where the record cannot be
read back either, the commit is reported as uncertain and nothing is removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectionClosedError

import litstore
from litstore.format import layout

#: Against moto's S3 server over HTTP: seconds a test, so not in the fast loop.
pytestmark = pytest.mark.integration

Record = dict[str, Any]
_COMMIT_RECORD = re.compile(r"/versions/\d+\.json$")


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "blob": bytes([i % 251]) * 30}


class LostResponses:
    """Interferes with the next ``count`` commit-record PUTs that the server accepted."""

    def __init__(self, client: Any, mode: str, count: int = 1) -> None:
        self.mode = mode  # "retry": drop the answer, let botocore retry; "fail": raise a connection error
        self.remaining = count
        self.attempts: list[int] = []  # HTTP status of every commit-record PUT
        client.meta.events.register("needs-retry.s3.PutObject", self._needs_retry)

    def _needs_retry(self, request_dict: dict[str, Any], response: Any, **_: Any) -> int | None:
        if not _COMMIT_RECORD.search(request_dict["url"]) or response is None:
            return None
        status = response[0].status_code
        self.attempts.append(status)
        if status != 200 or not self.remaining:
            return None
        self.remaining -= 1
        if self.mode == "retry":
            return 0  # retry at once, as after a dropped connection
        raise ConnectionClosedError(endpoint_url=request_dict["url"])


@pytest.fixture
def store(s3_endpoint: str, s3_bucket: str) -> Iterator[litstore.Store]:
    store = litstore.Store.create(
        f"s3://{s3_bucket}/store", chunk_bytes=1024, storage_options={"endpoint_url": s3_endpoint}
    )
    store.append([_record(i) for i in range(30)])
    yield store


def _objects(store: litstore.Store) -> set[str]:
    storage = store.storage
    return {found.path for prefix in layout.TOP_LEVEL[1:] for found in storage.walk(prefix)}


def _check_committed(store: litstore.Store, number: int, expected: dict[Any, Record]) -> None:
    """The writer's handle, a fresh open and the stored files all agree that ``number`` is committed."""
    assert store.version.number == number
    version = store.version
    files = {*version.indexes.values(), str(version.manifest)}
    files |= {chunk.filename for split in store.chunks().values() for chunk in split}
    assert files <= _objects(store), f"files of the committed version are gone: {files - _objects(store)}"
    reopened = litstore.open(store.root, storage_options=dict(store.storage.options))
    assert reopened.version == version
    assert dict(reopened.items()) == expected
    assert reopened.verify(expected_keys=expected).ok
    assert reopened.append([_record(900)]).number == number + 1  # the next commit goes on top


@pytest.mark.parametrize("operation", ["append", "upsert", "delete"])
@pytest.mark.parametrize("mode", ["retry", "fail"])
def test_a_commit_whose_response_was_lost_is_committed(store: litstore.Store, mode: str, operation: str) -> None:
    lost = LostResponses(store.storage.client, mode)  # type: ignore[attr-defined]
    expected = dict(store.items())
    if operation == "append":
        returned = store.append([_record(i) for i in range(100, 110)])
        expected |= {f"k{i:03d}": _record(i) for i in range(100, 110)}
    elif operation == "upsert":  # rewrites shared chunks: the moved rows must survive too
        returned = store.upsert([_record(i, rev=1) for i in range(0, 30, 4)])
        expected |= {f"k{i:03d}": _record(i, rev=1) for i in range(0, 30, 4)}
    else:
        returned = store.delete([f"k{i:03d}" for i in range(0, 30, 5)])
        expected = {
            key: record for key, record in expected.items() if key not in {f"k{i:03d}" for i in range(0, 30, 5)}
        }

    assert lost.attempts[0] == 200 and lost.remaining == 0, "the commit-record PUT was never interfered with"
    if mode == "retry":
        assert lost.attempts == [200, 412], "botocore did not retry the PUT"
    assert returned.number == 2
    _check_committed(store, 2, expected)


def test_a_lost_response_behind_a_rival_still_lands_once(store: litstore.Store) -> None:
    """The writer loses one race (412 from a rival's record), then its own PUT's answer is lost."""
    rival = litstore.open(store.root, storage_options=dict(store.storage.options))
    rival.append([_record(500)])
    lost = LostResponses(store.storage.client, "retry")  # type: ignore[attr-defined]
    expected = dict(rival.items()) | {f"k{i:03d}": _record(i) for i in range(100, 105)}

    assert store.append([_record(i) for i in range(100, 105)]).number == 3

    assert lost.attempts == [412, 200, 412]
    _check_committed(store, 3, expected)


def test_an_uncertain_commit_removes_nothing(store: litstore.Store, s3_endpoint: str) -> None:
    """The PUT landed, its answer was lost and the read-back fails too: nothing may be removed."""
    storage = store.storage
    lost = LostResponses(storage.client, "fail")  # type: ignore[attr-defined]

    def unreadable(params: dict[str, Any], **_: Any) -> None:
        if lost.attempts and _COMMIT_RECORD.search(params["url"]):
            raise ConnectionClosedError(endpoint_url=params["url"])

    storage.client.meta.events.register("before-call.s3.GetObject", unreadable)  # type: ignore[attr-defined]
    before = _objects(store)

    with pytest.raises(litstore.StorageError, match="may have been created") as raised:
        store.upsert([_record(i, rev=1) for i in range(0, 30, 4)])

    assert type(raised.value).__name__ == "UncertainCommitError"
    assert before < _objects(store)  # the new files, moved rows and staged fragment all stay
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = storage.bucket  # type: ignore[attr-defined]
    assert client.head_object(Bucket=bucket, Key=f"store/{layout.version_record(2)}")
    reopened = litstore.open(store.root, storage_options={"endpoint_url": s3_endpoint})
    expected = dict(store.items()) | {f"k{i:03d}": _record(i, rev=1) for i in range(0, 30, 4)}
    assert reopened.version.number == 2
    assert dict(reopened.items()) == expected
    assert reopened.verify(expected_keys=expected).ok
