"""Records in: lazy iterables of records read from common dataset formats.

Each function checks its arguments at once and returns an iterator that reads its
source a piece at a time (a line, a file, a Parquet batch, a chunk), so memory is
bounded by what the consumer keeps; pass the result to ``store.append`` or
``store.upsert``::

    from litstore import sources

    store.append(sources.jsonl("data/train.jsonl"))

Images become ``litdata.Image(bytes=..., path=...)`` values: litstore stores the file's
bytes with litdata's own image serializer and every read (``store[key]``, streaming)
gives the decoded ``uint8`` tensor, as LitData's ``StreamingDataset`` does. The file is
read when the source yields the record, and decoded once then with the decoder every
read uses, so an image that would not decode (a truncated PNG, a text file named
``.jpg``) is refused before anything is written rather than failing every epoch after.

A source reads only files inside its root: the manifest's folder (:func:`jsonl`), the
image folder, the LitData folder, the folder given to :func:`parquet`. A path that is
absolute, holds ``..``, or leads through a symlink out of the root is refused, naming
where, unless the caller passes ``allow_outside=True``; only regular files are read (a
FIFO or a device is refused, never waited on). A Hugging Face image that is only a path
has no root, so it is refused unless ``allow_outside=True``. A LitData folder is read
by litstore itself, never by litdata's reader, so nothing its author wrote runs: a
folder whose items need a serializer litstore does not decode (``graph``, ...) is
refused before any chunk is read, and a ``pickle`` leaf (litdata stores ``None`` so) is
read only if its bytes are a pickled ``None``, compared and never unpickled.

Paths are local paths. A problem found when the source is named (a LitData folder
stored with ``graph``, a symlink out of a folder) raises
:class:`~litstore.errors.InvalidArgumentError`; one found while iterating (a line that
is not a JSON object or nests too deep, an image that names no file or does not
decode, a damaged Parquet page or LitData chunk, a ``pickle`` leaf that is not ``None``) raises
:class:`~litstore.errors.InvalidRecordError` naming the file and line, row or item, so
``store.append`` writes nothing; a source that does not exist raises
:class:`~litstore.errors.MissingFileError`.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import pyarrow as pa

from litstore.errors import (
    IntegrityError,
    InvalidArgumentError,
    InvalidRecordError,
    MissingFileError,
    UnsupportedValueError,
)
from litstore.export import is_media_field, media_rows, tensor_rows
from litstore.huggingface import ARRAY_TYPES, METADATA_KEY, HuggingFaceRows, feature_type, splits_of

Record = dict[str, Any]
PathLike = str | os.PathLike[str]

#: The file extensions litdata's image serializer stores (compared case-insensitively).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"})

#: Rows read from Parquet at a time unless the caller says otherwise.
PARQUET_BATCH_SIZE = 8192

#: The longest JSON Lines line read (256 MiB): a longer one is refused rather than parsed.
MAX_LINE_BYTES = 256 * 2**20

_OUTSIDE_HINT = "pass allow_outside=True if reading it is intended"


def jsonl(
    path: PathLike,
    *,
    image_fields: Sequence[str] = ("image",),
    key: str | None = None,
    allow_outside: bool = False,
    object_hook: Callable[[dict[str, Any]], Any] | None = None,
) -> Iterator[Record]:
    """One record per line of a JSON Lines manifest (see :func:`json_objects`); blank lines are skipped.

    A string value of a field in ``image_fields`` is a path to an image file, relative
    to the manifest's folder, and becomes ``litdata.Image(bytes=..., path=...)``.

    Args:
        path: the manifest file (UTF-8, one JSON object per line).
        image_fields: top-level fields that hold image paths.
        key: a field to set to the line number (from 1) in records that lack it;
            ``None`` leaves records as they are (they must hold the store's key field).
        allow_outside: read image paths that are absolute, hold ``..`` or lead
            through a symlink out of the manifest's folder (refused otherwise).
        object_hook: given to ``json.loads`` for every object of a line (see
            :func:`json_objects`); the command line's ``import`` reads its markers so.

    Raises:
        MissingFileError: there is no file at ``path``.
        InvalidRecordError: (while iterating) a line is not a JSON object (see
            :func:`json_objects`), or an image path names no file inside the manifest's
            folder or one that does not decode; the message names the line.
    """
    manifest = _existing(path, "manifest")
    if not manifest.is_file():
        raise InvalidArgumentError(f"{manifest} is a folder, not a JSON Lines manifest")
    if isinstance(image_fields, str):
        raise InvalidArgumentError(f"image_fields is a list of field names, not the string {image_fields!r}")
    return _jsonl_records(manifest, tuple(image_fields), key, allow_outside, object_hook)


def json_objects(
    path: PathLike, *, object_hook: Callable[[dict[str, Any]], Any] | None = None
) -> Iterator[tuple[int, Record]]:
    """``(line number, object)`` for each line of a JSON Lines file that is not blank, read lazily.

    Lines end with ``\\n`` only, as JSON Lines says: a ``\\r`` before it is JSON
    whitespace, and a lone ``\\r`` does not end a line (two objects on one line, split
    only by ``\\r``, are refused). ``object_hook`` is given to ``json.loads``; a
    ``ValueError`` it raises refuses the line.

    Raises:
        InvalidRecordError: (while iterating) a line is not UTF-8, is longer than
            :data:`MAX_LINE_BYTES`, is not valid JSON (too deep a nesting, an integer
            of more digits than Python converts), or is not a JSON object; the
            message names the file and the line. An ``OSError`` reading the file
            propagates.
    """
    with Path(path).open("rb") as lines:
        number = 0
        while raw := lines.readline(MAX_LINE_BYTES + 1):
            number += 1
            where = f"{path} line {number}"
            if len(raw) > MAX_LINE_BYTES:
                raise InvalidRecordError(f"{where}: longer than {MAX_LINE_BYTES} bytes, not read", [(number, None)])
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRecordError(f"{where}: not UTF-8 text: {exc}", [(number, None)]) from None
            if not text.strip():
                continue
            try:
                value = json.loads(text, object_hook=object_hook)
            except RecursionError:
                raise InvalidRecordError(f"{where}: not valid JSON: nested too deep", [(number, None)]) from None
            except ValueError as exc:  # JSONDecodeError, an integer too long to convert, object_hook's refusal
                raise InvalidRecordError(
                    f"{where}: not valid JSON: {exc}{_lone_return(text)}", [(number, None)]
                ) from None
            if not isinstance(value, dict):
                raise InvalidRecordError(
                    f"{where}: a line must be a JSON object, not {type(value).__name__}", [(number, None)]
                )
            yield number, value


def image_folder(path: PathLike, *, key: str = "id", allow_outside: bool = False) -> Iterator[Record]:
    """The images of a class-folder tree (``root/cat/1.jpg``), labelled by their top folder.

    Each record is ``{key: "cat/1.jpg", "label": "cat", "label_index": 0, "image":
    litdata.Image(...)}``: the key is the image's path relative to ``root`` (with ``/``),
    ``label_index`` the position of the label among the sorted class names. Classes are
    the folders directly under ``root`` that hold images (at any depth); files directly
    under ``root``, hidden files and folders, and files of other types are skipped.
    Records come in key order, so the same tree always gives the same records.

    A symlink whose target lies inside ``root`` is read (a symlinked folder is then
    skipped: its images are listed where they lie); one leading out of ``root`` is
    refused unless ``allow_outside=True``, which also follows symlinked folders.

    Raises:
        MissingFileError: there is no folder at ``path``.
        InvalidArgumentError: ``path`` is a file, the tree holds no image in a class
            folder, or a symlinked folder leads out of ``root``.
        InvalidRecordError: (while iterating) an image is a symlink out of ``root``, is
            not a regular file, or does not decode; the message names it.
    """
    root = _existing(path, "image folder")
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is a file, not a folder of class folders")
    files = sorted(_images(root, allow_outside))
    if not files:
        raise InvalidArgumentError(f"{root} holds no image ({', '.join(sorted(IMAGE_EXTENSIONS))}) in a class folder")
    classes = sorted({name.split("/", 1)[0] for name in files})
    return _image_records(root, files, {label: index for index, label in enumerate(classes)}, key, allow_outside)


def parquet(
    paths_or_dir: PathLike | Sequence[PathLike], *, batch_size: int = PARQUET_BATCH_SIZE, allow_outside: bool = False
) -> Iterator[Record]:
    """The rows of Parquet files as records, read ``batch_size`` rows at a time, file by file in order.

    ``paths_or_dir`` is one file, a list of files, or a folder (every Parquet file
    under it; one that leads through a symlink out of the folder is refused unless
    ``allow_outside=True``). Fixed-shape tensor columns (as :meth:`Snapshot.to_arrow`
    writes them) come back as numpy arrays, timestamps and durations as numpy
    ``datetime64`` / ``timedelta64`` scalars; other values as ``pyarrow``'s
    ``to_pylist`` gives them.

    Raises:
        MissingFileError: a path names no file or folder.
        InvalidArgumentError: ``batch_size`` is not a positive int, the files are not
            Parquet, or a file under the folder lies outside it.
        InvalidRecordError: (while iterating) a page of a file is damaged or does not
            fit the first file's schema; the message names the file and its rows.
    """
    import pyarrow.dataset as ds

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive int, not {batch_size!r}")
    many = not isinstance(paths_or_dir, str | os.PathLike)
    paths = [_existing(path, "Parquet file") for path in (paths_or_dir if many else [paths_or_dir])]  # type: ignore[union-attr]
    source: Any = [str(path) for path in paths] if many else str(paths[0])
    try:
        dataset = ds.dataset(source, format="parquet")
    except (pa.ArrowException, OSError) as exc:
        raise InvalidArgumentError(f"cannot read {paths_or_dir} as Parquet: {exc}") from exc
    if not many and paths[0].is_dir() and not allow_outside:
        for file in dataset.files:
            _check_inside(paths[0], Path(file).relative_to(paths[0]).as_posix(), f"{paths[0]}: {file}", None)
    return _parquet_records(dataset, batch_size)


def litdata_dir(input_dir: PathLike, *, allow_outside: bool = False) -> Iterator[Record]:
    """The items of a LitData-optimized folder (one with an ``index.json``), in index order.

    Items that are dicts are records as they are; any other item ``value`` at position
    ``i`` becomes ``{"id": i, "item": value}``. litstore reads the folder itself
    (:mod:`litstore._litdata.folder`), never through litdata's ``StreamingDataset``:
    every leaf decodes through litstore's media allowlist, so nothing the folder's
    author wrote runs. Chunk files must lie inside the folder unless ``allow_outside=True``.

    Raises:
        MissingFileError: ``input_dir`` holds no ``index.json``.
        InvalidArgumentError: ``index.json`` is not a LitData index, its items need a
            serializer litstore does not read (``graph`` runs code), its chunks are
            compressed or encrypted, or a chunk lies outside the folder.
        InvalidRecordError: (while iterating) a chunk is missing or damaged, an item
            does not decode, or an item holds a ``pickle`` leaf that is not ``None``
            (never unpickled); the message names the chunk and the item.
    """
    from litstore._litdata.folder import read_layout

    root = _existing(input_dir, "LitData folder")
    index = root / "index.json"
    if not index.is_file():
        raise MissingFileError(f"{root} is not a LitData-optimized folder: it has no index.json")
    if not allow_outside:
        _check_inside(root, "index.json", str(index), None)
    try:
        document = _read_file(index, str(index), None, "index")
    except InvalidRecordError as exc:
        raise InvalidArgumentError(str(exc)) from None
    layout = read_layout(document, str(index))
    chunks = [
        (entry, root / entry.filename if allow_outside else _check_inside(root, entry.filename, str(index), None))
        for entry in layout.chunks
    ]
    return _litdata_records(layout, chunks)


def huggingface(
    dataset: Any, *, key: str | None = None, split_field: str = "split", allow_outside: bool = False
) -> Iterator[Record]:
    """The rows of a Hugging Face ``datasets.Dataset``, or of every split of a ``DatasetDict``.

    Top-level ``datasets.Image`` columns are read undecoded and become
    ``litdata.Image(bytes=...)``, so the image's own bytes are stored (never a
    re-encoding of a PIL image), each checked to decode; ``Array2D``...``Array5D``
    columns become numpy arrays of their dtype. A ``DatasetDict``'s rows come split by
    split, each with ``split_field`` set to its split name: a store created with
    ``splits="split"`` takes HF's splits as its own. The dataset's features (ClassLabel
    names, dtypes) go into the metadata of the commit ``store.append`` makes, and
    ``to_huggingface`` gives them back (see :mod:`litstore.huggingface`). An image that
    is only a path (no bytes) would be read from this machine wherever it points, so it
    is refused unless ``allow_outside=True``. Any iterable of dicts is read as rows too.

    Args:
        dataset: a ``datasets.Dataset``, ``IterableDataset``, ``DatasetDict`` or iterable of dicts.
        key: a field to set to the row's number (from 0, counting on across the splits of
            a ``DatasetDict``) in rows that lack it; ``None`` leaves rows as they are.
        split_field: the field that holds the split name of a ``DatasetDict``'s rows.
        allow_outside: read images that are only a path.

    Raises:
        InvalidArgumentError: ``dataset`` is not iterable, the splits of a ``DatasetDict``
            have different features, or ``split_field`` is a column of the dataset.
        InvalidRecordError: (while iterating) a row is not a dict, or an image is only
            a path (without ``allow_outside``), names no regular file, or does not decode.
    """
    return _huggingface_rows(dataset, key=key, split_field=split_field, allow_outside=allow_outside)


# -- the iterators ------------------------------------------------------------------


def _jsonl_records(
    manifest: Path,
    image_fields: tuple[str, ...],
    key: str | None,
    allow_outside: bool,
    object_hook: Callable[[dict[str, Any]], Any] | None,
) -> Iterator[Record]:
    folder = manifest.parent
    for number, record in json_objects(manifest, object_hook=object_hook):
        for name in image_fields:
            value = record.get(name)
            if isinstance(value, str):
                where = f"{manifest} line {number}, field {name!r}"
                path = folder / value if allow_outside else _check_inside(folder, value, where, number)
                record[name] = _image(path, where, number)
        if key is not None:
            record.setdefault(key, number)
        yield record


def _images(root: Path, allow_outside: bool) -> Iterator[str]:
    """The paths (relative, with ``/``) of the image files inside the class folders of ``root``."""
    walked: set[Path] = set()
    for folder, subfolders, files in os.walk(root, followlinks=allow_outside):
        walked.add(_resolved(Path(folder), folder))
        subfolders[:] = [name for name in subfolders if _walk_into(root, Path(folder) / name, allow_outside, walked)]
        relative = Path(folder).relative_to(root)
        if relative == Path("."):
            continue
        for name in files:
            if not name.startswith(".") and Path(name).suffix.lower() in IMAGE_EXTENSIONS:
                yield (relative / name).as_posix()


def _walk_into(root: Path, folder: Path, allow_outside: bool, walked: set[Path]) -> bool:
    """Whether to list ``folder``: not hidden, and if a symlink, one leading out of ``root`` when that is allowed."""
    if folder.name.startswith("."):
        return False
    if not folder.is_symlink():
        return True
    target = _resolved(folder, str(folder))
    if not allow_outside:
        if not target.is_relative_to(root.resolve()):
            raise InvalidArgumentError(
                f"{root}: {folder.relative_to(root)} is a symlink to {target}, outside {root}; {_OUTSIDE_HINT}"
            )
        return False  # its images are listed where they lie
    return target not in walked  # a symlink back to a folder already walked would loop


def _image_records(
    root: Path, files: list[str], classes: dict[str, int], key: str, allow_outside: bool
) -> Iterator[Record]:
    for number, name in enumerate(files):
        label = name.split("/", 1)[0]
        where = f"{root}: {name}"
        path = root / name if allow_outside else _check_inside(root, name, where, number)
        yield {key: name, "label": label, "label_index": classes[label], "image": _image(path, where, number)}


def _parquet_records(dataset: Any, batch_size: int) -> Iterator[Record]:
    for fragment in dataset.get_fragments():
        first = 0
        batches = fragment.to_batches(schema=dataset.schema, batch_size=batch_size)
        while True:
            try:
                batch = next(batches, None)
                if batch is None:
                    break
                columns = {field.name: _python_values(batch.column(field.name), field) for field in batch.schema}
            except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
                where = f"{fragment.path}, rows from {first} on (counting from 0)"
                raise InvalidRecordError(f"{where}: cannot be read as Parquet: {exc}", [(first, None)]) from None
            for row in range(batch.num_rows):
                yield {name: values[row] for name, values in columns.items()}
            first += batch.num_rows


def _python_values(column: pa.Array, field: pa.Field) -> list[Any]:
    """A Parquet column's values as litstore can store them (a media column as the ``Media`` it holds)."""
    kind = column.type
    if is_media_field(field):
        return _decodable(media_rows(column))
    if isinstance(kind, pa.FixedShapeTensorType):
        return tensor_rows(column)  # type: ignore[return-value]
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind) or pa.types.is_date64(kind):
        values = column.to_numpy(zero_copy_only=False)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        return [value if ok else None for value, ok in zip(values, valid, strict=True)]
    return list(column.to_pylist())


def _decodable(rows: list[Any]) -> list[Any]:
    """``rows`` of media, once each decodes as every read of the store will decode it (else ValueError)."""
    for media in rows:
        if media is not None:
            try:
                media.decode()
            except IntegrityError as exc:
                raise ValueError(f"a {media.format!r} media value does not decode: {exc}") from None
    return rows


def _litdata_records(layout: Any, chunks: list[tuple[Any, Path]]) -> Iterator[Record]:
    from litstore._litdata.folder import chunk_items

    position = 0
    for entry, path in chunks:
        data = _read_file(path, f"chunk {entry.filename}", position, "chunk")
        for item in chunk_items(data, layout, entry, str(path), position):
            yield item if isinstance(item, dict) else {"id": position, "item": item}
            position += 1


def _huggingface_rows(
    dataset: Any, *, key: str | None = None, split_field: str = "split", allow_outside: bool = False
) -> HuggingFaceRows:
    """The rows of :func:`huggingface`, carrying the features for the commit (see :mod:`litstore.huggingface`)."""
    splits = splits_of(dataset)
    if splits is None:
        if not isinstance(dataset, Iterable):
            raise InvalidArgumentError(
                f"expected a datasets.Dataset, a DatasetDict or an iterable of dicts, not {type(dataset).__name__}"
            )
        splits = {None: dataset}
    features = _features(splits)
    added = [] if key is None or key in (features or {}) else [key]
    if None not in splits:
        if not isinstance(split_field, str) or not split_field:
            raise InvalidArgumentError(f"split_field must be a field name, not {split_field!r}")
        if split_field in (features or {}):
            raise InvalidArgumentError(
                f"the dataset has a column {split_field!r} already, which would hold the split name; "
                "pass split_field= another name"
            )
        added.append(split_field)
    metadata = {} if features is None else {METADATA_KEY: {"features": _features_dict(features), "added": added}}
    prepared = {name: _undecoded(part) for name, part in splits.items()}
    return HuggingFaceRows(_hf_records(prepared, features or {}, key, split_field, allow_outside), metadata)


def _features(splits: dict[Any, Any]) -> Any:
    """The features the splits share (``None`` if they have none).

    Raises:
        InvalidArgumentError: two splits have different features.
    """
    found = [(name, getattr(part, "features", None)) for name, part in splits.items()]
    first_name, first = found[0]
    for name, features in found[1:]:
        if features != first:
            raise InvalidArgumentError(
                f"splits {first_name!r} and {name!r} have different features; read them one at a time"
            )
    return first or None


def _features_dict(features: Any) -> dict[str, Any]:
    """``features.to_dict()`` as JSON (what a commit's metadata can hold)."""
    return dict(json.loads(json.dumps(features.to_dict())))


def _undecoded(dataset: Any) -> Any:
    """``dataset`` with its top-level image columns read as ``{"bytes", "path"}``, never decoded to PIL."""
    features = getattr(dataset, "features", None) or {}
    for name, feature in features.items():
        if feature_type(feature) == "Image" and hasattr(dataset, "cast_column"):
            dataset = dataset.cast_column(name, type(feature)(decode=False))
    return dataset


def _hf_records(
    splits: dict[Any, Any], features: Any, key: str | None, split_field: str, allow_outside: bool
) -> Iterator[Record]:
    images = [name for name, feature in features.items() if feature_type(feature) == "Image"]
    arrays = {name: feature.dtype for name, feature in features.items() if feature_type(feature) in ARRAY_TYPES}
    number = 0
    for split, part in splits.items():
        for row in part:
            if not isinstance(row, dict):
                raise InvalidRecordError(f"row {number} is a {type(row).__name__}, not a dict", [(number, None)])
            for name in images:
                value = row.get(name)
                if isinstance(value, dict):
                    row[name] = _hf_image(value, f"row {number}, field {name!r}", number, allow_outside)
            for name, dtype in arrays.items():
                if row.get(name) is not None:
                    row[name] = np.asarray(row[name], dtype=dtype)
            if key is not None:
                row.setdefault(key, number)
            if split is not None:
                row[split_field] = split
            yield row
            number += 1


def _hf_image(value: dict[str, Any], where: str, number: int, allow_outside: bool) -> Any:
    """``litdata.Image`` of an HF image value's bytes (read from its path only with ``allow_outside``)."""
    import litdata

    data, path = value.get("bytes"), value.get("path")
    if data is None and path is None:
        return None
    if data is None:
        if not allow_outside:
            raise InvalidRecordError(
                f"{where}: the image is only a path ({path!r}), which would be read from this machine "
                f"wherever it points; {_OUTSIDE_HINT}",
                [(number, None)],
            )
        data = _read_file(Path(str(path)), where, number, "image file")
    return _decoded(litdata.Image(bytes=data, path=path), where, number)


# -- helpers --------------------------------------------------------------------------


def _existing(path: Any, what: str) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgumentError(f"the {what} is given as a path, not {type(path).__name__}")
    found = Path(path)
    if not found.exists():
        raise MissingFileError(f"there is no {what} at {found}")
    return found


def _check_inside(root: Path, name: str, where: str, position: int | None) -> Path:
    """``root / name`` with its symlinks resolved, if it is relative, holds no ``..`` and stays inside ``root``.

    Raises:
        InvalidRecordError (``position`` given) or InvalidArgumentError (``None``):
            the path is absolute, holds ``..``, or leads through a symlink out of ``root``.
    """
    relative = PurePath(name)
    if relative.is_absolute():
        problem = f"{name!r} is an absolute path"
    elif ".." in relative.parts:
        problem = f"{name!r} climbs out with '..'"
    else:
        target = _resolved(root / name, where, position)
        if target.is_relative_to(_resolved(root, where, position)):
            return target
        problem = f"{name!r} leads through a symlink to {target}"
    message = f"{where}: {problem}, outside {root}; {_OUTSIDE_HINT}"
    if position is None:
        raise InvalidArgumentError(message)
    raise InvalidRecordError(message, [(position, None)])


def _resolved(path: Path, where: str, position: int | None = None) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        message = f"{where}: cannot resolve {path}: {exc}"
        if position is None:
            raise InvalidArgumentError(message) from None
        raise InvalidRecordError(message, [(position, None)]) from None


def _read_file(path: Path, where: str, position: int | None, what: str) -> bytes:
    """The bytes of the regular file at ``path``; a FIFO or device is refused, never waited on.

    Raises:
        InvalidRecordError: there is no regular file at ``path``, or it cannot be read.
    """
    culprits = [] if position is None else [(position, None)]
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise InvalidRecordError(f"{where}: there is no {what} at {path}", culprits) from None
    except OSError as exc:
        raise InvalidRecordError(f"{where}: cannot read {path}: {exc.strerror or exc}", culprits) from None
    with open(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise InvalidRecordError(
                f"{where}: there is no {what} at {path}, only something that is not a file", culprits
            )
        try:
            return stream.read()
        except OSError as exc:
            raise InvalidRecordError(f"{where}: cannot read {path}: {exc.strerror or exc}", culprits) from None


def _image(path: Path, where: str, position: int) -> Any:
    """``litdata.Image`` of the file at ``path``, read now and checked to decode."""
    import litdata

    return _decoded(
        litdata.Image(bytes=_read_file(path, where, position, "image file"), path=str(path)), where, position
    )


def _decoded(image: Any, where: str, position: int) -> Any:
    """``image``, once its bytes decode as every read of the store will decode them."""
    from litstore._litdata.media import decode_media, encode_media

    try:
        decode_media(*encode_media(image, where))
    except (UnsupportedValueError, IntegrityError) as exc:
        raise InvalidRecordError(
            f"{where}: the image does not decode, so no read could use it: {exc}", [(position, None)]
        ) from None
    return image


def _lone_return(text: str) -> str:
    """A hint for a line that a lone carriage return may have been meant to split."""
    if "\r" in text.rstrip("\r\n"):
        return " (a lone \\r does not end a line in JSON Lines: lines end with \\n)"
    return ""
