"""Exports keep media as their stored bytes: store -> export -> new store gives identical content hashes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import litdata
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage

import litstore
from litstore import export, sources
from litstore.cli import interchange
from litstore.errors import InvalidArgumentError
from tests.cli.test_commands import cli


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(np.random.default_rng(seed).integers(0, 255, (8, 6, 3)).astype(np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _media_store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id")
    store.append(
        [
            {"id": f"k{index}", "image": litdata.Image(bytes=_png(index)), "note": litdata.Text(text="ok"), "n": index}
            for index in range(6)
        ]
    )
    return store


def _hashes(store: litstore.Store) -> list[bytes]:
    return litstore.open(store.root).manifest().sort_by("key").column("content_hash").to_pylist()


def test_arrow_media_column_is_format_and_stored_bytes(make_store: Callable[..., litstore.Store]) -> None:
    store = _media_store(make_store)
    table = store.to_arrow()
    field = table.schema.field("image")
    assert export.is_media_field(field)
    row = table.column("id").to_pylist().index("k0")
    # litdata names image bytes given without a path "image:jpg", whatever they hold
    assert table.column("image")[row].as_py() == {"format": "image:jpg", "data": _png(0)}


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_cli_export_import_keeps_content_hashes(
    kind: str, make_store: Callable[..., litstore.Store], tmp_path: Path
) -> None:
    store = _media_store(make_store)
    out = tmp_path / f"out.{kind}"
    cli("export", store.root, out, "--no-progress")
    target = make_store(key="id")
    cli("import", target.root, out, "--no-progress")
    assert _hashes(target) == _hashes(store)
    if kind == "jsonl":
        line = json.loads(out.read_text().splitlines()[0])
        assert line["image"]["$media"]["format"] == "image:jpg"


def test_python_parquet_source_keeps_content_hashes(make_store: Callable[..., litstore.Store], tmp_path: Path) -> None:
    store = _media_store(make_store)
    pq.write_table(store.to_arrow(), tmp_path / "out.parquet")
    target = make_store(key="id")
    target.append(sources.parquet(tmp_path / "out.parquet"))
    assert _hashes(target) == _hashes(store)


def test_cli_get_shows_media_from_headers(make_store: Callable[..., litstore.Store]) -> None:
    store = _media_store(make_store)
    shown = cli("get", store.root, "k1").stdout
    assert f"<PNG 6x8, {len(_png(1)):,} bytes>" in shown


def test_media_marker_that_does_not_decode_is_refused() -> None:
    bad = {"$media": {"format": "image:png", "base64": "aGk="}}
    with pytest.raises(InvalidArgumentError, match="does not decode"):
        json.loads(json.dumps(bad), object_hook=interchange.json_object_hook)
    with pytest.raises(InvalidArgumentError, match="format"):
        json.loads(json.dumps({"$media": "x"}), object_hook=interchange.json_object_hook)
    stored = {"$media": 1}  # a stored dict whose only key is the marker's round-trips as a $map
    assert json.loads(json.dumps(interchange.to_json(stored)), object_hook=interchange.json_object_hook) == stored
