"""``Store.verify`` of a format-3 version checks its key runs and its chunks' hashes sidecars against the manifest.

Each test damages a copy of one small format-3 store (an append, an upsert, a delete:
three key runs, deleted entries among them, a sidecar per chunk) so that only the
index or a sidecar disagrees: runs are re-encoded with valid page sums and fences
(and the commit records' sizes fixed), sidecars with a valid checksum, so the chunks
and the manifest stay sound and only the semantic check can tell. Each case is
reported in ``index_problems`` (not raised), and verify leaves the store as it was.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore.format import chunkhashes, hashing, keyrun, layout
from litstore.format.models import KeyRunRef
from litstore.ops import verify_index
from litstore.read.keyruns import RunReader

UPSERTED = [f"k{i:04d}" for i in range(0, 300, 7)]
DELETED = [f"k{i:04d}" for i in range(3, 300, 11)]
LATE = ["k0005", "k0009"]
#: A key of the first append, never upserted or deleted.
PLAIN = "k0001"


def _record(key: str, rev: int = 0) -> dict[str, Any]:
    return {"id": key, "rev": rev, "text": f"{key}/{rev} " * 4}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-index") / "store"
    store = litstore.Store.create(root, key="id", chunk_bytes=4096, format_version=3)
    store.append([_record(f"k{i:04d}") for i in range(300)])
    store.upsert([_record(key, 1) for key in UPSERTED])
    store.delete(DELETED)  # rewrites the chunks: one run of every record
    store.append([_record(f"n{i:04d}") for i in range(30)])
    store.delete(LATE)  # a newer run with their deleted entries (and the records moved from their chunks)
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "store"
    shutil.copytree(template, target)
    return target


def _files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _verified(root: Path, **kwargs: Any) -> litstore.VerifyReport:
    """``verify()`` of the head, checking that it changed no file of the store."""
    before = _files(root)
    report = litstore.open(root).verify(**kwargs)
    assert _files(root) == before
    return report


def _only_index_problems(report: litstore.VerifyReport, *expected: str) -> None:
    """The report fails on its index problems alone, each of ``expected`` in one of them, and says so."""
    assert not report.ok
    assert report.index_problems
    text = "\n".join(f"{path}: {what}" for path, what in report.index_problems)
    for part in expected:
        assert part in text, text
    assert report.fingerprint_ok
    others = (report.corrupt_records, report.missing_records, report.unlisted_records, report.damaged_chunks)
    assert not any(others) and not report.missing_chunks and not report.duplicate_keys
    assert "key index and sidecar problems" in report.summary()
    with pytest.raises(litstore.VerificationError):
        report.raise_if_failed()


def _refs(root: Path) -> tuple[KeyRunRef, ...]:
    return litstore.open(root).version.key_runs


def _entries(root: Path, ref: KeyRunRef) -> tuple[np.ndarray, list[str]]:
    return RunReader(litstore.open(root).storage, ref).everything()


def _rewrite_run(root: Path, ref: KeyRunRef, change: Callable[[np.ndarray, list[str]], np.ndarray]) -> None:
    """Encode the run ``ref`` anew (sums, fences and footer valid) from ``change(entries, names)``, and fix the
    size and count every commit record gives it."""
    entries, names = _entries(root, ref)
    entries = change(entries, names)
    entries = entries[np.argsort(entries["key_hash"], kind="stable")]
    data = keyrun.encode(entries, names)
    (root / ref.path).write_bytes(data)
    for record_path in (root / layout.VERSIONS).glob("*.json"):
        record = json.loads(record_path.read_bytes())
        runs = record.get("key_runs", [])
        if any(run["path"] == ref.path for run in runs):
            record["key_runs"] = [
                {**run, "size": len(data), "entries": len(entries)} if run["path"] == ref.path else run for run in runs
            ]
            record_path.write_text(json.dumps(record))


def _of(entries: np.ndarray, key: str) -> np.ndarray:
    return np.asarray(entries["keyprint"] == np.array(hashing.keyprint(key), dtype="V16"))


def _deciding_run(root: Path, key: str) -> KeyRunRef:
    """The newest run with an entry for ``key``: the one a lookup of it takes."""
    for ref in _refs(root):
        if _of(_entries(root, ref)[0], key).any():
            return ref
    raise AssertionError(f"no run holds {key}")


# -- sound stores ------------------------------------------------------------------


def test_a_sound_format_3_store_verifies_ok(root: Path) -> None:
    store = litstore.open(root)
    assert len(store.version.key_runs) >= 2, "the case needs several runs, newest first"
    assert any((root / layout.chunk_hashes(chunk.filename)).exists() for chunk in store.chunks()["train"])
    deleted_entries = sum(int((_entries(root, ref)[0]["chunk"] == keyrun.DELETED).sum()) for ref in _refs(root))
    assert deleted_entries, "the case needs deleted entries"
    report = _verified(root)
    assert report.ok, report.summary()
    assert report.index_problems == []
    assert _verified(root, num_workers=1).ok


def test_a_sound_format_2_store_verifies_ok(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, format_version=2)
    store.append([_record(f"k{i:04d}") for i in range(100)])
    store.delete(["k0003"])
    assert store.version.key_runs == ()
    report = _verified(tmp_path / "s")
    assert report.ok and report.index_problems == []


def test_versions_from_before_an_upgrade_have_no_index_to_check(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, format_version=2)
    store.append([_record(f"k{i:04d}") for i in range(100)])
    store.upgrade()
    store.append([_record("z0000")])
    assert store.at(1).version.key_runs == ()
    assert store.verify(1).ok and store.verify().ok


def test_a_missing_sidecar_is_fine(root: Path) -> None:
    chunk = litstore.open(root).chunks()["train"][0].filename
    (root / layout.chunk_hashes(chunk)).unlink()
    assert _verified(root).ok


# -- key runs that disagree with the manifest --------------------------------------


def test_an_entry_pointing_at_another_row_is_reported(root: Path) -> None:
    ref = _deciding_run(root, PLAIN)

    def change(entries: np.ndarray, _: list[str]) -> np.ndarray:
        entries["row"][_of(entries, PLAIN)] += 1
        return entries

    _rewrite_run(root, ref, change)
    _only_index_problems(_verified(root), ref.path, repr(PLAIN), "by the key index")


def test_an_entry_with_a_flipped_content_hash_is_reported(root: Path) -> None:
    key = "k0007"  # upserted, never deleted
    ref = _deciding_run(root, key)

    def change(entries: np.ndarray, _: list[str]) -> np.ndarray:
        (at,) = np.flatnonzero(_of(entries, key))
        flipped = bytearray(entries["content"][at].tobytes())
        flipped[3] ^= 0x10
        entries["content"][at] = np.void(bytes(flipped))
        return entries

    _rewrite_run(root, ref, change)
    report = _verified(root)
    _only_index_problems(report, ref.path, repr(key), "another content hash")
    assert len(report.index_problems) == 1
    assert _verified(root, num_workers=1).index_problems == report.index_problems


def test_a_live_key_missing_from_every_run_is_reported(root: Path) -> None:
    for ref in _refs(root):
        if _of(_entries(root, ref)[0], PLAIN).any():
            _rewrite_run(root, ref, lambda entries, _: entries[~_of(entries, PLAIN)])
    _only_index_problems(_verified(root), repr(PLAIN), "is in no key run")


def test_a_key_deleted_by_the_index_is_reported(root: Path) -> None:
    """The newest run says a live key was deleted: lookups would say it is not there."""
    ref = _refs(root)[0]

    def change(entries: np.ndarray, _: list[str]) -> np.ndarray:
        planted = np.zeros(1, keyrun.ENTRY)
        planted["key_hash"] = hashing.key_hash(PLAIN)
        planted["chunk"] = keyrun.DELETED
        planted["keyprint"] = np.array(hashing.keyprint(PLAIN), dtype="V16")
        return np.concatenate([planted, entries])

    _rewrite_run(root, ref, change)
    _only_index_problems(_verified(root), repr(PLAIN), "deleted by the key index")


def test_a_deleted_key_listed_as_live_is_reported(root: Path) -> None:
    """A deleted key's entries are taken out and a live one planted in the newest run, at a real record."""
    gone = DELETED[0]
    for ref in _refs(root):
        if _of(_entries(root, ref)[0], gone).any():
            _rewrite_run(root, ref, lambda entries, _: entries[~_of(entries, gone)])
    newest = _refs(root)[0]

    def change(entries: np.ndarray, names: list[str]) -> np.ndarray:
        planted = entries[entries["chunk"] != keyrun.DELETED][:1].copy()  # a live record's place and hash
        planted["key_hash"] = hashing.key_hash(gone)
        planted["keyprint"] = np.array(hashing.keyprint(gone), dtype="V16")
        return np.concatenate([planted, entries])

    _rewrite_run(root, newest, change)
    report = _verified(root)
    _only_index_problems(report, newest.path, hashing.keyprint(gone).hex(), "a key the version does not hold")
    with pytest.raises(litstore.IntegrityError):  # what the check protects: the lookup meets a stranger's record
        litstore.open(root)[gone]


def test_an_entry_under_the_wrong_key_hash_is_reported(root: Path) -> None:
    """The entry keeps its keyprint but sorts under another key's hash: lookups of the key miss it. Two
    keyprints then share a key hash, which the check resolves by the whole join key."""
    other = hashing.key_hash("k0002")

    def change(entries: np.ndarray, _: list[str]) -> np.ndarray:
        entries["key_hash"][_of(entries, PLAIN)] = other
        return entries

    for ref in _refs(root):
        if _of(_entries(root, ref)[0], PLAIN).any():
            _rewrite_run(root, ref, change)
    _only_index_problems(_verified(root), repr(PLAIN), "is in no key run", "a key the version does not hold")


def test_a_missing_run_is_reported(root: Path) -> None:
    ref = _refs(root)[0]
    (root / ref.path).unlink()
    report = litstore.open(root).verify()
    _only_index_problems(report, ref.path, "missing")


@pytest.mark.parametrize("where", ["page", "footer"])
def test_a_damaged_run_is_reported_not_raised(root: Path, where: str) -> None:
    ref = _refs(root)[-1]
    path = root / ref.path
    data = bytearray(path.read_bytes())
    data[10 if where == "page" else -keyrun.footer_size()] ^= 0x40
    path.write_bytes(bytes(data))
    expected = "page 0 does not match its checksum" if where == "page" else "does not end with a key run's footer"
    _only_index_problems(_verified(root), ref.path, expected)


# -- sidecars that disagree with the manifest --------------------------------------


def _sidecar(root: Path) -> tuple[Path, str, int]:
    chunk = litstore.open(root).chunks()["train"][0]
    return root / layout.chunk_hashes(chunk.filename), chunk.filename, chunk.num_items


def test_a_sidecar_with_a_wrong_hash_is_reported(root: Path) -> None:
    path, chunk, count = _sidecar(root)
    hashes = bytearray(chunkhashes.parse(chunk, path.read_bytes(), count))
    hashes[16 * 2 + 5] ^= 0x01
    path.write_bytes(chunkhashes.encode(chunk, bytes(hashes)))
    report = _verified(root)
    _only_index_problems(report, layout.chunk_hashes(chunk), "rows 2 (1 of", "another content hash")
    assert len(report.index_problems) == 1


@pytest.mark.parametrize("cut", [1, 20])
def test_a_cut_sidecar_is_reported(root: Path, cut: int) -> None:
    path, chunk, _ = _sidecar(root)
    path.write_bytes(path.read_bytes()[:-cut])
    _only_index_problems(_verified(root), layout.chunk_hashes(chunk), "bytes long")


def test_another_chunks_sidecar_is_reported(root: Path) -> None:
    first, second = litstore.open(root).chunks()["train"][:2]
    target = root / layout.chunk_hashes(first.filename)
    target.write_bytes((root / layout.chunk_hashes(second.filename)).read_bytes())
    expected = "checksum" if first.num_items == second.num_items else "bytes long"
    _only_index_problems(_verified(root), layout.chunk_hashes(first.filename), expected)


# -- the resolution rule, on entries no store would hold ---------------------------


def test_keys_sharing_a_key_hash_are_resolved_newest_first_by_keyprint() -> None:
    """Three keys share one key hash; key 1 has an entry in both runs: the newer (run 0) decides."""

    def entries(run: int, prints: list[int], rows: list[int]) -> verify_index._Entries:
        count = len(prints)
        return verify_index._Entries(
            np.full(count, 7, np.uint64),
            np.array([[p, p] for p in prints], np.uint64),
            np.array(rows, np.uint64),
            np.zeros((count, 2), np.uint64),
            np.full(count, run, np.uint32),
        )

    resolved, keys = verify_index._resolve([entries(0, [2, 1], [20, 10]), entries(1, [1, 3], [99, 30])])
    assert keys is not None  # the collision path
    prints = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], np.uint64)
    at, found = verify_index._found(resolved, keys, np.full(4, 7, np.uint64), prints)
    assert found.tolist() == [True, True, True, False]
    assert resolved.places[at[:3]].tolist() == [10, 20, 30]
    assert resolved.runs[at[:3]].tolist() == [0, 0, 1]
