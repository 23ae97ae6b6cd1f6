"""LitData's image recipe from the command line, and the writing commands: create, import, update, delete, diff.

The recipe is a ``manifest.jsonl`` of image files with ``image``, ``label``, ``split`` and
``caption``: ``litstore create --field label:int --splits-from split`` then ``litstore
import`` stores each image file (its path resolved against the manifest's folder, as
:func:`litstore.sources.jsonl` does) and the declared label is a manifest column SQL and
``--where`` filter by. Commands run in this process (see ``test_commands``); one test runs
the import through ``python -m litstore`` in a subprocess and streams the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import litstore
from tests.cli.test_commands import _error_line, cli, cli_json
from tests.conftest import stored_state


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")


def _recipe(folder: Path, count: int = 12) -> Path:
    """A LitData image recipe: ``images/manifest.jsonl`` naming PNG and JPEG files under ``images/img``."""
    (folder / "images" / "img").mkdir(parents=True)
    lines = []
    for i in range(count):
        name = f"img/{i}.png" if i % 2 else f"img/{i}.jpg"
        Image.fromarray(np.full((8, 6, 3), i * 9 % 256, np.uint8)).save(folder / "images" / name)
        split = "val" if i % 4 == 0 else "train"
        record = {"id": f"im{i:03d}", "image": name, "label": i % 5, "split": split, "caption": f"c{i}"}
        lines.append(json.dumps(record))
    manifest = folder / "images" / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _created(root: Path) -> None:
    said = cli("create", root, "--field", "label:int", "--field", "caption:str?", "--splits-from", "split").stdout
    assert "fields label:int64, caption:string?" in said


def test_the_image_recipe_imports_its_image_files_and_queries_its_labels(tmp_path: Path) -> None:
    manifest, root = _recipe(tmp_path), tmp_path / "store"
    _created(root)
    assert "read 12 records, 12 images" in cli("import", root, manifest, "--no-progress").stdout
    store = litstore.open(root)
    png = np.asarray(Image.open(tmp_path / "images" / "img" / "3.png"))
    assert np.array_equal(np.asarray(store["im003"]["image"]).reshape(png.shape), png)
    assert store["im003"]["label"] == 3 and store.fields == {"label": "int64", "caption": "string?"}
    found = cli_json("sql", root, "SELECT count(*) AS n FROM manifest WHERE label < 2 AND split = 'train'")
    assert found == [{"n": sum(1 for i in range(12) if i % 5 < 2 and i % 4)}]


def test_a_manifest_line_naming_a_missing_image_commits_nothing(tmp_path: Path) -> None:
    manifest, root = _recipe(tmp_path), tmp_path / "store"
    _created(root)
    with manifest.open("a") as lines:
        lines.write(json.dumps({"id": "gone", "image": "img/gone.png", "label": 1, "split": "train"}) + "\n")
    before = stored_state(litstore.open(root))
    line = _error_line(cli("import", root, manifest, code=1))
    assert "line 13, field 'image': there is no image file" in line
    assert stored_state(litstore.open(root)) == before
    assert "outside" in _error_line(cli("import", root, _escaping(tmp_path), code=1))
    cli("import", root, _escaping(tmp_path), "--no-image-paths")  # the path kept as a string
    assert litstore.open(root)["up"]["image"] == "../x.png"


def _escaping(folder: Path) -> Path:
    path = folder / "images" / "escaping.jsonl"
    path.write_text(json.dumps({"id": "up", "image": "../x.png", "label": 0, "split": "train"}) + "\n")
    return path


def test_update_set_delete_and_diff_fields(tmp_path: Path) -> None:
    manifest, root = _recipe(tmp_path), tmp_path / "store"
    _created(root)
    cli("import", root, manifest)
    done = cli_json("update", root, "im001", "im002", "--set", "label=4", "--set", 'note="n"')
    assert (done["number"], done["replaced"]) == (2, 2)
    assert cli_json("diff", root, "1", "--fields")["fields"] == {"label": 2, "note": 2}
    assert "label: 2" in cli("diff", root, "1", "--fields").stdout
    assert cli_json("update", root, "--where", "label = 4", "--set", "caption=four")["replaced"] == 4
    assert litstore.open(root)["im004"]["caption"] == "four"
    assert cli_json("delete", root, "--where", "label = 4")["removed"] == 4
    assert cli_json("delete", root, "im000", "im005")["removed"] == 2
    assert "'nope'" in _error_line(cli("delete", root, "nope", code=3))
    assert "one of the two" in _error_line(cli("delete", root, "im003", "--where", "label = 3", code=2))
    assert "add_fields" in _error_line(cli("update", root, "--where", "note = 'n'", "--set", "x=1", code=2))
    assert "cannot be updated" in _error_line(cli("update", root, "im003", "--set", "id=x", code=2))
    assert "not in version" in _error_line(cli("update", root, "gone", "--set", "label=1", code=3))
    assert "declared field 'label'" in _error_line(cli("update", root, "im003", "--set", "label=x", code=1))
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"id": "im003", "label": 0, "split": "train"}) + "\n")
    assert cli_json("upsert", root, changed)["replaced"] == 1
    assert litstore.open(root)["im003"] == {"id": "im003", "label": 0, "split": "train"}


def test_create_refuses_a_bad_field_and_an_existing_store_with_what_to_do(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert "NAME:TYPE" in _error_line(cli("create", root, "--field", "label:integer", code=2))
    assert "NAME:TYPE" in _error_line(cli("create", root, "--field", "label", code=2))
    cli("create", root)
    line = _error_line(cli("create", root, code=2))
    assert "litstore import" in line and "litstore.open" not in line


def test_at_reads_a_version_on_every_command_and_old_spellings_still_work(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _created(root)
    record = tmp_path / "one.jsonl"
    record.write_text(json.dumps({"id": "a", "label": 1, "split": "train"}) + "\n")
    cli("import", root, record)
    cli("update", root, "a", "--set", "label=2")
    assert cli_json("get", root, "a", "--at", "2")["label"] == 2
    assert cli_json("get", root, "a", "-V", "1")["label"] == 1
    assert cli_json("show", root, "-V", "1")["number"] == 1
    assert cli_json("verify", root, "--at", "1")["version"] == 1
    assert cli_json("sql", root, "SELECT label FROM manifest", "--at", "1") == [{"label": 1}]
    assert cli_json("audit", root, "--at", "1")["version"] == 1
    cli("tag", root, "first", "--at", "1")
    old = cli("get", root, "a", "--version", "first", "--json")
    assert json.loads(old.stdout)["label"] == 1 and "--version is deprecated: use --at first" in old.stderr
    positional = cli("show", root, "1", "--json")
    assert json.loads(positional.stdout)["number"] == 1 and "deprecated" in positional.stderr
    assert "once" in _error_line(cli("get", root, "a", "--at", "1", "-v", "2", code=2))
    assert cli("--version").stdout.strip() == f"litstore {litstore.__version__}"


def test_audit_json_is_a_structured_report(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root)
    twins = tmp_path / "twins.jsonl"
    twins.write_text("".join(json.dumps({"id": key, "v": 1}) + "\n" for key in ("x", "y", "z")))
    cli("import", root, twins)
    report = cli_json("audit", root, code=1)
    assert report["ok"] is False and report["duplicate_group_count"] == 1
    assert report["duplicate_groups"] == [["x", "y", "z"]] and report["records_checked"] == 3


def test_progress_bars_only_on_a_terminal(tmp_path: Path) -> None:
    manifest, root = _recipe(tmp_path, 4), tmp_path / "store"
    _created(root)
    quiet = cli("import", root, manifest)  # stderr is not a terminal here: no bar, no \r fragments
    assert "\r" not in quiet.stderr and "%|" not in quiet.stderr
    cli("delete", root, "im000", "im001", "im002", "im003")
    asked = cli("import", root, manifest, "--progress")
    assert "%|" in asked.stderr or "it/s" in asked.stderr or "rec" in asked.stderr


@pytest.mark.integration
def test_the_recipe_end_to_end_through_python_m_litstore(tmp_path: Path) -> None:
    manifest, root = _recipe(tmp_path, 40), tmp_path / "store"
    _created(root)
    result = subprocess.run(
        [sys.executable, "-m", "litstore", "import", str(root), str(manifest)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "read 40 records, 40 images" in result.stdout and "\r" not in result.stderr
    store = litstore.open(root)
    streamed = list(store.dataset(split="train", views_dir=tmp_path / "views"))
    assert sorted(item["id"] for item in streamed) == sorted(f"im{i:03d}" for i in range(40) if i % 4)
    for item in streamed:
        assert tuple(item["image"].shape) in ((3, 8, 6), (8, 6, 3)) and item["label"] == int(item["id"][2:]) % 5
