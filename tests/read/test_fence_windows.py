"""A lookup of a large key run reads a window of its fences, not its whole tail, and a damaged or lying fence or
sum is an IntegrityError or the right answer: never another entry, never "absent" for a key the run holds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore.format import keyrun
from litstore.format.models import KeyRunRef
from litstore.read import fences
from litstore.read.keyruns import ABSENT, LIVE, WINDOWED_TAIL, RunReader
from litstore.storage import Storage
from litstore.storage.local import LocalStorage

ENTRIES = 600_000
RUN = "manifests/00000001-0123456789abcdef0123.keys"
CHUNK = "fragments/0123456789abcdef0123/chunk-0123456789abcdef0123-0.bin"


def _entries(count: int, seed: int = 7, spread: int = 64) -> np.ndarray:
    """``count`` entries of distinct random key hashes (below ``2**spread``), sorted, each its own keyprint."""
    rng = np.random.default_rng(seed)
    hashes = np.unique(rng.integers(0, 2**spread - 1, size=count + count // 100, dtype=np.uint64, endpoint=True))
    hashes = np.sort(rng.choice(hashes, size=count, replace=False))
    entries = np.zeros(count, dtype=keyrun.ENTRY)
    entries["key_hash"] = hashes
    entries["row"] = np.arange(count, dtype=np.uint32)
    entries["keyprint"] = np.frombuffer(rng.bytes(16 * count), dtype="V16")
    return entries


class _Counting:
    """A storage that reads by ranges (as an object store does) and records each span read of each file."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.spans: list[tuple[int, int]] = []

    def read(self, path: str) -> bytes:
        data = self._inner.read(path)
        self.spans.append((0, len(data)))
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        self.spans.append((start, end))
        return self._inner.read_range(path, start, end)

    def read_ranges(self, path: str, spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
        self.spans.extend(spans)
        return self._inner.read_ranges(path, spans)

    def mapped(self, path: str) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read_between(self, start: int, end: int) -> int:
        """Bytes read that lie in ``[start, end)``."""
        return sum(max(0, min(high, end) - max(low, start)) for low, high in self.spans)


@pytest.fixture(scope="module")
def large_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, np.ndarray, KeyRunRef]]:
    root = tmp_path_factory.mktemp("runs")
    entries = _entries(ENTRIES)
    data = keyrun.encode(entries, [CHUNK], filtered=True)
    (root / "manifests").mkdir()
    (root / RUN).write_bytes(data)
    yield root, entries, KeyRunRef(path=RUN, entries=ENTRIES, size=len(data))


def _reader(storage: Storage, ref: KeyRunRef) -> RunReader:
    return RunReader(storage, ref)


def _lookup(reader: RunReader, entries: np.ndarray, rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return reader.find_many(entries["key_hash"][rows], entries["keyprint"][rows])


def _storages(root: Path) -> list[Storage]:
    local = LocalStorage(str(root))
    return [local, _Counting(local)]  # type: ignore[list-item]


def test_a_lookup_reads_a_window_of_the_fences_not_the_tail(large_run: tuple[Path, np.ndarray, KeyRunRef]) -> None:
    root, entries, ref = large_run
    footer_size = keyrun.footer_size()
    storage = _Counting(LocalStorage(str(root)))
    reader = _reader(storage, ref)  # type: ignore[arg-type]
    status, found = _lookup(reader, entries, [123_456])
    assert status.tolist() == [LIVE] and found[0] == entries[123_456]
    assert reader.chunk(int(found["chunk"][0])) == CHUNK
    footer = reader.footer()
    tail = footer.tail_end - footer.fences_start
    assert tail > WINDOWED_TAIL
    window = storage.read_between(footer.fences_start, footer.tail_end)
    assert window <= 4 * fences.BLOCK * 16, "a block or two of fences and their sums"
    assert window < tail / 8
    assert storage.read_between(0, footer.entries_bytes) == footer.page * keyrun.ENTRY.itemsize, "one page"
    assert len(storage.spans) <= 1 + 1 + 3 + 1, "footer, filter block, window (fences, sums, names), page"
    assert storage.read_between(ref.size - footer_size, ref.size) == footer_size


def test_lookups_through_windows_agree_with_the_whole_tail(large_run: tuple[Path, np.ndarray, KeyRunRef]) -> None:
    root, entries, ref = large_run
    rng = np.random.default_rng(3)
    present = [0, 1, keyrun.PAGE - 1, keyrun.PAGE, ENTRIES - 1, *rng.integers(0, ENTRIES, 40).tolist()]
    absent = np.array([0, 2**64 - 1, int(entries["key_hash"][5]) + 1, *rng.integers(0, 2**63, 20).tolist()], np.uint64)
    absent_prints = np.frombuffer(rng.bytes(16 * len(absent)), dtype="V16")
    for storage in _storages(root):
        for row in present:  # one process per key: through windows
            status, found = _lookup(_reader(storage, ref), entries, [row])
            assert status.tolist() == [LIVE] and found[0] == entries[row]
        windowed = _reader(storage, ref)
        status, _ = windowed.find_many(absent, absent_prints)
        assert status.tolist() == [ABSENT] * len(absent)
        whole = _reader(storage, ref)
        whole.tail()
        assert _lookup(whole, entries, present)[0].tolist() == [LIVE] * len(present)
        assert whole.find_many(absent, absent_prints)[0].tolist() == [ABSENT] * len(absent)


def test_many_lookups_in_one_process_end_up_reading_the_tail_once(
    large_run: tuple[Path, np.ndarray, KeyRunRef],
) -> None:
    root, entries, ref = large_run
    storage = _Counting(LocalStorage(str(root)))
    reader = _reader(storage, ref)  # type: ignore[arg-type]
    footer = reader.footer()
    rows = np.random.default_rng(5).integers(0, ENTRIES, 60).tolist()
    for row in rows:
        status, found = _lookup(reader, entries, [row])
        assert status.tolist() == [LIVE] and found[0] == entries[row]
    tail = footer.tail_end - footer.fences_start
    assert storage.read_between(footer.fences_start, footer.tail_end) < 2 * tail, "windows up to a quarter, then once"
    status, _ = _lookup(_reader(storage, ref), entries, rows)  # type: ignore[arg-type]
    assert status.tolist() == [LIVE] * len(rows), "a batch this large reads the whole tail at once"


def test_keys_far_from_uniform_widen_their_windows(tmp_path: Path) -> None:
    """Hashes packed into the first 1/1024 of the range: the expected page is far off, the window doubles."""
    entries = _entries(400_000, seed=11, spread=54)
    data = keyrun.encode(entries, [CHUNK])
    (tmp_path / "manifests").mkdir()
    (tmp_path / RUN).write_bytes(data)
    ref = KeyRunRef(path=RUN, entries=len(entries), size=len(data))
    for storage in _storages(tmp_path):
        for row in (0, 77_777, 399_999):
            status, found = _lookup(_reader(storage, ref), entries, [row])
            assert status.tolist() == [LIVE] and found[0] == entries[row]
        status, _ = _reader(storage, ref).find_many(np.array([2**60], np.uint64), entries["keyprint"][:1])
        assert status.tolist() == [ABSENT]


def _flip(path: Path, at: int, mask: int) -> None:
    with path.open("r+b") as file:
        file.seek(at)
        byte = file.read(1)[0]
        file.seek(at)
        file.write(bytes([byte ^ mask]))


def _right_or_refused(reader: RunReader, entries: np.ndarray, row: int) -> str:
    """What a lookup of entry ``row`` gave: "right", or "refused" (IntegrityError); anything else fails."""
    try:
        status, found = _lookup(reader, entries, [row])
    except litstore.IntegrityError:
        return "refused"
    assert status.tolist() == [LIVE], "a key the run holds read as absent"
    assert found[0] == entries[row], "another entry"
    return "right"


@pytest.mark.parametrize("target", ["fence", "sum"])
def test_a_flipped_fence_or_sum_near_the_key_is_refused_or_harmless(
    large_run: tuple[Path, np.ndarray, KeyRunRef], target: str
) -> None:
    root, entries, ref = large_run
    path = root / RUN
    footer = _reader(LocalStorage(str(root)), ref).footer()
    start = footer.fences_start if target == "fence" else footer.sums_start
    seen = set()
    for row in (300_000, 300_000 + keyrun.PAGE - 1):  # a page's first and last entry
        page = row // keyrun.PAGE
        for damaged in range(page - 2, page + 3):
            for bit in (0, 13, 31, 47, 62, 63):
                at = start + 8 * damaged + bit // 8
                _flip(path, at, 1 << (bit % 8))
                try:
                    for storage in _storages(root):
                        seen.add(_right_or_refused(_reader(storage, ref), entries, row))
                        with pytest.raises(litstore.IntegrityError, match="checksum"):
                            _reader(storage, ref).tail()
                finally:
                    _flip(path, at, 1 << (bit % 8))
    assert "refused" in seen
    if target == "sum":
        assert seen == {"right", "refused"}, "a flipped sum fails only its own page"


def test_a_lying_fence_pointing_to_another_page_is_refused(large_run: tuple[Path, np.ndarray, KeyRunRef]) -> None:
    """Fences rewritten (still sorted) so that the key's hash falls in the page before or after its own."""
    root, entries, ref = large_run
    path = root / RUN
    footer = _reader(LocalStorage(str(root)), ref).footer()
    row = 300_000 + keyrun.PAGE // 2
    page, value = row // keyrun.PAGE, int(entries["key_hash"][row])
    lies = {
        page: value + 1,  # its own page starts above the key: the search lands on the page before
        page + 1: value - 1 if value - 1 > int(entries["key_hash"][page * keyrun.PAGE]) else value,  # after: at it
    }
    original = path.read_bytes()
    for number, lie in lies.items():
        with path.open("r+b") as file:
            file.seek(footer.fences_start + 8 * number)
            file.write(np.array([lie], dtype="<u8").tobytes())
        try:
            for storage in _storages(root):
                assert _right_or_refused(_reader(storage, ref), entries, row) == "refused"
        finally:
            path.write_bytes(original)


@pytest.mark.parametrize("cut", [1, 8, 5000])
def test_a_truncated_tail_is_refused(large_run: tuple[Path, np.ndarray, KeyRunRef], tmp_path: Path, cut: int) -> None:
    root, entries, ref = large_run
    (tmp_path / "manifests").mkdir()
    (tmp_path / RUN).write_bytes((root / RUN).read_bytes()[:-cut])
    for storage in _storages(tmp_path):
        with pytest.raises(litstore.IntegrityError, match="key run"):
            _lookup(_reader(storage, ref), entries, [300_000])
        shorter = KeyRunRef(path=RUN, entries=ENTRIES, size=ref.size - cut)  # a commit record agreeing with the cut
        with pytest.raises(litstore.IntegrityError, match="key run"):
            _lookup(_reader(storage, shorter), entries, [300_000])


def test_random_damage_to_the_tail_never_gives_a_wrong_answer(large_run: tuple[Path, np.ndarray, KeyRunRef]) -> None:
    root, entries, ref = large_run
    path = root / RUN
    footer = _reader(LocalStorage(str(root)), ref).footer()
    rng = np.random.default_rng(17)
    rows = rng.integers(0, ENTRIES, 3).tolist()
    for _ in range(60):
        row = rows[int(rng.integers(0, len(rows)))]
        page = row // keyrun.PAGE
        # Near the key's page (where a window reads), in the fences or in the sums.
        start = footer.fences_start if rng.integers(0, 2) else footer.sums_start
        at = start + 8 * int(np.clip(page + rng.integers(-3, 4), 0, footer.pages - 1)) + int(rng.integers(0, 8))
        mask = 1 << int(rng.integers(0, 8))
        _flip(path, at, mask)
        try:
            for storage in _storages(root):
                _right_or_refused(_reader(storage, ref), entries, row)
        finally:
            _flip(path, at, mask)
