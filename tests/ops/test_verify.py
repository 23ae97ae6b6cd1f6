"""``Store.verify`` finds every kind of damage, names the culprit, and passes a healthy store.

Each test damages a copy of one small store (three appends, three splits, a few
hundred records in many 4 KiB chunks) on disk, reopens it, and checks that the
report is not ok, that the right field names the culprit, that ``summary()``
mentions it and that ``raise_if_failed()`` raises.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore import VerifyReport
from litstore._litdata import chunk as chunk_layout
from litstore.format import codec, hashing, layout
from litstore.read.manifests import compose_manifest

SPLITS = litstore.HashSplit(train=0.6, val=0.2, test=0.2)
BATCHES = ("a", "b", "c")  # one append (version 1, 2, 3) each
PER_BATCH = 100
LATEST = len(BATCHES)


def _records(prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i:03d}", "value": i, "blob": bytes((i + j) % 256 for j in range(48))} for i in range(count)
    ]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy store, built once; tests damage copies of it."""
    root = tmp_path_factory.mktemp("verify-template") / "store"
    # Format 5: every version has split index files (these tests damage them).
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=4096, format_version=5)
    for prefix in BATCHES:
        store.append(_records(prefix, PER_BATCH))
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template store."""
    target = tmp_path / "store"
    shutil.copytree(template, target)
    return target


# -- helpers ---------------------------------------------------------------------


def _commit_record(root: Path, version: int = LATEST) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((root / layout.version_record(version)).read_text())
    return record


def _delta_path(root: Path, version: int = LATEST) -> str:
    """The manifest delta version ``version`` wrote, as its commit record names it."""
    path: str = _commit_record(root, version)["manifest"]
    assert (root / path).is_file()
    return path


def _index_path(root: Path, split: str, version: int = LATEST) -> str:
    """The litdata index of ``split`` in ``version`` (``versions/<v>[-<txn>]/<split>/index.json``)."""
    named = _commit_record(root, version).get("indexes")
    if named:
        return str(named[split])
    found = sorted(root.glob(f"{layout.VERSIONS}/{layout.version_name(version)}*/{split}/index.json"))
    assert len(found) == 1, found
    return found[0].relative_to(root).as_posix()


def _rows(root: Path, version: int = LATEST) -> list[dict[str, Any]]:
    """The manifest composed from the files now on disk (not a cache), unchecked, as verify reads it."""
    store = litstore.open(root)
    return compose_manifest(store.storage, store.config, version).to_pylist()


def _pick(root: Path, prefix: str = "c") -> dict[str, Any]:
    """A manifest row of a record in the middle of a chunk (not its first or last row)."""
    store = litstore.open(root)
    sizes = {chunk.filename: chunk.num_items for chunks in store.chunks().values() for chunk in chunks}
    candidates = [
        row
        for row in store.manifest().to_pylist()
        if row["key"].startswith(prefix) and 0 < row["row"] < sizes[row["chunk"]] - 1 and sizes[row["chunk"]] > 4
    ]
    assert candidates, "the template store should have chunks with several rows"
    return sorted(candidates, key=lambda row: row["key"])[len(candidates) // 2]


def _chunk_keys(root: Path, chunk: str) -> list[str]:
    return sorted(row["key"] for row in _rows(root) if row["chunk"] == chunk)


def _chunk_of(root: Path, prefix: str = "c") -> str:
    """A chunk holding records of batch ``prefix`` (so of the latest version only, for "c")."""
    return _pick(root, prefix)["chunk"]


def _edit_index(root: Path, split: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Rewrite the chunk list of ``split``'s index in the latest version with ``change``."""
    path = root / _index_path(root, split)
    index = json.loads(path.read_text())
    change(index["chunks"])
    path.write_text(json.dumps(index))


def _split_of(root: Path, chunk: str) -> str:
    return next(row["split"] for row in _rows(root) if row["chunk"] == chunk)


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _payload_span(root: Path, chunk: str, row: int) -> tuple[int, int]:
    """Absolute ``[start, end)`` of item ``row``'s payload in ``chunk`` (after its 4-byte size)."""
    data = (root / chunk).read_bytes()
    offsets = chunk_layout.item_offsets(data, chunk)
    return int(offsets[row]) + 4, int(offsets[row + 1])


def _verify(root: Path, version: int | None = None, **options: Any) -> VerifyReport:
    """Verify a freshly opened store (a store object caches its manifest and chunk lists)."""
    return litstore.open(root).verify(version, **options)


def _assert_failed(report: VerifyReport, *names: object) -> str:
    """Not ok; the summary says FAILED and names every culprit; ``raise_if_failed`` raises it."""
    assert not report.ok
    summary = report.summary()
    assert "FAILED" in summary
    assert not summary.endswith("OK")
    assert str(report) == summary
    for name in names:
        assert str(name) in summary, f"{name!r} not named in:\n{summary}"
    with pytest.raises(litstore.VerificationError) as caught:
        report.raise_if_failed()
    assert caught.value.report is report
    assert isinstance(caught.value, litstore.IntegrityError)
    assert str(caught.value) == summary
    return summary


def _rewrite_delta(root: Path, version: int, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Rewrite ``manifests/<version>.parquet`` with ``change`` applied to its rows, same schema."""
    path = root / _delta_path(root, version)
    table = pq.read_table(path)
    rows = change(table.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def _edit_row(key: str, /, **changes: Any) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Change the columns ``changes`` of the one row of ``key``."""

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        hits = [row for row in rows if row["key"] == key]
        assert len(hits) == 1
        hits[0].update(changes)
        return rows

    return change


# -- a healthy store ---------------------------------------------------------------


def test_healthy_store_is_ok(root: Path) -> None:
    store = litstore.open(root)
    report = store.verify()
    chunks = store.chunks()
    assert report.ok, report.summary()
    assert report.version == LATEST
    assert report.records_checked == len(store) == PER_BATCH * len(BATCHES)
    assert report.chunks_checked == sum(len(split_chunks) for split_chunks in chunks.values())
    assert report.chunks_checked >= 3 * len(SPLITS.names), "the store should span many chunks"
    assert len(chunks) == len(SPLITS.names)
    assert report.fingerprint == report.manifest_fingerprint == report.data_fingerprint == store.version.fingerprint
    assert report.fingerprint_ok
    assert report.problems() == []
    summary = report.summary()
    assert "OK" in summary and "FAILED" not in summary
    assert str(report.records_checked) in summary and store.version.fingerprint in summary
    assert report.raise_if_failed() is report


def test_every_version_is_ok(root: Path) -> None:
    store = litstore.open(root)
    for number in range(LATEST + 1):
        report = store.verify(number)
        assert report.ok, report.summary()
        assert report.version == number
        assert report.records_checked == len(store.at(number)) == PER_BATCH * number
        assert report.fingerprint == store.at(number).version.fingerprint


def test_older_version_stays_ok_after_more_appends(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=4096)
    store.append(_records("a", PER_BATCH))
    first = store.verify()
    store.append(_records("b", PER_BATCH))
    store.append(_records("c", PER_BATCH))
    report = store.verify(1)
    assert report.ok, report.summary()
    assert report.version == 1
    assert report.records_checked == PER_BATCH
    assert report.chunks_checked == first.chunks_checked
    assert report.fingerprint == first.fingerprint
    assert store.verify().ok
    assert store.version.number == 3


def test_older_version_ignores_damage_to_newer_chunks(root: Path) -> None:
    chunk = _chunk_of(root, "c")  # written by version 3 only
    (root / chunk).unlink()
    assert _verify(root, 1).ok
    assert _verify(root, 2).ok
    report = _verify(root)
    assert report.missing_chunks == [chunk]


def test_empty_store_is_ok(store: litstore.Store) -> None:
    report = store.verify()
    assert report.ok, report.summary()
    assert report.records_checked == report.chunks_checked == 0
    assert "OK" in report.summary()


# -- damaged chunks ---------------------------------------------------------------


def test_flipped_payload_byte_is_a_corrupt_record(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    start, end = _payload_span(root, chunk, row)
    middle = (start + end) // 2
    _flip(root / chunk, middle)
    damaged = (root / chunk).read_bytes()[start:end]
    assert codec.decode(damaged)["id"] == key, "the flip should change the content, not the key"

    report = _verify(root)
    assert report.corrupt_records == [(key, chunk, row, "content")]
    assert report.missing_records == report.unlisted_records == []
    assert report.missing_chunks == report.damaged_chunks == report.duplicate_keys == []
    assert report.count_mismatches == []
    assert not report.fingerprint_ok
    assert report.manifest_fingerprint == report.fingerprint != report.data_fingerprint
    _assert_failed(report, repr(key), chunk)


def test_flipped_key_byte_is_a_corrupt_record(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    start, end = _payload_span(root, chunk, row)
    data = (root / chunk).read_bytes()
    at = data.find(key.encode(), start, end)
    assert at >= 0
    _flip(root / chunk, at + len(key) - 1)  # the key's last character: no longer valid UTF-8

    report = _verify(root)
    assert report.corrupt_records == [(key, chunk, row, "key")]
    _assert_failed(report, repr(key), chunk)


def test_payload_rewritten_to_another_stored_key_is_a_duplicate(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    other = f"{key[:-1]}{'1' if key[-1] != '1' else '2'}"  # a key of the same length that the store holds
    assert other in litstore.open(root)
    start, end = _payload_span(root, chunk, row)
    data = bytearray((root / chunk).read_bytes())
    at = data.find(key.encode(), start, end)
    data[at : at + len(key)] = other.encode()
    (root / chunk).write_bytes(bytes(data))

    report = _verify(root)
    assert report.corrupt_records == [(key, chunk, row, "key")]
    assert report.duplicate_keys == [other]
    _assert_failed(report, repr(key), repr(other))


def test_flipped_item_size_field_is_a_corrupt_record(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    start, _ = _payload_span(root, chunk, row)
    _flip(root / chunk, start - 4)  # low byte of the item's 4-byte leaf size

    report = _verify(root)
    assert [record[:3] for record in report.corrupt_records] == [(key, chunk, row)]
    _assert_failed(report, repr(key), chunk)


@pytest.mark.parametrize(
    "position",
    [
        pytest.param(lambda count: 0, id="num_items"),
        pytest.param(lambda count: 4 + 4 * 2 + 3, id="high-byte-of-an-inner-offset"),
        pytest.param(lambda count: 4 + 4 * count, id="last-offset"),
    ],
)
def test_flipped_chunk_header_byte_is_a_damaged_chunk(root: Path, position: Callable[[int], int]) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    data = (root / chunk).read_bytes()
    count = len(chunk_layout.item_offsets(data, chunk)) - 1
    assert count == len(keys) > 3
    _flip(root / chunk, position(count))

    report = _verify(root)
    assert [name for name, _ in report.damaged_chunks] == [chunk]
    assert sorted(key for key, _, _ in report.missing_records) == keys
    assert {name for _, name, _ in report.missing_records} == {chunk}
    assert report.missing_chunks == []
    assert report.count_mismatches
    _assert_failed(report, chunk)


@pytest.mark.parametrize("keep", [0, 2, 100, "half", "all-but-one"])
def test_truncated_chunk_is_a_damaged_chunk(root: Path, keep: int | str) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    data = (root / chunk).read_bytes()
    length = {"half": len(data) // 2, "all-but-one": len(data) - 1}.get(keep, keep)  # type: ignore[call-overload]
    (root / chunk).write_bytes(data[:length])

    report = _verify(root)
    assert report.damaged_chunks, report.summary()
    assert {name for name, _ in report.damaged_chunks} == {chunk}
    assert any(f"{length} bytes" in problem for _, problem in report.damaged_chunks)
    assert sorted(key for key, _, _ in report.missing_records) == keys
    assert report.missing_chunks == []
    split = _split_of(root, chunk)
    assert [mismatch[0] for mismatch in report.count_mismatches] == [split]
    _assert_failed(report, chunk)


def test_deleted_chunk_is_a_missing_chunk(root: Path) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    split = _split_of(root, chunk)
    store = litstore.open(root)
    committed = store.version.counts[split]
    (root / chunk).unlink()

    report = _verify(root)
    assert report.missing_chunks == [chunk]
    assert sorted(key for key, _, _ in report.missing_records) == keys
    assert {name for _, name, _ in report.missing_records} == {chunk}
    assert report.damaged_chunks == report.corrupt_records == []
    assert report.count_mismatches == [(split, committed, committed - len(keys))]
    assert report.records_checked == len(store) - len(keys)
    assert not report.fingerprint_ok
    _assert_failed(report, chunk, repr(report.missing_records[0][0]))


# -- damaged litdata index files ----------------------------------------------------


@pytest.mark.parametrize(("field", "found"), [("chunk_bytes", "{size} bytes"), ("chunk_size", "{items} items")])
def test_index_entry_that_disagrees_with_its_chunk(root: Path, field: str, found: str) -> None:
    chunk = _chunk_of(root)
    size, items = (root / chunk).stat().st_size, len(_chunk_keys(root, chunk))

    def change(entries: list[dict[str, Any]]) -> None:
        next(entry for entry in entries if entry["filename"] == chunk)[field] += 1

    _edit_index(root, _split_of(root, chunk), change)
    report = _verify(root)
    assert len(report.damaged_chunks) == 1
    name, problem = report.damaged_chunks[0]
    assert name == chunk
    assert found.format(size=size, items=items) in problem
    _assert_failed(report, chunk)


def test_chunk_dropped_from_its_index(root: Path) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    _edit_index(
        root,
        _split_of(root, chunk),
        lambda entries: entries.remove(next(entry for entry in entries if entry["filename"] == chunk)),
    )
    report = _verify(root)
    assert sorted(key for key, _, _ in report.missing_records) == keys
    assert {name for _, name, _ in report.missing_records} == {chunk}
    _assert_failed(report, chunk)


def test_chunk_listed_under_the_wrong_split(root: Path) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    split = _split_of(root, chunk)
    other = next(name for name in SPLITS.names if name != split)
    moved: list[dict[str, Any]] = []

    def take(entries: list[dict[str, Any]]) -> None:
        moved.append(next(entry for entry in entries if entry["filename"] == chunk))
        entries.remove(moved[0])

    _edit_index(root, split, take)
    _edit_index(root, other, lambda entries: entries.append(moved[0]))
    report = _verify(root)
    assert sorted(record[0] for record in report.corrupt_records) == keys
    assert {(record[1], record[3]) for record in report.corrupt_records} == {(chunk, "split")}
    assert sorted(mismatch[0] for mismatch in report.count_mismatches) == sorted([split, other])
    _assert_failed(report, chunk)


def _damaged_metadata_is_named(root: Path, path: str) -> None:
    """``verify`` either reports the damaged file or raises a litstore error naming it, never a bare crash."""
    try:
        report = _verify(root)
    except litstore.LitstoreError as error:
        assert path in str(error), f"{path} not named in: {error}"
    else:
        _assert_failed(report, path)


@pytest.mark.parametrize("content", [None, b"", b"{not json", b"{}"], ids=["deleted", "empty", "garbage", "no-chunks"])
def test_damaged_index_file_is_named(root: Path, content: bytes | None) -> None:
    path = _index_path(root, "val")
    if content is None:
        (root / path).unlink()
    else:
        (root / path).write_bytes(content)
    _damaged_metadata_is_named(root, path)


@pytest.mark.parametrize("content", [None, b"", b"garbage, not parquet"], ids=["deleted", "empty", "garbage"])
def test_damaged_manifest_delta_is_named(root: Path, content: bytes | None) -> None:
    path = _delta_path(root, 2)
    if content is None:
        (root / path).unlink()
    else:
        (root / path).write_bytes(content)
    _damaged_metadata_is_named(root, path)


# -- damaged manifest --------------------------------------------------------------


def test_altered_manifest_content_hash_is_reported(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    wrong = bytes(byte ^ 0xFF for byte in target["content_hash"])
    _rewrite_delta(root, LATEST, _edit_row(key, content_hash=wrong))
    assert [row["content_hash"] for row in _rows(root) if row["key"] == key] == [wrong]

    report = _verify(root)
    assert report.corrupt_records == [(key, chunk, row, "content")]
    assert report.missing_records == report.unlisted_records == report.damaged_chunks == []
    assert report.data_fingerprint == report.fingerprint != report.manifest_fingerprint
    _assert_failed(report, repr(key), chunk)


def test_altered_manifest_key_is_reported(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    _rewrite_delta(root, LATEST, _edit_row(key, key="renamed"))

    report = _verify(root)
    # The stored key differs (the key hash is derived from the manifest's key: it follows it).
    assert report.corrupt_records == [("renamed", chunk, row, "key")]
    assert not report.fingerprint_ok
    _assert_failed(report, "'renamed'", chunk)
    original_keys = [row["key"] for row in _rows(root)]
    original_keys[original_keys.index("renamed")] = key
    with_expected = _verify(root, expected_keys=original_keys)
    assert with_expected.missing_keys == [key]
    assert with_expected.unexpected_keys == ["renamed"]


def test_altered_manifest_split_is_reported(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    other_split = next(name for name in SPLITS.names if name != target["split"])
    _rewrite_delta(root, LATEST, _edit_row(key, split=other_split))

    report = _verify(root)
    assert report.corrupt_records == [(key, chunk, row, "split")]
    _assert_failed(report, repr(key), chunk)


def test_altered_manifest_chunk_is_reported(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    elsewhere = chunk.rsplit("-", 1)[0] + "-987654.bin"  # a chunk name of the layout, but no such chunk
    _rewrite_delta(root, LATEST, _edit_row(key, chunk=elsewhere))

    report = _verify(root)
    assert report.missing_records == [(key, elsewhere, row)]
    assert report.unlisted_records == [(key, chunk, row)]
    _assert_failed(report, repr(key), elsewhere, chunk)


@pytest.mark.parametrize("outside", ["/etc/passwd", "../outside.bin", "fragments/../../x.bin", "litstore.json"])
def test_manifest_naming_a_file_outside_the_layout_is_refused(root: Path, outside: str) -> None:
    """Every reader of the manifest refuses the row; a lookup (format 3 and later) reads the key runs instead,
    which name the record's real chunk, and never opens the planted name."""
    target = _pick(root)
    expected = litstore.open(root)[target["key"]]
    _rewrite_delta(root, LATEST, _edit_row(target["key"], chunk=outside))
    with pytest.raises(litstore.IntegrityError, match="is not a chunk path"):
        litstore.open(root).manifest()
    with pytest.raises(litstore.IntegrityError, match="is not a chunk path"):
        _verify(root)
    assert litstore.open(root).config.writes_key_runs
    assert litstore.open(root)[target["key"]] == expected


@pytest.mark.parametrize("outside", ["/etc/passwd", "../outside.bin"])
def test_a_format_2_lookup_refuses_a_manifest_naming_a_file_outside(tmp_path: Path, outside: str) -> None:
    """At format 2 a lookup reads the manifest: it refuses the planted row."""
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=4096, format_version=2)
    for prefix in BATCHES:
        store.append(_records(prefix, PER_BATCH))
    target = _pick(root)
    _rewrite_delta(root, LATEST, _edit_row(target["key"], chunk=outside))
    with pytest.raises(litstore.IntegrityError, match="is not a chunk path"):
        litstore.open(root)[target["key"]]
    with pytest.raises(litstore.IntegrityError, match="is not a chunk path"):
        _verify(root)


def test_a_planted_key_hash_column_that_lies_is_never_read(root: Path) -> None:
    """A delta given a key_hash column (format 2 files hold none) with one row's hash not its key's:
    readers derive key hashes from the keys, so the record is still found by its key and verify passes."""
    target = _pick(root)
    key = target["key"]
    path = root / _delta_path(root, LATEST)
    table = pq.read_table(path)
    assert "key_hash" not in table.column_names
    hashes = hashing.key_hashes(table.column("key").to_pylist())
    hashes[table.column("key").to_pylist().index(key)] ^= 1
    pq.write_table(table.add_column(1, "key_hash", pa.array(hashes, pa.uint64())), path)
    reopened = litstore.open(root)
    assert reopened[key]["id"] == key
    assert reopened.get_many([key])[0]["id"] == key
    assert (
        reopened.manifest().column("key_hash").to_pylist()
        == hashing.key_hashes(reopened.manifest().column("key").to_pylist()).tolist()
    )
    assert _verify(root).ok


def test_removed_manifest_row_is_an_unlisted_record(root: Path) -> None:
    target = _pick(root)
    key, chunk, row = target["key"], target["chunk"], target["row"]
    _rewrite_delta(root, LATEST, lambda rows: [r for r in rows if r["key"] != key])

    report = _verify(root)
    assert report.unlisted_records == [(key, chunk, row)]
    assert report.corrupt_records == report.missing_records == []
    assert report.data_fingerprint == report.fingerprint != report.manifest_fingerprint
    _assert_failed(report, repr(key), chunk)


# -- expected keys ---------------------------------------------------------------


def test_expected_keys_missing_and_unexpected(root: Path) -> None:
    store = litstore.open(root)
    keys = store.keys()
    assert store.verify(expected_keys=keys).ok
    assert store.verify(expected_keys=iter(reversed(keys))).ok
    dropped = keys[len(keys) // 2]
    expected = [*(key for key in keys if key != dropped), "not-stored"]

    report = store.verify(expected_keys=expected)
    assert report.missing_keys == ["not-stored"]
    assert report.unexpected_keys == [dropped]
    assert report.corrupt_records == report.missing_records == report.duplicate_keys == []
    assert report.fingerprint_ok
    _assert_failed(report, "'not-stored'", repr(dropped))


def test_expected_key_of_the_wrong_type_is_missing(root: Path) -> None:
    store = litstore.open(root)
    report = store.verify(expected_keys=[*store.keys(), 7])
    assert report.missing_keys == [7]
    assert report.unexpected_keys == []
    _assert_failed(report, "7")


def test_expected_keys_empty_means_every_key_is_unexpected(root: Path) -> None:
    store = litstore.open(root)
    report = store.verify(expected_keys=[])
    assert report.missing_keys == []
    assert report.unexpected_keys == sorted(store.keys())
    _assert_failed(report)


def test_int_keyed_store(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="n", key_type=int, splits=SPLITS, chunk_bytes=2048)
    store.append([{"n": n, "square": n * n, "pad": bytes(n % 40)} for n in range(-60, 140)])
    keys = store.keys()
    assert store.verify(expected_keys=keys).ok
    report = store.verify(expected_keys=[*keys[1:], True, "3", 2**63, 1000])
    assert report.unexpected_keys == [keys[0]]
    assert sorted(map(repr, report.missing_keys)) == sorted(map(repr, [True, "3", 2**63, 1000]))
    _assert_failed(report, "1000", "'3'")

    target = next(row for row in store.manifest().to_pylist() if row["row"] > 0)
    root = Path(store.root)
    _, end = _payload_span(root, target["chunk"], target["row"])
    _flip(root / target["chunk"], end - 1)  # the last byte: part of the "square" value
    damaged = litstore.open(root).verify()
    assert [record[:3] for record in damaged.corrupt_records] == [(target["key"], target["chunk"], target["row"])]
    _assert_failed(damaged, target["chunk"])


# -- commit record ---------------------------------------------------------------


def test_fingerprint_mismatch(root: Path) -> None:
    path = root / layout.version_record(LATEST)
    record = json.loads(path.read_text())
    original = record["fingerprint"]
    forged = f"{int(original, 16) ^ 1:032x}"
    record["fingerprint"] = forged
    path.write_text(json.dumps(record))

    report = _verify(root)
    assert not report.fingerprint_ok
    assert report.fingerprint == forged
    assert report.manifest_fingerprint == report.data_fingerprint == original
    assert report.corrupt_records == report.missing_records == report.damaged_chunks == []
    assert report.count_mismatches == [] and report.duplicate_keys == []
    summary = _assert_failed(report, forged, original)
    assert "fingerprint mismatch" in summary


def test_count_mismatch_in_commit_record(root: Path) -> None:
    path = root / layout.version_record(LATEST)
    record = json.loads(path.read_text())
    record["counts"]["val"] += 1
    path.write_text(json.dumps(record))

    report = _verify(root)
    found = record["counts"]["val"] - 1
    assert report.count_mismatches == [("val", found + 1, found)]
    _assert_failed(report, "'val'")


# -- duplicates --------------------------------------------------------------------


def test_key_twice_in_a_manifest_delta(root: Path) -> None:
    target = _pick(root)
    key = target["key"]
    _rewrite_delta(root, LATEST, lambda rows: [*rows, dict(next(r for r in rows if r["key"] == key))])
    assert litstore.open(root).keys().count(key) == 2

    report = _verify(root)
    assert report.duplicate_keys == [key]
    assert report.data_fingerprint == report.fingerprint != report.manifest_fingerprint
    _assert_failed(report, repr(key))


def test_key_twice_in_a_delta_at_two_locations(root: Path) -> None:
    target = _pick(root)
    key = target["key"]
    neighbour = next(row for row in _rows(root) if row["chunk"] == target["chunk"] and row["row"] == target["row"] + 1)

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for row in rows:
            if row["key"] == neighbour["key"]:
                row["key"] = key
        return rows

    _rewrite_delta(root, LATEST, change)
    report = _verify(root)
    assert report.duplicate_keys == [key]
    assert report.corrupt_records == [(key, neighbour["chunk"], neighbour["row"], "key")]
    _assert_failed(report, repr(key))


def test_chunk_listed_twice_in_an_index(root: Path) -> None:
    chunk = _chunk_of(root)
    keys = _chunk_keys(root, chunk)
    split = _split_of(root, chunk)
    _edit_index(root, split, lambda entries: entries.append(dict(next(e for e in entries if e["filename"] == chunk))))

    report = _verify(root)
    assert report.duplicate_keys == keys
    committed = litstore.open(root).version.counts[split]
    assert report.count_mismatches == [(split, committed, committed + len(keys))]
    _assert_failed(report, repr(keys[0]))


# -- progress ----------------------------------------------------------------------


def test_no_progress_prints_nothing(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = litstore.open(root)
    capsys.readouterr()
    assert store.verify().ok
    assert store.verify(progress=False).ok
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""


def test_progress_shows_a_bar_on_stderr(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = litstore.open(root)
    chunks = sum(len(split_chunks) for split_chunks in store.chunks().values())
    capsys.readouterr()
    assert store.verify(progress=True).ok
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "verifying" in captured.err
    assert f"{chunks}/{chunks}" in captured.err
    assert "100%" in captured.err


def test_a_fresh_process_verifies_without_importing_pandas(tmp_path: Path) -> None:
    """pyarrow's conversions from Python import pandas (a third of a second); a sound store's verify makes none."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096)
    store.append(_records("a", 300))
    store.upsert(_records("a", 5) + _records("b", 3))
    store.delete(["a007"])
    code = (
        "import sys, litstore\n"
        "report = litstore.open(sys.argv[1]).verify()\n"
        "print(report.ok, report.records_checked, 'pandas' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", str(len(store)), "False"], result.stdout


def test_a_delta_that_says_a_key_the_parent_held_was_added_is_reported(
    make_store: Callable[..., litstore.Store],
) -> None:
    """``added`` means the parent did not hold the key: verify keeps no added key as one that hides older rows (a
    store built by appends then holds none), as a checkpoint written on the chain would not, so the parent's row
    of a key a lying delta calls added stays listed, and the key is reported twice."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=4096)
    store.append(_records("a", PER_BATCH))
    key = _records("a", 1)[0]["id"]
    store.upsert([{**_records("a", 1)[0], "value": -1}])
    root = Path(store.root)
    assert litstore.open(root).verify().ok

    def added(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        (row,) = [row for row in rows if row["key"] == key]
        assert row["change"] == "replaced"
        row["change"] = "added"
        return rows

    _rewrite_delta(root, 2, added)
    report = _verify(root)
    assert report.duplicate_keys == [key]
    assert report.manifest_fingerprint != report.fingerprint
    _assert_failed(report, repr(key))
