"""A store root on S3 or an S3-compatible service: the one module that talks to object storage.

``storage_options`` may be written as boto3, object_store (Lance, Delta, polars,
obstore) or fsspec users write them; :mod:`.options` maps them to boto3 client keyword
arguments, the dictionary litdata takes too, so one set of options serves the store
and its streaming.

Why boto3 and not obstore for the store's own I/O: obstore's runtime is not
fork-safe, and a process that used it before a ``DataLoader`` forks its workers makes
litdata's obstore chunk downloads in those workers hang. boto3 clients are rebuilt
per process here, so forking is safe.

Concurrency: :meth:`S3Storage.put_if_absent` is a conditional PUT
(``If-None-Match: *``), atomic on S3 and on moto. Every other write is a plain PUT,
atomic per object.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from litstore.errors import InvalidArgumentError, MissingFileError, StorageError
from litstore.storage.base import FileInfo, RemoteInput, Storage, check_path
from litstore.storage.options import s3_client_options

_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
_ALREADY_EXISTS = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


class S3Storage(Storage):
    """A store root at ``s3://bucket/prefix``."""

    concurrent_reads = 8  # (records down a chain, ranges of one file: a round trip each)

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        if not url.startswith("s3://"):
            raise StorageError(f"not an s3:// URL: {url!r}")
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise StorageError(f"no bucket in {url!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.options: dict[str, Any] = s3_client_options(options)
        self.bytes_read = 0
        self._client: Any = None
        self._client_pid = -1

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r})"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to, as boto3 resolved it (options, ``AWS_ENDPOINT_URL``, or AWS's)."""
        return str(self.client.meta.endpoint_url)

    def litdata_input(self) -> RemoteInput:
        """The root's URL, with the same boto3 options (litdata passes them to its S3 client).

        Plain http is judged from the endpoint boto3 resolved, so an endpoint set only
        through ``AWS_ENDPOINT_URL`` streams as it looks up.
        """
        endpoint = self.endpoint
        return RemoteInput(self.url, dict(self.options), endpoint.startswith("http://"), endpoint)

    def _key(self, path: str) -> str:
        check_path(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    @property
    def client(self) -> Any:
        if self._client is None or self._client_pid != os.getpid():
            try:
                self._client = boto3.session.Session().client("s3", **self.options)
            except (TypeError, ValueError) as exc:  # a value boto3 refuses (the keys are checked already)
                raise InvalidArgumentError(f"storage_options for {self.url} are not usable: {exc}") from exc
            except BotoCoreError as exc:
                raise StorageError(f"cannot make an S3 client for {self.url}: {exc}") from exc
            self._client_pid = os.getpid()
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _failure(self, action: str, path: str, exc: Exception) -> StorageError:
        """S3's refusal, or a network fault (no connection, a timeout, http against https), naming the endpoint."""
        return StorageError(f"cannot {action} {path!r} in {self.url} (endpoint {self.endpoint}): {exc}")

    @contextmanager
    def _translated(self, action: str, path: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _NOT_FOUND:
                raise MissingFileError(f"no file {path!r} in {self.url}") from exc
            raise self._failure(action, path, exc) from exc
        except BotoCoreError as exc:
            raise self._failure(action, path, exc) from exc

    def _succeeds(self, action: str, path: str, call: Callable[[], Any], refusals: set[str]) -> bool:
        """Run ``call``: ``False`` if S3 refused it with one of ``refusals``, ``True`` if it succeeded."""
        try:
            call()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in refusals:
                return False
            raise self._failure(action, path, exc) from exc
        except BotoCoreError as exc:
            raise self._failure(action, path, exc) from exc
        return True

    def exists(self, path: str) -> bool:
        head = partial(self.client.head_object, Bucket=self.bucket, Key=self._key(path))
        return self._succeeds("look up", path, head, _NOT_FOUND)

    def read(self, path: str) -> bytes:
        with self._translated("read", path):
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(path))["Body"].read()
        self.bytes_read += len(data)
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``path`` (fewer if the object is shorter)."""
        key = self._key(path)
        if end <= start:
            if not self.exists(path):
                raise MissingFileError(f"no file {path!r} in {self.url}")
            return b""
        with self._translated("read", path):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "InvalidRange":
                    raise
                return b""  # S3 refuses a range that starts at or past the end of the object
            data: bytes = response["Body"].read()
        self.bytes_read += len(data)
        return data

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:  # (a PUT is durable)
        with self._translated("write", path):
            self.client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        put = partial(self.client.put_object, Bucket=self.bucket, Key=self._key(path), Body=data, IfNoneMatch="*")
        return self._succeeds("create", path, put, _ALREADY_EXISTS)

    def names(self, prefix: str) -> list[str]:
        """Names of the entries directly under ``prefix`` (objects and sub-prefixes)."""
        base = self._key(prefix).rstrip("/") + "/" if prefix else (self.prefix + "/" if self.prefix else "")
        names: set[str] = set()
        with self._translated("list", prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base, Delimiter="/"
            ):
                names.update(entry["Key"][len(base) :] for entry in page.get("Contents", []))
                names.update(entry["Prefix"][len(base) :].rstrip("/") for entry in page.get("CommonPrefixes", []))
        return sorted(name for name in names if name)

    def walk(self, prefix: str) -> list[FileInfo]:
        """Every object under ``prefix``: (path relative to the root, size, modified time)."""
        base = self._key(prefix).rstrip("/") + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        found: list[FileInfo] = []
        with self._translated("list", prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
                for entry in page.get("Contents", []):
                    found.append(FileInfo(entry["Key"][strip:], int(entry["Size"]), entry["LastModified"].timestamp()))
        return found

    def delete(self, path: str) -> None:
        with self._translated("delete", path):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(path))

    def delete_tree(self, path: str) -> None:
        keys = [self._key(found.path) for found in self.walk(path)]
        with self._translated("delete", path):
            for start in range(0, len(keys), 1000):
                objects = [{"Key": key} for key in keys[start : start + 1000]]
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})

    def write_file(self, path: str, local: str) -> None:
        with self._translated("upload", path):
            self.client.upload_file(local, self.bucket, self._key(path))
