"""Tags, diffs, upserts and deletes: what a user relies on, one test each; local, in memory, some on S3."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

import litstore
from tests.conftest import ON_S3_TOO, reopen, stored_state


@pytest.fixture
def history(make_any_store: Callable[..., litstore.Store]) -> litstore.Store:
    """v1: append k0..k9; v2: upsert k1 (changed), k2 (same), k10 (new); v3: delete k3."""
    store = make_any_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=256)
    store.append([{"id": f"k{i}", "value": i} for i in range(10)])
    store.upsert([{"id": "k1", "value": -1}, {"id": "k2", "value": 2}, {"id": "k10", "value": 10}])
    store.delete(["k3"])
    return store


@pytest.mark.parametrize("name", ["", "a/b", "..\\x", "../up", "x" * 129, "42", ".hidden", "tab\tname", None])
def test_invalid_tag_names_are_refused(history: litstore.Store, name: object) -> None:
    before = stored_state(history)
    with pytest.raises(litstore.TagError):
        history.tag(name, 1)  # type: ignore[arg-type]
    assert stored_state(history) == before


@ON_S3_TOO
def test_tag_never_moves_silently(history: litstore.Store) -> None:
    history.tag("release-1", 1)
    assert history.tag("release-1", 1).version == 1  # same version: fine
    with pytest.raises(litstore.TagError, match="move=True"):
        history.tag("release-1", 2)
    assert dict(history.tags) == {"release-1": 1}
    history.tag("release-1", 2, move=True)
    assert history.at("release-1").version.number == 2
    history.delete_tag("release-1")
    with pytest.raises(litstore.VersionNotFoundError, match="release-1"):
        history.at("release-1")
    with pytest.raises(litstore.VersionNotFoundError):
        history.delete_tag("release-1")


def test_upsert_counts_only_real_changes(history: litstore.Store) -> None:
    version = history.at(2).version
    assert (version.added, version.replaced, version.removed) == (1, 1, 0)
    assert history.upsert([{"id": "k2", "value": 2}]) == history.version  # unchanged: no new version
    assert history.version.number == 3


def test_upsert_may_not_move_a_key_to_another_split(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id", splits="split")
    store.append([{"id": "a", "split": "train"}])
    with pytest.raises(litstore.SplitError, match="'a'"):
        store.upsert([{"id": "a", "split": "val"}])
    assert store.version.number == 1


@ON_S3_TOO
def test_delete_of_a_missing_key_names_it(history: litstore.Store) -> None:
    before = stored_state(history)
    with pytest.raises(litstore.KeyNotFoundError, match="'nope'"):
        history.delete(["k4", "nope"])
    assert stored_state(history) == before
    version = history.delete(["k4", "nope"], missing_ok=True)
    assert version.removed == 1 and "k4" not in history and "k4" in history.at(3)


def test_old_versions_read_what_they_read_before(history: litstore.Store) -> None:
    assert history.at(1)["k1"]["value"] == 1 and history["k1"]["value"] == -1
    assert "k3" in history.at(2) and "k3" not in history
    assert sorted(history.at(1).keys()) == sorted(f"k{i}" for i in range(10))
    for number in range(4):
        assert history.verify(number).ok


def test_diff_both_ways_from_manifests(history: litstore.Store) -> None:
    forward = history.diff(1, 3)
    assert forward.added.column("key").to_pylist() == ["k10"]
    assert forward.removed.column("key").to_pylist() == ["k3"]
    assert forward.changed.column("key").to_pylist() == ["k1"]  # k2 was rewritten with the same content
    assert forward.counts == {"added": 1, "removed": 1, "changed": 1}
    assert sum(entry["added"] for entry in forward.split_counts.values()) == 1
    assert isinstance(forward.added, pa.Table)
    backward = history.diff(3, 1)
    assert backward.added.equals(forward.removed) and backward.removed.equals(forward.added)
    assert "+1 added, -1 removed, ~1 changed" in forward.summary()
    assert not history.diff(3, 3)
    assert history.diff(1).counts == forward.counts  # the new side defaults to this version


@ON_S3_TOO
def test_diff_reads_no_chunk(history: litstore.Store) -> None:
    history.storage.delete_tree("fragments")  # with every chunk gone, diff still works
    assert reopen(history).diff(1, 3).counts == {"added": 1, "removed": 1, "changed": 1}
