"""Manifest checkpoints spaced by the store's size: their O(store) cost stays a fixed share of each commit.

A checkpoint rewrites every record's row and key-run entry, so a large store spaces them
``checkpoint_interval`` times a power of two apart (:func:`litstore.txn.checkpoint.checkpoint_spacing`),
while listings are still written in full every ``checkpoint_interval`` versions. The
versions in between compose from longer chains and must read exactly as before.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.format import layout
from litstore.txn.checkpoint import ROWS_PER_CHECKPOINT_VERSION, checkpoint_spacing

_CHECKPOINT = re.compile(r"(\d+)-[0-9a-f]+\.checkpoint\.parquet")


def _record(number: int, label: int = 0) -> dict[str, Any]:
    return {"id": f"r{number:05d}", "label": label, "text": "x" * (number % 11)}


def _checkpointed(root: Path) -> list[int]:
    names = (root / layout.MANIFESTS).iterdir()
    return sorted(int(match.group(1)) for name in names if (match := _CHECKPOINT.fullmatch(name.name)))


def test_spacing_is_the_interval_until_the_store_outgrows_it_then_doubles() -> None:
    per = ROWS_PER_CHECKPOINT_VERSION
    assert checkpoint_spacing(64, 0) == 64
    assert checkpoint_spacing(64, 64 * per) == 64
    assert checkpoint_spacing(64, 64 * per + 1) == 128
    assert checkpoint_spacing(64, 16_000_000) == 512
    assert checkpoint_spacing(64, 10**9) == 32_768
    assert checkpoint_spacing(3, 10 * per) == 12
    for live in (0, 1, 5 * per, 10**7, 10**10):  # a checkpoint's rows over the versions it spans stay bounded
        spacing = checkpoint_spacing(64, live)
        assert spacing % 64 == 0 and (spacing // 64) & (spacing // 64 - 1) == 0
        assert spacing * per >= live and (spacing == 64 or spacing * per < 2 * live)


def test_a_large_store_checkpoints_on_its_spacing_and_every_version_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 records a version: a store of 40 spaces its checkpoints 2 * 8 = 16 versions apart, not 2.
    monkeypatch.setattr(sys.modules["litstore.txn.checkpoint"], "ROWS_PER_CHECKPOINT_VERSION", 4)
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", fields={"label": int}, chunk_bytes=512, checkpoint_interval=2)
    model: list[dict[str, dict[str, Any]]] = [{}]
    store.append([_record(n) for n in range(40)])
    model.append({r["id"]: r for r in map(_record, range(40))})
    for step in range(2, 36):  # small appends, an upsert and a delete now and then
        live = dict(model[-1])
        if step % 7 == 0:
            changed = [_record(n, label=step) for n in range(step, step + 3)]
            store.upsert(changed)
            live.update({r["id"]: r for r in changed})
        elif step % 5 == 0:
            gone = sorted(live)[:2]
            store.delete(gone)
            for key in gone:
                del live[key]
        else:
            added = _record(100 + step)
            store.append([added])
            live[added["id"]] = added
        model.append(live)
    assert store.version.number == 35
    # 40 to 51 live records, never past 16 * 4 = 64: the spacing stays 16.
    assert _checkpointed(root) == [16, 32]
    # Listings are still written in full every checkpoint_interval versions (no split index otherwise).
    full_listed = [number for number in range(1, 36) if not store.at(number).version.listed_by_delta]
    assert full_listed == list(range(2, 36, 2))

    reopened = litstore.open(root)
    for number in (1, 9, 15, 16, 17, 31, 33, 35):
        snapshot, expected = reopened.at(number), model[number]
        assert sorted(snapshot.keys()) == sorted(expected)
        assert {key: dict(record) for key, record in snapshot.items()} == expected
        counted = snapshot.sql("SELECT count(*) AS n, coalesce(sum(label), 0) AS s FROM manifest").to_pylist()[0]
        assert counted == {"n": len(expected), "s": sum(r["label"] for r in expected.values())}
        for key in list(expected)[::9]:
            assert dict(snapshot[key]) == expected[key]
    assert reopened.verify().ok
    difference = reopened.diff(20, 35)
    assert set(difference.added.column("key").to_pylist()) == set(model[35]) - set(model[20])
    assert set(difference.removed.column("key").to_pylist()) == set(model[20]) - set(model[35])


def test_a_store_under_the_spacing_threshold_checkpoints_every_interval(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=512, checkpoint_interval=3)
    for step in range(10):
        store.append([_record(step)])
    assert _checkpointed(root) == [3, 6, 9]


def test_a_store_growing_faster_than_its_spacing_still_checkpoints_and_bounds_its_key_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 records a version against 4 a version of spacing: the spacing (2 * 2^k >= live / 4) outruns the
    version number, so no version is ever a multiple of it. Runs past the merge limit no longer merge, so
    without another rule every few commits left a run for good (and every version's chain ran to version 1):
    a store ingested by appends of over 32,768 records never checkpointed. A commit whose parent lists
    MAX_KEY_RUNS runs checkpoints, which writes one run of every record."""
    monkeypatch.setattr(sys.modules["litstore.txn.checkpoint"], "ROWS_PER_CHECKPOINT_VERSION", 4)
    monkeypatch.setattr(sys.modules["litstore.txn.checkpoint"], "MAX_KEY_RUNS", 6, raising=False)
    monkeypatch.setattr(sys.modules["litstore.txn.keyruns"], "MERGE_LIMIT", 64)
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", fields={"label": int}, chunk_bytes=4096, checkpoint_interval=2)
    expected: dict[str, dict[str, Any]] = {}
    for step in range(1, 41):
        batch = [_record(step * 100 + n, label=step) for n in range(20)]
        store.append(batch)
        expected.update({r["id"]: r for r in batch})
        assert store.version.number * 4 * 2 < len(expected)  # the spacing is past the version number
        assert len(store.version.key_runs) <= 6, f"version {step} lists {len(store.version.key_runs)} key runs"
    assert _checkpointed(root), "no version checkpointed"
    reopened = litstore.open(root)
    assert {key: dict(record) for key, record in reopened.items()} == expected
    for key in list(expected)[::37]:
        assert dict(reopened[key]) == expected[key]
    assert reopened.verify().ok


def test_a_store_without_key_runs_keeps_checkpoints_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 2 looks keys up in the composed manifest, so every open reads the chain: no wider spacing there."""
    monkeypatch.setattr(sys.modules["litstore.txn.checkpoint"], "ROWS_PER_CHECKPOINT_VERSION", 1)
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=512, checkpoint_interval=3, format_version=2)
    for step in range(10):
        store.append([_record(10 * step + n) for n in range(10)])
    assert _checkpointed(root) == [3, 6, 9]
    assert sorted(litstore.open(root).keys()) == sorted(f"r{n:05d}" for n in range(100))
