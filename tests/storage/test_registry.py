"""Opening a backend by its root (:func:`litstore.storage.open_storage`), and what ``import litstore`` loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from litstore.errors import StorageError
from litstore.storage import BACKENDS, open_storage
from litstore.storage.local import LocalStorage
from litstore.storage.memory import MemoryStorage


def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(StorageError) as raised:
        open_storage("hf://datasets/user/store")
    for scheme in BACKENDS:
        if scheme != "file":
            assert f"{scheme}://" in str(raised.value)


def test_memory_roots_of_one_name_share_files() -> None:
    first = open_storage("memory://registry-shared")
    second = open_storage("memory://registry-shared")
    assert isinstance(first, MemoryStorage)
    first.write("f", b"shared")
    assert second.read("f") == b"shared"
    assert open_storage("memory://registry-other").names("") == []


def test_local_paths_and_file_urls_open_the_local_backend(tmp_path: Path) -> None:
    for root in (tmp_path, str(tmp_path), f"file://{tmp_path}"):
        storage = open_storage(root)
        assert isinstance(storage, LocalStorage)
        assert storage.url == str(tmp_path.resolve())
    assert open_storage(storage) is storage


def test_storage_options_for_a_local_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="storage_options"):
        open_storage(tmp_path, {"endpoint_url": "http://127.0.0.1:1"})


def test_import_litstore_loads_no_heavy_backend() -> None:
    code = "import litstore, sys; print([m for m in ('boto3','duckdb','torch','litdata') if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"


def test_only_the_s3_modules_import_boto3() -> None:
    package = Path(__file__).parents[2] / "src" / "litstore"
    importers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(
            line.lstrip().startswith(("import boto3", "from boto3", "import botocore", "from botocore"))
            for line in path.read_text().splitlines()
        )
    )
    assert importers == ["storage/options.py", "storage/s3.py"]
