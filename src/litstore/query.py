"""Every set-shaped question asked of manifests, answered by DuckDB: the only module that imports it.

Composition of versions, diffs, the joins of ``verify`` and the user's ``sql()`` all
run here, on Arrow tables of the columns described in :mod:`litstore.format.manifest`.
DuckDB is imported on first use, not with litstore.

:func:`query` (which runs the user's ``sql()``) uses a sandboxed connection: no
file system or network access (``COPY ... TO``, ``read_text``, ``ATTACH``,
``INSTALL``/``LOAD`` all fail), no lookup of Python variables by name, and the
configuration locked so that the query cannot lift those limits. It sees only the
tables it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute

from litstore.format.manifest import MANIFEST_COLUMNS, ChangeKind, delta_schema, empty, schema


def compose(key_type: str, checkpoint: pa.Table | None, deltas: Sequence[pa.Table]) -> pa.Table:
    """The live manifest after applying ``deltas`` (oldest first) on top of ``checkpoint``.

    Rows come sorted by ``key_hash``. A key the newest delta wrote twice keeps both
    rows: composing must not hide a duplicate that ``verify`` should report.
    """
    if checkpoint is not None and not deltas:
        return checkpoint.select(list(MANIFEST_COLUMNS)).cast(schema(key_type))
    parts: list[pa.Table] = []
    if checkpoint is not None:
        base = checkpoint.select(list(MANIFEST_COLUMNS))
        count = base.num_rows
        base = base.append_column("change", pa.array([str(ChangeKind.ADDED)] * count, pa.string()))
        parts.append(base.append_column("version", pa.array([-1] * count, pa.int64())))
    parts.extend(delta.cast(delta_schema(key_type)) for delta in deltas)
    if not parts:
        return empty(key_type)
    history = pa.concat_tables(parts)  # noqa: F841  (read by DuckDB's replacement scan)
    query = f"""
        SELECT {", ".join(f'"{name}"' for name in MANIFEST_COLUMNS)}
        FROM history
        QUALIFY version = max(version) OVER (PARTITION BY key) AND change <> '{ChangeKind.DELETED}'
        ORDER BY key_hash, key, chunk, "row"
    """
    import duckdb

    with duckdb.connect() as connection:
        result = connection.sql(query).to_arrow_table()
    return result.cast(schema(key_type))


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


def duplicate_keys(table: pa.Table) -> list[Any]:
    """Keys that appear in more than one row of ``table``."""
    result = query("SELECT key FROM t GROUP BY key HAVING count(*) > 1 ORDER BY key", {"t": table})
    return list(result.column(0).to_pylist())


def keys_not_in(left: pa.Table, right: pa.Table) -> list[Any]:
    """Distinct keys of ``left`` absent from ``right`` (both need a ``key`` column)."""
    sql = "SELECT DISTINCT key FROM l ANTI JOIN r USING (key) ORDER BY key"
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
            'SELECT key, chunk, "row" FROM listed ANTI JOIN stored USING (chunk, "row") ORDER BY chunk, "row"', tables
        ),
        "unlisted": query(
            'SELECT key, chunk, "row" FROM stored ANTI JOIN listed USING (chunk, "row") ORDER BY chunk, "row"', tables
        ),
        "mismatched": query(
            """SELECT l.key, l.chunk, l."row",
                      CASE WHEN l.key IS DISTINCT FROM s.key THEN 'key'
                           WHEN l.split <> s.split THEN 'split'
                           ELSE 'content' END AS problem
               FROM listed l JOIN stored s USING (chunk, "row")
               WHERE l.key IS DISTINCT FROM s.key OR l.content_hash <> s.content_hash OR l.split <> s.split
               ORDER BY l.chunk, l."row\"""",
            tables,
        ),
    }


def rows_for_keys(table: pa.Table, keys: pa.Array) -> pa.Table:
    """The rows of ``table`` whose key is in ``keys`` (with a ``position`` column into ``keys``)."""
    wanted = pa.table({"key": keys, "position": pa.array(range(len(keys)), pa.int64())})
    sql = "SELECT w.position, t.* FROM wanted w JOIN t USING (key) ORDER BY w.position"
    return query(sql, {"wanted": wanted, "t": table})


def rows_in_chunks(table: pa.Table, chunks: Sequence[str]) -> pa.Table:
    """The rows of ``table`` stored in any of ``chunks``."""
    wanted = pa.table({"chunk": pa.array(list(chunks), pa.string())})
    return query(
        'SELECT t.* FROM t SEMI JOIN wanted USING (chunk) ORDER BY chunk, "row"', {"wanted": wanted, "t": table}
    )


def diff(old: pa.Table, new: pa.Table) -> dict[str, pa.Table]:
    """Keys ``added`` to, ``removed`` from, and ``changed`` (content) between two manifests.

    Each result has columns ``key`` and ``split`` (the new split for added and changed
    keys, the old one for removed keys), sorted by key.
    """
    tables = {"old": old.select(["key", "content_hash", "split"]), "new": new.select(["key", "content_hash", "split"])}
    joined = query(
        """SELECT coalesce(n.key, o.key) AS key,
                  coalesce(n.split, o.split) AS split,
                  CASE WHEN o.key IS NULL THEN 'added'
                       WHEN n.key IS NULL THEN 'removed'
                       ELSE 'changed' END AS kind
           FROM old o FULL OUTER JOIN new n USING (key)
           WHERE o.key IS NULL OR n.key IS NULL OR o.content_hash <> n.content_hash
           ORDER BY key""",
        tables,
    )
    kinds = joined.column("kind")
    return {
        kind: joined.filter(pa.compute.equal(kinds, kind)).select(["key", "split"])
        for kind in ("added", "removed", "changed")
    }


def touched_keys(delta: pa.Table) -> list[Any]:
    """Keys a delta added, replaced or deleted (not those it only moved)."""
    sql = f"SELECT DISTINCT key FROM d WHERE change <> '{ChangeKind.MOVED}'"
    return list(query(sql, {"d": delta}).column(0).to_pylist())
