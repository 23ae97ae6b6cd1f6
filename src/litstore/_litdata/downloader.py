"""litdata's chunk downloads: through litstore's own storage, plain-http S3, and a download's fault told from damage.

litdata's Azure downloader wants ``azure://`` URLs and azure-storage-blob, its GCS
downloader google-cloud-storage, and neither takes object_store's options. So a
stream from a root litstore reaches through obstore (``az://``, ``abfs://``,
``gs://``) hands litdata the input directory ``litstore+<root URL>`` and registers,
through litdata's public ``register_downloader``, :class:`StorageDownloader` for that
prefix: it reads each chunk through the store's own storage backend (any object
with the :class:`ChunkSource` methods), which travels to DataLoader workers in
litdata's ``storage_options``. The prefix is litstore's own, so litdata's
downloaders for ``gs://`` and ``azure://`` stay as they are for everything else in
the process. What the backend refuses holds in the workers too: obstore's backend
refuses a process forked after its parent used obstore (it would hang), so such a
stream takes ``multiprocessing_context="spawn"`` workers.

litdata builds its obstore client with fixed client options, which override
obstore's ``AWS_ALLOW_HTTP`` setting, so it refuses ``http://`` endpoints. This
module registers, through litdata's public ``register_downloader``, a subclass of its
S3 downloader that only adds ``allow_http``. It overrides ``S3Downloader._get_store``,
a private litdata method: re-check it when the litdata pin moves.

litdata downloads chunks in a prefetch thread and re-raises its failure as a
``RuntimeError`` chained to the original. Two functions read that chain, so that a
failed download means the same on every backend: :func:`missing_object` finds the
service's answer that a chunk is not there (HTTP 404: a backend's
``MissingFileError`` on ``az://`` and ``gs://``; obstore's ``FileNotFoundError`` or
botocore's ``404``/``NoSuchKey`` from litdata's own S3 downloads, obstore or boto3),
which is missing data; :func:`download_fault` finds any other storage client's error
(a refused connection, a timeout, a 5xx), which is a network or service fault.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import suppress
from typing import Any, Protocol, cast

from litdata.streaming.downloader import (
    _OBSTORE_CLIENT_OPTIONS,
    Downloader,
    S3Downloader,
    _cached_obstore_store,
    _obstore_credential_provider,
    register_downloader,
)
from litdata.streaming.resolver import Dir

from litstore.errors import MissingFileError, StorageError

#: The prefix of the input URL of a stream whose chunks :class:`StorageDownloader` reads.
STORAGE_PREFIX = "litstore+"
#: The ``storage_options`` entry that carries the :class:`ChunkSource` to such a stream's downloaders.
_SOURCE_OPTION = "litstore_chunk_source"


class ChunkSource(Protocol):
    """What :class:`StorageDownloader` reads a root's files through (a litstore ``Storage``); picklable."""

    @property
    def url(self) -> str: ...

    def read(self, path: str) -> bytes: ...

    def read_range(self, path: str, start: int, end: int) -> bytes: ...


class StorageDownloader(Downloader):
    """Downloads a stream's chunks through a :class:`ChunkSource`: the store's own storage backend.

    litdata hands every downloader the stream's ``storage_options``; this one's hold the
    source (see :func:`storage_input`). Each file is read whole, written to a temporary
    file named by the process and published by an atomic rename (litdata's rule for
    downloaders), so DataLoader workers sharing a cache never see half a chunk. A
    failed read raises the backend's own error (a ``StorageError`` naming the endpoint).
    """

    def __init__(
        self,
        remote_dir: str,
        cache_dir: str,
        chunks: list[dict[str, Any]],
        storage_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(remote_dir, cache_dir, chunks, storage_options)
        source = self._storage_options.get(_SOURCE_OPTION)
        if source is None:
            raise StorageError(f"{remote_dir} is a litstore stream's input: open it with store.dataset()")
        self._source: ChunkSource = source

    def _path(self, remote_filepath: str) -> str:
        """The path, relative to the store root, of ``remote_filepath`` (under this stream's input URL)."""
        root = self._remote_dir.rstrip("/") + "/"
        if not remote_filepath.startswith(root):
            raise ValueError(f"{remote_filepath!r} is not under the stream's input {self._remote_dir!r}")
        return remote_filepath[len(root) :]

    def download_file(self, remote_filepath: str, local_filepath: str) -> None:
        if os.path.exists(local_filepath):
            return
        data = self._source.read(self._path(remote_filepath))
        tmp_path = self._temp_download_path(local_filepath)
        try:
            with open(tmp_path, "wb") as file:
                file.write(data)
            self._publish_file(tmp_path, local_filepath)
        finally:
            with suppress(FileNotFoundError):
                os.remove(tmp_path)

    def download_bytes(self, remote_filepath: str, offset: int, length: int, local_chunkpath: str) -> bytes:
        data = self._source.read_range(self._path(remote_filepath), offset, offset + length)
        if len(data) != length:
            raise OSError(f"{remote_filepath} holds {len(data)} bytes at {offset}, not the {length} its index says")
        return data

    def download_fileobj(self, remote_filepath: str, fileobj: Any) -> None:
        fileobj.write(self._source.read(self._path(remote_filepath)))


def storage_input(source: ChunkSource) -> tuple[Dir, dict[str, Any]]:
    """litdata's input directory and ``storage_options`` for a stream whose chunks are read through ``source``.

    Registers :class:`StorageDownloader` in this process; a process that unpickles
    such a stream (a spawned DataLoader worker) calls :func:`read_through_storage`.
    """
    read_through_storage()
    return Dir(path=None, url=STORAGE_PREFIX + source.url), {_SOURCE_OPTION: source}


def read_through_storage() -> None:
    """Let litdata in this process download the chunks of streams made by :func:`storage_input`."""
    register_downloader(STORAGE_PREFIX, StorageDownloader, overwrite=True)


class _PlainHttpS3Downloader(S3Downloader):
    """litdata's S3 downloader, except that its obstore client may use plain http.

    Against an ``https://`` endpoint this class behaves exactly like litdata's.
    """

    def _get_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        def build() -> Any:
            meta = self._client.client.meta
            config: dict[str, Any] = {"endpoint": meta.endpoint_url, "virtual_hosted_style_request": False}
            if meta.region_name:
                config["region"] = meta.region_name
            return S3Store(
                bucket,
                config=config,  # type: ignore[arg-type]
                credential_provider=_obstore_credential_provider(self._client),
                client_options=cast(Any, {**_OBSTORE_CLIENT_OPTIONS, "allow_http": True}),
            )

        return _cached_obstore_store(self, build)


def allow_plain_http_s3() -> None:
    """Let litdata in this process download chunks from ``s3://`` over a plain-http endpoint."""
    register_downloader("s3://", _PlainHttpS3Downloader, overwrite=True)


#: Modules whose exceptions are a storage client's: the request failed, the bytes were never read.
_CLIENT_MODULES = ("obstore", "botocore", "boto3", "s3transfer", "urllib3", "requests", "google", "azure")


#: botocore's error codes for an object that is not there (``HeadObject`` answers a bare ``404``).
_NO_SUCH_KEY = frozenset({"404", "NoSuchKey", "NotFound"})


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from, nearest first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _says_missing(error: BaseException) -> bool:
    """Whether ``error`` is a storage service's answer that the object is not there."""
    if isinstance(error, MissingFileError):
        return True
    if isinstance(error, FileNotFoundError):
        # obstore raises the built-in FileNotFoundError for a 404; one from the operating system carries an errno.
        return error.errno is None and "not found" in str(error).lower()
    response = getattr(error, "response", None)  # botocore's ClientError
    if type(error).__module__.startswith("botocore") and isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        return code in _NO_SUCH_KEY or response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404
    return False


def missing_object(exc: BaseException) -> BaseException | None:
    """The service's answer that an object is not there (HTTP 404) behind ``exc``, if there is one.

    What a backend raises when a chunk the version lists is gone from the bucket: a
    litstore ``MissingFileError`` (read by :class:`StorageDownloader`), obstore's
    ``FileNotFoundError`` or botocore's ``ClientError`` with code ``404``, ``NoSuchKey`` or
    ``NotFound`` (litdata's S3 downloader: obstore for chunks, boto3 in a worker forked
    after obstore started, and for ranged reads). Missing data, never a network fault.
    """
    return next((error for error in error_chain(exc) if _says_missing(error)), None)


def download_fault(exc: BaseException) -> BaseException | None:
    """The storage client's error (a network or service fault) behind ``exc``, if there is one.

    Walks ``exc``'s chain of causes: an error raised by obstore, boto3 or another storage
    client, a litstore ``StorageError`` (a backend's, read by :class:`StorageDownloader`),
    or a connection error or timeout, means a chunk could not be downloaded, not that
    the chunk is damaged. The service's answer that the chunk is not there
    (:func:`missing_object`) is the opposite: missing data (``None``).
    """
    for error in error_chain(exc):
        if _says_missing(error):
            return None
        module = type(error).__module__.partition(".")[0]
        faults = (StorageError, ConnectionError, TimeoutError, socket.gaierror)
        if module in _CLIENT_MODULES or isinstance(error, faults):
            return error
    return None
