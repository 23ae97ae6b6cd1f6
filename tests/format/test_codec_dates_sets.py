"""Dates, datetimes and sets are stored exactly and read back as what they were, and hostile bytes of them refused.

Their MessagePack extensions (:mod:`litstore.format.codec`) came after stores were
written without them: the bytes (and so the content hash) of every value type stored
before are pinned here, unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import msgpack
import numpy as np
import pandas as pd
import pytest
import torch
import xxhash

import litstore
from litstore.format import codec
from tests.format.test_codec_refusals import _READ_IN_A_FRESH_PROCESS, _expect_unreadable, _pack, _plant, _rejected

_DATETIME, _DATE, _SET, _FROZENSET = 10, 11, 12, 13

VALUES: dict[str, Any] = {
    "naive": datetime(2024, 1, 2, 3, 4, 5, 6),
    "utc": datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    "odd-offset": datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=5, minutes=30, microseconds=7))),
    "folded": datetime(2021, 11, 7, 1, 30, fold=1),
    "extremes": [datetime.min, datetime.max, date.min, date.max],
    "date": date(2020, 2, 29),
    "set": {1, "a", b"b", None, 2.5, (1, (2,)), frozenset({3})},
    "frozenset": frozenset({"x", 7}),
    "empty": [set(), frozenset()],
    "nested": {"when": {date(2001, 1, 1), datetime(2001, 1, 1, 12)}, "tags": ({"a"},)},
}


def _types(value: Any) -> Any:
    """The type of ``value`` and of everything inside it, in a comparable shape."""
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value), [_types(item) for item in value])
    if isinstance(value, (set, frozenset)):
        return (type(value), sorted(map(repr, map(_types, value))))
    if isinstance(value, datetime):
        return (datetime, None if value.tzinfo is None else value.utcoffset(), value.fold)
    return type(value)


def test_each_comes_back_equal_and_of_its_type_from_every_reader(store: litstore.Store) -> None:
    records = [{"id": name, "v": value} for name, value in VALUES.items()]
    store.append(records)
    reopened = litstore.open(store.root)
    read = {
        "lookup": {name: reopened[name]["v"] for name in VALUES},
        "get_many": {record["id"]: record["v"] for record in reopened.get_many(list(VALUES))},
        "items": {key: record["v"] for key, record in reopened.items()},
        "dataset": {record["id"]: record["v"] for record in reopened.dataset()},
    }
    for how, values in read.items():
        assert values == VALUES, how
        assert _types(values) == _types(VALUES), how
    assert reopened.verify().ok


def test_a_named_zone_comes_back_as_its_offset_then() -> None:
    paris = ZoneInfo("Europe/Paris")
    for when in (datetime(2024, 7, 1, 12, tzinfo=paris), datetime(2024, 1, 1, 12, tzinfo=paris)):
        back = codec.decode(codec.encode({"v": when}))["v"]
        assert (
            back == when
            and back.utcoffset() == when.utcoffset()
            and back.replace(tzinfo=None) == when.replace(tzinfo=None)
        )
        assert back.tzinfo == timezone(when.utcoffset())  # type: ignore[arg-type]
    # In a repeated hour, Python never calls datetimes of two zones equal (PEP 495); the instant is kept.
    repeated = datetime(2021, 11, 7, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York"))
    back = codec.decode(codec.encode({"v": repeated}))["v"]
    assert back.timestamp() == repeated.timestamp() and back.utcoffset() == timedelta(hours=-5)


def test_a_sets_order_never_changes_its_bytes() -> None:
    forward, backward = set(), set()
    for item in range(200):
        forward.add(f"k{item}")
    for item in reversed(range(200)):
        backward.add(f"k{item}")
    assert codec.encode({"v": forward}) == codec.encode({"v": backward})
    assert codec.encode({"v": {1, 2}}) != codec.encode({"v": frozenset({1, 2})}) != codec.encode({"v": [1, 2]})
    aware, naive = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1)
    assert codec.encode({"v": aware}) != codec.encode({"v": naive}) != codec.encode({"v": naive.date()})


def test_the_bytes_of_every_value_type_stored_before_are_unchanged() -> None:
    record = {
        "id": "k",
        "t": (1, "a", None),
        "a": np.arange(6, dtype="<i4").reshape(2, 3),
        "s": np.float32(1.5),
        "b": 2**70,
        "l": [1.5, True, b"x"],
        "d": {"z": 1, "a": {2: "two"}},
        "x": torch.tensor([1, 2], dtype=torch.int16),
    }
    assert xxhash.xxh3_128_hexdigest(codec.encode(record)) == "6b2c8d211838f8c0422c2301771a219c"
    # and the new ones are pinned from now on
    new = {"w": datetime(2024, 1, 2, 3, tzinfo=timezone(timedelta(hours=1))), "d": date(2024, 1, 2), "s": {1, "a"}}
    assert codec.encode(new).hex() == (
        "83a164c7060b93cd07e80102a173d60c9201a161a177d80a99cd07e801020300000000ced693a400"
    )


def test_a_pandas_timestamp_stores_as_a_datetime_unless_it_holds_nanoseconds(store: litstore.Store) -> None:
    store.append([{"id": "ts", "v": pd.Timestamp("2024-01-02 03:04:05.000006", tz="UTC")}])
    back = litstore.open(store.root)["ts"]["v"]
    assert type(back) is datetime and back == datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    _rejected(store, [{"id": "ns", "v": pd.Timestamp("2024-01-02 03:04:05.000000001")}], litstore.SchemaError, "nano")


class _NoOffset(timezone.__base__):  # type: ignore[name-defined,misc]
    """A tzinfo that gives no UTC offset: Python calls its datetimes naive, though they carry it."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (datetime(2024, 1, 1, tzinfo=_NoOffset()), ("v", "no UTC offset")),
        ({object()}, ("v{}",)),
        (frozenset({(1, object())}), ("v{}[1]",)),
    ],
    ids=["tz-without-offset", "set-of-object", "frozenset-of-tuple-of-object"],
)
def test_what_cannot_be_stored_exactly_is_refused(store: litstore.Store, value: Any, names: tuple[str, ...]) -> None:
    _rejected(store, [{"id": "ok"}, {"id": "bad", "v": value}], litstore.SchemaError, "position 1", *names)


def _ext(code: int, body: Any) -> msgpack.ExtType:
    return msgpack.ExtType(code, body if isinstance(body, bytes) else _pack(body))


_FIELDS = [2024, 1, 2, 3, 4, 5, 6, 0]


@pytest.mark.parametrize(
    "ext",
    [
        _ext(_DATETIME, [*_FIELDS]),  # no offset entry
        _ext(_DATETIME, [*_FIELDS, None, None]),
        _ext(_DATETIME, [2024, 13, 2, 3, 4, 5, 6, 0, None]),
        _ext(_DATETIME, [2024, 1, 2, 3, 4, 5, 6, 2, None]),  # fold is 0 or 1
        _ext(_DATETIME, [*_FIELDS, 24 * 3600 * 10**6]),  # an offset of a whole day
        _ext(_DATETIME, [*_FIELDS, 2**63]),
        _ext(_DATETIME, [2**64 - 1, 1, 2, 3, 4, 5, 6, 0, None]),
        _ext(_DATETIME, [2024.0, 1, 2, 3, 4, 5, 6, 0, None]),
        _ext(_DATETIME, [True, 1, 2, 3, 4, 5, 6, 0, None]),
        _ext(_DATETIME, [*_FIELDS, "+01:00"]),
        _ext(_DATETIME, "2024-01-02T03:04:05"),
        _ext(_DATETIME, b"\xc1"),  # a byte MessagePack never uses
        _ext(_DATE, [2024, 2, 30]),
        _ext(_DATE, [0, 1, 1]),
        _ext(_DATE, [2024, 1]),
        _ext(_DATE, [2024, 1, msgpack.ExtType(_DATE, _pack([1, 1, 1]))]),
        _ext(_SET, [[1, 2]]),  # a list is not hashable
        _ext(_SET, [{"a": 1}]),
        _ext(_SET, [1, 1]),  # an item twice
        _ext(_SET, [1, 1.0]),  # equal items
        _ext(_SET, [2, 1]),  # out of canonical order
        _ext(_SET, _pack([1]) + b"\x00"),  # bytes after the array
        _ext(_SET, _pack([1, 2])[:-1]),  # the array cut short
        _ext(_SET, _pack({"a": 1})),  # not an array
        _ext(_SET, b""),
        _ext(_FROZENSET, [np.float64(1).tobytes(), [0]]),
        _ext(14, b""),  # a code no litstore writes
    ],
)
def test_damaged_payloads_are_refused(ext: msgpack.ExtType) -> None:
    payload = _pack({"id": "a", "v": ext})
    with pytest.raises(litstore.IntegrityError, match="do not decode"):
        codec.decode(payload)
    with pytest.raises(litstore.IntegrityError, match="payload 1: stored bytes do not decode"):
        codec.decode_each([codec.encode({"id": "z"}), payload])
    assert (
        codec.decode_framed(memoryview(len(payload).to_bytes(4, "little") + payload), np.array([0, 4 + len(payload)]))
        is None
    )


@pytest.mark.parametrize(
    "ext", [_ext(_DATETIME, [2024, 13, 2, 3, 4, 5, 6, 0, None]), _ext(_SET, [[1, 2]]), _ext(_SET, [2, 1])]
)
def test_a_store_holding_damaged_payloads_reads_them_as_damage(store: litstore.Store, ext: msgpack.ExtType) -> None:
    _plant(store, ext)
    _expect_unreadable(store)


def test_stored_sets_nested_past_the_limit_are_refused() -> None:
    nested = msgpack.ExtType(_SET, _pack([]))
    for _ in range(80):
        nested = msgpack.ExtType(_FROZENSET, _pack([nested]))
    with pytest.raises(litstore.IntegrityError, match="nested more than 64"):
        codec.decode(_pack({"id": "a", "v": nested}))


@pytest.mark.integration
def test_deeply_nested_stored_sets_fail_cleanly_in_a_fresh_process(store: litstore.Store) -> None:
    nested = msgpack.ExtType(_FROZENSET, _pack([]))
    for _ in range(300):  # deep enough to overflow the C stack through msgpack's ext_hook recursion
        nested = msgpack.ExtType(_FROZENSET, _pack([nested]))
    _plant(store, nested)
    result = subprocess.run(
        [sys.executable, "-c", _READ_IN_A_FRESH_PROCESS, str(store.root)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"reader died with {result.returncode}: {result.stderr[-2000:]}"
    lines = result.stdout.splitlines()
    assert lines[0].startswith("IntegrityError") and "nested more than 64" in lines[0]
    assert lines[2] == "read False"


def test_sets_count_toward_the_nesting_limit_on_write(store: litstore.Store) -> None:
    value: Any = frozenset()
    for _ in range(62):
        value = frozenset({value})
    store.append([{"id": "deepest", "v": value}])  # 64 containers with the record itself
    assert litstore.open(store.root)["deepest"]["v"] == value
    _rejected(store, [{"id": "deeper", "v": frozenset({value})}], litstore.SchemaError, "nested more than 64")
