"""What a version is given as (a number, a tag, a time) and what it carries: local, in memory, some on S3."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

import litstore
from tests.conftest import ON_S3_TOO, reopen


def _record(i: int) -> dict[str, object]:
    return {"id": f"k{i:03d}", "value": i}


@ON_S3_TOO
def test_versions_carry_a_message_and_metadata(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    store.append([_record(i) for i in range(5)], message="first import", metadata={"source": "s3://raw", "n": 5})
    store.upsert([{"id": "k001", "value": -1}], message="fix label")
    store.delete(["k002"], metadata={"ticket": 42})
    versions = reopen(store).versions()
    assert [(v.message, v.metadata) for v in versions[1:]] == [
        ("first import", {"source": "s3://raw", "n": 5}),
        ("fix label", {}),
        (None, {"ticket": 42}),
    ]
    assert "'first import'" in repr(versions[1]) and "append" in repr(versions[1])


@ON_S3_TOO
def test_at_a_time_gives_the_version_current_then(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    store.append([_record(1)])
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    store.append([_record(2)])
    assert store.at(between).version.number == 1
    assert store.at(datetime.now(UTC)).version.number == 2
    assert store.sql("SELECT count(*) AS n FROM manifest", version=between).column("n").to_pylist() == [1]
    with pytest.raises(litstore.VersionNotFoundError):
        store.at(datetime.now(UTC) - timedelta(days=365))


@pytest.mark.parametrize("bad", [None, True, 0.5, float("nan"), 1.0, b"1", [1]])
def test_a_version_of_the_wrong_kind_is_refused(make_any_store: Callable[..., litstore.Store], bad: object) -> None:
    store = make_any_store(key="id")
    store.append([_record(1)])
    calls = [store.at, store.diff]
    if bad is not None:  # None means "the head" where a version is optional
        calls += [lambda v: store.sql("SELECT 1", version=v), lambda v: store.verify(v)]
    for call in calls:
        with pytest.raises(litstore.InvalidArgumentError, match="a version is"):
            call(bad)  # type: ignore[operator]


def test_every_call_taking_a_version_takes_a_tag(make_any_store: Callable[..., litstore.Store], backend: str) -> None:
    store = make_any_store(key="id")
    store.append([_record(1)])
    store.tags.create("one")
    store.append([_record(2)])
    assert store.verify("one").ok and store.verify("one").version == 1
    assert store.sql("SELECT count(*) AS n FROM manifest", version="one").column("n").to_pylist() == [1]
    assert store.diff("one").counts == {"added": 1, "removed": 0, "changed": 0}
    if backend == "memory":  # litdata reads only files and S3
        with pytest.raises(litstore.LitstoreError, match="cannot stream from memory"):
            store.dataset("one")
    else:
        assert len(list(store.dataset("one"))) == 1
    assert dict(store.tags) == {"one": 1} and "one" in store.tags and store.tags["one"] == 1


def test_a_missing_version_names_the_oldest_version_gc_kept(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    for number in range(4):
        store.append([{"id": str(number)}])
    store.gc(dry_run=False, keep_last=2, grace=timedelta(0))
    for asked in (0, 2, 9):
        with pytest.raises(litstore.VersionNotFoundError, match="the oldest version kept is 3 and the latest is 4"):
            store.at(asked)


def test_negative_numbers_count_back_and_latest_is_the_newest(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    for number in range(3):
        store.append([{"id": str(number)}])
    assert [store.at(back).version.number for back in (-1, -2, -4)] == [3, 2, 0]
    assert store.at("latest").version.number == 3 and store.head().resolve("latest") == 3
    with pytest.raises(litstore.VersionNotFoundError, match="4 versions are kept"):
        store.at(-5)
    store.tag("latest", 1)  # a tag of that name wins
    assert store.at("latest").version.number == 1
    with pytest.raises(litstore.VersionNotFoundError, match="pass the int 2"):
        store.at("2")


def test_a_version_compares_and_orders_with_ints_as_its_number(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id")
    first = store.append([_record(1)])
    second = store.append([_record(2)])
    assert store.version == 2 and 2 == store.version and store.version != 1  # as Lance's and Delta's int versions
    assert first < second and first < 2 and 0 < first <= 1 and second >= first and second > 1
    assert sorted([2, first, 0]) == [0, 1, 2] and max(store.versions()) is not first
    assert hash(first) == hash(1) and {first: "a"}[1] == "a" and 1 in {first} and first in {1}
    assert first == np.int64(1) and np.int64(2) == second
    assert first != True and first != 1.0 and first != "1"  # noqa: E712  (a bool or a float is no version number)
    assert first == store.at(1).version and first != second  # two Versions: equal when their records are
    assert isinstance(store.version, litstore.Version) and int(store.version) == 2
