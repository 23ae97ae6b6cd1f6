"""What the local storage made durable, watched as it runs: the one watcher of the durable-commit tests.

Power loss cannot be simulated here; the tests hold to the order of the durable steps on
the real local storage. The :func:`watching` fixture records (and delegates) its
``sync``, ``put_if_absent``, ``write``, ``writing`` and directory ``fsync``. A
directory's fsync makes durable the entries it holds at that moment, so each one records
the names the directory held then: a new name is durable once some fsync of its
directory saw it. Before a commit record (``versions/...``) is created, every file the
write made since :meth:`Watch.snapshot` that a record may name must be fsync'd and
named durably, up the tree: what is not is kept in :attr:`Watch.undurable`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from litstore.format import layout
from litstore.storage import local
from litstore.storage.local import LocalStorage


class Watch:
    """What the local storage made durable, in order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.synced: set[str] = set()  # files fsync'd (sync, put_if_absent's own fsync, a durable write)
        self.named: dict[Path, set[str]] = {}  # directory -> the entries some fsync of it saw
        self.events: list[tuple[str, str]] = []  # ("write" | "put" | "sync", path) in order
        self.before: set[Path] = set()  # every path that existed when the watched operation began
        self.records: list[str] = []  # the commit records created
        self.undurable: list[tuple[str, list[str]]] = []  # (record, what it may name that was not durable)
        self.failures: list[str] = []

    def snapshot(self) -> None:
        """Start watching an operation afresh: what exists now is old, and nothing is durable yet."""
        self.before = {self.root, *self.root.rglob("*")} if self.root.exists() else set()
        self.synced, self.named, self.events, self.records = set(), {}, [], []

    def name_durable(self, path: Path) -> bool:
        return path.name in self.named.get(path.parent, set())

    def new_files(self, *, named_by_records: bool = False) -> list[str]:
        """Files created since :meth:`snapshot` (temporary ones left out); ``named_by_records``: only those a
        commit record may name (not leases, the head hint or the records themselves)."""
        found = []
        for path in self.root.rglob("*"):
            relative = path.relative_to(self.root).as_posix()
            if not path.is_file() or path in self.before or layout.is_temporary(relative):
                continue
            if named_by_records and (
                relative == layout.HEAD_HINT or layout.is_lease(path.name) or relative.startswith("versions/")
            ):
                continue
            found.append(relative)
        return sorted(found)

    def check_chain(self, what: str, relative: str) -> None:
        """Every directory on the way to ``relative`` that the watched operation created must be named durably in
        its parent (the root's own name in its parent included, if it was created here)."""
        for step in self._made(self.root / relative):
            if not self.name_durable(step):
                self.failures.append(f"{what}: {step.relative_to(self.root.parent)} not named durably in its parent")

    def not_durable(self) -> list[str]:
        """What a record created now may name that would not outlive a power loss: files not fsync'd, and new
        names (files and directories) no fsync of their directory saw."""
        missing: set[str] = set()
        for relative in self.new_files(named_by_records=True):
            if relative not in self.synced:
                missing.add(relative)
            for step in self._made(self.root / relative):
                if not self.name_durable(step):
                    missing.add(f"{step.relative_to(self.root).as_posix()} (its name)")
        return sorted(missing)

    def _made(self, path: Path) -> Iterator[Path]:
        """``path`` and the directories above it, up to the root, that the watched operation created."""
        for step in [path, *path.parents]:
            if step in self.before:
                return
            yield step
            if step == self.root:
                return


@pytest.fixture
def watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    """A :class:`Watch` of the store at ``tmp_path / "store"`` (not created)."""
    seen = Watch(tmp_path / "store")
    sync, put, write, writing = LocalStorage.sync, LocalStorage.put_if_absent, LocalStorage.write, LocalStorage.writing
    directory_sync = local._sync_directory

    def recording_directory(directory: Path) -> None:
        names = set(os.listdir(directory))
        directory_sync(directory)
        seen.named.setdefault(Path(directory), set()).update(names)

    def recording_sync(self: LocalStorage, paths: Any) -> None:
        sync(self, paths)
        seen.synced.update(paths)
        seen.events.extend(("sync", path) for path in paths)

    def recording_put(self: LocalStorage, path: str, data: bytes) -> bool:
        if path.startswith("versions/"):
            missing = seen.not_durable()
            if missing:
                seen.undurable.append((path, missing))
        created = put(self, path, data)
        if created:
            seen.synced.add(path)  # put_if_absent writes through fsync, and its name
            seen.events.append(("put", path))
        if created and path.startswith("versions/"):
            seen.records.append(path)
            assert seen.name_durable(seen.root / path), f"the name of record {path} was not made durable"
        return created

    def recording_write(self: LocalStorage, path: str, data: bytes, *, durable: bool = False) -> None:
        write(self, path, data, durable=durable)
        # A new inode: whatever was synced under this name before is not this file, unless written durably.
        (seen.synced.add if durable else seen.synced.discard)(path)
        seen.events.append(("write", path))

    @contextmanager
    def recording_writing(self: LocalStorage, path: str, *, durable: bool = False) -> Iterator[Any]:
        with writing(self, path, durable=durable) as handle:
            yield handle
        (seen.synced.add if durable else seen.synced.discard)(path)
        seen.events.append(("write", path))

    monkeypatch.setattr(local, "_sync_directory", recording_directory)
    monkeypatch.setattr(LocalStorage, "sync", recording_sync)
    monkeypatch.setattr(LocalStorage, "put_if_absent", recording_put)
    monkeypatch.setattr(LocalStorage, "write", recording_write)
    monkeypatch.setattr(LocalStorage, "writing", recording_writing)
    yield seen
