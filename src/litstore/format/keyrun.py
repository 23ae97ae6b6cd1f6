"""The byte layout of a key run: one immutable, sorted file of a version's key index.

A version's key index on disk is a short list of runs, newest first (the commit
record's ``key_runs``); each commit writes one run with what it changed, and runs are
merged as they pile up (see :mod:`litstore.txn.keyruns`). A run is::

    entries     n x 48 bytes, sorted by key hash:
                  key_hash   u64   xxh3-64 of the key (what every litstore index sorts by)
                  chunk      u32   into the chunk table; DELETED for a deleted key
                  row        u32
                  content    16 B  the committed content hash (zeros for a deleted key)
                  keyprint   16 B  xxh3-128 of the key: which key the entry is for
    filter      format 5 only (magic LSKRUN02): the run's key filter, a blocked Bloom
                filter of 64-byte blocks (:mod:`litstore.format.keyfilter`)
    chunk table UTF-8 chunk names joined by "\\n"
    fences      ceil(n / page) x u64: the key hash of the first entry of each page
    page sums   ceil(n / page) x u64: xxh3-64 of each page's bytes
    footer      40 bytes: magic, n (u64), page (u32), chunk table bytes (u32),
                chunk count (u32), filter blocks (u32; 0 in LSKRUN01),
                xxh3-64 of the chunk table, fences and sums

Within one key hash, entries of the same key are newest first (a merged run keeps
only the newest of each key). A lookup of key K reads the footer once per run and
process, then the fences around K's page (a window of them, or the whole tail once:
:mod:`litstore.read.fences`), then one page: the first entry whose keyprint is
K's decides (a deleted entry: K is not in the version), and a live entry is still
confirmed by the record's content hash and key when it is read. With a filter, the
page is read only if K's filter block (read and checked first) says the run may hold
K: a run that does not hold K costs one 64-byte block, not a page.

Everything a reader takes from a run is checked before it is used: sizes against
the file's length, counts against the commit record, fences sorted, every page
read against its sum, its hashes sorted and inside its fences, chunk ids inside the
table, chunk names of the layout. A run that fails is an :class:`~litstore.errors.IntegrityError`.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import xxhash

from litstore.errors import IntegrityError
from litstore.format import keyfilter, layout

MAGIC = b"LSKRUN01"
#: The magic of a run with a key filter (format 5).
FILTERED_MAGIC = b"LSKRUN02"
FOOTER = struct.Struct("<8sQIIII Q")
ENTRY = np.dtype([("key_hash", "<u8"), ("chunk", "<u4"), ("row", "<u4"), ("content", "V16"), ("keyprint", "V16")])


def take(entries: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``entries[index]`` (positions or a mask) for arrays of :data:`ENTRY`, gathered as whole 48-byte records.

    numpy gathers a structured array with 16-byte void fields field by field: 0.39 s for a
    million entries, against 0.06 s as plain records; merging runs is mostly such gathers.
    """
    taken: np.ndarray = np.ascontiguousarray(entries).view(f"V{ENTRY.itemsize}")[index].view(ENTRY)
    return taken


#: The chunk id of an entry that says its key was deleted.
DELETED = 0xFFFFFFFF
#: Entries in a page a writer makes: one page (12 KiB) is what a lookup reads of a run,
#: and each page costs 16 bytes of the run's tail (read by windows, or once whole). 256, not
#: 1024: an append of 100 new keys reads 100 pages of each run (their hashes are spread
#: over the whole run), and at 1M entries a fresh process checked them in 2.4 ms instead
#: of 4.1 ms, while the tail grows to 62 KiB. Readers take the page size from the footer.
PAGE = 256
#: The most chunks a run may name (a chunk id is 32 bits, and one value means deleted).
MAX_CHUNKS = 2**31


@dataclass(frozen=True)
class Tail:
    """What a reader keeps of a run after reading its tail whole: its size, chunk names, fences and sums.

    The chunk names are checked against the layout as they are used: one by
    :meth:`chunk` (what a lookup resolves), all of them on the first use of
    :attr:`chunks` (merges, verify). A checkpoint's run names every chunk written since
    the last compaction, one per small commit, and a lookup uses one of them.
    """

    entries: int
    page: int
    names: tuple[str, ...]  # the chunk table as stored (whole, by its checksum), not yet checked
    fences: np.ndarray  # uint64, one per page
    sums: np.ndarray  # uint64, one per page
    filter_blocks: int = 0  # 0: the run has no filter (LSKRUN01)
    path: str = ""  # the run's file, for messages
    _checked: set[int] = field(default_factory=set, init=False, repr=False, compare=False)  # by chunk()

    @functools.cached_property
    def chunks(self) -> tuple[str, ...]:
        """Every chunk name of the table, each checked against the layout.

        Raises:
            IntegrityError: a name is not one of a chunk of the store.
        """
        if self.names and not layout.are_chunks("\n".join(self.names)):
            for number in range(len(self.names)):  # (which one)
                self.chunk(number)
        return self.names

    def chunk(self, number: int) -> str:
        """Chunk name ``number`` of the table (an id a checked page holds: inside the table), checked.

        Raises:
            IntegrityError: it is not the name of a chunk of the store.
        """
        name = self.names[number]
        if number in self._checked or "chunks" in self.__dict__:
            return name
        check_chunk_name(self.path, name)
        self._checked.add(number)
        return name

    @property
    def chunk_count(self) -> int:
        return len(self.names)

    @property
    def entries_bytes(self) -> int:
        return self.entries * ENTRY.itemsize

    @property
    def filter_start(self) -> int:
        """Where the filter's blocks start in the run (right after the entries)."""
        return self.entries_bytes


def encode(entries: np.ndarray, chunks: list[str], filtered: bool = False) -> bytes:
    """The bytes of a run holding ``entries`` (of :data:`ENTRY`, sorted by key hash) over ``chunks``;
    ``filtered``: with a key filter (format 5)."""
    if entries.dtype != ENTRY:
        raise ValueError("entries must be of the key run's entry type")
    fences = np.ascontiguousarray(entries["key_hash"][::PAGE]).astype("<u8")
    data = np.ascontiguousarray(entries).view(np.uint8).data  # the entries' bytes, not a copy
    sums = _page_sums(data)
    blocks = keyfilter.encode(entries["key_hash"], entries["keyprint"]) if filtered else b""
    return b"".join((data, blocks, _tail(len(entries), chunks, fences, sums, filtered)))


def _page_sums(data: memoryview | bytes) -> np.ndarray:
    """The xxh3-64 of each page of entry bytes ``data`` (the last page may be short)."""
    size = PAGE * ENTRY.itemsize
    return np.array([xxhash.xxh3_64_intdigest(data[i : i + size]) for i in range(0, len(data), size)], dtype="<u8")


def _tail(count: int, chunks: list[str], fences: np.ndarray, sums: np.ndarray, filtered: bool) -> bytes:
    """What follows a run's entries and filter: its chunk table, fences, page sums and footer."""
    if len(chunks) >= MAX_CHUNKS:
        raise ValueError(f"a key run names at most {MAX_CHUNKS - 1} chunks")
    names = "\n".join(chunks).encode()
    tail = names + fences.astype("<u8").tobytes() + sums.astype("<u8").tobytes()
    magic, block_count = (FILTERED_MAGIC, keyfilter.block_count(count)) if filtered else (MAGIC, 0)
    checksum = xxhash.xxh3_64_intdigest(tail)
    return tail + FOOTER.pack(magic, count, PAGE, len(names), len(chunks), block_count, checksum)


class RunWriter:
    """Writes one run into a file a batch of entries at a time: the run :func:`encode` makes of them all.

    For runs too large to hold (a full run of a store of a hundred million records is
    4.8 GB of entries): the entries go to ``file`` as they come, whole pages at a time;
    only the fences and page sums (16 bytes a page) are held. :meth:`finish` reads the
    entries back a section at a time to build the key filter (which must know the
    entry count first), then writes the tail. ``file`` is opened for reading and
    writing (``w+b``) and starts empty.
    """

    def __init__(self, file: BinaryIO, filtered: bool) -> None:
        self._file, self._filtered = file, filtered
        self._count = 0
        self._held = np.empty(0, dtype=ENTRY)  # entries of a page not yet full
        self._fences: list[np.ndarray] = []
        self._sums: list[np.ndarray] = []
        self._last_hash: int | None = None

    @property
    def entries(self) -> int:
        """Entries added so far."""
        return self._count + len(self._held)

    def add(self, entries: np.ndarray) -> None:
        """Append ``entries`` (sorted by key hash, none below the hashes added before)."""
        if entries.dtype != ENTRY:
            raise ValueError("entries must be of the key run's entry type")
        if not len(entries):
            return
        hashes = entries["key_hash"]
        if (self._last_hash is not None and int(hashes[0]) < self._last_hash) or bool(np.any(hashes[1:] < hashes[:-1])):
            raise ValueError("a run's entries must be added in key-hash order")
        self._last_hash = int(hashes[-1])
        if len(self._held):  # the held page is filled first; the rest is written from ``entries`` as they are
            need = PAGE - len(self._held)
            self._held = np.concatenate([self._held, entries[:need]])
            entries = entries[need:]
            if len(self._held) < PAGE:
                return
            self._write_pages(self._held)
        whole = len(entries) // PAGE * PAGE
        self._write_pages(entries[:whole])
        self._held = entries[whole:].copy()

    def _write_pages(self, entries: np.ndarray) -> None:
        if not len(entries):
            return
        data = np.ascontiguousarray(entries).view(np.uint8).data
        self._file.write(data)
        self._fences.append(np.ascontiguousarray(entries["key_hash"][::PAGE]).astype("<u8"))
        self._sums.append(_page_sums(data))
        self._count += len(entries)

    def finish(self, chunks: list[str]) -> int:
        """Write the last page, the filter and the tail over ``chunks``; the run's size in bytes."""
        self._write_pages(self._held)
        self._held = np.empty(0, dtype=ENTRY)
        if self._filtered:
            self._file.write(keyfilter.encode_sections(self._count, self._read_back()))
        empty = np.empty(0, dtype="<u8")
        fences = np.concatenate(self._fences) if self._fences else empty
        sums = np.concatenate(self._sums) if self._sums else empty
        self._file.write(_tail(self._count, chunks, fences, sums, self._filtered))
        self._file.flush()
        return self._file.tell()

    def _read_back(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The key hashes and keyprints of the entries written, a section at a time."""
        end = self._file.tell()
        size = _READ_BACK * ENTRY.itemsize
        for start in range(0, self._count * ENTRY.itemsize, size):
            self._file.seek(start)
            section = np.frombuffer(self._file.read(min(size, self._count * ENTRY.itemsize - start)), dtype=ENTRY)
            yield section["key_hash"], section["keyprint"]
        self._file.seek(end)


#: Entries :class:`RunWriter` reads back at a time to build its filter (12 MB).
_READ_BACK = 1 << 18


def footer_size() -> int:
    return FOOTER.size


#: A page's following fence where there is none to check against (the last page, or one a window did not read).
NO_BOUND = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class Footer:
    """A run's footer, checked against the file's length: where each part of the run lies.

    Nothing behind it is read yet: a lookup of a large run reads the fences and sums it
    needs a window at a time (:mod:`litstore.read.fences`), and only what reads the
    whole tail (:func:`parse_tail`) checks the tail's checksum.
    """

    path: str
    entries: int
    page: int
    names_bytes: int
    chunk_count: int
    filter_blocks: int
    checksum: int

    @property
    def pages(self) -> int:
        return -(-self.entries // self.page)

    @property
    def entries_bytes(self) -> int:
        return self.entries * ENTRY.itemsize

    @property
    def names_start(self) -> int:
        """Where the chunk table starts (after the entries and the filter)."""
        return self.entries_bytes + self.filter_blocks * keyfilter.BLOCK

    @property
    def fences_start(self) -> int:
        return self.names_start + self.names_bytes

    @property
    def sums_start(self) -> int:
        return self.fences_start + 8 * self.pages

    @property
    def tail_end(self) -> int:
        """Where the footer starts: the end of the chunk table, fences and sums its checksum covers."""
        return self.sums_start + 8 * self.pages


def parse_footer(path: str, file_bytes: int, footer: bytes) -> Footer:
    """Check a run's footer (its last :func:`footer_size` bytes) against the file's length ``file_bytes``.

    Raises:
        IntegrityError: it is not a run's footer, or it describes a file of another length.
    """
    if len(footer) != FOOTER.size:
        raise IntegrityError(f"key run {path} is shorter than its footer: it is damaged")
    magic, count, page, names_bytes, chunk_count, blocks, checksum = FOOTER.unpack(footer)
    if magic not in (MAGIC, FILTERED_MAGIC):
        raise IntegrityError(f"key run {path} does not end with a key run's footer: it is damaged")
    if blocks != (keyfilter.block_count(count) if magic == FILTERED_MAGIC else 0):
        raise IntegrityError(f"key run {path} claims {blocks} filter blocks for {count} entries: it is damaged")
    if not 1 <= page <= 1 << 20:
        raise IntegrityError(f"key run {path} claims pages of {page} entries: it is damaged")
    parsed = Footer(path, count, page, names_bytes, chunk_count, blocks, checksum)
    if parsed.tail_end + FOOTER.size != file_bytes:
        raise IntegrityError(
            f"key run {path} is {file_bytes} bytes long, but its footer describes "
            f"{parsed.tail_end + FOOTER.size}: it is damaged"
        )
    return parsed


def parse_names(footer: Footer, data: bytes | memoryview) -> tuple[str, ...]:
    """The chunk table (``data``, the run's bytes from :attr:`Footer.names_start`), split into names, not yet
    checked against the layout (:class:`Tail` does that as they are used).

    Raises:
        IntegrityError: it was cut short or holds another number of names than the footer says.
    """
    if len(data) != footer.names_bytes:
        raise IntegrityError(f"key run {footer.path} was cut short: it is damaged")
    names = bytes(data).decode("utf-8", errors="replace").split("\n") if footer.names_bytes else []
    if len(names) != footer.chunk_count:
        raise IntegrityError(f"key run {footer.path} names {len(names)} chunks, its footer says {footer.chunk_count}")
    return tuple(names)


def check_chunk_name(path: str, name: str) -> str:
    """``name`` (of the chunk table of run ``path``) if it is the name of a chunk of the store.

    Raises:
        IntegrityError: it is not.
    """
    try:
        layout.check_chunk(name)
    except ValueError as exc:
        raise IntegrityError(f"key run {path} names {name!r}, which is not a chunk of this store") from exc
    return name


def parse_tail(path: str, file_bytes: int, footer: bytes, read: Callable[[int, int], bytes]) -> Tail:
    """Check a run's footer (its last :func:`footer_size` bytes) and read its chunk table and fences whole.

    The chunk names are checked as they are used (:class:`Tail`).

    ``read(start, end)`` returns bytes ``[start, end)`` of the run (``file_bytes`` long).

    Raises:
        IntegrityError: the footer, sizes, chunk table or fences are not those of a run.
    """
    parsed = parse_footer(path, file_bytes, footer)
    return read_tail(parsed, read(parsed.names_start, parsed.tail_end))


def read_tail(footer: Footer, rest: bytes | memoryview) -> Tail:
    """The run's chunk table, fences and sums (``rest``: its bytes from :attr:`Footer.names_start` to the
    footer), checked whole: against the footer's checksum, and the fences sorted.

    Raises:
        IntegrityError: they are not those of the run.
    """
    path, fence_count = footer.path, footer.pages
    if len(rest) != footer.names_bytes + fence_count * 16:
        raise IntegrityError(f"key run {path} was cut short: it is damaged")
    if xxhash.xxh3_64_intdigest(rest) != footer.checksum:
        raise IntegrityError(f"key run {path}'s chunk table or page table do not match their checksum: it is damaged")
    names = parse_names(footer, rest[: footer.names_bytes])
    fences = np.frombuffer(rest, dtype="<u8", offset=footer.names_bytes, count=fence_count)
    sums = np.frombuffer(rest, dtype="<u8", offset=footer.names_bytes + 8 * fence_count, count=fence_count)
    if fence_count > 1 and bool(np.any(fences[1:] < fences[:-1])):
        raise IntegrityError(f"key run {path}'s fences are not sorted: it is damaged")
    return Tail(footer.entries, footer.page, names, fences, sums, footer.filter_blocks, path)


def check_page(path: str, tail: Tail, page: int, data: bytes | memoryview) -> np.ndarray:
    """The entries of page ``page`` of the run (``data``, its bytes just read), if they match the page's sum,
    are sorted, sit inside their fences and name chunks of the table or say deleted.

    Raises:
        IntegrityError: they do not.
    """
    return check_pages(path, tail, [page], [data])[0]


def check_pages(path: str, tail: Tail, pages: Sequence[int], data: Sequence[bytes | memoryview]) -> list[np.ndarray]:
    """:func:`check_page` of several pages (``pages`` ascending, ``data`` their bytes), checked together.

    Raises:
        IntegrityError: a page does not match its sum, is not sorted inside its fences,
            or names a chunk outside the table.
    """
    return check_pages_within(path, tail, pages, data, page_bounds(tail, pages))


def check_page_block(path: str, tail: Tail, pages: Sequence[int], block: bytes | memoryview) -> np.ndarray:
    """:func:`check_pages` of consecutive pages read in one ``block``: their entries as one array, a view of
    ``block`` (what a merge reads a range of key hashes by).

    Raises:
        IntegrityError: as :func:`check_pages`.
    """
    view = memoryview(block)
    size = tail.page * ENTRY.itemsize
    data = [view[index * size : (index + 1) * size] for index in range(len(pages))]
    bounds = page_bounds(tail, pages)
    _check_sums(path, tail, pages, data, bounds)
    if not data:
        return np.empty(0, dtype=ENTRY)
    sizes = np.fromiter((len(page_data) // ENTRY.itemsize for page_data in data), dtype=np.int64, count=len(data))
    entries = np.frombuffer(view[: int(sizes.sum()) * ENTRY.itemsize], dtype=ENTRY)  # (lengths checked above)
    _check_order(path, tail, pages, sizes, entries["key_hash"], entries["chunk"], bounds)
    return entries


def page_bounds(tail: Tail, pages: Sequence[int]) -> PageBounds:
    """What pages ``pages`` of the run with ``tail`` are checked against: the tail's fences and sums."""
    numbers = np.asarray(pages, dtype=np.int64)
    last = len(tail.fences) - 1
    following = np.where(numbers < last, tail.fences[np.minimum(numbers + 1, max(last, 0))], NO_BOUND)
    return PageBounds(tail.fences[numbers], tail.sums[numbers], following.astype(np.uint64))


@dataclass(frozen=True)
class PageBounds:
    """What pages are checked against, one value per page: its fence, its sum, and the fence of the page
    after it (:data:`NO_BOUND` where there is none, or none was read)."""

    fences: np.ndarray
    sums: np.ndarray
    following: np.ndarray


def check_pages_within(
    path: str, run: Tail | Footer, pages: Sequence[int], data: Sequence[bytes | memoryview], bounds: PageBounds
) -> list[np.ndarray]:
    """The entries of pages ``pages`` (ascending; ``data`` their bytes) of ``run``, checked against ``bounds``.

    Each page's bytes are hashed on their own; the order, fence and chunk checks run
    once over the pages' key hashes and chunk ids side by side, so a lookup of a
    hundred keys (as many pages) pays a few array passes, not a few per page. A page
    whose first entry is its fence confirms that fence, whether or not the tail's
    checksum was checked (:mod:`litstore.read.fences` relies on it).

    Raises:
        IntegrityError: a page does not match its sum, is not sorted inside its fences,
            or names a chunk outside the table.
    """
    _check_sums(path, run, pages, data, bounds)
    checked = [np.frombuffer(page_data, dtype=ENTRY) for page_data in data]  # views of what was read
    if checked:
        sizes = np.fromiter(map(len, checked), dtype=np.int64, count=len(checked))
        hashes = np.concatenate([entries["key_hash"] for entries in checked])
        chunks = np.concatenate([entries["chunk"] for entries in checked])
        _check_order(path, run, pages, sizes, hashes, chunks, bounds)
    return checked


def _check_sums(
    path: str, run: Tail | Footer, pages: Sequence[int], data: Sequence[bytes | memoryview], bounds: PageBounds
) -> None:
    """Raise :class:`IntegrityError` unless each page's bytes are as long as it must be and match its sum."""
    for page, page_data, page_sum in zip(pages, data, bounds.sums.tolist(), strict=True):
        expected = min(run.page, run.entries - page * run.page)
        if (
            expected <= 0
            or len(page_data) != expected * ENTRY.itemsize
            or xxhash.xxh3_64_intdigest(page_data) != page_sum
        ):
            raise IntegrityError(f"key run {path} page {page} does not match its checksum: it is damaged")


def _check_order(
    path: str,
    run: Tail | Footer,
    pages: Sequence[int],
    sizes: np.ndarray,
    hashes: np.ndarray,
    chunks: np.ndarray,
    bounds: PageBounds,
) -> None:
    """Raise :class:`IntegrityError` unless the pages (``sizes`` entries each, their key hashes and chunk ids
    end to end) are sorted inside their fences and name chunks of the run's table."""
    numbers = np.asarray(pages, dtype=np.int64)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    unsorted = np.zeros(len(sizes), dtype=bool)
    descents = np.flatnonzero(hashes[1:] < hashes[:-1]) + 1  # where a hash is below the one before it
    inside = descents[~np.isin(descents, starts)]  # (across two pages that is no descent of either)
    unsorted[np.searchsorted(ends, inside, "right")] = True
    unsorted |= hashes[starts] != bounds.fences
    unsorted |= hashes[ends - 1] > bounds.following
    if unsorted.any():
        page = int(numbers[np.argmax(unsorted)])
        raise IntegrityError(f"key run {path} page {page} is not sorted inside its fences: it is damaged")
    outside = np.flatnonzero((chunks >= run.chunk_count) & (chunks != DELETED))
    if len(outside):
        page = int(numbers[np.searchsorted(ends, outside[0], "right")])
        raise IntegrityError(f"key run {path} page {page} names a chunk outside its table: it is damaged")
