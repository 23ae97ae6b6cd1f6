"""How ``verify`` reads a version's manifest into fixed columns in bounded memory.

The keys newer deltas mention are kept as one sorted run a delta behind filters, and
the columns are filled in arrays sized by the commit record's counts, grown when a
manifest lists more. Both are checked against the manifest composed the ordinary way,
on a chain of appends, upserts and deletes.
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


@pytest.mark.parametrize("bits_per_key", [0, 1, 16])
def test_rows_match_the_composed_manifest_whatever_the_filters_let_through(
    store: litstore.Store, bits_per_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filters of a few blocks (which let nearly every key through: each is searched for) or larger give the
    same rows."""
    monkeypatch.setattr(verify_listed, "_BITS_PER_KEY", bits_per_key)
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


def test_mentioned_keys_are_found_as_the_set_and_its_filter_grow() -> None:
    """Keyprints added delta by delta (the filter rebuilt as the set outgrows it, an empty delta among them) are
    all found, and keyprints never added are not, whether or not the filters let them through."""
    rng = np.random.default_rng(7)
    mentioned = verify_listed._Mentioned()
    added = []
    for count in (1000, 0, 70_000, 5, 300_000):
        prints = rng.integers(0, 256, (count, 16), dtype=np.uint8)
        added.append(prints)
        mentioned.add([prints])
    every = np.concatenate(added)
    absent = rng.integers(0, 256, (200_000, 16), dtype=np.uint8)
    absent[:1000, :8] = every[:1000, :8]  # sharing a first word (so the filters' bits) with a mentioned key
    found = mentioned.rows_of(np.concatenate([every[::3], absent]))
    assert found[: len(every[::3])].all()
    assert not found[len(every[::3]) :].any()


def test_keyprints_are_sorted_by_their_first_word_even_when_its_high_bits_agree() -> None:
    """Rows sorted by their first word with the row number in its low bits; rows whose first words differ only
    in those bits come out of order and are sorted again."""
    rng = np.random.default_rng(3)
    for count in (1, 2, 5, 1000):
        words = rng.integers(0, 2**64, (count, 2), dtype=np.uint64)
        if count > 1:
            words[: count // 2, 0] = (words[0, 0] & ~np.uint64(0xFFFF)) | rng.integers(0, 0xFFFF, count // 2).astype(
                np.uint64
            )
        first, second = verify_listed._sorted_words(words)
        order = np.argsort(words[:, 0], kind="stable")
        assert np.array_equal(first, words[order, 0])
        assert np.array_equal(np.sort(second), np.sort(words[:, 1]))
        assert {(int(a), int(b)) for a, b in zip(first, second)} == {(int(a), int(b)) for a, b in words}
