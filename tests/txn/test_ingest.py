"""Parallel ingest (``Store.ingest``) and writes of inputs bigger than one run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state

from ._workers import failing_generator, failing_on_13, one_record, record, records_of_line


@pytest.mark.integration
def test_ingest_in_two_workers_makes_one_version(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id", splits=litstore.HashSplit(train=0.9, val=0.1), chunk_bytes=4096)
    lines = [f"{start}:25" for start in range(0, 1000, 25)]
    version = store.ingest(records_of_line, lines, num_workers=2, message="from lines", progress=False)
    assert version.number == 1 and version.added == 1000 and version.message == "from lines"
    expected = {f"k{i:04d}": record(i) for i in range(1000)}
    reopened = litstore.open(store.root)
    assert dict(reopened.items()) == expected
    assert reopened.verify(expected_keys=expected).ok


def test_ingest_in_process_with_one_record_or_none_per_input(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    version = store.ingest(one_record, range(990, 1010), num_workers=0, progress=False)
    kept = [i for i in range(990, 1010) if not (i > 1000 and i % 2)]
    assert version.added == len(kept) == 15
    assert sorted(store.keys()) == sorted(f"k{i:04d}" for i in kept)
    # upsert mode: changed records replace, unchanged ones are skipped
    assert store.ingest(one_record, range(995, 1005), num_workers=0, mode="upsert", progress=False) == version


@pytest.mark.integration
@pytest.mark.parametrize(("fn", "named"), [(failing_on_13, "input 13"), (failing_generator, "input 7")])
def test_a_failing_input_is_named_and_nothing_is_committed(
    make_store: Callable[..., litstore.Store], fn: Callable[[int], object], named: str
) -> None:
    store = make_store(key="id", chunk_bytes=2048)
    store.append([record(5000)])
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IngestError, match=named) as raised:
        store.ingest(fn, range(40), num_workers=2, progress=False)
    assert raised.value.position in (13, 7)
    assert tree_state(Path(store.root)) == before, "staged fragments are removed, nothing committed"
    assert litstore.open(store.root).version.number == 1


@pytest.mark.integration
def test_duplicate_keys_across_workers_commit_nothing(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.DuplicateKeyError, match="k0010"):
        store.ingest(records_of_line, ["0:20", "10:20"], num_workers=2, progress=False)
    assert tree_state(Path(store.root)) == before


def test_an_input_bigger_than_a_run_streams_in_runs(make_store: Callable[..., litstore.Store]) -> None:
    """Records are written run by run; duplicates across runs are still caught, nothing committed."""
    store = make_store(key="id", chunk_bytes=64 * 1024)
    big = 20_000  # x ~1 KiB: more than the minimum run (8 MiB) + 2 x chunk_bytes, so several runs

    def records(duplicate: bool) -> object:
        for i in range(big):
            yield {"id": f"r{i:06d}", "blob": bytes([i % 256]) * 1000}
        if duplicate:
            yield {"id": "r000001", "blob": b"again"}

    before = tree_state(Path(store.root))
    with pytest.raises(litstore.DuplicateKeyError, match="r000001"):
        store.append(records(duplicate=True))
    assert tree_state(Path(store.root)) == before
    version = store.append(records(duplicate=False))
    assert version.added == big
    assert store["r012345"]["blob"] == bytes([12345 % 256]) * 1000
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    assert all(name.startswith(layout.FRAGMENTS + "/") for name in listed) and len(listed) > 100
    assert store.verify().ok


def test_ingest_refuses_bad_arguments(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    with pytest.raises(litstore.InvalidArgumentError):
        store.ingest(one_record, range(3), num_workers=-1, progress=False)
    with pytest.raises(litstore.InvalidArgumentError):
        store.ingest("not a function", range(3), progress=False)  # type: ignore[arg-type]
