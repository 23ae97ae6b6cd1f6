"""How ``verify`` reads a version's manifest into fixed columns in bounded memory.

The keys newer deltas mention are merged in place (``_merge_into``), and the columns
are filled in arrays sized by the commit record's counts, grown when a manifest lists
more. Both are checked against the manifest composed the ordinary way, on a chain of
appends, upserts and deletes whose mentioned keys cross many merge blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import litstore
from litstore.format import hashing
from litstore.ops import verify_listed
from litstore.read.manifests import compose_manifest


def _record(key: str, rev: int = 0) -> dict[str, Any]:
    return {"id": key, "rev": rev, "split": "train" if int(key[1:]) % 4 else "val"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> litstore.Store:
    root = tmp_path_factory.mktemp("verify-listed") / "store"
    store = litstore.Store.create(root, key="id", splits="split", chunk_bytes=2048)
    store.append([_record(f"k{i:04d}") for i in range(200)])
    store.upsert([_record(f"k{i:04d}", 1) for i in range(0, 200, 3)])
    store.delete([f"k{i:04d}" for i in range(1, 200, 7)])
    store.append([_record(f"k{i:04d}") for i in range(200, 260)])
    store.upsert([_record(f"k{i:04d}", 2) for i in range(0, 260, 5)])
    return store


def _listed(store: litstore.Store, counts: dict[str, int] | None = None) -> verify_listed.Listed:
    version = store.version if counts is None else store.version.model_copy(update={"counts": counts})
    return verify_listed.read_listed(store.storage, store.config, version, verify_listed.Names())


def _expected(store: litstore.Store) -> tuple[np.ndarray, int]:
    manifest = compose_manifest(store.storage, store.config, store.version.number)
    hashes = np.sort(verify_listed.key_hashes(manifest.column("key")))
    pairs = hashing.pair_hashes(manifest.column("key"), manifest.column("content_hash"))
    return hashes, hashing.digest_sum(pairs) % hashing.FINGERPRINT_MODULUS


@pytest.mark.parametrize("block", [1, 3, 64, 1 << 18])
def test_rows_match_the_composed_manifest_whatever_the_merge_block(
    store: litstore.Store, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify_listed, "_MERGE_BLOCK", block)
    listed = _listed(store)
    hashes, fingerprint = _expected(store)
    assert len(listed) == store.version.total == len(hashes)
    assert np.array_equal(np.sort(listed.key_hash), hashes)
    assert listed.fingerprint == fingerprint
    assert hashing.fingerprint_hex(listed.fingerprint) == store.version.fingerprint


def test_a_manifest_listing_more_rows_than_committed_is_read_whole(store: litstore.Store) -> None:
    sound = _listed(store)
    short = _listed(store, {split: 1 for split in store.version.counts})  # the columns must grow
    assert len(short) == len(sound) == store.version.total
    for name in ("key_hash", "pair", "location", "split"):
        assert np.array_equal(getattr(short, name), getattr(sound, name)), name
    assert short.fingerprint == sound.fingerprint


def test_merge_into_gives_what_insert_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        monkeypatch.setattr(verify_listed, "_MERGE_BLOCK", int(rng.integers(1, 300)))
        old = np.sort(rng.integers(0, 100, int(rng.integers(0, 1000))).astype(np.uint64))
        values = np.sort(rng.integers(0, 100, int(rng.integers(1, 1000))).astype(np.uint64))
        at = np.searchsorted(old, values)
        column = np.empty(0, np.uint64)
        column.resize(len(old) + len(values), refcheck=False)
        column[: len(old)] = old
        verify_listed._merge_into(column, len(old), at, values)
        assert np.array_equal(column, np.insert(old, at, values))


def test_mentioned_keys_are_found_as_the_set_and_its_bits_grow() -> None:
    """Keyprints added delta by delta (the bits rebuilt as the set outgrows them, an empty delta among them) are
    all found, and keyprints never added are not, whether or not their slots are marked."""
    rng = np.random.default_rng(7)
    mentioned = verify_listed._Mentioned()
    added = []
    for count in (1000, 0, 70_000, 5, 300_000):
        prints = rng.integers(0, 256, (count, 16), dtype=np.uint8)
        added.append(prints)
        mentioned.add([prints])
    every = np.concatenate(added)
    absent = rng.integers(0, 256, (200_000, 16), dtype=np.uint8)
    absent[:1000, :8] = every[:1000, :8]  # sharing a first word (so a slot) with a mentioned key
    found = mentioned.rows_of(np.concatenate([every[::3], absent]))
    assert found[: len(every[::3])].all()
    assert not found[len(every[::3]) :].any()
