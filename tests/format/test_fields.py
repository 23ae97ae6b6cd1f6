"""Declared fields: typed manifest columns checked on every write, queried with sql, added as a version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

import pydantic
import pytest

import litstore
from litstore import InvalidArgumentError, SchemaError
from tests.conftest import tree_state

MakeStore = Callable[..., litstore.Store]


def _records(count: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"id": f"k{i:04d}", "label": i % 4, "source": "web" if i % 2 else "book", "score": i / 10, "text": "x" * 40}
        for i in range(start, start + count)
    ]


@pytest.fixture
def store(make_store: MakeStore) -> litstore.Store:
    score = Optional[float]  # noqa: UP045  (typing.Optional is one of the accepted spellings)
    made = make_store(key="id", fields={"label": int, "source": str, "score": score}, chunk_bytes=2048)
    made.append(_records(40))
    return made


def test_declared_fields_are_typed_manifest_columns(store: litstore.Store) -> None:
    assert store.config.fields == {"label": "int64", "source": "string", "score": "float64?"}
    manifest = store.manifest()
    assert manifest.column_names[6:] == ["label", "source", "score"]
    assert str(manifest.schema.field("label").type) == "int64"
    counts = store.sql("SELECT label, count(*) AS n FROM manifest GROUP BY label ORDER BY label")
    assert counts.to_pydict() == {"label": [0, 1, 2, 3], "n": [10, 10, 10, 10]}
    web = store.sql("SELECT key FROM manifest WHERE source = 'web' AND score > 3 ORDER BY key")
    assert web.column("key").to_pylist() == [f"k{i:04d}" for i in range(31, 40, 2)]


@pytest.mark.parametrize(
    ("bad", "detail"),
    [
        ({"label": True}, "declared field 'label': expected int64, got bool True"),  # bool is not an int
        ({"label": "3"}, "declared field 'label': expected int64, got str '3'"),
        ({"label": None}, "declared field 'label': None, but the field is not Optional"),
        ({"source": 5}, "declared field 'source': expected string, got int 5"),
        ({"score": "high"}, "declared field 'score': expected float64, got str 'high'"),
        ({"label": 2**70}, "declared field 'label': 1180591620717411303424 is outside the int64 range"),
    ],
)
@pytest.mark.parametrize("write", ["append", "upsert"])
def test_a_wrong_field_value_rejects_the_batch_naming_record_and_field(
    store: litstore.Store, bad: dict[str, object], detail: str, write: str
) -> None:
    before, version = tree_state(Path(store.root)), store.version
    records = _records(3, start=100)
    records[1].update(bad)
    with pytest.raises(SchemaError) as caught:
        getattr(store, write)(records)
    assert f"position 1 (key 'k0101'): {detail}" in str(caught.value)
    assert caught.value.culprits == [(1, "k0101")]
    assert tree_state(Path(store.root)) == before
    assert litstore.open(store.root).version == version


def test_a_missing_field_is_null_only_when_optional(store: litstore.Store) -> None:
    records = _records(2, start=200)
    del records[0]["score"]
    store.append(records)
    scores = store.sql("SELECT key, score FROM manifest WHERE key >= 'k0200' ORDER BY key").to_pydict()
    assert scores == {"key": ["k0200", "k0201"], "score": [None, 20.1]}
    missing = _records(1, start=300)
    del missing[0]["label"]
    with pytest.raises(SchemaError, match="declared field 'label': missing, and the field is not Optional"):
        store.append(missing)


def test_an_int_is_a_valid_float(store: litstore.Store) -> None:
    record = _records(1, start=400)[0] | {"score": 7}
    store.append([record])
    assert store.sql("SELECT score FROM manifest WHERE key = 'k0400'").column(0).to_pylist() == [7.0]


def test_fields_flow_through_upsert_delete_and_copy_on_write(store: litstore.Store) -> None:
    store.upsert([_records(1, start=3)[0] | {"label": 99}])
    store.delete(["k0005", "k0006"])  # copy-on-write moves the other rows of their chunks
    store.compact(target_chunk_bytes=1 << 20)
    reopened = litstore.open(store.root)
    labels = dict(zip(*reopened.sql("SELECT key, label FROM manifest").to_pydict().values(), strict=True))
    expected = {f"k{i:04d}": i % 4 for i in range(40) if i not in (5, 6)} | {"k0003": 99}
    assert labels == expected
    assert reopened.verify().ok


def test_add_fields_commits_a_version_with_the_new_column(store: litstore.Store) -> None:
    old = store.version
    chunks = store.chunks()
    new = store.add_fields({"text": str}, message="text as a column")
    assert new.number == old.number + 1 and new.operation == "add_fields"
    assert new.fingerprint == old.fingerprint and new.counts == old.counts
    assert new.fields == {"label": "int64", "source": "string", "score": "float64?", "text": "string"}
    reopened = litstore.open(store.root)
    assert reopened.chunks() == chunks, "records and chunks are unchanged"
    assert reopened.diff(old.number).counts == {"added": 0, "removed": 0, "changed": 0}
    assert reopened.sql("SELECT count(*) FROM manifest WHERE text = 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'")[
        0
    ].to_pylist() == [40]
    assert "text" not in reopened.sql("SELECT * FROM manifest LIMIT 1", version=old.number).column_names
    with pytest.raises(litstore.QueryError):
        reopened.sql("SELECT text FROM manifest", version=old.number)
    assert reopened.verify().ok and reopened.verify(old.number).ok
    # Later writes must carry the new field.
    with pytest.raises(SchemaError, match="declared field 'text'"):
        reopened.append([{k: v for k, v in _records(1, start=500)[0].items() if k != "text"}])
    reopened.append(_records(1, start=500))
    assert reopened.version.fields == new.fields
    assert reopened.sql("SELECT text FROM manifest WHERE key = 'k0500'").num_rows == 1


def test_add_fields_refuses_records_without_a_valid_value(store: litstore.Store) -> None:
    before = tree_state(Path(store.root))
    with pytest.raises(SchemaError) as caught:
        store.add_fields({"missing": int})
    assert "declared field 'missing': missing, and the field is not Optional" in str(caught.value)
    assert len(caught.value.culprits) == 40
    with pytest.raises(InvalidArgumentError, match="declared already"):
        store.add_fields({"label": int})
    assert tree_state(Path(store.root)) == before
    store.add_fields({"missing": int | None})
    assert store.sql("SELECT count(missing) FROM manifest")[0].to_pylist() == [0]


@pytest.mark.parametrize(
    "fields",
    [{"key": int}, {"id": str}, {"label": list}, {"1label": int}, {"label": "int32"}, {"label": int | str}],
)
def test_undeclarable_fields_are_refused(make_store: MakeStore, fields: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        make_store(key="id", fields=fields)


class Sample(pydantic.BaseModel):
    id: int
    label: int
    weight: float | None = None
    tags: list[str] = []
    caption: str


def test_schema_scalar_fields_are_declared(make_store: MakeStore) -> None:
    store = make_store(key="id", schema=Sample)
    assert store.config.fields == {"label": "int64", "weight": "float64?", "caption": "string"}
    store.append([Sample(id=i, label=i % 2, caption=f"c{i}") for i in range(6)])
    assert store.sql("SELECT count(*) AS n, count(weight) AS w FROM manifest WHERE label = 1").to_pylist() == [
        {"n": 3, "w": 0}
    ]


def test_old_stores_without_fields_keep_working(make_store: MakeStore) -> None:
    store = make_store(key="id")
    store.append([{"id": "a", "v": 1}])
    assert store.manifest().column_names == ["key", "key_hash", "content_hash", "split", "chunk", "row"]
    assert store.version.fields is None and store.head().fields == {}


def test_python_s_type_names_declare_fields_as_the_cli_does(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", fields={"label": "int", "score": "float?", "note": "str"})
    assert store.config.fields == {"label": "int64", "score": "float64?", "note": "string"}
    with pytest.raises(litstore.InvalidArgumentError, match=r"'int32' is not one of .*'int'"):
        litstore.Store.create(tmp_path / "t", key="id", fields={"label": "int32"})
