"""What each call reads of a format-3 store in a fresh process: only what its answer needs.

Every read, ranged read, mapping and listing the local and memory backends make is
recorded (their methods wrapped), each path named by what it is (the config, a commit
record, a tag, a split index, a manifest delta or checkpoint, a key run, a chunk), and
every composition of a whole manifest or build of the in-memory key index is counted.
Lookups, ``get_many``, ``in`` and ``append`` read key runs and chunks; a diff of near
versions reads the deltas between them and never the older version's chain; the
history (``versions()``, tags, ``litstore log``, ``show``, ``tags``) reads commit
records, tags and the config. Each answer is compared with a format-2 store of the same
history, which composes manifests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore.cli import history, inspect
from litstore.ops.diff import Diff
from litstore.read.version import VersionReader
from litstore.storage.local import LocalStorage
from litstore.storage.memory import MemoryStorage
from tests.conftest import empty_memory_store, reopen

Record = dict[str, Any]
Read = tuple[str, str]  # (what the file is, its path)

_KINDS = (
    ("config", re.compile(r"litstore\.json")),
    ("head hint", re.compile(r"versions/head\.hint")),
    ("record", re.compile(r"versions/\d+\.json")),
    ("tag", re.compile(r"tags/[^/]+\.json")),
    ("split index", re.compile(r"versions/\d+-[0-9a-f]{20}/[^/]+/index\.json")),
    ("checkpoint", re.compile(r"manifests/\d+-[0-9a-f]{20}\.checkpoint\.parquet")),
    ("delta", re.compile(r"manifests/\d+-[0-9a-f]{20}\.parquet")),
    ("key run", re.compile(r"manifests/\d+-[0-9a-f]{20}\.keys")),
    ("chunk", re.compile(r"fragments/[0-9a-f]{20}/chunk-[0-9a-f]{20}-\d+\.bin")),
    ("chunk hashes", re.compile(r"fragments/[0-9a-f]{20}/chunk-[0-9a-f]{20}-\d+\.hashes")),
)


def _kind(path: str) -> str:
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(path)), "other")


class Reads:
    """What the backends read and listed, and the manifests and key indexes built, since :meth:`clear`."""

    def __init__(self) -> None:
        self.files: list[Read] = []
        self.listed: list[str] = []
        self.built: list[str] = []
        self._depth = threading.local()  # a backend method calling another (memory's read_range) counts once

    def clear(self) -> None:
        self.files, self.listed, self.built = [], [], []

    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.files}

    def paths(self, kind: str) -> set[str]:
        return {path for found, path in self.files if found == kind}

    def wrap(self, method: Callable[..., Any], listing: bool) -> Callable[..., Any]:
        def recorded(storage: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            if depth == 0:
                (self.listed.append(path) if listing else self.files.append((_kind(path), path)))
            self._depth.value = depth + 1
            try:
                return method(storage, path, *args, **kwargs)
            finally:
                self._depth.value = depth

        return recorded


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    found = Reads()
    for backend in (LocalStorage, MemoryStorage):
        for name, listing in (("read", False), ("read_range", False), ("mapped", False), ("names", True)):
            if name in vars(backend):
                monkeypatch.setattr(backend, name, found.wrap(getattr(backend, name), listing))
        monkeypatch.setattr(backend, "walk", found.wrap(backend.walk, True))
    for name in ("manifest", "key_index"):
        original = getattr(VersionReader, name)

        def building(reader: VersionReader, original: Callable[..., Any] = original, name: str = name) -> Any:
            found.built.append(f"{name} of version {reader.version.number}")
            return original(reader)

        monkeypatch.setattr(VersionReader, name, building)
    return found


def _record(key: str, rev: int) -> Record:
    return {"id": key, "rev": rev, "text": f"{key} at {rev} " * 4}


#: The versions of the history below: appends 1-5 (5 of them), a compaction, a delete, an upsert.
COMPACTED, DELETED, UPSERTED = 6, 7, 8


def _with_history(make_any_store: Callable[..., litstore.Store], format_version: int) -> litstore.Store:
    store = make_any_store(
        key="id",
        splits=litstore.HashSplit(train=0.5, val=0.5),
        chunk_bytes=4096,
        checkpoint_interval=4,  # version 4 writes a checkpoint: the chain a format-2 diff reads
        format_version=format_version,
    )
    for part in range(5):
        store.append([_record(f"p{part}-{i:03d}", 0) for i in range(120)])
    store.tag("first", 1)
    assert store.compact(target_chunk_bytes=1 << 16).number == COMPACTED
    assert store.delete(["p1-001", "p2-002"]).number == DELETED
    assert store.upsert([_record("p0-000", 1), _record("p3-003", 1), _record("new-0", 0)]).number == UPSERTED
    store.tag("release", UPSERTED)
    return store


Pair = tuple[litstore.Store, litstore.Store]


@pytest.fixture(scope="module")
def histories() -> Iterator[dict[str, Pair]]:
    """``stores`` for each backend, built once for the module: the tests that take them only read them."""
    built: dict[str, Pair] = {}
    yield built
    for store in (store for pair in built.values() for store in pair if store.root.startswith("memory://")):
        empty_memory_store(store)


@pytest.fixture
def stores(backend: str, histories: dict[str, Pair], tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """The same history in a format-3 store and in a format-2 one (shared by the module's tests: read only)."""
    if backend not in histories:
        base = str(tmp_path_factory.mktemp("histories")) if backend == "local" else f"memory://{uuid.uuid4().hex}"
        names = iter(("indexed", "composed"))

        def make(**options: Any) -> litstore.Store:
            return litstore.Store.create(f"{base}/{next(names)}", **options)

        histories[backend] = (_with_history(make, 3), _with_history(make, 2))
    return histories[backend]


def _fresh(store: litstore.Store, reads: Reads) -> litstore.Store:
    """A handle on ``store`` as a new process opens it; what opening read is forgotten."""
    handle = reopen(store)
    reads.clear()
    return handle


def _found(diff: Diff) -> dict[str, list[tuple[Any, str]]]:
    return {
        kind: list(zip(table.column("key").to_pylist(), table.column("split").to_pylist(), strict=True))
        for kind, table in (("added", diff.added), ("removed", diff.removed), ("changed", diff.changed))
    }


def test_opening_reads_the_config_and_the_head_record(
    stores: tuple[litstore.Store, litstore.Store], reads: Reads
) -> None:
    indexed, _ = stores
    reads.clear()
    handle = reopen(indexed)
    assert handle.version.number == UPSERTED
    assert reads.files == [
        ("config", "litstore.json"),
        ("head hint", "versions/head.hint"),
        ("record", f"versions/{UPSERTED:08d}.json"),
    ]
    assert reads.listed == [], "the head is the hint's, checked by lookups (tests/read/test_head.py)"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda store: store["p3-007"], id="getitem"),
        pytest.param(lambda store: store.get("absent"), id="get-missing"),
        pytest.param(lambda store: store.get_many(["p0-000", "p4-119", "new-0", "p1-050"]), id="get_many"),
        pytest.param(lambda store: ["p2-002" in store, "p2-003" in store, "new-0" in store], id="in"),
    ],
)
def test_lookups_read_key_runs_and_chunks(
    stores: tuple[litstore.Store, litstore.Store], reads: Reads, call: Callable[[litstore.Store], Any]
) -> None:
    indexed, composed = stores
    answer = call(_fresh(indexed, reads))
    assert reads.kinds() <= {"key run", "chunk"}, reads.files
    assert reads.paths("key run") and not reads.listed and not reads.built
    assert answer == call(_fresh(composed, reads))


def test_append_checks_its_keys_in_the_key_runs(make_any_store: Callable[..., litstore.Store], reads: Reads) -> None:
    indexed, composed = _with_history(make_any_store, 3), _with_history(make_any_store, 2)  # its own: it writes
    batch = [_record(f"more-{i}", 0) for i in range(5)]
    version = _fresh(indexed, reads).append(batch)
    assert not reads.kinds() & {"delta", "checkpoint"}, reads.files
    assert reads.paths("key run") and not reads.built
    with pytest.raises(litstore.DuplicateKeyError):
        _fresh(indexed, reads).append([_record("p4-000", 9)])
    assert not reads.kinds() & {"delta", "checkpoint"} and not reads.built
    assert version.fingerprint == _fresh(composed, reads).append(batch).fingerprint


@pytest.mark.parametrize(
    ("old", "new"),
    [(DELETED, UPSERTED), (UPSERTED, DELETED), (COMPACTED, UPSERTED), (COMPACTED - 1, COMPACTED), (1, 3)],
)
def test_a_diff_of_near_versions_reads_the_deltas_between_them(
    stores: tuple[litstore.Store, litstore.Store], reads: Reads, old: int, new: int
) -> None:
    indexed, composed = stores
    handle = _fresh(indexed, reads)
    between = {handle.at(number).version.manifest for number in range(min(old, new) + 1, max(old, new) + 1)}
    reads.clear()
    diff = handle.diff(old, new)
    assert reads.paths("delta") == between, "the deltas of the versions the diff spans, and no other manifest"
    assert reads.kinds() <= {"record", "delta", "key run", "split index"}, reads.files
    assert not reads.listed and not reads.built
    assert _found(diff) == _found(_fresh(composed, reads).diff(old, new))
    assert _found(diff) == _found(Diff.between(old, new, indexed.at(old).manifest(), indexed.at(new).manifest()))


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda store: store.upsert([_record("p0-000", 2), _record("p4-100", 1)]), id="upsert"),
        pytest.param(lambda store: store.delete(["p0-001", "p3-050"]), id="delete"),
        pytest.param(lambda store: store.upsert([_record("p0-002", 0)]), id="upsert-unchanged"),
    ],
)
def test_format_4_upserts_and_deletes_read_key_runs_not_the_manifest(
    make_any_store: Callable[..., litstore.Store], reads: Reads, write: Callable[[litstore.Store], Any]
) -> None:
    """They find their keys in the key runs and mark rows dead: no manifest is read, no chunk copied."""
    marking = make_any_store(key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=4096)
    copying = make_any_store(
        key="id", splits=litstore.HashSplit(train=0.5, val=0.5), chunk_bytes=4096, format_version=3
    )
    for store in (marking, copying):
        for part in range(5):
            store.append([_record(f"p{part}-{i:03d}", 0) for i in range(120)])
    handle = _fresh(marking, reads)
    before = handle.version
    version = write(handle)
    assert not reads.kinds() & {"delta", "checkpoint"} and not reads.built, reads.files
    assert not reads.paths("chunk"), "no chunk is read: nothing is copied"
    assert version.fingerprint == write(_fresh(copying, reads)).fingerprint
    if version.number != before.number:
        assert not version.dropped_chunks and len(version.fragments) <= 1
    assert dict(reopen(marking).items()) == dict(reopen(copying).items())


def test_the_history_reads_commit_records_and_tags(stores: tuple[litstore.Store, litstore.Store], reads: Reads) -> None:
    indexed, composed = stores
    handle = _fresh(indexed, reads)
    versions, tags = handle.versions(), dict(handle.tags)
    assert reads.kinds() <= {"record", "tag"} and reads.listed == ["versions", "tags"], (reads.files, reads.listed)
    assert len(reads.paths("record")) == UPSERTED + 1 and not reads.built
    other = _fresh(composed, reads)
    assert tags == dict(other.tags) == {"first": 1, "release": UPSERTED}
    assert [_history(version) for version in versions] == [_history(version) for version in other.versions()]


def _history(version: litstore.Version) -> tuple[Any, ...]:
    return (version.number, version.operation, version.counts, version.added, version.replaced, version.removed)


def _cli(command: Callable[..., None], capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    command(*args, as_json=True)
    return json.loads(capsys.readouterr().out)


def _without_times(document: Any) -> Any:
    if isinstance(document, list):
        return [_without_times(item) for item in document]
    return {name: value for name, value in document.items() if name != "created_at"}


@pytest.mark.parametrize(
    ("command", "version", "allowed"),
    [
        pytest.param(inspect.log, None, set(), id="log"),
        pytest.param(inspect.show, None, {"split index"}, id="show"),
        pytest.param(inspect.show, "first", {"split index"}, id="show-tag"),
        pytest.param(inspect.show, str(DELETED), {"split index"}, id="show-number"),
        pytest.param(history.tags, None, set(), id="tags"),
    ],
)
def test_log_show_and_tags_read_commit_records_tags_and_the_config(
    stores: tuple[litstore.Store, litstore.Store],
    reads: Reads,
    capsys: pytest.CaptureFixture[str],
    command: Callable[..., None],
    version: str | None,
    allowed: set[str],
) -> None:
    """``show`` reads the split indexes of its version too: they list its chunks and their bytes."""
    indexed, composed = stores
    arguments = [indexed.root] if version is None else [indexed.root, version]
    reads.clear()
    document = _cli(command, capsys, *arguments)
    assert reads.kinds() <= {"config", "head hint", "record", "tag"} | allowed, reads.files
    assert set(reads.listed) <= {"versions", "tags"} and not reads.built
    if command is inspect.show:
        number = document["number"]
        assert reads.paths("record") == {f"versions/{number:08d}.json", f"versions/{UPSERTED:08d}.json"}
        assert {path.split("/")[1] for path in reads.paths("split index")} <= {
            path.split("/")[1] for path in indexed.at(number).version.indexes.values()
        }
    other = _cli(command, capsys, *([composed.root] if version is None else [composed.root, version]))
    assert _without_times(document) == _without_times(other)


def test_every_file_of_the_history_has_a_kind(stores: tuple[litstore.Store, litstore.Store]) -> None:
    """The names above cover what the store holds, so a read of any file is told apart."""
    storage = stores[0].storage
    paths = [info.path for top in ("versions", "manifests", "fragments", "tags") for info in storage.walk(top)]
    kinds = {_kind(path) for path in [*paths, "litstore.json"]}
    assert kinds == {kind for kind, _ in _KINDS}, sorted(path for path in paths if _kind(path) == "other")


def test_a_fresh_process_answers_without_importing_pandas(tmp_path: Path) -> None:
    """pyarrow's conversions from Python import pandas (a third of a second): lookups and a near diff make none."""
    store = litstore.Store.create(tmp_path / "s", key="id", chunk_bytes=4096, format_version=3)
    store.append([_record(f"k{i:03d}", 0) for i in range(300)])
    store.upsert([_record("k001", 1), _record("new", 0)])
    store.delete(["k002"])
    code = (
        "import sys, litstore\n"
        "store = litstore.open(sys.argv[1])\n"
        "assert store['k001']['rev'] == 1 and 'k002' not in store and len(store.get_many(['k003', 'new'])) == 2\n"
        "counts = [store.diff(2, 3).counts, store.diff(1, 3).counts, store.diff(3, 1).counts, store.diff(3).counts]\n"
        "print(counts, 'pandas' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    changes = [
        {"added": 0, "removed": 1, "changed": 0},
        {"added": 1, "removed": 1, "changed": 1},
        {"added": 1, "removed": 1, "changed": 1},
        {"added": 0, "removed": 0, "changed": 0},
    ]
    assert result.stdout.split("] ")[1].strip() == "False", result.stdout
    assert json.loads(result.stdout.split("] ")[0].replace("'", '"') + "]") == changes
