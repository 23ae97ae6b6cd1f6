"""``store.diff(a, b, fields=True)``: which top-level fields of each changed record differ, local and in memory."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import litstore
from tests.conftest import reopen


def _record(key: str, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "id": key,
        "label": 1,
        "caption": "a cat",
        "blob": b"\x00\x01",
        "image": np.arange(6, dtype=np.uint8).reshape(2, 3),
        "embedding": torch.zeros(4, dtype=torch.float32),
        "meta": {"source": "web", "score": 0.5},
    }
    record.update(changes)
    return {name: value for name, value in record.items() if value is not _DROP}


_DROP = object()

#: key -> (the changes made to it in version 2, the fields diff must name).
CHANGES: dict[str, tuple[dict[str, object], list[str]]] = {
    "label": ({"label": 2}, ["label"]),
    "label-type": ({"label": 1.0}, ["label"]),  # 1 and 1.0 are different content
    "caption": ({"caption": "a cat "}, ["caption"]),
    "blob": ({"blob": b"\x00\x02"}, ["blob"]),
    "pixels": ({"image": np.arange(1, 7, dtype=np.uint8).reshape(2, 3)}, ["image"]),
    "dtype": ({"image": np.arange(6, dtype=np.uint8).reshape(2, 3).view(np.int8)}, ["image"]),  # same bytes
    "shape": ({"image": np.arange(6, dtype=np.uint8).reshape(3, 2)}, ["image"]),  # same bytes
    "tensor": ({"embedding": torch.zeros(4, dtype=torch.float64)}, ["embedding"]),
    "nested": ({"meta": {"source": "web", "score": 0.75}}, ["meta"]),
    "two": ({"label": 3, "caption": "a dog"}, ["caption", "label"]),
    "added-field": ({"extra": None}, ["extra"]),
    "removed-field": ({"blob": _DROP}, ["blob"]),
}


@pytest.fixture
def store(make_any_store: Callable[..., litstore.Store]) -> litstore.Store:
    """v1: every key of CHANGES plus "same"; v2: CHANGES applied, "same" rewritten as it was; v3: "gone" deleted."""
    store = make_any_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=512)
    store.append([_record(key) for key in [*CHANGES, "same", "gone"]])
    store.upsert([_record(key, **changes) for key, (changes, _) in CHANGES.items()] + [_record("same")])
    store.delete(["gone"])
    return store


def test_fields_names_exactly_the_fields_that_differ(store: litstore.Store) -> None:
    diff = store.diff(1, 2, fields=True)
    named = dict(zip(diff.changed.column("key").to_pylist(), diff.changed.column("fields").to_pylist(), strict=True))
    assert named == {key: fields for key, (_, fields) in CHANGES.items()}
    assert diff.changed.column_names == ["key", "split", "fields"]
    assert diff.field_counts == {"image": 3, "label": 3, "blob": 2, "caption": 2, "embedding": 1, "extra": 1, "meta": 1}
    assert list(diff.field_counts) == ["image", "label", "blob", "caption", "embedding", "extra", "meta"]  # most first
    assert "~12 changed (image: 3, label: 3, blob: 2, caption: 2, embedding: 1, extra: 1, meta: 1)" in diff.summary()


def test_fields_work_both_ways_and_across_several_versions(store: litstore.Store) -> None:
    forward, backward = store.diff(1, 3, fields=True), store.diff(3, 1, fields=True)
    assert forward.field_counts == backward.field_counts
    assert forward.removed.column("key").to_pylist() == ["gone"] == backward.added.column("key").to_pylist()
    assert store.diff(3, 3, fields=True).field_counts == {}
    assert "fields" in store.diff(3, 3, fields=True).changed.column_names
    assert store.diff(2, fields=True).field_counts == {}  # v2 -> head changed no record, only deleted one


def test_without_fields_no_record_is_read(store: litstore.Store) -> None:
    store.storage.delete_tree("fragments")  # with every chunk gone, a plain diff still works
    reopened = reopen(store)
    diff = reopened.diff(1, 3)
    assert diff.counts == {"added": 0, "removed": 1, "changed": 12}
    assert diff.changed.column_names == ["key", "split"]
    assert "(" not in diff.summary().splitlines()[0]
    with pytest.raises(litstore.InvalidArgumentError, match="fields=True"):
        diff.field_counts  # noqa: B018
    with pytest.raises(litstore.IntegrityError, match="missing from the store"):
        reopened.diff(1, 3, fields=True)  # fields=True does read the changed records


def test_fields_on_many_changed_records(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", key_type=int, chunk_bytes=4096)
    store.append([{"id": i, "label": 0, "value": i} for i in range(2500)])
    store.upsert([{"id": i, "label": 1 if i % 2 else 0, "value": i + (i % 2 == 0)} for i in range(2500)])
    diff = store.at(2).diff(1, fields=True)
    assert diff.field_counts == {"label": 1250, "value": 1250}
    fields = dict(zip(diff.changed.column("key").to_pylist(), diff.changed.column("fields").to_pylist(), strict=True))
    assert fields[7] == ["label"] and fields[8] == ["value"] and len(fields) == 2500
