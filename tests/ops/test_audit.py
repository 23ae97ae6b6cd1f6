"""``store.audit()``: identical records under different keys, and identical records across splits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import litstore


def _content(group: int) -> dict[str, object]:
    return {"label": group % 2, "pixels": np.full((2, 2), group, dtype=np.uint8), "text": f"sample {group}"}


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """60 keys: groups 0..9 hold 3 keys each with the same content, 30 more keys hold unique content."""
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=1024)
    records = [{"id": f"dup-{group}-{copy}", **_content(group)} for group in range(10) for copy in range(3)]
    records += [{"id": f"unique-{n}", **_content(100 + n)} for n in range(30)]
    store.append(records)
    return store


def test_finds_identical_records_under_different_keys(store: litstore.Store) -> None:
    contents = store.manifest().column("content_hash").to_pylist()
    assert len(set(contents)) == 60  # the content hash covers the key: the manifest alone cannot find them
    split_of = dict(zip(store.manifest().column("key").to_pylist(), store.manifest().column("split").to_pylist()))
    expected_across = [group for group in range(10) if len({split_of[f"dup-{group}-{c}"] for c in range(3)}) > 1]
    assert expected_across  # with 3 keys a group and a 50/50 split some groups straddle splits

    report = store.audit(examples=100)
    assert not report.ok
    assert report.records_checked == 60
    assert (report.duplicate_group_count, report.duplicate_record_count) == (10, 30)
    assert sorted(report.duplicate_groups) == [tuple(f"dup-{g}-{c}" for c in range(3)) for g in range(10)]
    assert report.cross_split_group_count == len(expected_across)
    assert report.cross_split_record_count == 3 * len(expected_across)
    for group in report.cross_split_groups:
        assert len(group) > 1
        for split, keys in group.items():
            assert all(split_of[key] == split for key in keys)
    found = sorted(tuple(sorted(k for keys in group.values() for k in keys)) for group in report.cross_split_groups)
    assert found == [tuple(f"dup-{g}-{c}" for c in range(3)) for g in expected_across]


def test_examples_are_bounded_and_the_summary_names_them(store: litstore.Store) -> None:
    report = store.audit(examples=2)
    assert len(report.duplicate_groups) == 2 and report.duplicate_group_count == 10
    assert len(report.cross_split_groups) == min(2, report.cross_split_group_count)
    summary = report.summary()
    assert "10 groups of identical records under different keys (30 records)" in summary
    assert summary.count("  duplicates: ") == 2
    assert repr(report).startswith("<AuditReport version 1: 10 duplicate groups, ")
    assert "\n" not in repr(report)


def test_values_that_differ_in_dtype_or_shape_only_are_not_duplicates(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id")
    data = np.arange(4, dtype=np.uint8)
    store.append(
        [
            {"id": "a", "x": data},
            {"id": "b", "x": data.view(np.int8)},
            {"id": "c", "x": data.reshape(2, 2)},
            {"id": "d", "x": data.copy()},
            {"id": "e", "x": 1},
            {"id": "f", "x": 1.0},
            {"id": "g", "x": True},
        ]
    )
    report = store.audit()
    assert report.duplicate_groups == (("a", "d"),) and report.cross_split_group_count == 0


def test_an_audit_of_unique_records_is_ok(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", key_type=int)
    assert store.audit().ok and store.audit().records_checked == 0  # the empty version 0
    store.append([{"id": n, "value": n} for n in range(100)])
    report = store.audit()
    assert report.ok and report.records_checked == 100
    assert report.summary() == "version 1: 100 records audited: OK, no duplicate content"
    assert repr(report) == "<AuditReport version 1: OK, 100 records audited>"


def test_audits_the_version_asked_for(store: litstore.Store) -> None:
    store.upsert(
        [{"id": f"dup-{group}-{copy}", **_content(200 + 3 * group + copy)} for group in range(10) for copy in range(3)]
    )
    assert store.audit().ok
    assert store.audit(1).duplicate_group_count == 10
    assert store.at(1).audit().duplicate_group_count == 10
    with pytest.raises(litstore.VersionNotFoundError):
        store.audit(9)


def test_a_damaged_record_is_reported_not_audited(store: litstore.Store) -> None:
    chunk = sorted((Path(store.root) / "fragments").rglob("*.bin"))[0]
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="do not match their committed content hash"):
        litstore.open(store.root).audit()


def test_progress_is_shown_only_when_asked(store: litstore.Store, capsys: pytest.CaptureFixture[str]) -> None:
    store.audit()
    assert capsys.readouterr().err == ""
    store.audit(progress=True)
    assert "auditing records" in capsys.readouterr().err


def test_groups_by_split_use_the_split_of_each_key(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5))
    store.append([{"id": f"k{n}", "x": 0} for n in range(20)])
    split_of = dict(zip(store.manifest().column("key").to_pylist(), store.manifest().column("split").to_pylist()))
    expected: dict[str, list[str]] = defaultdict(list)
    for key in sorted(split_of):
        expected[split_of[key]].append(key)
    report = store.audit()
    assert report.duplicate_groups == (tuple(sorted(split_of)),)
    assert report.cross_split_groups == ({split: tuple(keys) for split, keys in sorted(expected.items())},)


def test_dead_rows_of_a_store_with_holes_are_not_audited(make_store: Callable[..., litstore.Store]) -> None:
    """Format 4: a deleted record and a record's superseded revision stay in their chunks as dead rows; an audit
    that read them would find them identical to live records."""
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=1024)
    store.append([{"id": f"k{n}", **_content(n)} for n in range(40)])
    store.append([{"id": "twin", **_content(3)}])  # the same content as k3
    store.delete(["twin"])
    store.upsert([{"id": f"k{n}", **_content(200 + n)} for n in range(0, 40, 4)])
    store.append([{"id": "copy", **_content(8)}])  # the old content of k8, which the upsert superseded
    assert store.head().reader.deletions  # the twin's row and the upserted keys' old rows are dead, not gone
    report = store.audit()
    assert report.ok, report.summary()
    assert report.records_checked == len(store) == 41

    store.upsert([{"id": "copy", **_content(204)}])  # the content of k4 as it is now
    found = store.audit()
    assert found.records_checked == 41
    assert found.duplicate_groups == (("copy", "k4"),)


@pytest.mark.parametrize("format_version", [2, 5])
def test_splits_of_every_format_are_those_of_the_manifest(tmp_path: Path, format_version: int) -> None:
    """A format-2 version is walked through its manifest's key index, a later one chunk by chunk: the splits an
    audit reports are the manifest's in both."""
    store = litstore.Store.create(
        tmp_path / "s", key="id", splits=litstore.HashSplit(a=0.3, b=0.3, c=0.4), chunk_bytes=512,
        format_version=format_version,
    )  # fmt: skip
    store.append([{"id": f"k{n}", **_content(n % 7)} for n in range(60)])
    split_of = dict(zip(*(store.manifest().column(name).to_pylist() for name in ("key", "split")), strict=True))
    report = litstore.open(store.root).audit(examples=7)
    assert report.duplicate_group_count == 7 and report.duplicate_record_count == 60
    for group in report.cross_split_groups:
        assert all(split_of[key] == split for split, keys in group.items() for key in keys)
    assert report.cross_split_group_count == len(report.cross_split_groups) == 7
