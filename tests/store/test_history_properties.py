"""Random histories read back as a plain-dict model, through every reader (issue 19's property tests).

A :class:`HistoryMachine` drives one store through a random history of appends,
upserts, deletes, compactions, gc runs (with tags) and reopens, and keeps the model of
every version it committed (``key -> record``; version 0 is empty). After every step:

- the newest version reads back exactly its model through lookups (``[]``, ``in``,
  ``get``), ``get_many``, ``keys()``, ``items()``, ``to_arrow()``, ``iter_batches()`` and
  one epoch of ``dataset()`` through a ``StreamingDataLoader`` with no workers (litdata
  cannot stream from ``memory://``, so not there), and ``verify()`` finds it whole;
- every version gc kept still reads its model, both through the snapshot taken when it
  was committed and through a fresh ``store.at(v)``; every version gc expired is gone.

Teardown reopens the store and reads every kept version through every reader.

Records are 40-200 bytes in 2 KiB chunks, so a chunk holds a dozen or so and the
upserts and deletes of a history (format 4: deletion vectors) leave holes in many
chunks, and empty some entirely. The machine runs on local directories (in RAM where
``/dev/shm`` is writable) and memory storage in the fast loop, and on S3 (moto's server)
as an ``integration`` test.
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
from litstore.format import codec, hashing

Record = dict[str, Any]
Model = dict[str, Record]

#: Enough keys for a few chunks of each split; few enough that upserts and deletes hit live keys.
POOL = tuple(f"k{i:02d}" for i in range(48))
SPLITS = litstore.HashSplit(train=0.5, val=0.5)
CHUNK_BYTES = 2048
#: Payload sizes: from a few records a chunk to dozens.
BLOB_SIZES = (0, 24, 90, 180)

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: The fast loop: local and memory together in about 15 s on a quiet machine.
FAST = settings(max_examples=10, stateful_step_count=15, deadline=None, suppress_health_check=_HEALTH)
#: On S3 every request is an HTTP round trip to moto: fewer, shorter histories.
ON_S3 = settings(max_examples=3, stateful_step_count=8, deadline=None, suppress_health_check=_HEALTH)

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
    snapshot: litstore.Snapshot, model: Model, number: int, readers: frozenset[str], views: str | None
) -> None:
    """``snapshot`` (version ``number``) reads back exactly ``model`` through each of ``readers``.

    ``views`` is the views directory to stream through; ``None`` skips streaming (a
    memory store cannot be streamed).
    """
    where = f"version {number}"
    assert snapshot.version.number == number
    assert len(snapshot) == len(model), where
    assert snapshot.version.counts == model_counts(model), where
    assert snapshot.version.fingerprint == model_fingerprint(model), where
    if "lookups" in readers:
        assert sorted(snapshot.keys()) == sorted(model), f"{where}: keys()"
        for key in POOL:
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
        live = sorted(model)
        assert snapshot.get_many(live[::-1] + live[:2]) == [model[key] for key in live[::-1] + live[:2]], where
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


def _empty_memory_store(store: litstore.Store) -> None:
    storage = store.storage
    for name in storage.names(""):
        if storage.exists(name):
            storage.delete(name)
        else:
            storage.delete_tree(name)


# -- the machine ------------------------------------------------------------------------------


class HistoryMachine(RuleBasedStateMachine):
    """Drives one store through a random history and keeps the model of each version."""

    def __init__(self, place: Place, readers: frozenset[str] = READERS, format_version: int | None = None) -> None:
        super().__init__()
        self.place = place
        self.readers = readers
        self.format_version = format_version
        self.store: litstore.Store
        self.models: list[Model] = [{}]
        self.kept: set[int] = {0}
        self.pinned: dict[int, litstore.Snapshot] = {}
        self.tags: dict[str, int] = {}

    @initialize()
    def create_store(self) -> None:
        self.store = litstore.Store.create(
            self.place.new_root(),
            key="id",
            splits=SPLITS,
            chunk_bytes=CHUNK_BYTES,
            checkpoint_interval=3,
            storage_options=self.place.options,
            format_version=self.format_version,
        )
        self.pinned[0] = self.store.at(0)

    # -- helpers -------------------------------------------------------------------------

    @property
    def live(self) -> Model:
        return self.models[-1]

    @property
    def latest(self) -> int:
        return len(self.models) - 1

    def committed(self, returned: litstore.Version, model: Model, operation: str) -> None:
        """Check a write's result against the model: a new version if the model changed, else none."""
        if model == self.live:
            assert returned.number == self.latest, f"{operation} changed nothing but committed {returned.number}"
            return
        self.models.append(model)
        self.kept.add(self.latest)
        assert (returned.number, returned.parent, returned.operation) == (self.latest, self.latest - 1, operation)
        assert returned.counts == model_counts(model)
        assert returned.fingerprint == model_fingerprint(model)
        self.pinned[self.latest] = self.store.at(self.latest)

    def draw_records(self, data: st.DataObject, keys: list[str]) -> list[Record]:
        return [
            make_record(key, data.draw(st.integers(0, 2**40), label="value"), data.draw(st.sampled_from(BLOB_SIZES)))
            for key in keys
        ]

    # -- writes ----------------------------------------------------------------------------

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        absent = [key for key in POOL if key not in self.live]
        if not absent:
            return
        keys = data.draw(st.lists(st.sampled_from(absent), unique=True, min_size=1, max_size=16), label="new keys")
        records = self.draw_records(data, keys)
        returned = self.store.append(records)
        self.committed(returned, {**self.live, **{record["id"]: record for record in records}}, "append")

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        keys = data.draw(st.lists(st.sampled_from(POOL), unique=True, min_size=1, max_size=10), label="keys")
        records = []
        for key in keys:
            if key in self.live and data.draw(st.booleans(), label=f"keep {key}"):
                records.append(dict(self.live[key]))  # unchanged: no new row, no dead row
            else:
                records.extend(self.draw_records(data, [key]))
        returned = self.store.upsert(records)
        self.committed(returned, {**self.live, **{record["id"]: record for record in records}}, "upsert")

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        keys: list[str] = data.draw(st.lists(st.sampled_from(sorted(self.live)), unique=True, min_size=1, max_size=12))
        missing = [key for key in POOL if key not in self.live]
        with_missing: bool = data.draw(st.booleans(), label="and a missing key")
        if missing and with_missing:
            keys.append(data.draw(st.sampled_from(missing), label="missing key"))
            returned = self.store.delete(keys, missing_ok=True)
        else:
            returned = self.store.delete(keys)
        self.committed(returned, {key: record for key, record in self.live.items() if key not in keys}, "delete")

    @rule(min_fill=st.sampled_from([0.5, 1.0]))
    def compact(self, min_fill: float) -> None:
        before = self.latest
        returned = self.store.compact(min_fill=min_fill)
        if returned.number == before:
            return
        self.models.append(dict(self.live))
        self.kept.add(self.latest)
        assert (returned.number, returned.operation) == (before + 1, "compact")
        assert returned.fingerprint == self.store.at(before).version.fingerprint
        self.pinned[self.latest] = self.store.at(self.latest)

    @rule(data=st.data())
    def gc(self, data: st.DataObject) -> None:
        tagged = None
        if data.draw(st.booleans(), label="tag a version first"):
            tagged = data.draw(st.sampled_from(sorted(self.kept)), label="tagged")
        self.collect(tagged, data.draw(st.integers(1, 3), label="keep_last"))

    def collect(self, tagged: int | None, keep_last: int) -> None:
        """Tag version ``tagged`` (unless ``None``), then gc keeping the last ``keep_last`` versions."""
        if tagged is not None:
            name = f"tag-{len(self.tags)}"
            self.store.tag(name, tagged)
            self.tags[name] = tagged
        kept = {self.latest, *self.tags.values(), *sorted(self.kept)[-keep_last:]}
        report = self.store.gc(keep_last=keep_last)
        assert sorted(report.expired_versions) == sorted(self.kept - kept)
        for number in self.kept - kept:
            self.pinned.pop(number)
            with pytest.raises(litstore.VersionNotFoundError):
                self.store.at(number)
        self.kept = kept

    @rule()
    def reopen(self) -> None:
        self.store = litstore.Store.open(self.store.root, storage_options=self.place.options)
        assert self.store.version.number == self.latest

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def newest_reads_back_through_every_reader(self) -> None:
        assert self.store.version.number == self.latest
        check_version(self.store.head(), self.live, self.latest, self.readers, self.place.views)

    @invariant()
    def kept_versions_still_read_their_model(self) -> None:
        assert [version.number for version in self.store.versions()] == sorted(self.kept)
        cheap = self.readers & {"get_many", "items"}
        for number in sorted(self.kept):
            check_version(self.pinned[number], self.models[number], number, cheap, None)
            check_version(self.store.at(number), self.models[number], number, cheap, None)

    def teardown(self) -> None:
        if not hasattr(self, "store"):
            return
        try:
            if sys.exc_info()[1] is not None:
                return  # a failing step already reported; reading on would only bury it
            reopened = litstore.Store.open(self.store.root, storage_options=self.place.options)
            for number in sorted(self.kept):
                check_version(reopened.at(number), self.models[number], number, self.readers, self.place.views)
        finally:
            if self.store.root.startswith("memory://"):
                _empty_memory_store(self.store)


def run_histories(place: Place, how: settings, readers: frozenset[str] = READERS) -> None:
    """Run ``how.max_examples`` random histories on ``place``, checking ``readers``."""
    run_state_machine_as_test(lambda: HistoryMachine(place, readers), settings=how)  # type: ignore[arg-type]


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_random_histories_read_back_as_the_model(place: Place) -> None:
    run_histories(place, FAST)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["s3"])
def test_random_histories_read_back_as_the_model_on_s3(place: Place) -> None:
    run_histories(place, ON_S3)


@pytest.mark.parametrize("format_version", [3, 4])
@pytest.mark.parametrize("backend", ["local"])
def test_a_history_with_holes_in_most_chunks_reads_back(place: Place, format_version: int) -> None:
    """One fixed history: what the random ones explore, with holes in most chunks (format 4) for sure."""
    machine = HistoryMachine(place, format_version=format_version)
    steps: list[Callable[[], None]] = [machine.create_store]
    first = [make_record(key, i, BLOB_SIZES[i % 4]) for i, key in enumerate(POOL)]
    steps.append(lambda: machine.committed(machine.store.append(first), {r["id"]: r for r in first}, "append"))
    replaced = [make_record(key, 1000 + i, 24) for i, key in enumerate(POOL) if i % 4 == 1]
    steps.append(
        lambda: machine.committed(
            machine.store.upsert(replaced), {**machine.live, **{r["id"]: r for r in replaced}}, "upsert"
        )
    )
    gone = [key for i, key in enumerate(POOL) if i % 5 == 2]
    steps.append(
        lambda: machine.committed(
            machine.store.delete(gone), {k: r for k, r in machine.live.items() if k not in gone}, "delete"
        )
    )
    try:
        for step in steps:
            step()
            machine.newest_reads_back_through_every_reader()
            machine.kept_versions_still_read_their_model()
        version = machine.store.version
        chunks = [chunk for listed in machine.store.chunks().values() for chunk in listed]
        if format_version >= 4:
            holed = {ref.chunk for ref in version.deletions}
            assert len(holed) * 2 > len(chunks) >= 4, f"{len(holed)} of {len(chunks)} chunks have holes"
        else:
            assert version.deletions == ()
        machine.compact(min_fill=1.0)
        machine.newest_reads_back_through_every_reader()
        machine.kept_versions_still_read_their_model()
        machine.collect(tagged=1, keep_last=1)
        machine.newest_reads_back_through_every_reader()
        machine.kept_versions_still_read_their_model()
        assert machine.kept == {1, machine.latest}
    finally:
        machine.teardown()
