"""What a user sees at the prompt: short one-line reprs, and ``help()`` that starts with litstore's own API."""

from __future__ import annotations

import inspect
import pydoc
from collections.abc import Callable

import pytest

import litstore


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5))
    store.append([{"id": f"k{n}", "value": n} for n in range(20)])
    store.upsert([{"id": "k1", "value": -1}])
    return store


def _short(text: str) -> str:
    assert "\n" not in text and len(text) < 300, text
    return text


def test_reprs_are_one_short_line_that_says_what_it_is(store: litstore.Store) -> None:
    version = _short(repr(store.version))
    assert version.startswith("<Version 2 upsert ") and version.endswith("UTC: +0 ~1 -0, 20 records>")
    assert _short(repr(store.diff(1))) == "<Diff 1 -> 2: +0 added, -0 removed, ~1 changed>"
    assert _short(repr(store.verify())) == "<VerifyReport version 2: OK, 20 records checked>"
    assert _short(repr(store.gc(dry_run=True))).startswith("<GCReport gc would remove ")
    assert _short(repr(store.audit())).startswith("<AuditReport version 2: ")
    snapshot = _short(repr(store.at(1)))
    assert snapshot.startswith("<Snapshot ") and "version 1: 20 records" in snapshot
    assert _short(repr(store)).startswith("<Store ") and "at version 2: 20 records" in repr(store)


def test_a_dataset_says_which_version_and_split_it_streams(store: litstore.Store) -> None:
    train = store.dataset(split="train", shuffle=True)
    text = _short(repr(train))
    assert text.startswith(f"<VersionDataset {store.root} version 2, split 'train': {len(train)} records, shuffle=True")
    assert "streaming from " in text and "unchecked" not in text
    everything = repr(store.dataset(1, verify_records=False))
    assert "version 1, all splits: 20 records, shuffle=False, unchecked" in everything


@pytest.mark.parametrize(
    ("cls", "names"),
    [
        (litstore.Version, ["number", "fingerprint"]),
        (litstore.Store, ["append", "upsert", "delete"]),
        (litstore.Snapshot, ["get_many", "dataset"]),
        (litstore.Diff, ["added", "field_counts"]),
        (litstore.AuditReport, ["duplicate_groups", "cross_split_groups"]),
    ],
)
def test_help_starts_with_the_class_own_api(cls: type, names: list[str]) -> None:
    plain: pydoc.TextDoc = pydoc.plaintext  # type: ignore[attr-defined]  # pydoc's stub omits it
    head = "\n".join(pydoc.render_doc(cls, renderer=plain).splitlines()[:40])
    for name in names:
        assert name in head, (cls, name)


def test_every_public_class_has_a_docstring() -> None:
    for name in litstore.__all__:
        member = getattr(litstore, name)
        if inspect.isclass(member):
            assert member.__doc__ and member.__doc__.strip(), name


def test_reprs_are_short_and_say_what_matters(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([{"id": f"k{i:03d}", "value": i} for i in range(3)])
    store.delete(["k000"])
    for text, expected in (
        (repr(store), "at version 2: 2 records"),
        (repr(store.head()), "version 2: 2 records"),
        (repr(store.version), "<Version 2 delete"),
        (repr(store.diff(1, 2)), "<Diff 1 -> 2: +0 added, -1 removed, ~0 changed>"),
        (repr(store.verify()), "<VerifyReport version 2: OK, 2 records checked>"),
        (repr(store.gc(dry_run=True)), "<GCReport gc would remove 0 files"),
    ):
        assert expected in text and len(text) < 200, text
