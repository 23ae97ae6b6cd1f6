"""Top-level fields of canonical bytes: :func:`codec.with_fields` gives what encoding the changed record gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.errors import IntegrityError, UnsupportedValueError
from litstore.format import codec
from tests.strategies import field_names, record_bodies, values


@settings(max_examples=150, deadline=None)
@given(record_bodies, st.dictionaries(field_names, values, max_size=3))
def test_with_fields_is_the_encoding_of_the_changed_record(body: dict[str, Any], changes: dict[str, Any]) -> None:
    record = {"id": "k", **body}
    stored = codec.encode(record)
    updated = codec.with_fields(stored, changes)
    assert updated == codec.encode({**record, **changes})
    before, after = codec.top_level_fields(stored), codec.top_level_fields(updated)
    assert {name: raw for name, raw in after.items() if name not in changes} == {
        name: raw for name, raw in before.items() if name not in changes
    }


def test_top_level_fields_are_each_fields_encoding() -> None:
    record = {"id": "k", "n": 2**70, "t": (1, [2.5]), "b": b"\x00"}
    fields = codec.top_level_fields(codec.encode(record))
    assert fields == {name: codec.encode_value(value, name) for name, value in record.items()}
    assert {name: codec.decode(raw) for name, raw in fields.items()} == record


@pytest.mark.parametrize(
    "data",
    [codec.encode([1, 2]), codec.encode({"a": 1})[:-1], codec.encode({"a": 1}) + b"\x01", b"\x82\xa1a\x01\xa1a\x02"],
    ids=["a list", "cut short", "two records", "a field twice"],
)
def test_bytes_that_are_not_one_record_are_refused(data: bytes) -> None:
    with pytest.raises(IntegrityError):
        codec.with_fields(data, {"a": 3})


def test_a_value_the_codec_cannot_store_is_refused_naming_its_field() -> None:
    with pytest.raises(UnsupportedValueError, match="label"):
        codec.with_fields(codec.encode({"id": "k"}), {"label": object()})
