"""A full key run merged a range of key hashes at a time (:func:`litstore.txn.keyruns.write_full_run`), reading each
parent run's range by :meth:`~litstore.read.keyruns.RunReader.between`: the newest entry of each key, whatever the
ranges, page sizes and block reads cut through.

Real run files on a real backend. The ranges are made small (``_MERGE_RANGE``) and the hash space tiny, so that ranges
cut through hashes several keys share, a shared hash spans pages, and a range of a run is read in several blocks
joined (``concurrent_reads`` above 1, as on S3); a store reaches such cuts only at millions of records.
"""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litstore.format import keyrun, layout
from litstore.format.models import KeyRunRef
from litstore.read import keyruns as read_keyruns
from litstore.read.keyruns import RunReader
from litstore.storage.local import LocalStorage
from litstore.txn import keyruns

_CHUNKS = [f"fragments/{c * 20}/chunk-{c * 20}-{i}.bin" for i, c in enumerate("abcdef01")]


class _RoundTrips(LocalStorage):
    """A local store whose reads count as round trips: a run's range is read in blocks, several at a time."""

    concurrent_reads = 3


def _run(keys: list[tuple[int, int, bool, int, int]], hash_space: int) -> np.ndarray:
    """Entries of one run (one a key, sorted by hash) from ``(hash, key id, deleted, chunk, row)`` tuples."""
    step = (2**64 - 1) // max(hash_space - 1, 1)  # spread over the whole space, hitting the range cuts
    unique = {(key_hash % hash_space * step, key): (deleted, chunk, row) for key_hash, key, deleted, chunk, row in keys}
    entries = np.zeros(len(unique), dtype=keyrun.ENTRY)
    for index, ((key_hash, key), (deleted, chunk, row)) in enumerate(sorted(unique.items())):
        entries[index]["key_hash"] = key_hash
        entries[index]["keyprint"] = key.to_bytes(16, "little")
        entries[index]["chunk"] = keyrun.DELETED if deleted else chunk
        entries[index]["row"] = row
    return entries


def _write(storage: LocalStorage, entries: np.ndarray, names: list[str], page: int, filtered: bool) -> KeyRunRef:
    """``entries`` as a run file of pages of ``page`` entries (readers take the page size from the footer)."""
    written = keyrun.PAGE
    keyrun.PAGE = page
    try:
        data = keyrun.encode(entries, names, filtered)
    finally:
        keyrun.PAGE = written
    path = layout.key_run(1, uuid.uuid4().hex[:20])
    storage.write(path, data)
    return KeyRunRef(path=path, entries=len(entries), size=len(data))


_key = st.tuples(st.integers(0, 9), st.integers(0, 3), st.booleans(), st.integers(0, 7), st.integers(0, 999))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.lists(st.lists(_key, max_size=60), min_size=1, max_size=4),
    hash_space=st.sampled_from([2, 3, 10, 2**20]),
    pages=st.lists(st.sampled_from([1, 2, 3, 256]), min_size=3, max_size=3),
    merge_range=st.sampled_from([1, 3, 10, 1 << 20]),
    read_pages=st.sampled_from([1, 2, 256]),
    round_trips=st.booleans(),
    filtered=st.booleans(),
)
def test_a_full_run_merged_by_ranges_holds_the_newest_entry_of_each_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runs: list[list[tuple[int, int, bool, int, int]]],
    hash_space: int,
    pages: list[int],
    merge_range: int,
    read_pages: int,
    round_trips: bool,
    filtered: bool,
) -> None:
    monkeypatch.setattr(keyruns, "_MERGE_RANGE", merge_range)
    monkeypatch.setattr(read_keyruns, "_READ_PAGES", read_pages)
    storage = (_RoundTrips if round_trips else LocalStorage)(str(tmp_path / uuid.uuid4().hex))
    tables = [_CHUNKS[age:] + _CHUNKS[:age] for age in range(len(runs))]  # each run numbers the chunks its own way
    parts = [_run(keys, hash_space) for keys in runs]
    parents = tuple(
        _write(storage, part, table, pages[age % 3], filtered)
        for age, (part, table) in enumerate(zip(parts[1:], tables[1:], strict=True))
    )
    model: dict[tuple[int, bytes], tuple[str, int] | None] = {}
    for part, table in reversed(list(zip(parts, tables, strict=True))):  # oldest first, newer ones overwrite
        for entry in part:
            chunk = int(entry["chunk"])
            located = None if chunk == keyrun.DELETED else (table[chunk], int(entry["row"]))
            model[(int(entry["key_hash"]), bytes(entry["keyprint"]))] = located

    refs, files = keyruns.write_full_run(storage, 2, uuid.uuid4().hex[:20], (parts[0], tables[0]), parents, filtered)

    got: dict[tuple[int, bytes], tuple[str, int] | None] = {}
    if refs:
        entries, names = RunReader(storage, refs[0]).everything()
        assert bool(np.all(entries["key_hash"][1:] >= entries["key_hash"][:-1]))
        for entry in entries:
            key = (int(entry["key_hash"]), bytes(entry["keyprint"]))
            assert key not in got, "one entry a key"
            got[key] = (names[int(entry["chunk"])], int(entry["row"]))
    assert got == {key: located for key, located in model.items() if located is not None}  # the deleted: none
    assert files == [ref.path for ref in refs]


@pytest.mark.parametrize("storage_kind", [LocalStorage, _RoundTrips])
def test_a_range_of_a_run_is_its_entries_of_those_hashes_across_pages_and_blocks(
    tmp_path: Path, storage_kind: type[LocalStorage]
) -> None:
    """A hash hundreds of entries share spans pages and the boundary of two 256-page read blocks: every range
    gets all of its entries, none of another's."""
    rng = np.random.default_rng(5)
    count = 256 * 256 + 2000  # past one block of :data:`_READ_PAGES` pages
    hashes = np.sort(rng.integers(0, 2**64 - 1, size=count, dtype=np.uint64, endpoint=True))
    shared = hashes[256 * 256 - 300]
    hashes[256 * 256 - 300 : 256 * 256 + 300] = shared  # 600 keys of one hash, across the block boundary
    entries = np.zeros(count, dtype=keyrun.ENTRY)
    entries["key_hash"] = hashes
    entries["row"] = np.arange(count, dtype=np.uint32)
    entries["keyprint"] = np.frombuffer(rng.bytes(16 * count), dtype="V16")
    storage = storage_kind(str(tmp_path / "s"))
    ref = _write(storage, entries, _CHUNKS[:1], keyrun.PAGE, False)
    bounds = [0, 1, int(shared) - 1, int(shared), int(shared) + 1, int(hashes[100]), int(hashes[-1]), 2**64 - 1]
    for low in bounds:
        for high in [None, *bounds]:
            if high is not None and high < low:
                continue
            inside = (hashes >= np.uint64(low)) & (True if high is None else hashes < np.uint64(high))
            got = RunReader(storage, ref).between(low, high)
            assert got.tobytes() == entries[inside].tobytes(), (low, high)


def test_a_large_commit_merges_its_newer_runs_by_ranges_keeping_what_hides_older_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose merge passes ``MERGE_LIMIT`` entries streams it by ranges of key hashes (bounded memory).
    Merged short of the oldest run, its deleted entries must stay (they hide that run's older entries); merged
    down to the oldest, they go. Every key reads back as written, in this process and a fresh one."""
    import litstore

    monkeypatch.setattr(keyruns, "MERGE_LIMIT", 50)
    monkeypatch.setattr(keyruns, "_MERGE_RANGE", 16)  # several ranges a merge
    calls: list[bool] = []
    streamed = keyruns._write_merged

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(bool(inspect.signature(streamed).bind(*args, **kwargs).arguments["oldest"]))
        return streamed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(keyruns, "_write_merged", counted)
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 12, checkpoint_interval=1000)
    model = {f"a{n:03d}": {"id": f"a{n:03d}", "n": n} for n in range(200)}
    store.append(list(model.values()))
    newer = {f"b{n:03d}": {"id": f"b{n:03d}", "n": n} for n in range(40)}
    store.append(list(newer.values()))
    model.update(newer)
    assert [run.entries for run in store.version.key_runs] == [40, 200]
    doomed = [f"a{n:03d}" for n in range(0, 90, 3)]  # 30 deleted entries: with the 40, 70 > MERGE_LIMIT
    store.delete(doomed)
    for key in doomed:
        del model[key]
    assert calls == [False], "the delete's run and the 40 were merged by ranges, short of the oldest run"
    assert [run.entries for run in store.version.key_runs] == [70, 200]  # the deleted entries kept

    def reads_back(reader: litstore.Store) -> None:
        assert reader.get_many(sorted(model)) == [model[key] for key in sorted(model)]
        for key in doomed:
            assert key not in reader
        reader.verify()

    reads_back(store)
    reads_back(litstore.open(store.root))
    last = {f"c{n:03d}": {"id": f"c{n:03d}", "n": n} for n in range(100)}
    store.append(list(last.values()))  # 70 <= 200 and 200 <= 340: down to the oldest run, 370 <= 800
    model.update(last)
    assert calls == [False, True]
    assert [run.entries for run in store.version.key_runs] == [len(model)]  # the deleted entries dropped
    reads_back(store)
    reads_back(litstore.open(store.root))
