"""audit finds leakage under every split kind (``fields=``), and near duplicates (``near=True``)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import litdata
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import litstore
from litstore.cli import app
from litstore.ops import audit_near

MakeStore = Callable[..., litstore.Store]

pytest.importorskip("datasketch", reason="audit(near=True) needs datasketch")


def _texts(count: int) -> list[str]:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(400)]
    return [" ".join(rng.choice(words, size=30)) for _ in range(count)]


def test_field_split_leakage_is_found_now_that_the_split_field_is_not_compared(make_store: MakeStore) -> None:
    store = make_store(key="id", splits="split")
    store.append(
        [
            {"id": "a", "split": "train", "text": "same words"},
            {"id": "b", "split": "test", "text": "same words"},
            {"id": "c", "split": "val", "text": "other words"},
            {"id": "d", "split": "train", "text": "other words", "source": "x"},
        ]
    )
    report = store.audit()
    assert report.cross_split_groups == ({"test": ("b",), "train": ("a",)},)
    assert report.duplicate_groups == (("a", "b"),)  # "d" differs in "source"
    by_text = store.audit(fields=["text"])
    assert by_text.fields == ("text",)
    assert by_text.cross_split_group_count == 2 and by_text.duplicate_record_count == 4
    assert not store.audit(fields=["source"]).duplicate_group_count  # only "d" has it


def test_hash_split_duplicates_are_found_and_fields_are_checked(store: litstore.Store) -> None:
    store.append([{"id": f"k{i}", "text": "twin" if i < 2 else f"t{i}", "n": i} for i in range(40)])
    assert store.audit().ok  # "n" differs
    report = store.audit(fields=["text"])
    assert report.duplicate_groups == (("k0", "k1"),)
    for bad in ("text", [], [1]):
        with pytest.raises(litstore.InvalidArgumentError, match="fields"):
            store.audit(fields=bad)
    with pytest.raises(litstore.InvalidArgumentError, match=r"no record .* has any of the fields"):
        store.audit(fields=["nowhere"])


def test_near_texts_above_the_threshold_are_grouped_and_below_are_not(make_store: MakeStore) -> None:
    store = make_store(key="id", splits="split")
    base = _texts(30)
    words = base[0].split()
    close = " ".join([*words[:-1], "changed"])  # one word of 30 replaced: Jaccard of 5-grams ~0.9
    far = " ".join(words[:15] + base[1].split()[15:])  # half replaced: ~0.3
    records = [{"id": f"r{i}", "split": "train", "text": text} for i, text in enumerate(base)]
    records += [{"id": "close", "split": "test", "text": close}, {"id": "far", "split": "test", "text": far}]
    store.append(records)
    assert store.audit().ok  # no exact duplicates
    report = store.audit(near=True, threshold=0.8)
    assert not report.ok and report.near_group_count == 1 and report.near_cross_split_group_count == 1
    (group,) = report.near_groups
    assert group.keys == ("close", "r0") and group.splits == {"test": ("close",), "train": ("r0",)}
    assert 0.8 <= group.scores["text"] < 1
    assert "near (text" in report.summary()
    assert store.audit(near=True, threshold=0.99).near_group_count == 0
    lowered = store.audit(near=True, threshold=0.2)
    assert any(set(g.keys) >= {"far", "r0"} for g in lowered.near_groups)


def _png(pixels: np.ndarray, quality: int | None = None) -> bytes:
    out = io.BytesIO()
    if quality is None:
        Image.fromarray(pixels).save(out, format="PNG")
    else:
        Image.fromarray(pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def test_near_images_by_difference_hash(make_store: MakeStore) -> None:
    rng = np.random.default_rng(3)
    pictures = [rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8) for _ in range(12)]
    gradient = np.tile(np.linspace(0, 255, 64, dtype=np.uint8), (64, 1))
    smooth = np.stack([gradient, gradient.T, gradient], axis=-1)
    store = make_store(key="id", splits="split")
    records = [{"id": f"p{i}", "split": "train", "image": litdata.Image(bytes=_png(p))} for i, p in enumerate(pictures)]
    records.append({"id": "smooth", "split": "train", "image": litdata.Image(bytes=_png(smooth))})
    records.append({"id": "recompressed", "split": "val", "image": litdata.Image(bytes=_png(smooth, quality=60))})
    store.append(records)
    assert store.audit().ok  # the bytes differ
    report = store.audit(near=True)
    assert [group.keys for group in report.near_groups] == [("recompressed", "smooth")]
    assert report.near_groups[0].scores["image"] <= 3
    assert store.audit(near=True, image_distance=0).near_group_count <= 1


def test_exact_duplicates_are_not_reported_again_as_near(store: litstore.Store) -> None:
    store.append([{"id": f"k{i}", "text": "the very same sentence, word for word"} for i in range(3)])
    report = store.audit(near=True)
    assert report.duplicate_group_count == 1 and report.near_group_count == 0


def test_cli_audit_json_has_fields_and_near_groups(make_store: MakeStore) -> None:
    store = make_store(key="id", splits="split")
    store.append([{"id": "a", "split": "train", "t": "x y z " * 10}, {"id": "b", "split": "test", "t": "x y z " * 10}])
    result = CliRunner().invoke(app, ["audit", store.root, "--json", "--near", "--field", "t"])
    assert result.exit_code == 1, result.output
    found = json.loads(result.output)
    assert found["fields"] == ["t"] and found["near"] is True and found["cross_split_group_count"] == 1
    assert found["near_group_count"] == 0 and found["near_groups"] == []


def test_banding_puts_its_midpoint_at_or_below_the_threshold() -> None:
    for threshold in (0.3, 0.5, 0.8, 0.95):
        bands, rows = audit_near.bands_for(threshold, audit_near.PERMUTATIONS)
        assert bands * rows <= audit_near.PERMUTATIONS and (1 / bands) ** (1 / rows) <= threshold
