"""Bad input raises a typed error naming the culprit, and leaves every file as it was: local and in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest

import litstore
from tests.conftest import reopen, stored_state


@pytest.fixture
def store(make_any_store: Callable[..., litstore.Store]) -> litstore.Store:
    """An empty store keyed by ``id`` with a 80/10/10 hash split, on each backend."""
    return make_any_store(key="id", splits=litstore.HashSplit(train=0.8, val=0.1, test=0.1))


def _seeded(store: litstore.Store) -> litstore.Store:
    store.append([{"id": f"k{i}", "value": i} for i in range(20)])
    return store


def _expect_rejected(
    store: litstore.Store, action: Callable[[], Any], error: type[Exception], *names: str
) -> Exception:
    before = stored_state(store)
    version = store.version
    with pytest.raises(error) as caught:
        action()
    assert isinstance(caught.value, litstore.LitstoreError)
    message = str(caught.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert stored_state(store) == before
    assert store.version == version
    assert reopen(store).version == version
    return caught.value


def test_record_without_key_field(store: litstore.Store) -> None:
    _seeded(store)
    batch = [{"id": "a"}, {"value": 1}, {"id": "b"}]
    error = _expect_rejected(store, lambda: store.append(batch), litstore.KeyFieldError, "position 1", "'id'")
    assert isinstance(error, litstore.InvalidRecordError) and isinstance(error, ValueError)
    assert error.culprits == [(1, None)]


def test_none_key(store: litstore.Store) -> None:
    _seeded(store)
    _expect_rejected(store, lambda: store.append([{"id": None}]), litstore.KeyFieldError, "position 0", "None")


def test_key_of_wrong_type(store: litstore.Store, make_any_store: Callable[..., litstore.Store]) -> None:
    _seeded(store)
    _expect_rejected(store, lambda: store.append([{"id": "ok"}, {"id": 7}]), litstore.KeyFieldError, "position 1", "7")
    int_store = make_any_store(key="n", key_type=int)
    int_store.append([{"n": 1}])
    _expect_rejected(int_store, lambda: int_store.append([{"n": "2"}]), litstore.KeyFieldError, "'2'", "int")
    _expect_rejected(int_store, lambda: int_store.append([{"n": True}]), litstore.KeyFieldError, "True")
    _expect_rejected(int_store, lambda: int_store.append([{"n": 2**63}]), litstore.KeyFieldError, "int64")


def test_same_key_twice_in_one_batch(store: litstore.Store) -> None:
    _seeded(store)
    batch = [{"id": "x", "v": 1}, {"id": "y"}, {"id": "x", "v": 2}]
    error = _expect_rejected(store, lambda: store.append(batch), litstore.DuplicateKeyError, "'x'", "position 2")
    assert error.culprits == [(2, "x")]


def test_append_never_replaces(store: litstore.Store) -> None:
    _seeded(store)
    batch = [{"id": "new"}, {"id": "k3", "value": -1}, {"id": "k7"}]
    error = _expect_rejected(store, lambda: store.append(batch), litstore.DuplicateKeyError, "'k3'", "'k7'", "upsert")
    assert sorted(key for _, key in error.culprits) == ["k3", "k7"]
    assert store["k3"]["value"] == 3


def test_many_culprits_are_counted_not_all_listed(store: litstore.Store) -> None:
    batch = [{"value": i} for i in range(40)]
    error = _expect_rejected(store, lambda: store.append(batch), litstore.KeyFieldError, "40 records", "and 35 more")
    assert len(error.culprits) == 40


class Pet(pydantic.BaseModel):
    id: str
    label: int
    weight: float = 1.0


def test_record_that_does_not_fit_the_schema(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id", schema=Pet)
    store.append([Pet(id="a", label=1), {"id": "b", "label": 2}])
    assert store["a"] == {"id": "a", "label": 1, "weight": 1.0}
    batch = [{"id": "c", "label": 3}, {"id": "d", "label": "not a number"}]
    _expect_rejected(store, lambda: store.append(batch), litstore.SchemaError, "position 1", "'d'", "label")


def test_value_that_cannot_be_stored(store: litstore.Store) -> None:
    _seeded(store)
    batch = [{"id": "ok"}, {"id": "bad", "when": object()}]
    _expect_rejected(store, lambda: store.append(batch), litstore.SchemaError, "'bad'", "when", "object")


def test_record_that_is_not_a_mapping(store: litstore.Store) -> None:
    _expect_rejected(
        store, lambda: store.append([{"id": "a"}, ["id", "b"]]), litstore.SchemaError, "position 1", "list"
    )


def test_unknown_split_name(make_any_store: Callable[..., litstore.Store]) -> None:
    store = make_any_store(key="id", splits="split")
    store.append([{"id": "a", "split": "train"}, {"id": "b", "split": "val"}])
    batch = [{"id": "c", "split": "test"}, {"id": "d", "split": "tarin"}]
    _expect_rejected(store, lambda: store.append(batch), litstore.SplitError, "'tarin'", "position 1", "'train'")
    _expect_rejected(store, lambda: store.append([{"id": "e"}]), litstore.SplitError, "'split'")


def test_version_that_does_not_exist(store: litstore.Store) -> None:
    _seeded(store)
    for bad in (2, 99, -3):  # (-1 and -2 count back from the newest of the two versions kept)
        error = _expect_rejected(store, lambda bad=bad: store.at(bad), litstore.VersionNotFoundError, str(bad))
        assert isinstance(error, LookupError)


def test_missing_key_lookup(store: litstore.Store) -> None:
    _seeded(store)
    error = _expect_rejected(store, lambda: store["nope"], litstore.KeyNotFoundError, "'nope'")
    assert isinstance(error, KeyError)
    _expect_rejected(store, lambda: store[3], litstore.KeyNotFoundError, "3")
    _expect_rejected(store, lambda: store.get_many(["k1", "nope", "k2"]), litstore.KeyNotFoundError, "'nope'", "1 of 3")
    assert store.get("nope") is None
    assert store.get("nope", "fallback") == "fallback"
    assert store.get_many(["k1", "nope"], default=None) == [store["k1"], None]


def test_empty_batch_makes_no_version(store: litstore.Store) -> None:
    _seeded(store)
    before = stored_state(store)
    assert store.append([]) == store.version
    assert store.append(iter(())).number == 1
    assert stored_state(store) == before


def test_create_on_existing_store_and_open_of_nothing(store: litstore.Store, tmp_path: Path) -> None:
    _seeded(store)
    before = stored_state(store)
    with pytest.raises(litstore.StoreExistsError, match="already holds a store"):
        litstore.Store.create(store.root, key="id")
    assert stored_state(store) == before
    with pytest.raises(litstore.StoreNotFoundError, match="no litstore store"):
        litstore.open(tmp_path / "nothing-here")


def test_invalid_sql_is_a_query_error(store: litstore.Store) -> None:
    _seeded(store)
    _expect_rejected(store, lambda: store.sql("SELECT nope FROM manifest"), litstore.QueryError, "nope")


def test_create_refuses_bad_arguments_and_strangers_directories(tmp_path: Path) -> None:
    for options in (
        {"splits": "not a valid field name!"},
        {"chunk_bytes": 0},
        {"checkpoint_interval": -1},
        {"key_type": float},
    ):
        with pytest.raises(litstore.InvalidArgumentError):
            litstore.Store.create(tmp_path / "s", key="id", **options)  # type: ignore[arg-type]
    with pytest.raises(litstore.InvalidArgumentError):
        litstore.HashSplit(train=0.5, val=0.2)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"not a store")
    with pytest.raises(litstore.StoreExistsError, match="not empty"):
        litstore.Store.create(tmp_path / "photos", key="id")
    assert sorted(p.name for p in (tmp_path / "photos").iterdir()) == ["cat.jpg"]


def test_a_store_made_from_a_path_says_to_open_it(tmp_path: Path) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match=r"litstore\.open\(root\)"):
        litstore.Store(str(tmp_path))  # type: ignore[arg-type]


def test_splits_given_as_a_dict_of_fractions_split_by_hash(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", splits={"train": 0.9, "val": 0.1})
    assert store.config.splits == litstore.HashSplit(train=0.9, val=0.1)
    with pytest.raises(litstore.InvalidArgumentError, match="dict of fractions"):
        litstore.Store.create(tmp_path / "t", key="id", splits=[("train", 1.0)])  # type: ignore[arg-type]
    with pytest.raises(litstore.InvalidArgumentError, match="HashSplit"):
        litstore.Store.create(tmp_path / "u", key="id", splits={"train": 0.5})


def test_a_query_on_an_undeclared_field_says_how_to_declare_it(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", fields={"label": int})
    store.append([{"id": "a", "label": 1, "caption": "x"}])
    with pytest.raises(litstore.QueryError, match=r"declared fields \('label'\).*add_fields"):
        store.select("caption = 'x'")


def test_a_key_of_the_wrong_type_says_what_the_keys_are(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    store.append([{"id": "5"}])
    with pytest.raises(litstore.KeyNotFoundError, match="keys are strs, and 5 is of type int"):
        store[5]
    with pytest.raises(litstore.KeyNotFoundError) as caught:
        store["6"]
    assert "type" not in str(caught.value)


def test_chunk_bytes_may_be_written_as_litdata_writes_it(tmp_path: Path) -> None:
    assert litstore.Store.create(tmp_path / "a", key="id", chunk_bytes="64MB").config.chunk_bytes == 64_000_000
    assert litstore.Store.create(tmp_path / "b", key="id", chunk_bytes="1MiB").config.chunk_bytes == 1 << 20
    assert litstore.Store.create(tmp_path / "c", key="id", chunk_bytes=" 2.5 kb ").config.chunk_bytes == 2500
    for bad in ("64 parsecs", "MB", "-1MB", "5GB"):  # (5 GB is past litdata's 32-bit offsets)
        with pytest.raises(litstore.InvalidArgumentError, match="chunk_bytes"):
            litstore.Store.create(tmp_path / "d", key="id", chunk_bytes=bad)
    assert not (tmp_path / "d").exists()
