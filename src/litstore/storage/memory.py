"""Stores that live in this process's memory: ``memory://<name>``.

For tests and throwaway work. Every :class:`MemoryStorage` opened with the same name
in one process shares the same files, so ``Store.create("memory://x")`` and
``litstore.open("memory://x")`` see one store. Nothing survives the process, and
litdata cannot stream from memory (``dataset()`` raises).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from litstore.errors import MissingFileError
from litstore.storage.base import FileInfo, LitdataInput, Storage, check_path

_VOLUMES: dict[str, dict[str, tuple[bytes, float]]] = {}
_LOCK = threading.Lock()


class MemoryStorage(Storage):
    """A store root in memory; thread-safe."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self._name = url.removeprefix("memory://").strip("/")
        self.options = dict(options or {})
        with _LOCK:
            self._files = _VOLUMES.setdefault(self._name, {})

    def __repr__(self) -> str:
        return f"MemoryStorage({self.url!r})"

    @property
    def url(self) -> str:
        return f"memory://{self._name}"

    def litdata_input(self) -> LitdataInput | None:
        """``None``: litdata reads files or URLs, and another process cannot see this memory."""
        return None

    def read(self, path: str) -> bytes:
        check_path(path)
        with _LOCK:
            found = self._files.get(path)
        if found is None:
            raise MissingFileError(f"no file {path!r} in {self.url}")
        return found[0]

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return self.read(path)[start : max(start, end)]

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        check_path(path)
        with _LOCK:
            self._files[path] = (bytes(data), time.time())

    def put_if_absent(self, path: str, data: bytes) -> bool:
        check_path(path)
        with _LOCK:
            if path in self._files:
                return False
            self._files[path] = (bytes(data), time.time())
            return True

    def exists(self, path: str) -> bool:
        check_path(path)
        with _LOCK:
            return path in self._files

    def names(self, prefix: str) -> list[str]:
        base = check_path(prefix) + "/" if prefix else ""
        with _LOCK:
            paths = list(self._files)
        return sorted({path[len(base) :].split("/", 1)[0] for path in paths if path.startswith(base)})

    def walk(self, prefix: str) -> list[FileInfo]:
        base = check_path(prefix) + "/"
        with _LOCK:
            found = [(path, len(data), modified) for path, (data, modified) in self._files.items()]
        return sorted(FileInfo(path, size, modified) for path, size, modified in found if path.startswith(base))

    def delete(self, path: str) -> None:
        check_path(path)
        with _LOCK:
            self._files.pop(path, None)
