"""litdata media values inside records: stored with litdata's serializer, read back as litdata decodes them."""

from __future__ import annotations

import io
from collections.abc import Callable

import litdata
import numpy as np
import torch
from PIL import Image as PILImage

import litstore


def _png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(np.full((4, 6, 3), colour, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_comes_back_as_litdata_decodes_it(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    png = _png((10, 20, 30))
    store.append([{"id": "a", "image": litdata.Image(bytes=png), "label": 1}])

    image = litstore.open(store.root)["a"]["image"]
    assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
    assert tuple(image.shape) == (3, 4, 6)  # channels first, as litdata's reader gives it
    assert image[:, 0, 0].tolist() == [10, 20, 30]

    streamed = next(iter(store.dataset()))["image"]
    assert torch.equal(streamed, image)
    assert store.verify().ok


def test_image_content_hash_follows_the_pixels(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([{"id": "a", "image": litdata.Image(bytes=_png((1, 2, 3)))}])
    unchanged = store.upsert([{"id": "a", "image": litdata.Image(bytes=_png((1, 2, 3)))}])
    assert unchanged.number == 1  # same bytes: nothing to commit
    changed = store.upsert([{"id": "a", "image": litdata.Image(bytes=_png((9, 9, 9)))}])
    assert changed.number == 2 and changed.replaced == 1
    assert store.diff(1, 2).changed.column("key").to_pylist() == ["a"]
