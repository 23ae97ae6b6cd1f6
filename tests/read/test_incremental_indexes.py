"""What a commit passes on to the next version is what a fresh reader builds from the files:
the key index (the parent's, updated by one merge) has the same hashes, places and content
hashes in the same order, and the manifest (the parent's, with the delta applied in memory)
has the same rows, whatever the sequence of appends, upserts and deletes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.errors import DuplicateKeyError
from litstore.format import hashing
from litstore.read import keyindex, manifests
from litstore.read.keyindex import KeyIndex

Step = tuple[str, list[int]]

steps = st.lists(
    st.tuples(st.sampled_from(["append", "upsert", "delete"]), st.lists(st.integers(0, 60), min_size=1, max_size=25)),
    min_size=1,
    max_size=8,
)


def _same(passed: KeyIndex, built: KeyIndex) -> None:
    assert np.array_equal(passed.hashes, built.hashes)
    names = np.array(passed.chunks, dtype=object)[passed.chunk_ids]
    assert list(names) == list(np.array(built.chunks, dtype=object)[built.chunk_ids])
    assert np.array_equal(passed.rows, built.rows)
    assert np.array_equal(passed.contents, built.contents)
    assert passed.contents.shape == (len(passed), 16) and passed.contents.dtype == np.uint8


@pytest.mark.integration  # 12 write sequences: seconds, not in the fast loop
@pytest.mark.parametrize("recent_min", [4, 1 << 16], ids=["merged-often", "kept-recent"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps)
def test_the_index_a_commit_passes_on_is_the_one_a_reader_builds(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch, recent_min: int, history: list[Step]
) -> None:
    monkeypatch.setattr(keyindex, "_RECENT_MIN", recent_min)
    store = make_store(key="id", key_type=int, chunk_bytes=512, format_version=2)  # the in-memory index's path
    live: dict[int, int] = {}
    for revision, (operation, keys) in enumerate(history):
        head = store.head()
        if operation == "append":
            fresh = sorted({key for key in keys if key not in live})
            if not fresh:
                continue
            head.get_many([], default=None)  # the parent's index is built, so the commit merges into it
            store.append([{"id": key, "rev": revision, "pad": bytes(40)} for key in fresh])
            live.update(dict.fromkeys(fresh, revision))
        elif operation == "upsert":
            store.upsert([{"id": key, "rev": revision, "pad": bytes(40)} for key in set(keys)])
            live.update(dict.fromkeys(keys, revision))
        else:
            doomed = sorted({key for key in keys if key in live})
            if not doomed:
                continue
            store.delete(doomed)
            for key in doomed:
                del live[key]
        passed = store.head().reader.built_index
        assert passed is not None or operation != "append"
        if passed is not None:
            probes = np.array([hashing.key_hash(key) for key in range(-3, 64)], dtype=np.uint64)
            assert passed.contains(probes).tolist() == [key in live for key in range(-3, 64)]
            assert len(passed) == len(live)
        if live and operation == "append":  # the parent's recent entries count as present
            with pytest.raises(DuplicateKeyError):
                store.append([{"id": min(live), "rev": -1}])
            passed = store.head().reader.built_index
        if passed is not None:
            _same(passed, KeyIndex.from_manifest(store.head().manifest()))
        assert {record["id"]: record["rev"] for record in store.values()} == live
        head = store.head()
        passed_manifest = head.manifest()  # composed in memory after an upsert or delete (the parent's was read)
        from_files = manifests.compose_manifest(head.storage, head.config, head.version.number)
        assert passed_manifest.schema == from_files.schema
        assert passed_manifest.sort_by("key").equals(from_files.sort_by("key"))
