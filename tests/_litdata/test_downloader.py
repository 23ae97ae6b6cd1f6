"""litstore's downloader for litdata: chunks read through a litstore storage backend, and faults told from damage.

The emulator tests (``tests/streaming/test_object_stores.py``) stream az:// and gs://
stores through it; these check, on a local backend, what it hands litdata: the file
published whole under its cache name, exact byte ranges, and errors that say what
failed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from litdata.streaming.downloader import get_downloader
from obstore.exceptions import NotFoundError

from litstore._litdata.downloader import (
    STORAGE_PREFIX,
    StorageDownloader,
    download_fault,
    missing_object,
    read_through_storage,
    storage_input,
)
from litstore.errors import MissingFileError, StorageError
from litstore.storage.local import LocalStorage


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    backend = LocalStorage(str(tmp_path / "root"))
    backend.write("fragments/f/chunk-0.bin", bytes(range(200)))
    return backend


def test_litdata_picks_it_for_the_input_storage_input_gives(storage: LocalStorage, tmp_path: Path) -> None:
    directory, options = storage_input(storage)
    assert directory.url == STORAGE_PREFIX + storage.url and directory.path is None
    downloader = get_downloader(directory.url, str(tmp_path / "cache"), [], options)
    assert isinstance(downloader, StorageDownloader)
    local = tmp_path / "cache" / "chunk-0.bin"
    local.parent.mkdir()
    downloader.download_file(f"{directory.url}/fragments/f/chunk-0.bin", str(local))
    assert local.read_bytes() == bytes(range(200))
    assert os.listdir(local.parent) == ["chunk-0.bin"]  # published by rename: no temporary file left
    assert downloader.download_bytes(f"{directory.url}/fragments/f/chunk-0.bin", 10, 5, str(local)) == bytes(
        range(10, 15)
    )


def test_a_short_range_and_a_foreign_path_are_refused(storage: LocalStorage, tmp_path: Path) -> None:
    directory, options = storage_input(storage)
    downloader = get_downloader(directory.url, str(tmp_path), [], options)
    with pytest.raises(OSError, match="not the 100"):
        downloader.download_bytes(f"{directory.url}/fragments/f/chunk-0.bin", 150, 100, str(tmp_path / "x"))
    with pytest.raises(ValueError, match="not under"):
        downloader.download_file("s3://elsewhere/fragments/f/chunk-0.bin", str(tmp_path / "y"))


def test_the_prefix_without_a_store_behind_it_is_refused(tmp_path: Path) -> None:
    read_through_storage()
    with pytest.raises(StorageError, match=r"store\.dataset"):
        get_downloader(f"{STORAGE_PREFIX}az://container/store", str(tmp_path), [], {})


def test_a_backend_fault_is_a_download_fault_and_a_missing_chunk_is_not() -> None:
    cut = ConnectionResetError("reset by peer")
    try:
        raise StorageError("cannot read 'fragments/f/chunk-0.bin' (endpoint http://x)") from cut
    except StorageError as error:
        wrapped = RuntimeError("Chunk prefetch thread crashed")
        wrapped.__cause__ = error
        assert download_fault(wrapped) is error
    missing = MissingFileError("no file 'fragments/f/chunk-0.bin'")
    missing.__cause__ = NotFoundError("404")  # obstore's: the service answered that the chunk is not there
    wrapped = RuntimeError("Chunk prefetch thread crashed")
    wrapped.__cause__ = missing
    assert download_fault(wrapped) is None


def _crashed(cause: BaseException) -> RuntimeError:
    """``cause`` as litdata's prefetch thread re-raises it."""
    wrapped = RuntimeError("Chunk prefetch thread crashed while waiting for /cache/fragments/f/chunk-0.bin")
    wrapped.__cause__ = cause
    return wrapped


def test_every_clients_404_is_missing_data_and_every_other_failure_a_fault() -> None:
    """The same rule for a backend's MissingFileError (az, gs), obstore's and boto3's answers (litdata's S3)."""
    obstore_404 = FileNotFoundError("Object at location store/fragments/f/chunk-0.bin not found: ... 404 Not Found")
    missing = [
        MissingFileError("no file 'fragments/f/chunk-0.bin' in gs://bucket/store"),
        obstore_404,
        ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject"),
        ClientError({"Error": {"Code": "NoSuchKey", "Message": "The specified key does not exist."}}, "GetObject"),
    ]
    for error in missing:
        assert missing_object(_crashed(error)) is error
        assert download_fault(_crashed(error)) is None
    faults = [
        ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "GetObject"),
        ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject"),
        ConnectionRefusedError(111, "Connection refused"),
        StorageError("cannot read 'fragments/f/chunk-0.bin' (endpoint http://x): timed out"),
    ]
    for error in faults:
        assert missing_object(_crashed(error)) is None
        assert download_fault(_crashed(error)) is error
    # A file the operating system did not find (a cache file, errno set) is neither: litdata's damage path.
    local = FileNotFoundError(2, "No such file or directory", "/cache/fragments/f/chunk-0.bin")
    assert missing_object(_crashed(local)) is None and download_fault(_crashed(local)) is None
