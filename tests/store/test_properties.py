"""Property-based tests of the core store: order independence, exact round trips, hashes, verify.

Every example gets its own directory (``tempfile.TemporaryDirectory`` inside the test):
function-scoped fixtures are not reset between Hypothesis examples.
"""

from __future__ import annotations

import copy
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import litstore
from litstore.format import codec, hashing
from tests.strategies import (
    KEY_FIELD,
    array_shapes,
    assert_records_equal,
    batchings,
    dict_paths,
    get_at,
    keys_for,
    leaf_paths,
    leaves,
    numpy_arrays,
    records,
    records_equal,
    reorder_dicts,
    replace_at,
    tensors,
    values,
)

KEY_TYPES = ("str", "int")
SPLITS = {
    "str": litstore.HashSplit(train=0.8, val=0.1, test=0.1),
    "int": litstore.HashSplit(train=0.5, val=0.5),
}

# Store layouts that must not change what a store holds: tiny chunks (one or a few records
# each), manifest checkpoints at every version or every few, and the defaults.
store_options = st.fixed_dictionaries(
    {
        "chunk_bytes": st.sampled_from((64, 512, 4096, 64 * 1024 * 1024)),
        "checkpoint_interval": st.sampled_from((1, 2, 3, 64)),
    }
)

# Store examples cost tens of milliseconds each (every DuckDB query opens a connection), so
# they are few; codec examples are cheap.
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
STORE_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=_HEALTH)
FEW_STORE_SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=_HEALTH)
FAST_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=_HEALTH)

# Each commit fsyncs; a RAM-backed directory keeps examples fast where there is one.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="litstore-properties-", dir=_SCRATCH)


def _create(root: Path, key_type: str, **options: Any) -> litstore.Store:
    return litstore.Store.create(
        root, key=KEY_FIELD, key_type=int if key_type == "int" else str, splits=SPLITS[key_type], **options
    )


def _content_hash(record: Any) -> bytes:
    return hashing.content_hash(codec.encode(record))


def _expected_rows(key_type: str, batch: list[dict[str, Any]]) -> set[tuple[Any, bytes, str]]:
    """The (key, content hash, split) rows a store holding ``batch`` must list, computed without a store."""
    rule = SPLITS[key_type]
    return {(record[KEY_FIELD], _content_hash(record), rule.assign(record[KEY_FIELD], record)) for record in batch}


def _expected_fingerprint(batch: list[dict[str, Any]]) -> str:
    keys = [record[KEY_FIELD] for record in batch]
    return hashing.fingerprint_hex(hashing.fingerprint_sum(keys, [_content_hash(record) for record in batch]))


def _manifest_rows(store: litstore.Snapshot) -> list[tuple[Any, bytes, str]]:
    table = store.sql("SELECT key, content_hash, split FROM manifest")
    rows = list(zip(*(column.to_pylist() for column in table.columns)))
    from_manifest = store.manifest().select(["key", "content_hash", "split"])
    assert rows == list(zip(*(column.to_pylist() for column in from_manifest.columns)))
    return rows


def _check_holds_exactly(
    store: litstore.Snapshot, key_type: str, batch: list[dict[str, Any]], rng: random.Random
) -> None:
    """``store`` holds ``batch`` and nothing else, whichever way it is read."""
    by_key = {record[KEY_FIELD]: record for record in batch}
    rows = _manifest_rows(store)
    assert len(rows) == len(batch), "a key is listed twice or a record is missing"
    assert set(rows) == _expected_rows(key_type, batch)
    assert store.version.fingerprint == _expected_fingerprint(batch)
    assert len(store) == len(batch)
    assert store.version.counts == {
        name: sum(1 for *_, split in rows if split == name) for name in SPLITS[key_type].names
    }
    assert sorted(store.keys(), key=repr) == sorted(by_key, key=repr)
    for key, record in by_key.items():
        assert key in store
        assert_records_equal(store[key], record, f"store[{key!r}]")
    shuffled = list(by_key)
    rng.shuffle(shuffled)
    for key, found in zip(shuffled, store.get_many(shuffled), strict=True):
        assert_records_equal(found, by_key[key], f"get_many(...)[{key!r}]")
    seen = 0
    for key, record in store.items():
        assert_records_equal(record, by_key[key], f"items()[{key!r}]")
        seen += 1
    assert seen == len(batch)


# -- order and batching do not matter ---------------------------------------------------------


@pytest.mark.integration  # a search over many stores: seconds, not in the fast loop
@pytest.mark.parametrize("key_type", KEY_TYPES)
@STORE_SETTINGS
@given(data=st.data())
def test_contents_do_not_depend_on_order_or_batching(key_type: str, data: st.DataObject) -> None:
    """Any permutation of a batch, appended in any consecutive batches, gives the same contents.

    The reference store gets the records in one append, in the order drawn; the other store
    gets a permutation of them cut into batches (some empty), with tiny chunks and frequent
    manifest checkpoints. Both must list exactly the (key, content hash, split) rows and the
    fingerprint computed from the records alone, and read every record back exactly, before
    and after reopening.
    """
    batch = data.draw(records(key_type), label="records")
    permuted = data.draw(st.permutations(batch), label="permutation")
    batches = data.draw(batchings(permuted), label="batches")
    options = data.draw(store_options, label="options")
    rng = data.draw(st.randoms(use_true_random=False), label="rng")
    with _scratch() as directory:
        reference = _create(Path(directory) / "reference", key_type)
        reference.append(batch)
        _check_holds_exactly(reference, key_type, batch, rng)
        root = Path(directory) / "store"
        store = _create(root, key_type, **options)
        for part in batches:
            store.append(part)
        assert store.version.number == sum(1 for part in batches if part)
        _check_holds_exactly(store, key_type, batch, rng)
        assert set(_manifest_rows(store)) == set(_manifest_rows(reference))
        assert store.version.fingerprint == reference.version.fingerprint
        assert store.version.counts == reference.version.counts
        reopened = litstore.open(root)
        assert reopened.version == store.version
        _check_holds_exactly(reopened, key_type, batch, rng)


@pytest.mark.parametrize("key_type", KEY_TYPES)
@STORE_SETTINGS
@given(data=st.data())
def test_same_batch_in_any_order_writes_identical_chunks(key_type: str, data: st.DataObject) -> None:
    everything = data.draw(records(key_type, min_size=1), label="records")
    cut = data.draw(st.integers(0, len(everything) - 1), label="cut")
    earlier, batch = everything[:cut], everything[cut:]
    permuted = data.draw(st.permutations(batch), label="permuted batch")
    options = data.draw(store_options, label="options")

    def written_chunks(root: Path, order: list[dict[str, Any]]) -> dict[str, list[tuple[int, int, bytes]]]:
        store = _create(root, key_type, **options)
        store.append(earlier)
        version = store.append(order)
        (fragment,) = version.fragments
        chunks = {
            split: [
                (chunk.num_items, chunk.num_bytes, (root / chunk.filename).read_bytes())
                for chunk in split_chunks
                if f"/{fragment}/" in chunk.filename
            ]
            for split, split_chunks in store.chunks().items()
        }
        assert sum(items for split_chunks in chunks.values() for items, _, _ in split_chunks) == len(order)
        for split_chunks in chunks.values():
            for items, size, content in split_chunks:
                assert size == len(content) and items >= 1
        return {split: split_chunks for split, split_chunks in chunks.items() if split_chunks}

    with _scratch() as directory:
        first = written_chunks(Path(directory) / "a", batch)
        second = written_chunks(Path(directory) / "b", permuted)
    assert first == second


# -- content hashes ---------------------------------------------------------------------------


@FAST_SETTINGS
@given(record=values, rng=st.randoms(use_true_random=False))
def test_content_hash_ignores_dict_order(record: Any, rng: random.Random) -> None:
    shuffled = reorder_dicts(record, rng)
    assert codec.encode(shuffled) == codec.encode(record)
    assert _content_hash(shuffled) == _content_hash(record)


@FAST_SETTINGS
@given(data=st.data())
def test_content_hash_depends_on_every_value(data: st.DataObject) -> None:
    record = data.draw(st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=4), label="record")
    path = data.draw(st.sampled_from(leaf_paths(record)), label="path")
    old = get_at(record, path)
    new = data.draw(leaves, label="replacement")
    assume(not records_equal(new, old))
    changed = replace_at(record, path, lambda _: new)
    assert not records_equal(changed, record)
    assert _content_hash(changed) != _content_hash(record)


@FAST_SETTINGS
@given(data=st.data())
def test_content_hash_depends_on_dict_keys(data: st.DataObject) -> None:
    record = data.draw(st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=4), label="record")
    path = data.draw(st.sampled_from(dict_paths(record)), label="dict")
    target = get_at(record, path)
    old_key = data.draw(st.sampled_from(list(target)), label="renamed key")
    new_key = data.draw(st.text(max_size=6).filter(lambda key: key not in target), label="new key")

    def rename(mapping: dict[Any, Any]) -> dict[Any, Any]:
        return {
            (new_key if key == old_key and type(key) is type(old_key) else key): item for key, item in mapping.items()
        }

    changed = replace_at(record, path, rename)
    assert _content_hash(changed) != _content_hash(record)


# Values that compare equal in Python, or share bytes or values, but are different records.
DISTINCT_VALUES: list[tuple[str, Any]] = [
    ("int 1", 1),
    ("float 1.0", 1.0),
    ("bool True", True),
    ("np.int64 1", np.int64(1)),
    ("np.float64 1.0", np.float64(1.0)),
    ("np.bool_ True", np.bool_(True)),
    ("str '1'", "1"),
    ("bytes b'1'", b"1"),
    ("0.0", 0.0),
    ("-0.0", -0.0),
    ("int 0", 0),
    ("False", False),
    ("None", None),
    ("empty str", ""),
    ("empty bytes", b""),
    ("empty list", []),
    ("empty tuple", ()),
    ("empty dict", {}),
    ("list [1, 2]", [1, 2]),
    ("tuple (1, 2)", (1, 2)),
    ("list [[1, 2]]", [[1, 2]]),
    ("list [(1, 2)]", [(1, 2)]),
    ("dict {'1': 2}", {"1": 2}),
    ("dict {1: 2}", {1: 2}),
    ("2**64 - 1", 2**64 - 1),
    ("2**64", 2**64),
    ("-(2**63)", -(2**63)),
    ("-(2**63) - 1", -(2**63) - 1),
    ("str of 2**64", str(2**64)),
    ("int32 (2, 3)", np.arange(6, dtype=np.int32).reshape(2, 3)),
    ("int64 (2, 3)", np.arange(6, dtype=np.int64).reshape(2, 3)),
    ("int32 (3, 2)", np.arange(6, dtype=np.int32).reshape(3, 2)),
    ("int32 (6,)", np.arange(6, dtype=np.int32)),
    ("int32 >(2, 3)", np.arange(6, dtype=">i4").reshape(2, 3)),
    ("float32 (2, 3)", np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("0-d int64", np.array(1, dtype=np.int64)),
    ("(1,) int64", np.array([1], dtype=np.int64)),
    ("empty (0, 3)", np.zeros((0, 3))),
    ("empty (3, 0)", np.zeros((3, 0))),
    ("empty (0,)", np.zeros((0,))),
    ("tensor float32 [1, 2]", torch.tensor([1.0, 2.0])),
    ("tensor bfloat16 [1, 2]", torch.tensor([1.0, 2.0], dtype=torch.bfloat16)),
    ("tensor float16 [1, 2]", torch.tensor([1.0, 2.0], dtype=torch.float16)),
    ("tensor float32 [[1, 2]]", torch.tensor([[1.0, 2.0]])),
    ("ndarray float32 [1, 2]", np.array([1.0, 2.0], dtype=np.float32)),
    ("tensor 0-d int64", torch.tensor(1)),
    ("tensor (1,) int64", torch.tensor([1])),
    ("tensor uint8 [1]", torch.tensor([1], dtype=torch.uint8)),
    ("tensor bool [True]", torch.tensor([True])),
    ("tensor empty (0, 2)", torch.zeros(0, 2)),
    ("tensor empty (2, 0)", torch.zeros(2, 0)),
]


def test_content_hash_distinguishes_lookalike_values() -> None:
    hashes: dict[bytes, str] = {}
    for name, value in DISTINCT_VALUES:
        digest = _content_hash({KEY_FIELD: "k", "value": value})
        assert digest not in hashes, f"{name} hashes like {hashes.get(digest)}"
        hashes[digest] = name
    assert _content_hash({KEY_FIELD: "k"}) != _content_hash({KEY_FIELD: "k", "value": None})
    assert _content_hash({KEY_FIELD: "k"}) != _content_hash({KEY_FIELD: "j"})


def _tensor(array: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    # An empty tensor made from numpy has zero strides, which the codec cannot encode yet
    # (see test_codec_stores_faithfully_or_refuses); make empty ones with torch's own strides.
    return tensor if array.size else torch.zeros(array.shape, dtype=tensor.dtype)


CASTABLE_DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64", ">i8")


@FAST_SETTINGS
@given(
    base=hnp.arrays(np.dtype("int8"), array_shapes, elements=st.integers(0, 100)),
    dtypes=st.lists(st.sampled_from(CASTABLE_DTYPES), min_size=2, max_size=2, unique=True),
)
def test_content_hash_depends_on_array_dtype(base: np.ndarray, dtypes: list[str]) -> None:
    first, second = (base.astype(dtype) for dtype in dtypes)
    assert _content_hash({"x": first}) != _content_hash({"x": second})
    if ">i8" not in dtypes:  # torch has no non-native byte order
        first_tensor, second_tensor = (_tensor(base.astype(dtype)) for dtype in dtypes)
        assert _content_hash({"x": first_tensor}) != _content_hash({"x": second_tensor})


def _other_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes with as many elements as ``shape`` but different from it."""
    size = math.prod(shape)
    candidates = [tuple(reversed(shape)), (*shape, 1), (1, *shape), (size,), (size, 1), (1, size)]
    return sorted({candidate for candidate in candidates if candidate != shape})


@FAST_SETTINGS
@given(array=numpy_arrays(), data=st.data())
def test_content_hash_depends_on_array_shape(array: np.ndarray, data: st.DataObject) -> None:
    other_shape = data.draw(st.sampled_from(_other_shapes(array.shape)), label="other shape")
    reshaped = np.ascontiguousarray(array).reshape(other_shape)
    assert reshaped.tobytes() == np.ascontiguousarray(array).tobytes()
    assert _content_hash({"x": reshaped}) != _content_hash({"x": array})


@FAST_SETTINGS
@given(tensor=tensors(), data=st.data())
def test_content_hash_depends_on_tensor_shape(tensor: torch.Tensor, data: st.DataObject) -> None:
    other_shape = data.draw(st.sampled_from(_other_shapes(tuple(tensor.shape))), label="other shape")
    reshaped = tensor.reshape(other_shape) if tensor.numel() else torch.zeros(other_shape, dtype=tensor.dtype)
    assert _content_hash({"x": reshaped}) != _content_hash({"x": tensor})


# -- codec round trip -------------------------------------------------------------------------


@FAST_SETTINGS
@given(value=values)
def test_codec_round_trip(value: Any) -> None:
    encoded = codec.encode(value)
    assert isinstance(encoded, bytes)
    decoded = codec.decode(encoded)
    assert_records_equal(decoded, value, "decoded")
    assert codec.encode(value) == encoded  # deterministic
    assert codec.encode(copy.deepcopy(value)) == encoded  # depends on the value, not on the objects
    assert codec.encode(decoded) == encoded  # canonical: what comes back encodes the same
    assert_records_equal(codec.decode(memoryview(encoded)), value, "decoded from a memoryview")
    for mapping in _dicts(decoded):  # entries come back sorted by key
        if all(type(key) is str for key in mapping) or all(type(key) is int for key in mapping):
            assert list(mapping) == sorted(mapping)


def _dicts(value: Any) -> list[dict[Any, Any]]:
    """Every dict inside ``value``, ``value`` included."""
    found = []
    if isinstance(value, dict):
        found.append(value)
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found.extend(_dicts(item))
    return found


@FAST_SETTINGS
@given(key_type=st.sampled_from(KEY_TYPES), data=st.data())
def test_records_round_trip(key_type: str, data: st.DataObject) -> None:
    for record in data.draw(records(key_type, min_size=1, max_size=4)):
        encoded = codec.encode(record)
        assert_records_equal(codec.decode(encoded), record)
        assert codec.encode(codec.decode(encoded)) == encoded


def test_comparison_helper_is_strict() -> None:
    """The helper the properties rest on tells apart what it must."""
    same = [
        (math.nan, math.nan),
        (np.array([math.nan]), np.array([math.nan])),
        (torch.tensor([math.nan]), torch.tensor([math.nan])),
        ({"a": 1, "b": (1,)}, {"b": (1,), "a": 1}),
        (bytearray(b"x"), b"x"),
    ]
    for expected, actual in same:
        assert records_equal(actual, expected), (actual, expected)
    different = [
        (1, 1.0),
        (1, True),
        (0.0, -0.0),
        ((1, 2), [1, 2]),
        (np.arange(6, dtype=np.int32), np.arange(6, dtype=np.int64)),
        (np.arange(6).reshape(2, 3), np.arange(6).reshape(3, 2)),
        (torch.zeros(2), torch.zeros(2, dtype=torch.bfloat16)),
        (torch.zeros(2, 3), torch.zeros(3, 2)),
        (np.float32(1), np.float64(1)),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({1: "x"}, {"1": "x"}),
        (np.array([1.0]), torch.tensor([1.0], dtype=torch.float64)),
    ]
    for expected, actual in different:
        assert not records_equal(actual, expected), (actual, expected)


# -- verify and versions ----------------------------------------------------------------------


@pytest.mark.integration  # a search over many stores: seconds, not in the fast loop
@pytest.mark.parametrize("key_type", KEY_TYPES)
@FEW_STORE_SETTINGS
@given(data=st.data())
def test_verify_is_ok_after_any_appends(key_type: str, data: st.DataObject) -> None:
    """verify() passes after every append, for the latest and every earlier version, and can fail."""
    batch = data.draw(records(key_type), label="records")
    batches = data.draw(batchings(batch, max_cuts=3), label="batches")
    options = data.draw(store_options, label="options")
    present = {record[KEY_FIELD] for record in batch}
    absent = data.draw(keys_for(key_type).filter(lambda key: key not in present), label="absent key")
    with _scratch() as directory:
        root = Path(directory) / "store"
        store = _create(root, key_type, **options)
        keys: list[Any] = []
        history: list[list[Any]] = [[]]  # keys of each version
        for part in batches:
            store.append(part)
            keys.extend(record[KEY_FIELD] for record in part)
            if part:
                history.append(list(keys))
            report = store.verify(expected_keys=keys)
            assert report.ok, report.summary()
            assert report.records_checked == len(keys)
            assert report.fingerprint == store.version.fingerprint == _expected_fingerprint(batch[: len(keys)])
        assert store.version.number == len(history) - 1
        reopened = litstore.open(root)
        assert reopened.verify().ok
        report = reopened.verify(expected_keys=[*keys, absent])
        assert not report.ok and report.missing_keys == [absent] and not report.unexpected_keys
        if keys:
            report = reopened.verify(expected_keys=keys[1:])
            assert not report.ok and report.unexpected_keys == [keys[0]] and not report.missing_keys
        for number, keys_then in enumerate(history):
            snapshot = reopened.at(number)
            assert len(snapshot) == len(keys_then)
            assert sorted(snapshot.keys(), key=repr) == sorted(keys_then, key=repr)
            if len(keys_then) < len(keys):
                assert keys[len(keys_then)] not in snapshot
        number = data.draw(st.integers(0, len(history) - 1), label="older version")
        report = reopened.verify(version=number, expected_keys=history[number])
        assert report.ok, report.summary()
        assert report.version == number


@pytest.mark.parametrize("key_type", KEY_TYPES)
@FEW_STORE_SETTINGS
@given(data=st.data())
def test_lookups_of_absent_keys(key_type: str, data: st.DataObject) -> None:
    """Absent keys are reported as absent, also in a store with no records yet."""
    batch = data.draw(records(key_type, max_size=6), label="records")
    present = [record[KEY_FIELD] for record in batch]
    absent = data.draw(
        st.lists(keys_for(key_type).filter(lambda key: key not in present), min_size=1, max_size=3, unique=True),
        label="absent keys",
    )
    with _scratch() as directory:
        store = _create(Path(directory) / "store", key_type)
        store.append(batch)
        sentinel = object()
        for key in absent:
            assert key not in store
            assert store.get(key) is None
            with pytest.raises(litstore.KeyNotFoundError):
                store[key]
        asked = [*present, *absent]
        found = store.get_many(asked, default=sentinel)
        assert found[len(present) :] == [sentinel] * len(absent)
        for record, expected in zip(found, batch):
            assert_records_equal(record, expected)
        with pytest.raises(litstore.KeyNotFoundError):
            store.get_many(asked)


# -- values the codec must either store faithfully or refuse ----------------------------------
#
# codec's contract: any value it encodes comes back equal; anything else raises
# UnsupportedValueError (which append turns into a SchemaError). Each case below is a value
# that once broke that contract.

UNREADABLE_OR_UNCAUGHT: list[tuple[str, Any]] = [
    ("structured numpy array", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")])),
    ("structured numpy scalar", np.zeros(1, dtype=[("a", "<i4"), ("b", "<f4")])[0]),
    ("empty np.str_ scalar", np.array(["", "ab"])[0]),
    ("empty np.bytes_ scalar", np.bytes_(b"")),
    ("dict with a tuple key", {(1, 2): "x"}),
    ("dict with a big int key", {2**64: "x"}),
    ("dict with a numpy int key", {np.int64(1): "x"}),
    ("str with a lone surrogate", "\ud800"),
    ("empty tensor from numpy", torch.from_numpy(np.zeros(0, dtype=np.float32))),
    ("empty column of a tensor", torch.zeros(0, 3)[:, 0]),
]


@pytest.mark.parametrize(("name", "value"), UNREADABLE_OR_UNCAUGHT, ids=[name for name, _ in UNREADABLE_OR_UNCAUGHT])
def test_codec_stores_faithfully_or_refuses(name: str, value: Any) -> None:
    try:
        encoded = codec.encode({"value": value})
    except codec.UnsupportedValueError:
        return
    decoded = codec.decode(encoded)
    assert_records_equal(decoded, {"value": value})


@pytest.mark.parametrize(("name", "value"), UNREADABLE_OR_UNCAUGHT, ids=[name for name, _ in UNREADABLE_OR_UNCAUGHT])
def test_store_keeps_or_rejects_awkward_values(name: str, value: Any) -> None:
    """append either rejects the record with a SchemaError, or stores it so that it reads back and verifies."""
    with _scratch() as directory:
        store = _create(Path(directory) / "store", "str")
        try:
            store.append([{KEY_FIELD: "k", "value": value}])
        except litstore.SchemaError:
            assert store.version.number == 0
            return
        report = store.verify()
        assert report.ok, report.summary()
        assert_records_equal(store["k"], {KEY_FIELD: "k", "value": value})


def test_dict_order_with_nan_float_keys() -> None:
    """Entries are sorted by key; a NaN key must not make the order depend on insertion order."""
    nan = math.nan
    first = {nan: 1, 0.5: 2}
    second = {0.5: 2, nan: 1}
    assert first == second
    assert codec.encode(first) == codec.encode(second)
