"""One rule composes a manifest: on whole rows matched by key hash, and on a diff's few columns matched by key.

:func:`litstore.read.manifests.compose` is the only code that says which rows a version
holds; a version read from its files, a commit's new version in memory and a diff's
touched rows all go through it. Here its two ways of matching keys are held to each
other on the same deltas.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from litstore.format import hashing
from litstore.format.manifest import ChangeKind
from litstore.ops.diff import DIFF_COLUMNS
from litstore.read.manifests import compose, stream_compose, without_change

_CHANGES = [str(kind) for kind in ChangeKind]
_rows = st.lists(st.tuples(st.integers(0, 12), st.sampled_from(_CHANGES), st.integers(0, 99)), max_size=10)


def _table(rows: list[tuple[int, str, int]], version: int | None) -> pa.Table:
    """Rows ``(key number, change, row)`` of a delta (``version``) or, with ``version`` None, a checkpoint."""
    keys = [f"k{number}" for number, _, _ in rows]
    columns: dict[str, Any] = {
        "key": pa.array(keys, pa.string()),
        "key_hash": pa.array(hashing.key_hashes(keys), pa.uint64()),
        "content_hash": pa.array([bytes([number, row]) * 8 for number, _, row in rows], pa.binary(16)),
        "split": pa.array(["train" if row % 2 else "test" for _, _, row in rows], pa.string()),
        "chunk": pa.array([f"fragments/{version}/c.bin"] * len(rows), pa.string()),
        "row": pa.array([row for _, _, row in rows], pa.uint32()),
    }
    if version is not None:
        columns["change"] = pa.array([change for _, change, _ in rows], pa.string())
        columns["version"] = pa.array(np.full(len(rows), version, dtype=np.int64))
    return pa.table(columns)


def _as_a_diff_reads(table: pa.Table) -> pa.Table:
    """The columns a diff reads of a file, ``split`` and ``change`` dictionary-encoded, as Parquet gives them."""
    names = [name for name in (*DIFF_COLUMNS, "change") if name in table.column_names]
    return pa.table(
        {
            name: table.column(name).dictionary_encode() if name in ("split", "change") else table.column(name)
            for name in names
        }
    )


def _sorted_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(table.column(name).to_pylist() for name in DIFF_COLUMNS), strict=True))


@settings(max_examples=200, deadline=None)
@given(base=st.lists(st.integers(0, 12), unique=True, max_size=12), deltas=st.lists(_rows, max_size=5))
def test_a_diffs_few_columns_compose_to_the_whole_rows_columns(
    base: list[int], deltas: list[list[tuple[int, str, int]]]
) -> None:
    checkpoint = _table([(number, "added", 0) for number in base], None)
    tables = [_table(rows, version) for version, rows in enumerate(deltas, 1)]
    whole = compose("str", reversed(tables), checkpoint)
    few = compose(
        "str", reversed([_as_a_diff_reads(t) for t in tables]), _as_a_diff_reads(checkpoint), columns=DIFF_COLUMNS
    )
    assert few.schema == pa.schema([whole.schema.field(name) for name in DIFF_COLUMNS])  # decoded, plain
    assert _sorted_rows(few) == _sorted_rows(whole)


@settings(max_examples=100, deadline=None)
@given(
    base=st.lists(st.integers(0, 12), unique=True, max_size=12),
    deltas=st.lists(_rows, max_size=4),
    by_hash=st.booleans(),
)
def test_a_checkpoint_read_last_is_told_exactly_the_rows_the_deltas_superseded(
    base: list[int], deltas: list[list[tuple[int, str, int]]], by_hash: bool
) -> None:
    """What lets the reader skip row groups (``row_groups_needed``): marked rows are those of a mentioned key."""
    checkpoint = _table([(number, "added", 0) for number in base], None)
    tables = [_table(rows, version) for version, rows in enumerate(deltas, 1)]
    columns = None if by_hash else DIFF_COLUMNS
    if not by_hash:
        tables, checkpoint = [_as_a_diff_reads(t) for t in tables], _as_a_diff_reads(checkpoint)
    marks: list[list[bool] | None] = []

    def read(superseded: Any) -> pa.Table:
        marks.append(None if superseded is None else superseded(checkpoint).tolist())
        return checkpoint

    composed = compose("str", reversed(tables), read, columns=columns)
    mentioned = {number for rows in deltas for number, _, _ in rows}
    assert marks == [None if not deltas else [number in mentioned for number in base]]
    assert _sorted_rows(composed) == _sorted_rows(compose("str", reversed(tables), checkpoint, columns=columns))


def test_without_change_reads_dictionary_indices_and_copies_nothing_when_nothing_matches() -> None:
    delta = _table([(1, "added", 0), (2, "moved", 1), (3, "deleted", 2), (4, "moved", 3)], 1)
    encoded = _as_a_diff_reads(delta)
    for table in (delta, encoded):
        kept = without_change(table, ChangeKind.MOVED)
        assert kept.column("key").to_pylist() == ["k1", "k3"]
        assert without_change(table, ChangeKind.REPLACED) is table


def _in_parts(table: pa.Table, size: int) -> list[pa.Table]:
    """``table`` cut into tables of ``size`` rows, as a file's row groups are read."""
    return [table.slice(start, size) for start in range(0, table.num_rows, size)]


def _consistent(base: list[int], deltas: list[list[tuple[int, str, int]]]) -> list[list[tuple[int, str, int]]]:
    """``deltas`` made a history a writer could commit on ``base``: a key is ``added`` only where the version
    before does not hold it, ``replaced`` or ``moved`` only where it does, deleted only where it does."""
    live = set(base)
    made = []
    for rows in deltas:
        kept = []
        for number, change, row in rows:
            if number not in live:
                if change == "deleted":
                    continue
                change = "added"
            elif change == "added":
                change = "replaced"
            kept.append((number, change, row))
        for number in {number for number, _, _ in kept}:
            if any(n == number and change != "deleted" for n, change, _ in kept):
                live.add(number)
            else:
                live.discard(number)
        made.append(kept)
    return made


@settings(max_examples=100, deadline=None)
@given(
    base=st.one_of(st.none(), st.lists(st.integers(0, 12), unique=True, max_size=12)),
    deltas=st.lists(_rows, max_size=5),
    size=st.integers(1, 4),
)
def test_streaming_composes_what_compose_does(
    base: list[int] | None, deltas: list[list[tuple[int, str, int]]], size: int
) -> None:
    """:func:`stream_compose`, given each file a few rows at a time, holds to :func:`compose`'s rule."""
    deltas = _consistent(base or [], deltas)
    checkpoint = None if base is None else _table([(number, "added", 0) for number in base], None)
    tables = [_table(rows, version) for version, rows in enumerate(deltas, 1)][::-1]
    whole = compose("str", tables, checkpoint)
    parts = list(
        stream_compose(
            "str", [_in_parts(t, size) for t in tables], None if checkpoint is None else _in_parts(checkpoint, size)
        )
    )
    assert all(part.num_rows and part.schema == whole.schema for part in parts)
    streamed = pa.concat_tables(parts) if parts else whole.slice(0, 0)
    assert _sorted_rows(streamed) == _sorted_rows(whole)
    keys = list(stream_compose("str", [_in_parts(t, size) for t in tables], None, columns=["key"]))
    assert sorted(k for part in keys for k in part.column("key").to_pylist()) == sorted(
        compose("str", tables, None).column("key").to_pylist()
    )
