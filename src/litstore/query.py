"""Every set-shaped question asked of manifests: the only module that imports DuckDB.

Composition of versions, diffs, the joins of ``verify`` and the user's ``sql()`` all
run here, on Arrow tables of the columns described in :mod:`litstore.format.manifest`
(composition and diffs with Arrow's own set operations, the rest in DuckDB).
DuckDB is imported on first use, not with litstore.

:func:`query` (which runs the user's ``sql()``) uses a sandboxed connection: no
file system or network access (``COPY ... TO``, ``read_text``, ``ATTACH``,
``INSTALL``/``LOAD`` all fail), no lookup of Python variables by name, and the
configuration locked so that the query cannot lift those limits. It sees only the
tables it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.compute as pc

from litstore.format import hashing
from litstore.format.manifest import ChangeKind, chunk_codes, columns, delta_schema, empty, schema


def compose(
    key_type: str, checkpoint: pa.Table | None, deltas: Sequence[pa.Table], fields: dict[str, str] | None = None
) -> pa.Table:
    """The live manifest after applying ``deltas`` (oldest first) on top of ``checkpoint``.

    For each key, the rows of the newest delta that mentions it decide (all of them, so
    a key a delta wrote twice stays visible to ``verify``), unless they are deletions;
    checkpoint rows stand for the keys no delta mentions. Rows come in no particular
    order, with the declared ``fields`` after the fixed columns. Done with Arrow
    set operations (an anti-join per delta): several times cheaper than a window
    over every row, which is what composing a large version costs.
    """
    return compose_newest_first(key_type, lambda _: checkpoint, reversed(deltas), fields)


def compose_newest_first(
    key_type: str,
    checkpoint: Callable[[Callable[[pa.Table], np.ndarray] | None], pa.Table | None],
    deltas: Iterable[pa.Table],
    fields: dict[str, str] | None = None,
) -> pa.Table:
    """:func:`compose`, taking the deltas newest first and the checkpoint last, as they are read.

    Each delta is cut down to the rows no newer one superseded before the next is asked
    for, so reading a long chain of large deltas (rewrites that moved every record) holds
    one file at a time beside the result. ``checkpoint`` is called with a function that
    marks the rows the deltas superseded (``None``: no delta), so that it may leave out
    parts of the file that only hold such rows.
    """
    names = columns(fields)
    target = schema(key_type, fields)
    parts: list[pa.Table] = []
    mentioned: tuple[pa.Array, pa.Array] | None = None  # the keys of newer deltas, and their key hashes
    for delta in deltas:
        delta = delta.cast(delta_schema(key_type, fields))
        if mentioned is not None:
            delta = _without_keys(delta, *mentioned)
        parts.append(_live_rows(delta).select(names).cast(target))
        keys, hashes = delta.column("key").combine_chunks(), delta.column("key_hash").combine_chunks()
        if mentioned is not None:
            keys, hashes = pa.concat_arrays([mentioned[0], keys]), pa.concat_arrays([mentioned[1], hashes])
        mentioned = (keys, hashes)
        del delta
    base = checkpoint(None if mentioned is None else lambda table: mentioned_rows(table, *mentioned))
    if base is not None:
        base = base.select(names).cast(target)
        if mentioned is not None and len(mentioned[0]):
            base = _without_keys(base, *mentioned)
        parts.append(base)
    return pa.concat_tables(parts[::-1]) if parts else empty(key_type, fields)


def _without_keys(table: pa.Table, keys: pa.Array, hashes: pa.Array) -> pa.Table:
    """``table`` without its rows whose key is one of ``keys`` (whose key hashes are ``hashes``)."""
    gone = mentioned_rows(table, keys, hashes)
    return table.filter(pa.array(~gone)) if gone.any() else table


def mentioned_rows(table: pa.Table, keys: pa.Array, hashes: pa.Array) -> np.ndarray:
    """Which rows of ``table`` (``key``, ``key_hash``) hold one of ``keys`` (whose key hashes are ``hashes``).

    Matched by key hash (integers), then each matched row's key compared with the one key
    it matched: no hash table of strings, whether few rows match (appends) or nearly all
    (a rewrite that moved every record). Key hashes are derived from keys when files are
    read, so equal keys have equal hashes; a hash two of ``keys`` share is settled by
    comparing with all of them.
    """
    gone = np.zeros(table.num_rows, dtype=bool)
    where = pc.index_in(table.column("key_hash"), value_set=hashes)  # the first of keys with the row's hash
    positions = np.flatnonzero(where.is_valid().to_numpy(zero_copy_only=False))
    if not len(positions):
        return gone
    taken = pa.array(positions)
    candidates = table.column("key").take(taken)
    partners = keys.take(where.take(taken))
    same = pc.equal(candidates, partners).to_numpy(zero_copy_only=False)
    mentioned = hashes.to_numpy()
    ordered = np.sort(mentioned)
    shared = ordered[1:][ordered[1:] == ordered[:-1]]  # hashes that more than one of keys have
    if len(shared):
        unsure = np.flatnonzero(~same & np.isin(table.column("key_hash").to_numpy()[positions], shared))
        if len(unsure):
            alike = keys.filter(pa.array(np.isin(mentioned, shared)))
            found = pc.is_in(candidates.take(pa.array(unsure)), value_set=alike).to_numpy(zero_copy_only=False)
            same[unsure[found]] = True
    gone[positions[same]] = True
    return gone


def _live_rows(delta: pa.Table) -> pa.Table:
    """The rows of ``delta`` that are not deletions (no copy when there are none)."""
    deleted = pc.equal(delta.column("change"), str(ChangeKind.DELETED))
    return delta.filter(pc.invert(deleted)) if pc.any(deleted).as_py() else delta


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


def diff(old: pa.Table, new: pa.Table) -> dict[str, pa.Table]:
    """Keys ``added`` to, ``removed`` from, and ``changed`` (content) between two manifests.

    ``old`` and ``new`` need only the columns ``key``, ``content_hash`` and ``split``:
    whole manifests, or any of their rows that include every key whose row differs.
    Each result has columns ``key`` and ``split`` (the new split for added and changed
    keys, the old one for removed keys), sorted by key: what SQL's ``FULL OUTER JOIN
    ... USING (key)`` of the two gives (a key in several rows pairs each of them),
    done by Arrow: on the few thousand rows of a diff of touched keys a DuckDB
    connection costs more than the join, and on whole manifests Arrow is as fast.
    """
    left = pa.table(
        {
            "key": old.column("key"),
            "old_hash": old.column("content_hash"),
            "old_split": old.column("split"),
            "in_old": pa.array(np.ones(old.num_rows, dtype=bool)),
        }
    )
    right = pa.table(
        {
            "key": new.column("key"),
            "new_hash": new.column("content_hash"),
            "new_split": new.column("split"),
            "in_new": pa.array(np.ones(new.num_rows, dtype=bool)),
        }
    )
    joined = left.join(right, "key", join_type="full outer", coalesce_keys=True)
    added, removed = pc.is_null(joined.column("in_old")), pc.is_null(joined.column("in_new"))
    differs = pc.or_kleene(
        pc.or_kleene(added, removed), pc.not_equal(joined.column("old_hash"), joined.column("new_hash"))
    )
    joined = joined.filter(differs)
    joined = joined.take(pc.sort_indices(joined.column("key")))
    added, removed = pc.is_null(joined.column("in_old")), pc.is_null(joined.column("in_new"))
    split = pc.coalesce(joined.column("new_split"), joined.column("old_split"))
    result = pa.table({"key": joined.column("key"), "split": split.cast(pa.string())})
    changed = pc.invert(pc.or_(added, removed))
    return {"added": result.filter(added), "removed": result.filter(removed), "changed": result.filter(changed)}


def touched_keys(delta: pa.Table) -> list[Any]:
    """Keys a delta added, replaced or deleted (not those it only moved).

    With Arrow, not DuckDB: a writer that lost a race reads every delta committed since
    its head, and a DuckDB connection per delta (tens of milliseconds) made it lose again.
    """
    changed = pc.not_equal(delta.column("change"), str(ChangeKind.MOVED))
    return list(pc.unique(delta.column("key").filter(changed).drop_null()).to_pylist())
