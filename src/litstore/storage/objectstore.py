"""Store roots on Azure Blob Storage and Google Cloud Storage, through obstore (Rust's ``object_store``).

=========================================  ===========================================
root                                       service
=========================================  ===========================================
``az://container/prefix``                  Azure Blob Storage (``abfs://`` alike;
``abfs://container@account.dfs.../prefix``  the account from the host or the options)
``gs://bucket/prefix``                     Google Cloud Storage
=========================================  ===========================================

``storage_options`` are object_store's configuration keys for the service (Azure:
``account_name``, ``access_key``, ``sas_key``, ``use_emulator``, ``endpoint``, ...;
GCS: ``service_account_key``, ``service_account_path``, ...), with or without their
``azure_``/``google_`` prefix, plus its client options (``allow_http``, ``timeout``,
``connect_timeout``, ...); the usual environment variables (``AZURE_STORAGE_ACCOUNT_NAME``,
``GOOGLE_APPLICATION_CREDENTIALS``, ...) fill in the rest, as obstore reads them. A key
obstore does not know raises :class:`~litstore.errors.InvalidArgumentError`.

Concurrency: :meth:`ObjectStorage.put_if_absent` is obstore's ``mode="create"``: a
conditional PUT (Azure ``If-None-Match: *``, GCS ``ifGenerationMatch=0``), atomic on
the service. A PUT whose response was lost is retried by obstore and then told the
object exists (``False``), or fails (:class:`StorageError`): the commit reads its
record back either way (:mod:`litstore.txn.race`).

Forks: obstore's runtime is process-wide and not fork-safe: in a process forked after
this one used obstore, every obstore call hangs (measured on obstore 0.12: even after
a parent used only a ``MemoryStore``). Such a process gets a :class:`StorageError`
saying so instead of a hang; stream with ``multiprocessing_context="spawn"`` (or
``"forkserver"``) DataLoader workers. This is why ``s3://`` stays on boto3.

Streaming: litdata downloads chunks through this backend (:meth:`litdata_input`), so
what it refuses in a forked process it refuses there too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from litstore.errors import InvalidArgumentError, MissingFileError, StorageError
from litstore.storage.base import FileInfo, RemoteInput, Storage, check_path

__all__ = ["ObjectStorage"]

#: object_store's client options (every other key is the service's configuration).
_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "timeout",
        "user_agent",
    }
)

#: The pid of the process that first used obstore here; a forked child must not use it.
_USED_IN: int | None = None


def _note_used() -> None:
    global _USED_IN
    if _USED_IN is None:
        _USED_IN = os.getpid()


def _check_not_forked(url: str) -> None:
    if _USED_IN is not None and _USED_IN != os.getpid():
        raise StorageError(
            f"cannot reach {url}: this process was forked from one that had used obstore, whose runtime does "
            "not survive a fork (every call would hang). Start workers with multiprocessing_context='spawn' "
            "or 'forkserver' (DataLoader(..., multiprocessing_context='spawn'))"
        )


def _obstore_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed obstore call: any ``Exception``, or a panic inside obstore (a ``BaseException``)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


class ObjectStorage(Storage):
    """A store root on an object store obstore reaches (``az://``, ``abfs://``, ``gs://``; ``s3://`` in tests)."""

    concurrent_reads = 8  # (records down a chain, ranges of one file: a round trip each)

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme
        container, _, host = parts.netloc.partition("@")
        if scheme not in ("az", "abfs", "abfss", "gs", "s3") or not container:
            raise StorageError(f"not an az://, abfs://, gs:// or s3:// URL with a bucket or container: {url!r}")
        self.scheme = scheme
        self.bucket = container
        self.prefix = parts.path.strip("/")
        self.options: dict[str, Any] = {}
        for name, value in (options or {}).items():
            if not isinstance(name, str):
                raise InvalidArgumentError(f"storage_options keys are strings, got {name!r}")
            self.options[name.lower()] = value
        if host and scheme in ("abfs", "abfss"):
            self.options.setdefault("account_name", host.partition(".")[0])
        self.bytes_read = 0
        self._store: Any = None
        self._store_pid = -1
        self.store  # noqa: B018 - build it now: a bad option is refused when the store is opened

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None
        return state

    @property
    def url(self) -> str:
        root = f"{self.scheme}://{self.bucket}"
        return f"{root}/{self.prefix}" if self.prefix else root

    @property
    def endpoint(self) -> str:
        """Where requests go, as errors name it."""
        for name in ("endpoint", "azure_endpoint", "aws_endpoint", "endpoint_url", "google_base_url", "base_url"):
            if self.options.get(name):
                return str(self.options[name])
        if self.scheme == "gs":
            return "https://storage.googleapis.com"
        if self.scheme == "s3":
            return "AWS S3"
        if str(self.options.get("use_emulator", "")).lower() in ("true", "1"):
            return os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000")
        return f"https://{self.options.get('account_name', '<account>')}.blob.core.windows.net"

    def litdata_input(self) -> RemoteInput:
        """litdata downloads the chunks through this backend: it has no downloader of its own that takes obstore's
        options (see :mod:`litstore._litdata.downloader`)."""
        return RemoteInput(self.url, {}, endpoint=self.endpoint, storage=self)

    @property
    def store(self) -> Any:
        """The obstore store of this process (made again in a new process; refused in a forked one)."""
        _check_not_forked(self.url)
        if self._store is None or self._store_pid != os.getpid():
            from obstore.exceptions import BaseError
            from obstore.store import AzureStore, GCSStore, S3Store

            client = {name: value for name, value in self.options.items() if name in _CLIENT_OPTIONS}
            config = {name: value for name, value in self.options.items() if name not in _CLIENT_OPTIONS}
            kind = {"gs": GCSStore, "s3": S3Store}.get(self.scheme, AzureStore)
            try:
                self._store = kind(self.bucket, config=config or None, client_options=client or None)  # type: ignore[arg-type]
            except (BaseError, ValueError, TypeError) as exc:
                raise InvalidArgumentError(
                    f"storage_options for {self.url} are not usable: {exc}. Keys are object_store's configuration "
                    f"keys for the service, or its client options: {', '.join(sorted(_CLIENT_OPTIONS))}"
                ) from exc
            self._store_pid = os.getpid()
            _note_used()
        return self._store

    def _key(self, path: str) -> str:
        check_path(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    def _base(self, prefix: str) -> str | None:
        """The object path of directory ``prefix`` (``""``: the root), for listing."""
        if prefix:
            return self._key(prefix)
        return self.prefix or None

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    @contextmanager
    def _translated(self, action: str, path: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError as exc:  # obstore's NotFoundError
            raise MissingFileError(f"no file {path!r} in {self.url}") from exc
        except StorageError:
            raise
        except BaseException as exc:
            if not _obstore_failure(exc):
                raise
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(
                f"cannot {action} {path!r} in {self.url} (endpoint {self.endpoint}): {type(exc).__name__}: {detail}"
            ) from exc

    def exists(self, path: str) -> bool:
        import obstore

        key = self._key(path)
        try:
            with self._translated("look up", path):
                obstore.head(self.store, key)
        except MissingFileError:
            return False
        return True

    def read(self, path: str) -> bytes:
        import obstore

        key = self._key(path)
        with self._translated("read", path):
            data = obstore.get(self.store, key).bytes().to_bytes()
        self.bytes_read += len(data)
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return bytes(self.read_ranges(path, [(start, end)])[0])

    def read_ranges(self, path: str, spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
        """Every span in one call (obstore fetches them concurrently, merging close ones)."""
        import obstore

        key = self._key(path)
        wanted = [(start, end) for start, end in spans if end > start]
        if not wanted:
            if spans and not self.exists(path):
                raise MissingFileError(f"no file {path!r} in {self.url}")
            return [b"" for _ in spans]
        size = None
        with self._translated("read", path):
            try:
                got = obstore.get_ranges(self.store, key, starts=[s for s, _ in wanted], ends=[e for _, e in wanted])
            except FileNotFoundError:
                raise
            except BaseException as exc:  # a range starting at or past the end (416, or a panic merging ranges)
                if not _obstore_failure(exc):
                    raise
                size = obstore.head(self.store, key)["size"]
                fetch = [(start, min(end, size)) for start, end in wanted if min(end, size) > start]
                starts, ends = [start for start, _ in fetch], [end for _, end in fetch]
                got = obstore.get_ranges(self.store, key, starts=starts, ends=ends) if fetch else []
        data = iter(bytes(part) for part in got)
        results: list[bytes | memoryview] = []
        for start, end in spans:
            clipped = end if size is None else min(end, size)
            results.append(next(data) if clipped > start else b"")
        self.bytes_read += sum(len(part) for part in results)
        return results

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:  # (a PUT is durable)
        import obstore

        key = self._key(path)
        with self._translated("write", path):
            obstore.put(self.store, key, data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        key = self._key(path)
        with self._translated("create", path):
            try:
                obstore.put(self.store, key, data, mode="create")
            except (AlreadyExistsError, PreconditionError):
                return False
        return True

    def names(self, prefix: str) -> list[str]:
        import obstore

        base = self._base(prefix)
        if prefix:
            check_path(prefix)
        with self._translated("list", prefix):
            listed = obstore.list_with_delimiter(self.store, base)
        strip = len(base) + 1 if base else 0
        found = {entry["path"][strip:] for entry in listed["objects"]}
        found.update(entry[strip:] for entry in listed["common_prefixes"])
        return sorted(name for name in found if name and "/" not in name)

    def walk(self, prefix: str) -> list[FileInfo]:
        import obstore

        base = self._key(prefix)
        found: list[FileInfo] = []
        with self._translated("list", prefix):
            for batch in obstore.list(self.store, base):
                for entry in batch:
                    if entry["path"].startswith(base + "/"):
                        found.append(
                            FileInfo(
                                self._relative(entry["path"]), int(entry["size"]), entry["last_modified"].timestamp()
                            )
                        )
        return found

    def delete(self, path: str) -> None:
        import obstore

        key = self._key(path)
        try:
            with self._translated("delete", path):
                obstore.delete(self.store, key)
        except MissingFileError:
            pass  # deleting what is not there is fine

    def delete_tree(self, prefix: str) -> None:
        import obstore

        keys = [self._key(found.path) for found in self.walk(prefix)]
        with self._translated("delete", prefix):
            for start in range(0, len(keys), 1000):
                obstore.delete(self.store, keys[start : start + 1000])

    def write_file(self, path: str, local: str) -> None:
        import obstore

        key = self._key(path)
        with self._translated("upload", path), open(local, "rb") as file:
            obstore.put(self.store, key, file)
