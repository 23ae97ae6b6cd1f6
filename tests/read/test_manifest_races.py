"""A reader composing a version's manifest while gc expires the versions below it.

gc writes a checkpoint for each kept version whose manifest chain passes through a
version it expires, then writes tombstones newest first and removes the files only
expired versions need (their deltas). A reader that listed the manifests directory
before gc wrote the checkpoint, or walked the chain before gc removed its deltas, must
still compose the kept version, not call it gone or damaged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import litstore
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.read import manifests
from litstore.read import version as version_module
from litstore.storage import Storage
from litstore.txn.checkpoint import write_checkpoint


class _GcOnRead:
    """Forwards every ``Storage`` call; the first read of a path ``trigger`` accepts runs ``action`` first."""

    def __init__(self, inner: Storage, trigger: Callable[[str], bool], action: Callable[[], Any]) -> None:
        self._inner = inner
        self._trigger = trigger
        self._action: Callable[[], Any] | None = action

    def _before(self, path: str) -> None:
        if self._action is not None and self._trigger(path):
            action, self._action = self._action, None
            action()

    def read(self, path: str) -> bytes:
        self._before(path)
        return self._inner.read(path)

    def read_range(self, path: str, start: int, length: int) -> bytes:
        self._before(path)
        return self._inner.read_range(path, start, length)

    def reading(self, path: str) -> Any:
        self._before(path)
        return self._inner.reading(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    store = make_store(chunk_bytes=1024)
    for start in range(0, 50, 10):
        store.append([{"id": f"k{i:03d}", "text": "x" * 40} for i in range(start, start + 10)])
    store.delete(["k003", "k017"])
    assert store.head().version.number == 6
    assert all(store.at(n).version.checkpoint is None for n in range(2, 7))  # one chain of deltas
    return store


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = (table.column(name).to_pylist() for name in ("key", "content_hash", "chunk", "row"))
    return sorted(zip(*columns, strict=True))


def _gc(store: litstore.Store) -> Callable[[], None]:
    return lambda: litstore.open(store.root).gc(dry_run=False, keep_last=1, grace=timedelta(0))


@pytest.mark.parametrize(
    "when",
    [
        "walking",  # the chain's record 4 is read after gc tombstoned it (the checkpoint listed before gc wrote it)
        "reading",  # the chain was walked; gc then removes the deltas of the versions it expires
    ],
)
def test_a_manifest_composed_while_gc_expires_its_chain_is_the_kept_versions(
    make_store: Callable[..., litstore.Store], when: str
) -> None:
    store = _store(make_store)
    expected = _rows(manifests.compose_manifest(store.storage, store.config, 6))
    if when == "walking":
        trigger: Callable[[str], bool] = lambda path: path == layout.version_record(4)  # noqa: E731
    else:
        trigger = lambda path: path.startswith(f"{layout.MANIFESTS}/") and path.endswith(".parquet")  # noqa: E731
    racing = _GcOnRead(store.storage, trigger, _gc(store))

    got = manifests.compose_manifest(racing, store.config, 6)  # type: ignore[arg-type]

    assert _rows(got) == expected
    assert [version.number for version in litstore.open(store.root).versions()] == [6]


def test_a_manifest_streamed_while_gc_expires_its_chain_is_the_kept_versions(
    make_store: Callable[..., litstore.Store],
) -> None:
    store = _store(make_store)
    expected = _rows(manifests.compose_manifest(store.storage, store.config, 6))
    racing = _GcOnRead(store.storage, lambda path: path == layout.version_record(4), _gc(store))

    schema, tables = manifests.stream_manifest(racing, store.config, 6)  # type: ignore[arg-type]

    assert _rows(pa.concat_tables([table.cast(schema) for table in tables])) == expected


@pytest.mark.parametrize("call", ["sql", "keys", "checkpoint"])
def test_a_manifest_streamed_whole_while_gc_removes_its_deltas_is_the_kept_versions(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """``sql()``, ``keys()`` and a streamed checkpoint read every row of the chain before they answer: gc
    removing a delta of it once the walk is done (having checkpointed the kept version) means walking again,
    not a MissingFileError."""
    store = _store(make_store)
    expected = _rows(manifests.compose_manifest(store.storage, store.config, 6))
    trigger = lambda path: path.startswith(f"{layout.MANIFESTS}/") and path.endswith(".parquet")  # noqa: E731
    racing = _GcOnRead(store.storage, trigger, _gc(store))
    monkeypatch.setattr(version_module, "STREAMED_ROWS", 0)  # stream even this small version
    reader = version_module.VersionReader(racing, store.config, store.at(6).version)  # type: ignore[arg-type]

    if call == "sql":
        got = reader.sql("SELECT key, content_hash, chunk, row FROM manifest")
        assert _rows(got) == expected
    elif call == "keys":
        assert reader.keys() == sorted(row[0] for row in expected)
    else:
        empty = manifest_format.delta_schema(store.config.key_type).empty_table()
        path = layout.manifest_checkpoint(7, "0" * 32)
        write_checkpoint(reader, empty, path)
        written = manifest_format.from_parquet(store.storage.read(path), path, store.config.key_type, False)
        assert _rows(written) == expected
    assert racing._action is None  # gc ran in the middle
    assert [version.number for version in litstore.open(store.root).versions()] == [6]
