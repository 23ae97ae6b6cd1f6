"""The manifest's format: its columns, the kinds of change a delta records, Parquet bytes.

Columns of a manifest (one row per live record)::

    key           str or int64   the record's key
    key_hash      uint64         hashing.key_hash(key); not stored in files of format 2 stores
    content_hash  binary(16)     hashing.content_hash(canonical encoding)
    split         str            the split the record belongs to
    chunk         str            chunk file, relative to the store root
    row           uint32         item index inside the chunk

then one nullable column per declared field of the version, in declaration order
(see :mod:`litstore.format.fields`). Rows a writer holds in memory (staged fragments,
commit plans) keep ``chunk`` dictionary-encoded (:data:`HELD_CHUNK`); files always
hold plain strings. Files of stores of format 2 leave ``key_hash`` out (a record costs
8-10 bytes less); files of format 1 hold it. Either way readers never read it: they
derive it from the key (:func:`~litstore.format.hashing.key_hash_array`), so every key
hash in memory is its key's and no later step checks it again, whatever a file holds.

A delta (``manifests/<v>-<txn>.parquet``) holds what version ``v`` changed, with two
more columns: ``change`` (a :class:`ChangeKind` value) and ``version`` (``v``). The
manifest of version ``v`` is, for each key, the rows of the newest delta up to ``v``
that mentions it, unless those are deletions (see :func:`litstore.read.manifests.compose`).

A delta of a format-4 store also holds ``old-content-hash`` (:data:`OLD_CONTENT_HASH`,
binary(16), nullable): on a ``replaced`` row, the content hash of the parent's row it
supersedes; null on every other row (an added key had none, a deleted row's own
``content_hash`` is the one that leaves, a moved row keeps its content). A diff of near
versions takes the older version's row of a replaced key from it instead of looking the
key up in the key runs. Deltas written before it existed lack the column: readers that
ask for it get nulls (:func:`columns_from_parquet`), and every other reader leaves it
out. Its name has hyphens, which no declared field's name may have, so no field shadows it.
Pure: no I/O beyond bytes in and out.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import StrEnum
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from litstore.errors import IntegrityError
from litstore.format import hashing
from litstore.format.fields import arrow_type

MANIFEST_COLUMNS = ("key", "key_hash", "content_hash", "split", "chunk", "row")
#: A format-4 delta's column of the content hashes its replaced rows supersede (see the module docstring).
OLD_CONTENT_HASH = "old-content-hash"

# A chunk name is ~64 characters and a chunk holds thousands of records: as plain
# strings the chunk column alone takes more memory than all the other columns together
# (~135 MiB for 2,000,000 records), dictionary-encoded 4 bytes a record.
HELD_CHUNK = pa.dictionary(pa.int32(), pa.string())

# Rows of a held table written to Parquet at a time (one row group each): its plain
# chunk strings exist for one slice at a time.
_SLICE_ROWS = 1 << 16


class ChangeKind(StrEnum):
    """What a delta row says happened to its key in that version."""

    ADDED = "added"  # a key the parent did not have
    REPLACED = "replaced"  # new content for a key the parent had
    MOVED = "moved"  # same content, rewritten by a chunk copy-on-write
    DELETED = "deleted"  # the key left the version


def schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of a manifest whose keys are ``key_type`` (``"str"``/``"int"``) with declared ``fields``."""
    columns = [
        ("key", pa.string() if key_type == "str" else pa.int64()),
        ("key_hash", pa.uint64()),
        ("content_hash", pa.binary(16)),
        ("split", pa.string()),
        ("chunk", pa.string()),
        ("row", pa.uint32()),
    ]
    columns.extend((name, arrow_type(type_name)) for name, type_name in (fields or {}).items())
    return pa.schema(columns)


def held_schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    """:func:`schema` with ``chunk`` dictionary-encoded: manifest rows as a writer holds them in memory."""
    plain = schema(key_type, fields)
    return plain.set(plain.get_field_index("chunk"), pa.field("chunk", HELD_CHUNK))


def held_delta_schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    """:func:`delta_schema` with ``chunk`` dictionary-encoded (see :func:`held_schema`)."""
    plain = delta_schema(key_type, fields)
    return plain.set(plain.get_field_index("chunk"), pa.field("chunk", HELD_CHUNK))


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded columns decoded, as files and queries hold them."""
    target = pa.schema(
        field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
        for field in table.schema
    )
    return table if target == table.schema else table.cast(target)


def chunk_codes(column: pa.Array | pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """A ``chunk`` column (plain or dictionary-encoded) as its distinct names and each row's number among them."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    return array.dictionary.to_pylist(), array.indices.to_numpy(zero_copy_only=False)


def columns(fields: dict[str, str] | None = None) -> list[str]:
    """The names of a manifest's columns: the fixed ones, then the declared ``fields``."""
    return [*MANIFEST_COLUMNS, *(fields or {})]


def delta_schema(key_type: str, fields: dict[str, str] | None = None) -> pa.Schema:
    return schema(key_type, fields).append(pa.field("change", pa.string())).append(pa.field("version", pa.int64()))


def empty(key_type: str, fields: dict[str, str] | None = None) -> pa.Table:
    return schema(key_type, fields).empty_table()


def make_delta(
    key_type: str,
    version: int,
    columns: dict[str, Any],
    changes: Sequence[ChangeKind],
    fields: dict[str, str] | None = None,
) -> pa.Table:
    """A delta table from manifest ``columns`` (fixed ones and ``fields``) and the change of each row."""
    count = len(columns["key"])
    target = schema(key_type, fields)
    arrays = [pa.array(columns[field.name], type=field.type) for field in target]
    arrays.append(pa.array([str(change) for change in changes], type=pa.string()))
    arrays.append(pa.array([version] * count, type=pa.int64()))
    return pa.Table.from_arrays(arrays, schema=delta_schema(key_type, fields))


_UNIQUE_COLUMNS = frozenset(("key", "key_hash", "content_hash", OLD_CONTENT_HASH))


def with_old_content_hashes(delta: pa.Table, keys: Sequence[Any], hashes: Sequence[bytes]) -> pa.Table:
    """``delta`` with :data:`OLD_CONTENT_HASH`: on each ``replaced`` row, the hash of ``hashes`` at its key's
    place in ``keys`` (the parent's rows it supersedes), else null.

    Raises:
        ValueError: a replaced row's key is not among ``keys``.
    """
    key_type = delta.schema.field("key").type
    old_keys = pa.array(list(keys), key_type)
    replaced = pc.equal(delta.column("change"), str(ChangeKind.REPLACED))
    place = pc.index_in(delta.column("key"), value_set=old_keys)
    if pc.any(pc.and_kleene(replaced, pc.is_null(place))).as_py():
        raise ValueError("a replaced row's key is not among the superseded rows' keys")
    place = pc.if_else(replaced, place, pa.scalar(None, place.type))
    old = pa.array(list(hashes), pa.binary(16)).take(place)
    return delta.append_column(pa.field(OLD_CONTENT_HASH, pa.binary(16)), old)


def to_parquet(table: pa.Table, *, key_hash: bool) -> bytes:
    """The Parquet bytes of ``table``, its dictionary-encoded columns stored as plain ones.

    ``key_hash``: whether to store that column (stores of format 1) or leave it out.
    Written in slices, so a held table is decoded one slice at a time, never whole.

    Raises:
        OSError: the temporary file the bytes are spooled through cannot be written.
    """
    if not key_hash and "key_hash" in table.column_names:
        table = table.drop_columns(["key_hash"])
    target = decoded(table.slice(0, 0)).schema
    options = _options(target)
    if table.num_rows <= _SLICE_ROWS:  # one row group, a small file: made in memory
        # A small delta's footer was a third of its bytes (1.5 of 4.4 KB for 100 rows): no copy of
        # the Arrow schema (every reader casts to the manifest's, and its types are Parquet's
        # own) and no statistics but ``change``'s, the only ones a reader uses (to skip groups).
        options["store_schema"] = False
        options["write_statistics"] = ["change"] if "change" in target.names else False
        buffer = pa.BufferOutputStream()
        pq.write_table(decoded(table), buffer, row_group_size=_SLICE_ROWS, **options)
        return bytes(buffer.getvalue())
    # Spooled through a file: the bytes exist once, not again in a growing buffer.
    with tempfile.TemporaryFile() as spool:
        if target == table.schema:
            # Row groups of _SLICE_ROWS either way: readers skip the groups they do not need.
            pq.write_table(table.cast(target), spool, row_group_size=_SLICE_ROWS, **options)
        else:
            with pq.ParquetWriter(spool, target, **options) as writer:
                for start in range(0, table.num_rows, _SLICE_ROWS):
                    writer.write_table(decoded(table.slice(start, _SLICE_ROWS)))
        spool.seek(0)
        return spool.read()


def _options(target: pa.Schema) -> dict[str, Any]:
    """The Parquet writer's options for a file of ``target``'s columns."""
    # Dictionaries only where values repeat (a dictionary of unique keys or hashes costs
    # bytes and time in every row group); delta encodings where neighbours are close
    # (row numbers, sorted key hashes, keys sharing prefixes).
    encodings = {"row": "DELTA_BINARY_PACKED", "key_hash": "DELTA_BINARY_PACKED"}
    if "key" in target.names:
        encodings["key"] = "DELTA_BYTE_ARRAY" if pa.types.is_string(target.field("key").type) else "DELTA_BINARY_PACKED"
    return {
        "compression": "zstd",
        "use_dictionary": [name for name in target.names if name not in _UNIQUE_COLUMNS and name not in encodings],
        "column_encoding": {name: encoding for name, encoding in encodings.items() if name in target.names},
    }


def write_parquet(parts: Iterable[pa.Table], schema: pa.Schema, file: BinaryIO, *, key_hash: bool) -> int:
    """Write the rows of ``parts`` (tables of ``schema``, plain columns) into ``file`` as the Parquet file
    :func:`to_parquet` makes of them all; the rows written.

    For a checkpoint of a version too large to hold (:mod:`litstore.txn.checkpoint`):
    rows are written in row groups of :data:`_SLICE_ROWS` as they come, so what is held
    is one group and the writer's buffers, however many rows the file gets.
    """
    if not key_hash and "key_hash" in schema.names:
        schema = schema.remove(schema.get_field_index("key_hash"))
    held: list[pa.Table] = []
    count = written = 0
    with pq.ParquetWriter(file, schema, **_options(schema)) as writer:
        for part in itertools.chain(parts, [None]):
            if part is not None:
                held.append(part.select(schema.names))
                count += part.num_rows
            if count >= _SLICE_ROWS or (part is None and count):
                table = pa.concat_tables(held)
                whole = count if part is None else count // _SLICE_ROWS * _SLICE_ROWS
                for start in range(0, whole, _SLICE_ROWS):
                    writer.write_table(table.slice(start, min(_SLICE_ROWS, whole - start)))
                held, count, written = [table.slice(whole)], count - whole, written + whole
    return written


def from_parquet(
    data: bytes,
    path: str,
    key_type: str,
    delta: bool,
    fields: dict[str, str] | None = None,
    row_groups: Sequence[int] | None = None,
) -> pa.Table:
    """Read a manifest (``delta=False``) or delta file, checked against its schema (with ``fields``).

    ``row_groups``: read only these (default: all); see :func:`row_groups_needed`.

    Raises:
        IntegrityError: the file at ``path`` is damaged or does not have the manifest's columns.
    """
    expected = delta_schema(key_type, fields) if delta else schema(key_type, fields)
    try:
        # Reading the repetitive string columns as dictionaries, then decoding them, is
        # about 7x faster than letting Parquet decode them row by row.
        # ParquetFile, not read_table: read_table imports pyarrow.dataset (and with it pandas), ~0.4 s once.
        file = pq.ParquetFile(pa.BufferReader(data), read_dictionary=["split", "chunk"])
        names = [name for name in file.schema_arrow.names if name != "key_hash"]
        table = file.read(columns=names) if row_groups is None else file.read_row_groups(row_groups, columns=names)
        table = _as_expected(table, expected)
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
    if delta:
        _check_changes(table, path)
    return table


def row_groups_from_parquet(
    data: bytes | BinaryIO,
    path: str,
    key_type: str,
    delta: bool,
    fields: dict[str, str] | None = None,
    key_hash: bool = True,
) -> Iterator[pa.Table]:
    """:func:`from_parquet`, one row group at a time: every column, each group checked as that checks a file.

    For readers that stream every row of a large file (``sql()`` on a large version),
    holding one row group's rows (:data:`_SLICE_ROWS` as litstore writes them) at a time.
    ``data``: the file's bytes, or the file open for reading. ``key_hash=False``: the
    groups come without the ``key_hash`` column, not derived (hashing every key of a
    checkpoint was a fifth of writing the next one, which does not store them).

    Raises:
        IntegrityError: the file at ``path`` is damaged or does not have the manifest's columns.
    """
    expected = delta_schema(key_type, fields) if delta else schema(key_type, fields)
    if not key_hash:
        expected = expected.remove(expected.get_field_index("key_hash"))
    source = data if hasattr(data, "read") else pa.BufferReader(data)  # (a file is read a group at a time)
    try:
        file = pq.ParquetFile(source, read_dictionary=["split", "chunk"])
        names = [name for name in file.schema_arrow.names if name != "key_hash"]
        groups = file.num_row_groups
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
    for group in range(groups):
        try:
            table = _as_expected(file.read_row_group(group, columns=names), expected)
        except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
            raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
        if delta:
            _check_changes(table, path)
        yield table


def _as_expected(table: pa.Table, expected: pa.Schema) -> pa.Table:
    """``table`` as read from a file (dictionary-encoded strings, no ``key_hash``) in the ``expected`` schema
    (``key_hash`` derived if it has one).

    Raises:
        KeyError, ValueError, pa.ArrowException: a column is missing, or of a type that does not cast.
    """
    plain = [
        field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
        for field in table.schema
    ]
    derive = "key_hash" in expected.names
    table = _with_key_hash(table.cast(pa.schema(plain)), expected.field("key").type, derive)
    return table.select(list(expected.names)).cast(expected)


def _check_changes(table: pa.Table, path: str) -> None:
    """Raise :class:`IntegrityError` if a row of the delta ``table`` (read from ``path``) has an unknown change."""
    kinds = set(table.column("change").unique().to_pylist())
    if not kinds <= {str(kind) for kind in ChangeKind}:
        raise IntegrityError(f"manifest file {path} is damaged: unknown change kinds {sorted(map(str, kinds))}")


def row_groups_needed(data: bytes, path: str, key_type: str, superseded: Callable[[pa.Table], np.ndarray]) -> list[int]:
    """The row groups of a manifest file that hold a row ``superseded`` does not mark.

    ``superseded`` gets the file's ``key`` and ``key_hash`` columns (derived as
    :func:`from_parquet` derives them), read once, and returns a mask of the rows newer
    files replace: a checkpoint that a rewrite superseded is then read only for its keys.

    Raises:
        IntegrityError: the file at ``path`` is damaged.
    """
    key_arrow_type = schema(key_type).field("key").type
    try:
        file = pq.ParquetFile(pa.BufferReader(data))
        gone = superseded(_with_key_hash(file.read(columns=["key"]), key_arrow_type))  # one pass over every key
        counts = [file.metadata.row_group(group).num_rows for group in range(file.num_row_groups)]
        starts = np.cumsum([0, *counts])
        return [group for group in range(len(counts)) if not gone[starts[group] : starts[group + 1]].all()]
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc


#: The columns :func:`columns_from_parquet` leaves dictionary-encoded.
READ_ENCODED = ("split", "change")


def columns_from_parquet(
    data: bytes, path: str, key_type: str, names: Sequence[str], skip: ChangeKind | None = None
) -> pa.Table:
    """Only the columns ``names`` of a manifest or delta file (fixed columns, or a delta's ``change`` and
    :data:`OLD_CONTENT_HASH`, all null where the file lacks that column).

    For readers of many rows that keep few of them (a diff needs key, content hash,
    split and change of the rows a commit touched): decoding only those columns, and
    leaving ``split`` and ``change`` dictionary-encoded (:data:`READ_ENCODED`) until
    the reader has filtered, costs a fraction of :func:`from_parquet`. With ``skip``,
    a delta's row groups whose statistics say every row has that change are not read
    at all (a writer that puts the ``moved`` rows of a large rewrite together in row
    groups of their own lets a diff skip them).

    Raises:
        IntegrityError: the file at ``path`` is damaged, lacks one of ``names``, or has a row without a key.
    """
    expected = delta_schema(key_type).append(pa.field(OLD_CONTENT_HASH, pa.binary(16)))
    target = pa.schema(
        [
            field.with_type(pa.dictionary(pa.int32(), field.type)) if field.name in READ_ENCODED else field
            for field in (expected.field(name) for name in names)
        ]
    )
    try:
        encoded = [name for name in READ_ENCODED if name in names]
        file = pq.ParquetFile(pa.BufferReader(data), read_dictionary=encoded)
        groups = list(range(file.num_row_groups))
        if skip is not None:
            groups = [group for group in groups if not _all_of(file.metadata.row_group(group), "change", str(skip))]
        read = [name for name in names if name != "key_hash"]  # derived from the keys, never read
        if "key_hash" in names and "key" not in read:
            read.append("key")
        lacking = OLD_CONTENT_HASH in read and OLD_CONTENT_HASH not in file.schema_arrow.names
        if lacking:  # a delta written before the column existed
            read.remove(OLD_CONTENT_HASH)
        table = file.read_row_groups(groups, columns=read)
        if lacking:
            table = table.append_column(OLD_CONTENT_HASH, pa.nulls(table.num_rows, pa.binary(16)))
        table = _with_key_hash(table, expected.field("key").type, derive="key_hash" in names)
        table = table.select(list(names)).cast(target)
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
    if "change" in names:
        kinds = {kind for chunk in table.column("change").chunks for kind in chunk.dictionary.to_pylist()}
        if not kinds <= {str(kind) for kind in ChangeKind}:
            raise IntegrityError(f"manifest file {path} is damaged: unknown change kinds {sorted(map(str, kinds))}")
    return table


def row_groups_of_parquet(
    data: bytes | pa.NativeFile, path: str, key_type: str, names: Sequence[str], delta: bool
) -> Iterator[pa.Table]:
    """The columns ``names`` (fixed ones, or a delta's ``change``) of a manifest or delta file, one row group at
    a time: for readers that stream a large file and keep little of each row (``verify``).

    Checked as :func:`columns_from_parquet` checks them; ``split``, ``chunk`` and
    ``change`` stay dictionary-encoded. ``key_hash`` is never read (nor derived).

    Raises:
        IntegrityError: the file at ``path`` is damaged, lacks one of ``names``, or has a row without a key.
    """
    expected = delta_schema(key_type) if delta else schema(key_type)
    encoded = ("split", "chunk", "change")
    target = pa.schema(
        [
            field.with_type(pa.dictionary(pa.int32(), field.type)) if field.name in encoded else field
            for field in (expected.field(name) for name in names)
        ]
    )
    try:
        source = data if isinstance(data, pa.NativeFile) else pa.BufferReader(data)  # (a file: read by ranges)
        file = pq.ParquetFile(source, read_dictionary=[name for name in encoded if name in names])
        groups = file.num_row_groups
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:  # (KeyError: a column's name damaged)
        raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
    for group in range(groups):
        try:
            table = file.read_row_group(group, columns=list(names))
            table = _with_key_hash(table, expected.field("key").type, derive=False).select(list(names)).cast(target)
        except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
            raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc
        if "change" in names:
            kinds = {kind for chunk in table.column("change").chunks for kind in chunk.dictionary.to_pylist()}
            if not kinds <= {str(kind) for kind in ChangeKind}:
                raise IntegrityError(f"manifest file {path} is damaged: unknown change kinds {sorted(map(str, kinds))}")
        yield table


def _with_key_hash(table: pa.Table, key_type: pa.DataType, derive: bool = True) -> pa.Table:
    """``table`` (read without any ``key_hash`` column) with its keys of the store's ``key_type``, and (``derive``)
    its ``key_hash`` column derived from them.

    A key column of another kind (numbers in a store of text keys, or the reverse) is
    refused rather than converted: its hashes would be those of other keys.
    """
    if "key" not in table.column_names:
        return table
    keys = table.column("key")
    if keys.null_count:  # a keyless row names no record (a diff would report it as added or removed)
        raise ValueError(f"{keys.null_count} of its rows have no key")
    text = pa.types.is_string(key_type)
    if not (
        pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type) if text else pa.types.is_integer(keys.type)
    ):
        raise ValueError(f"its keys are of type {keys.type}, the store's are {key_type}")
    keys = keys.cast(key_type)
    table = table.set_column(table.schema.get_field_index("key"), "key", keys)
    if not derive:
        return table
    hashes = hashing.key_hash_array(keys)
    return table.add_column(min(1, table.num_columns), "key_hash", pa.array(hashes, pa.uint64()))


def _all_of(group: pq.RowGroupMetaData, name: str, value: str) -> bool:
    """Whether the statistics of row group ``group`` say every value of column ``name`` is ``value``."""
    for index in range(group.num_columns):
        column = group.column(index)
        if column.path_in_schema == name:
            stats = column.statistics
            return bool(
                stats is not None and stats.has_min_max and stats.null_count == 0 and stats.min == stats.max == value
            )
    return False
