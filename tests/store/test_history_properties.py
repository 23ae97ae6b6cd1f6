"""Random histories read back as a plain-dict model, through every reader (issue 19's property tests).

A :class:`HistoryMachine` drives one store through a random history of appends,
upserts, deletes, compactions, gc runs (with tags) and reopens, and keeps the model of
every version it committed (``key -> record``; version 0 is empty). It writes through
two handles on the store, each left at the version it last saw, so a write is often
behind the other handle's: it rebases onto the newest version, or raises
``ConflictError`` when one of its keys changed since. After every step:

- the newest version reads back exactly its model through lookups (``[]``, ``in``,
  ``get``: a quarter of the keys each step), ``get_many``, ``keys()``, ``items()``,
  ``to_arrow()``, ``iter_batches()`` and one epoch of ``dataset()`` through a
  ``StreamingDataLoader`` with no workers (litdata cannot stream from ``memory://``, so
  not there), and ``verify()`` finds it whole;
- every version gc kept still reads its model through the snapshot taken when it was
  committed, and its commit record through a fresh ``store.at(v)``; every version gc
  expired is gone. A rule reads one kept version through every reader.

Teardown reopens the store and reads every kept version through every reader.

Records are 40-200 bytes in 2 KiB chunks, so a chunk holds a dozen or so and the
upserts and deletes of a history (format 4: deletion vectors) leave holes in many
chunks, and empty some entirely. The machine runs on memory storage in the fast loop, and
on local directories (in RAM where ``/dev/shm`` is writable) and on S3 (moto's server) as
``integration`` tests.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from litdata import StreamingDataLoader

import litstore
from litstore.format import codec, hashing, layout
from litstore.read.listings import read_listing
from tests.conftest import empty_memory_store

Record = dict[str, Any]
Model = dict[str, Record]

#: Enough keys for a few chunks of each split; few enough that upserts and deletes hit live keys.
POOL = tuple(f"k{i:02d}" for i in range(48))
SPLITS = litstore.HashSplit(train=0.5, val=0.5)
CHUNK_BYTES = 2048
#: Payload sizes: from a few records a chunk to dozens.
BLOB_SIZES = (0, 24, 90, 180)

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: Each history up to 25 steps deep: deep enough to reach a compaction racing an upsert within a few dozen
#: runs, not within 5. Memory in 5-12 s (the fast loop); local, which also streams every version, in
#: 10-25 s (2 loaded cores), so an ``integration`` test.
FAST = settings(max_examples=5, stateful_step_count=25, deadline=None, suppress_health_check=_HEALTH)
#: On S3 every request is an HTTP round trip to moto (about 50 s for these): fewer, shorter histories.
ON_S3 = settings(max_examples=2, stateful_step_count=15, deadline=None, suppress_health_check=_HEALTH)

#: What the machine checks each version through (all of them, unless a caller narrows it).
READERS = frozenset({"lookups", "get_many", "items", "exports", "streaming", "verify"})

_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


# -- the model -------------------------------------------------------------------------


def make_record(key: str, value: int, size: int) -> Record:
    return {"id": key, "value": value, "blob": bytes([value % 251]) * size}


def model_fingerprint(model: Model) -> str:
    keys = list(model)
    contents = [hashing.content_hash(codec.encode(model[key])) for key in keys]
    return hashing.fingerprint_hex(hashing.fingerprint_sum(keys, contents))


def model_counts(model: Model) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS.names, 0)
    for key, record in model.items():
        counts[SPLITS.assign(key, record)] += 1
    return counts


def keep_list(batch: list[Record]) -> list[Record]:
    """collate_fn: the batch as the list of records."""
    return batch


# -- reading a version back ---------------------------------------------------------------


def assert_each_once(records: list[Record], model: Model, where: str) -> None:
    """``records`` are exactly ``model``'s: every key once, each with its record."""
    counts = Counter(record["id"] for record in records)
    repeated = sorted(key for key, count in counts.items() if count > 1)
    assert not repeated, f"{where} yields these keys more than once: {repeated}"
    assert set(counts) == set(model), (
        f"{where}: missing {sorted(set(model) - set(counts))}, unexpected {sorted(set(counts) - set(model))}"
    )
    for record in records:
        assert record == model[record["id"]], f"{where}: key {record['id']!r}"


def check_version(
    snapshot: litstore.Snapshot,
    model: Model,
    number: int,
    readers: frozenset[str],
    views: str | None,
    looked_up: tuple[str, ...] = POOL,
) -> None:
    """``snapshot`` (version ``number``) reads back exactly ``model`` through each of ``readers``.

    ``views`` is the views directory to stream through; ``None`` skips streaming (a
    memory store cannot be streamed). ``looked_up``: the keys read one by one.
    """
    where = f"version {number}"
    assert snapshot.version.number == number
    assert len(snapshot) == len(model), where
    assert snapshot.version.counts == model_counts(model), where
    assert snapshot.version.fingerprint == model_fingerprint(model), where
    if "lookups" in readers:
        assert sorted(snapshot.keys()) == sorted(model), f"{where}: keys()"
        for key in looked_up:
            if key in model:
                assert key in snapshot, f"{where}: {key!r} in"
                assert snapshot[key] == model[key], f"{where}: [{key!r}]"
            else:
                assert key not in snapshot, f"{where}: {key!r} not in"
                assert snapshot.get(key) is None, f"{where}: get({key!r})"
                with pytest.raises(litstore.KeyNotFoundError):
                    snapshot[key]
    if "get_many" in readers:
        assert snapshot.get_many(list(POOL), default=None) == [model.get(key) for key in POOL], f"{where}: get_many"
        live = sorted(model)[::3]
        assert snapshot.get_many(live + live[:1]) == [model[key] for key in live + live[:1]], f"{where}: get_many"
    if "items" in readers:
        items = list(snapshot.items())
        assert_each_once([record for _, record in items], model, f"{where} items()")
        assert all(key == record["id"] for key, record in items), f"{where}: items() pairs a key with another record"
    if "exports" in readers:
        table = snapshot.to_arrow()
        assert table.num_rows == len(model), f"{where}: to_arrow() has {table.num_rows} rows"
        if model:
            assert table.column_names[0] == "id"
            assert_each_once(table.to_pylist(), model, f"{where} to_arrow()")
        batches = list(snapshot.iter_batches(batch_size=5))
        assert all(batch.num_rows <= 5 for batch in batches), f"{where}: a batch is over batch_size"
        assert_each_once([row for batch in batches for row in batch.to_pylist()], model, f"{where} iter_batches()")
    if "streaming" in readers and views is not None:
        if not model:
            with pytest.raises(litstore.LitstoreError, match="has no records"):
                snapshot.dataset(views_dir=views)
        else:
            dataset = snapshot.dataset(views_dir=views)
            assert len(dataset) == len(model), f"{where}: the dataset has {len(dataset)} items"
            loader = StreamingDataLoader(dataset, batch_size=4, num_workers=0, collate_fn=keep_list)
            assert_each_once([record for batch in loader for record in batch], model, f"{where} one epoch")
    if "verify" in readers:
        report = snapshot.verify(expected_keys=list(model))
        assert report.ok, report.summary()
        assert report.version == number
        assert report.records_checked == len(model), f"{where}: verify checked {report.records_checked} records"
        assert report.fingerprint == model_fingerprint(model), where


# -- where stores live ----------------------------------------------------------------------


@dataclass
class Place:
    """Where a machine makes its stores: a URL base, the storage options, and whether it can stream."""

    base: str
    options: dict[str, Any] | None
    views: str | None

    def new_root(self) -> str:
        return f"{self.base}/history-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def place(request: pytest.FixtureRequest, backend: str) -> Iterator[Place]:
    """A place for this test's stores on ``backend``; local stores and views are removed afterwards."""
    scratch = tempfile.mkdtemp(prefix="litstore-histories-", dir=_SCRATCH)
    views = f"{scratch}/views"
    try:
        if backend == "local":
            yield Place(f"{scratch}/stores", None, views)
        elif backend == "memory":
            yield Place(f"memory://histories-{uuid.uuid4().hex}", None, None)
        elif backend == "s3":
            bucket = request.getfixturevalue("s3_bucket")
            yield Place(f"s3://{bucket}", {"endpoint_url": request.getfixturevalue("s3_endpoint")}, views)
        else:
            raise ValueError(f"unknown backend {backend!r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- the machine ------------------------------------------------------------------------------


class HistoryMachine(RuleBasedStateMachine):
    """Drives one store through a random history, through two handles, and keeps the model of each version.

    Each write goes through either handle. A handle is left at the version it last
    wrote or read, so one is often behind the other: its write loses the race for the
    version number and rebases onto the newest version, or raises ``ConflictError`` if
    one of its keys was changed since (whatever the record, as ``txn.commit`` promises).
    """

    def __init__(self, place: Place, readers: frozenset[str] = READERS, format_version: int | None = None) -> None:
        super().__init__()
        self.place = place
        self.readers = readers
        self.format_version = format_version
        self.handles: list[litstore.Store] = []
        self.models: list[Model] = [{}]
        self.touched: list[set[str]] = [set()]  # the keys whose record each version changed
        self.kept: set[int] = {0}
        self.pinned: dict[int, litstore.Snapshot] = {}
        self.tags: dict[str, int] = {}
        self.steps = 0

    @initialize()
    def create_store(self) -> None:
        store = litstore.Store.create(
            self.place.new_root(),
            key="id",
            splits=SPLITS,
            chunk_bytes=CHUNK_BYTES,
            checkpoint_interval=3,
            storage_options=self.place.options,
            format_version=self.format_version,
        )
        self.handles = [store, litstore.Store.open(store.root, storage_options=self.place.options)]
        self.pinned[0] = store.at(0)

    # -- helpers -------------------------------------------------------------------------

    @property
    def live(self) -> Model:
        return self.models[-1]

    @property
    def latest(self) -> int:
        return len(self.models) - 1

    @property
    def store(self) -> litstore.Store:
        """A handle at the newest version (the one that wrote last, or one moved there)."""
        for handle in self.handles:
            if handle.version.number == self.latest:
                return handle
        self.handles[0].refresh()
        return self.handles[0]

    def opened(self) -> litstore.Store:
        return litstore.Store.open(self.handles[0].root, storage_options=self.place.options)

    def writer(self, data: st.DataObject) -> tuple[litstore.Store, Model, set[str]]:
        """A handle to write through, the model of the version it is at, and the keys changed since."""
        handle: litstore.Store = self.handles[data.draw(st.integers(0, 1), label="through handle")]
        at = handle.version.number
        return handle, self.models[at], set().union(*self.touched[at + 1 :])

    def committed(self, returned: litstore.Version, model: Model, operation: str) -> None:
        """Check a write's result against the model: a new version if the model changed, else none."""
        if model == self.live:
            assert returned.number == self.latest, f"{operation} changed nothing but committed {returned.number}"
            return
        self.touched.append({key for key in model.keys() | self.live.keys() if model.get(key) != self.live.get(key)})
        self.models.append(model)
        self.kept.add(self.latest)
        assert (returned.number, returned.parent, returned.operation) == (self.latest, self.latest - 1, operation)
        assert returned.counts == model_counts(model)
        assert returned.fingerprint == model_fingerprint(model)
        self.pinned[self.latest] = self.store.at(self.latest)

    def write(
        self, write: Callable[[], litstore.Version], keys: list[str], changed: set[str], model: Model, operation: str
    ) -> None:
        """Run ``write`` of ``keys``: a ``ConflictError`` if one was changed since its handle's version, else
        a commit of ``model`` (built on the newest version)."""
        if changed & set(keys):
            with pytest.raises(litstore.ConflictError):
                write()
            return
        self.committed(write(), model, operation)

    def draw_records(self, data: st.DataObject, keys: list[str]) -> list[Record]:
        return [
            make_record(key, data.draw(st.integers(0, 2**40), label="value"), data.draw(st.sampled_from(BLOB_SIZES)))
            for key in keys
        ]

    # -- writes ----------------------------------------------------------------------------

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        handle, seen, changed = self.writer(data)
        absent = [key for key in POOL if key not in self.live and key not in seen]
        if not absent:
            return
        keys = data.draw(st.lists(st.sampled_from(absent), unique=True, min_size=1, max_size=16), label="new keys")
        records = self.draw_records(data, keys)
        model = {**self.live, **{record["id"]: record for record in records}}
        self.write(lambda: handle.append(records), keys, changed, model, "append")

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        handle, seen, changed = self.writer(data)
        keys = data.draw(st.lists(st.sampled_from(POOL), unique=True, min_size=1, max_size=10), label="keys")
        records = []
        for key in keys:
            if key in seen and data.draw(st.booleans(), label=f"keep {key}"):
                records.append(dict(seen[key]))  # unchanged (as its handle sees it): no new row, no dead row
            else:
                records.extend(self.draw_records(data, [key]))
        model = {**self.live, **{record["id"]: record for record in records}}
        self.write(lambda: handle.upsert(records), keys, changed, model, "upsert")

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        handle, seen, changed = self.writer(data)
        if not seen:
            return
        keys: list[str] = data.draw(st.lists(st.sampled_from(sorted(seen)), unique=True, min_size=1, max_size=12))
        missing = [key for key in POOL if key not in seen]
        with_missing: bool = data.draw(st.booleans(), label="and a missing key")
        if missing and with_missing:
            keys.append(data.draw(st.sampled_from(missing), label="missing key"))
        model = {key: record for key, record in self.live.items() if key not in keys}
        self.write(lambda: handle.delete(keys, missing_ok=with_missing), keys, changed, model, "delete")

    @rule(data=st.data(), min_fill=st.sampled_from([0.5, 1.0]))
    def compact(self, data: st.DataObject, min_fill: float) -> None:
        # Mostly through the handle further behind: the compaction that races most. It changes no key, so it
        # never conflicts; it must not move a row the other handle has since marked dead back into place.
        handles = sorted(self.handles, key=lambda handle: handle.version.number)
        self.compact_through(data.draw(st.sampled_from([*handles[:1] * 3, handles[1]]), label="through"), min_fill)

    def compact_through(self, handle: litstore.Store, min_fill: float) -> None:
        returned = handle.compact(min_fill=min_fill)
        if returned.number <= self.latest:
            return  # nothing to compact (as its handle saw the store)
        self.touched.append(set())
        self.models.append(dict(self.live))
        self.kept.add(self.latest)
        assert (returned.number, returned.operation) == (self.latest, "compact")
        assert returned.fingerprint == model_fingerprint(self.live)
        self.pinned[self.latest] = self.store.at(self.latest)

    @rule(data=st.data())
    def gc(self, data: st.DataObject) -> None:
        tagged = None
        if data.draw(st.booleans(), label="tag a version first"):
            tagged = data.draw(st.sampled_from(sorted(self.kept)), label="tagged")
        self.collect(tagged, data.draw(st.integers(1, 3), label="keep_last"))

    def collect(self, tagged: int | None, keep_last: int) -> None:
        """Tag version ``tagged`` (unless ``None``), then gc keeping the last ``keep_last`` versions."""
        store = self.store
        if tagged is not None:
            name = f"tag-{len(self.tags)}"
            store.tag(name, tagged)
            self.tags[name] = tagged
        kept = {self.latest, *self.tags.values(), *sorted(self.kept)[-keep_last:]}
        report = store.gc(dry_run=False, keep_last=keep_last)
        assert sorted(report.expired_versions) == sorted(self.kept - kept)
        for number in self.kept - kept:
            self.pinned.pop(number)
            with pytest.raises(litstore.VersionNotFoundError):
                store.at(number)
        self.kept = kept
        for handle in self.handles:  # a handle behind an expired version could only conflict
            handle.refresh()
        for number in sorted(kept):  # what gc left is all they need
            check_version(self.pinned[number], self.models[number], number, self.readers & {"items"}, None)
        # ... and no more: every chunk an expired version listed that no kept one lists is gone.
        listed = {
            chunk.filename
            for number in kept
            for each in read_listing(store.storage, store.at(number).version).chunks.values()
            for chunk in each
        }
        stored = {found.path for found in store.storage.walk(layout.FRAGMENTS) if layout.is_chunk(found.path)}
        assert stored == listed

    @rule(data=st.data())
    def read_a_kept_version(self, data: st.DataObject) -> None:
        """An older version, through every reader: what gc kept of it is all it needs."""
        number = data.draw(st.sampled_from(sorted(self.kept)), label="version")
        check_version(self.store.at(number), self.models[number], number, self.readers, self.place.views)
        check_version(self.pinned[number], self.models[number], number, self.readers & {"items"}, None)

    @rule(which=st.integers(0, 1))
    def reopen(self, which: int) -> None:
        self.handles[which] = self.opened()
        assert self.handles[which].version.number == self.latest

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def newest_reads_back_through_every_reader(self) -> None:
        self.steps += 1
        looked_up = POOL[self.steps % 4 :: 4]  # a quarter of the keys one by one each step, all of them in four
        check_version(self.store.head(), self.live, self.latest, self.readers, self.place.views, looked_up)

    @invariant()
    def kept_versions_still_read_their_model(self) -> None:
        """Every version gc kept reads its model: its commit record through a fresh ``at(v)``, and (a third
        of them each step, every one after a gc) its records through the snapshot taken when it was
        committed; ``read_a_kept_version`` reads one through every reader."""
        store = self.store
        assert [version.number for version in store.versions()] == sorted(self.kept)
        for number in sorted(self.kept):
            check_version(store.at(number), self.models[number], number, frozenset(), None)
            if number % 3 == self.steps % 3:
                check_version(self.pinned[number], self.models[number], number, self.readers & {"items"}, None)

    def teardown(self) -> None:
        if not self.handles:
            return
        try:
            if sys.exc_info()[1] is not None:
                return  # a failing step already reported; reading on would only bury it
            reopened = self.opened()
            assert reopened.version.number == self.latest
            for number in sorted(self.kept):
                snapshot, model = reopened.at(number), self.models[number]
                check_version(snapshot, model, number, self.readers, self.place.views, POOL[number % 4 :: 4])
        finally:
            if self.handles[0].root.startswith("memory://"):
                empty_memory_store(self.handles[0])


def run_histories(place: Place, how: settings, readers: frozenset[str] = READERS) -> None:
    """Run ``how.max_examples`` random histories on ``place``, checking ``readers``."""
    run_state_machine_as_test(lambda: HistoryMachine(place, readers), settings=how)  # type: ignore[arg-type]


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.integration), "memory"])
def test_random_histories_read_back_as_the_model(place: Place) -> None:
    run_histories(place, FAST)


@pytest.mark.parametrize("backend", ["memory"])
def test_random_histories_with_checkpoints_spaced_by_size_read_back(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same histories in stores "large" enough (2 records a version) that manifest checkpoints come
    ``checkpoint_interval`` times a power of two apart: chains longer than the interval, listings still in
    full every interval, gc cutting them where it expires versions."""
    monkeypatch.setattr(sys.modules["litstore.txn.checkpoint"], "ROWS_PER_CHECKPOINT_VERSION", 2)
    run_histories(place, FAST)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["s3"])
def test_random_histories_read_back_as_the_model_on_s3(place: Place) -> None:
    run_histories(place, ON_S3)


@pytest.mark.parametrize("format_version", [3, 4, 5, 6])
@pytest.mark.parametrize("backend", ["local"])
def test_a_history_with_holes_in_most_chunks_reads_back(place: Place, format_version: int) -> None:
    """One fixed history: what the random ones explore, with holes in most chunks (format 4) for sure, and a
    compaction from a handle two versions behind them."""
    machine = HistoryMachine(place, format_version=format_version)
    machine.create_store()
    ahead, behind = machine.handles
    first = [make_record(key, i, BLOB_SIZES[i % 4]) for i, key in enumerate(POOL)]
    replaced = [make_record(key, 1000 + i, 24) for i, key in enumerate(POOL) if i % 4 == 1]
    gone = [key for i, key in enumerate(POOL) if i % 5 == 2]
    try:
        machine.committed(ahead.append(first), {r["id"]: r for r in first}, "append")
        behind.refresh()
        machine.committed(ahead.upsert(replaced), {**machine.live, **{r["id"]: r for r in replaced}}, "upsert")
        machine.committed(ahead.delete(gone), {k: r for k, r in machine.live.items() if k not in gone}, "delete")
        machine.newest_reads_back_through_every_reader()
        machine.kept_versions_still_read_their_model()
        chunks = [chunk for listed in ahead.chunks().values() for chunk in listed]
        if format_version >= 4:
            holed = {ref.chunk for ref in ahead.head().reader.deletions.refs}
            assert len(holed) * 2 > len(chunks) >= 4, f"{len(holed)} of {len(chunks)} chunks have holes"
        else:
            assert ahead.head().reader.deletions.refs == ()
        machine.compact_through(behind, min_fill=1.0)  # planned on version 1, published on 3
        # Format 3: the upsert and delete rewrote the chunks it planned to merge, so it has nothing left to do.
        assert machine.latest == (4 if format_version >= 4 else 3)
        machine.newest_reads_back_through_every_reader()
        machine.kept_versions_still_read_their_model()
        machine.collect(tagged=1, keep_last=1)
        machine.newest_reads_back_through_every_reader()
        machine.kept_versions_still_read_their_model()
        assert machine.kept == {1, machine.latest}
    finally:
        machine.teardown()
