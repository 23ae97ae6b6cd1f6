"""The key index on disk (format 3): lookups through key runs agree with the manifest, read a few pages,
and a damaged or lying run is an IntegrityError, never another record."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litstore
from litstore.format import hashing, keyrun, layout
from litstore.format.models import STORE_FORMAT_VERSION
from litstore.read.keyruns import WHOLE_RUN
from litstore.read.version import VersionReader
from litstore.storage import Storage

Record = dict[str, Any]


def _record(key: str, rev: int) -> Record:
    return {"id": key, "rev": rev, "text": f"{key}/{rev} " * 3}


KEYS = [f"k{i:03d}" for i in range(60)]
operation = st.one_of(
    st.tuples(st.just("append"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=12, unique=True)),
    st.tuples(st.just("upsert"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=12, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=8, unique=True)),
    st.tuples(st.just("compact"), st.just([])),
    st.tuples(st.just("gc"), st.just([])),
)


def _manifest_reader(reader: VersionReader) -> VersionReader:
    """The same version read through the key index built from its manifest (what format 2 does)."""
    other = reader.successor(reader.version)
    other.key_index()
    return other


def _check_history(
    root: str,
    history: list[tuple[str, list[str]]],
    *,
    reopen: bool,
    options: dict[str, str] | None = None,
    format_version: int = 3,
    checkpoint_interval: int = 64,
) -> dict[str, Record]:
    """Run ``history`` on a new store of ``format_version`` at ``root``; after each step, lookups through its
    key runs (in a fresh handle if ``reopen``) give what a model of the history holds, and what the manifest
    says. Returns the model: the records the store holds at the end."""
    store = litstore.Store.create(
        root,
        key="id",
        chunk_bytes=2048,
        format_version=format_version,
        checkpoint_interval=checkpoint_interval,
        storage_options=options,
    )
    model: dict[str, Record] = {}
    for step, (kind, keys) in enumerate(history):
        if kind == "append":
            fresh = [key for key in keys if key not in model]
            store.append([_record(key, step) for key in fresh])
            model.update((key, _record(key, step)) for key in fresh)
        elif kind == "upsert":
            store.upsert([_record(key, step) for key in keys])
            model.update((key, _record(key, step)) for key in keys)
        elif kind == "delete":
            store.delete(keys, missing_ok=True)
            for key in keys:
                model.pop(key, None)
        elif kind == "compact":
            store.compact()
        else:
            store.gc(dry_run=False, keep_last=1)
        if reopen:
            reader = litstore.Store.open(root, storage_options=options).head().reader
        else:
            reader = VersionReader(store.storage, store.config, store.version)
        asked = [*KEYS, "absent", ""]
        expected = [model.get(key) for key in asked]
        assert reader.get_many(asked, default=None) == expected, (step, kind)
        assert reader.built_manifest is None, "a lookup through key runs composes no manifest"
        assert [reader.find(key) for key in asked] == expected
        assert sorted(reader.existing_keys(asked)) == sorted(model)
        held = reader.existing_keys(asked)  # an append's batch comes as an Arrow column: hashed a column at a time
        assert reader.existing_keys(pa.array(asked)) == held
        assert reader.existing_keys(pa.chunked_array([asked[:3], asked[3:]], pa.large_string())) == held
        assert _manifest_reader(reader).get_many(asked, default=None) == expected
    return model


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(operation, min_size=1, max_size=14), backend=st.sampled_from(["local", "memory"]))
def test_lookups_through_key_runs_agree_with_the_manifest(
    tmp_path: Path, history: list[tuple[str, list[str]]], backend: str
) -> None:
    if backend == "local":
        _check_history(str(tmp_path / uuid.uuid4().hex), history, reopen=True)
    else:
        _check_history(f"memory://runs-{uuid.uuid4().hex}", history, reopen=False)


@pytest.mark.integration
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(operation, min_size=1, max_size=6))
def test_lookups_through_key_runs_agree_with_the_manifest_on_s3(
    s3_endpoint: str, s3_bucket: str, history: list[tuple[str, list[str]]]
) -> None:
    """The same on S3 (a moto server): runs read by ranged GETs, then once more through a fresh handle
    (opening one costs about as much as a step, so not after each)."""
    root, options = f"s3://{s3_bucket}/runs-{uuid.uuid4().hex}", {"endpoint_url": s3_endpoint}
    model = _check_history(root, history, reopen=False, options=options)
    reopened = litstore.Store.open(root, storage_options=options)
    assert reopened.get_many(KEYS, default=None) == [model.get(key) for key in KEYS]
    assert [key in reopened for key in KEYS] == [key in model for key in KEYS]


class _Counting:
    """A storage that counts the bytes read from each file."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.read_bytes: dict[str, int] = {}

    def _count(self, path: str, data: Any) -> Any:
        self.read_bytes[path] = self.read_bytes.get(path, 0) + len(data)
        return data

    def read(self, path: str) -> bytes:
        return self._count(path, self._inner.read(path))  # type: ignore[no-any-return]

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return self._count(path, self._inner.read_range(path, start, end))  # type: ignore[no-any-return]

    def mapped(self, path: str) -> None:
        return None  # read as an object store would: by ranges

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_fresh_lookup_reads_pages_of_the_index_not_the_manifest(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=1 << 20, format_version=3)
    for part in range(4):
        store.append([_record(f"r{part}-{i:05d}", 0) for i in range(5000)])
    head = litstore.open(tmp_path / "s").head()
    counting = _Counting(head.storage)
    reader = VersionReader(counting, head.config, head.version)  # type: ignore[arg-type]
    assert reader.find("r2-01234") == _record("r2-01234", 0)
    manifests = [path for path in counting.read_bytes if path.endswith(".parquet")]
    assert manifests == [], "no manifest file is read"
    runs = head.version.key_runs
    assert [run.size > WHOLE_RUN for run in runs] == [False, True], "one small run, one large"
    small, large = (counting.read_bytes.get(run.path, 0) for run in runs)
    assert small == runs[0].size, "a small run is read whole, once"
    assert large <= 3 * keyrun.PAGE * keyrun.ENTRY.itemsize, "a large one: its tail and a page"
    assert large < runs[1].size / 8


@pytest.fixture
def damaged_store(tmp_path: Path) -> litstore.Store:
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, format_version=3)
    store.append([_record(f"k{i:04d}", 0) for i in range(3000)])
    return store


def _run_path(store: litstore.Store) -> Path:
    return Path(store.root) / store.version.key_runs[0].path


def test_a_flipped_byte_in_a_page_is_an_integrity_error(damaged_store: litstore.Store) -> None:
    path = _run_path(damaged_store)
    data = bytearray(path.read_bytes())
    data[1000] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="checksum"):
        litstore.open(damaged_store.root).get_many([f"k{i:04d}" for i in range(3000)])


@pytest.mark.parametrize("cut", [1, 40, 5000])
def test_a_truncated_run_is_an_integrity_error(damaged_store: litstore.Store, cut: int) -> None:
    path = _run_path(damaged_store)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(litstore.IntegrityError, match="key run"):
        litstore.open(damaged_store.root)["k0001"]


def test_a_missing_run_is_an_integrity_error(damaged_store: litstore.Store) -> None:
    _run_path(damaged_store).unlink()
    with pytest.raises(litstore.IntegrityError, match="missing"):
        litstore.open(damaged_store.root)["k0001"]


def test_a_planted_entry_pointing_at_another_record_is_refused(damaged_store: litstore.Store) -> None:
    """Rewrite the run consistently (sums and all) so key k0001's entry names k0002's record."""
    path = _run_path(damaged_store)
    ref = damaged_store.version.key_runs[0]
    reader = damaged_store.head().reader.key_runs()._runs[0]
    entries, names = reader.everything()
    one = entries["keyprint"] == np.array(hashing.keyprint("k0001"), dtype="V16")
    two = entries["keyprint"] == np.array(hashing.keyprint("k0002"), dtype="V16")
    for field in ("chunk", "row", "content"):
        entries[field][one] = entries[field][two]
    data = keyrun.encode(entries, names)
    path.write_bytes(data)
    record = json.loads((Path(damaged_store.root) / layout.version_record(1)).read_text())
    assert record["key_runs"][0]["size"] == ref.size == len(data)
    reopened = litstore.open(damaged_store.root)
    assert reopened["k0002"] == _record("k0002", 0)
    with pytest.raises(litstore.IntegrityError, match="holds another record"):
        reopened["k0001"]


def _rewritten(store: litstore.Store, change: Any) -> None:
    """Rewrite the store's run consistently (page sums, fences and footer all made anew) after ``change(entries)``."""
    path = _run_path(store)
    entries, names = store.head().reader.key_runs()._runs[0].everything()
    change(entries)
    data = keyrun.encode(entries, names)
    assert len(data) == store.version.key_runs[0].size
    path.write_bytes(data)


def _swap(entries: np.ndarray, one: int, other: int) -> None:
    entries[[one, other]] = entries[[other, one]]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(lambda entries: _swap(entries, 1500, 1501), "not sorted inside", id="swapped-in-a-page"),
        # The fences are made from the entries: page 1 then starts below the end of page 0.
        pytest.param(
            lambda entries: _swap(entries, keyrun.PAGE - 1, keyrun.PAGE), "not sorted inside", id="swapped-across-pages"
        ),
        pytest.param(
            lambda entries: entries["chunk"].__setitem__(2500, 7_000), "chunk outside its table", id="chunk-outside"
        ),
    ],
)
def test_a_run_out_of_order_or_naming_a_stranger_chunk_is_refused(
    damaged_store: litstore.Store, change: Any, problem: str
) -> None:
    """A run whose every sum is right, but which a lookup's search would misread: refused, for any key asked."""
    _rewritten(damaged_store, change)
    with pytest.raises(litstore.IntegrityError, match=problem):
        litstore.open(damaged_store.root).get_many([f"k{i:04d}" for i in range(3000)])
    with pytest.raises(litstore.IntegrityError, match=problem):
        litstore.open(damaged_store.root).append([_record(f"n{i:04d}", 0) for i in range(3000)])


def test_a_key_hash_shared_across_a_page_boundary_is_found(damaged_store: litstore.Store) -> None:
    """Two entries of one key hash (as two keys whose hashes collide would have), one ending a page, the
    other starting the next: the search walks from the first to the second, across the pages."""
    entries, _ = damaged_store.head().reader.key_runs()._runs[0].everything()
    by_print = {hashing.keyprint(key): key for key in (f"k{i:04d}" for i in range(3000))}
    first_key, second_key = (by_print[entries[at]["keyprint"].tobytes()] for at in (keyrun.PAGE - 1, keyrun.PAGE))
    second = entries[keyrun.PAGE]
    _rewritten(damaged_store, lambda changed: changed["key_hash"].__setitem__(keyrun.PAGE - 1, second["key_hash"]))
    reopened = litstore.open(damaged_store.root)
    assert reopened[second_key] == _record(second_key, 0)
    assert reopened.head().get_many([second_key, "k0000"]) == [_record(second_key, 0), _record("k0000", 0)]
    assert first_key not in reopened, "its entry is under another key's hash now"


def test_a_footer_that_lies_about_its_count_is_refused(damaged_store: litstore.Store) -> None:
    path = _run_path(damaged_store)
    data = bytearray(path.read_bytes())
    footer = keyrun.FOOTER.unpack(bytes(data[-keyrun.footer_size() :]))
    data[-keyrun.footer_size() :] = keyrun.FOOTER.pack(footer[0], footer[1] + 1, *footer[2:])
    path.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="footer describes"):
        litstore.open(damaged_store.root)["k0001"]


def test_a_format_2_store_reads_and_writes_without_key_runs(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = litstore.Store.create(root, key="id", format_version=2)
    assert store.config.format_version == 2
    store.append([_record(f"k{i}", 0) for i in range(20)])
    store.delete(["k3"])
    reopened = litstore.open(root)
    assert reopened.version.key_runs == ()
    for record in (root / "versions").glob("*.json"):
        assert "key_runs" not in json.loads(record.read_text()), "litstore before key runs reads the record"
    assert not list((root / "manifests").glob("*.keys"))
    assert reopened["k4"] == _record("k4", 0) and "k3" not in reopened
    assert reopened.verify().ok


def test_a_handle_on_a_version_gc_expired_is_told_to_refresh(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    stale = litstore.Store.create(root, key="id", chunk_bytes=1 << 20, format_version=3)
    stale.append([_record("k", 0), _record("j", 0)])
    other = litstore.open(root)
    for rev in range(3):
        other.upsert([_record("j", rev + 1)])
    other.gc(dry_run=False, keep_last=1)
    with pytest.raises(litstore.VersionNotFoundError, match=r"Store\.refresh\(\)"):
        stale["k"]
    stale.refresh()
    assert stale["k"] == _record("k", 0) and stale["j"] == _record("j", 3)


def test_format_3_at_create_and_a_newer_one_refused(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "a", key="id", format_version=3)
    assert litstore.open(tmp_path / "a").config.format_version == 3
    store.append([_record("k", 0)])
    assert len(store.version.key_runs) == 1
    with pytest.raises(litstore.InvalidArgumentError, match="newer than this litstore reads"):
        litstore.Store.create(tmp_path / "b", key="id", format_version=STORE_FORMAT_VERSION + 1)


def test_a_record_claiming_a_run_shorter_than_a_footer_is_refused(damaged_store: litstore.Store) -> None:
    """The size comes from the commit record: a ranged read of the footer would start before the file."""
    path = Path(damaged_store.root) / layout.version_record(1)
    record = json.loads(path.read_text())
    record["key_runs"][0]["size"] = 10
    path.write_text(json.dumps(record))
    head = litstore.open(damaged_store.root).head()
    ranged = VersionReader(_Counting(head.storage), head.config, head.version)  # type: ignore[arg-type]
    with pytest.raises(litstore.IntegrityError, match="shorter than a footer"):
        ranged.find("k0001")
    with pytest.raises(litstore.IntegrityError, match="key run"):
        head.reader.find("k0001")


def test_a_stranger_chunk_name_in_a_run_is_refused_when_used(damaged_store: litstore.Store) -> None:
    """A run's chunk names are checked as they are used (a lookup resolves one of them; merges, verify and
    ``KeyRuns.check`` take them all): a name planted with every sum right is an IntegrityError, never read."""
    entries, names = damaged_store.head().reader.key_runs()._runs[0].everything()
    fragment = names[0].split("/")[1]
    planted = names[0].replace(f"chunk-{fragment}", f"chunk-{'0' * 20}")  # (same length: the record's size holds)
    data = keyrun.encode(entries, [planted, *names[1:]])
    assert len(data) == damaged_store.version.key_runs[0].size
    _run_path(damaged_store).write_bytes(data)
    keys = [f"k{i:04d}" for i in range(3000)]
    victim = next(key for key, found in zip(keys, entries_for(entries, keys), strict=True) if found == 0)
    bystander = next(key for key, found in zip(keys, entries_for(entries, keys), strict=True) if found != 0)
    reopened = litstore.open(damaged_store.root)
    assert reopened[bystander] == _record(bystander, 0), "an entry naming another chunk still reads"
    with pytest.raises(litstore.IntegrityError, match="which is not a chunk of this store"):
        reopened[victim]
    with pytest.raises(litstore.IntegrityError, match="which is not a chunk of this store"):
        litstore.open(damaged_store.root).head().reader.key_runs().check()
    report = litstore.open(damaged_store.root).verify()
    assert any("not a chunk of this store" in problem for _, problem in report.index_problems)


def entries_for(entries: np.ndarray, keys: list[str]) -> list[int]:
    """The chunk id of each key's entry in ``entries``."""
    by_print = {entry["keyprint"].tobytes(): int(entry["chunk"]) for entry in entries}
    return [by_print[hashing.keyprint(key)] for key in keys]


def test_a_get_many_keeps_the_pages_it_read_for_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A get_many of keys spread over more than 256 pages of a run (a bulk read until now, not kept) keeps them:
    the same keys again read and check no page of the run, and every record still comes back checked."""
    store = litstore.Store.create(tmp_path / "s", key="id")
    store.append(pa.table({"id": [f"k{i:06d}" for i in range(80_000)], "v": list(range(80_000))}))
    reader = litstore.open(store.root).head().reader
    keys = [f"k{i:06d}" for i in range(0, 80_000, 37)]
    assert [record["v"] for record in reader.get_many(keys)] == list(range(0, 80_000, 37))
    assert len(reader.key_runs()._runs[0]._pages) > 256, "the keys spread over more pages than a read used to keep"
    checked: list[int] = []
    for name in ("check_pages", "check_pages_within"):
        check = getattr(keyrun, name)
        monkeypatch.setattr(keyrun, name, lambda *args, _check=check: checked.append(len(args[2])) or _check(*args))
    assert [record["v"] for record in reader.get_many(keys)] == list(range(0, 80_000, 37))
    assert checked == []


def test_existing_keys_of_an_arrow_column_of_int_keys_agree_with_a_list(tmp_path: Path) -> None:
    """Integer keys as an int64 column are hashed a column at a time (as their 8 bytes); any other Arrow type
    is looked up key by key: both find exactly the keys the store holds, in the order asked."""
    store = litstore.Store.create(tmp_path / "s", key="id", key_type="int")
    store.append([{"id": key, "v": key} for key in range(-500, 1500, 3)])
    store.delete([-500, 1, 4])
    reader = litstore.open(store.root).head().reader
    asked = [4, 1, -497, 7, 2**62, 0, 1498, 10, -500, 1499]
    expected = [key for key in asked if key in range(-497, 1500, 3) and key not in (1, 4)]
    assert reader.existing_keys(asked) == expected
    assert reader.existing_keys(pa.array(asked, pa.int64())) == expected
    assert reader.existing_keys(pa.array([key for key in asked if abs(key) < 2**31], pa.int32())) == [
        key for key in expected if abs(key) < 2**31
    ]
