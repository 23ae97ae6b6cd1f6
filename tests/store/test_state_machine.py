"""A stateful test: random sequences of writes and reads against a plain-Python model.

The model keeps every committed version as a dict ``key -> record`` (version 0 is
empty). Rules append, upsert, delete, tag, diff, read old versions, verify and
reopen the store; after every step the invariants compare the store with the model:
the latest version reads back exactly, the version numbers line up, and every
version's fingerprint and per-split counts equal what the model's records give.
Teardown reads every version ever committed back and verifies each one.

The store uses 256-byte chunks, so each chunk holds a handful of records and every
upsert or delete rewrites chunks copy-on-write, and a checkpoint interval of 3, so
manifests are composed from checkpoints as well as deltas.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import litstore
from litstore.format import codec, hashing

Record = dict[str, Any]
Model = dict[str, Record]

#: A small key pool, so upserts and deletes hit live keys often.
POOL = (*(f"k{i:02d}" for i in range(11)), "ключ-é")
#: A key never written, for deletes of missing keys when every pool key is live.
OUTSIDE = "not-in-pool"
SPLITS = litstore.HashSplit(train=0.5, val=0.5)

#: 30 runs of up to 25 steps each: a minute, so not in the fast loop.
pytestmark = pytest.mark.integration

#: Small values often, so that a fresh record often equals the live one; big ints too.
values = st.one_of(st.integers(0, 3), st.integers(-(2**70), 2**70))
blobs = st.one_of(st.sampled_from([b"", b"x", b"\x00" * 8]), st.binary(max_size=48))


def make_record(key: str, value: int, blob: bytes) -> Record:
    return {"id": key, "value": value, "blob": blob}


def reordered(record: Record) -> Record:
    """The same record with its fields in another insertion order (content is unchanged)."""
    return {name: record[name] for name in reversed(list(record))}


def model_fingerprint(model: Model) -> str:
    keys = list(model)
    contents = [hashing.content_hash(codec.encode(model[key])) for key in keys]
    return hashing.fingerprint_hex(hashing.fingerprint_sum(keys, contents))


def model_counts(model: Model) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS.names, 0)
    for key, record in model.items():
        counts[SPLITS.assign(key, record)] += 1
    return counts


def model_diff(old: Model, new: Model) -> dict[str, set[tuple[str, str]]]:
    """``(key, split)`` pairs added, removed and changed from ``old`` to ``new``."""

    def split(key: str, record: Record) -> str:
        return SPLITS.assign(key, record)

    return {
        "added": {(key, split(key, new[key])) for key in new.keys() - old.keys()},
        "removed": {(key, split(key, old[key])) for key in old.keys() - new.keys()},
        "changed": {(key, split(key, new[key])) for key in new.keys() & old.keys() if new[key] != old[key]},
    }


def pairs(table: Any) -> set[tuple[str, str]]:
    keys = table.column("key").to_pylist()
    splits = table.column("split").to_pylist()
    assert len(keys) == len(set(keys)), f"a key is listed twice: {keys}"
    return set(zip(keys, splits, strict=True))


def check_reads(snapshot: litstore.Snapshot, model: Model, number: int) -> None:
    """``snapshot`` reads back exactly ``model`` (version ``number``) through every read path."""
    assert snapshot.version.number == number
    assert len(snapshot) == len(model)
    keys = snapshot.keys()
    assert len(keys) == len(model), f"version {number}: keys() lists {len(keys)} keys, model has {len(model)}"
    assert set(keys) == set(model)
    assert set(snapshot) == set(model)
    for key in POOL:
        if key in model:
            assert key in snapshot
            assert snapshot[key] == model[key], f"version {number}, key {key!r}"
        else:
            assert key not in snapshot
            assert snapshot.get(key) is None
            with pytest.raises(litstore.KeyNotFoundError):
                snapshot[key]
    assert snapshot.get_many(list(POOL), default=None) == [model.get(key) for key in POOL]
    items = list(snapshot.items())
    assert len(items) == len(model)
    assert dict(items) == model
    assert snapshot.version.counts == model_counts(model)
    assert snapshot.version.fingerprint == model_fingerprint(model)


def check_verify(store: litstore.Store, number: int, model: Model) -> None:
    report = store.verify(number, expected_keys=list(model))
    assert report.ok, report.summary()
    assert report.version == number
    assert report.records_checked == len(model)
    assert report.fingerprint == model_fingerprint(model)


class StoreMachine(RuleBasedStateMachine):
    """Drives one store and a model of every version it has committed."""

    def __init__(self) -> None:
        super().__init__()
        self.root: str | None = None
        self.store: litstore.Store
        self.versions: list[Model] = [{}]
        self.tags: dict[str, int] = {}
        self.tag_counter = 0

    @initialize()
    def create_store(self) -> None:
        self.root = tempfile.mkdtemp(prefix="litstore-machine-")
        self.store = litstore.Store.create(
            f"{self.root}/store", key="id", splits=SPLITS, chunk_bytes=256, checkpoint_interval=3
        )

    # -- helpers ---------------------------------------------------------------------

    @property
    def live(self) -> Model:
        return self.versions[-1]

    @property
    def latest(self) -> int:
        return len(self.versions) - 1

    def expect_commit(
        self, returned: litstore.Version, new_model: Model, operation: str, added: int, replaced: int, removed: int
    ) -> None:
        """Check a write's result: a new version if the model changed, else none."""
        before = self.latest
        if new_model == self.live:
            assert (added, replaced, removed) == (0, 0, 0)
            assert returned.number == before, f"{operation} changed nothing but committed version {returned.number}"
            assert self.store.version.number == before
            return
        self.versions.append(new_model)
        assert returned.number == before + 1
        assert returned.parent == before
        assert returned.operation == operation
        assert (returned.added, returned.replaced, returned.removed) == (added, replaced, removed)
        assert returned.counts == model_counts(new_model)
        assert returned.fingerprint == model_fingerprint(new_model)
        assert self.store.version == returned

    def expect_unchanged(self) -> None:
        assert self.store.version.number == self.latest

    # -- writes ------------------------------------------------------------------------

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        absent = [key for key in POOL if key not in self.live]
        keys = data.draw(st.lists(st.sampled_from(absent), unique=True, max_size=8), label="new keys") if absent else []
        clash = data.draw(st.sampled_from(["none", "live", "twice"]), label="clash")
        if clash == "live" and self.live:
            keys.insert(data.draw(st.integers(0, len(keys)), label="at"), data.draw(st.sampled_from(sorted(self.live))))
        elif clash == "twice" and keys:
            keys.append(keys[0])
        records = [make_record(key, data.draw(values), data.draw(blobs)) for key in keys]
        if len(set(keys)) < len(keys) or any(key in self.live for key in keys):
            with pytest.raises(litstore.DuplicateKeyError):
                self.store.append(records)
            self.expect_unchanged()
            return
        returned = self.store.append(records)
        new_model = dict(self.live)
        new_model.update((record["id"], record) for record in records)
        self.expect_commit(returned, new_model, "append", len(records), 0, 0)

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        keys = data.draw(st.lists(st.sampled_from(POOL), unique=True, max_size=8), label="keys")
        records = []
        for key in keys:
            if key in self.live and data.draw(st.booleans(), label=f"keep {key}"):
                records.append(reordered(self.live[key]))  # same content, other field order
            else:
                records.append(make_record(key, data.draw(values), data.draw(blobs)))
        added = sum(1 for key in keys if key not in self.live)
        replaced = sum(1 for record in records if record["id"] in self.live and record != self.live[record["id"]])
        returned = self.store.upsert(records)
        new_model = dict(self.live)
        new_model.update((record["id"], record) for record in records)
        self.expect_commit(returned, new_model, "upsert", added, replaced, 0)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        live = sorted(self.live)
        keys = data.draw(st.lists(st.sampled_from(live), unique=True, max_size=5), label="keys") if live else []
        if keys and data.draw(st.booleans(), label="repeat a key"):
            keys.append(keys[-1])
        missing_ok = data.draw(st.booleans(), label="missing_ok")
        missing: list[str] = []
        if data.draw(st.booleans(), label="with a missing key"):
            absent = [key for key in POOL if key not in self.live] or [OUTSIDE]
            missing = [data.draw(st.sampled_from(absent), label="missing key")]
            keys.insert(data.draw(st.integers(0, len(keys)), label="at"), missing[0])
        if missing and not missing_ok:
            with pytest.raises(litstore.KeyNotFoundError) as caught:
                self.store.delete(keys)
            assert repr(missing[0]) in str(caught.value)
            self.expect_unchanged()
            return
        returned = self.store.delete(keys, missing_ok=missing_ok)
        gone = {key for key in keys if key in self.live}
        new_model = {key: record for key, record in self.live.items() if key not in gone}
        self.expect_commit(returned, new_model, "delete", 0, 0, len(gone))

    # -- tags ----------------------------------------------------------------------------

    @rule(data=st.data())
    def tag(self, data: st.DataObject) -> None:
        name = f"tag-{self.tag_counter}"
        self.tag_counter += 1
        number = data.draw(st.one_of(st.none(), st.integers(0, self.latest)), label="version")
        target = self.latest if number is None else number
        made = self.store.tag(name) if number is None else self.store.tag(name, number)
        assert (made.name, made.version) == (name, target)
        self.tags[name] = target
        assert dict(self.store.tags) == self.tags
        check_reads(self.store.at(name), self.versions[target], target)

    @precondition(lambda self: self.tags)
    @rule(data=st.data())
    def retag(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tags)), label="tag")
        number = data.draw(st.integers(0, self.latest), label="version")
        move = data.draw(st.booleans(), label="move")
        if self.tags[name] != number and not move:
            with pytest.raises(litstore.TagError):
                self.store.tag(name, number)
        else:
            assert self.store.tag(name, number, move=move).version == number
            self.tags[name] = number
        assert dict(self.store.tags) == self.tags
        assert self.store.at(name).version.number == self.tags[name]

    @precondition(lambda self: self.tags)
    @rule(data=st.data())
    def delete_tag(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tags)), label="tag")
        number = self.tags.pop(name)
        self.store.delete_tag(name)
        assert dict(self.store.tags) == self.tags
        with pytest.raises(litstore.VersionNotFoundError):
            self.store.at(name)
        check_reads(self.store.at(number), self.versions[number], number)  # the version stays

    # -- reads ---------------------------------------------------------------------------

    @rule(data=st.data())
    def diff(self, data: st.DataObject) -> None:
        old = data.draw(st.integers(0, self.latest), label="old")
        new = data.draw(st.one_of(st.none(), st.integers(0, self.latest)), label="new")
        old_ref: int | str = old
        names = [name for name, number in sorted(self.tags.items()) if number == old]
        if names and data.draw(st.booleans(), label="old by tag"):
            old_ref = names[0]
        result = self.store.diff(old_ref) if new is None else self.store.diff(old_ref, new)
        new_number = self.latest if new is None else new
        expected = model_diff(self.versions[old], self.versions[new_number])
        assert (result.old, result.new) == (old, new_number)
        assert pairs(result.added) == expected["added"]
        assert pairs(result.removed) == expected["removed"]
        assert pairs(result.changed) == expected["changed"]
        assert result.counts == {kind: len(found) for kind, found in expected.items()}
        assert bool(result) == (self.versions[old] != self.versions[new_number])

    @rule(data=st.data())
    def at(self, data: st.DataObject) -> None:
        number = data.draw(st.integers(0, self.latest), label="version")
        how = data.draw(st.sampled_from(["int", "Version"]), label="how")
        ref: int | litstore.Version = number if how == "int" else self.store.versions()[number]
        check_reads(self.store.at(ref), self.versions[number], number)

    @rule(data=st.data())
    def verify(self, data: st.DataObject) -> None:
        number = data.draw(st.integers(0, self.latest), label="version")
        check_verify(self.store, number, self.versions[number])

    @rule()
    def reopen(self) -> None:
        assert self.root is not None
        self.store = litstore.open(f"{self.root}/store")
        assert self.store.version.number == self.latest

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def latest_reads_back(self) -> None:
        assert self.store.version.number == self.latest
        check_reads(self.store, self.live, self.latest)

    @invariant()
    def every_version_matches_its_model(self) -> None:
        committed = self.store.versions()
        assert [version.number for version in committed] == list(range(len(self.versions)))
        for version, model in zip(committed, self.versions, strict=True):
            assert version.fingerprint == model_fingerprint(model), f"version {version.number}"
            assert version.counts == model_counts(model), f"version {version.number}"
            assert version.parent == (None if version.number == 0 else version.number - 1)

    def teardown(self) -> None:
        try:
            # Only check a run that got here cleanly; a failing step already reported.
            if self.root is not None and sys.exc_info()[1] is None:
                reopened = litstore.open(f"{self.root}/store")
                assert reopened.version.number == self.latest
                for number, model in enumerate(self.versions):
                    check_reads(reopened.at(number), model, number)
                    check_verify(reopened, number, model)
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreMachine = StoreMachine.TestCase
