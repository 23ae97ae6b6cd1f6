"""The command line's JSON form: every record round-trips, its own markers included; JSONL reads as sources.jsonl.

``{"$base64": ...}`` stands for bytes and ``{"$map": [[key, value], ...]}`` for a dict JSON
cannot hold as an object (keys that are not str, or a lone key that is a marker's), so a
stored ``{"$base64": "aGk="}`` or ``{1: "a", "1": "b"}`` comes back as it was. Lines of a
JSONL file end where :func:`litstore.sources.jsonl` ends them: at ``\\n`` only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import litstore
from litstore import sources
from litstore.cli import app, display, interchange
from litstore.errors import InvalidArgumentError, LitstoreError
from tests.strategies import assert_records_equal

MARKER_NAMES = st.sampled_from(["$base64", "$map", "$base64 ", "$", "base64"])
TEXT = st.text(max_size=6)  # lone surrogates included: json_text escapes them
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
DICT_KEYS = st.one_of(
    MARKER_NAMES,
    TEXT,
    st.integers(-(2**63), 2**64 - 1),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=4),
)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), FLOATS, TEXT, st.binary(max_size=8), MARKER_NAMES)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(DICT_KEYS, children, max_size=3),
        st.dictionaries(MARKER_NAMES, children, min_size=1, max_size=1),  # an object that looks like a marker
        st.builds(lambda text: {"$base64": text}, st.sampled_from(["aGk=", "", "!!", "AA=="])),
    )


JSON_VALUES = st.recursive(LEAVES, _containers, max_leaves=12)


def _round_trip(value: Any) -> Any:
    return json.loads(display.json_text(interchange.to_json(value)), object_hook=interchange.json_object_hook)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_every_json_value_with_bytes_and_any_keys_round_trips(value: Any) -> None:
    assert_records_equal(_round_trip(value), value)


@pytest.mark.parametrize(
    "value",
    [
        {"$base64": "aGk="},
        {"$map": [[1, 2]]},
        {"$base64": b"raw"},
        {1: "a", "1": "b"},
        {None: 1, "None": 2, "null": 3},
        {b"k": [{"$map": {}}]},
        {math.inf: 1},
    ],
)
def test_values_that_look_like_markers_come_back_as_they_were(value: Any) -> None:
    assert_records_equal(_round_trip(value), value)
    assert "$map" in json.dumps(interchange.to_json(value))


def test_ordinary_records_keep_their_plain_json_form() -> None:
    record = {"id": "a", "blob": b"\x00\xff", "nested": {"a": 1, "$base64": "x"}, "list": [1, "2"]}
    assert interchange.to_json(record) == {
        "id": "a",
        "blob": {"$base64": "AP8="},
        "nested": {"a": 1, "$base64": "x"},
        "list": [1, "2"],
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"$base64": 5}', "base64 string"),
        ('{"$base64": "not base64!"}', "invalid base64"),
        ('{"$map": {"a": 1}}', "pairs"),
        ('{"$map": [[1, 2, 3]]}', "pairs"),
        ('{"$map": [[[1], 2]]}', "key cannot be"),
        ('{"$map": [[1, 2], [1, 3]]}', "twice"),
    ],
)
def test_a_marker_of_the_wrong_shape_is_refused(text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        json.loads(text, object_hook=interchange.json_object_hook)


def test_store_records_with_markers_round_trip_through_cli_export_and_import(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "store")
    records = [
        {"id": "a", "looks_like_bytes": {"$base64": "aGk="}, "looks_like_map": {"$map": [[1, 2]]}},
        {"id": "b", "blob": b"hi", "keys": {1: "int", "1": "str", None: "none"}, "text": "x\x7f\u202e\ud800"},
    ]
    store.append(records)
    out = tmp_path / "out.jsonl"
    runner = CliRunner()
    assert runner.invoke(app, ["export", store.root, str(out), "--no-progress"]).exit_code == 0
    copy = litstore.Store.create(tmp_path / "copy")
    result = runner.invoke(app, ["import", copy.root, str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    for record in records:
        assert_records_equal(litstore.open(copy.root)[record["id"]], store[record["id"]])


# -- JSONL lines: as sources.jsonl reads them ------------------------------------------------------------


def _outcome(read: Any) -> tuple[str, Any]:
    """The records a reader gives, or the line its error names."""
    try:
        return "records", list(read())
    except LitstoreError as exc:
        message = str(exc)
        return "error", message[message.index(" line ") :].split(":")[0]


def _both(path: Path) -> tuple[tuple[str, Any], tuple[str, Any]]:
    return (
        _outcome(lambda: interchange.read_records(path)),
        _outcome(lambda: sources.jsonl(path, image_fields=())),
    )


def test_a_lone_carriage_return_inside_a_line_is_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a",\r "v": 1}\n{"id": "b", "s": "x\xe2\x80\xa8y"}\r\n \x0c\n{"id": "c"}')
    cli, api = _both(path)
    assert cli == api == ("records", [{"id": "a", "v": 1}, {"id": "b", "s": "x\u2028y"}, {"id": "c"}])


def test_a_raw_carriage_return_inside_a_string_is_an_error_on_the_same_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b\rc"}\n')
    cli, api = _both(path)
    assert cli == api == ("error", " line 2")


LINE_PIECES = st.sampled_from(
    ['{"id": 1}', '{"id": "a b"}', '{"v": [1, 2]}', "{", "}", '"', "[1]", "1", " ", "\t", "\r", "\n", "\r\n", "\x0c",
     "\u2028", "\x85", "\x0b", "\ufeff", "é", "\x00"]
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LINE_PIECES, max_size=12), st.booleans())
def test_the_cli_and_sources_jsonl_split_and_read_lines_alike(tmp_path: Path, pieces: list[str], bad: bool) -> None:
    path = tmp_path / "in.jsonl"
    data = "".join(pieces).encode("utf-8", "surrogatepass") + (b"\n\xff\n" if bad else b"")
    path.write_bytes(data)
    cli, api = _both(path)
    assert cli == api
