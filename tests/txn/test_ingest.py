"""Parallel ingest (``Store.ingest``) and writes of inputs bigger than one run."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import litstore
from litstore.format import layout
from tests.conftest import tree_state

from . import _stopping
from ._workers import (
    MARK,
    exiting_on_7,
    failing_first_slow_after,
    failing_generator,
    failing_on_13,
    marked_record,
    one_record,
    record,
    records_of_line,
)


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
def test_a_failure_stops_the_other_workers(make_store: Callable[..., litstore.Store], tmp_path: Path) -> None:
    """Once an input fails, the other workers take no more inputs: the ingest does not run to the end."""
    store = make_store(key="id")
    ran = tmp_path / "ran"
    ran.mkdir()
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IngestError, match="input 0"):
        store.ingest(failing_first_slow_after, [f"{ran}:{i}" for i in range(400)], num_workers=2, progress=False)
    assert len(list(ran.iterdir())) < 200, "the other worker went on through its inputs"
    assert tree_state(Path(store.root)) == before


@pytest.mark.integration
def test_each_worker_stages_one_fragment(make_store: Callable[..., litstore.Store]) -> None:
    """Workers take small blocks of inputs from one queue, each into its own fragment: few partly filled chunks."""
    store = make_store(key="id", chunk_bytes=1 << 20)
    lines = [f"{start}:10" for start in range(0, 1000, 10)]
    version = store.ingest(records_of_line, lines, num_workers=2, progress=False)
    assert version.added == 1000 and 1 <= len(version.fragments) <= 2
    assert len([chunk for chunks in store.chunks().values() for chunk in chunks]) <= 2
    in_process = store.ingest(records_of_line, ["1000:500", "1500:500"], num_workers=0, progress=False)
    assert in_process.added == 1000 and len(in_process.fragments) == 1


@pytest.mark.integration
def test_workers_left_without_inputs_or_records_leave_nothing(make_store: Callable[..., litstore.Store]) -> None:
    """More workers than inputs, or inputs that make no records: no empty fragment is left behind."""
    store = make_store(key="id")
    version = store.ingest(records_of_line, ["0:5"], num_workers=3, progress=False)
    assert version.added == 5 and len(version.fragments) == 1
    listed = {path.name for path in (Path(store.root) / layout.FRAGMENTS).iterdir()}
    assert listed == set(version.fragments)
    before = tree_state(Path(store.root))
    assert store.ingest(one_record, [1001, 1003, 1005], num_workers=2, progress=False) == version  # all None
    assert store.ingest(one_record, [1001, 1003], num_workers=0, progress=False) == version
    assert tree_state(Path(store.root)) == before


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

    def records(duplicate: bool) -> Iterator[dict[str, object]]:
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


@pytest.mark.integration
def test_what_cannot_reach_a_worker_is_named_and_nothing_is_committed(
    make_store: Callable[..., litstore.Store],
) -> None:
    """An input or a function that cannot be pickled is a typed error naming it, never a silently lost input."""
    store = make_store(key="id")
    before = tree_state(Path(store.root))
    inputs: list[object] = [*range(5), threading.Lock(), *range(6, 40)]
    with pytest.raises(litstore.IngestError, match=r"input 5 .*cannot be sent to a worker") as raised:
        store.ingest(one_record, inputs, num_workers=2, progress=False)
    assert raised.value.position == 5
    with pytest.raises(litstore.InvalidArgumentError, match="importable"):
        store.ingest(lambda i: record(i), range(3), num_workers=2, progress=False)
    assert tree_state(Path(store.root)) == before


@pytest.mark.integration
def test_workers_see_the_environment_of_each_call(
    make_store: Callable[..., litstore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers forked from the long-lived fork server still run with the caller's current environment."""
    store = make_store(key="id")
    monkeypatch.setenv(MARK, "first")
    store.ingest(marked_record, range(4), num_workers=2, progress=False)
    monkeypatch.setenv(MARK, "second")
    store.ingest(marked_record, range(4, 8), num_workers=2, progress=False)
    monkeypatch.delenv(MARK)
    store.ingest(marked_record, range(8, 12), num_workers=2, progress=False)
    marks = {key: value["mark"] for key, value in store.items()}
    assert marks == {f"k{i:04d}": ["first", "second", "<unset>"][i // 4] for i in range(12)}


@pytest.mark.integration
def test_a_worker_that_dies_is_a_typed_error_and_nothing_is_committed(
    make_store: Callable[..., litstore.Store],
) -> None:
    """A worker process that exits (killed, or unable to import the caller's script) raises IngestError."""
    store = make_store(key="id")
    store.append([record(5000)])
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IngestError, match="worker process died") as raised:
        store.ingest(exiting_on_7, range(40), num_workers=2, progress=False)
    assert raised.value.position is None
    reopened = litstore.open(store.root)
    assert reopened.version.number == 1 and dict(reopened.items()) == {"k5000": record(5000)}
    after = tree_state(Path(store.root))
    assert {path: digest for path, digest in after.items() if not path.startswith(layout.FRAGMENTS + "/")} == {
        path: digest for path, digest in before.items() if not path.startswith(layout.FRAGMENTS + "/")
    }, "only staged fragments may be left behind"
    store.gc(
        dry_run=False, grace=timedelta(0), break_leases=True
    )  # what a killed worker had staged is debris of a write that never committed
    assert tree_state(Path(store.root)) == before


def test_ingest_refuses_bad_arguments(make_store: Callable[..., litstore.Store]) -> None:
    store = make_store(key="id")
    with pytest.raises(litstore.InvalidArgumentError):
        store.ingest(one_record, range(3), num_workers=-1, progress=False)
    with pytest.raises(litstore.InvalidArgumentError):
        store.ingest("not a function", range(3), progress=False)  # type: ignore[arg-type]


def test_an_input_pickle_refuses_with_value_error_is_an_ingest_error(tmp_path: Path) -> None:
    """A ctypes pointer: pickle raises ValueError, which used to escape as a bare ValueError."""
    import ctypes

    store = litstore.Store.create(str(tmp_path / "s"))
    with pytest.raises(litstore.IngestError, match="cannot be sent to a worker"):
        store.ingest(str, [ctypes.pointer(ctypes.c_int(1))], num_workers=1, progress=False)
    assert store.version.number == 0


@pytest.mark.integration
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    ("fn", "named"),
    [(_stopping.exiting_on_7, r"input 7 .*SystemExit\(3\)"), (_stopping.fatal_on_4, r"input 4 .*Fatal")],
)
def test_what_fn_raises_beyond_exception_is_an_ingest_error(
    make_store: Callable[..., litstore.Store], fn: Callable[[int], object], named: str, num_workers: int
) -> None:
    """``sys.exit`` or another ``BaseException`` in fn is an IngestError naming the input; it never ends the caller."""
    store = make_store(key="id")
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IngestError, match=named) as raised:
        store.ingest(fn, range(12), num_workers=num_workers, progress=False)
    assert raised.value.position in (7, 4)
    assert tree_state(Path(store.root)) == before
    assert litstore.open(store.root).version.number == 0


@pytest.mark.integration
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (_stopping.number_on_3, r"fn returned 3 \(int\) for input 3"),
        (_stopping.text_on_5, r"fn returned 'k0005' \(str\) for input 5"),
        (_stopping.keys_on_6, r"fn returned an iterable holding 'k0006' \(str\) for input 6"),
    ],
)
def test_fn_returning_what_is_not_a_record_is_named(
    make_store: Callable[..., litstore.Store], fn: Callable[[int], object], named: str, num_workers: int
) -> None:
    """A number, a string, or an iterable of non-records: a typed error naming the input, nothing committed."""
    store = make_store(key="id")
    before = tree_state(Path(store.root))
    with pytest.raises(litstore.IngestError, match=named) as raised:
        store.ingest(fn, range(12), num_workers=num_workers, progress=False)
    assert raised.value.position in (3, 5, 6)
    assert tree_state(Path(store.root)) == before


def test_a_schema_model_judges_the_records_fn_returns(make_store: Callable[..., litstore.Store]) -> None:
    """Where the store has a model, what it accepts is a record (here: any object with the fields)."""
    store = make_store(key="id", schema=_stopping.Sample)
    version = store.ingest(_stopping.objects_of, range(5), num_workers=0, progress=False)
    assert version.added == 5 and store["k0003"] == {"id": "k0003", "value": 3}


_SCRIPT = """
import os
import sys

import litstore

with open(sys.argv[1], "a") as runs:  # one line each time this script runs
    runs.write(f"{__name__} {os.getpid()}\\n")


def made(i):
    return {"id": f"k{i}", "by": __name__}

{main}
"""
_GUARDED = """
if __name__ == "__main__":
    store = litstore.Store.create(sys.argv[2], key="id")
    for start in (0, 100):
        store.ingest(made, range(start, start + 100), num_workers=2)
    print(len(store), sorted({store[f"k{i}"]["by"] for i in range(200)}))
"""


def _run_script(tmp_path: Path, main: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    script, runs = tmp_path / "ingest_script.py", tmp_path / "runs.txt"
    script.write_text(_SCRIPT.replace("{main}", main))
    done = subprocess.run(
        [sys.executable, str(script), str(runs), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    return done, runs.read_text().splitlines()


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="workers are spawned here")
def test_the_callers_script_runs_once_for_every_worker_of_every_ingest(tmp_path: Path) -> None:
    """Workers find the caller's script imported by the fork server: it is not run again in each (a script that
    imports torch paid 1.5 s a worker per ingest), and fn still comes from it."""
    done, runs = _run_script(tmp_path, _GUARDED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "200 ['__mp_main__']"  # fn ran in the workers
    names = sorted(line.split()[0] for line in runs)
    assert names == ["__main__", "__mp_main__"], runs  # the caller, and the fork server: not 2 x 2 workers


def test_a_script_without_the_main_guard_is_still_named(tmp_path: Path) -> None:
    """The fork server cannot import a script that starts workers at its top level; each worker then runs it, as
    a spawned one would, and the ingest fails with the error that says to guard it."""
    litstore.Store.create(tmp_path / "store", key="id")
    done, _ = _run_script(tmp_path, "litstore.open(sys.argv[2]).ingest(made, range(10), num_workers=2)\n")
    assert done.returncode != 0
    assert "IngestError" in done.stderr and "if __name__ == '__main__':" in done.stderr
    assert len(litstore.open(tmp_path / "store")) == 0  # nothing committed
