"""Hugging Face ``datasets`` both ways: what is kept of HF's features, and datasets out.

In (:func:`litstore.sources.huggingface`, which reads the rows; this module holds what
the rows carry to the commit, :class:`HuggingFaceRows`): the rows of a
``datasets.Dataset`` become records as they are, but for the columns whose feature
says more than a Python value does:

- a ``datasets.Image`` column is read undecoded: each image becomes
  ``litdata.Image(bytes=...)`` holding **the image file's own bytes** (never a re-encoding
  of a PIL image), checked to decode; the path HF keeps beside the bytes is not stored;
- an ``Array2D``...``Array5D`` column becomes numpy arrays of the feature's shape and
  dtype (HF iterates them as nested lists, which would lose the dtype);
- a ``DatasetDict`` (any mapping of split name to dataset) gives the rows of each split
  in turn, each with ``split_field`` set to its split name, so a store created with
  ``splits="split"`` (a :class:`~litstore.FieldSplit`, whose default names include HF's
  ``validation``) keeps HF's splits as its own.

**Where the features are kept: in the commit's metadata.** The commit that writes rows
from HF holds ``{"huggingface": {"features": Features.to_dict(), "added": [...]}}`` in
its ``Version.metadata`` (``added``: the fields the source put in, the ``key=`` row
number and the split field). ClassLabel names, Value dtypes, Image and Array shapes
describe the source the rows came from at the time they were written, not a rule of
the store fixed at creation (the store config, ``litstore.json``, is written before
any row is known and never changes): a later import with other label names makes a
version that says so, and older versions keep theirs. It needs no change of format
(metadata is free JSON already) and is visible where a user looks (``store.versions()``).

Out: :func:`to_huggingface` reads a version's records (media left in their stored
form: :func:`litstore.keeping_media`, so images are never decoded or re-encoded) as one
Arrow table (:func:`litstore.export.to_arrow`, in memory as that is), and gives a
``datasets.Dataset`` of one split (``split="train"``) or a ``datasets.DatasetDict`` of
every split (``split=None``), as ``datasets.load_dataset`` does. Rows are in key order
(the stored order is by key hash, meaningless outside the store; keys that are HF row
numbers give the rows back in their original order). Features are those of the newest
commit at or before the version that recorded HF features, for the columns they name
(the fields the source ``added`` are left out), and inferred for any other column:

- a media column whose values are image files -> ``datasets.Image()`` (the stored bytes);
- a tensor column of 1 dimension -> ``List(Value(dtype), length=n)``; of 2 to 5
  -> ``Array2D``...``Array5D``; ragged arrays -> nested ``List``;
- anything else as ``datasets.Features.from_arrow_schema`` reads its Arrow type.

``store.append(dataset)`` of a HF dataset itself is refused, naming
``sources.huggingface`` (:func:`source_inputs`): its rows would come with images decoded
to PIL and its features lost. Only :func:`to_huggingface` imports ``datasets``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.errors import (
    IntegrityError,
    InvalidArgumentError,
    MissingDependencyError,
)

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

Record = dict[str, Any]

#: The commit metadata key under which the HF features of the rows written are kept.
METADATA_KEY = "huggingface"

ARRAY_TYPES = ("Array2D", "Array3D", "Array4D", "Array5D")


class HuggingFaceRows(Iterator[Record]):
    """The records of a HF dataset (or ``DatasetDict``), read lazily; ``commit_metadata`` holds its features.

    ``store.append`` and ``store.upsert`` put ``commit_metadata`` into the commit they make
    (metadata the caller passes wins on the same key).
    """

    def __init__(self, records: Iterator[Record], commit_metadata: dict[str, Any]) -> None:
        self._records = records
        self.commit_metadata = commit_metadata

    def __next__(self) -> Record:
        return next(self._records)


def source_inputs(records: Any, metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The metadata of a write of ``records``: the caller's, with the features rows from HF carry.

    What ``store.append`` and ``store.upsert`` call first (metadata the caller passes wins
    on the same key).

    Raises:
        InvalidArgumentError: ``records`` is a HF dataset itself: its rows would be read
            with images decoded to PIL and its features lost; the message says to pass
            ``sources.huggingface(dataset)``.
    """
    if is_hf_dataset(records) or splits_of(records) is not None:
        raise InvalidArgumentError(
            f"a Hugging Face {type(records).__name__} is read through litstore.sources.huggingface, which stores "
            "its images' own bytes, keeps its features (ClassLabel names) and maps a DatasetDict's splits: "
            "store.append(sources.huggingface(dataset, key=...))"
        )
    if (
        isinstance(records, HuggingFaceRows)
        and records.commit_metadata
        and (metadata is None or isinstance(metadata, dict))
    ):
        return {**records.commit_metadata, **(metadata or {})}
    return metadata


def to_huggingface(reader: VersionReader, split: str | None = None, features: Any = None) -> Any:
    """The records of ``reader``'s version as a ``datasets.Dataset`` (``split`` given) or ``DatasetDict``.

    ``features`` (a ``datasets.Features`` or a dict of them) gives the columns it names
    their features, in place of those a commit recorded (see the module docstring).

    Raises:
        MissingDependencyError: ``datasets`` is not installed.
        InvalidArgumentError: ``split`` is not a split of the store; a media column holds
            media that are not image files (export those with ``to_arrow``); or a column's
            values do not fit its feature (a later write changed the column: pass ``features=``).
        IntegrityError: the HF features a commit recorded cannot be read.
    """
    from litstore.export import to_arrow

    datasets = _require()
    declared = _split_names(reader)
    if split is not None and split not in declared:
        raise InvalidArgumentError(f"{split!r} is not a split of this store; its splits are {declared}")
    recorded, added = _recorded(reader, datasets)
    if features is not None:
        recorded = {**(recorded or {}), **dict(features)}
    key = reader.config.key
    table = to_arrow(reader)
    manifest = reader.manifest().select(["key", "split"])
    order = pc.sort_indices(table.column(key))
    split_of = manifest.column("split").take(pc.index_in(table.column(key), manifest.column("key"))).take(order)
    table = table.take(order).drop_columns([name for name in added if name in table.column_names])
    table, schema = _hf_table(table, recorded or {}, datasets)
    info = datasets.DatasetInfo(features=schema)

    def one(name: str) -> Any:
        part = table.filter(pc.equal(split_of, name)) if table.num_rows else table
        return datasets.Dataset(datasets.table.InMemoryTable(part), info=info.copy(), split=name)

    if split is not None:
        return one(split)
    return datasets.DatasetDict({name: one(name) for name in declared if reader.version.counts.get(name, 0)})


# -- in -------------------------------------------------------------------------------


def splits_of(dataset: Any) -> dict[Any, Any] | None:
    """The splits of a ``DatasetDict`` (a mapping of split name to HF dataset); ``None`` for anything else."""
    if isinstance(dataset, Mapping) and dataset and all(is_hf_dataset(part) for part in dataset.values()):
        return dict(dataset)
    return None


def is_hf_dataset(value: Any) -> bool:
    kind = type(value)
    return kind.__module__.startswith("datasets.") and kind.__name__ in ("Dataset", "IterableDataset")


def feature_type(feature: Any) -> str | None:
    kind = type(feature)
    return kind.__name__ if kind.__module__.startswith("datasets.") else None


def _require() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError("datasets is not installed; pip install datasets") from exc
    return datasets


# -- out ------------------------------------------------------------------------------


def _split_names(reader: VersionReader) -> list[str]:
    """The store's split names in the order its rule gives them (then any other split the version holds)."""
    rule = reader.config.splits
    names = list(rule.fractions) if hasattr(rule, "fractions") else list(rule.names)
    return names + sorted(set(reader.version.counts) - set(names))


def _recorded(reader: VersionReader, datasets: Any) -> tuple[Any, list[str]]:
    """The HF features, and the fields the source added, of the newest commit at or before ``reader``'s that has them.

    Raises:
        IntegrityError: the recorded features cannot be read.
    """
    for version in reversed(reader.versions()):
        described = version.metadata.get(METADATA_KEY) if version.number <= reader.version.number else None
        if described is None:
            continue
        try:
            features = datasets.Features.from_dict(described["features"])
            added = [str(name) for name in described.get("added", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IntegrityError(
                f"the Hugging Face features version {version.number} recorded in its metadata cannot be read: {exc}"
            ) from None
        return features, added
    return None, []


def _hf_table(table: pa.Table, recorded: dict[str, Any], datasets: Any) -> tuple[pa.Table, Any]:
    """``table`` with columns HF can hold, and their features: the recorded ones, else inferred.

    Columns come in the recorded features' order, then the others in ``table``'s.
    """
    arrays: dict[str, pa.Array] = {}
    inferred: dict[str, Any] = {}
    for field in table.schema:
        arrays[field.name], inferred[field.name] = _hf_column(field, table.column(field.name), datasets)
    names = list(recorded) + [name for name in arrays if name not in recorded]
    schema = datasets.Features({name: recorded.get(name, inferred.get(name)) for name in names})
    columns = []
    for name in names:
        array = arrays.get(name)
        if array is None:  # no record has the field (it was removed from all of them)
            array = pa.nulls(table.num_rows, schema.arrow_schema.field(name).type)
        try:
            columns.append(datasets.table.array_cast(array, schema.arrow_schema.field(name).type))
        except (pa.ArrowException, TypeError, ValueError, NotImplementedError) as exc:
            raise InvalidArgumentError(
                f"the values of column {name!r} do not fit its Hugging Face feature {schema[name]} "
                f"({exc}); pass features= with the feature they fit"
            ) from None
    return pa.Table.from_arrays(columns, names=names), schema


def _hf_column(field: pa.Field, column: pa.ChunkedArray, datasets: Any) -> tuple[pa.Array, Any]:
    """One exported column as HF holds it, and the feature inferred for it."""
    from litstore.export import is_media_field

    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = field.type
    if is_media_field(field):
        present = array.filter(array.is_valid()).field("format")
        formats = [value for value in pc.unique(present).to_pylist() if value is not None]
        if not all(value.startswith("image") or value == "jpeg" for value in formats):
            raise InvalidArgumentError(
                f"column {field.name!r} holds media of format(s) {sorted(formats)}, which are not image files a "
                "datasets.Image can hold; export them with to_arrow"
            )
        images = pa.StructArray.from_arrays(
            [array.field("data"), pa.nulls(len(array), pa.string())], names=["bytes", "path"], mask=array.is_null()
        )
        return images, datasets.Image()
    if isinstance(kind, pa.FixedShapeTensorType):
        return _hf_tensor(array, datasets)
    plain = pa.field(field.name, kind)
    return array, datasets.Features.from_arrow_schema(pa.schema([plain]))[field.name]


def _hf_tensor(array: pa.ExtensionArray, datasets: Any) -> tuple[pa.Array, Any]:
    """A fixed-shape tensor column as ``List(length=n)`` (1-D), ``ArrayND`` (2-5-D) or nested lists."""
    from datasets.features import features as hf_features

    shape = list(array.type.shape)
    storage = array.storage
    value_type = storage.type.value_type
    dtype = hf_features._arrow_to_datasets_dtype(value_type)
    if len(shape) == 1:
        return storage, datasets.List(datasets.Value(dtype), length=shape[0])
    size = storage.type.list_size
    values = storage.values[storage.offset * size : (storage.offset + len(storage)) * size]
    for width in reversed(shape[1:]):
        offsets = pa.array(np.arange(0, len(values) + 1, width, dtype=np.int32))
        values = pa.ListArray.from_arrays(offsets, values)
    offsets = pa.array(np.arange(0, len(values) + 1, shape[0], dtype=np.int32))
    nested = pa.ListArray.from_arrays(offsets, values, mask=storage.is_null() if storage.null_count else None)
    if len(shape) <= 5:
        feature = getattr(datasets, f"Array{len(shape)}D")(shape=tuple(shape), dtype=dtype)
        return nested, feature
    inner: Any = datasets.Value(dtype)
    for _ in shape:
        inner = datasets.List(inner)
    return nested, inner
