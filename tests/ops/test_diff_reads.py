"""A diff of near versions of a format-4 store reads the change, not the store.

Every byte the memory backend hands out (``read``, ``read_range``) is counted, per
file, while a fresh handle diffs versions a few commits apart in a store of 20,000
records. The diff reads the commit records of the versions it spans and the deltas
between them, and nothing else: an added key was absent, a deleted one's row is in its
delta, and a replaced one's delta carries the content hash it superseded. Deltas
written before they carried it (rewritten here without that column) make the diff
look each key whose oldest change in the span replaced it up in the older version:
its split indexes, and of each of its key runs the tail and one page a key. Nothing
proportional to the store is read either way: no chunk, no checkpoint, no older
delta. The answer is compared with the join of the two whole manifests.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import keyrun, layout
from litstore.format import manifest as manifest_format
from litstore.ops.diff import Diff
from litstore.storage.memory import MemoryStorage
from tests.conftest import reopen

RECORDS = 20_000
#: Bytes of one key-run page: what a lookup of one key reads of a run.
PAGE_BYTES = keyrun.PAGE * keyrun.ENTRY.itemsize


class BytesRead:
    """Bytes the memory backend returned, per path, since :meth:`clear`."""

    def __init__(self) -> None:
        self.by_path: Counter[str] = Counter()
        self._depth = threading.local()  # memory's read_range calls read: count the outer call

    def clear(self) -> None:
        self.by_path.clear()

    @property
    def total(self) -> int:
        return sum(self.by_path.values())

    def wrap(self, method: Callable[..., bytes]) -> Callable[..., bytes]:
        def counted(storage: MemoryStorage, path: str, *args: Any) -> bytes:
            depth = getattr(self._depth, "value", 0)
            self._depth.value = depth + 1
            try:
                data = method(storage, path, *args)
            finally:
                self._depth.value = depth
            if depth == 0:
                self.by_path[path] += len(data)
            return data

        return counted


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> BytesRead:
    found = BytesRead()
    for name in ("read", "read_range"):
        monkeypatch.setattr(MemoryStorage, name, found.wrap(getattr(MemoryStorage, name)))
    return found


@pytest.fixture(params=["memory"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _record(i: int, rev: int = 0) -> dict[str, Any]:
    return {"id": f"k{i:05d}", "rev": rev, "text": f"value {i}.{rev}"}


#: The history: version 1 appends 20,000 records, 2 upserts 100 of them, 3 deletes 100 others,
#: 4 appends 10 new ones, 5 upserts 5 more of the first.
APPENDED, UPSERTED, DELETED, ADDED, FEW = 1, 2, 3, 4, 5


@pytest.fixture
def history(make_any_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_any_store(key="id", splits=litstore.HashSplit(train=0.7, val=0.3), format_version=4)
    store.append([_record(i) for i in range(RECORDS)])
    picked = random.Random(19).sample(range(RECORDS), 205)
    store.upsert([_record(i, rev=1) for i in picked[:100]])
    store.delete([f"k{i:05d}" for i in picked[100:200]])
    store.append([_record(RECORDS + i) for i in range(10)])
    store.upsert([_record(i, rev=2) for i in picked[200:]])
    marked = store.head().reader.deletions.refs
    assert store.version.number == FEW and marked, "the upserts and the delete marked rows dead"
    return store


def _found(diff: Diff) -> dict[str, list[tuple[Any, str]]]:
    return {
        kind: list(zip(table.column("key").to_pylist(), table.column("split").to_pylist(), strict=True))
        for kind, table in (("added", diff.added), ("removed", diff.removed), ("changed", diff.changed))
    }


def _size(store: litstore.Store, path: str) -> int:
    return len(MemoryStorage.read(store.storage, path))  # type: ignore[arg-type]


def _ceiling(store: litstore.Store, old: int, new: int, lookups: int) -> int:
    """The most bytes a diff of ``old`` and ``new`` reads when it looks ``lookups`` keys up in the older one."""
    low, high = sorted((old, new))
    records = [store.at(number).version for number in range(low, high + 1)]
    files = [layout.version_record(version.number) for version in records]
    files += [version.manifest for version in records[1:] if version.manifest]
    if not lookups:
        return sum(_size(store, path) for path in files)
    files += list(records[0].indexes.values())
    ceiling = sum(_size(store, path) for path in files)
    for run in records[0].key_runs:
        tail = run.size - run.entries * keyrun.ENTRY.itemsize
        ceiling += tail + min(lookups * PAGE_BYTES, run.entries * keyrun.ENTRY.itemsize)
    return ceiling


#: Pairs of versions diffed, what each diff counts (added, removed, changed), and how many keys it looks up in
#: the older version where the deltas do not carry the content hashes their replaced rows superseded.
PAIRS = [
    (APPENDED, UPSERTED, (0, 0, 100), 100),
    (UPSERTED, DELETED, (0, 100, 0), 0),  # a deleted key's row is in the delta: no key run is read
    (DELETED, ADDED, (10, 0, 0), 0),
    (ADDED, FEW, (0, 0, 5), 5),
    (APPENDED, ADDED, (10, 100, 100), 100),
    (ADDED, APPENDED, (100, 10, 100), 100),  # backwards: the deleted keys come back
    (APPENDED, FEW, (10, 100, 105), 105),
]


def _diff_reading(
    store: litstore.Store, bytes_read: BytesRead, old: int, new: int, counts: tuple[int, int, int], lookups: int
) -> dict[str, int]:
    """Diff ``old`` -> ``new`` on a fresh handle, check what it read against :func:`_ceiling` and its answer
    against the whole manifests'; the bytes it read, per path."""
    ceiling = _ceiling(store, old, new, lookups)
    manifest_bytes = _size(store, store.at(APPENDED).version.manifest or "")  # 20,000 rows
    handle = reopen(store)
    bytes_read.clear()
    diff = handle.diff(old, new)
    read, total = dict(bytes_read.by_path), bytes_read.total
    assert not any(layout.is_chunk_file(path) or path.endswith(".checkpoint.parquet") for path in read), read
    assert store.at(APPENDED).version.manifest not in read, "no delta of the older version's chain"
    assert total <= ceiling, (total, ceiling, read)
    if lookups <= 5:
        assert total < manifest_bytes / 4, (total, manifest_bytes, read)
    assert diff.counts == dict(zip(("added", "removed", "changed"), counts, strict=True))
    assert _found(diff) == _found(Diff.between(old, new, store.at(old).manifest(), store.at(new).manifest()))
    return read


@pytest.mark.parametrize(("old", "new", "counts", "lookups"), PAIRS, ids=str)
def test_a_diff_of_near_versions_reads_bytes_of_the_change(
    history: litstore.Store, bytes_read: BytesRead, old: int, new: int, counts: tuple[int, int, int], lookups: int
) -> None:
    # The deltas carry what the older version held of every key they touch: no key run, no split index.
    read = _diff_reading(history, bytes_read, old, new, counts, 0)
    deltas = {history.at(number).version.manifest for number in range(min(old, new) + 1, max(old, new) + 1)}
    assert set(read) - {layout.version_record(number) for number in range(FEW + 1)} == deltas, read


def _without_superseded_hashes(store: litstore.Store) -> None:
    """Rewrite every delta of ``store`` as deltas were written before they carried their superseded hashes."""
    for number in range(1, store.version.number + 1):
        path = store.at(number).version.manifest or ""
        table = pq.read_table(pa.BufferReader(MemoryStorage.read(store.storage, path)))  # type: ignore[arg-type]
        assert manifest_format.OLD_CONTENT_HASH in table.column_names
        older = table.drop_columns([manifest_format.OLD_CONTENT_HASH])
        store.storage.write(path, manifest_format.to_parquet(older, key_hash=False))


def test_deltas_without_superseded_hashes_look_replaced_keys_up(history: litstore.Store, bytes_read: BytesRead) -> None:
    store = history
    _without_superseded_hashes(store)
    for old, new, counts, lookups in PAIRS:
        read = _diff_reading(store, bytes_read, old, new, counts, lookups)
        looked = {path for path in read if path.endswith(".keys")}
        assert bool(looked) == bool(lookups), (old, new, read)


def test_a_diff_across_a_compaction_reads_its_delta_and_no_key_run(
    history: litstore.Store, bytes_read: BytesRead
) -> None:
    store = history
    compacted = store.compact(min_live=1.0)  # every chunk with dead rows rewritten: a delta of moved rows
    assert compacted.operation == "compact" and not compacted.deletions
    assert compacted.manifest is not None
    ceiling = _ceiling(store, FEW, compacted.number, 0)
    handle = reopen(store)
    bytes_read.clear()
    assert not handle.diff(FEW, compacted.number)
    assert bytes_read.total <= ceiling and not any(path.endswith(".keys") for path in bytes_read.by_path)
    diff = handle.diff(APPENDED, compacted.number)
    assert diff.counts == {"added": 10, "removed": 100, "changed": 105}
    assert _found(diff) == _found(
        Diff.between(APPENDED, compacted.number, store.at(APPENDED).manifest(), store.at(compacted.number).manifest())
    )
