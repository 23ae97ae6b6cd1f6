"""What ``verify`` checks of a format-3 or 4 version beside its chunks: its key index and its chunks' sidecars.

Lookups, ``get_many``, ``in``, append's key check and near diffs read a version's
key runs (:mod:`litstore.read.keyruns`) instead of its manifest, and streaming checks
items against their chunk's hashes sidecar (:mod:`litstore.read.chunkhashes`): a run
or sidecar that disagrees with the manifest misleads them while every chunk is
sound. So ``verify`` checks both against the manifest rows it holds
(:class:`litstore.ops.verify_listed.Indexed`):

- :func:`check_key_index`: every run opens and every page passes its checks; then
  the runs' entries are resolved as a lookup resolves them (per key hash and
  keyprint, the first entry of the newest run that has one decides), and each live
  row must have its deciding entry live at the row's chunk and row with its content
  hash, and no key the manifest lacks may be live. That is checked by sums: the runs
  are read one range of key hashes at a time (about :data:`_RANGE_ENTRIES` entries of
  all runs), the range's entries resolved, and the live ones summed with
  :class:`~litstore.ops.verify_listed.IndexDigest` (a seeded digest of key hash,
  keyprint, place and content hash), which the manifest's rows were summed with as
  they streamed past. Equal sums: the index agrees (but for a chance of about
  2**-128). Otherwise the manifest is read again keeping each row's expected entry
  (40 bytes a row) and every run's entries are joined with it whole (48 bytes an
  entry, sorted with numpy) to name each disagreement. A damaged run is reported and
  the join is skipped, as any lookup through it would fail anyway.
- :class:`Sidecars`: each listed chunk's sidecar, where there is one (a missing one
  is fine: readers fall back to the manifest), parses and holds, at every row the
  manifest lists in that chunk, the row's content hash. Checked as ``verify`` reads
  the chunk, against the content hashes it computes of the items that matched their
  rows; the manifest's hash is read again only for the rows whose item did not.

Each problem is ``(file, what)``; at most :data:`NAMED` are named one by one, and one
more entry counts the rest, so a wholly stale index cannot make a report of a
billion lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError
from litstore.format import chunkhashes, keyrun, layout
from litstore.format.models import StoreConfig, Version
from litstore.ops import verify_listed
from litstore.ops.verify_listed import Listed, Names
from litstore.read.keyruns import RunReader
from litstore.storage import MissingFileError, Storage

#: Problems of one kind named one by one; the rest are counted in one more entry.
NAMED = 1000
#: The place of a deleted entry (no chunk number << 32 | row can be this).
_DELETED_PLACE = np.uint64(2**64 - 1)
#: Pages of a run read and checked at once.
_PAGES_AT_ONCE = 256
#: Manifest rows joined with the index at once (bounds the sort keys made for them).
_SLICE = 1 << 20
#: Entries of all runs read together by the streamed check (one range of key hashes).
_RANGE_ENTRIES = 1 << 18
#: A join key: the key hash key runs sort by, then the keyprint (compared as 24 bytes).
_KEY = np.dtype([("hash", "<u8"), ("print", "V16")])


@dataclass
class _Entries:
    """Run entries as columns: key hash, keyprint and content hash as uint64 words, place, run number."""

    hashes: np.ndarray  # uint64: the key hash runs sort by
    prints: np.ndarray  # (n, 2) uint64: the keyprint
    places: np.ndarray  # uint64: chunk number (of ``Names``) << 32 | row, or _DELETED_PLACE
    contents: np.ndarray  # (n, 2) uint64
    runs: np.ndarray  # uint32: which run (newest first) holds the entry

    def take(self, rows: np.ndarray) -> _Entries:
        return _Entries(self.hashes[rows], self.prints[rows], self.places[rows], self.contents[rows], self.runs[rows])


def index_digest(config: StoreConfig, version: Version) -> verify_listed.IndexDigest | None:
    """The digest ``version``'s manifest rows and key runs are summed with; ``None``: it has no runs to check."""
    return verify_listed.IndexDigest() if config.writes_key_runs and version.key_runs else None


def sum_key_runs(
    storage: Storage,
    version: Version,
    names: Names,
    digest: verify_listed.IndexDigest,
    executor: ThreadPoolExecutor | None = None,
) -> Future[tuple[list[tuple[str, str]], int]]:
    """What :func:`check_key_index` compares with the manifest: the runs' problems and the sum of their live
    resolved entries (:func:`_streamed`). The runs are opened here (their chunks numbered by ``names``); with
    ``executor``, they are then read and summed in its thread (numpy and file reads release the GIL), so the
    manifest can stream in meanwhile; ``names`` is not used there.
    """
    problems: list[tuple[str, str]] = []
    runs = _opened_runs(storage, version, names, problems)
    if executor is not None:
        return executor.submit(_streamed, runs, problems, digest)
    done: Future[tuple[list[tuple[str, str]], int]] = Future()
    done.set_result(_streamed(runs, problems, digest))
    return done


def check_key_index(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    listed: Listed,
    names: Names,
    summed: Future[tuple[list[tuple[str, str]], int]] | None = None,
) -> list[tuple[str, str]]:
    """The ways ``version``'s key runs disagree with its manifest rows ``listed`` (see the module docstring).

    ``names`` numbers the chunks of ``listed``'s places; chunks only a run names are
    numbered too. Versions without runs are not checked (nothing reads an index they
    do not have). The runs are read range by range of key hash and their resolved
    entries summed (:func:`sum_key_runs`, here unless ``summed`` is its result, made
    with ``listed``'s digest); only when that sum is not the manifest's are the
    manifest and the runs read again, whole, to name what disagrees.

    Raises:
        StorageError: a run cannot be read (other than not existing).
    """
    if not version.key_runs or listed.index_digest is None:
        return []
    if summed is None:
        summed = sum_key_runs(storage, version, names, listed.index_digest)
    problems, entries_sum = summed.result()
    if problems:  # lookups through a damaged run fail; what it would have said cannot be checked
        return problems
    if entries_sum == listed.index_sum:
        return []
    detailed = verify_listed.read_listed(storage, config, version, names, detail=True)
    return _detailed(storage, version, detailed, names)


def _detailed(storage: Storage, version: Version, listed: Listed, names: Names) -> list[tuple[str, str]]:
    """Every run's entries at once, resolved and joined with every manifest row: what names the disagreements."""
    paths = [ref.path for ref in version.key_runs]
    problems: list[tuple[str, str]] = []
    parts: list[_Entries] = []
    for run in _opened_runs(storage, version, names, problems):
        fences = len(run.tail.fences)
        for start in range(0, fences, _PAGES_AT_ONCE):
            numbers = list(range(start, min(start + _PAGES_AT_ONCE, fences)))
            pages = _checked_pages(run.reader, numbers, problems)
            if pages:
                joined = np.concatenate([page.view(np.uint8) for page in pages]).view(keyrun.ENTRY)  # (as bytes: fast)
                parts.append(_entry_columns(joined, run.codes, run.number))
    if problems:
        return problems
    resolved, keys = _resolve(parts)
    return _joined(resolved, keys, listed, paths, names)


@dataclass
class _Run:
    """A run being read range by range: its reader, tail and chunk numbers, and the pages that failed."""

    number: int
    storage: Storage
    reader: RunReader
    tail: keyrun.Tail
    codes: np.ndarray
    failed: set[int]  # pages that failed their checks (each reported once)


def _opened_runs(storage: Storage, version: Version, names: Names, problems: list[tuple[str, str]]) -> list[_Run]:
    """Each of the version's key runs whose tail reads and checks, with its chunks' numbers; a run whose tail
    does not is added to ``problems`` instead."""
    runs: list[_Run] = []
    for number, ref in enumerate(version.key_runs):
        reader = RunReader(storage, ref)
        try:
            tail = reader.tail()
            chunks = tail.chunks  # (its names are checked when first used)
        except IntegrityError as exc:
            problems.append((ref.path, str(exc)))
            continue
        codes = np.array([names.chunk(name) for name in chunks] + [0], np.uint64)
        runs.append(_Run(number, storage, reader, tail, codes, set()))
    return runs


def _streamed(
    runs: list[_Run], problems: list[tuple[str, str]], digest: verify_listed.IndexDigest
) -> tuple[list[tuple[str, str]], int]:
    """Every page of the opened ``runs`` checked (added to ``problems``), and the sum of
    :class:`~litstore.ops.verify_listed.IndexDigest` over the entries a lookup resolves that are live, read one
    range of key hashes at a time.

    The ranges are cut at fences of the largest run, :data:`_RANGE_ENTRIES` entries of
    all runs apart on average; each range reads the pages of each run that can hold its
    hashes (a page at a cut is read by both ranges), keeps the entries inside it and
    resolves them as :func:`_resolve` does. Memory: one range's entries.
    """
    if not runs:
        return problems, 0
    largest = max(runs, key=lambda run: run.tail.entries)
    total = sum(run.tail.entries for run in runs)
    ranges = max(1, -(-total // _RANGE_ENTRIES))
    cut_pages = np.unique(np.linspace(0, len(largest.tail.fences), ranges, endpoint=False).astype(np.int64))[1:]
    cuts = [None, *np.unique(largest.tail.fences[cut_pages]).tolist(), None]
    total_sum = 0
    for low, high in itertools.pairwise(cuts):
        parts = []
        for run in runs:
            entries = _range_entries(run, low, high, problems)
            if entries is not None and len(entries):
                parts.append((run, entries))
        if problems or not parts:
            continue
        total_sum += _range_sum(parts, digest)
    return problems, total_sum % verify_listed.INDEX_MODULUS


def _range_sum(parts: list[tuple[_Run, np.ndarray]], digest: verify_listed.IndexDigest) -> int:
    """The :class:`~litstore.ops.verify_listed.IndexDigest` sum of the live entries a lookup resolves among one
    range's checked entries of each run (newest run first).

    The sum does not depend on the entries' order, so they are summed where they lie:
    the 48-byte entries are read as six words each (key hash, place, content hash,
    keyprint) without gathering a column, and a sort by key hash only finds which
    entries a newer one of the same key hides (none, and no sort, for a range of one
    run). A key hash two keys share sends the range to :func:`_resolve` (a sort by the
    whole join key), as does anything out of the ordinary.
    """
    words = np.concatenate([np.ascontiguousarray(entries).view(np.uint64).reshape(-1, 6) for _, entries in parts])
    hashes = words[:, 0]
    if bool((hashes[1:] >= hashes[:-1]).all()):  # (one run's entries, checked in key-hash order)
        order = None
        same = np.flatnonzero(hashes[1:] == hashes[:-1])
        earlier, later = same, same + 1
    else:
        order = np.argsort(hashes, kind="stable")  # (the newest run's entry first among a key's)
        ordered = hashes[order]
        same = np.flatnonzero(ordered[1:] == ordered[:-1])
        del ordered
        earlier, later = order[same], order[same + 1]
    if len(same) and not bool((words[earlier, 4:] == words[later, 4:]).all()):
        resolved, _ = _resolve([_entry_columns(entries, run.codes, run.number) for run, entries in parts])
        live = resolved.places != _DELETED_PLACE
        return digest.sum(resolved.hashes[live], resolved.prints[live], resolved.places[live], resolved.contents[live])
    chunks = (words[:, 1] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    live = chunks != keyrun.DELETED
    live[later] = False  # hidden by the key's entry in a newer run (or earlier in the same one)
    places = np.concatenate(
        [
            run.codes[np.minimum(chunks[at : at + len(entries)], len(run.codes) - 1)]
            for at, (run, entries) in _spans(parts)
        ]
    )
    places <<= np.uint64(32)
    places |= words[:, 1] >> np.uint64(32)
    if not live.all():
        words, places = words[live], places[live]
    return digest.sum(words[:, 0], words[:, 4:], places, words[:, 2:4])


def _spans(parts: list[tuple[_Run, np.ndarray]]) -> list[tuple[int, tuple[_Run, np.ndarray]]]:
    """Each part with where its entries start among all the parts' entries."""
    starts = itertools.accumulate((len(entries) for _, entries in parts), initial=0)
    return list(zip(starts, parts))


def _range_entries(run: _Run, low: int | None, high: int | None, problems: list[tuple[str, str]]) -> np.ndarray | None:
    """The checked entries of ``run`` whose key hashes are in ``[low, high)`` (``None``: unbounded)."""
    fences = run.tail.fences
    first = 0 if low is None else max(int(np.searchsorted(fences, np.uint64(low), "left")) - 1, 0)
    stop = len(fences) if high is None else int(np.searchsorted(fences, np.uint64(high), "right"))
    if stop <= first:
        return None
    size = run.tail.page * keyrun.ENTRY.itemsize
    path = run.reader.ref.path
    entries = []
    for start in range(first, stop, _PAGES_AT_ONCE):
        numbers = [number for number in range(start, min(start + _PAGES_AT_ONCE, stop)) if number not in run.failed]
        if not numbers:
            continue
        # One ranged read of the pages (not slices of a mapping: touched pages of a mapped
        # run stay resident while it is mapped, and the runs of a 4M-record store are 290 MB).
        begin, end = numbers[0] * size, min((numbers[-1] + 1) * size, run.tail.entries_bytes)
        try:
            block = memoryview(run.storage.read_range(path, begin, end))
        except MissingFileError:
            problems.append((path, f"key run {path}, which the commit record lists, is missing"))
            run.failed.update(range(len(fences)))
            return None
        data = [
            block[number * size - begin : min((number + 1) * size, run.tail.entries_bytes) - begin]
            for number in numbers
        ]
        try:
            pages = keyrun.check_pages(path, run.tail, numbers, data)
        except IntegrityError:
            pages = []
            for number, page_data in zip(numbers, data, strict=True):  # which of them failed, each on its own
                try:
                    pages.append(keyrun.check_page(path, run.tail, number, page_data))
                except IntegrityError as exc:
                    run.failed.add(number)
                    problems.append((path, str(exc)))
        if pages:
            entries.append(np.concatenate([page.view(np.uint8) for page in pages]).view(keyrun.ENTRY))
    if not entries:
        return None
    joined = np.concatenate(entries)
    hashes = joined["key_hash"]
    inside = np.ones(len(joined), bool)
    if low is not None:
        inside &= hashes >= np.uint64(low)
    if high is not None:
        inside &= hashes < np.uint64(high)
    kept = joined if inside.all() else keyrun.take(joined, inside)  # (a structured gather is 6x slower)
    if run.tail.filter_blocks and len(kept):  # a filter that hides an entry would hide its key from lookups
        try:
            hidden = int(np.count_nonzero(~run.reader.may_hold_sorted(kept["key_hash"], kept["keyprint"])))
        except IntegrityError as exc:
            problems.append((path, str(exc)))
        else:
            if hidden:
                problems.append((path, f"key run {path}'s filter hides {hidden} of its entries: it is damaged"))
    return kept


def _checked_pages(reader: RunReader, numbers: list[int], problems: list[tuple[str, str]]) -> list[np.ndarray]:
    """Pages ``numbers`` of ``reader``'s run, checked; each that fails is a problem, and left out."""
    try:
        return reader.pages(numbers)
    except IntegrityError:
        pass
    pages = []
    for number in numbers:  # which of them failed, each on its own
        try:
            pages.append(reader.page(number))
        except IntegrityError as exc:
            problems.append((reader.ref.path, str(exc)))
    return pages


def _entry_columns(entries: np.ndarray, codes: np.ndarray, run: int) -> _Entries:
    """Checked run ``entries`` as columns, their chunk ids mapped to chunk numbers by ``codes``."""
    chunk = entries["chunk"]
    deleted = chunk == keyrun.DELETED
    places = (codes[np.where(deleted, len(codes) - 1, chunk)] << np.uint64(32)) | entries["row"].astype(np.uint64)
    places[deleted] = _DELETED_PLACE
    return _Entries(
        entries["key_hash"].astype(np.uint64),
        _words(entries["keyprint"]),
        places,
        _words(entries["content"]),
        np.full(len(entries), run, np.uint32),
    )


def _words(column: np.ndarray) -> np.ndarray:
    """A column of 16-byte values (``V16`` or ``(n, 16)`` uint8) as ``(n, 2)`` uint64 words."""
    return np.ascontiguousarray(column).view(np.uint64).reshape(-1, 2)


def _resolve(parts: list[_Entries]) -> tuple[_Entries, np.ndarray | None]:
    """Per key, the entry a lookup takes: the first in the newest run (``parts`` are in that order), sorted by
    key hash; and, when two keys of them share a key hash, their join keys (``S24``, and the entries in that order).

    Sorting by key hash alone keeps the entries of one key hash in run order (a stable
    sort); only if such a group holds two keyprints (a key hash collision, or a run
    that lies) are they sorted by the whole join key, a slower sort of 24-byte strings.
    """
    if not parts:
        return _Entries(*(np.empty(shape, dtype) for shape, dtype in _EMPTY)), None
    every = _Entries(*(np.concatenate([getattr(part, name) for part in parts]) for name in _FIELDS))
    parts.clear()
    order = np.argsort(every.hashes, kind="stable")
    hashes = every.hashes[order]
    prints = every.prints[order]
    same_hash = hashes[1:] == hashes[:-1]
    same_key = same_hash & (prints[1:] == prints[:-1]).all(axis=1)
    del hashes, prints
    if not (same_hash & ~same_key).any():
        first = np.concatenate(([True], ~same_key))
        return every.take(order[first]), None
    keys = _join_keys(every.hashes, every.prints)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    first = np.ones(len(keys), bool)
    first[1:] = keys[1:] != keys[:-1]
    return every.take(order[first]), keys[first]


_FIELDS = ("hashes", "prints", "places", "contents", "runs")
_EMPTY = ((0, np.uint64), ((0, 2), np.uint64), (0, np.uint64), ((0, 2), np.uint64), (0, np.uint32))


def _join_keys(hashes: np.ndarray, prints: np.ndarray) -> np.ndarray:
    """Key hash and keyprint as one 24-byte string each, ordered as bytes (what a sort and a search compare)."""
    keys = np.empty(len(hashes), _KEY)
    keys["hash"] = hashes
    keys["print"] = np.ascontiguousarray(prints).view("V16")[:, 0]
    return keys.view("S24")


def _found(
    resolved: _Entries, keys: np.ndarray | None, hashes: np.ndarray, prints: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each key (its hash and keyprint): the position of its entry in ``resolved`` and whether it has one."""
    if not len(resolved.hashes):
        return np.zeros(len(hashes), np.int64), np.zeros(len(hashes), bool)
    last = len(resolved.hashes) - 1
    if keys is None:  # key hashes are unique: one search of them, then the keyprint compared
        at = np.minimum(np.searchsorted(resolved.hashes, hashes), last)
        found = (resolved.hashes[at] == hashes) & (resolved.prints[at] == prints).all(axis=1)
        return at, found
    wanted = _join_keys(hashes, prints)
    at = np.minimum(np.searchsorted(keys, wanted), last)
    return at, keys[at] == wanted


def _joined(
    resolved: _Entries, keys: np.ndarray | None, listed: Listed, paths: list[str], names: Names
) -> list[tuple[str, str]]:
    """Each manifest row against its key's deciding entry, then the live entries no row matched."""
    indexed = listed.indexed
    assert indexed is not None
    matched = np.zeros(len(resolved.hashes), bool)
    absent: list[tuple[int, int]] = []
    deleted: list[tuple[int, int]] = []
    moved: list[tuple[int, int]] = []
    changed: list[tuple[int, int]] = []
    counted = 0
    for start in range(0, len(listed), _SLICE):
        rows = slice(start, min(start + _SLICE, len(listed)))
        at, found = _found(resolved, keys, indexed.run_hash[rows], indexed.keyprint[rows])
        matched[at[found]] = True
        places = resolved.places[at]
        is_deleted = found & (places == _DELETED_PLACE)
        is_moved = found & ~is_deleted & (places != listed.location[rows])
        del places
        same_place = np.flatnonzero(found & ~is_deleted & ~is_moved)
        is_changed = np.zeros(len(found), bool)
        is_changed[same_place] = (resolved.contents[at[same_place]] != _words(indexed.content[rows][same_place])).any(
            axis=1
        )
        for mask, bucket in ((~found, absent), (is_deleted, deleted), (is_moved, moved), (is_changed, changed)):
            where = np.flatnonzero(mask)
            counted += len(where)
            room = max(NAMED - sum(len(named) for named in (absent, deleted, moved, changed)), 0)
            bucket.extend(zip((where[:room] + start).tolist(), at[where[:room]].tolist(), strict=True))
    problems = _named_rows(listed, resolved, paths, names, absent, deleted, moved, changed)
    stray = np.flatnonzero(~matched & (resolved.places != _DELETED_PLACE))
    for entry in stray[: max(NAMED - len(problems), 0)].tolist():
        keyprint = resolved.prints[entry].tobytes().hex()
        problems.append(
            (
                paths[int(resolved.runs[entry])],
                f"the key index holds a live entry for a key the version does not hold (keyprint {keyprint}), "
                f"at {_place(int(resolved.places[entry]), names)}",
            )
        )
    unnamed = counted + len(stray) - len(problems)
    if unnamed > 0:
        problems.append((paths[0], f"{unnamed} more keys whose key index entries disagree with the manifest"))
    return problems


def _named_rows(
    listed: Listed,
    resolved: _Entries,
    paths: list[str],
    names: Names,
    absent: list[tuple[int, int]],
    deleted: list[tuple[int, int]],
    moved: list[tuple[int, int]],
    changed: list[tuple[int, int]],
) -> list[tuple[str, str]]:
    """The manifest rows that disagree with the index, named by their keys (read again: they are few)."""
    wanted = np.unique(np.array([row for bucket in (absent, deleted, moved, changed) for row, _ in bucket], np.int64))
    if not len(wanted):
        return []
    table = listed.rows(wanted, ("key", "chunk", "row"))
    position = {int(row): at for at, row in enumerate(wanted.tolist())}
    keys = table.column("key").to_pylist()
    chunks = table.column("chunk").to_pylist()
    rows = table.column("row").to_pylist()

    def listed_at(row: int) -> str:
        return f"{chunks[position[row]]} row {rows[position[row]]}"

    problems = []
    for row, _ in absent:
        key = keys[position[row]]
        problems.append((paths[0], f"key {key!r} (at {listed_at(row)}) is in no key run: lookups do not find it"))
    for row, entry in deleted:
        key = keys[position[row]]
        problems.append(
            (paths[int(resolved.runs[entry])], f"key {key!r} (at {listed_at(row)}) is deleted by the key index")
        )
    for row, entry in moved:
        key = keys[position[row]]
        problems.append(
            (
                paths[int(resolved.runs[entry])],
                f"key {key!r} is at {_place(int(resolved.places[entry]), names)} by the key index, "
                f"at {listed_at(row)} by the manifest",
            )
        )
    for row, entry in changed:
        key = keys[position[row]]
        problems.append(
            (
                paths[int(resolved.runs[entry])],
                f"key {key!r} (at {listed_at(row)}) has another content hash in the key index than in the manifest",
            )
        )
    return problems


def _place(place: int, names: Names) -> str:
    return f"{names.chunks[place >> 32]} row {place & 0xFFFFFFFF}"


def sidecar_words(storage: Storage, present: dict[str, set[str]], chunk: ChunkInfo) -> np.ndarray | None:
    """``chunk``'s hashes sidecar as ``(n, 2)`` words, checked; ``None``: it has none (or it was removed since it
    was listed: readers fall back to the manifest). ``present`` caches each fragment's listing.

    Raises:
        IntegrityError: the sidecar does not parse (cut, of another item count or chunk, failing its checksum).
    """
    path = layout.chunk_hashes(chunk.filename)
    fragment, _, name = path.rpartition("/")
    if fragment not in present:
        present[fragment] = set(storage.names(fragment))
    if name not in present[fragment]:
        return None
    try:
        data = storage.mapped(path)
        if data is None:  # never more than a sidecar of this chunk can be (one byte more shows it is longer)
            data = storage.read_range(path, 0, chunkhashes.size(chunk.num_items) + 1)
    except MissingFileError:
        return None
    return np.frombuffer(chunkhashes.parse(chunk.filename, data, chunk.num_items), np.uint64).reshape(-1, 2)


class Sidecars:
    """The hashes sidecars of the listed chunks against the manifest, checked as ``verify`` reads each chunk.

    A listed item whose pair hash matched its manifest row's holds that row's content
    hash, which ``verify`` has just computed, so the sidecar is compared with the item's
    hash (:meth:`part`); only the listed rows whose item did not match (or was not read:
    a missing or damaged chunk) are compared with the manifest's hash, read again for
    them at the end (:meth:`finish`). Chunks without a sidecar are not checked (readers
    fall back to the manifest). Memory: the sidecar of the chunk being read.
    """

    def __init__(self, storage: Storage, listings: Sequence[tuple[str, ChunkInfo]], enabled: bool) -> None:
        self._storage = storage
        self._listings = listings
        self._enabled = enabled
        self._first: dict[str, int] = {}
        for listing, (_, chunk) in enumerate(listings):
            self._first.setdefault(chunk.filename, listing)
        self._present: dict[str, set[str]] = {}
        self._current: tuple[int, np.ndarray | None, np.ndarray] | None = None  # listing, words, items compared
        self._reached: set[int] = set()
        self._wrong: dict[int, list[np.ndarray]] = {}  # listing: items whose sidecar hash is not their row's
        self._deferred: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # listing: manifest rows, items
        self._problems: dict[int, tuple[str, str]] = {}

    def _open(self, listing: int) -> np.ndarray | None:
        """Listing ``listing``'s sidecar as ``(n, 2)`` words; ``None``: there is none, or it does not parse."""
        chunk = self._listings[listing][1]
        try:
            return sidecar_words(self._storage, self._present, chunk)
        except IntegrityError as exc:
            self._problems[listing] = (layout.chunk_hashes(chunk.filename), str(exc))
            return None

    def _reach(self, listing: int, rows_at: Callable[[int, int], tuple[np.ndarray, np.ndarray]]) -> None:
        if self._current is not None and self._current[0] == listing:
            return
        self._close(rows_at)
        self._reached.add(listing)
        words = self._open(listing)
        count = self._listings[listing][1].num_items if words is not None else 0
        self._current = (listing, words, np.zeros(count, bool))

    def _close(self, rows_at: Callable[[int, int], tuple[np.ndarray, np.ndarray]]) -> None:
        """The rows of the chunk left whose items were not compared: compared with the manifest at the end."""
        if self._current is None:
            return
        listing, words, compared = self._current
        self._current = None
        if words is None:
            return
        rows, items = rows_at(listing, len(compared))
        todo = ~compared[items]
        if todo.any():
            self._deferred[listing] = (rows[todo], items[todo])

    def part(
        self,
        listing: int,
        start: int,
        contents: np.ndarray,
        items: np.ndarray,
        same: np.ndarray,
        rows_at: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    ) -> None:
        """Items ``start`` onwards of listing ``listing``'s chunk were read: their content hashes, the ones the
        manifest lists (``items``, from ``start``) and which of those matched their row."""
        if not self._enabled or self._first[self._listings[listing][1].filename] != listing:
            return
        self._reach(listing, rows_at)
        assert self._current is not None
        _, words, compared = self._current
        if words is None:
            return
        matched = items[same]
        count = len(contents)
        if count and len(matched) == count and start + count <= len(words) and (np.diff(matched) == 1).all():
            # Every item read matched its row (the common case): compared as slices, no gather.
            held, computed = words[start : start + count], _words(contents)
            wrong = np.flatnonzero((held[:, 0] != computed[:, 0]) | (held[:, 1] != computed[:, 1]))
            if len(wrong):
                self._wrong.setdefault(listing, []).append(wrong + start)
            compared[start : start + count] = True
            return
        at = matched + start
        inside = at < len(words)
        at, matched = at[inside], matched[inside]
        wrong = (words[at] != _words(contents[matched])).any(axis=1)
        if wrong.any():
            self._wrong.setdefault(listing, []).append(at[wrong])
        compared[at] = True

    def finish(
        self, listed: Listed, rows_at: Callable[[int, int], tuple[np.ndarray, np.ndarray]]
    ) -> list[tuple[str, str]]:
        """Every problem found, in the order of the listings: chunks no part reached are checked now."""
        if not self._enabled:
            return []
        self._close(rows_at)
        for listing in sorted(set(self._first.values()) - self._reached):
            self._reach(listing, rows_at)
            self._close(rows_at)
        if self._deferred:
            wanted = np.unique(np.concatenate([rows for rows, _ in self._deferred.values()]))
            table = listed.rows(wanted, ("content_hash",))
            contents = _words(verify_listed.content_rows(table.column("content_hash")))
            for listing, (rows, items) in self._deferred.items():
                words = self._open(listing)
                assert words is not None
                wrong = (words[items] != contents[np.searchsorted(wanted, rows)]).any(axis=1)
                if wrong.any():
                    self._wrong.setdefault(listing, []).append(items[wrong])
        problems = []
        for listing in sorted({*self._wrong, *self._problems}):
            if listing in self._problems:
                problems.append(self._problems[listing])
                continue
            chunk = self._listings[listing][1]
            bad = np.unique(np.concatenate(self._wrong[listing]))
            shown = ", ".join(map(str, bad[:8].tolist())) + (" and more" if len(bad) > 8 else "")
            what = f"rows {shown} ({len(bad)} of {chunk.num_items}) hold another content hash than the manifest's"
            problems.append((layout.chunk_hashes(chunk.filename), what))
        return problems
