"""Stores from strangers: a crafted store can make litstore fail, never reach outside its root.

Each test builds a real store, plants something hostile in it with direct file edits
(a commit record, index or manifest naming a file outside the root, a FIFO named like
a chunk, a top-level folder replaced by a link to a folder outside), then drives it
through the public API: open, lookups, iteration, ``verify``, ``dataset`` and
``gc(keep_last=1, grace=0)``. Every call either works or raises a
:class:`litstore.LitstoreError`; no file outside the root is read into a result,
changed or deleted; and where litstore refuses, the store is left byte for byte as
it was.

Also: a damaged ``litstore.json``, a ``schema`` reference that names an importable
module (``open`` must never import it), and ``sql()``, which must not reach the file
system.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import keyrun, layout
from litstore.format.models import STORE_FORMAT_VERSION
from tests.conftest import tree_state

Record = dict[str, Any]
SECRET = b"the user's own file, which no store may read, change or delete\n"


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i:03d}", "rev": rev, "text": f"record {i}.{rev} " * 4}


@dataclass
class Planted:
    """A store with versions 1..3, a folder beside it, and what each version holds."""

    root: Path
    outside: Path
    expected: dict[Any, Record]  # the latest version's records

    def record_path(self, number: int) -> Path:
        return self.root / layout.version_record(number)

    def record(self, number: int) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.record_path(number).read_bytes())
        return loaded

    def rewrite_record(self, number: int, **changes: Any) -> None:
        self.record_path(number).write_text(json.dumps({**self.record(number), **changes}))

    def index_path(self, number: int) -> Path:
        return self.root / str(self.record(number)["indexes"]["train"])

    def live_chunk(self) -> str:
        return litstore.open(self.root).chunks()["train"][0].filename


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Planted:
    """The planted store, of the format ``request.param`` (indirect parametrization) or the default."""
    monkeypatch.setenv("LITSTORE_VIEWS", str(tmp_path / "views"))
    root, outside = tmp_path / "store", tmp_path / "outside"
    format_version = getattr(request, "param", STORE_FORMAT_VERSION)
    store = litstore.Store.create(root, chunk_bytes=1024, format_version=format_version)
    store.append([_record(i) for i in range(40)])
    store.upsert([_record(i, rev=1) for i in range(0, 40, 5)])
    store.delete([f"k{i:03d}" for i in range(1, 40, 7)])
    expected = dict(store.items())
    # Beside the store: the user's own files, some named exactly like the store's own.
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    chunk = store.chunks()["train"][0].filename
    (outside / Path(chunk).name).write_bytes((root / chunk).read_bytes())
    (outside / Path(str(store.version.manifest)).name).write_bytes((root / str(store.version.manifest)).read_bytes())
    return Planted(root, outside, expected)


def _exercise(root: Path) -> dict[str, str]:
    """Drive the store through the public API; what each step did ("ok" or the error's type)."""
    outcomes: dict[str, str] = {}

    def attempt(name: str, step: Callable[[], object]) -> None:
        try:
            step()
        except litstore.LitstoreError as exc:
            outcomes[name] = type(exc).__name__
        else:
            outcomes[name] = "ok"

    def stream() -> None:
        records = list(litstore.open(root).dataset())
        assert len(records) == len(litstore.open(root))

    attempt("open", lambda: litstore.open(root))
    attempt("lookup", lambda: [litstore.open(root)[key] for key in litstore.open(root).keys()])
    attempt("items", lambda: dict(litstore.open(root).items()))
    attempt("versions", lambda: [litstore.open(root).at(v.number).keys() for v in litstore.open(root).versions()])
    attempt("verify", lambda: litstore.open(root).verify().raise_if_failed())
    attempt("dataset", stream)
    attempt("gc", lambda: litstore.open(root).gc(dry_run=False, keep_last=1, grace=timedelta(0)))
    return outcomes


def _edit_manifests(planted: Planted, chunk: str) -> None:
    """Point the first row of every manifest file (deltas and checkpoints) at ``chunk``."""
    for path in sorted((planted.root / layout.MANIFESTS).glob("*.parquet")):
        table = pq.read_table(path)
        chunks = table.column("chunk").to_pylist()
        chunks[0] = chunk
        table = table.set_column(table.schema.get_field_index("chunk"), "chunk", pa.array(chunks, pa.string()))
        pq.write_table(table, path)


def _edit_key_runs(planted: Planted, chunk: str) -> None:
    """Name ``chunk`` first in the chunk table of every key run, fixing the sizes the records give."""
    sizes: dict[str, int] = {}
    for number in (1, 2, 3):
        for ref in planted.record(number)["key_runs"]:
            path = planted.root / ref["path"]
            if ref["path"] in sizes:
                continue
            data = path.read_bytes()
            _, count, _, names_bytes, _, _, _ = keyrun.FOOTER.unpack(data[-keyrun.footer_size() :])
            start = count * keyrun.ENTRY.itemsize
            entries = np.frombuffer(data[:start], dtype=keyrun.ENTRY)
            names = data[start : start + names_bytes].decode().split("\n")
            path.write_bytes(keyrun.encode(entries, [chunk, *names[1:]]))
            sizes[ref["path"]] = path.stat().st_size
    for number in (1, 2, 3):
        runs = [{**ref, "size": sizes[ref["path"]]} for ref in planted.record(number)["key_runs"]]
        planted.rewrite_record(number, key_runs=runs)


def _edit_index(planted: Planted, number: int, filename: str) -> None:
    path = planted.index_path(number)
    document = json.loads(path.read_bytes())
    document["chunks"][0]["filename"] = filename
    path.write_text(json.dumps(document))


def _relink(planted: Planted, folder: str) -> None:
    """Move the store's ``folder`` outside and leave a link to it in its place."""
    moved = planted.outside / f"moved-{folder}"
    shutil.move(str(planted.root / folder), moved)
    (planted.root / folder).symlink_to(moved, target_is_directory=True)


def _fifo_chunk(planted: Planted) -> None:
    chunk = planted.root / planted.live_chunk()
    chunk.unlink()
    os.mkfifo(chunk)


def _linked_chunk(planted: Planted) -> None:
    chunk = planted.root / planted.live_chunk()
    chunk.unlink()
    chunk.symlink_to(planted.outside / chunk.name)


STEPS = ("open", "lookup", "items", "versions", "verify", "dataset", "gc")
_ALL = dict.fromkeys(STEPS, "IntegrityError")


def _failing(error: str, *steps: str) -> dict[str, str]:
    """The outcome of every step: ``error`` for ``steps``, "ok" for the others."""
    return {step: error if step in steps else "ok" for step in STEPS}


#: name -> (how to plant it, what each step must do). These name files outside the root
#: in a commit record, an index or a manifest: litstore refuses the name before it opens
#: anything; what does not read the damaged file works.
METADATA_CASES: dict[str, tuple[Callable[[Planted], None], dict[str, str]]] = {
    "latest record: transaction with ../": (lambda p: p.rewrite_record(3, transaction="../../outside/aaaa"), _ALL),
    "latest record: manifest outside": (lambda p: p.rewrite_record(3, manifest="../outside/x.parquet"), _ALL),
    "latest record: absolute index": (
        lambda p: p.rewrite_record(3, indexes={"train": str(p.outside / "secret.txt")}),
        _ALL,
    ),
    "old record: transaction with ../": (
        lambda p: p.rewrite_record(1, transaction="../../outside/aaaa"),
        _failing("IntegrityError", "versions", "gc"),
    ),
    "old record: manifest outside": (
        lambda p: p.rewrite_record(1, manifest="../outside/x.parquet"),
        _failing("IntegrityError", "versions", "gc"),
    ),
    "old record: absolute index": (
        lambda p: p.rewrite_record(1, indexes={"train": "/etc/passwd"}),
        _failing("IntegrityError", "versions", "gc"),
    ),
    "index: absolute chunk": (
        lambda p: _edit_index(p, 3, str(p.outside / "secret.txt")),
        _failing("IntegrityError", "verify", "dataset", "gc"),
    ),
    "index: /dev/zero chunk": (
        lambda p: _edit_index(p, 3, "/dev/zero"),
        _failing("IntegrityError", "verify", "dataset", "gc"),
    ),
    "index: ../x chunk": (lambda p: _edit_index(p, 3, "../x"), _failing("IntegrityError", "verify", "dataset", "gc")),
    "index: chunk escaping fragments/": (
        lambda p: _edit_index(p, 3, "fragments/../../outside/secret.txt"),
        _failing("IntegrityError", "verify", "dataset", "gc"),
    ),
    "old index: absolute chunk": (
        lambda p: _edit_index(p, 1, str(p.outside / "secret.txt")),
        _failing("IntegrityError", "gc"),
    ),
    "manifests: chunk outside": (
        lambda p: _edit_manifests(p, "../outside/secret.txt"),
        _failing("IntegrityError", "lookup", "items", "versions", "verify"),
    ),
    "manifests: absolute chunk": (
        lambda p: _edit_manifests(p, str(p.outside / "secret.txt")),
        _failing("IntegrityError", "lookup", "items", "versions", "verify"),
    ),
    "key runs: chunk outside": (
        lambda p: _edit_key_runs(p, "../outside/secret.txt"),
        {**_failing("IntegrityError", "lookup"), "verify": "VerificationError"},  # verify reads the runs too
    ),
    "key runs: absolute chunk": (
        lambda p: _edit_key_runs(p, str(p.outside / "secret.txt")),
        {**_failing("IntegrityError", "lookup"), "verify": "VerificationError"},  # verify reads the runs too
    ),
}

#: The names are the store's own, but the files are not what they claim to be.
FILE_CASES: dict[str, tuple[Callable[[Planted], None], dict[str, str]]] = {
    "fragments/ links outside": (
        lambda p: _relink(p, layout.FRAGMENTS),
        _failing("UnsafePathError", "lookup", "items", "verify", "dataset", "gc"),
    ),
    "manifests/ links outside": (
        lambda p: _relink(p, layout.MANIFESTS),
        _failing("UnsafePathError", "lookup", "items", "versions", "verify", "gc"),
    ),
    "versions/ links outside": (lambda p: _relink(p, layout.VERSIONS), dict.fromkeys(STEPS, "UnsafePathError")),
    "a chunk is a FIFO": (_fifo_chunk, _failing("UnsafePathError", "lookup", "items", "verify", "dataset")),
    "a chunk links outside": (_linked_chunk, _failing("UnsafePathError", "lookup", "items", "verify", "dataset")),
}


#: What items() does instead at format 3, where it reads the index and the chunks' hashes
#: sidecars, not the manifest: it refuses a chunk name planted in the index and does not
#: read manifests/ at all.
_ITEMS_AT_FORMAT_3 = {
    "index: absolute chunk": "IntegrityError",
    "index: /dev/zero chunk": "IntegrityError",
    "index: ../x chunk": "IntegrityError",
    "index: chunk escaping fragments/": "IntegrityError",
    "manifests: chunk outside": "ok",
    "manifests: absolute chunk": "ok",
    "manifests/ links outside": "ok",
}


def _planted_cases() -> list[Any]:
    """(format, case) for every case, at format 2 and 3; key runs exist only at format 3."""
    return [
        pytest.param(format_version, case, id=f"format {format_version}: {case}")
        for format_version in (2, 3)
        for case in sorted({**METADATA_CASES, **FILE_CASES})
        if format_version == 3 or not case.startswith("key runs")
    ]


@pytest.mark.parametrize(("planted", "case"), _planted_cases(), indirect=["planted"])
def test_a_planted_store_never_reaches_outside_its_root(planted: Planted, case: str) -> None:
    plant, expected = {**METADATA_CASES, **FILE_CASES}[case]
    if litstore.open(planted.root).config.format_version == 3 and case in _ITEMS_AT_FORMAT_3:
        expected = {**expected, "items": _ITEMS_AT_FORMAT_3[case]}
    plant(planted)
    outside, store = tree_state(planted.outside), tree_state(planted.root)

    outcomes = _exercise(planted.root)

    # Streaming may refuse more than the other reads do (it may check items against the
    # manifest), never less: it must fail typed wherever they fail on the same file.
    streamed = outcomes.pop("dataset")
    assert outcomes == {step: outcome for step, outcome in expected.items() if step != "dataset"}
    if expected["dataset"] != "ok":
        assert streamed != "ok"
    assert tree_state(planted.outside) == outside, "a file outside the store root changed"
    if outcomes["gc"] != "ok":
        assert tree_state(planted.root) == store, "gc refused the store, yet changed it"
    else:  # gc expired versions 1 and 2 and kept the latest intact
        assert [version.number for version in litstore.open(planted.root).versions()] == [3]
        assert (planted.outside / "secret.txt").read_bytes() == SECRET


def test_gc_never_deletes_through_a_linked_folder(planted: Planted) -> None:
    """Debris-like files in a folder outside, reached by a link from the store, all survive gc."""
    debris = planted.root / layout.FRAGMENTS / "0123456789abcdef0123"
    debris.mkdir()
    (debris / "chunk-0123456789abcdef0123-0.bin").write_bytes(b"debris of a writer that never committed")
    os.utime(debris / "chunk-0123456789abcdef0123-0.bin", (0, 0))
    _relink(planted, layout.FRAGMENTS)
    outside = tree_state(planted.outside)
    assert any(name.endswith("chunk-0123456789abcdef0123-0.bin") for name in outside)

    with pytest.raises(litstore.UnsafePathError):
        litstore.open(planted.root).gc(dry_run=False, keep_last=1, grace=timedelta(0))
    with pytest.raises(litstore.UnsafePathError):
        litstore.open(planted.root).gc(dry_run=False)

    assert tree_state(planted.outside) == outside


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"\xff\xfe not json", id="not json"),
        pytest.param(lambda data: b"[1, 2, 3]", id="a list"),
        pytest.param(lambda data: data.replace(b'"key"', b'"kee"'), id="unknown field"),
        pytest.param(
            lambda data: data.replace(
                f'"format_version": {STORE_FORMAT_VERSION}'.encode(),
                f'"format_version": {STORE_FORMAT_VERSION + 1}'.encode(),
            ),
            id="newer format",
        ),
    ],
)
def test_a_damaged_config_is_an_integrity_error(planted: Planted, damage: Callable[[bytes], bytes]) -> None:
    config = planted.root / layout.CONFIG
    config.write_bytes(damage(config.read_bytes()))
    store = tree_state(planted.root)

    with pytest.raises(litstore.IntegrityError, match=r"litstore\.json"):
        litstore.open(planted.root)

    assert tree_state(planted.root) == store


# -- format 6: records listed by delta, and gc's listings ---------------------------------------

_UNLISTED = "fragments/0123456789abcdef0123/chunk-0123456789abcdef0123-0.bin"


def _marked_ref(planted: Planted, chunk: str) -> list[dict[str, Any]]:
    """Version 3's own deletion references, the first given to ``chunk``."""
    refs: list[dict[str, Any]] = planted.record(3)["deletions"]
    return [{**refs[0], "chunk": chunk}, *refs[1:]]


def _listed_at(planted: Planted, number: int) -> dict[str, Any]:
    chunk = litstore.open(planted.root).at(number).chunks()["train"][0]
    return {"chunk": chunk.filename, "items": chunk.num_items, "size": chunk.num_bytes}


#: name -> how a record listed by delta contradicts its chain. Steps that read the listing
#: (items, verify, dataset, gc) must refuse it typed; lookups read key runs and work.
DELTA_CASES: dict[str, Callable[[Planted], None]] = {
    "drops a chunk its parent does not list": lambda p: p.rewrite_record(3, dropped_chunks=[_UNLISTED]),
    "adds a chunk its parent lists": lambda p: p.rewrite_record(3, added_chunks={"train": [_listed_at(p, 2)]}),
    "marks a chunk the version does not list": lambda p: p.rewrite_record(3, deletions=_marked_ref(p, _UNLISTED)),
    "an older record drops a chunk it never had": lambda p: p.rewrite_record(2, dropped_chunks=[_UNLISTED]),
}


@pytest.mark.parametrize("case", sorted(DELTA_CASES))
def test_a_record_listed_by_delta_that_contradicts_its_chain_is_refused(planted: Planted, case: str) -> None:
    assert planted.record(3).get("listed_by_delta") and planted.record(2).get("listed_by_delta")
    DELTA_CASES[case](planted)

    _assert_listing_readers_refuse(planted.root)


@pytest.mark.parametrize(
    "case",
    ["an added chunk with more items than its bytes hold", "an added chunk outside fragments/", "an index too"],
)
def test_a_record_listed_by_delta_with_a_bad_field_is_refused(planted: Planted, case: str) -> None:
    added = {**_listed_at(planted, 3), "chunk": _UNLISTED}
    if case.startswith("an added chunk with"):
        changes: dict[str, Any] = {"added_chunks": {"train": [{**added, "items": added["size"]}]}}
    elif case.startswith("an added chunk outside"):
        changes = {"added_chunks": {"train": [{**added, "chunk": "../outside/secret.txt"}]}}
    else:
        changes = {"indexes": {"train": layout.split_index(3, planted.record(3)["transaction"], "train")}}
    planted.rewrite_record(3, **changes)

    assert _exercise(planted.root) == _ALL


@pytest.fixture
def collected(planted: Planted) -> Planted:
    """The planted store after gc kept only version 3, which is listed by delta: gc wrote its listing."""
    litstore.open(planted.root).gc(dry_run=False, keep_last=1, grace=timedelta(0))
    assert planted.record(3).get("listed_by_delta")
    assert len(list((planted.root / layout.MANIFESTS).glob("*.listing"))) == 1
    assert dict(litstore.open(planted.root).items()) == planted.expected
    return planted


def _listing(planted: Planted) -> Path:
    return next((planted.root / layout.MANIFESTS).glob("*.listing"))


LISTING_CASES: dict[str, Callable[[Path], None]] = {
    "missing": lambda path: path.unlink(),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:-7]),
    "another version's": lambda path: path.write_text(json.dumps({**json.loads(path.read_bytes()), "number": 2})),
    "naming an unlisted vector": lambda path: path.write_text(
        json.dumps({**json.loads(path.read_bytes()), "chunks": {}})
    ),
}


@pytest.mark.parametrize("case", sorted(LISTING_CASES))
def test_a_damaged_listing_of_gc_is_an_integrity_error(collected: Planted, case: str) -> None:
    LISTING_CASES[case](_listing(collected))

    _assert_listing_readers_refuse(collected.root)


def _assert_listing_readers_refuse(root: Path) -> None:
    """Opening and lookups (which read no listing) work; every reader of the listing raises
    IntegrityError; the store is left exactly as it was."""
    store = tree_state(root)

    outcomes = _exercise(root)

    assert outcomes["open"] == "ok" and outcomes["lookup"] == "ok"
    for step in ("items", "verify", "dataset", "gc"):
        assert outcomes[step] == "IntegrityError", (step, outcomes)
    assert tree_state(root) == store


@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable module ``evilmod`` that leaves a marker file when imported; the marker's path."""
    directory, marker = tmp_path / "importable", tmp_path / "imported"
    directory.mkdir()
    (directory / "evilmod.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "from pydantic import BaseModel\nclass Record(BaseModel):\n    id: str\n"
    )
    monkeypatch.syspath_prepend(str(directory))
    yield marker
    sys.modules.pop("evilmod", None)


def test_open_never_imports_the_schema_a_store_names(planted: Planted, evil_module: Path) -> None:
    config_path = planted.root / layout.CONFIG
    config = json.loads(config_path.read_bytes())
    config["record_schema"] = {"qualname": "evilmod:Record", "json_schema": {"type": "object"}}
    config_path.write_text(json.dumps(config))

    store = litstore.open(planted.root)
    assert dict(store.items()) == planted.expected  # reads work without the model
    assert store.verify().ok
    with pytest.raises(litstore.SchemaError, match="evilmod:Record"):
        store.append([{"id": "new"}])  # writes need the model, passed explicitly

    assert not evil_module.exists(), "litstore imported a module named by the store"
    assert "evilmod" not in sys.modules


# -- sql() -----------------------------------------------------------------------------

ESCAPES = {
    "COPY TO a file": "COPY (SELECT * FROM manifest) TO '{target}' (FORMAT csv)",
    "COPY the manifest TO a file": "COPY manifest TO '{target}'",
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "read_blob": "SELECT * FROM read_blob('{secret}')",
    "a file as a table": "SELECT * FROM '/etc/passwd'",
    "ATTACH": "ATTACH '{target}' AS other",
    "INSTALL": "INSTALL httpfs",
    "LOAD": "LOAD httpfs",
    "SET enable_external_access": "SET enable_external_access = true",
    "RESET lock_configuration": "SET lock_configuration = false",
    "EXPORT DATABASE": "EXPORT DATABASE '{directory}'",
    "a Python variable": "SELECT * FROM SECRET_TABLE",
}

SECRET_TABLE = pa.table({"secret": ["a Python object in scope, not given to the query"]})


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_sql_cannot_reach_the_file_system(planted: Planted, tmp_path: Path, name: str) -> None:
    target, directory = tmp_path / "written.out", tmp_path / "exported"
    sql = ESCAPES[name].format(target=target, directory=directory, secret=planted.outside / "secret.txt")
    store = litstore.open(planted.root)
    before = tree_state(tmp_path)

    with pytest.raises(litstore.QueryError):
        store.sql(sql)

    assert not target.exists() and not directory.exists()
    assert tree_state(tmp_path) == before


def test_sql_still_answers_queries_on_the_manifest(planted: Planted) -> None:
    store = litstore.open(planted.root)
    rows = store.sql("SELECT split, count(*) AS n FROM manifest GROUP BY split").to_pylist()
    assert rows == [{"split": "train", "n": len(planted.expected)}]
    keys = store.sql("SELECT key FROM manifest WHERE key LIKE 'k00%' ORDER BY key").column("key").to_pylist()
    assert keys == sorted(key for key in planted.expected if key.startswith("k00"))
    assert store.sql("SELECT count(*) AS n FROM manifest", version=1).to_pylist() == [{"n": 40}]
