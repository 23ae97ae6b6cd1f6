"""``verify`` on a format-4 store with holes: dead rows are not data, and damaged deletion vectors are named.

One small store (an append, an upsert of 20 keys, a delete of 10: dead rows in most
chunks) is built once; each test checks a copy. Hostile vectors are planted for real:
bytes of the deletions file flipped or cut, or a block written and its reference in
the commit record rewritten (``tests.planting.plant_dead_rows``), as a hostile
writer's own commit would. Each gives a failed verify naming the vector, and a typed
``IntegrityError`` from the readers that walk a chunk's rows (``items()``, exports),
never a shorter stream or another record.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore import VerifyReport
from litstore.format import layout
from litstore.ops import verify_deletions, verify_stored
from tests.planting import plant_dead_rows

SPLITS = litstore.HashSplit(train=0.5, val=0.5)
RECORDS = 120


def _records(count: int, start: int = 0, n: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"a{i:04d}", "n": i + n, "blob": bytes([i % 256]) * 24} for i in range(start, start + count)]


def _history(store: litstore.Store) -> None:
    store.append(_records(RECORDS))
    store.upsert(_records(20, n=1000))  # replaces a0000..a0019
    store.delete([f"a{i:04d}" for i in range(50, 60)])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-deletions") / "store"
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=2048)
    _history(store)
    assert store.config.writes_deletion_vectors and store.head().reader.deletions.refs
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "store"
    shutil.copytree(template, target)
    return target


def _verify(root: Path, **options: Any) -> VerifyReport:
    return litstore.open(root).verify(**options)


def _holed(root: Path) -> tuple[str, int, list[int], dict[int, str]]:
    """The chunk with the most dead rows: its name, item count, dead rows, and the key the manifest lists at each
    live row."""
    store = litstore.open(root)
    ref = max(store.head().reader.deletions.refs, key=lambda ref: ref.dead)
    size = next(
        chunk.num_items for chunks in store.chunks().values() for chunk in chunks if chunk.filename == ref.chunk
    )
    dead = store.head().reader.deletions.dead(ref.chunk, size).tolist()
    listed = {row["row"]: row["key"] for row in store.manifest().to_pylist() if row["chunk"] == ref.chunk}
    assert len(dead) + len(listed) == size and not set(dead) & set(listed)
    return ref.chunk, size, dead, listed


def _only_deletion_problems(report: VerifyReport) -> str:
    """The report fails on its deletion vectors alone; its summary."""
    assert not report.ok
    assert report.deletion_problems
    assert [
        line for line in report.problems() if not line.startswith(f"{len(report.deletion_problems)} deletion")
    ] == []
    with pytest.raises(litstore.VerificationError):
        report.raise_if_failed()
    return report.summary()


def _walks_refuse(root: Path, match: str) -> None:
    """``items()``, ``to_arrow()`` and ``iter_batches()`` raise ``IntegrityError`` (``match``), not a shorter stream."""
    store = litstore.open(root)
    with pytest.raises(litstore.IntegrityError, match=match):
        list(store.items())
    with pytest.raises(litstore.IntegrityError, match=match):
        litstore.open(root).to_arrow()
    with pytest.raises(litstore.IntegrityError, match=match):
        list(litstore.open(root).iter_batches(batch_size=7))


# -- a healthy store with holes --------------------------------------------------------------


def test_a_store_with_holes_is_ok(root: Path) -> None:
    store = litstore.open(root)
    indexed = sum(chunk.num_items for chunks in store.chunks().values() for chunk in chunks)
    assert indexed > len(store) == RECORDS - 10  # the chunks hold dead rows
    report = store.verify()
    assert report.ok, report.summary()
    assert report.records_checked == len(store)
    assert (report.unlisted_records, report.duplicate_keys, report.deletion_problems) == ([], [], [])
    assert report.data_fingerprint == report.fingerprint == store.version.fingerprint
    for version in store.versions():
        assert store.verify(version.number).ok


def test_parts_of_any_size_give_the_same_report_on_holes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunk, _, dead, listed = _holed(root)
    healthy = _verify(root)
    plant_dead_rows(root, chunk, sorted([*dead, min(listed)]))
    damaged = _verify(root)
    assert not damaged.ok
    monkeypatch.setattr(verify_stored, "PART_ITEMS", 3)
    assert _verify(root) == damaged
    plant_dead_rows(root, chunk, dead)
    assert _verify(root) == healthy
    assert healthy.ok


@pytest.mark.integration
def test_workers_give_the_same_report_on_holes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _verify(root, num_workers=2) == _verify(root)
    chunk, _, dead, listed = _holed(root)
    plant_dead_rows(root, chunk, sorted([*dead, min(listed)]))
    serial = _verify(root)
    assert not serial.ok
    monkeypatch.setattr(verify_stored, "PART_ITEMS", 5)
    assert _verify(root, num_workers=2) == serial


def test_the_format_3_twin_copies_on_write_and_is_ok(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048, format_version=3)
    _history(store)
    assert not store.head().reader.deletions.refs
    assert sum(chunk.num_items for chunks in store.chunks().values() for chunk in chunks) == len(store)
    report = store.verify()
    assert report.ok, report.summary()
    assert report.records_checked == len(store) == RECORDS - 10


# -- vectors that do not decode ------------------------------------------------------------


def _block(root: Path, chunk: str) -> tuple[Path, int, int]:
    """The deletions file holding ``chunk``'s block in the newest version, and the block's offset and length."""
    ref = next(ref for ref in litstore.open(root).head().reader.deletions.refs if ref.chunk == chunk)
    return root / ref.path, ref.offset, ref.length


def test_a_flipped_block_is_named_and_refused(root: Path) -> None:
    chunk = _holed(root)[0]
    path, offset, length = _block(root, chunk)
    data = bytearray(path.read_bytes())
    data[offset + length // 2] ^= 0x20
    path.write_bytes(bytes(data))

    report = _verify(root)
    summary = _only_deletion_problems(report)
    assert report.deletion_problems[0][0] == path.relative_to(root).as_posix()
    assert "does not match its checksum" in summary and chunk in summary
    assert report.fingerprint_ok  # its chunk's unlisted rows are taken as the dead ones: one fault, one line
    _walks_refuse(root, "checksum")


def test_a_truncated_deletions_file_is_named_and_refused(root: Path) -> None:
    chunk = _holed(root)[0]
    path, offset, length = _block(root, chunk)
    path.write_bytes(path.read_bytes()[: offset + length - 3])

    summary = _only_deletion_problems(_verify(root))
    assert "truncated or changed" in summary and chunk in summary
    _walks_refuse(root, "checksum")


def test_a_missing_deletions_file_is_named_and_refused(root: Path) -> None:
    chunk = _holed(root)[0]
    path = _block(root, chunk)[0]
    path.unlink()

    summary = _only_deletion_problems(_verify(root))
    assert "is missing" in summary and path.name in summary
    _walks_refuse(root, "is missing")


def test_a_block_length_no_vector_can_have_is_refused_before_it_is_read(root: Path) -> None:
    """The length comes from the commit record: reading it would allocate that much (here 1 TiB)."""
    chunk = _holed(root)[0]
    record_path = root / layout.version_record(litstore.open(root).version.number)
    record = json.loads(record_path.read_text())
    ref = next(ref for ref in record["deletions"] if ref["chunk"] == chunk)
    ref["length"] = 1 << 40
    record_path.write_text(json.dumps(record))

    summary = _only_deletion_problems(_verify(root))
    assert f"is {1 << 40} bytes by version" in summary and chunk in summary
    _walks_refuse(root, "more than any of a chunk")


def test_rows_past_the_chunks_end_are_named_and_refused(root: Path) -> None:
    chunk, size, dead, _ = _holed(root)
    plant_dead_rows(root, chunk, [*dead[1:], size + 5])  # as many rows as before: one past the end

    summary = _only_deletion_problems(_verify(root))
    assert f"marks row {size + 5} dead, but the chunk holds {size} items" in summary
    _walks_refuse(root, f"holds {size} items")


def test_a_block_that_disagrees_with_its_count_is_named(root: Path) -> None:
    chunk, _, dead, listed = _holed(root)
    plant_dead_rows(root, chunk, sorted([*dead, min(listed)]), dead=len(dead))  # the reference's count kept

    summary = _only_deletion_problems(_verify(root))
    assert f"marks {len(dead) + 1} rows dead, its commit record says {len(dead)}" in summary
    _walks_refuse(root, "commit record says")


def test_a_count_that_disagrees_with_the_versions_is_refused_before_a_walk(root: Path) -> None:
    """A reference claiming more dead rows than its block holds: walks refuse before they yield anything."""
    chunk, _, dead, _ = _holed(root)
    plant_dead_rows(root, chunk, dead, dead=len(dead) + 1)

    summary = _only_deletion_problems(_verify(root))
    assert f"marks {len(dead)} rows dead, its commit record says {len(dead) + 1}" in summary
    walk = litstore.open(root).items()
    with pytest.raises(litstore.IntegrityError, match="live rows"):
        next(walk)


def test_a_vector_that_kills_a_listed_chunk_whole_is_named(root: Path) -> None:
    chunk, size, _, _ = _holed(root)
    plant_dead_rows(root, chunk, list(range(size)))

    report = _verify(root)
    assert any("marks every row dead" in problem for _, problem in report.deletion_problems)
    assert not report.ok


def test_a_vector_of_a_chunk_the_version_does_not_list_is_named(root: Path) -> None:
    chunk, _, dead, _ = _holed(root)
    stranger = chunk.rsplit("-", 1)[0] + "-987654.bin"  # a chunk name of the layout, but no such chunk
    path = plant_dead_rows(root, stranger, dead)

    if litstore.open(root).head().version.listed_by_delta:  # format 6: composing the listing refuses it
        with pytest.raises(litstore.IntegrityError, match=f"{stranger} a deletion vector, but the version does not"):
            _verify(root)
        return
    summary = _only_deletion_problems(_verify(root))
    assert stranger in summary and "no split index of the version lists" in summary
    assert path in summary


# -- vectors that decode but mark the wrong rows -------------------------------------------


def test_a_live_row_marked_dead_is_named_by_chunk_row_and_key(root: Path) -> None:
    chunk, _, dead, listed = _holed(root)
    row = sorted(listed)[len(listed) // 2]
    plant_dead_rows(root, chunk, sorted([*dead, row]))

    report = _verify(root)
    assert not report.ok
    (path, problem), *rest = report.deletion_problems
    assert rest == []
    assert f"chunk {chunk} marks row {row} dead" in problem and repr(listed[row]) in problem
    assert path.endswith(".deletions")
    assert report.missing_records == []  # the record is there: only its vector is wrong
    assert report.count_mismatches  # readers that walk rows would yield one record fewer
    assert report.data_fingerprint != report.fingerprint == report.manifest_fingerprint
    _walks_refuse(root, "live rows")


def test_a_live_row_swapped_for_a_dead_one_is_named_and_refused(root: Path) -> None:
    """The count kept: a walk would yield the superseded record in place of the live one; it fails at its end."""
    chunk, _, dead, listed = _holed(root)
    store = litstore.open(root)
    old_keys = {row: key for row, key in zip(*_keys_in(store, chunk), strict=True)}
    revived = next(row for row in dead if old_keys[row] in store)  # an upserted key's old row
    row = sorted(listed)[0]
    plant_dead_rows(root, chunk, sorted({*dead, row} - {revived}))

    report = _verify(root)
    assert [problem for _, problem in report.deletion_problems if f"marks row {row} dead" in problem]
    assert report.unlisted_records == [(old_keys[revived], chunk, revived)]
    assert report.duplicate_keys == [old_keys[revived]]  # a walk would yield it twice
    assert report.count_mismatches == []
    walked: list[Any] = []
    with pytest.raises(litstore.IntegrityError, match="do not add up to its fingerprint"):
        walked.extend(key for key, _ in litstore.open(root).items())
    assert walked.count(old_keys[revived]) == 2 and listed[row] not in walked
    with pytest.raises(litstore.IntegrityError, match="fingerprint"):
        litstore.open(root).to_arrow()


def _keys_in(store: litstore.Store, chunk: str) -> tuple[list[int], list[Any]]:
    """Every row of ``chunk`` and the key stored there, dead rows too (read from the chunk, unchecked)."""
    size = next(info.num_items for infos in store.chunks().values() for info in infos if info.filename == chunk)
    rows = list(range(size))
    info = next(info for infos in store.chunks().values() for info in infos if info.filename == chunk)
    return rows, verify_stored.decoded_keys(store.storage, info, rows, "id", "str")


def test_named_dead_rows_are_bounded(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunk, _, dead, listed = _holed(root)
    planted = sorted(listed)[:5]
    plant_dead_rows(root, chunk, sorted([*dead, *planted]))
    monkeypatch.setattr(verify_deletions, "NAMED", 2)

    problems = _verify(root).deletion_problems
    assert len(problems) == 3
    for (_, problem), row in zip(problems[:2], planted[:2], strict=True):
        assert f"marks row {row} dead" in problem
    assert problems[-1][1] == "3 more rows marked dead that the manifest lists"


def test_an_older_version_is_checked_against_its_own_vectors(root: Path) -> None:
    """Damage to the newest version's deletions file leaves a version that does not list it ok."""
    store = litstore.open(root)
    newest = layout.deletions(store.version.number, store.version.transaction or "")
    assert (root / newest).is_file()
    older = [
        version.number
        for version in store.versions()
        if newest not in {ref.path for ref in version.deletions} and version.number
    ]
    (root / newest).write_bytes(b"junk")
    for number in older:
        assert litstore.open(root).verify(number).ok
    assert not _verify(root).ok
