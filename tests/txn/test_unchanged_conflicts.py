"""An upsert whose records the writer's (stale) head already holds is not a silent no-op.

Records found unchanged are not written, but they are part of the write: if another
writer changed their keys after the head the upsert was planned on, the upsert raises
``ConflictError`` and commits nothing, as it would for a changed record. (Found by a
hostile review: both paths below used to return as if they had written, leaving the
other writer's value.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import litstore


def _two_writers(tmp_path: Path) -> tuple[str, litstore.Store]:
    root = str(tmp_path / "s")
    writer = litstore.Store.create(root, chunk_bytes=256)
    writer.append([{"id": "k", "v": 0}, {"id": "j", "v": 0}])
    return root, writer


def test_store_upsert_of_records_unchanged_on_a_stale_head_conflicts(tmp_path: Path) -> None:
    root, a = _two_writers(tmp_path)
    litstore.open(root).upsert([{"id": "k", "v": 1}])  # another writer, after a's head
    with pytest.raises(litstore.ConflictError, match="'k'"):
        a.upsert([{"id": "k", "v": 0}])  # unchanged as far as a's head knows
    fresh = litstore.open(root)
    assert fresh["k"] == {"id": "k", "v": 1} and fresh.version.number == 2


def test_store_upsert_mixing_unchanged_and_new_records_conflicts_on_the_unchanged_key(tmp_path: Path) -> None:
    root, a = _two_writers(tmp_path)
    litstore.open(root).upsert([{"id": "k", "v": 1}])
    with pytest.raises(litstore.ConflictError, match="'k'"):
        a.upsert([{"id": "k", "v": 0}, {"id": "n", "v": 9}])
    assert "n" not in litstore.open(root)


def test_commit_of_a_staged_record_unchanged_on_the_old_head_conflicts(tmp_path: Path) -> None:
    """The stage/commit path (Ray, ingest): the plan skips k, loses the race, and must still see k touched."""
    root, a = _two_writers(tmp_path)
    staged = a.stage([{"id": "k", "v": 0}, {"id": "n", "v": 9}])
    litstore.open(root).upsert([{"id": "k", "v": 1}])
    with pytest.raises(litstore.ConflictError, match="'k'"):
        a.commit([staged], mode="upsert")
    fresh = litstore.open(root)
    assert fresh["k"] == {"id": "k", "v": 1} and "n" not in fresh


def test_unchanged_upserts_without_a_rival_commit_nothing_and_catch_up(tmp_path: Path) -> None:
    root, a = _two_writers(tmp_path)
    litstore.open(root).upsert([{"id": "j", "v": 5}])  # another key: no conflict with k
    version = a.upsert([{"id": "k", "v": 0}])
    assert version.number == 2  # nothing new committed; the handle now knows the newest version
    assert a["j"] == {"id": "j", "v": 5}
    assert litstore.open(root).version.number == 2


@pytest.mark.parametrize("keys", [["k"], ["j", "k"]])
def test_a_missing_ok_delete_of_a_key_a_rival_added_meanwhile_conflicts(tmp_path: Path, keys: list[str]) -> None:
    """Keys a missing_ok delete found absent on a stale head count as touched: a rival's add of them is a conflict."""
    root = str(tmp_path / "s")
    a = litstore.Store.create(root, chunk_bytes=1 << 20)
    a.append([{"id": "j", "v": 0}])
    litstore.open(root).append([{"id": "k", "v": 1}])  # another writer, after a's head
    with pytest.raises(litstore.ConflictError, match="'k'"):
        a.delete(keys, missing_ok=True)
    assert litstore.open(root)["k"] == {"id": "k", "v": 1}
    a.refresh()
    a.delete(keys, missing_ok=True)  # on the newest version: goes through
    assert "k" not in litstore.open(root)


def test_after_gc_expired_newer_versions_refresh_lets_the_write_through(tmp_path: Path) -> None:
    """A handle whose newer versions gc expired cannot check its write against them: it says to refresh."""
    root = str(tmp_path / "s")
    a = litstore.Store.create(root, chunk_bytes=1 << 20)
    a.append([{"id": "k", "v": 0}, {"id": "j", "v": 0}])
    b = litstore.open(root)
    for value in range(3):
        b.upsert([{"id": "j", "v": value + 1}])
    b.gc(dry_run=False, keep_last=1)
    with pytest.raises(litstore.ConflictError, match=r"Store\.refresh\(\)"):
        a.upsert([{"id": "k", "v": 0}])
    a.refresh()
    assert a.upsert([{"id": "k", "v": 0}]).number == 4  # nothing changed: the newest version
