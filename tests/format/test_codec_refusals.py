"""Record values from strangers: stored bytes never run code or crash a reader, bad input never reaches disk.

Hostile stored records are planted by writing a real record of the same byte length
and overwriting its bytes in the chunk file and its content hash in the manifest (and,
through ``tests.planting.restamp``, in the chunk's hashes sidecar, the key runs and
the fingerprint), so the store is consistent with itself and only the record's own
bytes are hostile.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import litdata
import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import xxhash
from PIL import Image as PILImage

import litstore
from tests.conftest import tree_state
from tests.planting import restamp

_TUPLE, _NDARRAY, _TENSOR, _MEDIA = 1, 2, 4, 6


class _Touch:
    """Unpickling this creates ``marker``: proof that stored bytes ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _plant(store: litstore.Store, value: Any) -> str:
    """Make the stored record of key ``"a"`` the MessagePack map ``{"id": "a", "v": value}``."""
    hostile = _pack({"id": "a", "v": value})
    for size in range(len(hostile)):
        honest = _pack({"id": "a", "v": b"x" * size})
        if len(honest) == len(hostile):
            break
    else:
        raise AssertionError("no honest record of the hostile record's length")
    store.append([{"id": "a", "v": b"x" * size}])
    (chunk,) = Path(store.root).glob("fragments/*/chunk-*.bin")
    data = chunk.read_bytes()
    assert data.count(honest) == 1
    chunk.write_bytes(data.replace(honest, hostile))
    # A stranger's store is consistent with itself: its manifest holds the hostile record's hash.
    (manifest,) = Path(store.root).glob("manifests/*.parquet")
    table = pq.read_table(manifest)
    hashes = pa.array([xxhash.xxh3_128_digest(hostile)], type=table.schema.field("content_hash").type)
    pq.write_table(table.set_column(table.schema.get_field_index("content_hash"), "content_hash", hashes), manifest)
    restamp(store.root)
    return "a"


def _media(data_format: str, data: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(_MEDIA, _pack([data_format, data]))


def _expect_unreadable(store: litstore.Store, *names: str) -> None:
    reopened = litstore.open(store.root)
    for read in (lambda: reopened["a"], lambda: reopened.get_many(["a"]), lambda: next(iter(reopened.dataset()))):
        with pytest.raises(litstore.IntegrityError) as caught:
            read()
        for name in names:
            assert name in str(caught.value), f"{name!r} not named in: {caught.value}"
        assert "do not match their committed content hash" not in str(caught.value), "refused as damage, not decoded"
    report = reopened.verify()
    assert not report.ok


@pytest.mark.parametrize("data_format", ["pickle", "graph:pickle", "graph", "json"])
def test_stored_media_never_runs_a_serializer_outside_the_allowlist(
    store: litstore.Store, tmp_path: Path, data_format: str
) -> None:
    marker = tmp_path / "pwned"
    _plant(store, _media(data_format, pickle.dumps(_Touch(marker))))
    _expect_unreadable(store, repr(data_format))
    assert not marker.exists()


def test_stored_mesh_format_names_only_the_types_litdata_writes(store: litstore.Store) -> None:
    _plant(store, _media("mesh:dict", b"{}"))
    _expect_unreadable(store, "mesh:dict")


def test_media_that_litdata_would_pickle_is_refused_on_write(store: litstore.Store) -> None:
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.SchemaError, match="pickle"):
        store.append([{"id": "t", "v": litdata.Tensor(bytes=b"\x00" * 8)}])  # no dtype: only pickle serializes it
    assert tree_state(Path(store.root)) == before


def test_tensor_dtype_must_be_a_torch_dtype(store: litstore.Store) -> None:
    _plant(store, msgpack.ExtType(_TENSOR, _pack(["load", [1], b"\x00"])))
    _expect_unreadable(store, "'load' is not a torch dtype")


@pytest.mark.parametrize("dtype", ["O", "|O", "[('a', '<i4')]", "(2,)i4"])
def test_array_dtype_must_be_plain(store: litstore.Store, dtype: str) -> None:
    _plant(store, msgpack.ExtType(_NDARRAY, _pack([dtype, [0], b""])))
    _expect_unreadable(store)


@pytest.mark.parametrize(
    "ext",
    [
        msgpack.ExtType(_NDARRAY, _pack(["<f8", [2**31], b"\x00" * 8])),
        msgpack.ExtType(_NDARRAY, _pack(["<f8", [2**40, 2**40], b""])),  # would allocate without the check
        msgpack.ExtType(_NDARRAY, _pack(["|S0", [2**40], b""])),  # numpy widens S0 to S1 and allocates
        msgpack.ExtType(_NDARRAY, _pack(["<f8", [-1], b"\x00" * 8])),
        msgpack.ExtType(_TENSOR, _pack(["float32", [2**40, 2**40], b""])),
        msgpack.ExtType(_TENSOR, _pack(["float32", [2**31], b"\x00" * 8])),
        # litdata's tensor media header claiming 2**31 x 2**31 elements and holding none
        _media("tensor", struct.pack(">II", 0, 2) + struct.pack(">2I", 2**31, 2**31)),
    ],
)
def test_array_shape_must_match_its_bytes(store: litstore.Store, ext: msgpack.ExtType) -> None:
    _plant(store, ext)
    _expect_unreadable(store)


def test_huge_stored_bigint_is_refused(store: litstore.Store) -> None:
    _plant(store, msgpack.ExtType(5, b"9" * 5000))
    _expect_unreadable(store, "4300 digits")


_READ_IN_A_FRESH_PROCESS = """
import sys
import litstore
store = litstore.open(sys.argv[1])
for read in (lambda: store["a"], lambda: store.get_many(["a"]), store.verify):
    try:
        result = read()
    except litstore.IntegrityError as exc:
        print("IntegrityError", exc)
    else:
        print("read", getattr(result, "ok", "a record"))
"""


def test_deeply_nested_stored_tuples_fail_cleanly_in_a_fresh_process(store: litstore.Store) -> None:
    nested = msgpack.ExtType(_TUPLE, _pack([]))
    for _ in range(300):  # deep enough to overflow the C stack through msgpack's ext_hook recursion
        nested = msgpack.ExtType(_TUPLE, _pack([nested]))
    _plant(store, nested)
    result = subprocess.run(
        [sys.executable, "-c", _READ_IN_A_FRESH_PROCESS, str(store.root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"reader died with {result.returncode}: {result.stderr[-2000:]}"
    lines = result.stdout.splitlines()
    assert lines[0].startswith("IntegrityError") and "nested more than 64" in lines[0]
    assert lines[1].startswith("IntegrityError")
    assert lines[2] == "read False"  # verify reports the record as damaged


def _nest(kind: str, depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"d": value} if kind == "dict" else [value] if kind == "list" else (value,)
    return value


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_nesting_is_limited_on_write(store: litstore.Store, kind: str) -> None:
    store.append([{"id": "deepest", "v": _nest(kind, 63)}])  # 64 containers with the record itself
    assert litstore.open(store.root)["deepest"]["v"] == _nest(kind, 63)
    root = Path(store.root)
    before = tree_state(root)
    with pytest.raises(litstore.SchemaError, match="nested more than 64") as caught:
        store.append([{"id": "deep", "v": _nest(kind, 200)}])
    assert "(key 'deep')" in str(caught.value)
    assert tree_state(root) == before


def _rejected(store: litstore.Store, records: Any, error: type[Exception], *names: str) -> None:
    root = Path(store.root)
    before = tree_state(root)
    version = store.version
    for write in (store.append, store.upsert):
        with pytest.raises(error) as caught:
            write(records)
        assert isinstance(caught.value, litstore.LitstoreError)
        for name in names:
            assert name in str(caught.value), f"{name!r} not named in: {caught.value}"
        assert tree_state(root) == before
        assert litstore.open(root).version == version


def _self_containing() -> dict[str, Any]:
    record: dict[str, Any] = {"id": "loop"}
    record["self"] = record
    return record


def test_a_batch_that_is_not_a_list_of_records(store: litstore.Store) -> None:
    store.append([{"id": "k"}])
    _rejected(store, None, litstore.InvalidArgumentError, "pass a list of records")
    _rejected(store, {"id": "a", "x": 1, "y": 2}, litstore.InvalidArgumentError, "pass a list of records")
    _rejected(store, "abc", litstore.InvalidArgumentError, "pass a list of records")


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (10**5000, ("v", "4300 digits")),
        (-(10**5000), ("v", "4300 digits")),
        (_self_containing, ("self.self", "contains itself")),
        (torch.eye(3).to_sparse(), ("v", "sparse")),
        (torch.empty(3, device="meta"), ("v", "meta")),
        (PILImage.new("RGB", (2, 2)), ("v", "litdata.Image")),
        (litdata.Image(path="/nonexistent/picture.png"), ("v", "could not serialize")),
    ],
    ids=["huge-int", "huge-negative-int", "cycle", "sparse", "meta", "pil", "missing-media-file"],
)
def test_a_value_that_cannot_be_stored(store: litstore.Store, value: Any, names: tuple[str, ...]) -> None:
    store.append([{"id": "k"}])
    record = value() if callable(value) else {"id": "bad", "v": value}
    _rejected(store, [{"id": "ok"}, record], litstore.SchemaError, "position 1", *names)


def test_a_lone_surrogate_key_is_refused_before_anything_is_written(store: litstore.Store) -> None:
    store.append([{"id": "k"}])
    _rejected(store, [{"id": "ok"}, {"id": "\ud800"}], litstore.KeyFieldError, "position 1", "surrogate")


def test_a_missing_key_field_lists_the_record_fields(store: litstore.Store) -> None:
    store.append([{"id": "k"}])
    _rejected(store, [{"name": "x", "label": 1}], litstore.KeyFieldError, "'id'", "'label', 'name'")


def test_numpy_keys_are_stored_as_the_keys_they_stand_for(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="n", key_type=int)
    store.append([{"n": np.int64(5), "v": 1}, {"n": np.uint8(7), "v": 2}])
    for handle in (store, litstore.open(store.root)):
        assert handle[np.int64(5)] == {"n": 5, "v": 1}  # type: ignore[index]  # Key does not name numpy ints
        assert type(handle[5]["n"]) is int
        assert np.int64(5) in handle and 5 in handle and np.int32(7) in handle
        found = handle.get_many([np.int64(5), 7])  # type: ignore[list-item]
        assert found == [{"n": 5, "v": 1}, {"n": 7, "v": 2}]
    version = store.version
    assert store.upsert([{"n": 5, "v": 1}]) == version  # the same record: nothing to commit

    named = make_store(key="id")
    named.append([{"id": np.str_("a"), "v": 1}])
    assert type(named["a"]["id"]) is str


def test_a_planted_record_that_is_a_record_reads_back_everywhere(store: litstore.Store) -> None:
    """The planting leaves nothing but the record's bytes for a reader to catch: an honest record planted
    so reads back through every reader and verifies, so the refusals above are the codec's own."""
    _plant(store, b"y" * 40)
    reopened = litstore.open(store.root)
    expected = {"id": "a", "v": b"y" * 40}
    assert reopened["a"] == expected
    assert reopened.get_many(["a"]) == [expected]
    assert list(reopened.dataset()) == [expected]
    assert dict(reopened.items()) == {"a": expected}
    assert reopened.verify().ok
