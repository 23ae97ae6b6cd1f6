"""A store's ``chunk_bytes`` is one a chunk can be written with: refused up front, and refused when read.

litdata's chunk header holds 32-bit offsets, so the writer refuses a chunk of 4 GiB or
more; a target at or above that limit could never fill a chunk. ``Store.create`` refuses
it (and any ``chunk_bytes`` that is not a positive whole number) with
``InvalidArgumentError``, and a store whose ``litstore.json`` a stranger edited to hold
one opens with ``IntegrityError`` instead of failing at its first large write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from litdata.utilities.format import _convert_bytes_to_int

import litstore
from litstore.format import layout
from litstore.format.models import size_in_bytes
from tests.conftest import tree_state

LIMIT = layout.CHUNK_SIZE_LIMIT


def test_the_limit_is_the_one_the_writer_enforces() -> None:
    assert LIMIT == 2**32  # litdata's chunk offsets are uint32


@pytest.mark.parametrize("chunk_bytes", [LIMIT, LIMIT + 1, 5 * 2**30, 2**63])
def test_create_refuses_chunk_bytes_at_or_above_the_limit(tmp_path: Path, chunk_bytes: int) -> None:
    root = tmp_path / "store"
    with pytest.raises(litstore.InvalidArgumentError) as raised:
        litstore.Store.create(root, key="id", chunk_bytes=chunk_bytes)
    message = str(raised.value)
    assert "chunk_bytes" in message
    assert f"{chunk_bytes:,}" in message, "the message names the value"
    assert f"{LIMIT:,}" in message, "the message names the limit"
    assert not root.exists() or not any(root.iterdir()), "nothing was written"


@pytest.mark.parametrize("chunk_bytes", [True, "65536", 65536.0, 1.5, None])
def test_create_refuses_chunk_bytes_that_is_not_a_whole_number(tmp_path: Path, chunk_bytes: Any) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match=r"chunk_bytes: .*whole number of bytes, got "):
        litstore.Store.create(tmp_path / "store", key="id", chunk_bytes=chunk_bytes)


@pytest.mark.parametrize("chunk_bytes", [0, -1])
def test_create_refuses_chunk_bytes_that_is_not_positive(tmp_path: Path, chunk_bytes: int) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match=r"chunk_bytes: .*greater than 0"):
        litstore.Store.create(tmp_path / "store", key="id", chunk_bytes=chunk_bytes)


@pytest.mark.parametrize("chunk_bytes", [1, LIMIT - 1, np.int64(4096)])
def test_create_takes_chunk_bytes_below_the_limit(tmp_path: Path, chunk_bytes: int) -> None:
    store = litstore.Store.create(tmp_path / "store", key="id", chunk_bytes=chunk_bytes)
    store.append([{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    reopened = litstore.open(tmp_path / "store")
    assert reopened.config.chunk_bytes == int(chunk_bytes)
    assert type(reopened.config.chunk_bytes) is int
    assert reopened["b"]["v"] == 2


def _edit_config(root: Path, **values: Any) -> None:
    path = root / layout.CONFIG
    document = json.loads(path.read_bytes())
    document.update(values)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("chunk_bytes", [0, -5, True, "65536", 1.5])
def test_a_config_on_disk_with_an_impossible_chunk_bytes_is_refused_on_open(tmp_path: Path, chunk_bytes: Any) -> None:
    root = tmp_path / "store"
    litstore.Store.create(root, key="id", chunk_bytes=4096).append([{"id": "a", "v": 1}])
    _edit_config(root, chunk_bytes=chunk_bytes)
    before = tree_state(root)
    for opener in (litstore.open, litstore.Store.open):
        with pytest.raises(litstore.IntegrityError, match=re.escape(f"{layout.CONFIG} is damaged: chunk_bytes: ")):
            opener(root)
    assert tree_state(root) == before, "opening changed nothing"


@pytest.mark.parametrize("chunk_bytes", [LIMIT, 2**40])
def test_a_store_created_with_chunk_bytes_past_the_limit_still_opens_and_reads(
    tmp_path: Path, chunk_bytes: int
) -> None:
    """Earlier litstore created such stores; their chunks are whatever was written. The limit is checked
    where a size is chosen (create, compact) and where a chunk is written, not when a config is read."""
    root = tmp_path / "store"
    litstore.Store.create(root, key="id", chunk_bytes=4096).append([{"id": "a", "v": 1}])
    _edit_config(root, chunk_bytes=chunk_bytes)
    store = litstore.open(root)
    assert store["a"] == {"id": "a", "v": 1} and store.verify().ok
    store.append([{"id": "b", "v": 2}])  # a small chunk: far below the limit
    assert litstore.open(root)["b"] == {"id": "b", "v": 2}


def test_compact_refuses_a_target_past_the_limit(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "store", key="id", chunk_bytes=4096)
    store.append([{"id": "a", "v": 1}])
    with pytest.raises(litstore.InvalidArgumentError, match=f"target_chunk_bytes must be below {LIMIT:,}"):
        store.compact(target_chunk_bytes=LIMIT)
    assert store.version.number == 1


def _edited_config(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> str:
    root = str(tmp_path / "s")
    litstore.Store.create(root, splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=4096).append(
        [{"id": f"k{i}"} for i in range(4)]
    )
    path = Path(root) / layout.CONFIG
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("checkpoint_interval", True),
        ("checkpoint_interval", "64"),
        ("checkpoint_interval", 64.0),
        ("format_version", True),
        ("format_version", False),
        ("format_version", 0),
        ("format_version", -1),
        ("format_version", "2"),
    ],
    ids=repr,
)
def test_a_config_with_an_odd_whole_number_is_damaged(tmp_path: Path, field: str, value: Any) -> None:
    """Lax parsing took True as 1, "64" as 64, and a format version of 0 or less as format 1."""
    root = _edited_config(tmp_path, lambda config: config.__setitem__(field, value))
    with pytest.raises(litstore.IntegrityError, match=f"{layout.CONFIG}.*{field}"):
        litstore.open(root)


@pytest.mark.parametrize("value", [True, "1"], ids=repr)
def test_a_config_with_an_odd_split_fraction_is_damaged(tmp_path: Path, value: Any) -> None:
    root = _edited_config(
        tmp_path, lambda config: config.__setitem__("splits", {"kind": "hash", "fractions": {"train": value}})
    )
    with pytest.raises(litstore.IntegrityError, match=layout.CONFIG):
        litstore.open(root)


@pytest.mark.parametrize("value", [True, "64", 1.5], ids=repr)
def test_create_refuses_an_odd_checkpoint_interval(tmp_path: Path, value: Any) -> None:
    with pytest.raises(litstore.InvalidArgumentError, match="checkpoint_interval"):
        litstore.Store.create(str(tmp_path / "s"), checkpoint_interval=value)
    assert not (tmp_path / "s").exists()


def test_a_whole_fraction_and_numpy_whole_numbers_are_still_taken(tmp_path: Path) -> None:
    store = litstore.Store.create(
        str(tmp_path / "s"),
        splits=litstore.HashSplit(train=1),
        checkpoint_interval=np.int64(8),  # type: ignore[arg-type]
    )
    assert store.config.checkpoint_interval == 8
    assert store.config.splits == litstore.HashSplit(train=1.0)


def test_a_config_naming_another_key_field_than_the_records_hold_is_an_integrity_error(tmp_path: Path) -> None:
    """A stranger's config whose key is not the records' key field: lookups used to say KeyNotFoundError."""
    root = _edited_config(tmp_path, lambda config: config.__setitem__("key", "name"))
    store = litstore.open(root)
    with pytest.raises(litstore.IntegrityError, match="has no field 'name'"):
        store["k1"]
    with pytest.raises(litstore.IntegrityError, match="has no field 'name'"):
        store.get_many(["k1", "k2"])
    assert not store.verify().ok


def test_hash_split_takes_decimal_fractions() -> None:
    from decimal import Decimal

    split = litstore.HashSplit(train=Decimal("0.75"), val=Decimal("0.25"))
    assert split.fractions == {"train": 0.75, "val": 0.25}


_SIZE_TEXTS = st.builds(
    "{}{}{}{}".format,
    st.sampled_from(["", " ", "  "]),
    st.one_of(
        st.integers(0, 10**6).map(str),
        st.floats(0, 1e6, allow_nan=False).map(repr),
        st.sampled_from(["1e3", "1_000", ".5", "+2", "-3", "nan", "inf", "0x10", ""]),
    ),
    st.sampled_from(["", " "]),
    st.sampled_from(["b", "k", "kb", "KB", "m", "Mb", "MB", "g", "GB", "t", "tb", "mib", "pb", "bytes", ""]),
)


@given(_SIZE_TEXTS)
def test_a_size_text_means_what_it_means_to_litdata(text: str) -> None:
    try:
        theirs: int | None = _convert_bytes_to_int(text)
    except (ValueError, OverflowError):
        theirs = None
    try:
        ours = size_in_bytes(text)
    except litstore.InvalidArgumentError:
        ours = None
    if theirs is not None and theirs > 0:
        assert ours == theirs
    elif not text.lower().strip().endswith("ib"):  # binary units are litstore's own
        assert ours is None


def test_binary_units_are_litstores_own() -> None:
    assert [size_in_bytes(text) for text in ("1KiB", "2 MiB", "1.5gib", "1TiB")] == [1024, 2 << 20, 3 << 29, 1 << 40]
    for bad in ("0MB", "0.5b", "-1kb", "nanMB", "infGB", "MiB", "64", "64 parsecs"):
        with pytest.raises(litstore.InvalidArgumentError, match="positive size with a unit"):
            size_in_bytes(bad)
