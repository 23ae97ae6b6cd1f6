"""What you read is what you wrote: media read from a store and written back keep their stored bytes."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import litdata
import numpy as np
import pytest
import torch
from PIL import Image as PILImage

import litstore
from litstore.format import codec, hashing


def _pixels() -> np.ndarray:
    return (np.arange(12 * 10 * 3) % 251).astype(np.uint8).reshape(12, 10, 3)


def _file(kind: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(_pixels()).save(buffer, format=kind, **options)
    return buffer.getvalue()


#: One value of every media type litstore stores and decodes here (the decoders of
#: audio, video, meshes, PDF and NIfTI need packages this project does not install).
MEDIA: dict[str, Callable[[], Any]] = {
    "image png": lambda: litdata.Image(bytes=_file("PNG")),
    "image jpeg path": lambda: litdata.Image(bytes=_file("JPEG", quality=80), path="x.jpg"),
    "image from array": lambda: litdata.Image(array=_pixels()),
    "jpeg": lambda: litdata.Jpeg(array=_pixels()),
    "pil": lambda: litdata.Pil(array=_pixels()),
    "tiff": lambda: litdata.Tiff(array=_pixels()),
    "text": lambda: litdata.Text(text="héllo\nworld"),
    "file": lambda: litdata.File(bytes=b"\x00\x01binary", path="blob.bin"),
}


def _stored(store: litstore.Store, key: str) -> tuple[Any, int]:
    """The record of ``key`` with its media as stored (``Media``), and the manifest's content hash."""
    with litstore.encoded_media():
        record = store[key]
    manifest = store.at(store.version.number).manifest().to_pylist()
    (row,) = [row for row in manifest if row["key"] == key]
    return record, row["content_hash"]


@pytest.mark.parametrize("kind", list(MEDIA))
def test_read_relabel_upsert_keeps_the_stored_bytes(kind: str, make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([{"id": "a", "media": MEDIA[kind](), "label": 1}])
    before, _ = _stored(store, "a")
    assert isinstance(before["media"], litstore.Media)

    record = store["a"]
    unchanged = store.upsert([record])
    assert unchanged.number == 1  # nothing to commit: the same bytes, the same hash

    record["label"] = 2
    relabelled = store.upsert([record])
    assert relabelled.number == 2 and relabelled.replaced == 1
    after, content_hash = _stored(store, "a")
    assert after["media"] == before["media"]  # same format, same bytes
    assert content_hash == hashing.content_hash(codec.encode({"id": "a", "media": before["media"], "label": 2}))
    diff = store.diff(1, 2, fields=True)
    assert diff.changed.column("fields").to_pylist() == [["label"]]
    again = store["a"]["media"]
    fresh = before["media"].decode()
    assert type(again) is type(fresh)
    if isinstance(fresh, torch.Tensor):
        assert torch.equal(again, fresh)
    elif isinstance(fresh, np.ndarray):
        assert np.array_equal(again, fresh)
    elif isinstance(fresh, PILImage.Image):
        assert again.tobytes() == fresh.tobytes()
    else:
        assert again == fresh


def test_pixels_edited_in_place_are_stored_as_they_now_are(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append(
        [{"id": "a", "image": litdata.Image(bytes=_file("PNG"))}, {"id": "b", "tiff": litdata.Tiff(array=_pixels())}]
    )
    record = store["a"]
    record["image"][0, 0, 0] = 255 - int(record["image"][0, 0, 0])
    tiff = store["b"]
    tiff["tiff"][1, 1] = 0
    version = store.upsert([record, tiff])
    assert version.replaced == 2
    stored = {row["id"]: row for row in litstore.keeping_media(store.values())}
    assert isinstance(stored["a"]["image"], torch.Tensor)  # no longer the PNG: the edited pixels
    assert torch.equal(stored["a"]["image"], record["image"])
    assert isinstance(stored["b"]["tiff"], np.ndarray) and np.array_equal(stored["b"]["tiff"], tiff["tiff"])


def test_a_copy_is_stored_as_what_it_is(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([{"id": "a", "image": litdata.Image(bytes=_file("PNG"))}])
    record = store["a"]
    record["image"] = record["image"].clone()
    assert store.upsert([record]).replaced == 1
    assert isinstance(next(iter(litstore.keeping_media(store.values())))["image"], torch.Tensor)


def test_streaming_gives_values_that_write_back_as_their_bytes(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([{"id": str(index), "image": litdata.Image(bytes=_file("PNG")), "label": index} for index in range(4)])
    streamed = list(store.dataset())
    assert all(type(record["image"]) is torch.Tensor for record in streamed)
    for record in streamed:
        record["label"] += 10
    version = store.upsert(streamed)
    assert version.replaced == 4
    assert all(isinstance(r["image"], litstore.Media) for r in litstore.keeping_media(store.values()))


def test_media_value_is_written_as_its_bytes_and_checked(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    png = _file("PNG")
    store.append([{"id": "a", "image": litstore.Media("image:png", png)}])
    assert torch.equal(store["a"]["image"], litstore.Media("image:png", png).decode())
    with pytest.raises(litstore.SchemaError, match="never decoded"):
        store.append([{"id": "b", "x": litstore.Media("pickle", b"cos\nsystem\n")}])
    assert store.version.number == 1
    assert litstore.Media("image:png", png).describe() == f"<PNG 10x12, {len(png):,} bytes>"
    jpeg = _file("JPEG")
    assert litstore.Media("image:jpg", jpeg).describe() == f"<JPEG 10x12, {len(jpeg):,} bytes>"
