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

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import litstore
from litstore.format import layout
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
    expected: dict[str, Record]  # the latest version's records

    def record_path(self, number: int) -> Path:
        return self.root / layout.version_record(number)

    def record(self, number: int) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.record_path(number).read_bytes())
        return loaded

    def rewrite_record(self, number: int, **changes: Any) -> None:
        self.record_path(number).write_text(json.dumps({**self.record(number), **changes}))

    def index_path(self, number: int) -> Path:
        return self.root / self.record(number)["indexes"]["train"]

    def live_chunk(self) -> str:
        return str(json.loads(self.index_path(3).read_bytes())["chunks"][0]["filename"])


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Planted:
    monkeypatch.setenv("LITSTORE_VIEWS", str(tmp_path / "views"))
    root, outside = tmp_path / "store", tmp_path / "outside"
    store = litstore.Store.create(root, chunk_bytes=1024)
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
    attempt("gc", lambda: litstore.open(root).gc(keep_last=1, grace=timedelta(0)))
    return outcomes


def _edit_manifests(planted: Planted, chunk: str) -> None:
    """Point the first row of every manifest file (deltas and checkpoints) at ``chunk``."""
    for path in sorted((planted.root / layout.MANIFESTS).iterdir()):
        table = pq.read_table(path)
        chunks = table.column("chunk").to_pylist()
        chunks[0] = chunk
        table = table.set_column(table.schema.get_field_index("chunk"), "chunk", pa.array(chunks, pa.string()))
        pq.write_table(table, path)


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


#: name -> how to plant it. The metadata cases name files outside the root in a commit
#: record, an index or a manifest; litstore refuses the name before it opens anything.
METADATA_CASES: dict[str, Callable[[Planted], None]] = {
    "latest record: transaction with ../": lambda p: p.rewrite_record(3, transaction="../../outside/aaaaaaaaaa"),
    "latest record: manifest outside": lambda p: p.rewrite_record(3, manifest="../outside/x.parquet"),
    "latest record: absolute index": lambda p: p.rewrite_record(3, indexes={"train": str(p.outside / "secret.txt")}),
    "old record: transaction with ../": lambda p: p.rewrite_record(1, transaction="../../outside/aaaaaaaaaa"),
    "old record: manifest outside": lambda p: p.rewrite_record(1, manifest="../outside/x.parquet"),
    "old record: absolute index": lambda p: p.rewrite_record(1, indexes={"train": "/etc/passwd"}),
    "index: absolute chunk": lambda p: _edit_index(p, 3, str(p.outside / "secret.txt")),
    "index: /dev/zero chunk": lambda p: _edit_index(p, 3, "/dev/zero"),
    "index: ../x chunk": lambda p: _edit_index(p, 3, "../x"),
    "index: chunk escaping fragments/": lambda p: _edit_index(p, 3, "fragments/../../outside/secret.txt"),
    "old index: absolute chunk": lambda p: _edit_index(p, 1, str(p.outside / "secret.txt")),
    "manifest: chunk outside": lambda p: _edit_manifests(p, "../outside/secret.txt"),
    "manifest: absolute chunk": lambda p: _edit_manifests(p, str(p.outside / "secret.txt")),
}

#: Cases where the names are the store's own but the files are not what they claim.
FILE_CASES: dict[str, Callable[[Planted], None]] = {
    "fragments/ links outside": lambda p: _relink(p, layout.FRAGMENTS),
    "manifests/ links outside": lambda p: _relink(p, layout.MANIFESTS),
    "versions/ links outside": lambda p: _relink(p, layout.VERSIONS),
    "a chunk is a FIFO": _fifo_chunk,
    "a chunk links outside": _linked_chunk,
}


@pytest.mark.parametrize("case", sorted(METADATA_CASES))
def test_metadata_naming_files_outside_the_root_is_refused(planted: Planted, case: str) -> None:
    METADATA_CASES[case](planted)
    outside, store = tree_state(planted.outside), tree_state(planted.root)

    outcomes = _exercise(planted.root)

    print(case, outcomes)
    assert tree_state(planted.outside) == outside
    if outcomes["gc"] != "ok":
        assert tree_state(planted.root) == store, "gc refused the store, yet changed it"


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_files_that_are_not_what_they_claim_are_refused(planted: Planted, case: str) -> None:
    FILE_CASES[case](planted)
    outside, store = tree_state(planted.outside), tree_state(planted.root)

    outcomes = _exercise(planted.root)

    print(case, outcomes)
    assert tree_state(planted.outside) == outside
