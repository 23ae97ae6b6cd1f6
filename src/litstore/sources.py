"""Records in: lazy iterables of records read from common dataset formats.

Each function checks its arguments at once and returns an iterator that reads its
source a piece at a time (a line, a file, a Parquet batch, an item), so memory is
bounded by what the consumer keeps; pass the result to ``store.append`` or
``store.upsert``::

    from litstore import sources

    store.append(sources.jsonl("data/train.jsonl"))

Images become ``litdata.Image(path=...)`` values: litstore stores the file's bytes
with litdata's own image serializer and every read (``store[key]``, streaming) gives
the decoded ``uint8`` tensor, as LitData's ``StreamingDataset`` does. The file is read
when the record is encoded, not when the source yields it.

Paths are local paths. Problems with the source itself (a line that is not a JSON
object, an image path that names no file) raise :class:`~litstore.errors.InvalidRecordError`
naming where; a source that does not exist raises :class:`~litstore.errors.MissingFileError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from litstore.errors import InvalidArgumentError, InvalidRecordError, MissingFileError
from litstore.export import tensor_rows

Record = dict[str, Any]
PathLike = str | os.PathLike[str]

#: The file extensions litdata's image serializer stores (compared case-insensitively).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"})

#: Rows read from Parquet at a time unless the caller says otherwise.
PARQUET_BATCH_SIZE = 8192


def jsonl(path: PathLike, *, image_fields: Sequence[str] = ("image",), key: str | None = None) -> Iterator[Record]:
    """One record per line of a JSON Lines manifest; blank lines are skipped.

    A string value of a field in ``image_fields`` is a path to an image file, relative
    to the manifest's folder (or absolute), and becomes ``litdata.Image(path=...)``.

    Args:
        path: the manifest file (UTF-8, one JSON object per line).
        image_fields: top-level fields that hold image paths.
        key: a field to set to the line number (from 1) in records that lack it;
            ``None`` leaves records as they are (they must hold the store's key field).

    Raises:
        MissingFileError: there is no file at ``path``.
        InvalidRecordError: (while iterating) a line is not a JSON object, or an image
            path names no file; the message names the line.
    """
    manifest = _existing(path, "manifest")
    if not manifest.is_file():
        raise InvalidArgumentError(f"{manifest} is a folder, not a JSON Lines manifest")
    if isinstance(image_fields, str):
        raise InvalidArgumentError(f"image_fields is a list of field names, not the string {image_fields!r}")
    return _jsonl_records(manifest, tuple(image_fields), key)


def image_folder(path: PathLike, *, key: str = "id") -> Iterator[Record]:
    """The images of a class-folder tree (``root/cat/1.jpg``), labelled by their top folder.

    Each record is ``{key: "cat/1.jpg", "label": "cat", "label_index": 0, "image":
    litdata.Image(...)}``: the key is the image's path relative to ``root`` (with ``/``),
    ``label_index`` the position of the label among the sorted class names. Classes are
    the folders directly under ``root`` that hold images (at any depth); files directly
    under ``root``, hidden files and folders, and files of other types are skipped.
    Records come in key order, so the same tree always gives the same records.

    Raises:
        MissingFileError: there is no folder at ``path``.
        InvalidArgumentError: ``path`` is a file, or the tree holds no image in a class folder.
    """
    root = _existing(path, "image folder")
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is a file, not a folder of class folders")
    files = sorted(_images(root))
    if not files:
        raise InvalidArgumentError(f"{root} holds no image ({', '.join(sorted(IMAGE_EXTENSIONS))}) in a class folder")
    classes = sorted({name.split("/", 1)[0] for name in files})
    return _image_records(root, files, {label: index for index, label in enumerate(classes)}, key)


def parquet(paths_or_dir: PathLike | Sequence[PathLike], *, batch_size: int = PARQUET_BATCH_SIZE) -> Iterator[Record]:
    """The rows of Parquet files as records, read ``batch_size`` rows at a time, file by file in order.

    ``paths_or_dir`` is one file, a list of files, or a folder (every Parquet file
    under it). Fixed-shape tensor columns (as :meth:`Snapshot.to_arrow` writes them)
    come back as numpy arrays, timestamps and durations as numpy ``datetime64`` /
    ``timedelta64`` scalars; other values as ``pyarrow``'s ``to_pylist`` gives them.

    Raises:
        MissingFileError: a path names no file or folder.
        InvalidArgumentError: ``batch_size`` is not a positive int, or the files are not Parquet.
    """
    import pyarrow.dataset as ds

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive int, not {batch_size!r}")
    many = not isinstance(paths_or_dir, str | os.PathLike)
    paths = [_existing(path, "Parquet file") for path in (paths_or_dir if many else [paths_or_dir])]  # type: ignore[union-attr]
    source: Any = [str(path) for path in paths] if many else str(paths[0])
    try:
        dataset = ds.dataset(source, format="parquet")
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgumentError(f"cannot read {paths_or_dir} as Parquet: {exc}") from exc
    return _parquet_records(dataset, batch_size)


def litdata_dir(input_dir: PathLike) -> Iterator[Record]:
    """The items of a LitData-optimized folder (one with an ``index.json``), in index order.

    Items that are dicts are records as they are; any other item ``value`` at position
    ``i`` becomes ``{"id": i, "item": value}``.

    Raises:
        MissingFileError: ``input_dir`` holds no ``index.json``.
    """
    root = _existing(input_dir, "LitData folder")
    if not (root / "index.json").is_file():
        raise MissingFileError(f"{root} is not a LitData-optimized folder: it has no index.json")
    return _litdata_records(root)


def huggingface(dataset: Any) -> Iterator[Record]:
    """The rows of a Hugging Face ``datasets.Dataset`` (or any iterable of dicts with ``features``).

    Top-level ``datasets.Image`` columns are read undecoded and become
    ``litdata.Image(bytes=..., path=...)``, so the image's own bytes are stored (never
    a re-encoding of a PIL image). Rows come in the dataset's order.

    Raises:
        InvalidArgumentError: ``dataset`` is not iterable.
        InvalidRecordError: (while iterating) a row is not a dict.
    """
    if not isinstance(dataset, Iterable):
        raise InvalidArgumentError(f"expected a datasets.Dataset or an iterable of dicts, not {type(dataset).__name__}")
    features = getattr(dataset, "features", None) or {}
    images = [name for name, feature in features.items() if _is_hf_image(feature)]
    if images and hasattr(dataset, "cast_column"):
        for name in images:
            dataset = dataset.cast_column(name, type(features[name])(decode=False))
    return _huggingface_records(dataset, images)


# -- the iterators ------------------------------------------------------------------


def _jsonl_records(manifest: Path, image_fields: tuple[str, ...], key: str | None) -> Iterator[Record]:
    folder = manifest.parent
    with manifest.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{manifest} line {number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRecordError(f"{where}: not UTF-8 text: {exc}", [(number, None)]) from exc
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidRecordError(f"{where}: not valid JSON: {exc}", [(number, None)]) from exc
            if not isinstance(record, dict):
                raise InvalidRecordError(
                    f"{where}: a line must be a JSON object, not {type(record).__name__}", [(number, None)]
                )
            for name in image_fields:
                value = record.get(name)
                if isinstance(value, str):
                    record[name] = _image(folder / value, f"{where}, field {name!r}", number)
            if key is not None:
                record.setdefault(key, number)
            yield record


def _images(root: Path) -> Iterator[str]:
    """The paths (relative, with ``/``) of the image files inside the class folders of ``root``."""
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        relative = Path(folder).relative_to(root)
        if relative == Path("."):
            continue
        for name in files:
            if not name.startswith(".") and Path(name).suffix.lower() in IMAGE_EXTENSIONS:
                yield (relative / name).as_posix()


def _image_records(root: Path, files: list[str], classes: dict[str, int], key: str) -> Iterator[Record]:
    for number, name in enumerate(files):
        label = name.split("/", 1)[0]
        image = _image(root / name, f"{root}: {name}", number)
        yield {key: name, "label": label, "label_index": classes[label], "image": image}


def _parquet_records(dataset: Any, batch_size: int) -> Iterator[Record]:
    for batch in dataset.to_batches(batch_size=batch_size):
        columns = {name: _python_values(batch.column(name)) for name in batch.schema.names}
        for row in range(batch.num_rows):
            yield {name: values[row] for name, values in columns.items()}


def _python_values(column: pa.Array) -> list[Any]:
    """A Parquet column's values as litstore can store them."""
    kind = column.type
    if isinstance(kind, pa.FixedShapeTensorType):
        return tensor_rows(column)  # type: ignore[return-value]
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind) or pa.types.is_date64(kind):
        values = column.to_numpy(zero_copy_only=False)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        return [value if ok else None for value, ok in zip(values, valid, strict=True)]
    return list(column.to_pylist())


def _litdata_records(root: Path) -> Iterator[Record]:
    from litdata import StreamingDataset

    dataset = StreamingDataset(input_dir=str(root))
    for index in range(len(dataset)):
        item = dataset[index]
        yield item if isinstance(item, dict) else {"id": index, "item": item}


def _huggingface_records(dataset: Iterable[Any], images: list[str]) -> Iterator[Record]:
    import litdata

    for number, row in enumerate(dataset):
        if not isinstance(row, dict):
            raise InvalidRecordError(f"row {number} is a {type(row).__name__}, not a dict", [(number, None)])
        for name in images:
            value = row.get(name)
            if isinstance(value, dict) and (value.get("bytes") is not None or value.get("path") is not None):
                row[name] = litdata.Image(bytes=value.get("bytes"), path=value.get("path"))
        yield row


# -- helpers --------------------------------------------------------------------------


def _existing(path: Any, what: str) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgumentError(f"the {what} is given as a path, not {type(path).__name__}")
    found = Path(path)
    if not found.exists():
        raise MissingFileError(f"there is no {what} at {found}")
    return found


def _image(path: Path, where: str, number: int) -> Any:
    """``litdata.Image`` of the file at ``path``, checked to exist now rather than when it is encoded."""
    import litdata

    if not path.is_file():
        raise InvalidRecordError(f"{where}: there is no image file at {path}", [(number, None)])
    return litdata.Image(path=str(path.resolve()))


def _is_hf_image(feature: Any) -> bool:
    kind = type(feature)
    return kind.__name__ == "Image" and kind.__module__.startswith("datasets.")
