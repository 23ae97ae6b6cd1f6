"""The key scan agrees with decoding: every record it reads decodes, to a map holding the key it found."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.format import codec, recordscan

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=300),
)
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3), st.tuples(st.integers()))
_RECORDS = st.dictionaries(st.sampled_from(["id", "a", "zz", "label", "payload", "é"]), _VALUES, max_size=6)


def _decoded_key(payload: bytes, key_type: str) -> Any:
    """The key decoding finds, strings read without checking that they are UTF-8 (the scan does not check
    them: see its module docstring); text keys as their bytes."""
    try:
        record = msgpack.unpackb(payload, raw=False, unicode_errors="surrogateescape", strict_map_key=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise AssertionError(f"the scan read {payload!r}, which does not decode: {exc!r}") from exc
    assert isinstance(record, dict), payload
    key = record.get("id")
    if key_type == "str":
        return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else None
    return key if type(key) is int and -(2**63) <= key < 2**63 else None


def _scanned(payloads: list[bytes], key_type: str) -> tuple[recordscan.ScannedKeys, np.ndarray]:
    buffer = np.frombuffer(b"".join(payloads) or b"\0", np.uint8)
    lengths = np.array([len(payload) for payload in payloads], np.int64)
    ends = np.cumsum(lengths)
    return recordscan.scan_keys(buffer, ends - lengths, ends, "id", key_type), buffer


def _check(payloads: list[bytes]) -> None:
    for key_type in ("str", "int"):
        scan, buffer = _scanned(payloads, key_type)
        for row, payload in enumerate(payloads):
            if not scan.scanned[row]:
                continue
            expected = _decoded_key(payload, key_type)
            if not scan.valid[row]:
                assert expected is None, (payload, expected)
            elif key_type == "str":
                start, length = int(scan.starts[row]), int(scan.lengths[row])
                assert bytes(buffer[start : start + length]) == expected, payload
            else:
                assert int(scan.values[row]) == expected, payload


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORDS, max_size=8))
def test_scan_agrees_with_decoding(records: list[dict[str, Any]]) -> None:
    payloads = [codec.encode(record) for record in records]
    _check(payloads)
    scan, _ = _scanned(payloads, "str")
    flat = [all(not isinstance(value, (list, tuple)) for value in record.values()) for record in records]
    assert scan.scanned.tolist() == flat  # every flat record is read, every other one left to the decoder


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORDS, min_size=1, max_size=4), st.data())
def test_scan_agrees_with_decoding_on_damaged_bytes(records: list[dict[str, Any]], data: st.DataObject) -> None:
    payloads = [bytearray(codec.encode(record)) for record in records]
    for payload in payloads:
        action = data.draw(st.sampled_from(["flip", "cut", "grow", "keep"]))
        if action == "flip" and payload:
            at = data.draw(st.integers(0, len(payload) - 1))
            payload[at] = data.draw(st.integers(0, 255))
        elif action == "cut" and payload:
            del payload[data.draw(st.integers(0, len(payload) - 1)) :]
        elif action == "grow":
            payload.extend(data.draw(st.binary(min_size=1, max_size=4)))
    _check([bytes(payload) for payload in payloads])


def test_unusual_maps() -> None:
    pack = msgpack.packb
    payloads = [
        pack({"id": "first", "x": 1}) + b"",
        b"\x82\xa2id\xa1a\xa2id\xa1b",  # the key field twice: the decoder's last one wins, so the scan leaves it
        b"\xde\x00\x01\xa2id\xa3abc",  # map16 header
        b"\x81\xd9\x02id\xa1k",  # the field name as str8: still the key field
        b"\x81\xa2id\xd9\x03xyz",  # the key as str8
        b"\x80",  # no fields
        b"\x92\x01\x02",  # not a map
        b"",  # empty
        b"\x81\xa2id\xc1",  # a byte MessagePack never uses
        b"\x81\xa2id\xa5ab",  # the key runs past the record
    ]
    _check(payloads)
    scan, _ = _scanned(payloads, "str")
    assert scan.scanned.tolist() == [True, False, True, True, True, True, False, False, False, False]
    assert scan.valid.tolist() == [True, False, True, True, True, False, False, False, False, False]


def _general(payloads: list[bytes], key_type: str) -> recordscan.ScannedKeys:
    """The general scan alone, record by record (what the shortcut by shape must agree with)."""
    buffer = np.frombuffer(b"".join(payloads) or b"\0", np.uint8)
    lengths = np.array([len(payload) for payload in payloads], np.int64)
    ends = np.cumsum(lengths)
    name = np.frombuffer(b"id", np.uint8)
    return recordscan._scanned(buffer, ends - lengths, ends, name, key_type)


def _damaged(payloads: list[bytes], data: st.DataObject) -> list[bytes]:
    """Some of ``payloads`` with a byte changed (their lengths kept, so they still lie at one stride)."""
    out = []
    for payload in payloads:
        changed = bytearray(payload)
        if changed and data.draw(st.integers(0, 9)) == 0:
            changed[data.draw(st.integers(0, len(changed) - 1))] = data.draw(st.integers(0, 255))
        out.append(bytes(changed))
    return out


def _agrees(payloads: list[bytes]) -> None:
    _check(payloads)
    for key_type in ("str", "int"):
        fast, _ = _scanned(payloads, key_type)
        slow = _general(payloads, key_type)
        for name in ("scanned", "valid", "starts", "lengths", "values"):
            assert getattr(fast, name).tolist() == getattr(slow, name).tolist(), (key_type, name)


_ONE_SHAPE = st.fixed_dictionaries(
    {
        "id": st.one_of(st.text("abc", min_size=4, max_size=4), st.integers(0, 127)),
        "label": st.one_of(st.integers(-32, 127), st.none(), st.booleans()),
        "payload": st.binary(min_size=8, max_size=8),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_ONE_SHAPE, min_size=64, max_size=200), st.data())
def test_scan_by_shape_agrees_with_the_general_scan(records: list[dict[str, Any]], data: st.DataObject) -> None:
    """Records of one length (read at one stride) and of a few shapes, some damaged: the shortcut finds exactly
    what the general scan finds."""
    _agrees(_damaged([codec.encode(record) for record in records], data))


@settings(max_examples=60, deadline=None)
@given(st.lists(_RECORDS, min_size=64, max_size=120), st.data())
def test_scan_by_shape_agrees_on_records_of_many_shapes(records: list[dict[str, Any]], data: st.DataObject) -> None:
    first = data.draw(_ONE_SHAPE)
    payloads = [codec.encode(first)] * data.draw(st.integers(1, 64)) + [codec.encode(record) for record in records]
    _agrees(_damaged(payloads, data))


def test_scan_by_shape_of_int_keys_past_int64() -> None:
    """A uint64 key past int64's range has the shape of one inside it; it is no key, as the general scan says."""
    payloads = [msgpack.packb({"id": 2**63 + i, "x": 1}) for i in range(70)]
    payloads[5] = msgpack.packb({"id": 2**63 - 1, "x": 1})
    payloads[0] = msgpack.packb({"id": 7, "x": 1})  # another shape first
    _agrees(payloads)
    _agrees(payloads[::-1])
