"""The conformance suite every :class:`~litstore.storage.base.Storage` backend runs.

A backend's test module subclasses :class:`StorageTests` (the class name starts with
``Test`` there, so pytest collects it) and provides a ``storage`` fixture that returns
the backend on a fresh, empty root::

    class TestMyStorage(StorageTests):
        @pytest.fixture
        def storage(self, tmp_path: Path) -> Storage:
            return MyStorage(tmp_path)

Every test here goes through the public contract only, so it holds for any medium.
Hostile cases that need the medium itself (symlinks and FIFOs on a local disk) belong
in the backend's own test module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from litstore.errors import MissingFileError, UnsafePathError
from litstore.storage.base import FileInfo, LocalInput, RemoteInput, Storage

__all__ = ["UNSAFE_PATHS", "StorageTests"]

#: Paths every method must refuse with :class:`UnsafePathError` (``""`` is the root, which
#: only :meth:`Storage.names` accepts).
UNSAFE_PATHS: tuple[str, ...] = (
    "",
    ".",
    "..",
    "../x",
    "a/../b",
    "a/..",
    "./x",
    "a/./b",
    "/a",
    "/",
    "a//b",
    "a/",
    "a\\b",
    "a\x00b",
    "a\nb",
)

#: What the suite writes before checking that refused calls changed nothing.
_SEED = {"a/b": b"inside a", "a/c/d": b"deeper", "c": b"top"}


def _calls(storage: Storage, path: str, local_file: str) -> dict[str, Callable[[], Any]]:
    """Every :class:`Storage` method that takes a path, called with ``path``."""

    def staged() -> None:
        with storage.staging(path) as directory:
            Path(directory, "f").write_bytes(b"staged")
            pytest.fail(f"staging({path!r}) yielded a directory instead of refusing the prefix")

    calls: dict[str, Callable[[], Any]] = {
        "read": lambda: storage.read(path),
        "read_range": lambda: storage.read_range(path, 0, 1),
        "read_range (empty)": lambda: storage.read_range(path, 0, 0),
        "write": lambda: storage.write(path, b"x"),
        "overwrite": lambda: storage.overwrite(path, b"x"),
        "put_if_absent": lambda: storage.put_if_absent(path, b"x"),
        "exists": lambda: storage.exists(path),
        "walk": lambda: storage.walk(path),
        "delete": lambda: storage.delete(path),
        "delete_tree": lambda: storage.delete_tree(path),
        "temporary_files": lambda: storage.temporary_files(path),
        "listing": lambda: storage.listing(path),
        "local_path": lambda: storage.local_path(path),
        "mapped": lambda: storage.mapped(path),
        "write_file": lambda: storage.write_file(path, local_file),
        "staging": staged,
    }
    if path:  # names("") lists the root
        calls["names"] = lambda: storage.names(path)
    return calls


def _contents(storage: Storage) -> dict[str, bytes]:
    """Every file the suite can see (under the seeded prefixes), with its bytes."""
    found = {info.path: storage.read(info.path) for info in storage.walk("a")}
    found.update({name: storage.read(name) for name in storage.names("") if storage.exists(name)})
    return found


class StorageTests:
    """The :class:`~litstore.storage.base.Storage` contract, as tests a backend's test class inherits.

    Subclasses provide a ``storage`` fixture: the backend on a fresh, empty root.
    """

    # --- read and write -------------------------------------------------------------

    def test_write_then_read(self, storage: Storage) -> None:
        storage.write("a/b/c.bin", b"\x00payload\xff")
        data = storage.read("a/b/c.bin")
        assert isinstance(data, bytes)
        assert data == b"\x00payload\xff"

    def test_empty_file(self, storage: Storage) -> None:
        storage.write("empty", b"")
        assert storage.read("empty") == b""
        assert storage.exists("empty")

    def test_write_replaces(self, storage: Storage) -> None:
        storage.write("f", b"old contents, longer")
        storage.write("f", b"new")
        assert storage.read("f") == b"new"
        assert [info.path for info in storage.walk("a")] == []
        assert storage.names("") == ["f"]

    def test_overwrite_creates_then_holds_exactly_the_last_bytes(self, storage: Storage) -> None:
        storage.overwrite("a/hint", b"12345\n")  # (its directory is new)
        assert storage.read("a/hint") == b"12345\n"
        storage.overwrite("a/hint", b"9\n")  # shorter: nothing of the old bytes is left
        assert storage.read("a/hint") == b"9\n"
        storage.overwrite("a/hint", b"1000000\n")
        assert storage.read("a/hint") == b"1000000\n"
        assert [info.path for info in storage.walk("a")] == ["a/hint"]
        assert storage.temporary_files("a") == []

    def test_readers_see_old_or_new_bytes_never_a_mix(self, storage: Storage) -> None:
        versions = (b"A" * 200_000, b"B" * 200_000)
        storage.write("f", versions[0])
        seen: list[bytes] = []
        done = threading.Event()

        def read_until_done() -> None:
            while not done.is_set():
                seen.append(storage.read("f"))

        reader = threading.Thread(target=read_until_done)
        reader.start()
        try:
            for round_ in range(20):
                storage.write("f", versions[round_ % 2])
        finally:
            done.set()
            reader.join()
        assert seen
        assert all(data in versions for data in seen)

    def test_read_missing_raises_missing_file_error(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        for missing in ("nothing", "a/nothing", "nowhere/deep/file", "a/b/under-a-file"):
            with pytest.raises(MissingFileError):
                storage.read(missing)

    def test_read_of_a_directory_is_a_missing_file(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        with pytest.raises(MissingFileError):
            storage.read("a")
        assert not storage.exists("a")

    def test_views_of_a_file_hold_its_bytes(self, storage: Storage) -> None:
        storage.write("a/f", b"0123456789")
        mapped = storage.mapped("a/f")
        if mapped is not None:
            assert bytes(mapped) == b"0123456789"
        local = storage.local_path("a/f")
        if local is not None:
            assert Path(local).read_bytes() == b"0123456789"

    def test_litdata_input_reaches_the_root(self, storage: Storage) -> None:
        """What streaming hands litdata names the root, so a chunk's store path is its path there too."""
        storage.write("a/f", b"0123456789")
        source = storage.litdata_input()
        if isinstance(source, LocalInput):
            assert Path(source.directory, "a", "f").read_bytes() == b"0123456789"
        elif isinstance(source, RemoteInput) and source.storage is not None:  # downloads through a backend
            assert source.url == storage.url
            assert source.storage.read("a/f") == b"0123456789"
        elif isinstance(source, RemoteInput):
            assert source.url == storage.url
            assert source.storage_options == dict(storage.options)
            assert source.storage_options is not storage.options  # litdata may keep (and change) its copy
        else:
            assert source is None, f"litdata_input() returned {source!r}, not a LitdataInput or None"

    def test_write_file_copies_a_local_file(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "source.bin"
        source.write_bytes(b"from disk" * 1000)
        storage.write_file("a/copied.bin", str(source))
        assert storage.read("a/copied.bin") == b"from disk" * 1000

    def test_reading_gives_the_file_to_seek_in(self, storage: Storage) -> None:
        storage.write("r/file.bin", b"0123456789" * 100)
        with storage.reading("r/file.bin") as handle:
            handle.seek(990)
            assert handle.read() == b"0123456789"
            handle.seek(0)
            assert handle.read(3) == b"012"
        with pytest.raises(MissingFileError), storage.reading("r/missing.bin"):
            pass

    def test_writing_publishes_the_file_when_the_block_ends(self, storage: Storage) -> None:
        with storage.writing("w/streamed.bin") as handle:
            handle.write(b"head" * 1000)
            handle.seek(0)
            assert handle.read(4) == b"head"  # (open for reading too: a key run reads its entries back)
            handle.seek(0, 2)
            handle.write(b"tail")
            assert not storage.exists("w/streamed.bin")  # nothing is published before the block ends
        assert storage.read("w/streamed.bin") == b"head" * 1000 + b"tail"
        assert storage.temporary_files("w") == []

    def test_writing_publishes_nothing_if_the_block_raises(self, storage: Storage) -> None:
        storage.write("w/kept.bin", b"old")
        with pytest.raises(RuntimeError), storage.writing("w/kept.bin") as handle:
            handle.write(b"new, half written")
            raise RuntimeError("the writer failed")
        assert storage.read("w/kept.bin") == b"old"
        assert storage.temporary_files("w") == []

    def test_durable_writes_and_sync_keep_the_bytes(self, storage: Storage) -> None:
        """``durable=True`` (a tombstone, a moved tag) and ``sync`` (what a commit record names) are part of the
        contract: every backend takes them (an object store's PUT is durable already) and the bytes are there."""
        storage.write("d/record.json", b"old")
        storage.write("d/record.json", b"new", durable=True)
        with storage.writing("d/streamed.bin", durable=True) as handle:
            handle.write(b"x" * 5000)
        storage.write("d/deep/named.bin", b"named")
        storage.sync(["d/deep/named.bin", "d/streamed.bin", "d/gone.bin"])  # a file gone meanwhile is skipped
        assert storage.read("d/record.json") == b"new"
        assert storage.read("d/streamed.bin") == b"x" * 5000
        assert storage.read("d/deep/named.bin") == b"named"
        assert storage.temporary_files("d") == []

    # --- read_range -----------------------------------------------------------------

    def test_read_range_inside(self, storage: Storage) -> None:
        storage.write("f", b"0123456789")
        assert storage.read_range("f", 0, 10) == b"0123456789"
        assert storage.read_range("f", 2, 5) == b"234"
        assert storage.read_range("f", 9, 10) == b"9"

    def test_read_range_past_the_end_is_cut_short(self, storage: Storage) -> None:
        storage.write("f", b"0123456789")
        assert storage.read_range("f", 8, 100) == b"89"
        assert storage.read_range("f", 10, 20) == b""
        assert storage.read_range("f", 50, 60) == b""

    def test_read_range_empty(self, storage: Storage) -> None:
        storage.write("f", b"0123456789")
        assert storage.read_range("f", 3, 3) == b""
        assert storage.read_range("f", 5, 2) == b""
        storage.write("empty", b"")
        assert storage.read_range("empty", 0, 10) == b""

    def test_read_range_of_missing_file_raises(self, storage: Storage) -> None:
        with pytest.raises(MissingFileError):
            storage.read_range("nothing", 0, 10)
        with pytest.raises(MissingFileError):
            storage.read_range("nothing", 3, 3)

    def test_read_ranges_are_each_read_range(self, storage: Storage) -> None:
        storage.write("f", b"0123456789")
        spans = [(2, 5), (0, 1), (8, 100), (5, 2), (50, 60), (9, 10)]
        assert storage.read_ranges("f", spans) == [storage.read_range("f", start, end) for start, end in spans]
        assert storage.read_ranges("f", []) == []
        with pytest.raises(MissingFileError):
            storage.read_ranges("nothing", [(0, 10)])

    # --- put_if_absent --------------------------------------------------------------

    def test_put_if_absent_creates_once(self, storage: Storage) -> None:
        assert storage.put_if_absent("a/record", b"first") is True
        assert storage.read("a/record") == b"first"
        assert storage.put_if_absent("a/record", b"second") is False
        assert storage.read("a/record") == b"first"
        assert storage.names("a") == ["record"]

    def test_put_if_absent_does_not_replace_a_written_file(self, storage: Storage) -> None:
        storage.write("f", b"written")
        assert storage.put_if_absent("f", b"other") is False
        assert storage.read("f") == b"written"

    def test_put_if_absent_race_has_one_winner(self, storage: Storage) -> None:
        racers = 8
        barrier = threading.Barrier(racers)
        results: dict[int, bool] = {}

        def race(number: int) -> None:
            barrier.wait()
            results[number] = storage.put_if_absent("versions/00000001.json", f"writer {number}".encode())

        threads = [threading.Thread(target=race, args=(number,)) for number in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [number for number, won in results.items() if won]
        assert len(results) == racers
        assert len(winners) == 1
        assert storage.read("versions/00000001.json") == f"writer {winners[0]}".encode()
        assert [info.path for info in storage.walk("versions")] == ["versions/00000001.json"]

    # --- exists and listing ---------------------------------------------------------

    def test_exists(self, storage: Storage) -> None:
        assert not storage.exists("f")
        storage.write("f", b"x")
        storage.write("a/b/c", b"x")
        assert storage.exists("f")
        assert storage.exists("a/b/c")
        assert not storage.exists("a/b/missing")
        assert not storage.exists("a/b")  # a directory is not a file

    def test_names_lists_direct_children_sorted(self, storage: Storage) -> None:
        for path in ("d/z", "d/b", "d/a/deep/file", "d/m/x", "da/other", "e"):
            storage.write(path, b"x")
        assert storage.names("d") == ["a", "b", "m", "z"]
        assert storage.names("d/a") == ["deep"]
        assert storage.names("d/a/deep") == ["file"]

    def test_names_of_root(self, storage: Storage) -> None:
        assert storage.names("") == []
        storage.write("b/x", b"x")
        storage.write("a", b"x")
        storage.write("c/d/e", b"x")
        assert storage.names("") == ["a", "b", "c"]

    def test_names_of_missing_prefix_is_empty(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        assert storage.names("missing") == []
        assert storage.names("a/b/c") == []
        assert storage.names("a/b") == []  # a file has no children

    def test_walk_lists_every_depth_with_sizes(self, storage: Storage) -> None:
        files = {"w/one": b"1", "w/two/three": b"333", "w/two/four/five": b"55555", "w/empty": b""}
        before = time.time()
        for path, data in files.items():
            storage.write(path, data)
        storage.write("wx/not-under-w", b"x")
        storage.write("other", b"x")
        after = time.time()
        found = storage.walk("w")
        assert all(isinstance(info, FileInfo) for info in found)
        assert sorted((info.path, info.size) for info in found) == sorted(
            (path, len(data)) for path, data in files.items()
        )
        # Some media keep whole seconds; allow a little slack for that and for clock skew.
        assert all(before - 5 <= info.modified <= after + 5 for info in found)
        assert sorted(info.path for info in storage.walk("w/two")) == ["w/two/four/five", "w/two/three"]

    def test_listing_is_walk_and_temporary_files(self, storage: Storage) -> None:
        for path in ("a/x", "a/b/y", "a/b/c/z", "b/w"):
            storage.write(path, path.encode())
        files, temporary = storage.listing("a")
        assert sorted(files) == sorted(storage.walk("a"))
        assert sorted(info.path for info in files) == ["a/b/c/z", "a/b/y", "a/x"]
        assert temporary == storage.temporary_files("a") == []
        assert storage.listing("nothing") == ([], [])

    def test_walk_of_missing_prefix_is_empty(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        assert storage.walk("missing") == []
        assert storage.walk("a/missing") == []

    def test_no_temporary_files_after_writes(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "source"
        source.write_bytes(b"file")
        storage.write("t/written", b"1")
        storage.write("t/written", b"2")
        storage.put_if_absent("t/created", b"1")
        storage.put_if_absent("t/created", b"2")
        storage.write_file("t/copied", str(source))
        with storage.staging("t/staged") as directory:
            Path(directory, "chunk").write_bytes(b"c")
        expected = ["t/copied", "t/created", "t/staged/chunk", "t/written"]
        assert sorted(info.path for info in storage.walk("t")) == expected
        assert storage.names("t") == ["copied", "created", "staged", "written"]
        assert storage.temporary_files("t") == []

    # --- delete ---------------------------------------------------------------------

    def test_delete(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        storage.write("a/c", b"y")
        storage.delete("a/b")
        assert not storage.exists("a/b")
        assert storage.read("a/c") == b"y"
        with pytest.raises(MissingFileError):
            storage.read("a/b")

    def test_delete_of_missing_file_is_fine(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        storage.delete("a/missing")
        storage.delete("nowhere/at/all")
        storage.delete("a/b")
        storage.delete("a/b")
        assert storage.walk("a") == []

    def test_delete_tree(self, storage: Storage) -> None:
        for path in ("t/x", "t/y/z", "t/y/w/v", "tx/keep", "keep"):
            storage.write(path, path.encode())
        storage.delete_tree("t")
        assert storage.walk("t") == []
        assert storage.names("t") == []
        assert not storage.exists("t/y/z")
        assert storage.read("tx/keep") == b"tx/keep"
        assert storage.read("keep") == b"keep"

    def test_delete_tree_of_a_subdirectory(self, storage: Storage) -> None:
        for path in ("t/x", "t/y/z", "t/y/w/v"):
            storage.write(path, b"x")
        storage.delete_tree("t/y")
        assert [info.path for info in storage.walk("t")] == ["t/x"]

    def test_delete_tree_of_missing_prefix_is_fine(self, storage: Storage) -> None:
        storage.write("a/b", b"x")
        storage.delete_tree("missing")
        storage.delete_tree("a/missing")
        assert storage.read("a/b") == b"x"

    # --- staging --------------------------------------------------------------------

    def test_staging_publishes_the_directory_under_the_prefix(self, storage: Storage) -> None:
        with storage.staging("fragments/t1") as directory:
            Path(directory, "index.json").write_bytes(b"{}")
            Path(directory, "train").mkdir()
            Path(directory, "train", "chunk-0.bin").write_bytes(b"chunk" * 100)
        assert sorted((info.path, info.size) for info in storage.walk("fragments/t1")) == [
            ("fragments/t1/index.json", 2),
            ("fragments/t1/train/chunk-0.bin", 500),
        ]
        assert storage.read("fragments/t1/train/chunk-0.bin") == b"chunk" * 100
        assert storage.names("fragments") == ["t1"]

    # --- path checks ----------------------------------------------------------------

    @pytest.mark.parametrize("path", UNSAFE_PATHS)
    def test_unsafe_paths_are_refused_and_change_nothing(self, storage: Storage, path: str, tmp_path: Path) -> None:
        for seeded, data in _SEED.items():
            storage.write(seeded, data)
        before = _contents(storage)
        local_file = tmp_path / "local-file"
        local_file.write_bytes(b"local")
        for method, call in _calls(storage, path, str(local_file)).items():
            with pytest.raises(UnsafePathError):
                call()
                pytest.fail(f"{method}({path!r}) did not refuse the path")
        assert _contents(storage) == before
        assert storage.names("") == sorted({seeded.split("/")[0] for seeded in _SEED})
