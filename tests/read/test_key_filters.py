"""Key filters (format 5): each key run carries a blocked Bloom filter, so a key a run does not hold costs one
64-byte block of it, not a page; a damaged or lying filter is an IntegrityError (or found by verify), never a
missed key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.format import hashing, keyfilter, keyrun
from litstore.read import keyruns as keyruns_reading
from litstore.read.keyruns import RunReader
from tests.read import test_key_runs as key_runs_history

Record = dict[str, Any]


def _record(key: str, rev: int = 0) -> Record:
    return {"id": key, "rev": rev}


def _run_path(store: litstore.Store, number: int = 0) -> Path:
    return Path(store.root) / store.version.key_runs[number].path


def _footer(data: bytes) -> tuple[Any, ...]:
    return keyrun.FOOTER.unpack(data[-keyrun.footer_size() :])


@pytest.fixture
def filtered_store(tmp_path: Path) -> litstore.Store:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 16)
    store.append([_record(f"k{i:05d}") for i in range(20_000)])
    return store


def test_a_new_store_writes_filtered_runs(filtered_store: litstore.Store) -> None:
    assert filtered_store.config.format_version >= 5
    data = _run_path(filtered_store).read_bytes()
    magic, count, _, _, _, blocks, _ = _footer(data)
    assert magic == keyrun.FILTERED_MAGIC and count == 20_000
    assert blocks == keyfilter.block_count(20_000) and blocks * keyfilter.BLOCK < count * 2  # ~10 bits a key


def test_keys_a_run_does_not_hold_read_no_pages_of_it(filtered_store: litstore.Store, tmp_path: Path) -> None:
    """An append's uniqueness check of 200 new keys reads about 1% of them as pages, where a run without a
    filter (format 4) reads a page for nearly every key."""
    new = [f"new{i:04d}" for i in range(200)]
    unfiltered = litstore.Store.create(tmp_path / "old", key="id", chunk_bytes=1 << 16, format_version=4)
    unfiltered.append([_record(f"k{i:05d}") for i in range(20_000)])
    pages_read = {}
    for name, store in (("filtered", filtered_store), ("unfiltered", unfiltered)):
        reader = litstore.open(store.root).head().reader
        assert reader.existing_keys(new) == []
        pages_read[name] = len(reader.key_runs()._runs[0]._pages)
    assert pages_read["unfiltered"] > 50
    assert pages_read["filtered"] <= 8, pages_read


def test_every_key_of_a_run_passes_its_filter(filtered_store: litstore.Store) -> None:
    reader = RunReader(filtered_store.storage, filtered_store.version.key_runs[0])
    entries, _ = reader.everything()
    assert reader.may_hold(entries["key_hash"], entries["keyprint"]).all()
    absent = [f"absent{i}" for i in range(5000)]
    column = np.asarray([hashing.key_hash(key) for key in absent], dtype=np.uint64)
    prints = np.frombuffer(b"".join(hashing.keyprint(key) for key in absent), dtype="V16")
    assert reader.may_hold(column, prints).mean() < 0.03, "about 1% false positives"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(key_runs_history.operation, min_size=1, max_size=10))
def test_lookups_through_filtered_runs_agree_with_a_model(tmp_path_factory: Any, history: list[Any]) -> None:
    root = str(tmp_path_factory.mktemp("filtered") / "s")
    key_runs_history._check_history(root, history, reopen=True, format_version=5)
    assert all(run.tail().filter_blocks for run in litstore.open(root).head().reader.key_runs()._runs)


def test_a_flipped_bit_in_a_filter_block_is_an_integrity_error(filtered_store: litstore.Store) -> None:
    path = _run_path(filtered_store)
    data = bytearray(path.read_bytes())
    data[20_000 * keyrun.ENTRY.itemsize + 3] ^= 0x10  # a bit of the first block
    path.write_bytes(bytes(data))
    reader = litstore.open(filtered_store.root).head().reader
    with pytest.raises(litstore.IntegrityError, match="filter block 0 does not match its checksum"):
        reader.get_many([f"k{i:05d}" for i in range(20_000)])
    report = litstore.open(filtered_store.root).verify()
    assert not report.ok and any("filter block" in problem for _, problem in report.index_problems)


def test_a_footer_that_lies_about_its_filter_is_refused(filtered_store: litstore.Store) -> None:
    path = _run_path(filtered_store)
    data = bytearray(path.read_bytes())
    footer = list(_footer(bytes(data)))
    footer[5] += 1
    data[-keyrun.footer_size() :] = keyrun.FOOTER.pack(*footer)
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="filter blocks"):
        litstore.open(filtered_store.root)["k00001"]


def test_a_filter_emptied_with_right_checksums_is_found_by_verify(filtered_store: litstore.Store) -> None:
    """A filter forged to say "absent" for every key (its checksums made anew) hides the run's keys from
    lookups, as a forged page would; verify names it."""
    path = _run_path(filtered_store)
    data = bytearray(path.read_bytes())
    start, blocks = 20_000 * keyrun.ENTRY.itemsize, _footer(bytes(data))[5]
    for number in range(blocks):
        at = start + number * keyfilter.BLOCK
        data[at : at + 56] = bytes(56)
        checksum = xxhash.xxh3_64_intdigest(bytes(56)) ^ ((number * 0x9E3779B97F4A7C15) % 2**64)
        data[at + 56 : at + 64] = checksum.to_bytes(8, "little")
    path.write_bytes(bytes(data))
    assert "k00001" not in litstore.open(filtered_store.root), "the forged filter hides the key"
    report = litstore.open(filtered_store.root).verify()
    assert not report.ok
    assert any("filter hides 20000 of its entries" in problem for _, problem in report.index_problems)


def test_may_hold_sorted_answers_as_may_hold(filtered_store: litstore.Store) -> None:
    """The one-range read verify uses gives the block-by-block answers: for the run's own entries, for keys
    it does not hold (in key-hash order), and for keys out of order (then it falls back to may_hold)."""
    reader = RunReader(filtered_store.storage, filtered_store.version.key_runs[0])
    entries, _ = reader.everything()
    assert reader.may_hold_sorted(entries["key_hash"], entries["keyprint"]).all()
    absent = sorted((f"absent{i}" for i in range(5000)), key=hashing.key_hash)
    column = np.asarray([hashing.key_hash(key) for key in absent], dtype=np.uint64)
    prints = np.frombuffer(b"".join(hashing.keyprint(key) for key in absent), dtype="V16")
    expected = reader.may_hold(column, prints)
    assert 0 < expected.sum() < len(absent)
    assert reader.may_hold_sorted(column, prints).tolist() == expected.tolist()
    assert reader.may_hold_sorted(column[::-1], prints[::-1]).tolist() == expected[::-1].tolist()
    assert reader.may_hold_sorted(column[:0], prints[:0]).tolist() == []


def test_a_damaged_filter_block_between_keys_is_found_by_verify(filtered_store: litstore.Store) -> None:
    """One filter block's bits flipped (its checksum left): verify, which reads the filter range by range,
    names the block; a lookup that reaches it raises."""
    path = _run_path(filtered_store)
    data = bytearray(path.read_bytes())
    blocks = _footer(bytes(data))[5]
    at = 20_000 * keyrun.ENTRY.itemsize + (blocks // 2) * keyfilter.BLOCK + 7
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    report = litstore.open(filtered_store.root).verify()
    assert not report.ok
    assert any(f"filter block {blocks // 2} does not match" in problem for _, problem in report.index_problems)
    with pytest.raises(litstore.IntegrityError, match="does not match its checksum"):
        keyfilter.check_span("run", blocks // 2, 1, bytes(data[at - 7 : at - 7 + keyfilter.BLOCK]))
    with pytest.raises(litstore.IntegrityError, match="cut short"):
        keyfilter.check_span("run", 0, 2, bytes(keyfilter.BLOCK))


def test_a_format_4_store_reads_and_upgrades_to_filtered_runs(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, format_version=4)
    store.append([_record(f"k{i:04d}") for i in range(3000)])
    store.delete(["k0007"])
    assert _footer(_run_path(store).read_bytes())[0] == keyrun.MAGIC
    fingerprint = store.version.fingerprint
    upgraded = litstore.open(store.root)
    upgraded.upgrade()
    assert upgraded.config.format_version == 7 and upgraded.version.fingerprint == fingerprint
    assert upgraded.version.operation == "upgrade" and len(upgraded.version.key_runs) == 1
    assert _footer(_run_path(upgraded).read_bytes())[0] == keyrun.FILTERED_MAGIC
    fresh = litstore.open(store.root)
    assert fresh["k0001"] == _record("k0001") and "k0007" not in fresh
    assert fresh.diff(store.version.number, fresh.version.number).counts == {"added": 0, "removed": 0, "changed": 0}
    assert fresh.verify().ok


def test_a_checkpoint_writes_one_run_of_every_record(tmp_path: Path) -> None:
    """A checkpoint composes the manifest anyway: its run holds every record, so a version lists at most the
    runs of the commits since the last checkpoint, however many commits the store has had."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, checkpoint_interval=8)
    for batch in range(1, 30):
        store.append([_record(f"k{batch:02d}-{i}") for i in range(batch)])
        runs = store.version.key_runs
        if store.version.number % 8 == 0:
            assert len(runs) == 1 and runs[0].entries == store.version.total
        assert len(runs) <= 4, runs
    fresh = litstore.open(store.root)
    keys = [f"k{batch:02d}-{i}" for batch in range(1, 30) for i in range(batch)]
    assert fresh.get_many(keys) == [_record(key) for key in keys]


def test_a_large_commit_merges_into_runs_of_its_own_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge limit grows with the commit's own run, so building a store by large appends keeps few runs."""
    from litstore.txn import keyruns

    monkeypatch.setattr(keyruns, "MERGE_LIMIT", 100)
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 16, checkpoint_interval=1000)
    for batch in range(8):
        store.append([_record(f"k{batch}-{i:03d}") for i in range(100)])
    assert len(store.version.key_runs) <= 3, "without the factor every 100-entry run would stay apart"
    fresh = litstore.open(store.root)
    assert fresh["k0-000"] == _record("k0-000") and fresh["k7-099"] == _record("k7-099")


def test_a_lookup_of_more_blocks_than_the_cache_holds_keeps_the_ones_it_took(
    filtered_store: litstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clearing a full block cache once dropped blocks the same call had just taken from it (a KeyError on
    a 500k-key append to a 4M-record store): here a cache of 8 blocks against a run of 447."""
    monkeypatch.setattr(keyruns_reading, "_CACHED_BLOCKS", 8)
    reader = litstore.open(filtered_store.root).head().reader
    few = [f"k{i:05d}" for i in range(0, 20_000, 4_000)]
    assert [record["id"] for record in reader.get_many(few)] == few  # some blocks cached
    every = [f"k{i:05d}" for i in range(20_000)] + ["absent"]
    assert reader.get_many(every, default=None)[:-1] == [_record(key) for key in every[:-1]]


@settings(max_examples=40, deadline=None)
@given(
    entries=st.integers(min_value=1, max_value=3000),
    asked=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_few_keys_and_many_take_the_same_bits(entries: int, asked: int, seed: int) -> None:
    """A lookup's few blocks are checked one xxhash call each and its few keys tested in Python integers;
    a batch's go through numpy: both give the same checksums and the same answers, members always held."""
    rng = np.random.default_rng(seed)
    hashes = np.sort(rng.integers(0, 2**64 - 1, entries, dtype=np.uint64))
    prints = rng.integers(0, 256, (entries, 16), dtype=np.uint8).view("V16").reshape(-1)
    data = keyfilter.encode(hashes, prints)
    count = keyfilter.block_count(entries)
    numbers = sorted(set(rng.integers(0, count, asked).tolist()))
    blocks = [data[n * keyfilter.BLOCK : (n + 1) * keyfilter.BLOCK] for n in numbers]
    bits = np.frombuffer(b"".join(blocks), np.uint8).reshape(-1, keyfilter.BLOCK)[:, :56]
    assert np.array_equal(
        keyfilter._few_checksums(b"".join(blocks), numbers), keyfilter._checksums(bits, np.asarray(numbers))
    )
    assert np.array_equal(keyfilter.check_blocks("run", numbers, blocks), bits)
    members = rng.choice(entries, min(asked, entries), replace=False)
    strangers = rng.integers(0, 256, (len(members), 16), dtype=np.uint8).view("V16").reshape(-1)
    every = np.frombuffer(data, np.uint8).reshape(-1, keyfilter.BLOCK)[:, :56]
    for key_hashes, key_prints in ((hashes[members], prints[members]), (hashes[: len(strangers)], strangers)):
        rows = keyfilter.blocks_of(key_hashes, count)
        few = keyfilter._few_held(every, rows, key_prints)
        words = np.ascontiguousarray(every).view("<u8").reshape(-1)
        many = np.ones(len(rows), dtype=bool)
        for probe in keyfilter._bits_of(key_prints):  # (may_hold's numpy steps, whatever the count)
            word = words[rows * 7 + (probe >> np.uint64(6)).astype(np.int64)]
            many &= ((word >> (probe & np.uint64(63))) & np.uint64(1)).astype(bool)
        assert np.array_equal(few, many)
        assert np.array_equal(keyfilter.may_hold(every, rows, key_prints), many)
    assert keyfilter._few_held(every, keyfilter.blocks_of(hashes[members], count), prints[members]).all()


@pytest.mark.parametrize("records", [3000, 20_000], ids=["small run, read whole", "large run, read by ranges"])
def test_a_flipped_filter_bit_fails_a_single_lookup(tmp_path: Path, records: int) -> None:
    """One key asked: its block is checked by the few-blocks path, in a run read whole or by ranges."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 16)
    store.append([_record(f"k{i:05d}") for i in range(records)])
    assert (store.version.key_runs[0].size <= keyruns_reading.WHOLE_RUN) == (records == 3000)
    key = "k00001"
    block = int(keyfilter.blocks_of(np.array([hashing.key_hash(key)], np.uint64), keyfilter.block_count(records))[0])
    path = _run_path(store)
    data = bytearray(path.read_bytes())
    data[records * keyrun.ENTRY.itemsize + block * keyfilter.BLOCK + 5] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match=f"filter block {block} does not match its checksum"):
        litstore.open(store.root)[key]


def test_the_runs_stay_few_and_small_after_many_small_commits(tmp_path: Path) -> None:
    """Appends and upserts of a few records each: a version lists at most one run per doubling of the commits
    since its checkpoint (merged tiered) besides the checkpoint's, and those runs are small enough to be read
    whole; a fresh process finds every record through them."""
    interval = 32
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 16, checkpoint_interval=interval)
    model = {f"b{i:04d}": _record(f"b{i:04d}") for i in range(2000)}
    store.append(list(model.values()))
    for commit in range(70):  # (past two checkpoints)
        if commit % 2:
            changed = [_record(f"b{(commit * 37 + i) % 2000:04d}", commit) for i in range(5)]
            store.upsert(changed)
        else:
            changed = [_record(f"c{commit:03d}-{i}") for i in range(5)]
            store.append(changed)
        model.update((record["id"], record) for record in changed)
        since = store.version.number % interval or interval
        runs = store.version.key_runs
        assert len(runs) <= 2 + math.ceil(math.log2(since)), (store.version.number, runs)
        assert all(run.size <= keyruns_reading.WHOLE_RUN for run in runs if run.entries < len(model))
    fresh = litstore.open(store.root)
    keys = sorted(model)
    assert fresh.get_many(keys) == [model[key] for key in keys]
