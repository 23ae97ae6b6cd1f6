"""The storage contract on :class:`LocalStorage`, and the hostile stores only a local disk can hold.

A store's files are untrusted: a ``fragments`` directory may be a symbolic link to the
user's home, a chunk a link to ``/etc/passwd``, a file a FIFO nobody writes to. Each
test builds one such store by hand and checks that the backend refuses (or ignores)
it and that nothing outside the root changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.errors import LitstoreError, StorageError, UnsafePathError
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


def test_overwrite_writes_in_place_only_a_file_of_its_own(root: Path, outside: Path) -> None:
    """The head hint is written in place; a hint planted as a link (hard or symbolic) to a user's file, a FIFO
    or a directory is never written through: a hard link or a FIFO is replaced by a file, the others refused."""
    storage = LocalStorage(root)
    storage.overwrite("versions/head.hint", b"7\n")
    hint = root / "versions" / "head.hint"
    inode = hint.stat().st_ino
    storage.overwrite("versions/head.hint", b"8\n")
    assert hint.read_bytes() == b"8\n" and hint.stat().st_ino == inode  # in place: no rename
    before = tree_state(outside)
    planted = {
        "hard link": lambda: os.link(outside / "secret", hint),
        "fifo": lambda: os.mkfifo(hint),
    }
    for kind, plant in planted.items():
        hint.unlink()
        plant()
        storage.overwrite("versions/head.hint", b"9\n")  # returns (a FIFO is not waited on)
        assert not hint.is_symlink() and hint.is_file() and hint.read_bytes() == b"9\n", kind
        assert hint.stat().st_nlink == 1, kind
        assert tree_state(outside) == before, kind
    hint.unlink()
    hint.symlink_to(outside / "secret")
    with pytest.raises(UnsafePathError):
        storage.overwrite("versions/head.hint", b"9\n")
    assert hint.is_symlink() and tree_state(outside) == before
    hint.unlink()
    hint.mkdir()
    with pytest.raises(StorageError):
        storage.overwrite("versions/head.hint", b"9\n")
    assert hint.is_dir() and tree_state(outside) == before


def test_temporary_files_are_listed_for_gc_but_not_walked(root: Path) -> None:
    storage = LocalStorage(root)
    storage.write("fragments/t1/chunk-0.bin", b"chunk")
    left = f"fragments/t1/.tmp-{uuid.uuid4().hex}-chunk-1.bin"
    (root / left).write_bytes(b"half written")
    (root / "fragments/t1/.tmp-not-ours").write_bytes(b"a user's file")
    assert [info.path for info in storage.temporary_files("fragments")] == [left]
    files, temporary = storage.listing("fragments")
    assert [info.path for info in temporary] == [left] and sorted(files) == sorted(storage.walk("fragments"))
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


def test_write_into_a_file_where_a_directory_is_expected_raises_a_storage_error(tmp_path: Path) -> None:
    """A stranger's store whose ``manifests`` is a regular file: the commit's manifest write fails typed."""
    root = tmp_path / "store"
    litstore.Store.create(root, key="id")
    shutil.rmtree(root / "manifests", ignore_errors=True)
    (root / "manifests").write_bytes(b"")
    with pytest.raises(LitstoreError):
        litstore.open(root).append([{"id": "a", "value": 1}])


def test_storage_write_under_a_file_raises_a_storage_error(tmp_path: Path) -> None:
    """The same at the storage boundary: every OSError becomes a StorageError."""
    storage = LocalStorage(tmp_path)
    (tmp_path / "fragments").write_bytes(b"")
    with pytest.raises(StorageError):
        storage.write("fragments/t/x.bin", b"data")


_READ_AS_AN_UNPRIVILEGED_USER = textwrap.dedent(
    """
    import sys, litstore
    store = litstore.open(sys.argv[1])
    from litstore.storage.local import LocalStorage
    for name, call in [("getitem", lambda: store["k1"]), ("get_many", lambda: store.get_many(["k1"])),
                       ("contains", lambda: "k1" in store), ("values", lambda: list(store.values())),
                       ("verify", lambda: store.verify()), ("gc", lambda: store.gc(dry_run=True)),
                       ("walk", lambda: LocalStorage(sys.argv[1]).walk("fragments"))]:
        try:
            call()
        except litstore.LitstoreError:
            continue
        except BaseException as exc:
            print(f"{name}: untyped {type(exc).__name__}: {exc}")
    """
)


def test_a_directory_without_search_permission_gives_a_typed_error(tmp_path: Path) -> None:
    """A stranger's store (say, from a tarball) with a fragment directory of mode 0o600, read by a non-root user:
    every read, verify, gc and walk raises a typed error, not a bare PermissionError."""
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id")
    store.append([{"id": f"k{i}", "value": i} for i in range(10)])
    for fragment in (root / "fragments").iterdir():
        fragment.chmod(0o600)
    command = [sys.executable, "-c", _READ_AS_AN_UNPRIVILEGED_USER, str(root)]
    if os.geteuid() == 0:  # root ignores file modes: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    finally:
        for fragment in (root / "fragments").iterdir():
            fragment.chmod(0o755)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", result.stdout


def test_an_overlong_path_gives_a_storage_error(tmp_path: Path) -> None:
    """Existing directories whose full path passes PATH_MAX: a typed error, not a bare OSError."""
    deep = tmp_path
    segments = ["a" * 250] * 17
    for segment in segments[:-1]:
        deep = deep / segment
        try:
            deep.mkdir()
        except OSError:
            pytest.skip("cannot build the deep tree here")
    storage = LocalStorage(tmp_path)
    path = "/".join(segments)
    for call in (storage.exists, storage.read, storage.delete, storage.mapped):
        with pytest.raises(StorageError):
            call(path)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(0, 6000),
    spans=st.one_of(
        st.lists(st.tuples(st.integers(0, 7000), st.integers(0, 2500)), max_size=10),  # read one call each
        st.lists(st.tuples(st.integers(0, 7000), st.integers(0, 300)), min_size=65, max_size=128),  # grouped
        st.lists(st.tuples(st.integers(0, 7000), st.integers(0, 300)), min_size=129, max_size=300),  # many
    ),
)
def test_read_ranges_read_together_are_each_span_of_the_file(
    tmp_path: Path, size: int, spans: list[tuple[int, int]]
) -> None:
    """Spans a KiB apart share one read: overlapping, side by side, out of order, empty or past the end,
    each view is exactly its slice of the file."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    storage = LocalStorage(tmp_path)
    storage.write("f", data)
    asked = [(start, start + length) for start, length in spans]
    assert [bytes(view) for view in storage.read_ranges("f", asked)] == [data[start:end] for start, end in asked]


def test_a_negative_offset_is_a_storage_error(root: Path) -> None:
    storage = LocalStorage(root)
    storage.write("f", b"0123456789")
    with pytest.raises(StorageError, match="cannot read 'f'"):
        storage.read_ranges("f", [(2, 4), (-3, 1)])
    with pytest.raises(StorageError, match="cannot read 'f'"):  # many spans, read together
        storage.read_ranges("f", [(2, 4)] * 200 + [(-3, 1)])
