"""Set operations on manifest rows for writes and ``verify``, and the only module that imports DuckDB.

Two kinds of question, on Arrow tables of the columns described in
:mod:`litstore.format.manifest`:

- lookups a write plans with, done with Arrow's own hash lookups and numpy (a DuckDB
  connection costs tens of milliseconds to open, more than most of them): which rows
  hold given keys (:func:`rows_for_keys`, :func:`key_mask`), which rows live in
  given chunks (:func:`rows_in_chunks`), which keys a delta touched
  (:func:`touched_keys`);
- joins in DuckDB: the user's ``sql()`` (:func:`query`) and ``verify``'s
  (:func:`reconcile`, :func:`duplicate_keys`, :func:`keys_not_in`). DuckDB is
  imported on first use, not with litstore.

Which rows a version holds is :mod:`litstore.read.manifests`'s question, what changed
between two versions :mod:`litstore.ops.diff`'s.

:func:`query` (which runs the user's ``sql()``) uses a sandboxed connection: no
file system or network access (``COPY ... TO``, ``read_text``, ``ATTACH``,
``INSTALL``/``LOAD`` all fail), no lookup of Python variables by name, and the
configuration locked so that the query cannot lift those limits. It sees only the
tables it is given.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litstore.format import hashing
from litstore.format.manifest import ChangeKind, chunk_codes


def __getattr__(name: str) -> Any:
    # ``query.DatabaseError`` is DuckDB's error base, resolved without importing DuckDB early.
    if name == "DatabaseError":
        import duckdb

        return duckdb.Error
    raise AttributeError(name)


#: DuckDB settings of the connection :func:`query` runs on: see the module docstring.
SANDBOX = {"enable_external_access": False, "python_enable_replacements": False, "lock_configuration": True}


def query(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """Run ``sql`` with each of ``tables`` visible under its name; returns an Arrow table.

    The query runs in the sandbox of the module docstring: it reads only ``tables``
    and writes nothing outside DuckDB's memory.

    Raises:
        duckdb.Error: the query is invalid or tried to leave the sandbox (callers translate it).
    """
    import duckdb

    with duckdb.connect(config=dict(SANDBOX)) as connection:
        for name, table in tables.items():
            connection.register(name, table)
        return connection.sql(sql).to_arrow_table()


#: DuckDB's memory limit when :func:`query_streamed` loads a table: past it, DuckDB spills to a private temp directory.
STREAMED_MEMORY_LIMIT = "256MB"


def query_streamed(sql: str, name: str, schema: pa.Schema, parts: Iterable[pa.Table]) -> pa.Table:
    """Run ``sql`` with the rows of ``parts`` (tables of ``schema``) visible as table ``name``, held by DuckDB.

    For tables too large to hold whole in Arrow (a large version's manifest, streamed a
    row group at a time): DuckDB loads them into a temporary table of its own, since a
    stream can be scanned once and a query may scan ``name`` twice (a self-join, a
    subquery). DuckDB holds at most :data:`STREAMED_MEMORY_LIMIT` and spills the rest to a
    temporary directory of its own, removed afterwards. The sandbox is the one
    :func:`query` runs in, set before the table is loaded: the query still cannot reach a
    file (the spill directory included) or change a setting.

    Raises:
        duckdb.Error: the query is invalid or tried to leave the sandbox (callers translate it).
        Exception: whatever reading ``parts`` raised (an ``IntegrityError``), as it was raised.
    """
    import duckdb

    failures: list[BaseException] = []

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for part in parts:
                yield from part.to_batches()
        except BaseException as exc:  # DuckDB would turn it into its own error: kept to raise as it was
            failures.append(exc)
            raise

    with tempfile.TemporaryDirectory(prefix="litstore-sql-") as spill:
        with duckdb.connect(config={"memory_limit": STREAMED_MEMORY_LIMIT, "temp_directory": spill}) as connection:
            # Set one by one, in order, after the spill settings: DuckDB refuses a temp_directory
            # once external access is off, and does not apply a config dict's entries in order.
            for setting, value in {"enable_progress_bar": False, **SANDBOX}.items():
                connection.execute(f"SET {setting} = {str(value).lower()}")
            source = f"litstore_rows_{secrets.token_hex(8)}"  # the reader, scanned once, then dropped
            connection.register(source, pa.RecordBatchReader.from_batches(schema, batches()))
            try:
                connection.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{source}"')
            except duckdb.Error:
                if failures:
                    raise failures[0] from None
                raise
            finally:
                connection.unregister(source)
            return connection.sql(sql).to_arrow_table()


def duplicate_keys(table: pa.Table, hashes_are_true: bool = False) -> list[Any]:
    """Keys that appear in more than one row of ``table``.

    With ``hashes_are_true`` (rows litstore just computed, never rows read from a store)
    the ``key_hash`` column is first looked at with numpy: without two equal hashes
    there can be no equal keys, and DuckDB is not needed.
    """
    if hashes_are_true:
        hashes = np.sort(table.column("key_hash").to_numpy())
        if not bool((hashes[1:] == hashes[:-1]).any()):
            return []
    result = query('SELECT "key" FROM t GROUP BY "key" HAVING count(*) > 1 ORDER BY "key"', {"t": table})
    return list(result.column(0).to_pylist())


def keys_not_in(left: pa.Table, right: pa.Table) -> list[Any]:
    """Distinct keys of ``left`` absent from ``right`` (both need a ``key`` column)."""
    sql = 'SELECT DISTINCT "key" FROM l ANTI JOIN r USING ("key") ORDER BY "key"'
    return list(query(sql, {"l": left, "r": right}).column(0).to_pylist())


def reconcile(listed: pa.Table, stored: pa.Table) -> dict[str, pa.Table]:
    """Match manifest rows (``listed``) with rows read from the chunks (``stored``).

    Both tables have ``chunk``, ``row``, ``key``, ``content_hash`` and ``split``.
    Returns ``missing`` (listed, not stored), ``unlisted`` (stored, not listed) and
    ``mismatched`` (both, but key, content hash or split differ).
    """
    tables = {"listed": listed, "stored": stored}
    return {
        "missing": query(
            'SELECT "key", "chunk", "row" FROM listed ANTI JOIN stored USING ("chunk", "row") ORDER BY "chunk", "row"',
            tables,
        ),
        "unlisted": query(
            'SELECT "key", "chunk", "row" FROM stored ANTI JOIN listed USING ("chunk", "row") ORDER BY "chunk", "row"',
            tables,
        ),
        "mismatched": query(
            """SELECT l."key", l."chunk", l."row",
                      CASE WHEN l."key" IS DISTINCT FROM s."key" THEN 'key'
                           WHEN l."split" <> s."split" THEN 'split'
                           ELSE 'content' END AS problem
               FROM listed l JOIN stored s USING ("chunk", "row")
               WHERE l."key" IS DISTINCT FROM s."key" OR l."content_hash" <> s."content_hash"
                     OR l."split" <> s."split"
               ORDER BY l."chunk", l."row\"""",
            tables,
        ),
    }


def rows_for_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """The rows of ``table`` whose key is in ``keys`` (distinct), with a ``position`` column into ``keys``, by position.

    Arrow's hash lookup rather than a DuckDB join: a write plans with it, and a DuckDB
    connection costs tens of milliseconds to open.
    """
    column = table.column("key")
    wanted = keys.cast(column.type) if keys.type != column.type else keys
    positions = pc.index_in(column, value_set=wanted, skip_nulls=True)
    hit = pc.is_valid(positions)
    found, where = table.filter(hit), positions.filter(hit).cast(pa.int64())
    order = pc.sort_indices(where)
    return found.take(order).add_column(0, "position", where.take(order))


def rows_in_chunks(table: pa.Table, chunks: Sequence[str], excluded: np.ndarray | None = None) -> pa.Table:
    """The rows of ``table`` stored in any of ``chunks``, by chunk name and row (looked at as chunk numbers).

    ``excluded``: a mask of rows to leave out even so (taking the rest once costs less than
    taking them all and filtering).
    """
    names, codes = chunk_codes(table.column("chunk"))
    wanted = set(chunks)
    selected = np.array([name in wanted for name in names], dtype=bool)
    chosen = selected[codes] if len(names) else np.zeros(table.num_rows, dtype=bool)
    positions = np.flatnonzero(chosen if excluded is None else chosen & ~excluded)
    rank = np.argsort(np.argsort(np.array(names, dtype=object))) if names else np.empty(0, dtype=np.intp)
    rows = table.column("row").to_numpy()[positions]
    order = positions[np.lexsort((rows, rank[codes[positions]]))]
    return taken(table, order)  # often every row, already in order (a version's manifest usually is)


def taken(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """Rows ``positions`` of ``table``, in that order: ``table`` itself when that is every row in order."""
    if len(positions) == table.num_rows and np.array_equal(positions, np.arange(len(positions))):
        return table
    return table.take(pa.array(positions, pa.int64()))


def key_mask(table: pa.Table, keys: Sequence[Any]) -> np.ndarray:
    """Which rows of ``table`` (with ``key`` and ``key_hash`` columns) hold one of ``keys``.

    Found by key hash first, so that a few keys against millions of rows compare only the
    rows whose hash matches, not every key.
    """
    hashes = table.column("key_hash").to_numpy()
    candidates = np.flatnonzero(np.isin(hashes, hashing.key_hashes(keys)))
    mask = np.zeros(table.num_rows, dtype=bool)
    if len(candidates):
        found = table.column("key").take(pa.array(candidates))
        wanted = pa.array(keys, found.type)
        mask[candidates[pc.is_in(found, value_set=wanted).to_numpy(zero_copy_only=False)]] = True
    return mask


def touched_keys(delta: pa.Table) -> list[Any]:
    """Keys a delta added, replaced or deleted (not those it only moved).

    With Arrow, not DuckDB: a writer that lost a race reads every delta committed since
    its head, and a DuckDB connection per delta (tens of milliseconds) made it lose again.
    """
    changed = pc.not_equal(delta.column("change"), str(ChangeKind.MOVED))
    return list(pc.unique(delta.column("key").filter(changed).drop_null()).to_pylist())
