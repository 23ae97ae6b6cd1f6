"""Train on a pinned version, keep adding data, and still reproduce the exact training set.

The flow a user starts from:

1. a folder of images and a JSONL manifest (one line per image: ``id``, ``image`` (a
   path relative to the manifest), ``label``, ``split``), as most labelling tools export them;
2. a litstore store built from that manifest with ``litstore.sources.jsonl`` (key = the
   image file name, split taken from the ``split`` field, ``label`` declared as an int
   field so the manifest can be queried by it);
3. a few training steps of a tiny torch model on a *pinned* version and a *subset* of it
   (only labels 0 and 1), streamed with ``litdata.StreamingDataLoader(store.dataset(
   version=v, split="train", where="label IN (0, 1)", shuffle=True))``;
4. a tag on the version the model was trained on;
5. more images appended (a new version), and the diff between the two versions;
6. proof that the tagged version still streams exactly the records it streamed before,
   both the whole split and the subset the model was trained on.

Run it with ``python examples/train_pinned.py [--root DIR]`` (default: a temporary
directory). ``DIR`` must be empty or not exist yet.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from litdata import StreamingDataLoader
from PIL import Image

import litstore
import litstore.sources

SIZE = 16  # images are SIZE x SIZE RGB
COLOURS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))  # label -> base colour
TAG = "trained-run-1"
SUBSET = "label IN (0, 1)"  # the model is trained on these two classes only


# -- 1. a folder of PNGs and a JSONL manifest -------------------------------------------


def write_images(folder: Path, manifest: Path, start: int, count: int, rng: np.random.Generator) -> None:
    """Write ``count`` PNGs numbered from ``start`` into ``folder`` and append their lines to ``manifest``."""
    folder.mkdir(parents=True, exist_ok=True)
    with manifest.open("a", encoding="utf-8") as lines:
        for number in range(start, start + count):
            label = int(rng.integers(0, len(COLOURS)))
            noise = rng.integers(-60, 61, size=(SIZE, SIZE, 3))
            pixels = np.clip(np.array(COLOURS[label]) + noise, 0, 255).astype(np.uint8)
            path = folder / f"img-{number:05d}.png"
            Image.fromarray(pixels).save(path, format="PNG")
            split = "val" if number % 5 == 0 else "train"
            image = path.relative_to(manifest.parent).as_posix()
            lines.write(json.dumps({"id": path.name, "image": image, "label": label, "split": split}) + "\n")


def read_manifest(manifest: Path, skip: int = 0) -> Iterator[dict[str, Any]]:
    """The manifest's records after the first ``skip`` lines, read lazily by ``litstore.sources.jsonl``.

    The ``image`` path (relative to the manifest) becomes ``litdata.Image(path=...)``:
    litstore keeps the PNG file's exact bytes (small chunks) and litdata's own image
    serializer decodes it while streaming, so each record comes out with a ``uint8``
    tensor of shape (3, H, W) that the default collate stacks into a batch.
    """
    return itertools.islice(litstore.sources.jsonl(manifest), skip, None)


# -- 3. training on a pinned version ----------------------------------------------------


def features(images: torch.Tensor) -> torch.Tensor:
    """A batch of uint8 (B, 3, H, W) images -> float (B, 3*H*W) in [0, 1]."""
    return images.float().div(255.0).flatten(1)


def train(store: litstore.Store, version: int, epochs: int, workers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(3 * SIZE * SIZE, len(COLOURS))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    dataset = store.dataset(version=version, split="train", where=SUBSET, shuffle=True, seed=42)
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=workers)
    step = 0
    for epoch in range(epochs):
        seen = 0
        for batch in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(features(batch["image"])), batch["label"])
            loss.backward()
            optimizer.step()
            step += 1
            seen += len(batch["id"])
        print(f"epoch {epoch + 1}: {seen} samples, {step} steps, last loss {loss.item():.4f}")
    return model


@torch.no_grad()
def accuracy(model: torch.nn.Module, store: litstore.Store, version: int | str, split: str) -> float:
    loader = StreamingDataLoader(store.dataset(version=version, split=split, where=SUBSET), batch_size=64)
    right = total = 0
    for batch in loader:
        right += int((model(features(batch["image"])).argmax(1) == batch["label"]).sum())
        total += len(batch["id"])
    return right / total


def stream_contents(
    store: litstore.Store, version: int | str, split: str, where: str | None = None
) -> dict[str, tuple[int, str]]:
    """Everything one epoch over ``version``/``split`` (``where`` it matches) yields: key -> (label, pixel hash)."""
    contents: dict[str, tuple[int, str]] = {}
    for record in store.dataset(version=version, split=split, where=where):
        assert record["id"] not in contents, f"{record['id']} streamed twice"
        pixels = record["image"].contiguous().numpy()
        contents[record["id"]] = (record["label"], hashlib.sha256(pixels.tobytes()).hexdigest())
    return contents


# -- the whole flow ---------------------------------------------------------------------


def main(root: Path, first: int, more: int, epochs: int, workers: int) -> None:
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    images, jsonl = root / "images", root / "images.jsonl"

    write_images(images, jsonl, 0, first, rng)
    store = litstore.Store.create(
        root / "store",
        key="id",
        splits=litstore.FieldSplit(field="split", names=("train", "val")),
        fields={"label": int},
    )
    v1 = store.append(read_manifest(jsonl), message=f"first {first} images")
    print(f"version {v1.number}: {v1.added} images from {jsonl.name}, counts {v1.counts}")
    per_label = store.sql("SELECT label, count(*) AS n FROM manifest WHERE split = 'train' GROUP BY label").to_pydict()
    print(f"train records per label: {dict(sorted(zip(per_label['label'], per_label['n'], strict=True)))}")

    model = train(store, v1.number, epochs, workers)
    print(f"val accuracy on version {v1.number} ({SUBSET}): {accuracy(model, store, v1.number, 'val'):.2f}")
    store.tag(TAG, v1.number)
    print(f"tagged version {v1.number} as {TAG!r}")
    before = stream_contents(store, TAG, "train")
    trained_on = stream_contents(store, TAG, "train", SUBSET)

    write_images(images, jsonl, first, more, rng)
    v2 = store.append(read_manifest(jsonl, skip=first), message=f"{more} more images")
    print(f"version {v2.number}: {v2.added} more images, counts {v2.counts}")
    print(store.diff(v1.number, v2.number).summary())

    # A fresh process (here: a freshly opened store) finds the training set by its tag.
    reopened = litstore.open(root / "store")
    after = stream_contents(reopened, TAG, "train")
    assert after.keys() == before.keys(), "the tagged version streams a different key set"
    assert after == before, "the tagged version streams different content"
    subset_after = stream_contents(reopened, TAG, "train", SUBSET)
    assert subset_after == trained_on, "the tagged version's subset streams different records"
    assert {label for label, _ in subset_after.values()} == {0, 1}
    latest = stream_contents(reopened, v2.number, "train")
    latest_subset = stream_contents(reopened, v2.number, "train", SUBSET)
    assert before.keys() < latest.keys() and trained_on.keys() < latest_subset.keys()
    print(
        f"{TAG!r} (version {reopened.at(TAG).version.number}) still streams the same "
        f"{len(after)} train records; version {v2.number} streams {len(latest)}"
    )
    print(
        f"{TAG!r} subset {SUBSET!r} still streams the same {len(subset_after)} records the model "
        f"was trained on; version {v2.number} streams {len(latest_subset)}"
    )
    print(f"done in {time.perf_counter() - started:.1f} s")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="an empty or new directory (default: a temporary one)")
    parser.add_argument("--images", type=int, default=160, help="images in the first version")
    parser.add_argument("--more", type=int, default=40, help="images appended afterwards")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="StreamingDataLoader num_workers")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    if args.root is None:
        with tempfile.TemporaryDirectory(prefix="litstore-train-") as directory:
            main(Path(directory), args.images, args.more, args.epochs, args.workers)
    else:
        if args.root.exists() and any(args.root.iterdir()):
            raise SystemExit(f"--root {args.root}: directory exists and is not empty")
        main(args.root, args.images, args.more, args.epochs, args.workers)
