"""Writing a version's key index on disk: one key run per commit, merged as runs pile up.

Each commit of a format-3 store writes a run (:mod:`litstore.format.keyrun`) of what it
changed: an entry at its new place for every record it adds, replaces or moves, and
a deleted entry for every key it removes. The version's runs are that run followed
by its parent's, so a lookup that reads them newest first finds every live key at
its current place.

**Merging (an LSM, tiered).** After a commit's run is made, while the next older run
holds at most twice as many entries as the newer runs put together, the two are
merged into one: the newest entry of each key is kept, and a deleted entry is dropped
when the merge reaches the oldest run. So a version has O(log N) runs and an entry
is rewritten O(log N) times over its life. A commit's merges write at most
:data:`MERGE_LIMIT` entries, or :data:`MERGE_FACTOR` times its own run if that is
more (a large append merges into runs of several times its size, so building a store
by large appends keeps few runs: 4 at 16M records by appends of 500k, 11 at a factor
of 4); larger merges wait for the next checkpoint or compaction. A merge past
:data:`MERGE_LIMIT` entries is streamed by ranges of key hashes (:func:`_write_merged`),
so its memory is one range, as a checkpoint's full run.

**Full runs at checkpoints.** A commit that writes a checkpoint writes one run of every
record too, so a version has at most the runs of the commits since the last checkpoint
(at most the checkpoint spacing, :func:`litstore.txn.checkpoint.checkpoint_spacing`,
merged as above: O(log) of them; and never past :data:`litstore.txn.checkpoint.MAX_KEY_RUNS`,
where runs too large to merge pile up), however many records the store holds: from the
manifest where it is in memory (:func:`full_run`), else merged from the commit's run
and every parent run one range of key hashes at a time (:func:`write_full_run`), in
memory bounded by one range.

**Full runs.** Compaction and checkpoints write one run of every record of the version they commit
(:func:`full_run`, from the version's manifest, which compaction composes anyway), so
after any number of small appends a compacted version's lookup reads one run. So do
``Store.upgrade`` and a format-3 commit whose parent has no runs at all (a version
from before the upgrade): without it, that commit's run would be the only one its
successors list, and their lookups would miss every older key.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from litstore.errors import IntegrityError
from litstore.format import hashing, keyrun, layout
from litstore.format import manifest as manifest_format
from litstore.format.models import KeyRunRef
from litstore.read.keyruns import RunReader
from litstore.read.memory import release_freed
from litstore.storage import Storage
from litstore.txn.progress import bar

#: A commit merges runs only while the result stays below this many entries (~48 MB), or below
#: :data:`MERGE_FACTOR` times the entries of its own run. 8, not 4: a 16M-record store built by appends of
#: 500k then has 4 runs of 4M, not 11 of 1.5M, and every lookup and append's key check passes each run
#: (its fresh lookup 6.1 -> 4.2 ms median); the entries written while building go from ~2.0x to ~2.9x.
MERGE_LIMIT = 1 << 20
MERGE_FACTOR = 8
#: Entries of all runs :func:`write_full_run` merges at once (one range of key hashes, ~50 MB).
_MERGE_RANGE = 1 << 20
#: Records :func:`full_run` hashes at once.
_FULL_RUN_BATCH = 1 << 18


def entries_of(rows: pa.Table, deleted_keys: Sequence[object], key_type: str) -> tuple[np.ndarray, list[str]]:
    """The run entries (sorted by key hash) of manifest ``rows`` (located live records) and of ``deleted_keys``.

    ``rows`` are a plan's (:attr:`litstore.txn.plan.Plan.rows`), whose key hashes the plan
    derived from their keys. The entries are written in key-hash order field by field
    (each column gathered by the order), and keyprints are computed
    :data:`_FULL_RUN_BATCH` keys at a time: filling them in row order and then sorting
    made a second copy of every entry (48 bytes a record), and the whole column's
    keyprints took Arrow copies of every key: the peak of a large append's commit.
    """
    names, ids = manifest_format.chunk_codes(rows.column("chunk")) if rows.num_rows else ([], np.empty(0, np.int32))
    hashes = rows.column("key_hash").to_numpy()
    prints = _keyprints(rows.column("key"))
    contents = rows.column("content_hash").combine_chunks()
    content = np.frombuffer(contents.buffers()[1], "V16", count=len(contents), offset=16 * contents.offset)
    places = [ids, rows.column("row").to_numpy()]
    if len(deleted_keys):
        column = pa.array(list(deleted_keys), manifest_format.schema(key_type).field("key").type)
        hashes = np.concatenate([hashes, hashing.key_hash_array(column)])
        prints = np.concatenate([prints, _keyprints(column)])
        content = np.concatenate([content, np.zeros(len(column), "V16")])
        places = [
            np.concatenate([ids.astype(np.uint32), np.full(len(column), keyrun.DELETED, np.uint32)]),
            np.concatenate([places[1].astype(np.uint32), np.zeros(len(column), np.uint32)]),
        ]
    order = None
    if len(hashes) > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):  # (one split's staged rows are sorted)
        order = np.argsort(hashes, kind="stable")
    entries = np.empty(len(hashes), dtype=keyrun.ENTRY)
    for name, values in (("key_hash", hashes), ("chunk", places[0]), ("row", places[1]), ("content", content)):
        entries[name] = values if order is None else values[order]
    del hashes, places, content, contents
    entries["keyprint"] = prints if order is None else prints[order]
    del prints, order
    release_freed(entries.nbytes)  # (the commit writes the run next: a copy of its entries)
    return entries, list(names)


def _keyprints(keys: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The keyprints of ``keys`` as 16-byte values, :data:`_FULL_RUN_BATCH` keys at a time (bounded temporaries)."""
    prints = np.empty(len(keys), "V16")
    for start in range(0, len(keys), _FULL_RUN_BATCH):
        part = keys.slice(start, _FULL_RUN_BATCH)
        prints[start : start + len(part)] = hashing.keyprint_rows(part).view("V16").reshape(-1)
    return prints


def full_run(manifest: pa.Table, progress: bool = False) -> tuple[np.ndarray, list[str]]:
    """One run of every record of a version (its whole ``manifest``): what ``Store.upgrade`` and compaction
    write, and a commit whose parent has no key index on disk.

    The keys are hashed :data:`_FULL_RUN_BATCH` rows at a time into one array of
    entries (48 bytes a record, then sorted), so the work beside the manifest stays a
    few batches; chunks no record names are left out of the run's table.
    """
    count = manifest.num_rows
    if not count:
        return np.empty(0, dtype=keyrun.ENTRY), []
    names, ids = manifest_format.chunk_codes(manifest.column("chunk"))
    used, ids = np.unique(ids, return_inverse=True)
    entries = np.empty(count, dtype=keyrun.ENTRY)
    with bar(progress, total=count, desc="indexing keys", unit="record") as shown:
        for start in range(0, count, _FULL_RUN_BATCH):
            end = min(start + _FULL_RUN_BATCH, count)
            _fill(entries[start:end], manifest.slice(start, end - start), ids[start:end])
            shown.update(end - start)
    entries = keyrun.take(entries, np.argsort(entries["key_hash"], kind="stable"))
    return entries, [names[i] for i in used.tolist()]


def _fill(entries: np.ndarray, rows: pa.Table, chunk_ids: np.ndarray, hashed: bool = False) -> None:
    """Set ``entries`` to the live entries of manifest ``rows`` (their chunks numbered ``chunk_ids``).

    ``hashed``: the rows' ``key_hash`` column was derived from their keys in this process
    (a plan's rows: :func:`litstore.txn.plan.plan` never takes a fragment's), so it is used
    as it is instead of hashing every key again.
    """
    if hashed:
        entries["key_hash"] = rows.column("key_hash").to_numpy()
    else:
        entries["key_hash"] = hashing.key_hash_array(rows.column("key"))
    entries["chunk"] = chunk_ids
    entries["row"] = rows.column("row").to_numpy()
    contents = rows.column("content_hash").combine_chunks()
    entries["content"] = np.frombuffer(
        contents.buffers()[1], dtype="V16", count=len(contents), offset=16 * contents.offset
    )
    entries["keyprint"] = np.frombuffer(hashing.keyprint_array(rows.column("key")), dtype="V16")


def merged(
    newer: tuple[np.ndarray, list[str]], older: tuple[np.ndarray, list[str]], oldest: bool
) -> tuple[np.ndarray, list[str]]:
    """One run of two: the newest entry of each key (``newer``'s over ``older``'s); deleted entries dropped if
    ``older`` is the oldest run (nothing older is left for them to hide)."""
    (new_entries, new_names), (old_entries, old_names) = newer, older
    names = list(dict.fromkeys(new_names + old_names))
    place = {name: number for number, name in enumerate(names)}
    both, sizes = _joined([new_entries, old_entries], [new_names, old_names], place)
    kept = _newest(both, sizes, oldest)
    used = np.unique(kept["chunk"][kept["chunk"] != keyrun.DELETED])
    if len(used) < len(names):  # chunks no entry names any more leave the table
        mapping = np.full(len(names), keyrun.DELETED, dtype=np.uint32)
        mapping[used] = np.arange(len(used), dtype=np.uint32)
        live = kept["chunk"] != keyrun.DELETED
        kept["chunk"][live] = mapping[kept["chunk"][live]]
        names = [names[i] for i in used.tolist()]
    return kept, names


def _joined(
    parts: Sequence[np.ndarray], tables: Sequence[Sequence[str]], place: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` (each with chunk ids into its own table of ``tables``) in one new array, chunk ids renumbered
    into the table ``place`` numbers; and the parts' sizes. One copy of the entries, renumbered in place."""
    both = np.concatenate(parts) if parts else np.empty(0, dtype=keyrun.ENTRY)
    sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    start = 0
    for size, own in zip(sizes.tolist(), tables, strict=True):
        mapping = np.array([place[name] for name in own], dtype=np.uint32)
        chunks = both["chunk"][start : start + size]  # a view: assigning to it renumbers ``both``
        if len(mapping) and not np.array_equal(mapping, np.arange(len(mapping), dtype=np.uint32)):
            live = chunks != keyrun.DELETED
            chunks[live] = mapping[chunks[live]]
        start += size
    return both, sizes


def _newest(both: np.ndarray, sizes: np.ndarray, oldest: bool) -> np.ndarray:
    """The newest entry of each key of the parts of ``sizes`` entries laid end to end in ``both`` (newest part
    first, each sorted by key hash, chunk ids of one table), in key-hash order; deleted entries dropped if
    ``oldest`` (nothing older is left for them to hide).

    A stable sort by key hash alone keeps each key's entries newest first, and merges the
    sorted parts in one pass (4.4x faster than sorting by hash, keyprint and age, which
    was most of a checkpoint's time); a hash two keys share (about once in 2^64/N² of a
    run of N keys) is settled by that full sort instead. Whole entries are gathered once,
    at the end: the sort and the masks work on the key hashes and chunk ids alone.
    """
    order = np.argsort(both["key_hash"], kind="stable")
    hashes = both["key_hash"][order]
    keep = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        same = hashes[1:] == hashes[:-1]
        pairs = np.flatnonzero(same)
        if len(pairs):
            newer = np.ascontiguousarray(both["keyprint"][order[pairs]]).view(np.uint64).reshape(-1, 2)
            older = np.ascontiguousarray(both["keyprint"][order[pairs + 1]]).view(np.uint64).reshape(-1, 2)
            if not np.array_equal(newer, older):
                return _newest_sorted_fully(both, sizes, oldest)
        keep[1:] = ~same
    if oldest:
        keep &= both["chunk"][order] != keyrun.DELETED
    return keyrun.take(both, order[keep])  # the one gather of whole entries


def _newest_sorted_fully(both: np.ndarray, sizes: np.ndarray, oldest: bool) -> np.ndarray:
    """:func:`_newest` where two keys share a key hash: entries sorted by hash, keyprint, then age."""
    age = np.repeat(np.arange(len(sizes), dtype=np.uint16), sizes)
    prints = np.ascontiguousarray(both["keyprint"]).view(np.uint64).reshape(-1, 2)
    order = np.lexsort((age, prints[:, 1], prints[:, 0], both["key_hash"]))
    both, prints = keyrun.take(both, order), prints[order]
    first = np.ones(len(both), dtype=bool)
    if len(both) > 1:
        same = (both["key_hash"][1:] == both["key_hash"][:-1]) & np.all(prints[1:] == prints[:-1], axis=1)
        first[1:] = ~same
    kept = keyrun.take(both, first)
    if oldest:
        kept = keyrun.take(kept, kept["chunk"] != keyrun.DELETED)
    return kept


class _NothingLive(Exception):
    """A full run being written has no entry: it is not published."""


def write_full_run(
    storage: Storage,
    number: int,
    transaction: str,
    run: tuple[np.ndarray, list[str]],
    parent_runs: tuple[KeyRunRef, ...],
    filtered: bool,
    retired: frozenset[str] = frozenset(),
) -> tuple[tuple[KeyRunRef, ...], list[str]]:
    """Write version ``number``'s one run of every record: ``run`` (its commit's) merged with every one of
    ``parent_runs``, one range of key hashes at a time, as :func:`write_runs` returns its runs.

    What a checkpoint writes where the parent's manifest is not in memory: the run
    :func:`full_run` makes of the composed manifest, built without it. Each range
    holds about :data:`_MERGE_RANGE` entries of all runs (key hashes are uniform, so
    ranges are cut evenly), is merged by :func:`_newest` and streamed to the run's file
    (:class:`~litstore.format.keyrun.RunWriter`): memory is one range, whatever the
    store holds. The chunk table is every table's names; a name no live entry uses any
    more stays in it (harmless: a run's table only resolves its entries' ids), except
    the ``retired`` chunks (a compaction's: it moved every live row out of them), which
    are left out, so a lookup of the compacted version checks no name of the 1,000 chunks
    1,000 small appends left. An entry still in a retired chunk is an ``IntegrityError``.
    """
    written, files = _write_merged(storage, number, transaction, run, parent_runs, filtered, True, retired)
    return ((written,) if written is not None else ()), files


def _write_merged(
    storage: Storage,
    number: int,
    transaction: str,
    run: tuple[np.ndarray, list[str]],
    runs: Sequence[KeyRunRef],
    filtered: bool,
    oldest: bool,
    retired: frozenset[str] = frozenset(),
) -> tuple[KeyRunRef | None, list[str]]:
    """Version ``number``'s run: ``run`` merged with ``runs`` (the next older ones, newest first), one range of
    key hashes at a time (see :func:`write_full_run`); deleted entries dropped if ``oldest``. The run and its
    file, or ``None`` where no entry is left."""
    entries, names = run
    readers = [RunReader(storage, ref) for ref in runs]
    tables = [list(names)] + [list(reader.tail().chunks) for reader in readers]
    union = list(dict.fromkeys(name for table in tables for name in table if name not in retired))
    listed = len(union)  # the retired names come last, and are not written
    union += sorted({name for table in tables for name in table if name in retired})
    place = {name: position for position, name in enumerate(union)}
    total = len(entries) + sum(ref.entries for ref in runs)
    ranges = max(1, -(-total // _MERGE_RANGE))
    cuts: list[int | None] = [(position << 64) // ranges for position in range(ranges)] + [None]
    path = layout.key_run(number, transaction)
    try:
        with storage.writing(path) as handle:
            writer = keyrun.RunWriter(handle, filtered)
            for low, high in itertools.pairwise(cuts):
                assert low is not None
                hashes = entries["key_hash"]
                start = int(np.searchsorted(hashes, np.uint64(low), "left"))
                stop = len(entries) if high is None else int(np.searchsorted(hashes, np.uint64(high), "left"))
                parts = [entries[start:stop]] + [reader.between(low, high) for reader in readers]
                both, sizes = _joined(parts, tables, place)
                del parts
                newest = _newest(both, sizes, oldest)
                del both
                if retired and bool(np.any((newest["chunk"] >= listed) & (newest["chunk"] != keyrun.DELETED))):
                    stale = union[int(newest["chunk"][newest["chunk"] != keyrun.DELETED].max())]
                    raise IntegrityError(
                        f"a live key-run entry of version {number - 1} points into chunk {stale}, which this "
                        "compaction rewrote without moving that row; nothing was committed (verify() the version)"
                    )
                writer.add(newest)
                del newest
                release_freed()
            size = writer.finish(union[:listed])
            if not writer.entries:  # every record deleted: the version lists no run (see has_key_index)
                raise _NothingLive
    except _NothingLive:
        return None, []
    return KeyRunRef(path=path, entries=writer.entries, size=size), [path]


def write_runs(
    storage: Storage,
    number: int,
    transaction: str,
    run: tuple[np.ndarray, list[str]],
    parent_runs: tuple[KeyRunRef, ...],
    filtered: bool,
) -> tuple[tuple[KeyRunRef, ...], list[str]]:
    """Write version ``number``'s run (``run`` merged with the newest of ``parent_runs`` as the tiers say);
    the version's runs, newest first, and the files written. Nothing is written if ``run`` is empty: the
    parent's runs serve. ``filtered``: the run carries a key filter (format 5)."""
    entries, names = run
    if not len(entries):
        return parent_runs, []
    limit = max(MERGE_LIMIT, MERGE_FACTOR * len(entries))
    taken, total = 0, len(entries)
    while (
        taken < len(parent_runs)
        and parent_runs[taken].entries <= 2 * total
        and parent_runs[taken].entries + total <= limit
    ):
        total += parent_runs[taken].entries
        taken += 1
    rest = parent_runs[taken:]
    if taken and total > MERGE_LIMIT:  # (a large commit's merge: streamed by ranges of key hashes, in bounded memory)
        written, files = _write_merged(storage, number, transaction, run, parent_runs[:taken], filtered, not rest)
        return ((written, *rest) if written is not None else rest), files
    for position, older in enumerate(parent_runs[:taken]):
        reader = RunReader(storage, older)
        entries, names = merged((entries, names), reader.everything(), oldest=position == len(parent_runs) - 1)
    if not len(entries):
        return rest, []
    path = layout.key_run(number, transaction)
    data = keyrun.encode(entries, names, filtered)
    storage.write(path, data)
    return (KeyRunRef(path=path, entries=len(entries), size=len(data)), *rest), [path]
