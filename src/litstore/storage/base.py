"""The storage contract: the few operations litstore needs from the place a store lives.

Every path handed to a :class:`Storage` is ``/``-separated and relative to the store
root; :func:`check_path` refuses anything else (absolute paths, ``..``, empty or
``.`` segments, backslashes, control characters), so a name read from a store's own
metadata can never address a file outside the root. Backends add what their medium
needs on top (the local backend refuses to follow symlinks and to read anything but
regular files).

Each backend translates its own errors into :class:`~litstore.errors.StorageError`
at its boundary, and reports a missing file as :class:`MissingFileError`.

Concurrency: :meth:`Storage.put_if_absent` is atomic on every backend (locally a hard
link, which fails if the target exists; on S3 a conditional PUT; in memory a lock),
so of two writers creating the same commit record exactly one succeeds. Every other
write replaces a whole file atomically, so a reader never sees a half-written file,
save :meth:`Storage.overwrite`, for the head hint, which every reader checks.

How litdata's ``StreamingDataset`` reaches a root is the backend's to say
(:meth:`Storage.litdata_input`): it reads a local directory in place, downloads from a
remote URL with the backend's options, downloads through the backend itself, or
cannot reach the root at all.

A new backend is one module with a subclass of :class:`Storage`, one entry in
:data:`litstore.storage.BACKENDS`, and one test module subclassing
:class:`litstore.testing.StorageTests`.
"""

from __future__ import annotations

import io
import mmap
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from litstore.errors import MissingFileError, UnsafePathError

__all__ = [
    "FileInfo",
    "LitdataInput",
    "LocalInput",
    "MissingFileError",
    "RemoteInput",
    "Storage",
    "UnsafePathError",
    "check_path",
]

# Printable ASCII without separators or shell-hostile characters.
_SEGMENT = re.compile(r"[A-Za-z0-9_.@+=,-]{1,255}")


class FileInfo(NamedTuple):
    """One file found by :meth:`Storage.walk`."""

    path: str  # relative to the store root
    size: int
    modified: float  # seconds since the epoch


class LocalInput(NamedTuple):
    """litdata reads the root's files in place: the root is the local ``directory``."""

    directory: str


class RemoteInput(NamedTuple):
    """litdata downloads the root's files from ``url``, its ``StreamingDataset`` given ``storage_options``."""

    url: str
    storage_options: dict[str, Any]
    #: The service is reached over plain http (a local S3 such as moto or MinIO), which
    #: litdata's own downloader does not do: litstore registers one that does.
    plain_http: bool = False
    #: The service's endpoint, as errors name it (``""``: the client's default).
    endpoint: str = ""
    #: The backend litdata's downloads go through, where litdata has no downloader of
    #: its own for the service (``az://``, ``gs://``: see :mod:`litstore._litdata.downloader`);
    #: ``None``: litdata downloads from ``url`` itself.
    storage: Storage | None = None


#: How litdata's streaming reaches a root (:meth:`Storage.litdata_input`).
LitdataInput = LocalInput | RemoteInput


def check_path(path: str) -> str:
    """Return ``path`` if it is a plain relative path inside the root, else raise :class:`UnsafePathError`."""
    if not isinstance(path, str) or not path:
        raise UnsafePathError(f"not a path: {path!r}")
    for segment in path.split("/"):
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            raise UnsafePathError(f"unsafe path {path!r} (segment {segment!r}): paths must stay inside the store")
    return path


class Storage(ABC):
    """Where a store's files live. See the module docstring for the rules every backend keeps."""

    #: The keyword arguments the backend was opened with (S3: boto3 client options);
    #: litdata's streaming gets the same dictionary.
    options: Mapping[str, Any] = {}
    #: Reads worth having in flight at once when a caller knows several small files it will
    #: read (commit records down a chain): 1 where a read costs microseconds (local, memory),
    #: more where each is a network round trip.
    concurrent_reads: int = 1

    @property
    @abstractmethod
    def url(self) -> str:
        """Where the root is, as a user would write it (a path, ``s3://bucket/prefix``, ...)."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file. Raises :class:`MissingFileError` if there is no file (a directory is none)."""

    @abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the file: fewer if it is shorter, ``b""`` if ``end <= start``.

        Raises :class:`MissingFileError` if there is no file.
        """

    def read_ranges(self, path: str, spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
        """:meth:`read_range` of each ``(start, end)`` of ``spans``, in order: what a lookup of many pages of
        one file reads. A backend that can open the file once for all of them overrides it; where reads are
        round trips (:attr:`concurrent_reads`), up to that many are in flight at once."""
        if self.concurrent_reads > 1 and len(spans) > 1:
            with ThreadPoolExecutor(max_workers=min(self.concurrent_reads, len(spans))) as pool:
                return list(pool.map(lambda span: self.read_range(path, *span), spans))
        return [self.read_range(path, start, end) for start, end in spans]

    @abstractmethod
    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        """Create or replace the file atomically: readers see the old bytes or the new ones.

        ``durable``: the new bytes are durable before any reader can see them (locally
        fsync'd before the rename, then the directory): for a file readers use as soon as it
        is there (a tombstone, a checkpoint gc writes, a moved tag, the config). An object
        store's PUT is durable as it returns."""

    def overwrite(self, path: str, data: bytes) -> None:
        """Create or overwrite the file, without :meth:`write`'s atomicity: a reader may see the old bytes,
        the new ones or a mix, and racing writers may leave a mix. For small files every reader checks
        (the head hint); by default it is :meth:`write`."""
        self.write(path, data)

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create the file unless it exists; ``False`` if it did. Atomic: of racing callers one wins."""

    def sync(self, paths: Sequence[str]) -> None:  # noqa: B027 (deliberately no-op, not abstract)
        """Make the files ``paths`` and their names durable: what a commit record names must outlive a power
        loss once the record does. A file that is gone is skipped. Nothing to do by default: an object
        store's finished PUT is durable."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether the file exists (a directory is not a file)."""

    @abstractmethod
    def names(self, prefix: str) -> list[str]:
        """Sorted names of the files and directories directly under ``prefix`` (``""``: the root).

        A missing prefix, or a file, has no entries: ``[]``.
        """

    @abstractmethod
    def walk(self, prefix: str) -> list[FileInfo]:
        """Every file under directory ``prefix`` at any depth, in no particular order; ``[]`` if none.

        Temporary files of unfinished writes are excluded. ``prefix`` cannot be ``""``:
        nothing walks (or, through :meth:`delete_tree`, deletes) a whole root.
        """

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove the file; nothing happens if it does not exist. Never follows a link out of the root."""

    def delete_tree(self, prefix: str) -> None:
        """Remove every file under directory ``prefix``."""
        for found in self.walk(prefix):
            self.delete(found.path)

    def temporary_files(self, prefix: str) -> list[FileInfo]:
        """Files under ``prefix`` left by writes that never finished (for gc); none by default."""
        check_path(prefix)
        return []

    def listing(self, prefix: str) -> tuple[list[FileInfo], list[FileInfo]]:
        """:meth:`walk` and :meth:`temporary_files` of ``prefix`` (for gc); a backend that can list both at
        once overrides it."""
        return self.walk(prefix), self.temporary_files(prefix)

    def local_path(self, path: str) -> str | None:
        """The local file system path of the file, if the backend has one (litdata then reads it in place)."""
        check_path(path)
        return None

    def litdata_input(self) -> LitdataInput | None:
        """How litdata's ``StreamingDataset`` reaches the root's files; ``None``: it cannot (by default).

        A :class:`LocalInput` directory is read in place (litdata memory-maps chunks); a
        :class:`RemoteInput` URL is downloaded from, chunk by chunk, into a local cache,
        by litdata's downloader or, where it names one, through a litstore backend.
        With ``None``, ``dataset()`` raises.
        """
        return None

    def mapped(self, path: str) -> mmap.mmap | bytes | None:
        """The whole file memory-mapped, if the backend can (then reads are slices); else ``None``."""
        check_path(path)
        return None

    @contextmanager
    def staging(self, prefix: str) -> Iterator[str]:
        """A local directory whose files become the files under ``prefix`` when the block ends.

        litdata's writer writes to a local directory; this is how its output reaches
        any backend. By default a temporary directory uploaded file by file. If the
        block raises, some of its files may have been published (locally all of them).
        """
        check_path(prefix)  # refuse before the caller writes anything
        directory = tempfile.mkdtemp(prefix="litstore-stage-")
        try:
            yield directory
            for file in sorted(Path(directory).rglob("*")):
                if file.is_file():
                    self.write_file(f"{prefix}/{file.relative_to(directory).as_posix()}", str(file))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    @contextmanager
    def reading(self, path: str) -> Iterator[BinaryIO]:
        """The file open for reading (seekable), for readers that take a large file a part at a time.

        By default its bytes, read whole (:meth:`read`); locally the open file itself.

        Raises:
            MissingFileError: there is no such file.
        """
        yield io.BytesIO(self.read(path))

    @contextmanager
    def writing(self, path: str, *, durable: bool = False) -> Iterator[BinaryIO]:
        """A file (open for reading and writing, empty) whose bytes become ``path`` when the block ends.

        For files too large to hold as bytes (a checkpoint or key run of a store of a
        hundred million records): written as they are made, then published whole, as
        :meth:`write` publishes (``durable`` as there). By default spooled through a local
        temporary file and handed to :meth:`write_file`; if the block raises, nothing is published.
        """
        check_path(path)
        with tempfile.TemporaryDirectory(prefix="litstore-spool-") as directory:
            spool = os.path.join(directory, "file")
            with open(spool, "w+b") as handle:
                yield handle
            self.write_file(path, spool)

    def write_file(self, path: str, local: str) -> None:
        """Copy a local file into the store (backends may stream it)."""
        self.write(path, Path(local).read_bytes())
