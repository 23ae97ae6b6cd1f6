"""Reads of a damaged or tampered store: the stored record or a typed error, never other data.

Each test builds one kind of damage with plain file edits (a flipped byte in a record,
a deleted chunk, an ``index.json`` that lost a chunk, a view directory planted by
"another user") and checks what lookups, iteration and streaming do about it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tracemalloc
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from litdata import StreamingDataLoader

import litstore
from litstore import IntegrityError, LitstoreError, StreamStateError
from litstore._litdata import chunk as chunk_layout
from litstore.format import layout
from tests.conftest import release_frames
from tests.strategies import assert_records_equal

Record = dict[str, Any]
COUNT = 120


def _record(i: int) -> Record:
    return {"id": f"k{i:03d}", "label": i % 3, "x": np.arange(32, dtype=np.float32) + i}


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """A store of 120 records in several 4 KiB chunks (one split, so the tests can name it)."""
    made = make_store(key="id", chunk_bytes=4096, format_version=5)  # split index files in every version
    made.append([_record(i) for i in range(COUNT)])
    return litstore.open(made.root)


def _location(store: litstore.Store, key: str) -> tuple[str, int]:
    manifest = store.head().manifest().to_pylist()
    row = next(entry for entry in manifest if entry["key"] == key)
    return row["chunk"], row["row"]


def _flip(store: litstore.Store, key: str, where: int) -> tuple[str, int]:
    """Flip one bit of ``key``'s stored payload at byte ``where`` (negative: from its end)."""
    chunk, row = _location(store, key)
    path = Path(store.root) / chunk
    data = bytearray(path.read_bytes())
    offsets = chunk_layout.item_offsets(bytes(data), chunk)
    start, end = int(offsets[row]) + chunk_layout.ITEM_HEADER, int(offsets[row + 1])
    position = (start if where >= 0 else end) + where
    assert start <= position < end
    data[position] ^= 0x10
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    return chunk, row


def _names(error: pytest.ExceptionInfo[IntegrityError], *parts: object) -> None:
    for part in parts:
        assert str(part) in str(error.value), (part, str(error.value))


def _stream(dataset: Iterable[Record]) -> list[Record]:
    return list(dataset)


def _view_path(views: Path, store: litstore.Store, split: str) -> Path:
    version = store.head().version
    store_id = hashlib.sha256(store.root.encode()).hexdigest()[:16]
    return views / store_id / f"{version.number:08d}-{version.transaction or 'initial'}" / split


# -- class 6: a flipped byte is an IntegrityError, not another record --------------


@pytest.mark.parametrize("where", [0, 1, 7, -1, -20])
def test_flipped_byte_in_a_record_is_an_integrity_error(store: litstore.Store, where: int, tmp_path: Path) -> None:
    key = "k037"
    chunk, row = _flip(store, key, where)
    reopened = litstore.open(store.root)

    with pytest.raises(IntegrityError) as error:
        reopened[key]
    _names(error, repr(key), chunk, f"row {row}")
    with pytest.raises(IntegrityError) as error:
        reopened.head().get_many(["k001", key])
    _names(error, repr(key), chunk, f"row {row}")
    with pytest.raises(IntegrityError) as error:
        dict(reopened.head().items())
    _names(error, repr(key), chunk, f"row {row}")
    with pytest.raises(IntegrityError) as error:
        _stream(reopened.dataset(views_dir=tmp_path / "views"))
    _names(error, repr(key), chunk, f"row {row}")
    # Records in other places still read.
    assert reopened["k001"]["x"][0] == 1.0


@pytest.mark.integration  # worker processes
def test_flipped_byte_under_two_workers_is_an_integrity_error(store: litstore.Store, tmp_path: Path) -> None:
    _flip(store, "k090", -3)
    dataset = litstore.open(store.root).dataset(views_dir=tmp_path / "views")
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=lambda batch: batch)
    with pytest.raises(IntegrityError, match="k090") as caught:
        for _ in loader:
            pass
    release_frames(caught)  # the loader shuts its workers down now, not 10 s later


def test_verify_records_false_streams_without_the_check(store: litstore.Store, tmp_path: Path) -> None:
    _flip(store, "k037", -1)  # inside the float array: still decodes, to another value
    records = _stream(litstore.open(store.root).dataset(verify_records=False, views_dir=tmp_path / "views"))
    assert len(records) == COUNT
    changed = next(record for record in records if record["id"] == "k037")
    assert not np.array_equal(changed["x"], _record(37)["x"]), "the damaged record streams as it is stored"


def test_deleted_chunk_is_an_integrity_error_naming_it(store: litstore.Store) -> None:
    chunk, _ = _location(store, "k050")
    (Path(store.root) / chunk).unlink()
    reopened = litstore.open(store.root)
    with pytest.raises(IntegrityError) as error:
        reopened["k050"]
    _names(error, chunk, "missing")
    with pytest.raises(IntegrityError) as error:
        reopened.head().get_many(["k050"])
    _names(error, chunk)
    with pytest.raises(IntegrityError) as error:
        list(reopened.head().values())
    _names(error, chunk)


def _set_offset(store: litstore.Store, key: str, shift: Callable[[int, int], int]) -> str:
    """Rewrite, in ``key``'s chunk, the header offset of the item after ``key``'s: ``shift(offset, previous)``."""
    chunk, row = _location(store, key)
    path = Path(store.root) / chunk
    data = bytearray(path.read_bytes())
    stored = np.frombuffer(data, dtype="<u4", count=int(np.frombuffer(data, "<u4", count=1)[0]) + 2).copy()
    stored[row + 2] = shift(int(stored[row + 2]), int(stored[row + 1])) % 2**32  # (after num_items)
    data[: stored.nbytes] = stored.tobytes()
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    return chunk


@pytest.mark.parametrize(
    "shift",
    [
        pytest.param(lambda offset, previous: previous - 4, id="shrinks"),
        pytest.param(lambda offset, previous: previous + 2, id="gap-under-an-item-header"),
        # Each gap, taken modulo 2**32, is large: only their sum shows that one wrapped around.
        pytest.param(lambda offset, previous: previous + 2**31 + 2**30, id="gap-wraps-around"),
    ],
)
def test_damaged_chunk_header_is_an_integrity_error(
    store: litstore.Store, shift: Callable[[int, int], int], tmp_path: Path
) -> None:
    """A lookup checks the header offsets of the items it reads (not the whole header: that is O(chunk)), so
    a read of an item whose offsets are damaged is an IntegrityError naming the header, a read of an intact
    item of the same chunk gives its committed record, and verify names the chunk."""
    _, row = _location(store, "k037")
    expected = {key: store[key] for key in store.keys()}
    chunk = _set_offset(store, "k037", shift)
    listed = store.head().manifest().to_pylist()
    intact = next(e["key"] for e in listed if e["chunk"] == chunk and e["row"] not in (row, row + 1))
    reopened = litstore.open(store.root)
    for read in (lambda: reopened["k037"], lambda: reopened.head().get_many(["k037"])):
        with pytest.raises(IntegrityError) as error:
            read()
        _names(error, chunk, "damaged header")
    assert_records_equal(reopened[intact], expected[intact])
    assert_records_equal(reopened.head().get_many([intact]), [expected[intact]])
    report = litstore.open(store.root).verify()
    assert not report.ok and chunk in str(report.summary())


def test_index_missing_a_chunk_is_an_integrity_error(store: litstore.Store, tmp_path: Path) -> None:
    version = store.head().version
    split = next(iter(version.counts))
    path = Path(store.root) / layout.split_index(version.number, version.transaction or "initial", split)
    document = json.loads(path.read_bytes())
    assert len(document["chunks"]) > 1
    document["chunks"].pop(1)
    path.chmod(0o644)
    path.write_text(json.dumps(document))
    reopened = litstore.open(store.root)
    for verify_records in (True, False):
        with pytest.raises(IntegrityError, match=f"lists .* items, but the version holds {COUNT} records"):
            reopened.dataset(views_dir=tmp_path / "views", verify_records=verify_records)


# -- class 3: view directories cannot be planted -------------------------------------


def _attacker_fragments(store: litstore.Store, tmp_path: Path) -> Path:
    """A copy of the store's fragments with every record's first float changed: what a planted link would serve."""
    fake = tmp_path / "attacker" / "fragments"
    shutil.copytree(Path(store.root) / layout.FRAGMENTS, fake)
    for path in fake.rglob("*.bin"):
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x10
        path.chmod(0o644)
        path.write_bytes(bytes(data))
    return fake


def test_planted_view_directory_is_replaced(store: litstore.Store, tmp_path: Path) -> None:
    views = tmp_path / "views"
    views.mkdir(mode=0o700)
    split = next(iter(store.head().version.counts))
    planted = _view_path(views, store, split)
    planted.mkdir(parents=True)
    for directory in (planted, planted.parent, planted.parent.parent):
        directory.chmod(0o777)
    (planted / "fragments").symlink_to(_attacker_fragments(store, tmp_path), target_is_directory=True)

    records = _stream(store.dataset(split=split, views_dir=views, verify_records=False))

    assert sorted(record["id"] for record in records) == [f"k{i:03d}" for i in range(COUNT)]
    for record in records:
        np.testing.assert_array_equal(record["x"], _record(int(record["id"][1:]))["x"])
    assert os.readlink(planted / "fragments") == str(Path(store.root) / layout.FRAGMENTS)
    for directory in (planted, planted.parent, planted.parent.parent):
        assert directory.stat().st_mode & 0o777 == 0o700


def test_fragments_link_pointing_elsewhere_is_replaced(store: litstore.Store, tmp_path: Path) -> None:
    views = tmp_path / "views"
    split = next(iter(store.head().version.counts))
    store.dataset(split=split, views_dir=views)  # a genuine private view
    link = _view_path(views, store, split) / "fragments"
    link.unlink()
    link.symlink_to(_attacker_fragments(store, tmp_path), target_is_directory=True)

    records = _stream(store.dataset(split=split, views_dir=views, verify_records=False))

    for record in records:
        np.testing.assert_array_equal(record["x"], _record(int(record["id"][1:]))["x"])
    assert os.readlink(link) == str(Path(store.root) / layout.FRAGMENTS)


@pytest.mark.parametrize("kind", ["open to others", "symlink", "file"])
def test_views_root_not_private_is_refused(store: litstore.Store, tmp_path: Path, kind: str) -> None:
    views = tmp_path / "views"
    if kind == "open to others":
        views.mkdir()
        views.chmod(0o777)
    elif kind == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        views.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    else:
        views.write_text("not a directory")
    with pytest.raises(LitstoreError, match="not a directory private to this user"):
        store.dataset(views_dir=views)


def test_views_of_expired_versions_are_removed(store: litstore.Store, tmp_path: Path) -> None:
    views = tmp_path / "views"
    split = next(iter(store.head().version.counts))
    store.dataset(split=split, views_dir=views)
    old = _view_path(views, store, split).parent
    store.append([_record(i) for i in range(COUNT, COUNT + 5)])
    store.gc(dry_run=False, keep_last=1)
    assert old.exists()

    store.dataset(split=split, views_dir=views)

    assert not old.exists(), "the view of a version gc expired was left behind"
    assert _view_path(views, store, split).is_dir()


# -- resume across views directories -------------------------------------------------


def test_resume_under_another_views_dir(store: litstore.Store, tmp_path: Path) -> None:
    def loader(views: Path, split: str | None = None) -> StreamingDataLoader:
        dataset = store.dataset(split=split, views_dir=views, shuffle=True, seed=3)
        return StreamingDataLoader(dataset, batch_size=4, num_workers=0, collate_fn=lambda batch: batch)

    first_loader = loader(tmp_path / "a")
    first = [record["id"] for batch in islice(first_loader, 5) for record in batch]
    state = first_loader.state_dict()
    assert str(tmp_path / "a") not in json.dumps(state, default=str), "the view path leaked into the state"

    resumed = loader(tmp_path / "b")
    resumed.load_state_dict(state)
    rest = [record["id"] for batch in resumed for record in batch]

    full = [record["id"] for batch in loader(tmp_path / "c") for record in batch]
    assert first + rest == full

    store.append([_record(i) for i in range(COUNT, COUNT + 5)])
    with pytest.raises(StreamStateError):
        loader(tmp_path / "d").load_state_dict(state)


@pytest.mark.parametrize(("items", "size"), [(1 << 40, 1 << 20), (10, -1), (3, 1 << 33)])
def test_an_index_listing_a_count_no_chunk_can_hold_is_refused(tmp_path: Path, items: int, size: int) -> None:
    """Readers size arrays by a chunk's item count (dead rows, sidecars): it is checked before anything uses it."""
    store = litstore.Store.create(tmp_path / "s", key="id", format_version=5)  # (split index files)
    store.append([{"id": f"k{i}", "v": i} for i in range(20)])
    store.delete(["k1"])
    path = tmp_path / "s" / next(iter(store.version.indexes.values()))
    document = json.loads(path.read_text())
    document["chunks"][0]["chunk_size"], document["chunks"][0]["chunk_bytes"] = items, size
    path.write_text(json.dumps(document))
    fresh = litstore.open(tmp_path / "s")
    with pytest.raises(IntegrityError, match="which no litdata chunk can be"):
        list(fresh.items())
    with pytest.raises(IntegrityError, match="which no litdata chunk can be"):
        fresh.dataset()


def test_offsets_that_claim_gigabytes_are_refused_before_anything_is_read(store: litstore.Store) -> None:
    """A lookup reads its items by their header offsets, and allocates what it reads first: offsets saying an item
    spans past the chunk's file are an IntegrityError, never an allocation of what they claim."""
    chunk = _set_offset(store, "k037", lambda offset, previous: 2**32 - 1)
    reopened = litstore.open(store.root)
    reopened.head().get_many(["k000"])  # imports and caches before memory is traced
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError) as error:
            reopened["k037"]
        with pytest.raises(IntegrityError):
            reopened.head().get_many(["k037"] * 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _names(error, chunk, "ends past the chunk's end")
    assert peak < 2**24, f"{peak:,} bytes allocated for offsets claiming 4 GiB"


CLAIMED_ITEMS = 1 << 24  # a row array of the claim: 16 MiB of flags, 64-128 MiB of row numbers


@pytest.mark.parametrize("holed", [True, False])
def test_a_consistent_claim_of_millions_of_items_is_refused_before_rows_are_made(tmp_path: Path, holed: bool) -> None:
    """A commit record may claim a chunk holds millions of items, with a size to match and every count agreeing:
    readers that make a chunk's live rows (its dead rows expanded, or every row of one without holes) check the
    chunk file holds that many first. An IntegrityError, never an allocation of what the record claims.

    (litdata's own reader still makes a list of a chunk's items as a stream reaches it: see docs/design.md
    "Known limits".)"""
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=2048)
    store.append([{"id": f"a{i:04d}", "n": i, "blob": bytes([i % 256]) * 24} for i in range(120)])
    store.delete(["a0050"])  # one chunk with a hole, two without
    holes = {ref.chunk for ref in store.head().reader.deletions.refs}
    added = json.loads((root / layout.version_record(1)).read_bytes())
    listed = added["added_chunks"]["train"]
    entry = next(entry for entry in listed if (entry["chunk"] in holes) == holed)
    grown = CLAIMED_ITEMS - entry["items"]
    entry["items"], entry["size"] = CLAIMED_ITEMS, 4 * (CLAIMED_ITEMS + 2) + 64
    (root / layout.version_record(1)).write_text(json.dumps(added))
    for number in (1, 2):  # the counts agree with the claim
        record = json.loads((root / layout.version_record(number)).read_bytes())
        record["counts"]["train"] += grown
        (root / layout.version_record(number)).write_text(json.dumps(record))

    reopened = litstore.open(root)
    reopened.head().get_many(["a0000"])  # imports and caches before memory is traced
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError, match=f"does not hold the {CLAIMED_ITEMS} items"):
            reopened.head().live_rows(entry["chunk"])
        with pytest.raises(IntegrityError):  # a walk reads the chunk's sidecar, as long as the claim, first
            list(reopened.items())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < CLAIMED_ITEMS, f"{peak:,} bytes allocated for a chunk claiming {CLAIMED_ITEMS:,} items"
