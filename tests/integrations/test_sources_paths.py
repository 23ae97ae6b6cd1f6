"""Sources read only files inside their root unless the caller passes ``allow_outside=True``.

Each hostile tree points at a real image outside the source's root (a valid PNG, so
only the path rule can refuse it); without the rule its bytes were copied into the store.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from litdata.streaming.writer import BinaryWriter
from PIL import Image

import litstore
from litstore import sources
from tests.conftest import tree_state


def _png(path: Path, seed: int = 0) -> np.ndarray:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(4, 6, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format="PNG")
    return pixels


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """An image outside every source's root."""
    path = tmp_path / "private" / "secret.png"
    _png(path, seed=42)
    return path


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail instead of hanging if a read waits on a FIFO."""
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("a source waited on a FIFO"))
    signal.alarm(10)
    yield
    signal.alarm(0)


def _refused(store: litstore.Store, records: Any, error: type[Exception], match: str) -> Exception:
    before = tree_state(Path(store.root))
    with pytest.raises(error, match=match) as caught:
        store.append(records() if callable(records) else records)
    assert "allow_outside=True" in str(caught.value) or "not a file" in str(caught.value)
    assert tree_state(Path(store.root)) == before
    return caught.value


# -- JSON Lines -------------------------------------------------------------------------------


def _manifest(folder: Path, image: str) -> Path:
    _png(folder / "ok.png")
    manifest = folder / "m.jsonl"
    manifest.write_text(
        json.dumps({"id": "ok", "image": "ok.png"}) + "\n" + json.dumps({"id": "x", "image": image}) + "\n"
    )
    return manifest


def test_jsonl_refuses_an_absolute_path(tmp_path: Path, store: litstore.Store, secret: Path) -> None:
    manifest = _manifest(tmp_path / "data", str(secret))
    error = _refused(
        store, sources.jsonl(manifest), litstore.InvalidRecordError, r"line 2, field 'image': .* absolute path"
    )
    assert error.culprits == [(2, None)]  # type: ignore[attr-defined]
    store.append(sources.jsonl(manifest, allow_outside=True))
    np.testing.assert_array_equal(store["x"]["image"].numpy(), np.asarray(Image.open(secret)).transpose(2, 0, 1))


def test_jsonl_refuses_dot_dot(tmp_path: Path, store: litstore.Store, secret: Path) -> None:
    manifest = _manifest(tmp_path / "data", "../private/secret.png")
    _refused(store, sources.jsonl(manifest), litstore.InvalidRecordError, r"line 2.* climbs out with '\.\.'")


def test_jsonl_refuses_a_symlink_out_and_reads_one_within(tmp_path: Path, store: litstore.Store, secret: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "linked").symlink_to(secret.parent, target_is_directory=True)
    manifest = _manifest(folder, "linked/secret.png")
    _refused(
        store, sources.jsonl(manifest), litstore.InvalidRecordError, r"line 2.* leads through a symlink to .*secret"
    )

    (folder / "alias.png").symlink_to(folder / "ok.png")
    manifest.write_text(json.dumps({"id": "a", "image": "alias.png"}) + "\n")
    store.append(sources.jsonl(manifest))
    assert store["a"]["image"].shape == (3, 4, 6)


def test_jsonl_refuses_a_fifo_without_waiting(tmp_path: Path, store: litstore.Store, no_hang: None) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    os.mkfifo(folder / "pipe.png")
    manifest = _manifest(folder, "pipe.png")
    _refused(store, sources.jsonl(manifest), litstore.InvalidRecordError, r"line 2.* not a file")


# -- image folders --------------------------------------------------------------------------


def test_image_folder_refuses_a_symlinked_file_out(tmp_path: Path, store: litstore.Store, secret: Path) -> None:
    root = tmp_path / "pets"
    _png(root / "cat" / "1.png")
    (root / "cat" / "2.png").symlink_to(secret)
    _refused(
        store,
        sources.image_folder(root),
        litstore.InvalidRecordError,
        r"cat/2\.png: 'cat/2\.png' leads through a symlink",
    )
    store.append(sources.image_folder(root, allow_outside=True))
    assert sorted(store.keys()) == ["cat/1.png", "cat/2.png"]


def test_image_folder_refuses_a_symlinked_folder_out(tmp_path: Path, store: litstore.Store, secret: Path) -> None:
    root = tmp_path / "pets"
    _png(root / "cat" / "1.png")
    (root / "dog").symlink_to(secret.parent, target_is_directory=True)
    _refused(store, lambda: sources.image_folder(root), litstore.InvalidArgumentError, r"dog is a symlink to .*private")

    (root / "cat" / "loop").symlink_to(root, target_is_directory=True)  # followed with allow_outside: must not loop
    store.append(sources.image_folder(root, allow_outside=True))
    assert sorted(store.keys()) == ["cat/1.png", "dog/secret.png"]


def test_image_folder_skips_a_symlinked_folder_within(tmp_path: Path, store: litstore.Store) -> None:
    root = tmp_path / "pets"
    _png(root / "cat" / "1.png")
    (root / "kitten").symlink_to(root / "cat", target_is_directory=True)
    store.append(sources.image_folder(root))
    assert list(store.keys()) == ["cat/1.png"]


# -- Parquet and LitData folders ----------------------------------------------------------------


def test_parquet_folder_refuses_a_file_linked_from_outside(tmp_path: Path, store: litstore.Store) -> None:
    pq.write_table(pa.table({"id": ["private"], "v": [1]}), tmp_path / "private.parquet")
    folder = tmp_path / "tables"
    folder.mkdir()
    pq.write_table(pa.table({"id": ["a"], "v": [2]}), folder / "a.parquet")
    (folder / "b.parquet").symlink_to(tmp_path / "private.parquet")
    _refused(
        store, lambda: sources.parquet(folder), litstore.InvalidArgumentError, r"b\.parquet.* leads through a symlink"
    )
    store.append(sources.parquet(folder, allow_outside=True))
    assert sorted(store.keys()) == ["a", "private"]


def _litdata_folder(folder: Path) -> Path:
    writer = BinaryWriter(str(folder), chunk_bytes=1 << 16)
    for index in range(3):
        writer.add_item(index, {"id": f"k{index}", "v": np.arange(3)})
    writer.done()
    writer.merge()
    return folder


def test_litdata_dir_refuses_chunks_outside_the_folder(tmp_path: Path, store: litstore.Store) -> None:
    folder = _litdata_folder(tmp_path / "opt")
    index = json.loads((folder / "index.json").read_text())
    chunk = folder / index["chunks"][0]["filename"]
    outside = tmp_path / "outside.bin"
    chunk.rename(outside)

    for filename, match in [(str(outside), r"absolute path"), ("../outside.bin", r"climbs out")]:
        index["chunks"][0]["filename"] = filename
        (folder / "index.json").write_text(json.dumps(index))
        _refused(store, lambda: sources.litdata_dir(folder), litstore.InvalidArgumentError, match)

    index["chunks"][0]["filename"] = chunk.name
    (folder / "index.json").write_text(json.dumps(index))
    chunk.symlink_to(outside)
    _refused(store, lambda: sources.litdata_dir(folder), litstore.InvalidArgumentError, r"leads through a symlink")
    store.append(sources.litdata_dir(folder, allow_outside=True))
    assert len(store) == 3


# -- Hugging Face ---------------------------------------------------------------------------------


def test_huggingface_refuses_a_path_only_image(store: litstore.Store, secret: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="the datasets package is not installed")
    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image()})
    data = {"id": ["x"], "image": [{"bytes": None, "path": str(secret)}]}
    dataset = datasets.Dataset.from_dict(data, features=features)
    _refused(store, sources.huggingface(dataset), litstore.InvalidRecordError, r"row 0, field 'image': .* only a path")
    store.append(sources.huggingface(dataset, allow_outside=True))
    assert store["x"]["image"].shape == (3, 4, 6)
