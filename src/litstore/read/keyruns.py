"""Reading a version's key index on disk: its key runs, newest first, a few pages at a time.

A lookup reads, per run and process, the run's footer (with the lookup's filter
block, in the same read), then a window of its page fences and sums around the key's
expected page (:mod:`litstore.read.fences`; the whole tail once where a window would
save little: small tails, large batches), then only the pages that can hold the key
(one page of 12 KiB, sometimes two): never the manifest. Locally a run is read by
pread; elsewhere each read is one ranged read (several spans in one call), pages
cached in the process. A small run (at most :data:`WHOLE_RUN` bytes: the runs of the
small commits since a checkpoint) is read whole when opened, in one read, and its
pages and filter blocks are slices of those bytes: a lookup passes through every run
newer than the one holding its key, and opening a file three times (mapping, filter
block, page) cost more than the run's bytes. Every page is checked against its sum
before it is used (:func:`litstore.format.keyrun.check_pages_within`).

:class:`KeyRuns` answers for a version: for each key, the newest entry whose keyprint
is the key's, in the newest run that has one. A live entry names the record's chunk,
row and committed content hash, which the caller checks when it reads the record.

**Versions without an index.** A version indexes its records on disk if its commit
record lists key runs, or if it holds no records (:func:`has_key_index`). Versions of
a store upgraded from format 2 (``Store.upgrade``) committed before the upgrade have
none, nor has one a writer that still held the format-2 config committed after it:
their lookups compose the manifest, as format 2 does, and the next format-3 commit on
such a version writes a run of every record (:mod:`litstore.txn.keyruns`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from litstore.errors import IntegrityError
from litstore.format import keyfilter, keyrun
from litstore.format.models import KeyRunRef, Version
from litstore.read import fences
from litstore.storage import MissingFileError, Storage

#: What :meth:`KeyRuns.find_many` says of each key.
ABSENT, LIVE, DELETED = 0, 1, 2
#: Pages (or filter blocks) asked for at once past which a read is a bulk one: a filter is read as one
#: range, a range of pages in blocks of this many where reads are round trips.
_READ_PAGES = 256
#: Checked pages kept in memory per run (48 MiB of pages as litstore writes them), the oldest let go first.
#: A read of more than :data:`_KEPT_PAGES` at once (a merge, a large append's check) is not kept; up to it
#: (a get_many of 10,000 keys in a run of 1M entries reads ~3,600), so the next call reads none again.
_CACHED_PAGES = 4096
_KEPT_PAGES = _CACHED_PAGES // 2
#: A filter's blocks are read as one range when at least one in this many of the range is wanted.
_DENSE = 16
#: Filter blocks kept in memory per run (4 MiB of 64-byte blocks).
_CACHED_BLOCKS = 1 << 16
#: Up to this many keys, a run is opened with their filter blocks in the same read as its footer.
_GUESSED_BLOCKS = 16
#: A run of at most this many bytes (about 10,000 entries) is read whole when it is opened.
WHOLE_RUN = 512 << 10
#: A run whose fences and sums are larger than this (more than 262,144 entries) is looked up through windows
#: of them (:mod:`litstore.read.fences`); a smaller one's are read whole (one read, as cheap as a window).
WINDOWED_TAIL = 16 << 10


def has_key_index(version: Version) -> bool:
    """Whether ``version``'s key runs index every record it holds (see the module docstring).

    Every format-3 commit of a version that holds records lists at least one run (a
    merge that leaves no entry has merged away every record), so a version with
    records and no runs was committed without the index: before an upgrade, or by a
    writer that read the config before it became format 3, which lists no runs.
    """
    return bool(version.key_runs) or version.total == 0


class RunReader:
    """One key run, opened lazily; its pages read as lookups need them.

    A small run (:data:`WHOLE_RUN`) is read whole and its tail checked whole when
    opened. A larger one is opened by its footer alone: a lookup of a few keys reads
    fences and sums a window at a time (:class:`~litstore.read.fences.FenceWindows`),
    and whatever needs the whole tail (:meth:`tail`: merges, verify, large batches)
    reads and checks it whole, once.
    """

    def __init__(self, storage: Storage, ref: KeyRunRef) -> None:
        self._storage = storage
        self._ref = ref
        self._footer: keyrun.Footer | None = None
        self._tail: keyrun.Tail | None = None
        self._whole: memoryview | None = None  # a small run's bytes (see WHOLE_RUN)
        self._windows: fences.FenceWindows | None = None
        self._names: tuple[str, ...] | None = None  # the chunk table, read with the first window
        self._checked_names: set[int] = set()
        self._pages: dict[int, np.ndarray] = {}
        self._blocks: dict[int, np.ndarray] = {}

    @property
    def ref(self) -> KeyRunRef:
        return self._ref

    def footer(self) -> keyrun.Footer:
        """The run's footer, checked against its length and the commit record (a small run: its tail too)."""
        if self._footer is None:
            self._open([])
        assert self._footer is not None
        return self._footer

    def _open(self, spans: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Read and check the footer (a small run: the whole run and its tail), and bytes ``[start, end)`` of
        each of ``spans`` in the same read: a lookup's filter blocks, where the commit record's count places
        them (the caller uses them only if the footer agrees).

        Raises:
            IntegrityError: the run is missing, or its footer is not that of a run of the record's size.
        """
        path, size = self._ref.path, self._ref.size
        if size < keyrun.footer_size():  # (the commit record's number: a ranged read must not start before 0)
            raise IntegrityError(f"key run {path} is {size} bytes by its commit record, shorter than a footer")
        try:
            if size <= WHOLE_RUN:
                whole = memoryview(self._storage.read(path))
                if len(whole) != size:
                    raise IntegrityError(f"key run {path} is {len(whole)} bytes, its commit record says {size}")
                read = [whole[size - keyrun.footer_size() :], *(whole[start:end] for start, end in spans)]
                self._whole = whole
            else:
                # Read, not mapped: one open for the footer and the filter blocks of a run the lookup then skips.
                read = [
                    memoryview(data)
                    for data in self._storage.read_ranges(path, [(size - keyrun.footer_size(), size), *spans])
                ]
        except MissingFileError as exc:
            raise IntegrityError(f"key run {path}, which the commit record lists, is missing") from exc
        footer = keyrun.parse_footer(path, size, bytes(read[0]))
        if footer.entries != self._ref.entries:
            raise IntegrityError(
                f"key run {path} holds {footer.entries} entries, its commit record says {self._ref.entries}"
            )
        self._footer = footer
        if self._whole is not None:
            self.tail()
        return read[1:]

    def tail(self) -> keyrun.Tail:
        """The run's counts, chunk names, fences and page sums, read whole and checked (once)."""
        if self._tail is None:
            footer = self.footer()
            if self._tail is None:  # (a small run's is read by footer())
                self._tail = keyrun.read_tail(footer, self._bytes(footer.names_start, footer.tail_end))
                self._windows = None
        return self._tail

    def _bytes(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``[start, end)`` of the run: a slice of a small run's bytes, else one ranged read."""
        return self._read([(start, end)])[0]

    def chunk(self, number: int) -> str:
        """Chunk name ``number`` of the run's table (an id a checked page holds), checked against the layout.

        Raises:
            IntegrityError: it is not the name of a chunk of the store.
        """
        if self._tail is not None:
            return self._tail.chunk(number)
        if self._names is None:
            footer = self.footer()
            self._names = keyrun.parse_names(footer, self._bytes(footer.names_start, footer.fences_start))
        name = self._names[number]
        if number not in self._checked_names:
            keyrun.check_chunk_name(self._ref.path, name)
            self._checked_names.add(number)
        return name

    def _windows_afford(self, keys: int) -> bool:
        """Whether ``keys`` more keys are looked up through windows of the fences rather than the whole tail: the
        tail is larger than :data:`WINDOWED_TAIL`, and the windows read in all (this process's lookups so far
        and these keys') stay under a quarter of it. Past that (a large batch, many lookups in one process) the
        whole tail is read, once."""
        footer = self.footer()
        if footer.tail_end - footer.fences_start <= WINDOWED_TAIL:
            return False
        windows = self._windowed()
        return 4 * (windows.blocks_read + keys * windows.blocks_per_key()) <= windows.blocks

    def _windowed(self) -> fences.FenceWindows:
        if self._windows is None:
            footer = self.footer()
            names_span = (footer.names_start, footer.fences_start)

            def read(spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
                if self._names is not None:
                    return self._read(spans)
                # The chunk table comes with the first window, in the same read.
                *data, names = self._read([*spans, names_span])
                self._names = keyrun.parse_names(footer, names)
                return data

            self._windows = fences.FenceWindows(footer, read)
        return self._windows

    def _read(self, spans: Sequence[tuple[int, int]]) -> list[bytes | memoryview]:
        """Bytes ``[start, end)`` of the run for each span: slices of a small run's bytes, else read (pread
        locally, a ranged read elsewhere), as the storage returns them (no view made of each: an append's
        check of 100 keys reads 100 filter blocks of every run).

        Raises:
            IntegrityError: the run is missing.
        """
        if self._whole is not None:
            whole = self._whole
            return [whole[start:end] for start, end in spans]
        try:
            return list(self._storage.read_ranges(self._ref.path, spans))
        except MissingFileError as exc:
            raise IntegrityError(f"key run {self._ref.path}, which the commit record lists, is missing") from exc

    def page(self, number: int) -> np.ndarray:
        """The checked entries of page ``number``."""
        return self.pages([number])[0]

    def pages(self, numbers: Sequence[int]) -> list[np.ndarray]:
        """The checked entries of pages ``numbers`` (ascending): those not cached read and checked together,
        against the whole tail."""
        return self._checked_pages(numbers, windowed=False)

    def _checked_pages(self, numbers: Sequence[int], windowed: bool) -> list[np.ndarray]:
        """:meth:`pages`; ``windowed``: checked against the fences and sums the windows read (which cover
        them), not the whole tail."""
        taken: dict[int, np.ndarray] = {}
        missing = []
        for number in numbers:
            cached = self._pages.get(number)
            if cached is None:
                missing.append(number)
            else:
                taken[number] = cached
        if missing:
            footer = self.footer()
            size = footer.page * keyrun.ENTRY.itemsize
            spans = [(number * size, min((number + 1) * size, footer.entries_bytes)) for number in missing]
            # Read (pread locally), never touched through the mapping: on kernels with large page-cache
            # folios each touched 12 KiB page maps ~2 MiB into the process, and the mapped pages stay
            # resident while the run is open (a 500k-key append touching 6,500 pages of a 2M-entry run
            # kept all of its 96 MB resident; a run of 100M entries is 4.8 GB).
            data = self._read(spans)
            kept = len(missing) <= _KEPT_PAGES  # a bulk read (a merge, a large append's check) is not kept
            if windowed and self._tail is None and self._windows is not None:
                checked = keyrun.check_pages_within(
                    self._ref.path, footer, missing, data, self._windows.bounds(missing)
                )
            else:
                checked = keyrun.check_pages(self._ref.path, self.tail(), missing, data)
            for number, entries in zip(missing, checked, strict=True):
                taken[number] = entries
                if kept:
                    if len(self._pages) >= _CACHED_PAGES:
                        self._pages.pop(next(iter(self._pages)))
                    self._pages[number] = entries
        return [taken[number] for number in numbers]

    def may_hold(self, hashes: np.ndarray, prints: np.ndarray) -> np.ndarray:
        """For each key, whether the run may have an entry for it: ``False`` only where the run's filter
        (format 5) says it has none; all ``True`` for a run without one.

        The filter's blocks the keys fall in are read (each once; kept where they are few), checked
        against their checksums, then the keys' bits tested.
        """
        if self._footer is None and self._ref.size > WHOLE_RUN and 0 < len(hashes) <= _GUESSED_BLOCKS:
            self._open_with_blocks(hashes)
        footer = self.footer()
        if not footer.filter_blocks or not len(hashes):
            return np.ones(len(hashes), dtype=bool)
        rows = keyfilter.blocks_of(hashes, footer.filter_blocks)
        numbers = np.unique(rows)
        listed = numbers.tolist()
        cached = self._blocks
        taken = {number: cached[number] for number in listed if number in cached} if cached else {}
        missing = [number for number in listed if number not in taken] if taken else listed
        if not missing:
            bits = np.stack([taken[number] for number in listed])
        else:
            start, size = footer.entries_bytes, keyfilter.BLOCK
            low, high = missing[0], missing[-1] + 1
            # Many and dense (a large append's check): one read from the first to the last. Sparse (10,000
            # lookups in a run of 100M entries, whose filter is 120 MB): each block on its own.
            if len(missing) > _READ_PAGES and high - low <= _DENSE * len(missing):
                span = self._read([(start + low * size, start + high * size)])[0]
                data = [span[(n - low) * size : (n - low + 1) * size] for n in missing]
            else:
                data = self._read([(start + number * size, start + (number + 1) * size) for number in missing])
            read = keyfilter.check_blocks(self._ref.path, missing, data)
            # Kept for the lookups of a few keys that follow (a process's lookups); a batch's blocks (an
            # append's check of 100 keys) are seldom asked again, and keeping each row costs a step.
            if len(missing) <= _GUESSED_BLOCKS:
                if len(cached) + len(missing) > _CACHED_BLOCKS:  # (the cache is cleared, not what is taken)
                    cached.clear()
                cached.update(zip(missing, read, strict=True))
            if taken:
                taken.update(zip(missing, read, strict=True))
                bits = np.stack([taken[number] for number in listed])
            else:
                bits = read  # (every block was missing: they are in ``numbers``' order)
        return keyfilter.may_hold(bits, np.searchsorted(numbers, rows), prints)

    def _open_with_blocks(self, hashes: np.ndarray) -> None:
        """Open the run, reading with its footer the filter blocks of ``hashes`` where a filter of the commit
        record's entry count lies; kept (checked) if the footer says the run has that filter."""
        count = keyfilter.block_count(self._ref.entries)
        start, size = self._ref.entries * keyrun.ENTRY.itemsize, keyfilter.BLOCK
        numbers = np.unique(keyfilter.blocks_of(hashes, count)).tolist()
        if start + count * size > self._ref.size - keyrun.footer_size():  # (no filter of that count fits)
            numbers = []
        data = self._open([(start + number * size, start + (number + 1) * size) for number in numbers])
        footer = self.footer()
        if footer.filter_blocks == count and footer.entries_bytes == start and not self._blocks:
            self._blocks.update(zip(numbers, keyfilter.check_blocks(self._ref.path, numbers, data), strict=True))

    def may_hold_sorted(self, hashes: np.ndarray, prints: np.ndarray) -> np.ndarray:
        """:meth:`may_hold` of many keys given in key-hash order (``verify``'s check that the filter hides none of
        the run's own entries): the filter's blocks from the first key's to the last key's are read as one
        range and checked at once, with no step per block, and not cached. Every block of that range is
        checked, whether a key falls in it or not.

        Raises:
            IntegrityError: a block of the range is damaged.
        """
        footer = self.footer()
        if not footer.filter_blocks or not len(hashes):
            return np.ones(len(hashes), dtype=bool)
        rows = keyfilter.blocks_of(hashes, footer.filter_blocks)
        if bool((rows[1:] < rows[:-1]).any()):  # (a forged run's entries out of order): block by block
            return self.may_hold(hashes, prints)
        low, high = int(rows[0]), int(rows[-1]) + 1
        start, size = footer.entries_bytes, keyfilter.BLOCK
        span = self._storage.read_range(self._ref.path, start + low * size, start + high * size)
        bits = keyfilter.check_span(self._ref.path, low, high - low, span)
        return keyfilter.may_hold(bits, rows - low, prints)

    def everything(self) -> tuple[np.ndarray, list[str]]:
        """Every entry (checked page by page, copied) and the chunk names: what a merge reads."""
        tail = self.tail()
        pages = self.pages(range(len(tail.fences)))
        entries = np.concatenate(pages) if pages else np.empty(0, dtype=keyrun.ENTRY)
        self._pages.clear()
        return entries, list(tail.chunks)  # (concatenate copied them out of the pages)

    def between(self, low: int, high: int | None) -> np.ndarray:
        """The checked entries whose key hashes are in ``[low, high)`` (``None``: no upper bound), in a buffer
        of their own (not cached): what a merge of runs too large to hold reads, one range of key hashes at a
        time. Read-only: a merge copies what it changes.

        The pages that can hold the range are read at once (in ranged reads of
        :data:`_READ_PAGES` pages where reads are round trips, which run several at a
        time) and checked together; none is kept (a range is read once).

        Raises:
            IntegrityError: a page does not pass its checks, or the run is missing.
        """
        tail = self.tail()
        fences = tail.fences
        first = max(int(np.searchsorted(fences, np.uint64(low), "left")) - 1, 0)
        stop = len(fences) if high is None else int(np.searchsorted(fences, np.uint64(high), "left"))
        if stop <= first:
            return np.empty(0, dtype=keyrun.ENTRY)
        size = tail.page * keyrun.ENTRY.itemsize
        step = _READ_PAGES if self._storage.concurrent_reads > 1 else stop - first
        spans = [
            (start * size, min(min(start + step, stop) * size, tail.entries_bytes))
            for start in range(first, stop, step)
        ]
        blocks = self._read(spans)
        block = blocks[0] if len(blocks) == 1 else b"".join(blocks)
        entries = keyrun.check_page_block(self._ref.path, tail, range(first, stop), block)
        hashes = entries["key_hash"]  # sorted across the pages (checked): the range is one slice
        begin_at = int(np.searchsorted(hashes, np.uint64(low), "left"))
        end_at = len(entries) if high is None else int(np.searchsorted(hashes, np.uint64(high), "left"))
        return entries[begin_at:end_at]

    def find_many(self, hashes: np.ndarray, prints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each key (its hash and keyprint), whether this run has an entry for it and which: a status
        (:data:`ABSENT`, :data:`LIVE`, :data:`DELETED`) and the entry (zeros where absent).

        The pages that can hold any of the keys are read (each once), and the keys are
        searched in all of them at once: side by side, in page order, they are one
        sorted array (each page is checked to be sorted inside its fences, and the
        fences are sorted), and a key's entries all lie in its pages, which are there.
        """
        footer = self.footer()
        count = len(hashes)
        status = np.zeros(count, dtype=np.uint8)
        found = np.zeros(count, dtype=keyrun.ENTRY)
        if not footer.entries or not count:
            return status, found
        inside = np.ones(count, dtype=bool)
        if footer.filter_blocks:
            inside = self.may_hold(hashes, prints)
        where = np.flatnonzero(inside)
        if not len(where):
            return status, found
        # In hash order: searching sorted keys in the pages walks them once (a large batch's
        # random order missed the cache on every search: 2.2 of 4.4 s for 500k keys in 6M).
        where = where[np.argsort(hashes[where], kind="stable")]
        windowed = self._tail is None and self._windows_afford(len(where))
        if windowed:
            lows, highs = self._windowed().bracket(hashes[where])
        else:
            fences = self.tail().fences
            lows = np.maximum(np.searchsorted(fences, hashes[where], "left") - 1, 0)
            highs = np.searchsorted(fences, hashes[where], "right") - 1
            below = highs < 0  # (a key below the first fence is not in the run)
            where, lows, highs = where[~below], lows[~below], highs[~below]
            if not len(where):
                return status, found
        spans = [lows, highs]
        wide = np.flatnonzero(highs - lows > 1)  # a key hash whose entries fill pages between (rare)
        spans += [np.arange(low, high + 1) for low, high in zip(lows[wide].tolist(), highs[wide].tolist(), strict=True)]
        numbers = np.unique(np.concatenate(spans)).tolist()
        pages = self._checked_pages(numbers, windowed)
        if windowed:
            # Where a key's last page ends at or below its hash, the next page's first entry confirms the
            # fence that ended the search (see litstore.read.fences): read it too.
            page_ends = {number: int(page["key_hash"][-1]) for number, page in zip(numbers, pages, strict=True)}
            after = {
                high + 1
                for high, key in zip(highs.tolist(), hashes[where].tolist(), strict=True)
                if high + 1 < footer.pages and page_ends[high] <= key
            }
            if after - set(numbers):
                numbers = sorted(set(numbers) | after)
                pages = self._checked_pages(numbers, windowed)
            key_hashes = np.concatenate([page["key_hash"] for page in pages])
            if bool(np.any(key_hashes[1:] < key_hashes[:-1])):  # (no whole tail says the fences are sorted)
                raise IntegrityError(f"key run {self._ref.path}'s pages are not in key-hash order: it is damaged")
        sizes = np.fromiter(map(len, pages), dtype=np.int64, count=len(pages))
        ends = np.cumsum(sizes)
        key_hashes = np.concatenate([page["key_hash"] for page in pages])

        def entries_at(positions: np.ndarray) -> np.ndarray:
            """The entries at ``positions`` of the pages side by side: one copy per position or per page."""
            taken = np.empty(len(positions), dtype=keyrun.ENTRY)
            page_of = np.searchsorted(ends, positions, "right")
            local = positions - (ends - sizes)[page_of]
            if len(positions) <= len(pages):
                for i, (page, row) in enumerate(zip(page_of.tolist(), local.tolist(), strict=True)):
                    taken[i] = pages[page][row]
                return taken
            order = np.argsort(page_of, kind="stable")
            bounds = np.searchsorted(page_of[order], np.arange(len(pages) + 1)).tolist()
            for page, (low, high) in enumerate(itertools.pairwise(bounds)):
                if low < high:
                    chosen = order[low:high]
                    taken[chosen] = pages[page][local[chosen]]
            return taken

        wanted, wanted_prints = hashes[where], prints[where]
        at = np.searchsorted(key_hashes, wanted, "left")
        open_ = np.ones(len(where), dtype=bool)
        while open_.any():  # past the first entry of a key hash only where several keys share it
            valid = open_ & (at < len(key_hashes))
            valid[valid] &= key_hashes[at[valid]] == wanted[valid]
            candidates = np.flatnonzero(valid)
            if not len(candidates):
                break
            entries = entries_at(at[candidates])
            match = entries["keyprint"] == wanted_prints[candidates]
            hits = candidates[match]
            found[where[hits]] = entries[match]
            status[where[hits]] = np.where(entries["chunk"][match] == keyrun.DELETED, DELETED, LIVE)
            open_ = valid
            open_[hits] = False
            at = at + 1
        return status, found


class KeyRuns:
    """A version's key index on disk: its runs, newest first (see the module docstring)."""

    def __init__(self, storage: Storage, refs: Sequence[KeyRunRef], cache: dict[str, RunReader] | None = None) -> None:
        cache = {} if cache is None else cache
        listed = {ref.path for ref in refs}
        for path in [path for path in cache if path not in listed]:
            # Runs this version does not list (merged away by a commit since): their mapped pages would stay
            # resident in a process that writes on (a writer's readers share the cache with their successors).
            # A reader of an older version keeps its own runs open; the cache only forgets them.
            del cache[path]
        self._runs = []
        for ref in refs:
            reader = cache.get(ref.path)
            if reader is None or reader.ref != ref:
                reader = cache[ref.path] = RunReader(storage, ref)
            self._runs.append(reader)

    def check(self) -> None:
        """Open every run: its file is there, as long as its commit record says, its footer, chunk table and
        fences whole (a few small reads a run; the pages are checked as lookups read them).

        Raises:
            IntegrityError: a run is missing, cut short or damaged (the message names its file).
        """
        for run in self._runs:
            run.tail().chunks  # noqa: B018 (the names are checked on first use)

    def filtered(self) -> bool:
        """Whether every run carries a key filter (format 5; see :mod:`litstore.format.keyfilter`)."""
        return all(run.footer().filter_blocks for run in self._runs)

    def find_many(self, hashes: np.ndarray, prints: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
        """For each key: :data:`LIVE`, :data:`DELETED` or :data:`ABSENT`, the name of the chunk its entry
        names (``""`` if not live), and the entry itself (its ``chunk`` id is into its own run's table: use
        the names)."""
        count = len(hashes)
        status = np.zeros(count, dtype=np.uint8)
        entries = np.zeros(count, dtype=keyrun.ENTRY)
        names = [""] * count
        open_ = np.arange(count)
        for run in self._runs:
            if not len(open_):
                break
            run_status, run_entries = run.find_many(hashes[open_], prints[open_])
            decided = run_status != ABSENT
            positions = open_[decided]
            taken = keyrun.take(run_entries, decided)
            status[positions] = run_status[decided]
            entries[positions] = taken
            # Only the chunk ids, each name looked up once: a whole entry made a Python tuple (bytes and
            # all) for each key was 5.5 ms for 10,000 keys.
            chunks = taken["chunk"]
            live = chunks != keyrun.DELETED
            named = {number: run.chunk(number) for number in np.unique(chunks[live]).tolist()}
            for position, chunk in zip(positions[live].tolist(), chunks[live].tolist(), strict=True):
                names[position] = named[chunk]
            open_ = open_[~decided]
        return status, names, entries
