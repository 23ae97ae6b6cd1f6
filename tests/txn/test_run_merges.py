"""Merging key runs (:func:`litstore.txn.keyruns._newest`): the newest entry of each key, whatever hashes keys share.

Key hashes are 64 bits, so at a billion keys two of them share one about once in 40
stores; the merge must tell such keys apart by their keyprints and keep each key's
newest entry. The hash space here is tiny so that nearly every merge meets a shared hash.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.format import keyrun
from litstore.txn.keyruns import _newest

# (key hash, key id, deleted) entries of one part: a key id stands for a keyprint.
_entry = st.tuples(st.integers(0, 6), st.integers(0, 5), st.booleans())


def _part(entries: list[tuple[int, int, bool]], age: int) -> np.ndarray:
    """A run's entries sorted by key hash (one entry per key), ``row`` holding ``age`` to tell parts apart."""
    unique = {(key_hash, key): deleted for key_hash, key, deleted in entries}
    part = np.zeros(len(unique), dtype=keyrun.ENTRY)
    for index, ((key_hash, key), deleted) in enumerate(sorted(unique.items())):
        part[index]["key_hash"] = key_hash
        part[index]["keyprint"] = key.to_bytes(16, "little")
        part[index]["chunk"] = keyrun.DELETED if deleted else 0
        part[index]["row"] = age
    return part


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_entry, max_size=12), min_size=1, max_size=4), st.booleans())
def test_the_newest_entry_of_each_key_survives_shared_hashes(
    parts_entries: list[list[tuple[int, int, bool]]], oldest: bool
) -> None:
    parts = [_part(entries, age) for age, entries in enumerate(parts_entries)]
    model: dict[tuple[int, bytes], tuple[int, int]] = {}
    for part in reversed(parts):  # oldest first, newer ones overwrite
        for entry in part:
            model[(int(entry["key_hash"]), bytes(entry["keyprint"]))] = (int(entry["chunk"]), int(entry["row"]))
    if oldest:
        model = {key: value for key, value in model.items() if value[0] != keyrun.DELETED}

    kept = _newest(np.concatenate(parts), np.array([len(part) for part in parts]), oldest)

    got = {
        (int(entry["key_hash"]), bytes(entry["keyprint"])): (int(entry["chunk"]), int(entry["row"])) for entry in kept
    }
    assert got == model
    assert len(kept) == len(got)  # one entry a key
    assert np.all(kept["key_hash"][1:] >= kept["key_hash"][:-1])  # in key-hash order
