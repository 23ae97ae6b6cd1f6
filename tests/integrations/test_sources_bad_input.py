"""Bad source files are an ``InvalidRecordError`` naming file and line or row, and nothing is written.

Undecodable images are refused when read, not stored to fail every read after; JSON
Lines lines and Parquet pages that cannot be parsed never escape as ``RecursionError``,
``ValueError`` or ``OSError``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import litstore
from litstore import sources
from tests.conftest import tree_state


def _refused(store: litstore.Store, records: Any, match: str) -> litstore.InvalidRecordError:
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.InvalidRecordError, match=match) as caught:
        store.append(records)
    assert tree_state(Path(store.root)) == before and len(store) == 0
    return caught.value


def _png_bytes(seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


BROKEN_IMAGES: dict[str, Callable[[], bytes]] = {
    "truncated.png": lambda: _png_bytes()[: len(_png_bytes()) // 2],
    "text.jpg": lambda: b"this is not a JPEG\n",
    "empty.png": lambda: b"",
}


@pytest.mark.parametrize("name", sorted(BROKEN_IMAGES))
def test_an_undecodable_image_in_a_manifest_is_refused(tmp_path: Path, store: litstore.Store, name: str) -> None:
    (tmp_path / "good.png").write_bytes(_png_bytes())
    (tmp_path / name).write_bytes(BROKEN_IMAGES[name]())
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a", "image": "good.png"}\n' + json.dumps({"id": "b", "image": name}) + "\n")
    error = _refused(store, sources.jsonl(manifest), r"m\.jsonl line 2, field 'image': the image does not decode")
    assert error.culprits == [(2, None)]


def test_an_undecodable_image_in_a_folder_is_refused(tmp_path: Path, store: litstore.Store) -> None:
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "1.png").write_bytes(_png_bytes())
    (tmp_path / "cat" / "2.png").write_bytes(BROKEN_IMAGES["truncated.png"]())
    _refused(store, sources.image_folder(tmp_path), r"cat/2\.png: the image does not decode")


def test_an_undecodable_huggingface_image_is_refused(store: litstore.Store) -> None:
    datasets = pytest.importorskip("datasets", reason="the datasets package is not installed")
    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image()})
    data = {"id": ["a", "b"], "image": [{"bytes": _png_bytes(), "path": None}, {"bytes": b"GIF89a junk", "path": None}]}
    dataset = datasets.Dataset.from_dict(data, features=features)
    _refused(store, sources.huggingface(dataset), r"row 1, field 'image': the image does not decode")


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("[" * 100_000, r"line 2: not valid JSON: nested too deep"),
        ('{"id": "b", "n": ' + "7" * 5000 + "}", r"line 2: not valid JSON: Exceeds the limit"),
        ('{"id": "b"}\r{"id": "c"}', r"line 2: not valid JSON: Extra data.*a lone \\r does not end a line"),
        ('{"id": "b", "x": NaN', r"line 2: not valid JSON"),
    ],
    ids=["deep", "long-int", "lone-cr", "cut"],
)
def test_jsonl_lines_that_do_not_parse_are_invalid_records(
    tmp_path: Path, store: litstore.Store, line: str, match: str
) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_bytes(('{"id": "a"}\n' + line + "\n").encode())
    error = _refused(store, sources.jsonl(manifest), match)
    assert error.culprits == [(2, None)]


def test_jsonl_lines_end_with_newline_only(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_bytes(b'{"id": "a"}\r\n{"id":\r"b"}\n\r\n{"id": "c"}')
    assert [record["id"] for record in sources.jsonl(manifest, image_fields=())] == ["a", "b", "c"]


def test_jsonl_refuses_a_line_longer_than_the_limit(
    tmp_path: Path, store: litstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 64)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a"}\n' + json.dumps({"id": "b", "text": "x" * 100}) + "\n")
    _refused(store, sources.jsonl(manifest), r"line 2: longer than 64 bytes")


def test_json_objects_refuses_what_its_object_hook_refuses(tmp_path: Path) -> None:
    def strict(obj: dict[str, Any]) -> dict[str, Any]:
        if "bad" in obj:
            raise litstore.InvalidArgumentError("no 'bad' fields")
        return obj

    path = tmp_path / "m.jsonl"
    path.write_text('{"ok": 1}\n{"bad": 2}\n')
    objects = sources.json_objects(path, object_hook=strict)
    assert next(objects) == (1, {"ok": 1})
    with pytest.raises(litstore.InvalidRecordError, match=r"line 2: not valid JSON: no 'bad' fields"):
        next(objects)


def _damaged_parquet(path: Path) -> None:
    table = pa.table({"id": [f"r{i:04d}" for i in range(1000)], "x": list(range(1000))})
    pq.write_table(table, path, row_group_size=100)
    column = pq.ParquetFile(path).metadata.row_group(5).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + 30 : column.data_page_offset + 70] = b"\xff" * 40
    path.write_bytes(bytes(data))


def test_a_damaged_parquet_page_is_an_invalid_record(tmp_path: Path, store: litstore.Store) -> None:
    _damaged_parquet(tmp_path / "part.parquet")
    error = _refused(store, sources.parquet(tmp_path / "part.parquet", batch_size=64), r"part\.parquet, rows from \d+")
    assert "cannot be read as Parquet" in str(error)


def test_parquet_files_whose_schemas_differ_are_an_invalid_record(tmp_path: Path, store: litstore.Store) -> None:
    pq.write_table(pa.table({"id": ["a"], "x": [1]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": ["b"], "x": ["not a number"]}), tmp_path / "b.parquet")
    _refused(store, sources.parquet(tmp_path), r"b\.parquet, rows from 0")


def test_the_cli_import_of_a_damaged_parquet_file_is_a_clean_error(
    tmp_path: Path, store: litstore.Store, capsys: pytest.CaptureFixture[str]
) -> None:
    from litstore.cli import main

    _damaged_parquet(tmp_path / "part.parquet")
    with pytest.raises(SystemExit) as exited:
        main(["import", str(store.root), str(tmp_path / "part.parquet"), "--no-progress"])
    assert exited.value.code == 1  # bad data (see litstore.cli)
    err = capsys.readouterr().err
    assert "litstore: error:" in err and "part.parquet, rows from" in err and "Traceback" not in err
