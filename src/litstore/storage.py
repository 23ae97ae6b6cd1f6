"""Where a store's files live: the one module that does file I/O on a store root.

Paths are ``/``-separated and relative to the store root. Every OS error is
translated here into :class:`~litstore.errors.StorageError`.

Concurrency: :meth:`LocalStorage.put_if_absent` is atomic (a hard link, which fails
if the target exists), so of two writers creating the same commit record exactly
one succeeds. Every other write goes to a temporary name first and is renamed into
place, so a reader never sees a half-written file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from litstore.errors import StorageError


class LocalStorage:
    """A store root on the local file system."""

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

    def list(self, prefix: str) -> list[str]:
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
