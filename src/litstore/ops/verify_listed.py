"""The rows a version's manifest lists, as ``verify`` holds them: fixed-size numpy columns, streamed in.

A version's manifest is its newest checkpoint with the deltas after it applied
(:func:`litstore.read.manifests.compose`). Composing it as one Arrow table holds every
key string, chunk name and field value at once; ``verify`` needs of each row only
what it compares, so :func:`read_listed` applies the same rule while it reads the
files one row group at a time and keeps, per live row, 26 bytes:

- ``key_hash`` (8): the first 8 bytes of the key's keyprint (xxh3-128 of its bytes,
  :func:`litstore.format.hashing.keyprint`), to find duplicate keys by sorting (every
  duplicate is then confirmed by its key: two keys may share a hash);
- ``pair`` (8): the first word of the row's fingerprint term, xxh3-128 of key bytes
  and content hash (:func:`litstore.format.hashing.pair_hash`): a record read from a
  chunk matches the row when its own pair's first word is equal, so key and content
  are compared at once (a damaged record that matched by a 2**-64 chance would still
  change the data fingerprint, which sums whole pairs); the manifest's fingerprint,
  the sum of whole pairs, is summed as the rows stream past;
- ``location`` (8): chunk number << 32 | row;
- ``split`` (2): the split's number.

For a version with key runs (formats 3 and 4), what each row's index entry must hold
(key hash runs sort by: xxh3-64 of the key's bytes; keyprint; place; content hash) is
summed as a seeded digest (:class:`IndexDigest`), which
:func:`litstore.ops.verify_index.check_key_index` compares with the same sum over the
runs' resolved entries. Only when the sums differ is the manifest read again with
``detail``, keeping those 40 bytes a row (:class:`Indexed`) to name the rows that
disagree.

The rule needs to know which keys newer deltas mention: those are kept as their
keyprints (16 bytes each, what key runs identify keys by), sorted, and a row of an
older file is dropped when its keyprint is one of them. As when a checkpoint is
written (:func:`litstore.read.manifests.stream_compose`), the keys of added rows are
not kept: an added key is one the parent did not hold, so any older row of it is
already hidden by a newer deletion, and a store built by appends keeps none. A delta
that says a key was added while its parent held it is thereby reported (the key
twice, counts and fingerprint off) instead of hiding the parent's row as
:func:`~litstore.read.manifests.compose` would: the checkpoint written on that chain
would hold the key twice. The few rows a report names are read again by
:meth:`Listed.replay`, which reads the same row groups and keeps the same rows (a
bit per row was kept for that) without hashing anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from litstore.errors import IntegrityError
from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.manifest import ChangeKind
from litstore.format.models import StoreConfig, Version
from litstore.read import log
from litstore.read.memory import release_freed
from litstore.storage import Storage

_COLUMNS = ("key", "content_hash", "split", "chunk", "row")


@dataclass
class Names:
    """Numbers for chunk and split names, shared by the manifest's rows and the chunks read."""

    chunks: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    _chunk_codes: dict[str, int] = field(default_factory=dict)
    _split_codes: dict[str, int] = field(default_factory=dict)

    def chunk(self, name: str) -> int:
        code = self._chunk_codes.get(name)
        if code is None:
            code = self._chunk_codes[name] = len(self.chunks)
            self.chunks.append(name)
        return code

    def split(self, name: str) -> int:
        code = self._split_codes.get(name)
        if code is None:
            if len(self.splits) >= 2**16:
                raise IntegrityError(f"the manifest names more than {2**16} splits")
            code = self._split_codes[name] = len(self.splits)
            self.splits.append(name)
        return code


@dataclass
class Indexed:
    """What a format-3 version's rows also keep, one entry per row: what its key index and sidecars must say."""

    content: np.ndarray  # (n, 16) uint8: the committed content hash
    keyprint: np.ndarray  # (n, 2) uint64: the keyprint, as two words
    run_hash: np.ndarray  # uint64: xxh3-64 of the key's bytes (empty if the version lists no key runs)


#: The modulus of :meth:`IndexDigest.sum` (two 64-bit lanes).
INDEX_MODULUS = 2**128
_MULTIPLIERS = tuple(
    np.uint64(value)
    for value in (
        0x9E3779B185EBCA87,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0x85EBCA77C2B2AE63,
        0x27D4EB2F165667C5,
        0x9FB21C651E98DF25,
    )
)
#: The finishing rounds of each term (murmur3's fmix64 multipliers; see :class:`IndexDigest`).
_FINISH = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))


class IndexDigest:
    """What the key index must say of one key, as a number: summed over a version's rows and over its index.

    A key's term mixes its key hash (xxh3-64), keyprint, place and content hash,
    starting from a seed drawn at random for each ``verify`` (so a forged index cannot
    be made to sum right without knowing it), in two 64-bit lanes. The rows of the
    manifest and the live entries a lookup resolves sum to the same number exactly
    when they agree key by key (but for a chance of about 2**-128); the sums are
    computed while each side streams past, so neither is held.

    Each word is mixed in by one round (xor, multiply, xorshift), and the term is then
    finished by two more: without them the last word's top bits were barely mixed (a
    flip of its bit 63 flipped just bits 63 and 31 of the term, whatever the seed), so
    a run whose entries' content hashes had that bit flipped in two keys summed right
    one ``verify`` in eight.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._seeds = np.random.default_rng(seed).integers(0, 2**63, 2, dtype=np.uint64)

    def sum(self, hashes: np.ndarray, prints: np.ndarray, places: np.ndarray, contents: np.ndarray) -> int:
        """The sum, modulo :data:`INDEX_MODULUS`, of the terms of keys with these key hashes, ``(n, 2)``
        keyprint words, places and ``(n, 2)`` content hash words."""
        return self.sum_words((hashes, prints[:, 0], prints[:, 1], places, contents[:, 0], contents[:, 1]))

    def sum_words(self, words: tuple[np.ndarray, ...]) -> int:
        """The sum, modulo :data:`INDEX_MODULUS`, of the terms of rows given as up to six uint64 columns."""
        total = 0
        for lane, seed in enumerate(self._seeds.tolist()):
            acc = np.full(len(words[0]), seed, np.uint64)
            for word, multiplier in zip(words, _MULTIPLIERS[: len(words)], strict=True):
                acc ^= word
                acc *= multiplier
                acc ^= acc >> np.uint64(32)
            for multiplier in _FINISH:  # (see the class docstring)
                acc *= multiplier
                acc ^= acc >> np.uint64(33)
            exact = int((acc & np.uint64(0xFFFFFFFF)).sum()) + (int((acc >> np.uint64(32)).sum()) << 32)
            total += exact << (64 * lane)  # exact sums: the sum of two calls is the call on both
        return total % INDEX_MODULUS


@dataclass
class Listed:
    """The live rows of a version's manifest, one entry per row in every array (see the module docstring)."""

    key_hash: np.ndarray
    pair: np.ndarray
    location: np.ndarray
    split: np.ndarray
    fingerprint: int
    _groups: list[tuple[str, bool, int, np.ndarray]]  # file, is a delta, row group, live rows (packed bits)
    _storage: Storage
    _key_type: str
    indexed: Indexed | None = None  # kept when asked for (see the module docstring)
    index_digest: IndexDigest | None = None  # for a version with key runs: what its rows were summed with
    index_sum: int = 0  # the sum of its rows' IndexDigest terms
    count: int = 0  # the live rows (the arrays hold them unless read with ``places``)
    place_sum: int = 0  # with ``places``: the sum of each row's :func:`place_words` terms
    key_sum: int = 0  # with ``places``: the sum of each row's key term (its keyprint's two words)

    def __len__(self) -> int:
        return self.count

    def replay(self, columns: tuple[str, ...] = _COLUMNS) -> Iterator[tuple[int, pa.Table]]:
        """The live rows again, as ``(number of the first, rows)`` per row group, in the order of the arrays."""
        first = 0
        files: dict[str, Iterator[pa.Table]] = {}
        for path, delta, _group, packed in self._groups:
            if path not in files:
                data = manifest_source(self._storage, path)
                files[path] = manifest_format.row_groups_of_parquet(data, path, self._key_type, columns, delta)
            table = next(files[path])
            live = np.unpackbits(packed, count=table.num_rows).astype(bool)
            rows = table.filter(arrow_mask(live))
            yield first, rows
            first += rows.num_rows

    def rows(self, wanted: np.ndarray, columns: tuple[str, ...] = _COLUMNS) -> pa.Table:
        """Rows ``wanted`` (sorted numbers into the arrays), with ``split`` and ``chunk`` as plain strings."""
        parts = []
        if len(wanted):
            for first, table in self.replay(columns):
                lo, hi = np.searchsorted(wanted, [first, first + table.num_rows])
                if hi > lo:
                    parts.append(manifest_format.decoded(table.take(arrow_int64(wanted[lo:hi] - first))))
        if not parts:  # (columns of nulls: a table of empty lists imports pandas, a third of a second)
            return pa.table({name: pa.nulls(0) for name in columns})
        return pa.concat_tables(parts)


class _Mentioned:
    """The keys newer deltas mention: their keyprints as two words each (16 bytes a key), one sorted run a delta.

    A filter over them all (a blocked Bloom filter: :class:`_Filter`) rules most rows
    out at one look: most rows of an older file are mentioned by no delta, and one that
    is not passes the filter about 1 time in 150. A row that passes is looked for run by
    run, where each run's own filter (16 bits a key, ~1 MiB a run of 500k keys: it stays
    in cache) says which runs to search; a row found in one is not looked for in the
    next. So there are no merges: a binary counter of merged runs (``O(n log d)`` moves
    of 16-byte keys for ``n`` keys in ``d`` deltas, and a search in each of its
    ``O(log d)`` runs for each of the 1 row in 8 that passed a one-bit-a-key filter) cost
    5.3 s CPU in a replay of 32 deltas of 500k keys that mention no older row (2.0 s
    now), 52 s when each names the same keys (4.4 s now); a row is now searched in
    about one run (the one that mentions it). A single set that every delta merged into
    cost a pass over the whole set per delta: quadratic.

    The global filter is rebuilt whenever the keys double (at most 32 MiB); the runs'
    filters take 2 bytes a key.
    """

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray, _Filter]] = []  # first words (sorted), second words, filter
        self._count = 0
        self._filter = _Filter(0)

    def add(self, prints: list[np.ndarray]) -> None:
        words = np.concatenate([_as_words(part) for part in prints])
        if not len(words):
            return
        first, second = _sorted_words(words)
        del words
        self._count += len(first)
        run_filter = _Filter(len(first))
        run_filter.mark(first)
        self.runs.append((first, second, run_filter))
        if _Filter.bits_for(self._count) != self._filter.bits:  # outgrown (twice the keys): marked again
            self._filter = _Filter(self._count)
            for run_first, _, _ in self.runs:
                self._filter.mark(run_first)
        else:
            self._filter.mark(first)

    def rows_of(self, prints: np.ndarray) -> np.ndarray:
        """Which rows of keyprints ``prints`` are mentioned: by the filter, then in each run whose filter lets
        them through, by first word and second (a row found in one run is not looked for in the next)."""
        found = np.zeros(len(prints), bool)
        if not self._count:
            return found
        words = _as_words(prints)
        left = np.flatnonzero(self._filter.maybe(words[:, 0]))
        # Searched for in sorted order (each search starts where the one before ended): 5x faster.
        left = left[np.argsort(words[left, 0])]
        for first, second, run_filter in reversed(self.runs):  # (newest first: as likely as any)
            if not len(left):
                break
            asked = left[run_filter.maybe(words[left, 0])]
            if not len(asked):
                continue
            hit = _in_run(first, second, words[asked])
            found[asked[hit]] = True
            left = left[~found[left]]
        return found


def _sorted_words(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 2)`` keyprint words sorted by the first: the first words and the second words in their order.

    The order comes from sorting plain numbers, each row's first word with its low bits
    replaced by its row number (numpy sorts uint64 four times faster than it argsorts
    them); rows whose first words agree in the bits kept can come out of order, and
    are then sorted the slow way.
    """
    count = len(words)
    low = np.uint64((1 << max(count - 1, 1).bit_length()) - 1)
    order: np.ndarray = (np.sort((words[:, 0] & ~low) | np.arange(count, dtype=np.uint64)) & low).astype(np.intp)
    first = words[order, 0]
    if not bool((first[1:] >= first[:-1]).all()):
        order = np.argsort(words[:, 0])
        first = words[order, 0]
    return first, words[order, 1]


class _Filter:
    """A blocked Bloom filter of 64-bit first words of keyprints: about :data:`_BITS_PER_KEY` bits a key.

    The word's top bits pick one 64-bit block and three 6-bit fields of its low bits
    the block's bits that the key sets: one look (one cache line) a word asked, and
    about 1 word in 150 not added passes at 16 bits a key.
    """

    def __init__(self, keys: int) -> None:
        self.bits = self.bits_for(keys)  # log2 of the blocks
        self._blocks = np.zeros(1 << self.bits, np.uint64)

    @staticmethod
    def bits_for(keys: int) -> int:
        return min(max(int(keys * _BITS_PER_KEY // 64).bit_length(), 4), 22)  # (at most 2**22 blocks: 32 MiB)

    def _block_bits(self, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = first >> np.uint64(64 - self.bits)
        one = np.uint64(1)
        mask = np.left_shift(one, first & np.uint64(63))
        mask |= np.left_shift(one, (first >> np.uint64(6)) & np.uint64(63))
        mask |= np.left_shift(one, (first >> np.uint64(12)) & np.uint64(63))
        return block, mask

    def mark(self, first: np.ndarray) -> None:
        """Add sorted first words ``first``."""
        if not len(first):
            return
        block, mask = self._block_bits(first)  # (blocks sorted, as ``first`` is)
        starts = np.flatnonzero(np.concatenate(([True], block[1:] != block[:-1])))
        self._blocks[block[starts]] |= np.bitwise_or.reduceat(mask, starts)

    def maybe(self, first: np.ndarray) -> np.ndarray:
        """Which of first words ``first`` may have been added (false: surely not)."""
        block, mask = self._block_bits(first)
        maybe: np.ndarray = (self._blocks[block] & mask) == mask
        return maybe


def _in_run(first: np.ndarray, second: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Which of ``(n, 2)`` keyprint ``words`` (sorted by the first) one run (sorted ``first`` words, ``second``
    in their order) holds."""
    found = np.zeros(len(words), bool)
    # One search (not a left and a right one): most words searched for are in no run.
    lo = np.searchsorted(first, words[:, 0], "left")
    candidates = np.flatnonzero(first[np.minimum(lo, len(first) - 1)] == words[:, 0])
    if not len(candidates):
        return found
    at = lo[candidates]
    found[candidates] = second[at] == words[candidates, 1]
    shared = at + 1 < len(first)
    shared[shared] = first[at[shared] + 1] == words[candidates[shared], 0]
    for row in candidates[shared].tolist():  # a first word several mentioned keys share
        hi = int(np.searchsorted(first, words[row, 0], "right"))
        found[row] = bool((second[lo[row] : hi] == words[row, 1]).any())
    return found


#: Bits of a :class:`_Filter` per key.
_BITS_PER_KEY = 16


#: The columns :func:`read_listed` keeps: dtype and the shape of one row's value.
_SHAPES: dict[str, tuple[type, tuple[int, ...]]] = {
    "key_hash": (np.uint64, ()),
    "pair": (np.uint64, ()),
    "location": (np.uint64, ()),
    "split": (np.uint16, ()),
    "content": (np.uint8, (16,)),
    "keyprint": (np.uint64, (2,)),
    "run_hash": (np.uint64, ()),
}


class _Columns:
    """Fixed-size columns filled a row group at a time, each one array made up front for the rows expected.

    Kept as a list of row groups' arrays and concatenated at the end, the columns
    took twice their size while being joined, and the row groups' arrays, freed
    among the allocations made since, left about 35 bytes a row of malloc's heap
    that the process did not give back. One array per column, sized for the rows
    the commit record counts, is written in place; a manifest that lists more (a
    damaged one) grows it. Pages never written are never resident, so a version
    whose chain lists fewer rows costs what it lists.
    """

    def __init__(self, shapes: dict[str, tuple[type, tuple[int, ...]]], expected: int) -> None:
        self._arrays: dict[str, np.ndarray] = {
            name: np.empty((expected, *shape), dtype) for name, (dtype, shape) in shapes.items()
        }
        self._count = 0

    def add(self, values: dict[str, np.ndarray]) -> None:
        """Append one row group's values (one array per column, all of the same length)."""
        rows = len(values["key_hash"])
        end = self._count + rows
        for name, column in self._arrays.items():
            if end > len(column):  # more rows than the commit record counts
                grown = np.empty((max(end, 2 * len(column)), *column.shape[1:]), column.dtype)
                grown[: self._count] = column[: self._count]
                self._arrays[name] = column = grown
            column[self._count : end] = values[name]
        self._count = end

    def filled(self) -> dict[str, np.ndarray]:
        """The columns, as long as the rows added."""
        return {name: column[: self._count] for name, column in self._arrays.items()}


def manifest_source(storage: Storage, path: str) -> bytes | pa.NativeFile:
    """Manifest file ``path`` to stream row groups from: a local file is read by ranges as its row groups are
    (a checkpoint of 16M rows is about 300 MB, which reading it whole would hold), another is read whole."""
    local = storage.local_path(path)
    if local is not None:
        try:
            return pa.OSFile(local)
        except FileNotFoundError:
            pass  # removed since it was listed: the storage says so, typed
    return storage.read(path)


def arrow_mask(mask: np.ndarray) -> pa.BooleanArray:
    """A numpy bool array as an Arrow one, from its buffer (``pa.array`` imports pandas: a third of a second)."""
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.BooleanArray.from_buffers(pa.bool_(), len(mask), [None, bits])


def arrow_int64(values: np.ndarray) -> pa.Int64Array:
    """A numpy array of integers as an Arrow ``int64`` one, from its buffer (see :func:`arrow_mask`)."""
    data = pa.py_buffer(np.ascontiguousarray(values, np.int64))
    return pa.Int64Array.from_buffers(pa.int64(), len(values), [None, data])


def dictionary_indices(array: pa.DictionaryArray) -> np.ndarray:
    """The indices of a dictionary array as int64, ``-1`` where null: from its buffers (``to_numpy`` of indices
    with nulls imports pandas, see :func:`arrow_mask`)."""
    indices = array.indices
    width = indices.type.bit_width // 8
    kind = "i" if pa.types.is_signed_integer(indices.type) else "u"
    values = np.frombuffer(
        indices.buffers()[1], f"<{kind}{width}", count=len(indices), offset=indices.offset * width
    ).astype(np.int64)
    if indices.null_count:
        bits = np.frombuffer(indices.buffers()[0], np.uint8)
        valid = np.unpackbits(bits, count=indices.offset + len(indices), bitorder="little")[indices.offset :]
        values[valid == 0] = -1
    return values


def _integers(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column without nulls as one numpy array, from its buffers (see :func:`arrow_mask`)."""
    parts = [np.zeros(0, np.int64)]
    for chunk in column.chunks:
        width = chunk.type.bit_width // 8
        kind = "i" if pa.types.is_signed_integer(chunk.type) else "u"
        parts.append(
            np.frombuffer(chunk.buffers()[1], f"<{kind}{width}", count=len(chunk), offset=chunk.offset * width)
        )
    return np.concatenate(parts) if len(parts) > 2 else parts[-1]


def _as_words(prints: np.ndarray) -> np.ndarray:
    """``(n, 16)`` keyprint bytes as ``(n, 2)`` uint64 words, compared two words a row instead of sixteen bytes."""
    return np.ascontiguousarray(prints).view(np.uint64).reshape(-1, 2)


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The key hash ``verify`` compares keys by (see :func:`key_hashes_of`)."""
    return key_hashes_of(hashing.keyprint_rows(keys))


def key_hashes_of(prints: np.ndarray) -> np.ndarray:
    """The key hashes of keys whose keyprints are the rows of ``prints``: their first 8 bytes, as uint64."""
    return _as_words(prints)[:, 0].copy()


def place_words(location: np.ndarray, pair: np.ndarray, split: np.ndarray) -> tuple[np.ndarray, ...]:
    """What says a row (or item) is the one at its place: its location, both words of its pair hash (key and
    content) and its split, as the columns an :class:`IndexDigest` sums."""
    words = _as_words(pair)
    return location, words[:, 0].copy(), words[:, 1].copy(), split.astype(np.uint64)


def read_listed(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    names: Names,
    detail: bool = False,
    digest: IndexDigest | None = None,
    places: IndexDigest | None = None,
) -> Listed:
    """Stream ``version``'s manifest files into fixed columns (see the module docstring).

    For a version with key runs, the rows' :class:`IndexDigest` terms (``digest``'s, or
    a new one's) are summed as they stream past; with ``detail``, what each row's index
    entry must hold is kept instead (:class:`Indexed`, 40 bytes more a row), to name the
    rows that disagree. With ``places``, nothing is kept per row: each row's place,
    pair hash and split are summed by it instead (:func:`place_words`), and its
    keyprint, for :mod:`litstore.ops.verify_summed`, which compares the sums with the
    items' own and the expected keys'.

    Raises:
        VersionNotFoundError: gc expired a version of its chain.
        IntegrityError: a manifest file or commit record is damaged, or names a chunk outside the layout.
    """
    files: list[tuple[str, bool]] = []
    if version.number > 0:
        deltas, checkpoint = log.manifest_chain(storage, version, set(storage.names(layout.MANIFESTS)))
        files = [(path, True) for path in deltas] + ([(checkpoint, False)] if checkpoint else [])
    indexed = detail and config.writes_key_runs
    run_hashed = config.writes_key_runs and bool(version.key_runs)
    digest = (digest or IndexDigest()) if run_hashed and not detail else None
    index_sum = 0
    shapes = dict(_SHAPES) if indexed else {name: _SHAPES[name] for name in ("key_hash", "pair", "location", "split")}
    if not run_hashed:
        shapes.pop("run_hash", None)
    held = places is None
    columns = _Columns(shapes, version.total if held else 0)
    groups: list[tuple[str, bool, int, np.ndarray]] = []
    count = place_sum = key_sum = 0
    mentioned = _Mentioned()
    fingerprint = 0
    for number, (path, delta) in enumerate(files):
        newer = number + 1 < len(files)  # an older file follows, whose rows the keys of this one supersede
        data = manifest_source(storage, path)
        wanted = (*_COLUMNS, "change") if delta else _COLUMNS
        file_prints: list[np.ndarray] = []
        for group, table in enumerate(
            manifest_format.row_groups_of_parquet(data, path, config.key_type, wanted, delta)
        ):
            prints = hashing.keyprint_rows(table.column("key"))
            live = ~mentioned.rows_of(prints)
            if delta:
                if newer:  # (an added key hides no older row: see the module docstring)
                    file_prints.append(prints[~_is_change(table.column("change"), ChangeKind.ADDED)])
                live &= ~_is_change(table.column("change"), ChangeKind.DELETED)
            _check_chunk_names(table.column("chunk"), path, delta)
            if held:
                groups.append((path, delta, group, np.packbits(live)))
            rows = table.filter(arrow_mask(live)) if not live.all() else table
            if not rows.num_rows:
                continue
            pair, location, split = _fixed_columns(rows, path, names)
            fingerprint += hashing.digest_sum(pair)
            words = _as_words(prints)[live]
            row = {"key_hash": words[:, 0], "pair": _as_words(pair)[:, 0], "location": location, "split": split}
            if indexed:
                row["content"] = content_rows(rows.column("content_hash"))
                row["keyprint"] = words
                if run_hashed:
                    row["run_hash"] = hashing.key_hash_array(rows.column("key"))
            elif digest is not None:
                contents = _as_words(content_rows(rows.column("content_hash")))
                run_hashes = hashing.key_hash_array(rows.column("key"))
                index_sum += digest.sum(run_hashes, words, location, contents)
            count += rows.num_rows
            if places is None:
                columns.add(row)
            else:
                place_sum += places.sum_words(place_words(location, pair, split))
                key_sum += places.sum_words((words[:, 0].copy(), words[:, 1].copy()))
        if file_prints:
            mentioned.add(file_prints)
        release_freed()  # a file's row groups, read and hashed
    del mentioned  # (its keyprints are not needed from here)
    arrays = columns.filled()
    kept = None
    if indexed:
        run_hash = arrays["run_hash"] if run_hashed else np.empty(0, np.uint64)
        kept = Indexed(arrays["content"], arrays["keyprint"], run_hash)
    return Listed(
        arrays["key_hash"],
        arrays["pair"],
        arrays["location"],
        arrays["split"],
        fingerprint % hashing.FINGERPRINT_MODULUS,
        groups,
        storage,
        config.key_type,
        kept,
        digest,
        index_sum % INDEX_MODULUS,
        count,
        place_sum % INDEX_MODULUS,
        key_sum % INDEX_MODULUS,
    )


def content_rows(column: pa.ChunkedArray) -> np.ndarray:
    """A ``content_hash`` column (16-byte binary, no nulls) as the rows of an ``(n, 16)`` uint8 array."""
    contents = column.combine_chunks()
    data = np.frombuffer(contents.buffers()[1], np.uint8, count=16 * len(contents), offset=16 * contents.offset)
    return data.reshape(-1, 16).copy()


def read_listed_and_names(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    names: Names,
    digest: IndexDigest | None,
    places: IndexDigest | None = None,
) -> tuple[Listed, Names]:
    """:func:`read_listed`, and ``names`` as it left them: for a worker process, whose ``names`` is a copy."""
    return read_listed(storage, config, version, names, digest=digest, places=places), names


def _is_change(column: pa.ChunkedArray, kind: ChangeKind) -> np.ndarray:
    """Which rows of a dictionary-encoded ``change`` column are ``kind``."""
    parts = [np.zeros(0, bool)]
    for chunk in column.chunks:
        codes = [code for code, value in enumerate(chunk.dictionary.to_pylist()) if value == str(kind)]
        parts.append(np.isin(dictionary_indices(chunk), codes))
    return np.concatenate(parts)


def _check_chunk_names(column: pa.ChunkedArray, path: str, delta: bool) -> None:
    """Every chunk name of a row group must be one of the layout's (a delta's deleted rows name none)."""
    for chunk in column.chunks:
        for name in chunk.dictionary.to_pylist():
            if name == "" and delta:
                continue
            try:
                layout.check_chunk(name)
            except ValueError as exc:
                raise IntegrityError(f"manifest file {path} is damaged: {exc}") from exc


def _fixed_columns(rows: pa.Table, path: str, names: Names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair hashes, locations and split numbers of live manifest rows, their chunk names checked."""
    for name in ("content_hash", "split", "chunk", "row"):
        if rows.column(name).null_count:
            raise IntegrityError(f"manifest file {path} is damaged: a live row has no {name}")
    pair = hashing.pair_hashes(rows.column("key"), rows.column("content_hash"))
    location = _integers(rows.column("row")).astype(np.uint64)
    split = np.empty(rows.num_rows, np.uint16)
    at = 0
    for chunk, split_chunk in zip(rows.column("chunk").chunks, rows.column("split").chunks, strict=True):
        size = len(chunk)
        table = np.asarray([names.chunk(name) for name in chunk.dictionary.to_pylist()], np.uint64)
        location[at : at + size] |= table[dictionary_indices(chunk)] << np.uint64(32)
        split_codes = np.asarray([names.split(name) for name in split_chunk.dictionary.to_pylist()], np.uint16)
        split[at : at + size] = split_codes[dictionary_indices(split_chunk)]
        at += size
    return pair, location, split
