"""Stores of format 1 (manifest files hold key hashes) stay readable and writable as format 1."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import hashing, layout


def _as_format_1(root: Path) -> None:
    """Rewrite a fresh store the way litstore of format 1 wrote it: key hashes in every manifest file."""
    config = root / layout.CONFIG
    document = json.loads(config.read_text())
    document["format_version"] = 1
    config.write_text(json.dumps(document))
    for path in (root / "manifests").glob("*.parquet"):
        table = pq.read_table(path)
        hashes = hashing.key_hashes(table.column("key").to_pylist())
        pq.write_table(table.add_column(1, "key_hash", pa.array(hashes, pa.uint64())), path)


def _manifest_columns(root: Path) -> list[list[str]]:
    return [pq.read_schema(path).names for path in sorted((root / "manifests").glob("*.parquet"))]


@pytest.mark.parametrize("format_version", [2, 3])
def test_new_stores_leave_key_hashes_out_of_their_files(tmp_path: Path, format_version: int) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", format_version=format_version)
    store.append([{"id": f"k{i}", "v": i} for i in range(50)])
    assert store.config.format_version == format_version
    assert all("key_hash" not in names for names in _manifest_columns(tmp_path / "s"))
    manifest = litstore.open(tmp_path / "s").manifest()
    assert manifest.column("key_hash").to_pylist() == hashing.key_hashes(manifest.column("key").to_pylist()).tolist()


def test_a_format_1_store_reads_and_keeps_writing_format_1(tmp_path: Path) -> None:
    root = tmp_path / "s"
    litstore.Store.create(root, key="id").append([{"id": f"k{i}", "v": i} for i in range(50)])
    _as_format_1(root)
    store = litstore.open(root)
    assert store.config.format_version == 1
    assert store["k7"] == {"id": "k7", "v": 7}
    store.upsert([{"id": "k7", "v": 70}, {"id": "new", "v": -1}])
    store.delete(["k8"])
    assert all("key_hash" in names for names in _manifest_columns(root))
    reopened = litstore.open(root)
    assert reopened.get_many(["k7", "new"]) == [{"id": "k7", "v": 70}, {"id": "new", "v": -1}]
    assert "k8" not in reopened
    assert reopened.verify().ok
    assert reopened.diff(1).removed.column("key").to_pylist() == ["k8"]


def test_a_format_1_store_whose_key_hashes_lie_is_read_by_its_keys(tmp_path: Path) -> None:
    """Every stored key hash replaced by another key's: readers derive hashes from the keys, so
    lookups, upserts (which find the rows they replace by key hash) and verify go by the keys."""
    root = tmp_path / "s"
    litstore.Store.create(root, key="id", chunk_bytes=256).append([{"id": f"k{i}", "v": i} for i in range(50)])
    _as_format_1(root)
    for path in (root / "manifests").glob("*.parquet"):
        table = pq.read_table(path)
        lying = hashing.key_hashes([f"k{(i + 1) % 50}" for i in range(50)])
        pq.write_table(table.set_column(1, "key_hash", pa.array(lying, pa.uint64())), path)
    store = litstore.open(root)
    assert store["k7"] == {"id": "k7", "v": 7}
    store.upsert([{"id": "k7", "v": 70}])
    store.delete(["k8"])
    reopened = litstore.open(root)
    assert sorted(reopened.keys()) == sorted(f"k{i}" for i in range(50) if i != 8)
    assert reopened.get_many(["k7", "k9"]) == [{"id": "k7", "v": 70}, {"id": "k9", "v": 9}]
    assert reopened.verify().ok


def _records_of(root: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_bytes()) for path in sorted((root / layout.VERSIONS).glob("*.json"))]


def _small_history(store: litstore.Store) -> None:
    store.append([{"id": f"k{i:03d}", "v": i} for i in range(120)])
    for round_ in range(5):
        store.upsert([{"id": f"k{i:03d}", "v": -round_} for i in range(round_, 120, 17)])
        store.delete([f"k{round_ * 20 + 3:03d}"])
        store.append([{"id": f"n{round_}", "v": round_}])


def test_format_6_lists_by_delta_and_in_full_at_checkpoints(tmp_path: Path) -> None:
    """A format-6 commit writes no split index and only the deletion vectors it wrote, except every
    ``checkpoint_interval`` versions; every version reads as a format-5 store of the same history does."""
    six = litstore.Store.create(tmp_path / "six", key="id", chunk_bytes=512, checkpoint_interval=4, format_version=6)
    five = litstore.Store.create(tmp_path / "five", key="id", chunk_bytes=512, checkpoint_interval=4, format_version=5)
    _small_history(six)
    _small_history(five)
    assert six.config.format_version == 6 and six.config.writes_listing_deltas
    for record in _records_of(tmp_path / "six")[1:]:
        full = record["number"] % 4 == 0 or record.get("checkpoint")
        assert bool(record.get("listed_by_delta")) == (not full), record["number"]
        if record.get("listed_by_delta"):
            assert not record.get("indexes")
            own = layout.deletions(record["number"], record["transaction"])  # type: ignore[arg-type]
            assert all(ref["path"] == own for ref in record.get("deletions", []))  # type: ignore[attr-defined]
    assert not any(record.get("listed_by_delta") for record in _records_of(tmp_path / "five"))
    for version in five.versions():
        ours, theirs = six.at(version.number), five.at(version.number)
        assert dict(ours.items()) == dict(theirs.items())
        assert {split: [c.num_items for c in chunks] for split, chunks in ours.chunks().items()} == {
            split: [c.num_items for c in chunks] for split, chunks in theirs.chunks().items()
        }
        assert [ref.dead for ref in ours.reader.deletions.refs] == [ref.dead for ref in theirs.reader.deletions.refs]
    assert litstore.open(tmp_path / "six").verify().ok


@pytest.mark.parametrize("format_version", [6, 7])
def test_an_older_litstore_refuses_a_newer_store_by_its_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, format_version: int
) -> None:
    litstore.Store.create(tmp_path / "s", key="id", format_version=format_version).append([{"id": "a"}])
    from litstore.format import models

    monkeypatch.setattr(models, "STORE_FORMAT_VERSION", format_version - 1)  # what an older litstore knows
    with pytest.raises(
        litstore.IntegrityError, match=f"store format {format_version} is newer than this litstore reads"
    ):
        litstore.open(tmp_path / "s")


def test_a_format_5_store_reads_unchanged_and_upgrades_by_a_switch(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", chunk_bytes=512, format_version=5)
    _small_history(store)
    before = {version.number: dict(store.at(version.number).items()) for version in store.versions()}
    store = litstore.open(root)
    assert store.config.format_version == 5
    upgraded = store.upgrade()
    assert litstore.open(root).config.format_version == 7 and upgraded.number == store.version.number
    store = litstore.open(root)
    store.upsert([{"id": "k001", "v": 1000}])
    store.delete(["k002"])
    assert _records_of(root)[-1].get("listed_by_delta")
    for number, records in before.items():
        assert dict(store.at(number).items()) == records
    assert store["k001"] == {"id": "k001", "v": 1000} and "k002" not in store
    assert store.verify().ok


def _dropped_by_listing(store: litstore.Store, number: int) -> set[str]:
    """The chunks version ``number`` no longer lists of its parent's."""

    def names(at: int) -> set[str]:
        return {chunk.filename for chunks in store.at(at).chunks().values() for chunk in chunks}

    return names(number - 1) - names(number)


@pytest.mark.parametrize("upgraded", [False, True])
def test_format_7_records_listed_in_full_name_no_dropped_chunks(tmp_path: Path, upgraded: bool) -> None:
    """A format-7 record listed in full (a compaction, a checkpoint) leaves out the chunks it dropped, and every
    version reads as a format-6 store of the same history does; one listed by delta still names them (its
    listing is its parent's with them taken out). A format-6 store becomes format 7 by a switch."""
    seven_root = tmp_path / "seven"
    seven = litstore.Store.create(
        seven_root, key="id", chunk_bytes=512, checkpoint_interval=4, format_version=6 if upgraded else 7
    )
    six = litstore.Store.create(tmp_path / "six", key="id", chunk_bytes=512, checkpoint_interval=4, format_version=6)
    for store in (six, seven):
        store.append([{"id": f"k{i:03d}", "v": i} for i in range(120)])
    if upgraded:
        assert seven.upgrade().number == seven.version.number, "6 -> 7 is the switch alone"
        seven = litstore.open(seven_root)
    assert seven.config.format_version == 7
    for store in (six, seven):
        store.append([{"id": f"x{i}", "v": i} for i in range(5)])  # a chunk of its own
        store.delete([f"x{i}" for i in range(5)])  # emptied: dropped by a record listed by delta
        for round_ in range(6):
            store.upsert([{"id": f"k{i:03d}", "v": -round_} for i in range(60 + round_, 120, 13)])
            store.delete([f"k{100 + round_:03d}"])
            store.append([{"id": f"n{round_}", "v": round_}])
        store.compact(min_live=1.0)
    records = {record["number"]: record for record in _records_of(seven_root)}
    listed_in_full = [n for n, record in records.items() if record.get("indexes") and n > 1]
    assert any(records[n]["operation"] == "compact" for n in listed_in_full)
    dropping = [n for n in range(2, len(records)) if _dropped_by_listing(seven, n)]
    assert {n for n in dropping if n in listed_in_full}, "a record listed in full drops chunks"
    assert {n for n in dropping if n not in listed_in_full}, "a record listed by delta drops chunks"
    for number in dropping:
        named = set(records[number].get("dropped_chunks", []))  # type: ignore[arg-type]
        assert named == (set() if number in listed_in_full else _dropped_by_listing(seven, number)), number
    assert any(six.at(number).version.dropped_chunks for number in listed_in_full if number in dropping)
    for version in six.versions():
        assert dict(seven.at(version.number).items()) == dict(six.at(version.number).items()), version.number
    assert litstore.open(seven_root).verify().ok


def test_a_writer_holding_the_format_6_config_across_an_upgrade_and_compaction_rebases(tmp_path: Path) -> None:
    """A handle opened before the 6 -> 7 switch still holds the format-6 config: a rival's format-7 compaction,
    listed in full, names none of the chunks it dropped, among them the one the stale handle marks a row of.
    Its delete must see that the chunk is gone (derived from the record, whatever the handle's format) and plan
    again on the compacted chunks: committed once, every record the rival left still there."""
    root = tmp_path / "store"
    stale = litstore.Store.create(root, key="id", chunk_bytes=512, format_version=6)
    stale.append([{"id": f"k{i:03d}", "v": i} for i in range(120)])
    stale.delete([f"k{i:03d}" for i in range(0, 120, 3)])  # chunks with dead rows: a compaction rewrites them
    rival = litstore.open(root)
    rival.upgrade()
    rival = litstore.open(root)
    rival.compact(min_live=1.0)
    compacted = rival.version
    assert compacted.operation == "compact" and not compacted.dropped_chunks
    assert stale.config.format_version == 6
    assert stale.delete(["k001"]).number == compacted.number + 1
    fresh = litstore.open(root)
    assert "k001" not in fresh and len(fresh) == 79
    assert dict(fresh.items()) == {key: value for key, value in rival.items() if key != "k001"}
    assert fresh.verify().ok
