"""``verify`` by sums (ops/verify_summed.py): a sound version is proved without holding anything per record, and
no damaged one is ever proved: the sums send it to the full match, which names what is wrong.

The full match's reports are tested in test_verify.py and its neighbours (their stores have key runs, so each
of those damaged stores went through these sums first); here, that the sums are taken at all, and refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import hashing, keyrun, layout
from litstore.ops import verify, verify_listed, verify_summed
from litstore.read.keyruns import RunReader
from litstore.txn import keyruns
from tests.planting import restamp
from tests.read.test_get_many import _swap_rows

SPLITS = litstore.HashSplit(train=0.6, val=0.4)


def _records(start: int, count: int, rev: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": f"k{i:04d}", "n": i + rev, "blob": bytes([i % 251]) * (20 + i % 40)} for i in range(start, start + count)
    ]


def _proved(store: litstore.Store, **options: Any) -> tuple[int, int, int] | None:
    head = litstore.open(store.root, storage_options=None).head() if "://" not in store.root else store.head()
    return verify_summed.check(head.storage, head.config, head.version, head.chunks(), **options)


def _history(store: litstore.Store) -> None:
    for start in range(0, 600, 150):
        store.append(_records(start, 150))
    store.upsert(_records(0, 600, rev=1)[::9])
    store.delete([f"k{i:04d}" for i in range(5, 600, 13)])


@pytest.mark.parametrize("format_version", [3, 4, 5, 6, 7])
def test_a_sound_history_is_proved_by_sums_alone(
    make_any_store: Callable[..., litstore.Store], format_version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends, upserts, deletes, a compaction and a field addition: every version is proved by its sums, and
    ``verify`` never runs the full match (which holds ~42 bytes a record) to say so."""
    store = make_any_store(key="id", splits=SPLITS, chunk_bytes=2048, format_version=format_version)
    _history(store)
    store.compact()
    store.add_fields({"n": int})
    head = store.head()
    proved = verify_summed.check(head.storage, head.config, head.version, head.chunks())
    assert proved is not None and proved[0] == len(store)

    def matched(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("verify ran the full match on a sound version")

    monkeypatch.setattr(verify, "_Matcher", matched)
    for number in range(1, store.version.number + 1):
        report = store.verify(number)
        assert report.ok, report.summary()
        assert report.records_checked == len(store.at(number))


def test_a_sound_version_is_proved_with_worker_processes_too(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    _history(store)
    head = store.head()
    serial = verify_summed.check(head.storage, head.config, head.version, head.chunks())
    assert serial is not None
    assert verify_summed.check(head.storage, head.config, head.version, head.chunks(), num_workers=2) == serial


def test_a_format_2_version_goes_to_the_full_match(make_store: Callable[..., litstore.Store]) -> None:
    """Without key runs the sums cannot rule out duplicate keys."""
    old = make_store(key="id", chunk_bytes=2048, format_version=2)
    old.append(_records(0, 100))
    head = old.head()
    assert verify_summed.check(head.storage, head.config, head.version, head.chunks()) is None
    assert old.verify().ok


def test_expected_keys_are_proved_by_their_sum_or_named_by_the_full_match(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exactly the version's keys (in any order, repeated or not) are proved by sums; one missing, one extra or
    one of the wrong type is not, and the full match names it."""
    store = make_store(key="id", splits=SPLITS, chunk_bytes=2048)
    _history(store)
    head = store.head()
    keys = list(store.keys())

    def proved(expected: list[Any]) -> bool:
        found = verify_summed.check(head.storage, head.config, head.version, head.chunks(), expected_keys=expected)
        return found is not None

    assert proved(keys[::-1] + keys[:5])
    assert not proved(keys[1:])
    assert not proved([*keys, "k9999"])
    assert not proved([*keys, 7])
    report = store.verify(expected_keys=[*keys[1:], "k9999"])
    assert report.missing_keys == ["k9999"] and report.unexpected_keys == [keys[0]]

    def matched(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("verify ran the full match on a sound version with its own keys")

    monkeypatch.setattr(verify, "_Matcher", matched)
    assert store.verify(expected_keys=iter(keys)).ok  # (an iterator: read once)


def _flip_an_item(root: Path, store: litstore.Store) -> None:
    chunk = next(iter(store.chunks().values()))[0].filename
    data = bytearray((root / chunk).read_bytes())
    data[-2] ^= 0xFF
    (root / chunk).write_bytes(bytes(data))


def _flip_a_sidecar_hash(root: Path, store: litstore.Store) -> None:
    """Change one committed hash in a sidecar and fix its checksum: the file parses, its hash is wrong."""
    from litstore.format import chunkhashes, layout

    chunk = next(iter(store.chunks().values()))[0]
    path = root / layout.chunk_hashes(chunk.filename)
    hashes = bytearray(chunkhashes.parse(chunk.filename, path.read_bytes(), chunk.num_items))
    hashes[0] ^= 0xFF
    path.write_bytes(chunkhashes.encode(chunk.filename, bytes(hashes)))


def _swap(root: Path, store: litstore.Store) -> None:
    """k0302's manifest row (and key run entry, sidecar, fingerprint: restamped) points at k0305's record."""
    _swap_rows(store, "k0302", "k0305")


def _list_a_chunk_twice(root: Path, store: litstore.Store) -> None:
    """The commit record's index lists a chunk twice (counts raised to match): its items would stream twice."""
    record_path = root / "versions" / f"{store.version.number:08d}.json"
    record = json.loads(record_path.read_bytes())
    split, chunks = next((split, chunks) for split, chunks in record["added_chunks"].items() if chunks)
    chunks.append(dict(chunks[0]))
    record["counts"][split] += chunks[0]["items"]
    record_path.write_text(json.dumps(record))


def _remove_a_chunk(root: Path, store: litstore.Store) -> None:
    (root / next(iter(store.chunks().values()))[0].filename).unlink()


def _forget_a_row(root: Path, store: litstore.Store) -> None:
    """The newest delta loses k0303's row, everything else restamped to agree: its item is stored, unlisted."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = root / str(store.head().version.manifest)
    table = pq.read_table(path)
    path.chmod(0o644)
    pq.write_table(table.filter(pc.not_equal(table.column("key"), "k0303")), path)
    restamp(root)


def _swap_splits(root: Path, store: litstore.Store) -> None:
    """Two rows of the newest delta, of different splits, trade splits: keys, places, contents, counts and the
    fingerprint all still agree; only each record's split does not (the place sums see it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / str(store.head().version.manifest)
    table = pq.read_table(path)
    splits = table.column("split").to_pylist()
    first = splits.index("train")
    second = splits.index("val")
    splits[first], splits[second] = "val", "train"
    path.chmod(0o644)
    column = pa.array(splits, pa.string()).dictionary_encode().cast(table.schema.field("split").type)
    pq.write_table(table.set_column(table.column_names.index("split"), "split", column), path)


@pytest.mark.parametrize(
    "damage",
    [_flip_an_item, _flip_a_sidecar_hash, _swap, _list_a_chunk_twice, _remove_a_chunk, _forget_a_row, _swap_splits],
)
def test_no_damaged_version_is_proved(tmp_path: Path, damage: Callable[[Path, litstore.Store], None]) -> None:
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=2048)
    store.append(_records(0, 300))
    store.append(_records(300, 10))
    damage(root, store)
    try:
        reopened = litstore.open(root)
        head = reopened.head()
        proved = verify_summed.check(head.storage, head.config, head.version, head.chunks())
    except litstore.IntegrityError:
        return  # refused outright: nothing proved
    assert proved is None
    assert not reopened.verify().ok


# -- what a stranger who knows the code (not the seed) can forge --------------------------------------------------


@pytest.mark.parametrize("columns", [4, 6])  # place_words' columns; the key index's
@pytest.mark.parametrize("bit", [63, 62])
def test_no_flip_of_the_last_words_top_bits_cancels_out(columns: int, bit: int) -> None:
    """The last word of a term was mixed by one round alone: flipping its bit 63 flipped just bits 63 and 31 of
    the term, so the same flip in two rows left the sum as it was for one seed in eight (bit 62: about one in a
    hundred)."""
    rows = np.random.default_rng(bit).integers(0, 2**63, (2, columns), dtype=np.uint64)
    flipped = rows.copy()
    flipped[:, -1] ^= np.uint64(1 << bit)
    for seed in range(400):
        digest = verify_listed.IndexDigest(seed)
        assert digest.sum_words(tuple(rows.T)) != digest.sum_words(tuple(flipped.T)), seed


def test_a_key_run_with_two_content_hashes_changed_in_their_top_bit_is_never_proved(tmp_path: Path) -> None:
    """The key index says two keys have other content than their records (lookups of them fail): refused by
    every draw of the seed, by the sums and by the full match (which compares the same key run sums)."""
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id", chunk_bytes=2048)
    store.append(_records(0, 200))
    ref = store.version.key_runs[0]
    entries, names = RunReader(store.storage, ref).everything()
    for key in ("k0001", "k0002"):
        (at,) = np.flatnonzero(entries["keyprint"] == np.array(hashing.keyprint(key), dtype="V16"))
        content = bytearray(entries["content"][at].tobytes())
        content[15] ^= 0x80  # bit 63 of its second word
        entries["content"][at] = np.void(bytes(content))
    data = keyrun.encode(entries, names)
    (root / ref.path).write_bytes(data)
    record_path = root / layout.version_record(store.version.number)
    record = json.loads(record_path.read_bytes())
    record["key_runs"] = [{"path": ref.path, "entries": len(entries), "size": len(data)}]
    record_path.write_text(json.dumps(record))
    reopened = litstore.open(root)
    with pytest.raises(litstore.IntegrityError):
        reopened.get("k0001")
    head = reopened.head()
    for _ in range(24):
        assert verify_summed.check(head.storage, head.config, head.version, head.chunks()) is None
        assert not reopened.verify().ok


def test_records_of_a_split_the_commit_record_does_not_count_are_a_count_mismatch(tmp_path: Path) -> None:
    """The commit record drops a split from its counts (``len`` then leaves its records out): the sums refuse it,
    and the full match, which compared only the splits the record counts, now reports it too."""
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=2048)
    store.append(_records(0, 200))
    record_path = root / layout.version_record(store.version.number)
    record = json.loads(record_path.read_bytes())
    dropped = record["counts"].pop("val")
    record_path.write_text(json.dumps(record))
    reopened = litstore.open(root)
    assert len(reopened) == 200 - dropped
    head = reopened.head()
    assert verify_summed.check(head.storage, head.config, head.version, head.chunks()) is None
    report = reopened.verify()
    assert report.count_mismatches == [("val", 0, dropped)], report.summary()


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_chunk_listed_twice_with_its_rows_listed_twice_is_never_proved(tmp_path: Path, split: str) -> None:
    """A stranger lists a chunk a second time (in its split, or the other one), lists each of its rows twice to
    match, restamps the counts, the fingerprint and one key run of the manifest rows as they now are: every place
    sum agrees, and only the key run sums (each key resolved once) can tell that the keys are listed twice."""
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id", splits=SPLITS, chunk_bytes=2048, format_version=4)
    store.append(_records(0, 300))
    store.append(_records(300, 10))
    whole = store.head().manifest()
    record_path = root / layout.version_record(store.version.number)
    record = json.loads(record_path.read_bytes())
    listed = json.loads((root / record["indexes"]["val"]).read_bytes())["chunks"][-1]
    index_path = root / record["indexes"][split]
    index = json.loads(index_path.read_bytes())
    index["chunks"].append(dict(listed))
    index_path.write_text(json.dumps(index))
    path = root / record["manifest"]
    table = pq.read_table(path)
    rows = table.filter(pc.equal(table.column("chunk"), listed["filename"]))
    splits = pa.array([split] * rows.num_rows).dictionary_encode().cast(table.schema.field("split").type)
    path.chmod(0o644)
    pq.write_table(pa.concat_tables([table, rows.set_column(rows.column_names.index("split"), "split", splits)]), path)
    record["counts"][split] += rows.num_rows
    twice = hashing.fingerprint_sum(rows.column("key").to_pylist(), rows.column("content_hash").to_pylist())
    record["fingerprint"] = hashing.fingerprint_hex(
        (int(record["fingerprint"], 16) + twice) % hashing.FINGERPRINT_MODULUS
    )
    entries, names = keyruns.full_run(
        pa.concat_tables([whole, whole.filter(pc.equal(whole.column("chunk"), listed["filename"]))])
    )
    data = keyrun.encode(entries, names)
    run_path = layout.key_run(store.version.number, record["transaction"])
    (root / run_path).write_bytes(data)
    record["key_runs"] = [{"path": run_path, "entries": len(entries), "size": len(data)}]
    record_path.write_text(json.dumps(record))
    reopened = litstore.open(root)
    head = reopened.head()
    assert verify_summed.check(head.storage, head.config, head.version, head.chunks()) is None
    assert verify_summed.check(head.storage, head.config, head.version, head.chunks(), num_workers=2) is None
    report = reopened.verify()
    assert sorted(report.duplicate_keys) == sorted(set(rows.column("key").to_pylist())), report.summary()
