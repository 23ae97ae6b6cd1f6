"""Checking a version against its data: what :meth:`Store.verify` runs.

``verify`` trusts nothing it can recompute. It reads every chunk the version's
litdata index files list, hashes every stored item and decodes its key, and
compares that with the manifest and the commit record:

- duplicate keys, in the manifest or in the chunks (a key that would stream twice);
- expected keys that are missing, and keys present but not expected;
- records whose stored bytes do not match their manifest row (content hash, key or
  split), rows the manifest lists but the chunks lack, and chunk rows the manifest
  does not list (key hashes are derived from the keys when a manifest is read, so
  none can disagree with its key);
- chunk files that are missing, truncated, or whose layout is damaged;
- record counts and the fingerprint, recomputed from the manifest and from the
  data, against the commit record;
- for a format-3 or 4 version, its key runs and its chunks' hashes sidecars, which
  lookups and streaming read instead of the manifest, against the manifest
  (:mod:`litstore.ops.verify_index`);
- for a format-4 version, its deletion vectors (:mod:`litstore.ops.verify_deletions`):
  each listed chunk's decodes, and a dead row is exactly a row the manifest does not
  list. Dead rows are not data: they are not "stored but not listed", not
  duplicates, and count in neither the record counts nor the data fingerprint.

A version with key runs is first checked by sums (:mod:`litstore.ops.verify_summed`),
holding nothing per record (and, with ``expected_keys``, that its keys are exactly
those): a sound version is reported from those alone; anything else (or a version
without key runs) runs the full match below, which names every problem.

In bounded memory: the manifest is streamed, one row group at a time, into 26 bytes
of fixed-size numpy columns per row (:mod:`litstore.ops.verify_listed`), never one
Arrow table of the version, and the chunks are read one part at a time into 33 bytes
per item (:mod:`litstore.ops.verify_stored`); no Python object is made per record.
A manifest row and the item at its chunk and row agree when their pair hashes
(xxh3-128 of key bytes and content hash, the fingerprint's terms) do; only the rows
and items that disagree, or whose key hashes meet, are read again to name their keys.
Memory is about 32 bytes a record (46 while the rows are sorted by place) plus a few
chunks. The key runs of a format-3 or 4 version are checked by sums, one range of
key hashes at a time, and the sidecars against the items' hashes as each chunk is read
(:mod:`litstore.ops.verify_index`): neither holds anything per record unless the sums
disagree, when the disagreements are named at the old cost (40 bytes more a row and
48 an index entry). A format-4 version keeps the dead rows of the chunk being matched
(4 bytes each) and up to 64 decoded vectors, and 16 bytes per dead row the manifest
lists (a damaged vector). ``num_workers`` processes read
the chunks (and one the manifest) while this one matches what they return: xxhash
and msgpack hold the GIL for small items, so threads would not run them side by side.
Without workers, one thread reads and sums the key runs while this one streams the
manifest in (numpy, Parquet and file reads, which release the GIL for the most part),
then reads the chunks, up to :data:`~litstore.ops.verify_stored.AHEAD` parts of
:data:`~litstore.ops.verify_stored.PART_ITEMS` items ahead of the matching here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from litstore._litdata.index import ChunkInfo
from litstore.errors import InvalidArgumentError, VerificationError, describe
from litstore.format import hashing
from litstore.format.models import StoreConfig, Version
from litstore.ops import verify_deletions, verify_index, verify_listed, verify_stored, verify_summed
from litstore.storage import Storage


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``ok`` is true when every list is empty and every figure matches."""

    version: int
    records_checked: int
    chunks_checked: int
    duplicate_keys: list[Any] = field(default_factory=list)
    missing_keys: list[Any] = field(default_factory=list)
    unexpected_keys: list[Any] = field(default_factory=list)
    corrupt_records: list[tuple[Any, str, int, str]] = field(default_factory=list)  # key, chunk, row, problem
    missing_records: list[tuple[Any, str, int]] = field(default_factory=list)
    unlisted_records: list[tuple[Any, str, int]] = field(default_factory=list)
    missing_chunks: list[str] = field(default_factory=list)
    damaged_chunks: list[tuple[str, str]] = field(default_factory=list)  # chunk, problem
    count_mismatches: list[tuple[str, int, int]] = field(default_factory=list)  # split, committed, found
    index_problems: list[tuple[str, str]] = field(default_factory=list)  # key run or sidecar file, problem
    deletion_problems: list[tuple[str, str]] = field(default_factory=list)  # deletions file, problem
    fingerprint: str = ""
    manifest_fingerprint: str = ""
    data_fingerprint: str = ""

    @property
    def fingerprint_ok(self) -> bool:
        return self.fingerprint == self.manifest_fingerprint == self.data_fingerprint

    @property
    def ok(self) -> bool:
        problems = (
            self.duplicate_keys,
            self.missing_keys,
            self.unexpected_keys,
            self.corrupt_records,
            self.missing_records,
            self.unlisted_records,
            self.missing_chunks,
            self.damaged_chunks,
            self.count_mismatches,
            self.index_problems,
            self.deletion_problems,
        )
        return self.fingerprint_ok and not any(problems)

    def problems(self) -> list[str]:
        """One line per kind of problem found; empty when ``ok``."""
        lines = []
        for label, items in (
            ("duplicate keys", self.duplicate_keys),
            ("expected keys missing", self.missing_keys),
            ("unexpected keys", self.unexpected_keys),
            ("corrupt records (key, chunk, row, problem)", self.corrupt_records),
            ("records listed but not stored (key, chunk, row)", self.missing_records),
            ("records stored but not listed (key, chunk, row)", self.unlisted_records),
            ("missing chunks", self.missing_chunks),
            ("damaged chunks", self.damaged_chunks),
            ("record counts (split, committed, found)", self.count_mismatches),
            ("key index and sidecar problems (file, problem)", self.index_problems),
            ("deletion vector problems (file, problem)", self.deletion_problems),
        ):
            if items:
                lines.append(f"{len(items)} {label}: {describe(items)}")
        if not self.fingerprint_ok:
            lines.append(
                f"fingerprint mismatch: committed {self.fingerprint}, manifest {self.manifest_fingerprint}, "
                f"data {self.data_fingerprint}"
            )
        return lines

    def summary(self) -> str:
        """A readable account of the check."""
        head = (
            f"version {self.version}: {self.records_checked} records in {self.chunks_checked} chunks checked, "
            f"fingerprint {self.fingerprint}"
        )
        problems = self.problems()
        if not problems:
            return f"{head}: OK"
        return "\n".join([f"{head}: FAILED", *(f"  - {line}" for line in problems)])

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        verdict = "OK" if self.ok else f"FAILED ({len(self.problems())} kinds of problem)"
        return f"<VerifyReport version {self.version}: {verdict}, {self.records_checked} records checked>"

    def raise_if_failed(self) -> VerifyReport:
        """Return ``self`` if ``ok``, else raise :class:`VerificationError` with the summary."""
        if not self.ok:
            raise VerificationError(self.summary(), self)
        return self


def verify(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    chunks: dict[str, list[ChunkInfo]],
    expected_keys: Iterable[Any] | None = None,
    progress: bool = False,
    num_workers: int = 0,
) -> VerifyReport:
    """Check ``version`` (whose splits list ``chunks``) against the stored data; see the module docstring.

    Raises:
        InvalidArgumentError: ``num_workers`` is not a whole number >= 0.
        IntegrityError: a manifest file or the commit record is damaged.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise InvalidArgumentError(f"num_workers must be a whole number >= 0, got {num_workers!r}")
    expected = None if expected_keys is None else list(expected_keys)
    # First by sums, holding nothing per record; the full match names what is wrong.
    proved = verify_summed.check(storage, config, version, chunks, progress, num_workers, expected)
    if proved is not None:
        records, checked, data = proved
        return VerifyReport(
            version=version.number,
            records_checked=records,
            chunks_checked=checked,
            fingerprint=version.fingerprint,
            manifest_fingerprint=version.fingerprint,
            data_fingerprint=hashing.fingerprint_hex(data),
        )
    names = verify_listed.Names()
    listings = [(split, chunk) for split in sorted(chunks) for chunk in chunks[split]]
    listing_chunks = np.array([names.chunk(chunk.filename) for _, chunk in listings], np.uint64)
    listing_splits = np.array([names.split(split) for split, _ in listings], np.uint16)
    listed_chunks = [chunk for _, chunk in listings]
    dead_rows = verify_deletions.DeadRows(storage, version, listings)
    digest = verify_index.index_digest(config, version)
    found_counts: dict[str, int] = {}
    missing_chunks: list[str] = []
    damaged_chunks: list[tuple[str, str]] = []
    records = 0
    data_fingerprint = 0
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(verify_stored.worker_pool(num_workers)) if num_workers else None
        summed = None
        read: Iterator[verify_stored.StoredPart]
        if pool is None:  # a thread sums the key runs, then reads chunks, while the manifest streams in here
            thread = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="litstore-verify"))
            if digest is not None:
                summed = verify_index.sum_key_runs(storage, version, names, digest, thread)
            chunks_read = verify_stored.read_in_thread(storage, listed_chunks, config.key, config.key_type, thread)
            read = stack.enter_context(contextlib.closing(chunks_read))
            listed = verify_listed.read_listed(storage, config, version, names, digest=digest)
        else:  # the manifest in one worker while the others read chunks
            reading = pool.submit(verify_listed.read_listed_and_names, storage, config, version, names, digest)
            read = verify_stored.read_in_workers(storage, listed_chunks, config.key, config.key_type, pool)
            listed, names = reading.result()
        index_problems = verify_index.check_key_index(storage, config, version, listed, names, summed)
        matcher = _Matcher(listed, listing_chunks, listing_splits)
        sidecars = verify_index.Sidecars(storage, listings, config.writes_key_runs)
        bar = stack.enter_context(tqdm(total=len(listings), desc="verifying", unit="chunk", disable=not progress))
        for stored in read:
            part = stored.part
            if part.stop is None:
                bar.update()
            if not stored.found:
                if part.start == 0:
                    missing_chunks.append(part.chunk.filename)
                continue
            damaged_chunks.extend((part.chunk.filename, problem) for problem in stored.problems)
            if stored.items < 0:
                continue
            start = min(part.start, stored.items)
            dead = dead_rows.mask(part.listing, start, len(stored.pairs))
            live, items, same = matcher.match(part.listing, start, stored.pairs, stored.keyed, dead)
            sidecars.part(part.listing, start, stored.contents, items, same, matcher.rows_at)
            count = int(np.count_nonzero(live))
            records += count
            split = listings[part.listing][0]
            found_counts[split] = found_counts.get(split, 0) + count
            data_fingerprint += hashing.digest_sum(stored.pairs[stored.keyed & live])
    dead_rows.finish()
    index_problems += sidecars.finish(listed, matcher.rows_at)
    found = matcher.finish(storage, config, listings)
    missing_keys: list[Any] = []
    unexpected_keys: list[Any] = []
    if expected is not None:
        missing_keys, unexpected_keys = _expected(listed, config, expected)
    count_mismatches = [  # (a split with records that the commit record does not count is counted 0 there)
        (split, version.counts.get(split, 0), found_counts.get(split, 0))
        for split in sorted({*version.counts, *found_counts})
        if version.counts.get(split, 0) != found_counts.get(split, 0)
    ]
    return VerifyReport(
        version=version.number,
        records_checked=records,
        chunks_checked=len(listings),
        duplicate_keys=sorted(found.duplicates, key=repr),
        missing_keys=missing_keys,
        unexpected_keys=unexpected_keys,
        corrupt_records=found.corrupt,
        missing_records=found.missing,
        unlisted_records=found.unlisted,
        missing_chunks=missing_chunks,
        damaged_chunks=damaged_chunks,
        count_mismatches=count_mismatches,
        index_problems=index_problems,
        deletion_problems=dead_rows.problems
        + verify_deletions.listed_dead(dead_rows, version.number, found.listed_dead, found.listed_dead_count),
        fingerprint=version.fingerprint,
        manifest_fingerprint=hashing.fingerprint_hex(listed.fingerprint),
        data_fingerprint=hashing.fingerprint_hex(data_fingerprint),
    )


@dataclass(frozen=True)
class _Found:
    duplicates: set[Any]
    corrupt: list[tuple[Any, str, int, str]]
    missing: list[tuple[Any, str, int]]
    unlisted: list[tuple[Any, str, int]]
    listed_dead: list[tuple[Any, str, int]]  # key, chunk, row: at most verify_deletions.NAMED of them
    listed_dead_count: int


class _Matcher:
    """Matches the items read from chunks with the manifest's rows at their chunk and row.

    Per manifest row it keeps how many items were found at its place (``seen``) and how
    many of those hold its key (``hits``, for duplicates in the chunks); the items and
    rows that disagree are collected (as numbers) and named at the end. Dead items are
    compared with the rows listed at their place (a listed one is a problem of its
    deletion vector, and not also a missing record) but are never unlisted or duplicates.
    """

    def __init__(self, listed: verify_listed.Listed, listing_chunks: np.ndarray, listing_splits: np.ndarray) -> None:
        self.listed = listed
        self.listing_chunks = listing_chunks
        self.listing_splits = listing_splits
        order = np.argsort(listed.location, kind="stable")  # manifests are mostly in chunk order already
        if len(order) < 2**32:  # narrowed before the gather: the wide order and the sorted copy never coexist
            order = order.astype(np.uint32)
        self.order = order
        del order
        self.location = listed.location[self.order]
        listed.location = self.location[:0]  # the sorted copy is all that is needed from here
        self.seen = np.zeros(len(listed), np.uint8)
        self.hits = np.zeros(len(listed), np.uint8)
        self.corrupt: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []  # rows, listing, item rows, same
        self.odd: list[tuple[int, np.ndarray, np.ndarray]] = []  # listing, item rows, listed there
        self.dead_listed: list[tuple[int, np.ndarray, np.ndarray]] = []  # listing, manifest rows, item rows

    def match(
        self, listing: int, start: int, pairs: np.ndarray, keyed: np.ndarray, dead: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Items ``start`` onwards of the chunk of listing ``listing``: their pair hashes, whether they have keys,
        and whether its deletion vector marks them dead (``None``: the vector does not decode, so the items the
        manifest does not list are taken as its dead ones). Returns which items are live (the data), and the
        items (from ``start``) that manifest rows list with whether each matched its row.
        """
        count = len(pairs)
        base = np.uint64(int(self.listing_chunks[listing]) << 32)
        lo, hi = np.searchsorted(self.location, [base + np.uint64(start), base + np.uint64(start + count)])
        rows = self.order[lo:hi].astype(np.int64)
        items = (self.location[lo:hi] - base).astype(np.int64) - start
        self.seen[rows] = np.minimum(self.seen[rows], 254) + 1
        same = keyed[items] & (_words(pairs)[items, 0] == self.listed.pair[rows])
        self.hits[rows[same]] = np.minimum(self.hits[rows[same]], 254) + 1
        bad = ~(same & (self.listed.split[rows] == self.listing_splits[listing]))
        if bad.any():
            self.corrupt.append((rows[bad], listing, items[bad] + start, same[bad]))
        listed_here = np.zeros(count, bool)
        listed_here[items] = True
        if dead is None:
            dead = ~listed_here
        else:
            clash = dead[items]
            if clash.any():
                self.dead_listed.append((listing, rows[clash], items[clash] + start))
        matched = np.zeros(count, bool)
        matched[items[same]] = True
        odd = np.flatnonzero(~matched & ~dead)
        if len(odd):
            self.odd.append((listing, odd + start, listed_here[odd]))
        live: np.ndarray = ~dead
        return live, items, same

    def rows_at(self, listing: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The manifest rows listed at items ``[0, count)`` of listing ``listing``'s chunk, and those items."""
        base = np.uint64(int(self.listing_chunks[listing]) << 32)
        lo, hi = np.searchsorted(self.location, [base, base + np.uint64(count)])
        return self.order[lo:hi].astype(np.int64), (self.location[lo:hi] - base).astype(np.int64)

    def finish(self, storage: Storage, config: StoreConfig, listings: list[tuple[str, ChunkInfo]]) -> _Found:
        """Name what disagreed: read the keys of the few manifest rows and items involved."""
        listed = self.listed
        # The keys of the items that hold no key of a manifest row at their place (and of corrupt ones).
        wanted_items: dict[int, set[int]] = {}
        for listing, items, _ in self.odd:
            wanted_items.setdefault(listing, set()).update(items.tolist())
        for _, listing, items, same in self.corrupt:
            wanted_items.setdefault(listing, set()).update(items[~same].tolist())
        item_keys: dict[tuple[int, int], Any] = {}
        for listing, item_rows in sorted(wanted_items.items()):
            in_order = sorted(item_rows)
            found = verify_stored.decoded_keys(storage, listings[listing][1], in_order, config.key, config.key_type)
            item_keys.update(((listing, row), key) for row, key in zip(in_order, found))
        odd_keys = [item_keys[(listing, row)] for listing, items, _ in self.odd for row in items.tolist()]
        odd_keys = [key for key in odd_keys if key is not None]
        # Duplicate keys: hashes that occur twice, in the manifest or among the items, confirmed by key.
        hashes = listed.key_hash
        key_type = pa.string() if config.key_type == "str" else pa.int64()
        odd_hashes = np.sort(verify_listed.key_hashes(pa.array(odd_keys, key_type))) if odd_keys else hashes[:0]
        sorted_hashes = np.sort(hashes)
        found_twice = [
            sorted_hashes[1:][sorted_hashes[1:] == sorted_hashes[:-1]],  # in the manifest
            hashes[self.hits > 1],  # an item found twice at its place (a chunk listed twice)
            odd_hashes[1:][odd_hashes[1:] == odd_hashes[:-1]],  # among the items that hold no listed key there
        ]
        if len(sorted_hashes) and len(odd_hashes):  # such an item whose key the manifest lists elsewhere
            places = np.minimum(np.searchsorted(sorted_hashes, odd_hashes), len(sorted_hashes) - 1)
            found_twice.append(odd_hashes[sorted_hashes[places] == odd_hashes])
        del sorted_hashes
        candidates = np.unique(np.concatenate(found_twice))
        candidate_rows = np.concatenate(
            [np.zeros(0, np.int64)]
            + [
                start + np.flatnonzero(np.isin(hashes[start : start + _SLICE], candidates))
                for start in range(0, len(hashes) if len(candidates) else 0, _SLICE)
            ]
        )
        missing_rows = np.flatnonzero(self.seen == 0)
        corrupt_rows = np.concatenate([rows for rows, _, _, _ in self.corrupt] or [np.zeros(0, np.int64)])
        named_dead, dead_count = self._dead_listed(listings)
        dead_rows = np.array([row for _, _, row in named_dead], np.int64)
        wanted = np.unique(np.concatenate([candidate_rows, missing_rows, corrupt_rows, dead_rows]).astype(np.int64))
        table = listed.rows(wanted)
        position = {int(row): at for at, row in enumerate(wanted.tolist())}
        keys = table.column("key").to_pylist()
        chunk_names = table.column("chunk").to_pylist()
        row_numbers = table.column("row").to_pylist()
        splits = table.column("split").to_pylist()

        listed_counts: dict[Any, int] = {}
        stored_counts: dict[Any, int] = {}
        for row in candidate_rows.tolist():
            key = keys[position[row]]
            listed_counts[key] = listed_counts.get(key, 0) + 1
            stored_counts[key] = stored_counts.get(key, 0) + int(self.hits[row])
        for key in odd_keys:
            stored_counts[key] = stored_counts.get(key, 0) + 1
        duplicates = {key for key, count in listed_counts.items() if count > 1}
        duplicates |= {key for key, count in stored_counts.items() if count > 1}

        corrupt = []
        for listed_rows, listing, items, same in self.corrupt:
            split, chunk = listings[listing][0], listings[listing][1].filename
            for row, item, alike in zip(listed_rows.tolist(), items.tolist(), same.tolist()):
                at = position[row]
                if alike:
                    problem = "split"  # key and content agree
                elif keys[at] != item_keys[(listing, item)]:
                    problem = "key"
                elif splits[at] != split:
                    problem = "split"
                else:
                    problem = "content"
                corrupt.append((keys[at], chunk, item, problem))
        missing = [
            (keys[position[row]], chunk_names[position[row]], row_numbers[position[row]])
            for row in missing_rows.tolist()
        ]
        unlisted = [
            (item_keys[(listing, item)], listings[listing][1].filename, item)
            for listing, items, listed_here in self.odd
            for item in items[~listed_here].tolist()
        ]
        listed_dead = [(keys[position[row]], chunk, item) for chunk, item, row in named_dead]
        by_place = lambda entry: (entry[1], entry[2])  # noqa: E731
        return _Found(
            duplicates,
            sorted(corrupt, key=by_place),
            sorted(missing, key=by_place),
            sorted(unlisted, key=by_place),
            listed_dead,
            dead_count,
        )

    def _dead_listed(self, listings: list[tuple[str, ChunkInfo]]) -> tuple[list[tuple[str, int, int]], int]:
        """The first :data:`~litstore.ops.verify_deletions.NAMED` places (chunk, item, manifest row) that are dead
        and listed, by place, and how many there are (a chunk listed twice counts once)."""
        if not self.dead_listed:
            return [], 0
        shift = np.uint64(32)
        places = np.concatenate(
            [
                (self.listing_chunks[listing] << shift) | items.astype(np.uint64)
                for listing, _, items in self.dead_listed
            ]
        )
        rows = np.concatenate([listed_rows for _, listed_rows, _ in self.dead_listed])
        listing_of = np.concatenate([np.full(len(items), listing) for listing, _, items in self.dead_listed])
        unique, first = np.unique(places, return_index=True)
        chosen = first[: verify_deletions.NAMED]
        named = sorted(
            (listings[int(listing_of[at])][1].filename, int(places[at] & np.uint64(0xFFFFFFFF)), int(rows[at]))
            for at in chosen.tolist()
        )
        return named, len(unique)


#: Manifest rows looked at together where a step would otherwise copy a whole column.
_SLICE = 1 << 20


def _words(pairs: np.ndarray) -> np.ndarray:
    """``(n, 16)`` hash bytes as ``(n, 2)`` uint64 words: compared two words a row instead of sixteen bytes."""
    return np.ascontiguousarray(pairs).view(np.uint64).reshape(-1, 2)


def _expected(
    listed: verify_listed.Listed, config: StoreConfig, expected_keys: Iterable[Any]
) -> tuple[list[Any], list[Any]]:
    """Expected keys the version lacks (those of the wrong type first), and keys it has that are not expected."""
    expected = list(expected_keys)
    wrong_type = [key for key in expected if not hashing.is_key(key, config.key_type)]
    key_type = pa.string() if config.key_type == "str" else pa.int64()
    wanted = pc.unique(pa.array([key for key in expected if hashing.is_key(key, config.key_type)], key_type))
    seen = np.zeros(len(wanted), bool)
    unexpected: set[Any] = set()
    for _, table in listed.replay(("key",)):
        positions = pc.index_in(table.column("key"), value_set=wanted)
        seen[np.asarray(positions.drop_null().to_numpy(), np.int64)] = True
        unexpected.update(table.column("key").filter(positions.is_null()).to_pylist())
    missing = [key for key, present in zip(wanted.to_pylist(), seen.tolist()) if not present]
    return wrong_type + sorted(missing), sorted(unexpected)
