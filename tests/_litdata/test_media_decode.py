"""litstore decodes images with PIL into exactly the tensor litdata's own serializer gives, without torchvision."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from litdata.streaming.serializers import _SERIALIZERS
from PIL import Image as PILImage

from litstore._litdata.media import decode_image, decode_media


def _pixels(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = np.linspace(0, 255, height * width * channels).reshape(height, width, channels)
    noise = rng.integers(0, 64, (height, width, channels))
    return ((smooth + noise) % 256).astype(np.uint8)


def _encoded(image: PILImage.Image, kind: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=kind, **options)
    return buffer.getvalue()


def _cases() -> list[tuple[str, bytes]]:
    rgb = PILImage.fromarray(_pixels(17, 23, 3, 1))
    rgba = PILImage.fromarray(_pixels(9, 14, 4, 2), mode="RGBA")
    gray = PILImage.fromarray(_pixels(12, 7, 1, 3)[:, :, 0], mode="L")
    cases = [
        ("png rgb", _encoded(rgb, "PNG")),
        ("png rgba", _encoded(rgba, "PNG")),
        ("png gray", _encoded(gray, "PNG")),
        ("png gray+alpha", _encoded(rgba.convert("LA"), "PNG")),
        ("png palette", _encoded(rgb.convert("P", palette=PILImage.Palette.ADAPTIVE, colors=40), "PNG")),
        ("png 1-bit", _encoded(gray.convert("1"), "PNG")),
        ("png interlaced", _encoded(rgb, "PNG", interlace=1)),
        (
            "png 16-bit gray",
            _encoded(PILImage.fromarray(_pixels(8, 8, 1, 4)[:, :, 0].astype(np.uint16) * 257), "PNG"),
        ),
        ("gif", _encoded(rgb.convert("P"), "GIF")),
        ("webp", _encoded(rgb, "WEBP", lossless=True)),
    ]
    for quality in (50, 95):
        for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            cases.append(
                (f"jpeg q{quality} s{subsampling}", _encoded(rgb, "JPEG", quality=quality, subsampling=subsampling))
            )
    cases.append(("jpeg gray", _encoded(gray, "JPEG", quality=80)))
    cases.append(("jpeg progressive", _encoded(rgb, "JPEG", quality=85, progressive=True)))
    cases.append(("jpeg cmyk", _encoded(rgb.convert("CMYK"), "JPEG", quality=90)))
    cases.append(("jpeg odd size", _encoded(PILImage.fromarray(_pixels(31, 45, 3, 5)), "JPEG", quality=75)))
    return cases


@pytest.mark.parametrize(("name", "data"), _cases(), ids=[name for name, _ in _cases()])
def test_decode_equals_litdata_serializer(name: str, data: bytes) -> None:
    expected = _SERIALIZERS["image"].deserialize(data)
    decoded = decode_image(data)
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    assert torch.equal(decoded, expected), name
    assert torch.equal(decode_media("jpeg" if name.startswith("jpeg") else "image:png", data), expected)


@pytest.mark.integration
def test_image_read_imports_no_torchvision(tmp_path: object) -> None:
    """A store[key] that returns a PNG or a JPEG image decodes it without importing torchvision."""
    script = f"""
import io, sys
import litdata, numpy as np
from PIL import Image
import litstore
pixels = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
records = []
for key, kind in (("png", "PNG"), ("jpeg", "JPEG")):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind)
    records.append({{"id": key, "image": litdata.Image(bytes=buffer.getvalue())}})
store = litstore.Store.create({str(tmp_path)!r} + "/s", key="id")
store.append(records)
assert "torchvision" not in sys.modules
for key in ("png", "jpeg"):
    assert litstore.open(store.root)[key]["image"].shape == (3, 8, 8)
print("torchvision" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
