"""``Store.update``: named top-level fields change, every other field keeps its stored bytes; a commit like upsert."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import litdata
import numpy as np
import pyarrow as pa
import pydantic
import pytest
from PIL import Image

import litstore
from litstore.format import codec
from tests.conftest import stored_state


def _png(shade: int) -> bytes:
    stream = io.BytesIO()
    Image.fromarray(np.full((6, 5, 3), shade, np.uint8)).save(stream, "PNG", compress_level=1)
    return stream.getvalue()


def _stored_fields(store: litstore.Store, key: Any) -> dict[Any, bytes]:
    """The stored bytes of each top-level field of ``key``'s record at the head (what ``update`` splices)."""
    reader = store.head().reader
    row = reader.rows_for_keys(pa.array([key])).to_pylist()[0]
    return codec.top_level_fields(bytes(reader.chunk_cache.payload(row["chunk"], row["row"])))


@pytest.fixture
def images(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id", fields={"label": int})
    store.append(
        [
            {"id": f"r{i}", "label": i % 3, "caption": f"c{i}", "image": litdata.Image(bytes=_png(i * 20))}
            for i in range(6)
        ]
    )
    return store


def test_update_changes_the_named_fields_and_no_other_stored_byte(images: litstore.Store) -> None:
    before = {key: _stored_fields(images, key) for key in ("r1", "r2", "r3")}
    version = images.update({"r1": {"label": 7}, "r2": {"caption": "new", "extra": [1, 2]}})
    assert (version.number, version.replaced, version.added) == (2, 2, 0)
    assert images["r1"]["label"] == 7 and images["r2"]["caption"] == "new" and images["r2"]["extra"] == [1, 2]
    after = {key: _stored_fields(images, key) for key in ("r1", "r2", "r3")}
    assert after["r3"] == before["r3"]
    assert {name: raw for name, raw in after["r1"].items() if name != "label"} == {
        name: raw for name, raw in before["r1"].items() if name != "label"
    }
    assert after["r2"]["image"] == before["r2"]["image"]  # the PNG's own bytes: never decoded and encoded again
    found = images.diff(1, fields=True)
    assert found.field_counts == {"label": 1, "caption": 1, "extra": 1}
    assert sorted(found.changed.column("key").to_pylist()) == ["r1", "r2"]
    assert images.select("label = 7") == ["r1"]  # the declared field's manifest column follows
    assert images.verify().ok


def test_update_where_sets_fields_of_the_selected_records(images: litstore.Store) -> None:
    version = images.update({"caption": "zero"}, where="label = 0")
    assert version.replaced == 2
    assert {key for key in images if images[key]["caption"] == "zero"} == {"r0", "r3"}
    assert images.diff(1, fields=True).field_counts == {"caption": 2}


def test_an_update_that_changes_nothing_commits_nothing(images: litstore.Store) -> None:
    state = stored_state(images)
    assert images.update({"r1": {"label": 1}}).number == 1
    assert images.update({"caption": "x"}, where="label = 99").number == 1
    assert stored_state(images) == state


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"nope": {"label": 1}}, litstore.KeyNotFoundError, "'nope'"),
        ({"r1": {"label": "one"}}, litstore.SchemaError, "declared field 'label'"),
        ({"r1": {"label": None}}, litstore.SchemaError, "label"),
        ({"r1": {"blob": object()}}, litstore.SchemaError, "blob"),
        ({"r1": {"id": "r9"}}, litstore.InvalidArgumentError, "key field 'id' cannot be updated"),
        ({"r1": 3}, litstore.InvalidArgumentError, "not a mapping"),
        (["r1"], litstore.InvalidArgumentError, r"update takes \{key"),
    ],
)
def test_bad_updates_are_refused_and_the_store_is_unchanged(
    images: litstore.Store, changes: Any, error: type[Exception], match: str
) -> None:
    state = stored_state(images)
    with pytest.raises(error, match=match):
        images.update(changes)
    assert stored_state(images) == state and images.version.number == 1


def test_an_update_may_not_move_a_record_to_another_split(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=litstore.FieldSplit(field="part", names=("a", "b")))
    store.append([{"id": "x", "part": "a"}])
    with pytest.raises(litstore.SplitError, match="would move it from split 'a' to 'b'"):
        store.update({"x": {"part": "b"}})
    assert store.update({"x": {"part": "a", "n": 1}}).replaced == 1


def test_a_racing_writer_that_changed_the_same_key_conflicts(images: litstore.Store) -> None:
    rival = litstore.open(images.root)
    rival.update({"r1": {"caption": "rival"}})
    with pytest.raises(litstore.ConflictError, match="'r1'"):
        images.update({"r1": {"label": 9}})
    assert litstore.open(images.root)["r1"]["caption"] == "rival"
    assert litstore.open(images.root)["r1"]["label"] == 1


def test_a_racing_writer_on_other_keys_is_rebased_over(images: litstore.Store) -> None:
    litstore.open(images.root).update({"r2": {"caption": "rival"}})
    assert images.update({"r1": {"label": 9}}).number == 3
    fresh = litstore.open(images.root)
    assert (fresh["r1"]["label"], fresh["r2"]["caption"]) == (9, "rival")


class _Pet(pydantic.BaseModel):
    id: str
    age: int


def test_a_schema_store_validates_the_updated_record(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", schema=_Pet)
    store.append([_Pet(id="a", age=1)])
    store.update({"a": {"age": "4"}})  # coerced by the model, as append would
    assert store["a"] == {"id": "a", "age": 4}
    with pytest.raises(litstore.SchemaError, match="no longer fits the schema"):
        store.update({"a": {"age": "old"}})


def test_delete_where_removes_the_selected_records(images: litstore.Store) -> None:
    version = images.delete(where="label = 2")
    assert version.removed == 2 and sorted(images) == ["r0", "r1", "r3", "r4"]
    with pytest.raises(litstore.InvalidArgumentError, match="one of the two"):
        images.delete(["r0"], where="label = 0")
    with pytest.raises(litstore.InvalidArgumentError, match=r"delete\(where='label = 0'\)"):
        images.delete("label = 0")  # type: ignore[arg-type]
    with pytest.raises(litstore.QueryError, match="add_fields"):
        images.delete(where="caption = 'c0'")
    assert images.version.number == 2
