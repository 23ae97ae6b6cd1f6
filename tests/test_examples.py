"""The examples run end to end, as a user would run them, and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import litstore

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.integration


def run_example(name: str, args: list[str], tmp_path: Path) -> str:
    """Run ``examples/<name>`` in a fresh interpreter; return its stdout (fails on a non-zero exit)."""
    env = {
        **os.environ,
        "LITSTORE_VIEWS": str(tmp_path / "views"),
        "PYTHONWARNINGS": "error::DeprecationWarning:__main__",
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{name} exited with {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_demo(tmp_path: Path) -> None:
    out = run_example("demo.py", [str(tmp_path / "root")], tmp_path)
    assert "version 1: append +1000" in out
    assert "version 2: append +500" in out
    assert "version 1 has pet-01234? False; latest has it? True" in out
    assert "records per split:" in out
    assert (tmp_path / "root" / "pets").is_dir()


def test_train_pinned(tmp_path: Path) -> None:
    root = tmp_path / "root"
    out = run_example("train_pinned.py", ["--root", str(root)], tmp_path)
    lines = out.splitlines()
    assert "version 1: 160 images from images.jsonl, counts {'train': 128, 'val': 32}" in lines
    assert "train records per label: {0: 36, 1: 46, 2: 46}" in lines
    assert "epoch 3: 82 samples, 18 steps" in out  # trained on the where="label IN (0, 1)" subset only
    assert "tagged version 1 as 'trained-run-1'" in lines
    assert "version 2: 40 more images, counts {'train': 160, 'val': 40}" in lines
    assert "version 1 -> 2: +40 added, -0 removed, ~0 changed" in lines
    assert "'trained-run-1' (version 1) still streams the same 128 train records; version 2 streams 160" in lines
    assert (
        "'trained-run-1' subset 'label IN (0, 1)' still streams the same 82 records the model was trained on; "
        "version 2 streams 100"
    ) in lines
    accuracy = float(next(line for line in lines if line.startswith("val accuracy")).rsplit(" ", 1)[1])
    assert accuracy >= 0.9, out
    assert (root / "images.jsonl").read_text().count("\n") == 200
    assert (root / "store" / "tags" / "trained-run-1.json").is_file()
    assert litstore.open(root / "store").head().fields == {"label": "int64"}


def test_ray_ingest(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = run_example("ray_ingest.py", [], tmp_path)
    lines = out.splitlines()
    assert "version 1: {'train': 4499, 'val': 501} records, one commit from 8 tasks" in lines
    assert "version 2: {'train': 4499, 'val': 501} records after the upsert" in lines
    assert "read version 1 split val: 501 records, revisions [0]" in lines
    assert "every embedding normalised: True" in lines
    assert "verify: True" in lines
