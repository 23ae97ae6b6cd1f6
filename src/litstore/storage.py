"""Where a store's files live: the :class:`Storage` contract and the local file system.

Paths are ``/``-separated and relative to the store root. Each backend translates
its own errors into :class:`~litstore.errors.StorageError`. Backends:
:class:`LocalStorage` (here) and :class:`~litstore.s3.S3Storage`; :func:`open_storage`
picks one from the root.

Concurrency: ``put_if_absent`` is atomic on every backend (locally a hard link, which
fails if the target exists; on S3 a conditional PUT), so of two writers creating the
same commit record exactly one succeeds. Every other write replaces a whole file
atomically (locally: written under a temporary name, then renamed), so a reader
never sees a half-written file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from litstore.errors import StorageError


class Storage(Protocol):
    """What litstore needs from the place a store lives."""

    is_local: bool

    @property
    def url(self) -> str: ...
    def local_path(self, path: str) -> str | None: ...
    def exists(self, path: str) -> bool: ...
    def read(self, path: str) -> bytes: ...
    def read_range(self, path: str, start: int, end: int) -> bytes: ...
    def size(self, path: str) -> int: ...
    def write(self, path: str, data: bytes) -> None: ...
    def put_if_absent(self, path: str, data: bytes) -> bool: ...
    def names(self, prefix: str) -> list[str]: ...
    def walk(self, prefix: str) -> list[tuple[str, int, float]]: ...
    def delete(self, path: str) -> None: ...
    def delete_tree(self, path: str) -> None: ...
    def staging(self, path: str) -> Any: ...


def open_storage(root: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Storage:
    """The storage backend for ``root``: ``s3://bucket/prefix`` or a local directory."""
    if isinstance(root, str) and root.startswith("s3://"):
        from litstore.s3 import S3Storage

        return S3Storage(root, storage_options)
    if isinstance(root, str) and "://" in root and not root.startswith("file://"):
        raise ValueError(f"unsupported store location {root!r}: use a local path or s3://bucket/prefix")
    if storage_options:
        raise ValueError("storage_options apply to s3:// stores only")
    return LocalStorage(str(root).removeprefix("file://"))


class LocalStorage:
    """A store root on the local file system."""

    is_local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    @property
    def url(self) -> str:
        return str(self.root)

    def local_path(self, path: str) -> str:
        """The file system path of ``path``."""
        return str(self.root / path)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``path`` (fewer if the file is shorter)."""
        try:
            with open(self.root / path, "rb") as handle:
                handle.seek(start)
                return handle.read(max(end - start, 0))
        except OSError as exc:
            raise StorageError(f"cannot read {path!r} in {self.root}: {exc}") from exc

    def walk(self, prefix: str) -> list[tuple[str, int, float]]:
        """Every file under ``prefix``: (path relative to the root, size, modified time)."""
        found = []
        for directory, _, files in os.walk(self.root / prefix):
            for name in files:
                full = Path(directory) / name
                try:
                    status = full.stat()
                except FileNotFoundError:
                    continue
                found.append((full.relative_to(self.root).as_posix(), status.st_size, status.st_mtime))
        return found

    @contextmanager
    def staging(self, path: str) -> Iterator[str]:
        """The directory to write ``path``'s files into (locally: ``path`` itself)."""
        yield self.make_directory(path)

    def exists(self, path: str) -> bool:
        return (self.root / path).exists()

    def read(self, path: str) -> bytes:
        try:
            return (self.root / path).read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read {path!r} in {self.root}: {exc}") from exc

    def size(self, path: str) -> int:
        try:
            return (self.root / path).stat().st_size
        except OSError as exc:
            raise StorageError(f"cannot stat {path!r} in {self.root}: {exc}") from exc

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically: readers see the old file or the new one."""
        target = self.root / path
        temporary = self._temporary(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, target)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise StorageError(f"cannot write {path!r} in {self.root}: {exc}") from exc

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` unless it exists; ``False`` if it did.

        Atomic: of several writers racing for one path exactly one returns ``True``,
        and the file never exists half-written.
        """
        target = self.root / path
        temporary = self._temporary(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.link(temporary, target)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot create {path!r} in {self.root}: {exc}") from exc
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def names(self, prefix: str) -> list[str]:
        """Names of the entries directly under the directory ``prefix`` (empty if none)."""
        directory = self.root / prefix
        try:
            return sorted(entry.name for entry in os.scandir(directory) if not entry.name.startswith(".tmp-"))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {prefix!r} in {self.root}: {exc}") from exc

    def delete(self, path: str) -> None:
        try:
            (self.root / path).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {path!r} in {self.root}: {exc}") from exc

    def delete_tree(self, path: str) -> None:
        """Remove directory ``path`` and everything under it (nothing if it does not exist)."""
        try:
            shutil.rmtree(self.root / path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {path!r} in {self.root}: {exc}") from exc

    def make_directory(self, path: str) -> str:
        """Create directory ``path`` (and parents); returns its file system path."""
        target = self.root / path
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create directory {path!r} in {self.root}: {exc}") from exc
        return str(target)

    @staticmethod
    def _temporary(target: Path) -> Path:
        return target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
