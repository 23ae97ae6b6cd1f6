"""How ``verify`` checks a key index by streamed sums and sidecars by the items' own hashes.

A format-4 store whose runs have pages of 8 entries (``keyrun.PAGE`` patched while it
is written; readers take the page size from the footer) is checked with ranges of a
few dozen entries, so the sums cross many ranges and pages cut between them. A sound
store must agree by its sums alone (the whole join is never run); an entry planted in
a middle range must still be named. Sidecars are compared with the hashes of the
items read, and with the manifest only where an item did not match its row (a
corrupt record, a missing chunk): those cases are built here for real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore.format import chunkhashes, hashing, keyrun, layout
from litstore.format.models import KeyRunRef
from litstore.ops import verify_index, verify_listed
from litstore.read.keyruns import RunReader


def _record(key: str, rev: int = 0) -> dict[str, Any]:
    return {"id": key, "rev": rev, "text": f"{key}/{rev} " * 4}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-streamed") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyrun, "PAGE", 8)
        store = litstore.Store.create(root, key="id", chunk_bytes=4096)
        store.append([_record(f"k{i:04d}") for i in range(300)])
        store.upsert([_record(f"k{i:04d}", 1) for i in range(0, 300, 7)])
        store.delete([f"k{i:04d}" for i in range(3, 300, 11)])
        store.append([_record(f"n{i:04d}") for i in range(40)])
    assert len(store.version.key_runs) > 1
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "store"
    shutil.copytree(template, target)
    monkeypatch.setattr(verify_index, "_RANGE_ENTRIES", 24)
    return target


def test_a_sound_store_agrees_by_its_sums_across_many_ranges(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranges: list[tuple[int | None, int | None]] = []
    read = verify_index._range_entries

    def counted(run: Any, low: int | None, high: int | None, problems: list[tuple[str, str]]) -> Any:
        ranges.append((low, high))
        return read(run, low, high, problems)

    def never(*_: Any) -> list[tuple[str, str]]:
        raise AssertionError("the sums disagreed on a sound store")

    monkeypatch.setattr(verify_index, "_range_entries", counted)
    monkeypatch.setattr(verify_index, "_detailed", never)
    report = litstore.open(root).verify()
    assert report.ok, report.summary()
    assert len(set(ranges)) > 5


def _rewrite_run(root: Path, ref: KeyRunRef, entries: np.ndarray, names: list[str]) -> None:
    """Write ``entries`` as run ``ref`` (pages of 8, sums and fences valid) and fix its size in the records."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyrun, "PAGE", 8)
        data = keyrun.encode(entries[np.argsort(entries["key_hash"], kind="stable")], names)
    (root / ref.path).write_bytes(data)
    for record_path in (root / layout.VERSIONS).glob("*.json"):
        record = json.loads(record_path.read_bytes())
        runs = record.get("key_runs", [])
        record["key_runs"] = [{**run, "size": len(data)} if run["path"] == ref.path else run for run in runs]
        record_path.write_text(json.dumps(record))


def test_an_entry_moved_in_a_middle_range_is_named(root: Path) -> None:
    store = litstore.open(root)
    ref = max(store.version.key_runs, key=lambda run: run.entries)
    entries, names = RunReader(store.storage, ref).everything()
    live = np.flatnonzero(entries["chunk"] != keyrun.DELETED)
    at = int(live[len(live) // 2])  # a page in the middle of the run: neither the first range nor the last
    keyprint = entries["keyprint"][at].tobytes()
    entries["row"][at] += 1
    _rewrite_run(root, ref, entries, names)
    report = litstore.open(root).verify()
    assert not report.ok and report.fingerprint_ok
    keys = [key for key in store.keys() if hashing.keyprint(key) == keyprint]
    assert len(keys) == 1
    text = "\n".join(what for _, what in report.index_problems)
    assert f"key {keys[0]!r} is at" in text and "by the key index" in text, text
    assert len(report.index_problems) == 1


def _chunk(root: Path) -> tuple[str, int, Path]:
    chunk = litstore.open(root).chunks()["train"][0]
    return chunk.filename, chunk.num_items, root / layout.chunk_hashes(chunk.filename)


def _spoil_sidecar(path: Path, chunk: str, count: int, row: int) -> None:
    hashes = bytearray(chunkhashes.parse(chunk, path.read_bytes(), count))
    hashes[16 * row + 5] ^= 0x01
    path.write_bytes(chunkhashes.encode(chunk, bytes(hashes)))


def _corrupt_item(root: Path, chunk: str, row: int) -> None:
    """Flip the last byte of item ``row`` of ``chunk`` (inside its text: the layout stays sound)."""
    path = root / chunk
    data = bytearray(path.read_bytes())
    count = int.from_bytes(data[:4], "little")
    offsets = np.frombuffer(bytes(data[4 : 4 + 4 * (count + 1)]), "<u4")
    data[int(offsets[row + 1]) - 2] ^= 0x01
    path.write_bytes(bytes(data))


def _listed_row(root: Path, chunk: str) -> int:
    rows = litstore.open(root).manifest().to_pylist()
    return min(row["row"] for row in rows if row["chunk"] == chunk)


def test_a_corrupt_record_with_a_sound_sidecar_is_no_sidecar_problem(root: Path) -> None:
    chunk, _, _ = _chunk(root)
    row = _listed_row(root, chunk)
    _corrupt_item(root, chunk, row)
    report = litstore.open(root).verify()
    assert [(name, item) for _, name, item, _ in report.corrupt_records] == [(chunk, row)]
    assert report.index_problems == []


def test_a_sidecar_wrong_at_a_corrupt_record_is_reported(root: Path) -> None:
    chunk, count, path = _chunk(root)
    row = _listed_row(root, chunk)
    _corrupt_item(root, chunk, row)
    _spoil_sidecar(path, chunk, count, row)
    report = litstore.open(root).verify()
    assert [(name, item) for _, name, item, _ in report.corrupt_records] == [(chunk, row)]
    assert report.index_problems == [
        (layout.chunk_hashes(chunk), f"rows {row} (1 of {count}) hold another content hash than the manifest's")
    ]


def test_a_sidecar_of_a_missing_chunk_is_still_checked(root: Path) -> None:
    chunk, count, path = _chunk(root)
    row = _listed_row(root, chunk)
    _spoil_sidecar(path, chunk, count, row)
    (root / chunk).unlink()
    report = litstore.open(root).verify()
    assert report.missing_chunks == [chunk]
    assert report.index_problems == [
        (layout.chunk_hashes(chunk), f"rows {row} (1 of {count}) hold another content hash than the manifest's")
    ]


# -- a range's sum, on entries no store would hold ---------------------------------


def _reference_sum(parts: list[tuple[Any, np.ndarray]], digest: verify_listed.IndexDigest) -> int:
    """The sum as :func:`verify_index._resolve` resolves the entries: per key, the first of the newest run."""
    resolved, _ = verify_index._resolve(
        [verify_index._entry_columns(entries, run.codes, run.number) for run, entries in parts]
    )
    live = resolved.places != verify_index._DELETED_PLACE
    return digest.sum(resolved.hashes[live], resolved.prints[live], resolved.places[live], resolved.contents[live])


@pytest.mark.parametrize("seed", range(40))
def test_a_range_sums_what_resolving_its_entries_gives(seed: int) -> None:
    """Runs holding the same keys (newest first), deleted entries, a key twice in one run, key hashes two keys
    share: the range's sum, taken where the entries lie, is the sum over the entries a lookup resolves."""
    rng = np.random.default_rng(seed)
    keys = int(rng.integers(1, 60))
    hashes = np.sort(rng.integers(0, 2**64, keys, dtype=np.uint64))
    if seed % 3 == 0:
        hashes[rng.integers(0, keys, keys // 4)] = hashes[0]  # key hashes several keys share
    prints = rng.integers(0, 2**64, (keys, 2), dtype=np.uint64)
    parts = []
    for number in range(int(rng.integers(1, 4))):
        chosen = np.sort(rng.choice(keys, int(rng.integers(1, keys + 1)), replace=seed % 4 == 1))
        entries = np.zeros(len(chosen), keyrun.ENTRY)
        entries["key_hash"] = hashes[chosen]
        entries["keyprint"] = prints[chosen].view("V16")[:, 0]
        entries["content"] = rng.integers(0, 2**64, (len(chosen), 2), dtype=np.uint64).view("V16")[:, 0]
        entries["chunk"] = np.where(rng.random(len(chosen)) < 0.2, keyrun.DELETED, rng.integers(0, 3, len(chosen)))
        entries["row"] = rng.integers(0, 1000, len(chosen))
        entries = entries[np.argsort(entries["key_hash"], kind="stable")]
        codes = np.array([5, 9, 2, 0], np.uint64)
        run = verify_index._Run(number, None, None, None, codes, set())  # type: ignore[arg-type]
        parts.append((run, entries))
    digest = verify_listed.IndexDigest(seed)
    assert verify_index._range_sum(parts, digest) == _reference_sum(parts, digest)
