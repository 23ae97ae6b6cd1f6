"""The metadata litstore writes, as frozen pydantic models.

Each file under a store root that is not data is one of these models as JSON:
``litstore.json`` is a :class:`StoreConfig`, ``versions/<v>.json`` is a
:class:`Version` (the commit record: its creation *is* the commit). Every model
carries ``format_version`` so that a later litstore can read what an earlier one wrote
and refuse what it does not understand.
"""

from __future__ import annotations

import decimal
import numbers
import re
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

from litstore.errors import InvalidArgumentError
from litstore.format import fields as field_format
from litstore.format import layout
from litstore.format.hashing import split_unit, split_units

FORMAT_VERSION = 1

#: The format of a store's data files, fixed at creation (``StoreConfig.format_version``).
#: 1: manifest files hold ``key_hash``. 2: they do not (it is derived from the key on read,
#: which saves 8-10 bytes a record on disk and cannot disagree with the key). 3: every
#: commit also writes a key run (:mod:`litstore.format.keyrun`), so a lookup reads a few
#: pages of the key index on disk instead of composing the manifest. 4: an upsert or delete
#: marks the rows it supersedes dead in deletion vectors (:mod:`litstore.format.deletions`)
#: instead of copying the live rows of every chunk it touches. 5: each key run carries a
#: key filter (:mod:`litstore.format.keyfilter`), so a key a run does not hold costs one
#: 64-byte block of it, not a page. 6: a commit record lists its chunks and deletion vectors
#: by delta on its parent's (:attr:`Version.listed_by_delta`), in full only at checkpoints,
#: so what a small change writes does not grow with the store's chunks. 7: a record listed
#: in full names no dropped chunks (its listing is whole: what it dropped is its parent's
#: listing less its own), so a compaction after 1,000 small appends writes a record of a
#: few hundred bytes, not 66 KB that every process opening the version parses.
STORE_FORMAT_VERSION = 7
#: The format ``Store.create`` gives a store unless asked for another.
DEFAULT_STORE_FORMAT = 7
#: The format of a stored config that does not say (none litstore wrote: every config it
#: writes names its format).
_UNSTATED_STORE_FORMAT = 2

_SPLIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", cache_strings="keys")


def _check_split_name(name: str) -> str:
    if not _SPLIT_NAME.fullmatch(name):
        raise ValueError(f"split name {name!r} must be 1-64 letters, digits, '_', '.' or '-'")
    return name


class HashSplit(_Frozen):
    """Assign each record a split from a hash of its key, with fixed fractions.

    ``HashSplit(train=0.8, val=0.1, test=0.1)``. The split depends on the key alone, so
    a key never changes split as the store grows, and validation data never leaks
    into training.
    """

    kind: Literal["hash"] = "hash"
    fractions: dict[str, float]

    def __init__(self, fractions: dict[str, float] | None = None, /, **named: Any) -> None:
        try:
            if fractions is None and isinstance(named.get("fractions"), dict):
                super().__init__(**named)  # validation of stored JSON: kind=..., fractions={...}
            else:
                super().__init__(**{"fractions": fractions if fractions is not None else named})
        except pydantic.ValidationError as exc:
            raise InvalidArgumentError(f"invalid HashSplit: {exc.errors()[0]['msg']}") from None

    @field_validator("fractions", mode="before")
    @classmethod
    def _numbers(cls, fractions: Any) -> Any:
        # Plain float validation would take True as 1.0 and "0.5" as 0.5.
        if isinstance(fractions, dict):
            for name, fraction in fractions.items():
                if isinstance(fraction, bool) or not isinstance(fraction, (numbers.Real, decimal.Decimal)):
                    raise ValueError(f"fraction of split {name!r} must be a number, got {fraction!r}")
        return fractions

    @field_validator("fractions")
    @classmethod
    def _valid_fractions(cls, fractions: dict[str, float]) -> dict[str, float]:
        if not fractions:
            raise ValueError("HashSplit needs at least one split, e.g. HashSplit(train=1.0)")
        for name, fraction in fractions.items():
            _check_split_name(name)
            if not 0 < fraction <= 1:
                raise ValueError(f"fraction of split {name!r} must be in (0, 1], got {fraction}")
        total = sum(fractions.values())
        if abs(total - 1) > 1e-9:
            raise ValueError(f"split fractions must add up to 1, got {total}")
        return fractions

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.fractions)

    def assign_all(self, keys: list[str | int]) -> list[str]:
        """The split of each key: what :meth:`assign` gives, for many keys in one pass."""
        names = list(self.fractions)
        if len(names) == 1:
            return names * len(keys)
        edges = np.cumsum(list(self.fractions.values()))
        chosen = np.minimum(np.searchsorted(edges, split_units(keys), side="right"), len(names) - 1)
        return [names[i] for i in chosen.tolist()]

    def assign(self, key: str | int, record: dict[str, Any]) -> str:
        """The split of the record with this key."""
        point = split_unit(key)
        edge = 0.0
        for name, fraction in self.fractions.items():
            edge += fraction
            if point < edge:
                return name
        return next(reversed(self.fractions))


class FieldSplit(_Frozen):
    """Take each record's split from one of its fields; ``names`` are the allowed values.

    The default names hold both ``val`` (LitData's and litstore's own word) and
    ``validation`` (Hugging Face's canonical split name), so data from either splits as given.
    """

    kind: Literal["field"] = "field"
    field: str
    names: tuple[str, ...] = ("train", "val", "validation", "test")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except pydantic.ValidationError as exc:
            raise InvalidArgumentError(f"invalid FieldSplit: {exc.errors()[0]['msg']}") from None

    @field_validator("field")
    @classmethod
    def _valid_field(cls, field: str) -> str:
        if not field or not field.isidentifier():
            raise ValueError(f"split field {field!r} must be a record field name")
        return field

    @field_validator("names")
    @classmethod
    def _valid_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if not names or len(set(names)) != len(names):
            raise ValueError("FieldSplit names must be non-empty and distinct")
        return tuple(_check_split_name(name) for name in names)

    def assign(self, key: str | int, record: dict[str, Any]) -> str:
        """The split named by the record's field; ``KeyError``/``ValueError`` if not allowed."""
        value = record[self.field]
        if value not in self.names:
            raise ValueError(value)
        return str(value)


SplitRule = Annotated[HashSplit | FieldSplit, Field(discriminator="kind")]


class SchemaRef(_Frozen):
    """The pydantic model a store validates records against, by import path and JSON schema."""

    qualname: str
    json_schema: dict[str, Any]


class StoreConfig(_Frozen):
    """``litstore.json``: what is fixed when a store is created.

    ``chunk_bytes`` is a whole number of bytes. Whether it is below litdata's limit
    (:func:`check_chunk_bytes`) is checked where a store is created or a compaction
    chosen, not when a config is read: a store created with a larger one by an earlier
    litstore stays readable, and its writes refuse any chunk that reaches the limit.
    """

    format_version: int = Field(default=_UNSTATED_STORE_FORMAT, ge=1)
    key: str
    key_type: Literal["str", "int"] = "str"
    splits: SplitRule
    record_schema: SchemaRef | None = None
    chunk_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    checkpoint_interval: int = Field(default=64, gt=0)
    created_at: datetime
    #: Fields declared at creation (see :mod:`litstore.format.fields`); a version may add more.
    fields: dict[str, str] = Field(default_factory=dict)

    @field_validator("chunk_bytes", mode="before")
    @classmethod
    def _whole_chunk_bytes(cls, value: Any) -> Any:
        # Plain int validation would take True as 1 and "65536" as 65536.
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"must be a whole number of bytes, got {value!r}")
        return value

    @field_validator("checkpoint_interval", "format_version", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"must be a whole number, got {value!r}")
        return value

    @model_validator(mode="after")
    def _supported(self) -> StoreConfig:
        if self.format_version > STORE_FORMAT_VERSION:
            raise ValueError(
                f"store format {self.format_version} is newer than this litstore reads ({STORE_FORMAT_VERSION})"
            )
        _check_fields(self.fields, self.key)
        return self

    @property
    def stores_key_hash(self) -> bool:
        """Whether this store's manifest files hold the ``key_hash`` column (format 1)."""
        return self.format_version < 2

    @property
    def writes_key_runs(self) -> bool:
        """Whether each commit writes a key run (format 3): the key index on disk."""
        return self.format_version >= 3

    @property
    def writes_deletion_vectors(self) -> bool:
        """Whether upserts and deletes mark superseded rows dead instead of copying chunks (format 4)."""
        return self.format_version >= 4

    @property
    def writes_key_filters(self) -> bool:
        """Whether each key run a commit writes carries a key filter (format 5)."""
        return self.format_version >= 5

    @property
    def writes_listing_deltas(self) -> bool:
        """Whether a commit lists its chunks and deletion vectors by delta on its parent's (format 6)."""
        return self.format_version >= 6

    @property
    def names_dropped_chunks_in_full(self) -> bool:
        """Whether a commit record listed in full names the chunks it dropped (before format 7; see
        :attr:`Version.dropped_chunks`)."""
        return self.format_version < 7


#: Units a size may be given in: binary ones ("64MiB"), then litdata's own decimal ones ("64MB", as its
#: ``chunk_bytes``), in the order litdata tries them (``litdata.utilities.format._FORMAT_TO_RATIO``).
_SIZE_UNITS = {
    "tib": 1024**4, "gib": 1024**3, "mib": 1024**2, "kib": 1024,
    "tb": 1000**4, "gb": 1000**3, "mb": 1000**2, "kb": 1000,
    "t": 1000**4, "g": 1000**3, "m": 1000**2, "k": 1000, "b": 1,
}  # fmt: skip


def size_in_bytes(value: object, name: str = "chunk_bytes") -> object:
    """``value`` as a whole number of bytes if it is a size written with a unit (``"64MB"``, litdata's
    form, decimal; ``"64MiB"``, binary); anything else as it is, for the caller's own checks.

    A text is read as litdata's ``_convert_bytes_to_int`` reads it (case and surrounding
    spaces ignored, the number as ``float`` reads it, the bytes rounded down), so every
    size litdata takes means the same here; binary units are litstore's own.

    Raises:
        InvalidArgumentError: a text that is not a number with one of the units, or not a positive size.
    """
    if not isinstance(value, str):
        return value
    text = value.lower().strip()
    unit = next((unit for unit in _SIZE_UNITS if text.endswith(unit)), None)
    size = 0
    if unit is not None:
        try:
            size = int(float(text[: -len(unit)]) * _SIZE_UNITS[unit])
        except (ValueError, OverflowError):  # not a number, NaN or infinite
            size = 0
    if size <= 0:
        raise InvalidArgumentError(
            f"{name}: must be a positive size with a unit such as '64MB' or '64MiB' (units "
            f"{', '.join(sorted(_SIZE_UNITS))}) or a whole number of bytes, got {value!r}"
        )
    return size


def check_chunk_bytes(value: int, name: str = "chunk_bytes") -> None:
    """Refuse a chunk size that could never be written: litdata's chunk offsets are 32-bit.

    Raises:
        InvalidArgumentError: ``value`` is :data:`~litstore.format.layout.CHUNK_SIZE_LIMIT` or more.
    """
    if value >= layout.CHUNK_SIZE_LIMIT:
        raise InvalidArgumentError(
            f"{name} must be below {layout.CHUNK_SIZE_LIMIT:,} bytes (litdata's chunk offsets are 32-bit), "
            f"got {value:,}"
        )


def _check_fields(fields: dict[str, str] | None, key: str | None) -> None:
    for name, type_name in (fields or {}).items():
        field_format.check_name(name, key or "")
        canonical = field_format.check_type_name(type_name)
        if canonical != type_name:  # (a stored config names the type itself, never an alias)
            raise ValueError(f"field {name!r} has type {type_name!r}; a store config writes it {canonical!r}")
    field_format.check_distinct(fields or {})


class KeyRunRef(_Frozen):
    """One run of a version's key index on disk, as its commit record lists it."""

    #: A key run's path as :func:`litstore.format.layout.key_run` names it (checked while parsing, which a
    #: Python validator per run made a third of reading a 16M-record store's commit record).
    path: str = Field(pattern=layout.KEY_RUN_PATTERN)
    entries: int = Field(ge=0)
    size: int = Field(gt=0)

    @property
    def number(self) -> int:
        """The version that wrote the run."""
        return int(self.path[len(layout.MANIFESTS) + 1 : self.path.index("-")])


class DeletionRef(_Frozen):
    """The dead rows of one chunk of a version, as its commit record lists them (format 4).

    ``path`` is the deletions file holding the block (this version's or an earlier
    one's), ``offset``/``length`` the block in it, ``dead`` how many rows it marks and
    ``checksum`` its xxh3-64 with the chunk's path (:mod:`litstore.format.deletions`).
    """

    chunk: str
    path: str
    offset: int = Field(ge=0)
    length: int = Field(gt=0)
    dead: int = Field(gt=0)
    checksum: str = Field(pattern=r"^[0-9a-f]{16}$")

    @model_validator(mode="after")
    def _a_block(self) -> DeletionRef:
        layout.check_chunk(self.chunk)
        layout.deletions_number(self.path)
        return self


#: litdata's item offsets are 32-bit: no chunk reaches 4 GiB (writes refuse one).
CHUNK_LIMIT = 1 << 32


class ListedChunk(_Frozen):
    """One chunk a version lists, as a format-6 commit record adds it or a listing holds it.

    ``items`` and ``size`` (bytes) are what the chunk's litdata index entry says; a count no
    chunk of that size can hold (a 4-byte offset per item) is refused, never allocated.
    """

    chunk: str
    items: int = Field(ge=0)
    size: int = Field(ge=0, lt=CHUNK_LIMIT)

    @model_validator(mode="after")
    def _a_chunk(self) -> ListedChunk:
        layout.check_chunk(self.chunk)
        if self.items > self.size // 4:
            raise ValueError(f"chunk {self.chunk} is listed with {self.items} items in {self.size} bytes")
        return self


class Listing(_Frozen):
    """``manifests/<v>-<txn>.listing``: every chunk and deletion vector of format-6 version ``number``.

    gc writes one for a kept version whose chain of commit records (see
    :attr:`Version.listed_by_delta`) passes through a version it expires, as it writes a
    manifest checkpoint, so the version's listing is composed from here on up.
    """

    format_version: int = FORMAT_VERSION
    number: int = Field(ge=0)
    chunks: dict[str, tuple[ListedChunk, ...]]
    deletions: tuple[DeletionRef, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Listing:
        names = [chunk.chunk for listed in self.chunks.values() for chunk in listed]
        for split in self.chunks:
            _check_split_name(split)
        if len(set(names)) != len(names):
            raise ValueError("a listing lists a chunk once")
        _check_deletion_refs(self.deletions, self.number, set(names))
        return self


def _check_deletion_refs(refs: tuple[DeletionRef, ...], number: int, listed: set[str] | None) -> None:
    chunks = [ref.chunk for ref in refs]
    if len(set(chunks)) != len(chunks):
        raise ValueError("a version lists the deletion vector of a chunk once")
    for ref in refs:
        if layout.deletions_number(ref.path) > number:
            raise ValueError(f"deletions file {ref.path!r} is of a later version than {number}")
        if listed is not None and ref.chunk not in listed:
            raise ValueError(f"chunk {ref.chunk} is given a deletion vector but not listed")


Operation = Literal["create", "append", "upsert", "delete", "compact", "add_fields", "upgrade", "restore", "merge"]


class Version(_Frozen):
    """One committed version: the commit record ``versions/<number>.json``.

    Attributes:
        number: consecutive from 0 (the empty version ``Store.create`` commits).
        parent: the version this one was built on (``None`` for version 0).
        operation: what made it.
        counts: live records per split.
        fingerprint: order-independent hash of the live (key, content hash) pairs,
            as 32 hex digits; equal fingerprints mean equal contents.
        added, replaced, removed: keys this commit added, gave new content, removed.
        transaction: id of the write attempt that made this version; it names the
            files below (``None`` for version 0).
        fragments: fragment ids whose chunks this commit wrote.
        dropped_chunks: the parent's chunks this version no longer lists (copy-on-write,
            compaction, or every row dead). From format 7 only a record listed by delta names
            them; one listed in full leaves them out (its listing is whole: its parent's less
            its own is what it dropped; :func:`litstore.txn.race.catch_up` derives them so).
        manifest: the manifest delta this commit wrote, relative to the store root.
        checkpoint: a full manifest written with this commit, if any.
        pending_rows: delta rows composed on top of the newest checkpoint to get
            this version's manifest (0 when it has a checkpoint).
        indexes: the litdata index file of each non-empty split.
        message, metadata: what the writer said about this version.
        fields: the declared fields (name -> type) this version's manifest carries as
            columns; ``None``: those of the store config (see :func:`declared_fields`).
        key_runs: the runs of the version's key index on disk, newest first (format 3).
        deletions: the deletion vector of every chunk of the version that has dead rows
            (format 4; :mod:`litstore.format.deletions`); only those it wrote if ``listed_by_delta``.
        listed_by_delta, added_chunks: format 6, see the fields.

    Every path a commit record names is the one :mod:`litstore.format.layout` derives
    from its number and transaction; a record naming any other file is refused when
    read, so a crafted record cannot point litstore outside the store.
    """

    format_version: int = FORMAT_VERSION
    number: int = Field(ge=0)
    parent: int | None
    operation: Operation
    created_at: datetime
    counts: dict[str, int]
    fingerprint: str
    added: int = 0
    replaced: int = 0
    removed: int = 0
    transaction: str | None = None
    fragments: tuple[str, ...] = ()
    dropped_chunks: tuple[str, ...] = ()
    manifest: str | None = None
    checkpoint: str | None = None
    pending_rows: int = Field(default=0, ge=0)
    indexes: dict[str, str] = Field(default_factory=dict)
    message: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    fields: dict[str, str] | None = None
    #: The runs of the version's key index on disk, newest first (format 3; empty before).
    key_runs: tuple[KeyRunRef, ...] = ()
    #: The dead rows of each of the version's chunks that has any, by chunk (format 4); in a record
    #: ``listed_by_delta``, only those of the chunks this version marked.
    deletions: tuple[DeletionRef, ...] = ()
    #: Format 6: this record lists only what changed: ``added_chunks``, ``dropped_chunks`` and the
    #: deletion vectors it wrote; its full listing is its parent's with those applied (see
    #: :mod:`litstore.read.listings`). ``False``: ``indexes`` and ``deletions`` list everything.
    listed_by_delta: bool = False
    #: The chunks a record ``listed_by_delta`` adds to its parent's, by split, in listing order.
    added_chunks: dict[str, tuple[ListedChunk, ...]] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _without_empty_key_runs(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A record without runs or deletions leaves the field out, so litstore releases before them read it.
        data: dict[str, Any] = handler(self)
        for name in ("key_runs", "deletions", "listed_by_delta", "added_chunks"):
            if not data.get(name):
                data.pop(name, None)
        return data

    @field_validator("message", mode="before")
    @classmethod
    def _text_message(cls, message: Any) -> Any:
        return _message(message)

    @field_validator("metadata", mode="before")
    @classmethod
    def _json_metadata(cls, metadata: Any) -> Any:
        return _metadata(metadata)

    @model_validator(mode="after")
    def _paths_are_its_own(self) -> Version:
        _check_fields(self.fields, None)
        if self.transaction is None:
            if (
                self.manifest
                or self.checkpoint
                or self.indexes
                or self.fragments
                or self.dropped_chunks
                or self.listed_by_delta
                or self.added_chunks
            ):
                raise ValueError("a version without a transaction names no files")
            return self
        transaction = layout.check_transaction(self.transaction)
        if self.manifest is None and self.checkpoint is None:
            # Composing it would silently give the parent's manifest (found by tests/store/test_fuzzed_stores.py).
            raise ValueError("a version with a transaction names its manifest delta or its checkpoint")
        if self.manifest is not None and self.manifest != layout.manifest_delta(self.number, transaction):
            raise ValueError(f"manifest {self.manifest!r} is not this version's delta")
        if self.checkpoint is not None and self.checkpoint != layout.manifest_checkpoint(self.number, transaction):
            raise ValueError(f"checkpoint {self.checkpoint!r} is not this version's")
        for split, path in self.indexes.items():
            _check_split_name(split)
            if path != layout.split_index(self.number, transaction, split):
                raise ValueError(f"index {path!r} of split {split!r} is not this version's")
        for split in self.counts:
            _check_split_name(split)
        for fragment in self.fragments:
            layout.check_transaction(fragment)
        layout.check_chunks(self.dropped_chunks)
        for run in self.key_runs:
            if run.number > self.number:
                raise ValueError(f"key run {run.path!r} is of a later version than {self.number}")
        _check_deletion_refs(self.deletions, self.number, None)
        dropped = frozenset(self.dropped_chunks) if self.deletions else frozenset()
        for ref in self.deletions:
            if ref.chunk in dropped:
                raise ValueError(f"chunk {ref.chunk} is both dropped and given a deletion vector")
        self._check_delta(transaction)
        return self

    def _check_delta(self, transaction: str) -> None:
        if not self.listed_by_delta:
            if self.added_chunks:
                raise ValueError("a version listed in full names its chunks in its split indexes, not added_chunks")
            return
        if self.indexes:
            raise ValueError("a version listed by delta has no split indexes")
        own = layout.deletions(self.number, transaction)
        for ref in self.deletions:
            if ref.path != own:
                raise ValueError(f"a version listed by delta gives only the vectors it wrote, not {ref.path!r}")
        added = [chunk.chunk for listed in self.added_chunks.values() for chunk in listed]
        for split in self.added_chunks:
            _check_split_name(split)
        if len(set(added)) != len(added) or set(added) & set(self.dropped_chunks):
            raise ValueError("a version listed by delta adds each chunk once, and none it drops")

    @property
    def total(self) -> int:
        """Live records in all splits."""
        return sum(self.counts.values())

    def __repr__(self) -> str:
        changes = f"+{self.added} ~{self.replaced} -{self.removed}"
        said = f" {self.message!r}" if self.message else ""
        return (
            f"<Version {self.number} {self.operation} {self.created_at:%Y-%m-%d %H:%M:%S} UTC: {changes}, "
            f"{self.total} records{said}>"
        )

    __str__ = __repr__

    def __int__(self) -> int:
        return self.number

    def __index__(self) -> int:
        return self.number

    # A Version compares with an int as its number (``store.version == 4``, as Lance's and
    # Delta's int versions do) and orders with ints and Versions by number; two Versions
    # are equal when their commit records are. Hashing the number keeps both consistent.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Version):
            return super().__eq__(other)
        number = _plain_int(other)
        return NotImplemented if number is None else self.number == number  # type: ignore[return-value]

    def __hash__(self) -> int:
        return hash(self.number)

    def __lt__(self, other: object) -> bool:
        number = _number_of(other)
        return NotImplemented if number is None else self.number < number  # type: ignore[return-value]

    def __le__(self, other: object) -> bool:
        number = _number_of(other)
        return NotImplemented if number is None else self.number <= number  # type: ignore[return-value]

    def __gt__(self, other: object) -> bool:
        number = _number_of(other)
        return NotImplemented if number is None else self.number > number  # type: ignore[return-value]

    def __ge__(self, other: object) -> bool:
        number = _number_of(other)
        return NotImplemented if number is None else self.number >= number  # type: ignore[return-value]


def _plain_int(value: object) -> int | None:
    """``value`` as an int if it is a whole number that is not a bool, else ``None``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _number_of(value: object) -> int | None:
    """The version number ``value`` stands for in an ordering: a Version's, or a plain int; else ``None``."""
    return value.number if isinstance(value, Version) else _plain_int(value)


def check_message(message: object) -> str | None:
    """``message`` if it can be a version's message (text or ``None``), else raise.

    Raises:
        InvalidArgumentError: ``message`` is not a str, or holds text UTF-8 cannot encode.
    """
    try:
        return _message(message)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


def check_metadata(metadata: object) -> dict[str, Any]:
    """``metadata`` as a version will hold it, or raise saying which value cannot be held.

    Metadata is a ``dict`` of ``str`` keys to JSON values: ``str``, ``int``, ``float``,
    ``bool``, ``None``, and ``list``/``dict`` of those (at most 32 levels deep), so that
    it reads back exactly as written. NumPy scalars become the Python number they equal
    (``np.float32(0.5)`` -> ``0.5``; one a float64 cannot hold exactly, such as a
    ``longdouble``, is refused). NaN and infinities are refused: JSON has neither, and
    they would read back as ``None``. Tuples, bytes and other objects are refused,
    each with what to pass instead. ``None`` is ``{}``.

    Raises:
        InvalidArgumentError: a key or value cannot be held (the message names it).
    """
    try:
        return _metadata(metadata)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


_METADATA_DEPTH = 32
_INSTEAD: dict[type, str] = {
    bytes: "decode it to str, or base64 it",
    bytearray: "decode it to str, or base64 it",
    tuple: "pass a list (a tuple would read back as one)",
    set: "pass a sorted list",
    frozenset: "pass a sorted list",
}


def _message(message: Any) -> str | None:
    if message is None:
        return None
    if not isinstance(message, str):
        raise ValueError(f"message must be a str or None, got {type(message).__name__} {_shown(message)}")
    return _text(message, "message")


def _metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict of str keys to JSON values, got {type(metadata).__name__}")
    plain = _json_value(metadata, "metadata", 0)
    assert isinstance(plain, dict)
    return plain


def _json_value(value: Any, path: str, depth: int) -> Any:
    """``value`` as plain JSON values (see :func:`check_metadata`); ``ValueError`` naming ``path`` if it has none."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, numbers.Integral):  # int and numpy integers
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise ValueError(
                f"{path} is {value}: JSON has no NaN or infinity, and it would read back as None; "
                "pass None or a string such as 'nan'"
            )
        number = float(value)
        if number != value:
            raise ValueError(f"{path} is {type(value).__name__} {value!r}, which a float64 cannot hold exactly")
        return number
    if isinstance(value, str):
        return _text(value, path)
    if depth >= _METADATA_DEPTH:
        raise ValueError(f"{path} is nested more than {_METADATA_DEPTH} levels deep (or holds itself)")
    if isinstance(value, list):
        return [_json_value(item, f"{path}[{number}]", depth + 1) for number, item in enumerate(value)]
    if isinstance(value, dict):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(
                    f"{path} has the key {_shown(key)} ({type(key).__name__}): metadata keys are str, "
                    f"as JSON's are; use {str(key)!r}"
                )
            plain[_text(key, f"a key of {path}")] = _json_value(item, f"{path}[{key!r}]", depth + 1)
        return plain
    instead = _INSTEAD.get(type(value), "convert it to one of those")
    raise ValueError(
        f"{path} is {type(value).__name__} {_shown(value)}: metadata values are str, int, float, bool, None, "
        f"and lists and dicts of those; {instead}"
    )


def _text(text: str, path: str) -> str:
    """``text`` as a plain ``str``, if UTF-8 can encode it (a lone surrogate cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        unencodable = exc.object[exc.start : exc.end]
        raise ValueError(f"{path} holds {unencodable!r}, which is not text UTF-8 can encode") from None
    return str.__str__(text)


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def declared_fields(config: StoreConfig, version: Version) -> dict[str, str]:
    """The fields ``version``'s manifest carries: its own set, else the store's from creation."""
    return config.fields if version.fields is None else version.fields


class ExpiredVersion(_Frozen):
    """What ``versions/<number>.json`` holds once gc expired that version: a tombstone.

    Keeping a tombstone (not deleting the record) means the number can never be
    committed again, and a writer that was behind sees that history was expired.
    """

    format_version: int = FORMAT_VERSION
    number: int = Field(ge=0)
    expired: Literal[True] = True
    expired_at: datetime


def _record_kind(value: Any) -> str:
    expired = value.get("expired") if isinstance(value, dict) else getattr(value, "expired", None)
    return "expired" if expired is True else "version"


#: What ``versions/<number>.json`` holds: a live commit record or a gc tombstone,
#: told apart by the tombstone's ``expired`` field.
CommitRecord = Annotated[
    Annotated[Version, pydantic.Tag("version")] | Annotated[ExpiredVersion, pydantic.Tag("expired")],
    Discriminator(_record_kind),
]
COMMIT_RECORD: TypeAdapter[Version | ExpiredVersion] = TypeAdapter(CommitRecord)


class FragmentLease(_Frozen):
    """``fragments/<fragment>/lease-<holder>.json``: gc removes none of the fragment's files while it holds.

    A lease holds for ``seconds`` after the storage wrote the file (its modification
    time on the storage's own clock, never a writer's): ``taken_at`` is the holder's
    clock, for people reading it. The stager takes one, and so does a commit that
    publishes a fragment staged long ago; a commit that published the fragment removes
    them (a committed fragment is kept by the versions that list it).
    """

    format_version: int = FORMAT_VERSION
    fragment: str
    holder: str
    seconds: float = Field(gt=0, le=366 * 24 * 3600)
    taken_at: datetime


_TAG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}")


def check_tag_name(name: object) -> str:
    """Return ``name`` if it is a valid tag name, else raise ``ValueError`` saying why."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"tag name must be a non-empty string, got {name!r}")
    if len(name) > 128:
        raise ValueError(f"tag name is {len(name)} characters long; at most 128 are allowed")
    if name.isdigit():
        raise ValueError(f"tag name {name!r} is all digits and would read as a version number")
    if not _TAG_NAME.fullmatch(name):
        raise ValueError(
            f"tag name {name!r} may hold only letters, digits and '_', '.', '@', '+', '-' "
            "(no path separators), and must not start with a punctuation mark"
        )
    return name


class Tag(_Frozen):
    """``tags/<name>.json``: a name for a version."""

    format_version: int = FORMAT_VERSION
    name: str
    version: int = Field(ge=0)
    created_at: datetime

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        return check_tag_name(name)


#: The line of versions a store has before any branch: its own ``versions/``.
MAIN_BRANCH = "main"


def check_branch_name(name: object) -> str:
    """Return ``name`` if it is a valid branch name (a tag name other than ``main``), else raise ``ValueError``."""
    try:
        check_tag_name(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace("tag name", "branch name")) from None
    if name == MAIN_BRANCH:
        raise ValueError(f"{MAIN_BRANCH!r} is the store's own line of versions, not a branch one can create")
    return str(name)


class Branch(_Frozen):
    """``branches/<name>/branch.json``: a line of versions that starts from version ``from_version`` of ``base``.

    The branch's own commit records are ``branches/<name>/versions/<n>.json`` for ``n`` above
    ``from_version``; numbers up to it are ``base``'s versions (see
    :mod:`litstore.storage.branched`). Written once with put-if-absent, never changed.
    """

    format_version: int = FORMAT_VERSION
    name: str
    base: str
    from_version: int = Field(ge=0)
    created_at: datetime

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        return check_branch_name(name)

    @field_validator("base")
    @classmethod
    def _valid_base(cls, base: str) -> str:
        return base if base == MAIN_BRANCH else check_branch_name(base)
