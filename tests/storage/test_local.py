"""The storage contract on :class:`LocalStorage`, and the hostile stores only a local disk can hold.

A store's files are untrusted: a ``fragments`` directory may be a symbolic link to the
user's home, a chunk a link to ``/etc/passwd``, a file a FIFO nobody writes to. Each
test builds one such store by hand and checks that the backend refuses (or ignores)
it and that nothing outside the root changed.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from litstore.errors import StorageError, UnsafePathError
from litstore.storage.base import Storage
from litstore.storage.local import LocalStorage
from litstore.testing import StorageTests
from tests.conftest import tree_state


class TestLocalStorage(StorageTests):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return LocalStorage(tmp_path / "root")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root holding the user's own files, which no store call may touch."""
    directory = tmp_path / "outside"
    (directory / "t1").mkdir(parents=True)
    (directory / "t1" / "chunk-0.bin").write_bytes(b"user data")
    (directory / "secret").write_bytes(b"private")
    return directory


@pytest.mark.parametrize("path", ["../outside/secret", "../outside", "../escape", "/tmp/escape", "a/../../x"])
def test_unsafe_paths_never_reach_outside_the_root(root: Path, outside: Path, path: str) -> None:
    storage = LocalStorage(root)
    before = tree_state(outside.parent)
    for call in (
        lambda: storage.write(path, b"x"),
        lambda: storage.put_if_absent(path, b"x"),
        lambda: storage.delete(path),
        lambda: storage.delete_tree(path),
    ):
        with pytest.raises(UnsafePathError):
            call()
    assert tree_state(outside.parent) == before
    assert sorted(os.listdir(outside.parent)) == ["outside", "root"]


def test_directory_linked_outside_the_root_is_refused(root: Path, outside: Path) -> None:
    (root / "fragments").symlink_to(outside, target_is_directory=True)
    (root / "versions").mkdir()
    (root / "versions" / "1.json").write_bytes(b"{}")
    storage = LocalStorage(root)
    before = tree_state(outside)
    for call in (
        lambda: storage.read("fragments/secret"),
        lambda: storage.read_range("fragments/secret", 0, 4),
        lambda: storage.mapped("fragments/secret"),
        lambda: storage.local_path("fragments/secret"),
        lambda: storage.exists("fragments/secret"),
        lambda: storage.names("fragments"),
        lambda: storage.walk("fragments"),
        lambda: storage.walk("fragments/t1"),
        lambda: storage.temporary_files("fragments"),
        lambda: storage.delete("fragments/secret"),
        lambda: storage.delete("fragments/t1/chunk-0.bin"),
        lambda: storage.delete_tree("fragments"),
        lambda: storage.delete_tree("fragments/t1"),
        lambda: storage.write("fragments/t1/new", b"x"),
        lambda: storage.put_if_absent("fragments/new", b"x"),
    ):
        with pytest.raises(UnsafePathError):
            call()
    with pytest.raises(UnsafePathError), storage.staging("fragments/t2"):
        pytest.fail("staging into a linked directory was allowed")
    assert tree_state(outside) == before
    assert (root / "fragments").is_symlink()
    assert storage.names("") == ["fragments", "versions"]


def test_link_below_a_walked_directory_is_not_followed(root: Path, outside: Path) -> None:
    (root / "fragments" / "t0").mkdir(parents=True)
    (root / "fragments" / "t0" / "index.json").write_bytes(b"{}")
    (root / "fragments" / "t1").symlink_to(outside / "t1", target_is_directory=True)
    (root / "fragments" / "secret").symlink_to(outside / "secret")
    storage = LocalStorage(root)
    before = tree_state(outside)
    assert [info.path for info in storage.walk("fragments")] == ["fragments/t0/index.json"]
    storage.delete_tree("fragments")
    assert tree_state(outside) == before
    assert not os.path.lexists(root / "fragments")


def test_file_linked_outside_the_root_is_not_read(root: Path, outside: Path) -> None:
    (root / "config.json").symlink_to(outside / "secret")
    storage = LocalStorage(root)
    for call in (
        lambda: storage.read("config.json"),
        lambda: storage.read_range("config.json", 0, 3),
        lambda: storage.mapped("config.json"),
    ):
        with pytest.raises(UnsafePathError):
            call()
    assert (outside / "secret").read_bytes() == b"private"


def test_fifo_is_refused_without_waiting(root: Path) -> None:
    (root / "fragments").mkdir()
    (root / "fragments" / "chunk-0.bin").write_bytes(b"chunk")
    os.mkfifo(root / "fragments" / "pipe")
    storage = LocalStorage(root)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            storage.read("fragments/pipe")
        except StorageError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():
        with open(root / "fragments" / "pipe", "wb"):  # release the blocked reader before failing
            pass
        pytest.fail("reading a FIFO blocked")
    assert len(errors) == 1
    assert isinstance(errors[0], UnsafePathError)
    with pytest.raises(UnsafePathError):
        storage.read_range("fragments/pipe", 0, 10)
    assert [info.path for info in storage.walk("fragments")] == ["fragments/chunk-0.bin"]


def test_temporary_files_are_listed_for_gc_but_not_walked(root: Path) -> None:
    storage = LocalStorage(root)
    storage.write("fragments/t1/chunk-0.bin", b"chunk")
    left = f"fragments/t1/.tmp-{uuid.uuid4().hex}-chunk-1.bin"
    (root / left).write_bytes(b"half written")
    (root / "fragments/t1/.tmp-not-ours").write_bytes(b"a user's file")
    assert [info.path for info in storage.temporary_files("fragments")] == [left]
    assert sorted(info.path for info in storage.walk("fragments")) == [
        "fragments/t1/.tmp-not-ours",
        "fragments/t1/chunk-0.bin",
    ]
    assert storage.names("fragments/t1") == [".tmp-not-ours", "chunk-0.bin"]
    storage.delete(left)
    assert storage.temporary_files("fragments") == []


def test_dangling_link_on_the_way_is_refused_and_nothing_is_created(root: Path, outside: Path) -> None:
    (root / "fragments").symlink_to(outside / "not-yet", target_is_directory=True)
    (root / "versions").symlink_to(outside / "nowhere" / "deeper", target_is_directory=True)
    storage = LocalStorage(root)
    before = tree_state(outside)
    for call in (
        lambda: storage.write("fragments/t1/chunk-0.bin", b"x"),
        lambda: storage.write("versions/1.json", b"{}"),
        lambda: storage.put_if_absent("fragments/new", b"x"),
        lambda: storage.exists("versions/1.json"),
    ):
        with pytest.raises(UnsafePathError):
            call()
    assert tree_state(outside) == before
    assert not (outside / "not-yet").exists() and not (outside / "nowhere").exists()
