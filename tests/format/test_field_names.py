"""Declared field names that SQL could confuse: a manifest column's name in another case, two fields alike.

DuckDB (``store.sql``, ``select``/``dataset(where=...)``) reads identifiers without regard
to case and renames a column whose name repeats another's in another case, so a field
``Split`` beside the manifest's ``split`` made ``where="Split <> 'holdout'"`` a condition on
the split column: held-out records streamed into training. Such names are refused when
declared (``InvalidArgumentError``, nothing written) and when a stranger's ``litstore.json``
or commit record declares them (``IntegrityError``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest

import litstore
from litstore import IntegrityError, InvalidArgumentError
from litstore.format import layout
from tests.conftest import tree_state

MakeStore = Callable[..., litstore.Store]


@pytest.fixture(autouse=True)
def views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put streaming views under this test's temporary directory."""
    directory = tmp_path / "views"
    monkeypatch.setenv("LITSTORE_VIEWS", str(directory))
    return directory


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"Split": str}, "'Split' differs from the manifest column 'split' only by case"),
        ({"KEY": int}, "'KEY' differs from the manifest column 'key' only by case"),
        ({"Row": int}, "'Row' differs from the manifest column 'row' only by case"),
        ({"Content_Hash": str}, "'Content_Hash' differs from the manifest column 'content_hash' only by case"),
        ({"Chunk": str}, "'Chunk' differs from the manifest column 'chunk' only by case"),
        ({"VERSION": int}, "'VERSION' differs from the manifest column 'version' only by case"),
        ({"Change": str}, "'Change' differs from the manifest column 'change' only by case"),
        ({"Key_Hash": int}, "'Key_Hash' differs from the manifest column 'key_hash' only by case"),
        ({"label": int, "LABEL": int}, "fields 'label' and 'LABEL' differ only by case"),
    ],
)
def test_a_field_sql_cannot_tell_from_another_column_is_refused_at_create(
    tmp_path: Path, fields: dict[str, type], detail: str
) -> None:
    root = tmp_path / "store"
    with pytest.raises(InvalidArgumentError) as caught:
        litstore.Store.create(root, key="id", fields=fields)
    assert detail in str(caught.value)
    assert "rename" in str(caught.value)
    assert not root.exists() or tree_state(root) == {}, "nothing may be written"


class _Labelled(pydantic.BaseModel):
    id: str
    label: int


def test_a_schema_field_and_a_declared_field_alike_but_for_case_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with pytest.raises(InvalidArgumentError, match="fields 'label' and 'Label' differ only by case"):
        litstore.Store.create(root, key="id", schema=_Labelled, fields={"Label": int})
    assert not root.exists() or tree_state(root) == {}


class _WithSplitField(pydantic.BaseModel):
    id: str
    Split: str
    weight: float


def test_a_schema_field_named_like_a_manifest_column_is_not_declared(make_store: MakeStore) -> None:
    store = make_store(key="id", schema=_WithSplitField)
    assert store.config.fields == {"weight": "float64"}
    store.append([_WithSplitField(id="a", Split="holdout", weight=1.0)])
    assert store.sql("SELECT * FROM manifest").column_names[-1] == "weight"


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"Label": int}, "fields ['Label'] are declared already, ignoring case (as {'label': 'int64'})"),
        ({"LABEL": int, "other": int}, "fields ['LABEL'] are declared already, ignoring case"),
        ({"Split": str}, "differs from the manifest column 'split' only by case"),
        ({"a": int, "A": int}, "fields 'a' and 'A' differ only by case"),
    ],
)
def test_add_fields_refuses_names_alike_but_for_case(
    make_store: MakeStore, fields: dict[str, type], detail: str
) -> None:
    store = make_store(key="id", fields={"label": int})
    store.append([{"id": "a", "label": 1, "Label": 2, "LABEL": 3, "other": 4, "Split": "x", "a": 5, "A": 6}])
    before, version = tree_state(Path(store.root)), store.version
    with pytest.raises(InvalidArgumentError) as caught:
        store.add_fields(fields)
    assert detail in str(caught.value)
    assert tree_state(Path(store.root)) == before, "nothing may be written"
    assert litstore.open(store.root).version == version


def _held_out_store(root: Path) -> set[str]:
    """A store whose litstore.json (written by a stranger) declares ``Split``; the keys it holds out.

    The store has one split, ``train``; each record's own field ``Split`` says whether it
    is held out, and the stranger's config declares that field so that ``where=`` can
    filter by it.
    """
    litstore.Store.create(root, key="id")
    config = json.loads((root / "litstore.json").read_text())
    config["fields"] = {"Split": "string"}
    (root / "litstore.json").write_text(json.dumps(config))
    return {f"k{i:02d}" for i in range(0, 20, 4)}


def test_a_stranger_config_declaring_split_in_another_case_is_refused_not_leaked(tmp_path: Path) -> None:
    root = tmp_path / "store"
    held_out = _held_out_store(root)
    try:
        store = litstore.open(root)
    except IntegrityError as exc:
        assert "litstore.json" in str(exc) and "'Split' differs from the manifest column 'split'" in str(exc)
        return
    # Without the check: the records go in, and training streams where the field says so.
    store.append([{"id": f"k{i:02d}", "Split": "holdout" if f"k{i:02d}" in held_out else "train"} for i in range(20)])
    streamed = {record["id"] for record in store.dataset(where="Split <> 'holdout'")}
    assert not streamed & held_out, f"held-out records streamed into training: {sorted(streamed & held_out)}"
    pytest.fail("a config declaring 'Split' beside the manifest's split column was accepted")


def test_a_stranger_commit_record_declaring_fields_alike_but_for_case_is_refused(make_store: MakeStore) -> None:
    store = make_store(key="id", fields={"label": int})
    store.append([{"id": "a", "label": 1, "LABEL": 2}])
    path = Path(store.root) / layout.version_record(store.version.number)
    record = json.loads(path.read_text())
    record["fields"] = {"label": "int64", "LABEL": "int64"}
    path.write_text(json.dumps(record))
    with pytest.raises(IntegrityError, match="fields 'label' and 'LABEL' differ only by case"):
        litstore.open(store.root)
