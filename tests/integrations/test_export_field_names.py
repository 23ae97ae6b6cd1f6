"""Exports keep every field, whatever the type of its name: ``{1: "a", "1": "b", None: "c"}`` is three columns.

A store keeps field names of type int, float, bool, bytes and ``None`` as they are. Arrow,
pandas and polars columns are named by strings, so such a field gets the column
``<int 1>`` (``<None>``, ...), suffixed where a str field already has that name, and the
schema metadata says which field each renamed column stands for. The command line's
Parquet and JSONL exports bring the fields back under their own names on import.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import litstore
from litstore import export
from litstore.cli import app
from litstore.errors import InvalidArgumentError

RECORDS: list[dict[Any, Any]] = [
    {"id": "a", 1: "int one", "1": "str one", None: "none", b"k": 7, 2.5: True, False: [1]},
    {"id": "b", 1: "int again", "other": 3},
]


def _by_id(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in table.to_pylist()}


def test_to_arrow_gives_each_field_a_column_and_records_which(store: litstore.Store) -> None:
    store.append(RECORDS)
    table = store.to_arrow()
    assert table.column_names == [
        "id",
        "1",
        "<None>",
        "<bool False>",
        "<bytes b'k'>",
        "<float 2.5>",
        "<int 1>",
        "other",
    ]
    rows = _by_id(table)
    assert rows["a"]["<int 1>"] == "int one" and rows["a"]["1"] == "str one" and rows["a"]["<None>"] == "none"
    assert rows["a"]["<bytes b'k'>"] == 7 and rows["a"]["<float 2.5>"] is True and rows["a"]["<bool False>"] == [1]
    assert rows["b"]["<int 1>"] == "int again" and rows["b"]["1"] is None
    assert export.field_names(table.schema) == {
        "<int 1>": 1,
        "<None>": None,
        "<bytes b'k'>": b"k",
        "<float 2.5>": 2.5,
        "<bool False>": False,
    }
    assert type(export.field_names(table.schema)["<bool False>"]) is bool


def test_pandas_and_polars_keep_the_fields_too(store: litstore.Store) -> None:
    store.append(RECORDS)
    frame = store.to_pandas().set_index("id")
    assert frame.loc["a", "<int 1>"] == "int one" and frame.loc["a", "1"] == "str one"
    assert frame.loc["a", "<None>"] == "none" and frame.loc["b", "<int 1>"] == "int again"
    polars_frame = store.to_polars()
    assert polars_frame.columns == store.to_arrow().column_names
    rows = {row["id"]: row for row in polars_frame.to_dicts()}
    assert rows["a"]["<int 1>"] == "int one" and rows["a"]["1"] == "str one" and rows["a"]["<None>"] == "none"


def test_a_str_field_with_the_same_text_pushes_the_other_to_a_suffix(store: litstore.Store) -> None:
    store.append([{"id": "a", 1: "int", "<int 1>": "str"}])
    table = store.to_arrow()
    assert table.column_names == ["id", "<int 1>", "<int 1> #2"]
    assert _by_id(table)["a"] == {"id": "a", "<int 1>": "str", "<int 1> #2": "int"}
    assert export.field_names(table.schema) == {"<int 1> #2": 1}


def test_batches_that_would_name_a_column_differently_are_named_once(
    store: litstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One batch holds only the int field 1 (column "<int 1>"), another only a str field of that text.
    store.append([{"id": "a", 1: "int"}, {"id": "b", "<int 1>": "str"}, {"id": "c", None: "none"}])
    monkeypatch.setattr(export, "DEFAULT_BATCH_SIZE", 1)  # to_arrow converts one record a batch
    table = store.to_arrow()
    rows = _by_id(table)
    assert export.field_names(table.schema) == {"<int 1> #2": 1, "<None>": None}
    assert rows["a"]["<int 1> #2"] == "int" and rows["a"]["<int 1>"] is None
    assert rows["b"]["<int 1>"] == "str" and rows["b"]["<int 1> #2"] is None
    assert rows["c"]["<None>"] == "none"


def test_iter_batches_says_in_each_batch_which_field_a_column_is(store: litstore.Store) -> None:
    store.append(RECORDS)
    for batch in store.head().iter_batches(1):
        names = export.field_names(batch.schema)
        assert names.get("<int 1>", 1) == 1 and set(names) <= set(batch.schema.names)


def test_field_names_refuses_metadata_it_did_not_write() -> None:
    def schema(value: bytes) -> pa.Schema:
        return pa.schema([pa.field("<int 1>", pa.int64())], metadata={export.FIELD_NAMES_METADATA: value})

    assert export.field_names(schema(json.dumps({"<int 1>": ["int", "1"]}).encode())) == {"<int 1>": 1}
    assert math.isnan(export.field_names(schema(json.dumps({"<int 1>": ["float", "nan"]}).encode()))["<int 1>"])
    for bad in (b"not json", b'{"<int 1>": ["int", "x"]}', b'{"<int 1>": ["tuple", "()"]}', b'{"zz": ["int", "1"]}'):
        with pytest.raises(InvalidArgumentError, match=r"litstore\.field_names"):
            export.field_names(schema(bad))
    with pytest.raises(InvalidArgumentError):
        export.field_names(schema(b'{"<int 1>": ["bytes", "b\'\\\\x\'"]}'))


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_cli_export_and_import_bring_back_every_field(store: litstore.Store, tmp_path: Path, suffix: str) -> None:
    store.append(RECORDS)
    out = tmp_path / f"out.{suffix}"
    runner = CliRunner()
    exported = runner.invoke(app, ["export", store.root, str(out), "--no-progress"])
    assert exported.exit_code == 0, exported.output
    if suffix == "parquet":
        assert export.field_names(pq.read_schema(out))["<None>"] is None
    copy = litstore.Store.create(tmp_path / "copy")
    imported = runner.invoke(app, ["import", copy.root, str(out), "--no-progress"])
    assert imported.exit_code == 0, imported.output
    copied = dict(litstore.open(copy.root).items())
    if suffix == "parquet":  # a Parquet row has every column: a field a record lacked comes back null
        copied = {
            key: {name: value for name, value in record.items() if value is not None} for key, record in copied.items()
        }
    assert copied == dict(store.items())
