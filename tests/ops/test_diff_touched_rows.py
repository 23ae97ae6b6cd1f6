"""``store.diff`` from the keys the commits between two versions touched equals the full join of their manifests.

:func:`litstore.ops.diff.touched_rows` reads only the deltas between the two
versions and looks the keys they touched up in the older one (its manifest chain in
a format-2 store, its key runs in a format-3 or format-4 one: every test runs on each); the
reference here is computed in Python from the two versions' whole manifests
(``snapshot.manifest()``). Every example gets its own directory: function-scoped
fixtures are not reset between Hypothesis examples.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.format import hashing, keyrun
from litstore.format.manifest import OLD_CONTENT_HASH
from litstore.ops.diff import Diff, _paired, touched_rows

Expected = dict[str, list[tuple[Any, str]]]


@pytest.fixture(params=[2, 3, 4], ids=["format2", "format3", "format4"])
def format_version(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def make_store(tmp_path: Path, format_version: int) -> Callable[..., litstore.Store]:
    """Stores of the format ``format_version`` names, each in a fresh directory."""
    counter = iter(range(1_000_000))

    def make(**options: Any) -> litstore.Store:
        return litstore.Store.create(tmp_path / f"store-{next(counter)}", format_version=format_version, **options)

    return make


def expected_diff(store: litstore.Store, old: int, new: int) -> Expected:
    """The diff of ``old`` -> ``new`` from their whole manifests, computed in Python."""

    def rows(number: int) -> dict[Any, tuple[bytes, str]]:
        table = store.at(number).manifest()
        columns = [table.column(name).to_pylist() for name in ("key", "content_hash", "split")]
        return {key: (content, split) for key, content, split in zip(*columns, strict=True)}

    before, after = rows(old), rows(new)
    return {
        "added": sorted((key, after[key][1]) for key in after.keys() - before.keys()),
        "removed": sorted((key, before[key][1]) for key in before.keys() - after.keys()),
        "changed": sorted(
            (key, after[key][1]) for key in after.keys() & before.keys() if after[key][0] != before[key][0]
        ),
    }


def found(diff: Diff) -> Expected:
    return {
        kind: list(zip(table.column("key").to_pylist(), table.column("split").to_pylist(), strict=True))
        for kind, table in (("added", diff.added), ("removed", diff.removed), ("changed", diff.changed))
    }


def fast_diff(store: litstore.Store, old: int, new: int) -> Diff | None:
    """The diff from touched keys alone, or None where the log does not allow it."""
    old_version, new_version = store.at(old).version, store.at(new).version
    rows = touched_rows(store.storage, store.config, old_version, new_version)
    return None if rows is None else Diff.between(old, new, *rows)


def check_every_pair(store: litstore.Store, numbers: list[int]) -> int:
    """Check ``store.diff`` (and the fast path alone) of every pair of ``numbers``, both ways; how many went fast."""
    fast = 0
    for old in numbers:
        for new in numbers:
            expected = expected_diff(store, old, new)
            assert found(litstore.open(store.root).diff(old, new)) == expected, (old, new)
            alone = fast_diff(store, old, new)
            if alone is not None:
                fast += 1
                assert found(alone) == expected, (old, new)
    return fast


def _record(key: str, value: int) -> dict[str, Any]:
    return {"id": key, "value": value, "text": f"t{value % 3}"}


# One step of a history: (operation, which keys by position among the candidates, a value).
steps = st.lists(
    st.tuples(
        st.sampled_from(("append", "upsert", "same", "delete", "readd", "compact", "add_fields", "gc")),
        st.lists(st.integers(0, 40), min_size=1, max_size=8),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=7,
)


def build(
    root: Path, plan: list[tuple[str, list[int], int]], chunk_bytes: int, interval: int, format_version: int = 2
) -> litstore.Store:
    """A store whose history follows ``plan``; every step that changes nothing commits nothing."""
    store = litstore.Store.create(
        root,
        key="id",
        splits=litstore.HashSplit(train=0.5, val=0.5),
        chunk_bytes=chunk_bytes,
        checkpoint_interval=interval,
        format_version=format_version,
    )
    live: dict[str, int] = {}
    gone: dict[str, int] = {}
    counter = 0
    for operation, picks, value in plan:
        keys = sorted(live)
        chosen = sorted({keys[pick % len(keys)] for pick in picks}) if keys else []
        if operation == "append" or not keys:
            new = {f"k{counter + i:03d}": value for i in range(len(picks))}
            counter += len(picks)
            store.append([_record(key, number) for key, number in new.items()])
            live.update(new)
        elif operation == "upsert":
            # New content for the chosen keys, the same content for one, and a new key.
            changed = {key: live[key] + 1 + value for key in chosen[1:]}
            fresh = {f"k{counter:03d}": value}
            counter += 1
            store.upsert(
                [_record(key, number) for key, number in {**changed, chosen[0]: live[chosen[0]], **fresh}.items()]
            )
            live.update(changed | fresh)
        elif operation == "same":
            store.upsert([_record(key, live[key]) for key in chosen])  # unchanged content: no version
        elif operation == "delete":
            store.delete(chosen)
            gone.update((key, live.pop(key)) for key in chosen)
        elif operation == "readd" and gone:
            # Deleted keys come back, with their old content (value 0) or new content.
            back = {key: number + value for key, number in sorted(gone.items())[: len(picks)]}
            store.append([_record(key, number) for key, number in back.items()])
            live.update(back)
            for key in back:
                del gone[key]
        elif operation == "compact":
            store.compact(target_chunk_bytes=1 << 20)
        elif operation == "add_fields" and "text" not in store.fields:
            store.add_fields({"text": str})
        elif operation == "gc":
            store.gc(dry_run=False, keep_last=2 + value, grace=timedelta(0))
    return store


def live_numbers(store: litstore.Store) -> list[int]:
    return [version.number for version in store.versions()]


@pytest.mark.integration  # 20 stores of many versions: seconds, not in the fast loop
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps,
    chunk_bytes=st.sampled_from((128, 1024, 1 << 20)),
    interval=st.sampled_from((1, 3, 64)),
    format_version=st.sampled_from((2, 3)),
)
def test_diff_of_every_pair_of_versions_equals_the_full_join(
    plan: list[tuple[str, list[int], int]], chunk_bytes: int, interval: int, format_version: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = build(Path(directory) / "store", plan, chunk_bytes, interval, format_version)
        check_every_pair(store, live_numbers(store))
        numbers = live_numbers(store)
        old, new = numbers[0], numbers[-1]
        reference = Diff.between(old, new, store.at(old).manifest(), store.at(new).manifest())
        reference = reference.with_fields(store.at(old), store.at(new))
        assert store.diff(old, new, fields=True).changed.equals(reference.changed)


def test_the_fast_path_is_taken_through_compact_upsert_delete_and_readd(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=256)
    store.append([_record(f"k{i:02d}", i) for i in range(40)])  # v1
    store.compact(target_chunk_bytes=1 << 20)  # v2: same content, new chunks
    store.upsert([_record("k01", 1), _record("k02", -2)])  # v3: k01 unchanged, k02 changed
    store.delete(["k03", "k04"])  # v4
    store.append([_record("k03", 3), _record("k04", -4)])  # v5: k03 as it was, k04 with other content
    assert store.version.number == 5
    assert found(store.diff(1, 2)) == {"added": [], "removed": [], "changed": []}
    forward = found(store.diff(1, 5))
    assert [key for key, _ in forward["changed"]] == ["k02", "k04"] and not forward["added"] + forward["removed"]
    backward = found(store.diff(5, 1))
    assert [key for key, _ in backward["changed"]] == ["k02", "k04"]
    assert [key for key, _ in found(store.diff(3, 4))["removed"]] == ["k03", "k04"]
    assert [key for key, _ in found(store.diff(4, 3))["added"]] == ["k03", "k04"]
    for old, new in ((1, 2), (2, 1), (1, 5), (5, 1), (3, 4), (4, 3), (2, 5)):
        assert fast_diff(store, old, new) is not None, (old, new)
    check_every_pair(store, live_numbers(store))


def test_a_version_that_only_declared_fields_keeps_the_fast_path(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=256)
    store.append([_record(f"k{i:02d}", i) for i in range(20)])
    store.add_fields({"text": str})  # a checkpoint, no delta
    store.upsert([_record("k05", -5)])
    assert fast_diff(store, 1, 3) is not None
    assert found(store.diff(1, 3)) == expected_diff(store, 1, 3)


def test_a_missing_delta_falls_back_to_the_whole_manifests(make_store: Callable[..., litstore.Store]) -> None:
    # Version 2 has a checkpoint, so its delta is not needed to compose any version;
    # without it the log cannot say what version 2 touched.
    store = make_store(key="id", chunk_bytes=256, checkpoint_interval=2)
    store.append([_record(f"k{i:02d}", i) for i in range(20)])
    store.upsert([_record("k05", -5)])
    store.delete(["k06"])
    version = store.at(2).version
    assert version.checkpoint is not None and version.manifest is not None
    (Path(store.root) / version.manifest).unlink()
    assert fast_diff(store, 1, 3) is None
    assert found(litstore.open(store.root).diff(1, 3)) == expected_diff(store, 1, 3)
    assert found(litstore.open(store.root).diff(3, 1)) == expected_diff(store, 3, 1)


def test_versions_expired_between_fall_back_to_the_whole_manifests(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", chunk_bytes=256)
    store.append([_record(f"k{i:02d}", i) for i in range(20)])
    store.tag("start", 1)
    store.upsert([_record("k05", -5)])
    store.delete(["k06"])
    store.gc(dry_run=False, keep_last=1, grace=timedelta(0))  # expires version 2
    assert live_numbers(store) == [1, 3]
    assert fast_diff(store, 1, 3) is None
    assert found(store.diff(1, 3)) == expected_diff(store, 1, 3)


def test_int_keys(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", key_type=int, chunk_bytes=128)
    store.append([{"id": i, "value": i} for i in range(30)])
    store.upsert([{"id": 3, "value": -3}, {"id": 100, "value": 100}])
    store.delete([7, 8])
    assert check_every_pair(store, live_numbers(store)) == 16


def test_deltas_in_small_row_groups_give_the_same_diff(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    # Row groups whose rows are all "moved" are skipped by their statistics; rows of one
    # delta then come from several row groups, each with its own dictionaries.
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=1 << 20)
    store.append([_record(f"k{i:03d}", i) for i in range(200)])
    store.upsert([_record("k010", -10), _record("k150", -150)])  # (format 2, 3) rewrites the one chunk: 198 moved
    if format_version >= 4:  # the upsert marked two rows dead; a compaction moves the other 198
        assert store.compact().operation == "compact"
    store.delete(["k020", "k199"])
    store.append([_record("k020", 20)])
    root = Path(store.root)
    skippable = 0
    for version in store.versions()[1:]:
        assert version.manifest is not None
        path = root / version.manifest
        pq.write_table(pq.read_table(path), path, compression="zstd", row_group_size=16)
        metadata = pq.ParquetFile(path).metadata
        for group in range(metadata.num_row_groups):
            statistics = metadata.row_group(group).column(metadata.schema.names.index("change")).statistics
            skippable += statistics.min == statistics.max == "moved"
    assert skippable >= (10 if format_version < 4 else 5)  # (format 4: the compaction moves a split's rows)
    assert fast_diff(store, 1, 4) is not None and fast_diff(store, 4, 1) is not None
    check_every_pair(store, live_numbers(store))


def test_a_damaged_manifest_file_raises_integrity_error(
    make_store: Callable[..., litstore.Store], format_version: int
) -> None:
    # One damaged delta between the versions, then (format 2) one in the older version's
    # chain: the concurrent reads end and the error names the file. A format-3 diff
    # reads no file of the older version's chain.
    store = make_store(key="id", chunk_bytes=256)
    store.append([_record(f"k{i:02d}", i) for i in range(20)])
    store.upsert([_record("k05", -5)])
    store.delete(["k06"])
    for number in (2, 1) if format_version == 2 else (3, 2):
        manifest = store.at(number).version.manifest
        assert manifest is not None
        path = Path(store.root) / manifest
        intact = path.read_bytes()
        path.write_bytes(b"not parquet")
        with pytest.raises(litstore.IntegrityError, match=manifest):
            litstore.open(store.root).diff(1, 3)
        path.write_bytes(intact)


def _edit_delta(store: litstore.Store, number: int, column: str, edit: Callable[[pa.ChunkedArray], pa.Array]) -> str:
    """Rewrite column ``column`` of version ``number``'s delta file with ``edit`` of it; the delta's path."""
    manifest = store.at(number).version.manifest
    assert manifest is not None
    path = Path(store.root) / manifest
    table = pq.read_table(path)
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, edit(table.column(column))), path)
    return manifest


def test_a_replaced_row_relabelled_moved_falls_back_to_the_full_join(
    make_store: Callable[..., litstore.Store],
) -> None:
    # The fast path trusts that a moved row keeps its parent's content: relabelled, the
    # replaced key would vanish from the touched keys, and the diff would say nothing changed.
    store = make_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5))
    store.append([_record(key, 1) for key in "abc"])
    store.upsert([_record("a", 999)])
    assert fast_diff(store, 1, 2) is not None
    _edit_delta(store, 2, "change", lambda change: pc.replace_substring(change, "replaced", "moved"))
    _assert_falls_back_naming_a(store)


def _format4_upserted(tmp_path: Path) -> litstore.Store:
    """A format-4 store of a, b, c, d (version 1) whose version 2 replaced a and left b unchanged."""
    store = litstore.Store.create(
        tmp_path / "s", key="id", splits=litstore.HashSplit(train=0.5, val=0.5), format_version=4
    )
    store.append([_record(key, 1) for key in "abcd"])
    store.upsert([_record("a", 2), _record("b", 1)])
    return store


@pytest.mark.parametrize("planted", ["new", "other"])
def test_a_superseded_content_hash_that_lies_falls_back_to_the_full_join(tmp_path: Path, planted: str) -> None:
    # The delta says what version 1 held of a: planted as a's new content, the fast path would
    # call a unchanged; as c's, it would stand for another record. The fingerprint sums disagree.
    store = _format4_upserted(tmp_path)
    assert fast_diff(store, 1, 2) is not None
    manifest = store.at(1).manifest()
    source = "a" if planted == "new" else "c"
    table = store.at(2 if planted == "new" else 1).manifest()
    content = table.filter(pc.equal(table.column("key"), source)).column("content_hash")[0].as_py()
    assert content != manifest.filter(pc.equal(manifest.column("key"), "a")).column("content_hash")[0].as_py()
    _edit_delta(store, 2, OLD_CONTENT_HASH, lambda old: pc.if_else(pc.is_valid(old), pa.scalar(content, old.type), old))
    _assert_falls_back_naming_a(store)


def test_a_superseded_content_hash_of_another_size_raises_integrity_error(tmp_path: Path) -> None:
    store = _format4_upserted(tmp_path)
    # Read as it is, the column's 5-byte values would misalign every hash after the first.
    manifest = _edit_delta(store, 2, OLD_CONTENT_HASH, lambda old: pa.array([b"short"] * len(old), pa.binary()))
    for old, new in ((1, 2), (2, 1)):
        with pytest.raises(litstore.IntegrityError, match=f"{manifest}.*damaged"):
            litstore.open(store.root).diff(old, new)


def test_a_delta_whose_keys_are_null_raises_integrity_error(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    store.append([_record(key, 1) for key in "abc"])
    store.upsert([_record("a", 2), _record("d", 3)])
    manifest = _edit_delta(store, 2, "key", lambda key: pa.nulls(len(key), pa.string()))
    for old, new in ((1, 2), (2, 1)):
        with pytest.raises(litstore.IntegrityError, match=f"{manifest}.*no key"):
            litstore.open(store.root).diff(old, new)


def test_the_fingerprint_guard_passes_for_keys_of_every_kind(make_store: Callable[..., litstore.Store]) -> None:
    # The guard hashes the Arrow columns itself: it must agree with the commits' fingerprints
    # for non-ASCII text and for negative and extreme int keys, or every diff would go slow.
    text = make_store(key="id", chunk_bytes=128)
    text.append([_record(key, i) for i, key in enumerate(["é", "日本", "k\x00z", "", "🙂", "plain"])])
    text.upsert([_record("日本", -1), _record("new", 5)])
    text.delete(["🙂", ""])
    integers = make_store(key="id", key_type=int, chunk_bytes=128)
    integers.append([{"id": key, "value": key % 7} for key in (-(2**63), -1, 0, 1, 2**63 - 1, 300)])
    integers.upsert([{"id": -1, "value": 9}, {"id": 77, "value": 1}])
    integers.delete([2**63 - 1])
    for store in (text, integers):
        assert fast_diff(store, 1, 3) is not None and fast_diff(store, 3, 1) is not None
        assert check_every_pair(store, live_numbers(store)) == 16


def _rewrite_run(store: litstore.Store, number: int, edit: Callable[[np.ndarray, list[str]], None]) -> None:
    """Rewrite version ``number``'s newest key run consistently (page sums and all) after ``edit`` of its entries."""
    version = store.at(number).version
    (run,) = version.key_runs
    entries, names = store.at(number).reader.key_runs()._runs[0].everything()
    edit(entries, names)
    data = keyrun.encode(entries, names)
    assert len(data) == run.size
    (Path(store.root) / run.path).write_bytes(data)


def _entry_of(entries: np.ndarray, key: str) -> np.ndarray:
    return entries["keyprint"] == np.array(hashing.keyprint(key), dtype="V16")


def test_a_key_run_that_lies_about_a_content_hash_falls_back_to_the_full_join(tmp_path: Path) -> None:
    store = litstore.Store.create(
        tmp_path / "s", key="id", splits=litstore.HashSplit(train=0.5, val=0.5), format_version=3
    )
    store.append([_record(key, 1) for key in "abcd"])
    store.upsert([_record("a", 2), _record("b", 1)])  # b unchanged: not rewritten

    def plant(entries: np.ndarray, names: list[str]) -> None:
        entries["content"][_entry_of(entries, "a")] = entries["content"][_entry_of(entries, "c")]

    _rewrite_run(store, 1, plant)
    _assert_falls_back_naming_a(store)


def test_a_key_run_entry_naming_a_chunk_of_another_version_raises_integrity_error(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", format_version=3)
    store.append([_record(key, 1) for key in "abc"])
    store.upsert([_record("a", 2)])
    later = next(chunk.filename for chunks in store.chunks().values() for chunk in chunks)
    assert later not in {chunk.filename for chunks in store.at(1).chunks().values() for chunk in chunks}

    def misplace(entries: np.ndarray, names: list[str]) -> None:
        names[int(entries["chunk"][_entry_of(entries, "a")][0])] = later

    _rewrite_run(store, 1, misplace)
    with pytest.raises(litstore.IntegrityError, match=f"key 'a' in chunk {later}, which no split index"):
        litstore.open(store.root).diff(1, 2)


rows = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.sampled_from([b"1" * 16, b"2" * 16]), st.sampled_from(["x", "y"]))
)


def _rows_table(found: list[tuple[str, bytes, str]]) -> pa.Table:
    columns = list(zip(*found, strict=True)) or [(), (), ()]
    return pa.table(
        {
            "key": pa.array(columns[0], pa.string()),
            "content_hash": pa.array(columns[1], pa.binary(16)),
            "split": pa.array(columns[2], pa.string()),
        }
    )


@settings(max_examples=100, deadline=None)
@given(old=rows, new=rows, unique=st.booleans())
def test_the_join_is_a_full_outer_join_on_the_key(
    old: list[tuple[str, bytes, str]], new: list[tuple[str, bytes, str]], unique: bool
) -> None:
    """Keys with one row a side are matched by lookup; a key in several rows pairs each of them, as SQL does."""
    if unique:
        old, new = list({row[0]: row for row in old}.values()), list({row[0]: row for row in new}.values())
    expected: dict[str, list[tuple[str, str]]] = {"added": [], "removed": [], "changed": []}
    for key in sorted({row[0] for row in old + new}):
        before, after = [row for row in old if row[0] == key], [row for row in new if row[0] == key]
        if not before:
            expected["added"] += [(key, row[2]) for row in after]
        elif not after:
            expected["removed"] += [(key, row[2]) for row in before]
        else:
            expected["changed"] += [(key, b[2]) for a in before for b in after if a[1] != b[1]]
    expected = {kind: sorted(pairs) for kind, pairs in expected.items()}
    diff = Diff.between(1, 2, _rows_table(old), _rows_table(new))
    assert {kind: sorted(pairs) for kind, pairs in found(diff).items()} == expected
    paired = Diff(1, 2, *_paired(_rows_table(old), _rows_table(new)))  # what whole manifests go through
    assert {kind: sorted(pairs) for kind, pairs in found(paired).items()} == expected
    for table in (diff.added, diff.removed, diff.changed, paired.added, paired.removed, paired.changed):
        assert table.column("key").to_pylist() == sorted(table.column("key").to_pylist())


def test_a_deleted_rows_split_edited_after_its_commit_gives_the_committed_diff(tmp_path: Path) -> None:
    """The fingerprint does not cover splits: the per-split counts send the diff to the whole manifests."""
    store = litstore.Store.create(tmp_path / "s", key="id", splits=litstore.HashSplit(train=0.5, val=0.5))
    store.append([{"id": f"k{i:02d}", "v": i} for i in range(40)])
    version = store.delete(["k01", "k02"])
    committed = store.diff(1, 2)
    path = tmp_path / "s" / (version.manifest or "")
    rows = pq.read_table(path)
    other = pc.if_else(pc.equal(rows.column("split"), "train"), "val", "train")
    pq.write_table(rows.set_column(rows.schema.get_field_index("split"), "split", other), path)
    diff = litstore.open(tmp_path / "s").diff(1, 2)
    assert diff.removed.sort_by("key").to_pylist() == committed.removed.sort_by("key").to_pylist()


def _assert_falls_back_naming_a(store: litstore.Store) -> None:
    """Neither direction of the diff of versions 1 and 2 takes the fast path, and both say what the whole
    manifests say: only ``a`` changed."""
    assert fast_diff(store, 1, 2) is None and fast_diff(store, 2, 1) is None
    for old, new in ((1, 2), (2, 1)):
        expected = expected_diff(store, old, new)
        assert [key for key, _ in expected["changed"]] == ["a"]
        assert found(litstore.open(store.root).diff(old, new)) == expected
