"""Stores from strangers, fuzzed: damage anywhere gives the stored records or a typed error.

A small pristine store (five versions of str/int/bytes/nested/numpy records in
several small chunks over two splits, with checkpoints and a tag) is built once. Each
hypothesis example copies it and applies one to three drawn mutations: metadata
files (``litstore.json``, commit records, tags, litdata indexes) truncated,
bit-flipped, deleted, or with one JSON value replaced (by hostile paths, huge ints,
nested objects); manifest files truncated, flipped, deleted, or with one cell of one
column rewritten; chunks flipped in header or payload, truncated, extended, deleted,
or replaced by a link or a FIFO. The store is format 6, so it also has key runs
(``manifests/*.keys``, each with its key filter), chunk hashes sidecars (``fragments/*/*.hashes``) and, for its
upserts and deletes, deletion vectors (``manifests/*.deletions``): these are flipped
(anywhere, or in their header or footer), truncated, extended, zeroed over a range,
deleted, or replaced by another file of their kind. Its commit records list chunks and
deletion vectors by delta between checkpoints, and gc's listings (``manifests/*.listing``)
stand where it expired a version below one: these are mutated as metadata.

A child process (``tests/fuzz_worker.py``, reused across examples) then opens the
copy and runs every read: lookups, ``get_many`` and ``in`` of every key (through the
key runs), ``items()`` and a full ``dataset()`` pass (items checked against the
sidecars), ``verify()``, at the latest version, at each version and at the tag; and
diffs of adjacent versions (which look keys up in the older one's runs) and of the
first and last. The test asserts that each read either worked or raised a
:class:`litstore.LitstoreError`; that every record read is exactly the pristine
record of that key in that version (never other data), a key that a lookup or ``in``
finds absent is absent from that version (and one ``in`` finds, present), every diff
is the pristine one; and that the child answered within
the time bound, so a crash or a hang fails the example instead of pytest.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import litstore
from litstore.format import chunkhashes, keyrun
from litstore.format import deletions as deletion_format
from tests.fuzz_worker import changes, digest

pytestmark = pytest.mark.integration
Draw = Callable[[st.SearchStrategy[Any]], Any]  # what data.draw is

#: 50 keeps CI under a minute; set LITSTORE_FUZZ_EXAMPLES for a longer local run.
EXAMPLES = int(os.environ.get("LITSTORE_FUZZ_EXAMPLES", "50"))
ANSWER_TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parents[2]

HOSTILE_STRINGS = (
    "../x",
    "/etc/passwd",
    "/dev/zero",
    "..",
    "",
    "fragments/../../outside/x",
    "fragments/0123456789abcdef0123/chunk-0123456789abcdef0123-0.bin",
    "versions/../litstore.json",
    "\x00",
    "a" * 300,
)
HUGE_INTS = (-1, 0, 2**31, 2**32 + 1, 2**63, 2**64 + 5, -(2**63) - 1, 10**40)

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(HOSTILE_STRINGS),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)


def _record(i: int, rev: int) -> dict[str, Any]:
    return {
        "id": f"k{i:02d}",
        "n": i * 1000 + rev,
        "big": 2**70 + i,
        "blob": bytes([i, rev]) * 9,
        "text": f"record {i} revision {rev}",
        "nested": {"list": [i, "x", {"rev": rev}], "pair": (i, rev), "none": None},
        "array": np.arange(6, dtype=np.float32) + i + rev,
        "ints": np.full((2, 3), i, dtype=np.int64),
    }


@dataclass(frozen=True, repr=False)
class Pristine:
    """The pristine store and what every version holds: ``expected[v][repr(key)]`` is a record's digest."""

    root: Path
    base: Path
    expected: dict[int, dict[str, str]]
    diffs: dict[tuple[int, int], list[list[str]]]
    tags: dict[str, int]
    keys: list[str]
    metadata: list[str]
    manifests: list[str]
    chunks: list[str]
    runs: list[str]
    sidecars: list[str]
    deletions: list[str]

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"Pristine({self.root})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    base = tmp_path_factory.mktemp("fuzz")
    root = base / "pristine"
    store = litstore.Store.create(
        root, key="id", splits=litstore.HashSplit(train=0.7, val=0.3), chunk_bytes=700, checkpoint_interval=2
    )
    store.append([_record(i, 0) for i in range(24)])
    store.upsert([_record(i, 1) for i in range(0, 30, 4)])
    store.tag("mid")
    store.delete([f"k{i:02d}" for i in range(1, 24, 5)])
    store.append([_record(i, 2) for i in range(30, 34)])
    store.upsert([_record(i, 3) for i in range(2, 34, 6)])
    # Format 6: versions 1, 3 and 5 are listed by delta. gc expiring 0 and 4 (the others tagged) writes the
    # listings of 1 and 5, whose walks then stop at the tombstones below them.
    store.tag("first", 1)
    store.tag("third", 3)
    store.gc(dry_run=False, keep_last=1, grace=timedelta(0))
    expected = {
        version.number: {repr(key): digest(record) for key, record in store.at(version.number).items()}
        for version in store.versions()
    }
    assert store.config.writes_key_runs, "the fuzz covers format 3's key runs and sidecars"
    assert store.config.writes_deletion_vectors, "and format 4's deletion vectors"
    assert store.config.writes_key_filters, "and format 5's key filters"
    assert store.config.writes_listing_deltas, "and format 6's listings by delta"
    numbers = sorted(number for number in expected if number > 0)
    diffs = {
        pair: sorted([repr(key), change] for key, change in changes(store.diff(*pair)))
        for pair in [*pairwise(numbers), (numbers[0], numbers[-1])]
    }
    files = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    assert [name for name in files if name.endswith(".deletions")], "its upserts and deletes mark rows dead"
    assert len([name for name in files if name.endswith(".listing")]) == 2, "and gc wrote format 6's listings"
    return Pristine(
        root=root,
        base=base,
        expected=expected,
        diffs=diffs,
        tags={name: store.tags[name] for name in store.tags},
        keys=[f"k{i:02d}" for i in range(34)] + ["nope"],
        metadata=[name for name in files if name.endswith((".json", ".listing"))],
        manifests=[name for name in files if name.endswith(".parquet")],
        chunks=[name for name in files if name.endswith(".bin")],
        runs=[name for name in files if name.endswith(".keys")],
        sidecars=[name for name in files if name.endswith(".hashes")],
        deletions=[name for name in files if name.endswith(".deletions")],
    )


class Worker:
    """One child process running ``tests.fuzz_worker``, restarted after a crash or a hang."""

    def __init__(self, log: Path) -> None:
        self._log = log
        self._process: subprocess.Popen[str] | None = None
        self._reply: IO[str] | None = None

    def _start(self) -> None:
        read, write = os.pipe()
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # (a caller's litstore too)
        env = {**os.environ, "FUZZ_REPLY_FD": str(write), "PYTHONPATH": path}
        with self._log.open("a") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzz_worker"],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                pass_fds=(write,),
                env=env,
                cwd=REPO,
                text=True,
            )
        os.close(write)
        self._reply = os.fdopen(read, "r", encoding="utf-8")

    def ask(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """The worker's outcomes for ``request``; fails the test on a crash or a hang."""
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._process is not None and self._process.stdin is not None and self._reply is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self._reply, selectors.EVENT_READ)
            ready = selector.select(ANSWER_TIMEOUT_S)
        line = self._reply.readline() if ready else ""
        if not line:
            code = self._process.poll()
            self.close()
            tail = self._log.read_text(errors="replace")[-3000:]
            what = f"crashed with exit code {code}" if code is not None else f"hung for {ANSWER_TIMEOUT_S:.0f} s"
            pytest.fail(f"the worker {what} on {request['root']}; its output ends:\n{tail}")
        outcomes: list[dict[str, Any]] = json.loads(line)
        return outcomes

    def close(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            if self._process.stdin is not None:
                self._process.stdin.close()
        if self._reply is not None:
            self._reply.close()
        self._process, self._reply = None, None


@pytest.fixture(scope="module")
def worker(pristine: Pristine) -> Iterator[Worker]:
    running = Worker(pristine.base / "worker.log")
    yield running
    running.close()


# -- mutations ------------------------------------------------------------------------------


def _flip(data: bytes, draw: Draw, start: int = 0, end: int | None = None) -> bytes:
    end = len(data) if end is None else min(end, len(data))
    if end <= start:
        return data
    flipped = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        flipped[draw(st.integers(start, end - 1))] ^= draw(st.integers(1, 255))
    return bytes(flipped)


def _truncate(data: bytes, draw: Draw) -> bytes:
    return data[: draw(st.integers(0, max(len(data) - 1, 0)))]


def _json_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _json_paths(inner, (*path, name))
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield from _json_paths(inner, (*path, position))


def _replace_json(data: bytes, draw: Draw) -> bytes:
    try:
        document = json.loads(data)
    except ValueError:  # an earlier mutation damaged it
        return data
    path = draw(st.sampled_from(list(_json_paths(document))))
    new = draw(json_values)
    if not path:
        return json.dumps(new).encode()
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return json.dumps(document).encode()


def _mutate_metadata(root: Path, name: str, draw: Draw) -> str:
    path = root / name
    if not path.is_file():  # an earlier mutation deleted it
        return f"{name} was already deleted"
    how = draw(st.sampled_from(("truncate", "flip", "replace value", "replace value", "delete")))
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(_truncate(path.read_bytes(), draw))
    elif how == "flip":
        path.write_bytes(_flip(path.read_bytes(), draw))
    else:
        path.write_bytes(_replace_json(path.read_bytes(), draw))
    return f"{how} {name}"


def _cell_value(table: pa.Table, column: str, pristine: Pristine, draw: Draw) -> Any:
    values = table.column(column).to_pylist()
    choices: list[st.SearchStrategy[Any]] = [st.sampled_from(values)] if values else []
    if column == "chunk":
        choices += [st.sampled_from(pristine.chunks), st.sampled_from(HOSTILE_STRINGS)]
    elif column == "row":
        choices += [st.integers(0, 40), st.integers(0, 2**32 - 1)]
    elif column in ("key", "split", "change"):
        choices += [st.sampled_from(("k00", "k01", "train", "val", "test", "added", "deleted", "bogus")), st.text()]
    elif column == "content_hash":
        choices += [st.binary(min_size=16, max_size=16)]
    else:  # key_hash, version
        choices += [st.integers(0, 2**63 - 1)]
    return draw(st.one_of(choices))


def _mutate_manifest(root: Path, pristine: Pristine, name: str, draw: Draw) -> str:
    path = root / name
    how = draw(st.sampled_from(("truncate", "flip", "delete", "rewrite cell", "rewrite cell")))
    if not path.is_file():
        return f"{name} was already deleted"
    if how == "delete":
        path.unlink()
        return f"delete {name}"
    if how == "truncate":
        path.write_bytes(_truncate(path.read_bytes(), draw))
        return f"truncate {name}"
    if how == "flip":
        path.write_bytes(_flip(path.read_bytes(), draw))
        return f"flip {name}"
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):  # an earlier mutation already damaged or deleted it
        return f"cannot rewrite the damaged {name}"
    if table.num_rows == 0:
        return f"nothing to rewrite in {name}"
    column = draw(st.sampled_from(table.column_names))
    row = draw(st.integers(0, table.num_rows - 1))
    value = _cell_value(table, column, pristine, draw)
    values = table.column(column).to_pylist()
    values[row] = value
    field = table.schema.field(column)
    try:
        array = pa.array(values, type=field.type)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return f"cannot store {value!r} in {column} of {name}"
    pq.write_table(table.set_column(table.schema.get_field_index(column), field, array), path)
    return f"rewrite {name} {column}[{row}] = {value!r}"


def _mutate_chunk(root: Path, name: str, draw: Draw) -> str:
    path = root / name
    if path.is_symlink() or not path.is_file():  # an earlier mutation replaced it
        return f"{name} was already replaced"
    data = path.read_bytes()
    how = draw(st.sampled_from(("flip header", "flip payload", "truncate", "extend", "delete", "link", "fifo")))
    if how in ("delete", "link", "fifo"):
        path.unlink()
        if how == "link":
            outside = root.parent / f"outside-{path.name}"
            outside.write_bytes(data)
            path.symlink_to(outside)
        elif how == "fifo":
            os.mkfifo(path)
    elif how == "flip header":
        count = int.from_bytes(data[:4], "little") if len(data) >= 4 else 0
        path.write_bytes(_flip(data, draw, 0, 4 + 4 * (count + 1)))
    elif how == "flip payload":
        path.write_bytes(_flip(data, draw, draw(st.integers(0, len(data) - 1))))
    elif how == "truncate":
        path.write_bytes(_truncate(data, draw))
    else:
        path.write_bytes(data + draw(st.binary(min_size=1, max_size=64)))
    return f"{how} {name}"


def _mutate_index_file(root: Path, name: str, others: list[str], header: int, footer: int, draw: Draw) -> str:
    """Damage a key run or a hashes sidecar: ``header`` and ``footer`` are the bytes of its fixed head and tail."""
    path = root / name
    if not path.is_file():
        return f"{name} was already deleted"
    data = path.read_bytes()
    how = draw(st.sampled_from(("flip", "flip header", "flip footer", "truncate", "extend", "zero", "delete", "swap")))
    if how == "delete":
        path.unlink()
    elif how == "flip":
        path.write_bytes(_flip(data, draw))
    elif how == "flip header":
        path.write_bytes(_flip(data, draw, 0, header))
    elif how == "flip footer":
        path.write_bytes(_flip(data, draw, max(len(data) - footer, 0)))
    elif how == "truncate":
        path.write_bytes(_truncate(data, draw))
    elif how == "extend":
        path.write_bytes(data + draw(st.binary(min_size=1, max_size=64)))
    elif how == "zero":
        start = draw(st.integers(0, max(len(data) - 1, 0)))
        end = draw(st.integers(start, len(data)))
        path.write_bytes(data[:start] + bytes(end - start) + data[end:])
    else:  # another file of its kind in its place: the same size where there is one (it passes a length check)
        same_size = [other for other in others if other != name and (root / other).is_file()]
        alike = [other for other in same_size if (root / other).stat().st_size == len(data)]
        if not same_size:
            return f"no other file to put in place of {name}"
        other = draw(st.sampled_from(alike or same_size))
        path.write_bytes((root / other).read_bytes())
        return f"swap {name} for {other}"
    return f"{how} {name}"


def _mutate(root: Path, pristine: Pristine, draw: Draw) -> str:
    kind = draw(st.sampled_from(("metadata", "manifest", "chunk", "key run", "sidecar", "deletions")))
    if kind == "metadata":
        return _mutate_metadata(root, draw(st.sampled_from(pristine.metadata)), draw)
    if kind == "manifest":
        return _mutate_manifest(root, pristine, draw(st.sampled_from(pristine.manifests)), draw)
    if kind == "key run":
        run = draw(st.sampled_from(pristine.runs))
        return _mutate_index_file(root, run, pristine.runs, 0, keyrun.FOOTER.size, draw)
    if kind == "sidecar":
        sidecar = draw(st.sampled_from(pristine.sidecars))
        head, tail = chunkhashes.HEADER.size, chunkhashes.FOOTER.size
        return _mutate_index_file(root, sidecar, pristine.sidecars, head, tail, draw)
    if kind == "deletions":
        vectors = draw(st.sampled_from(pristine.deletions))
        return _mutate_index_file(root, vectors, pristine.deletions, len(deletion_format.MAGIC), 0, draw)
    return _mutate_chunk(root, draw(st.sampled_from(pristine.chunks)), draw)


# -- checks -----------------------------------------------------------------------------------


def _check(outcomes: list[dict[str, Any]], pristine: Pristine, mutations: list[str]) -> None:
    """Every read worked or raised a LitstoreError, and read only pristine records of its version."""
    for outcome in outcomes:
        where = f"{outcome['op']} at {outcome['ref']!r} after {mutations}"
        if "error" in outcome:
            assert "litstore.errors.LitstoreError" in outcome["error"], (
                f"{where} raised {outcome['error'][0]}: {outcome['message']}\n{outcome.get('traceback', '')}"
            )
            continue
        ref, claimed = outcome["ref"], outcome["claimed"]
        if outcome["op"] == "diff":
            assert claimed == ref[1], f"{where}: asked for a diff to version {ref[1]}, got one to {claimed}"
            assert sorted(outcome["records"]) == pristine.diffs[tuple(ref)], f"{where}: not the committed diff"
            continue
        if isinstance(ref, int):
            assert claimed == ref, f"{where}: asked for version {ref}, got a view of version {claimed}"
        committed = pristine.expected.get(claimed, {})
        if outcome["op"] == "in":
            wrong = [key for key, found in outcome["records"] if found and key not in committed]
            assert not wrong, f"{where}: version {claimed} does not hold {wrong}"
            lost = [key for key, found in outcome["records"] if not found and key in committed]
            assert not lost, f"{where}: version {claimed} holds {lost}"
            continue
        for key, found in outcome["records"]:  # a lookup's None: it found no record of key
            assert committed.get(key) == found, f"{where}: record {key} is not the one version {claimed} committed"


def _request(root: Path, views: Path, pristine: Pristine) -> dict[str, Any]:
    return {
        "root": str(root),
        "views": str(views),
        "keys": pristine.keys,
        "versions": [number for number in sorted(pristine.expected) if number > 0],  # version 0 is empty
        "tags": sorted(pristine.tags),
        "diffs": sorted(pristine.diffs),
    }


def _fresh_copy(pristine: Pristine) -> tuple[Path, Path, Path]:
    example = Path(tempfile.mkdtemp(dir=pristine.base, prefix="example-"))
    root = example / "store"
    shutil.copytree(pristine.root, root, symlinks=True)
    return example, root, example / "views"


def test_the_pristine_store_reads_back_every_record(pristine: Pristine, worker: Worker) -> None:
    """The checks themselves: on an undamaged copy every read works and reads every record."""
    example, root, views = _fresh_copy(pristine)
    try:
        outcomes = worker.ask(_request(root, views, pristine))
    finally:
        shutil.rmtree(example)
    _check(outcomes, pristine, [])
    for outcome in outcomes:
        assert "error" not in outcome, outcome
        if outcome["op"] in ("lookup", "get_many", "items", "dataset"):
            expected = pristine.expected[outcome["claimed"]]
            found = [(key, record) for key, record in outcome["records"] if record is not None]
            assert sorted(found) == sorted(expected.items()), outcome["op"]
        elif outcome["op"] == "in":
            present = {key for key, found in outcome["records"] if found}
            assert present == set(pristine.expected[outcome["claimed"]]), outcome
    assert {tuple(outcome["ref"]) for outcome in outcomes if outcome["op"] == "diff"} == set(pristine.diffs)
    for (old, new), listed in pristine.diffs.items():  # the diffs the fuzz expects are what the versions hold
        before, after = pristine.expected[old], pristine.expected[new]
        assert sorted((key, change.split()[0]) for key, change in listed) == sorted(
            [(key, "added") for key in after.keys() - before.keys()]
            + [(key, "removed") for key in before.keys() - after.keys()]
            + [(key, "changed") for key in after.keys() & before.keys() if after[key] != before[key]]
        )
        assert listed, "every diff checked has changes to get wrong"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: an example is already a few named mutations
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_store_gives_its_records_or_a_typed_error(
    pristine: Pristine, worker: Worker, data: st.DataObject
) -> None:
    example, root, views = _fresh_copy(pristine)
    try:
        mutations = [_mutate(root, pristine, data.draw) for _ in range(data.draw(st.integers(1, 3)))]
        started = time.monotonic()
        outcomes = worker.ask(_request(root, views, pristine))
        assert time.monotonic() - started < ANSWER_TIMEOUT_S
        _check(outcomes, pristine, mutations)
    finally:
        shutil.rmtree(example, ignore_errors=True)


# -- what the fuzz found, pinned ---------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: (10**9).to_bytes(4, "little") + data[4:], id="header item count"),
        pytest.param(lambda data: data[:2], id="truncated inside the header"),
    ],
)
def test_streaming_a_chunk_with_a_damaged_header_is_an_integrity_error(
    pristine: Pristine, tmp_path: Path, damage: Any
) -> None:
    """litdata checks a chunk's header against index.json while iterating; its RuntimeError must come out typed
    (or the header's count is refused first, where the chunk's live rows are made: a chunk with dead rows)."""
    root = tmp_path / "store"
    shutil.copytree(pristine.root, root)
    store = litstore.open(root)
    chunk = root / store.chunks()["train"][0].filename
    chunk.write_bytes(damage(chunk.read_bytes()))

    with pytest.raises(litstore.IntegrityError, match=r"failed to read a chunk|does not hold the \d+ items"):
        list(store.dataset(views_dir=tmp_path / "views"))


def test_a_commit_record_without_its_manifest_is_refused(pristine: Pristine, tmp_path: Path) -> None:
    """Version 3 (a delete, no checkpoint) naming no manifest would read as version 2, deleted keys and all."""
    root = tmp_path / "store"
    shutil.copytree(pristine.root, root)
    record = root / "versions" / "00000003.json"
    document = json.loads(record.read_bytes())
    assert document["checkpoint"] is None and document["operation"] == "delete"
    record.write_text(json.dumps({**document, "manifest": None}))

    store = litstore.open(root)
    with pytest.raises(litstore.IntegrityError, match="names its manifest delta or its checkpoint"):
        store.at(3)
    assert {repr(key) for key in store.keys()} == set(pristine.expected[store.version.number])
