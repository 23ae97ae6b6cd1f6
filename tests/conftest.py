"""Shared fixtures: fresh stores on real directories or any backend, and a hash of every file they hold.

``make_store`` makes stores in local directories. ``make_any_store`` makes them on the
backend named by the ``backend`` fixture: ``local`` and ``memory`` by default, so a test
that takes it runs once on each, and once more on S3 (moto's server on loopback, as an
``integration`` test) under ``@ON_S3_TOO``. Tests on any backend compare what a store
holds with ``stored_state`` and reopen it with ``reopen``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import xxhash

import litstore

# ``s3_endpoint`` and ``s3_bucket`` for every test module; ``watch``, the durable-commit tests' watcher.
pytest_plugins = ["tests.s3_server", "tests.azurite_server", "tests.gcs_server", "tests.txn.durable_watch"]

BACKENDS = ["local", "memory"]

ON_S3_TOO = pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("s3", marks=pytest.mark.integration)])
"""Run a test that takes ``make_any_store`` on S3 as well as on the default backends."""


def tree_state(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) with a hash of its bytes."""
    return {
        str(path.relative_to(root)): xxhash.xxh3_128_hexdigest(path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def release_frames(caught: pytest.ExceptionInfo[BaseException]) -> None:
    """Clear the locals of the frames the caught error's traceback holds (and those of the errors it chains).

    A ``StreamingDataLoader`` whose worker raised is held by those frames, which pytest's
    ``ExceptionInfo`` keeps in a reference cycle. When the garbage collector breaks the cycle,
    the loader's queues can be closed before the loader shuts its workers down, and it then
    waits 5 s for each worker to exit. Cleared, the loader shuts its workers down at once.
    """
    seen: set[int] = set()
    error: BaseException | None = caught.value
    pending = [error]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        pending += [error.__cause__, error.__context__]


@pytest.fixture(scope="session")
def forkserver() -> multiprocessing.context.BaseContext:
    """The forkserver context, its server started having imported litstore (and pandas, where installed).

    A child forked from it starts ready to work instead of paying seconds of imports: pyarrow imports
    pandas on a write's first ``pa.array`` of a list (about a second). A process has one forkserver and
    the first start fixes what it preloads, so every test that forks children from it takes this fixture.
    """
    context = multiprocessing.get_context("forkserver")
    preload = ["litstore", "pytest"]
    if importlib.util.find_spec("pandas") is not None:
        preload.append("pandas")
    context.set_forkserver_preload(preload)
    return context


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[..., litstore.Store]:
    """Create a store under a fresh directory; keyword arguments go to ``Store.create``."""
    counter = iter(range(1_000_000))

    def make(**options: object) -> litstore.Store:
        return litstore.Store.create(tmp_path / f"store-{next(counter)}", **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """An empty store keyed by ``id`` with a 80/10/10 hash split."""
    return make_store(key="id", splits=litstore.HashSplit(train=0.8, val=0.1, test=0.1))


def stored_state(store: litstore.Store) -> dict[str, str]:
    """Every file of ``store`` with a hash of its bytes, on any backend (``tree_state`` for a local store)."""
    storage = store.storage
    if storage.local_path("litstore.json") is not None:
        return tree_state(Path(store.root))
    state: dict[str, str] = {}
    for name in storage.names(""):
        paths = [name] if storage.exists(name) else sorted(found.path for found in storage.walk(name))
        for path in paths:
            state[path] = xxhash.xxh3_128_hexdigest(storage.read(path))
    return state


def reopen(store: litstore.Store) -> litstore.Store:
    """A fresh handle on ``store``, as another process would open it (with the same storage options)."""
    return litstore.Store.open(store.root, storage_options=getattr(store.storage, "options", None) or None)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Where ``make_any_store`` puts its stores: ``local``, ``memory`` (or ``s3`` under ``ON_S3_TOO``)."""
    return str(request.param)


@pytest.fixture
def make_any_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., litstore.Store]]:
    """Like ``make_store``, on the backend ``backend`` names; memory stores are emptied afterwards."""
    counter = iter(range(1_000_000))
    made: list[litstore.Store] = []
    if backend == "local":
        base, options = str(tmp_path), None
    elif backend == "memory":
        base, options = f"memory://test-{uuid.uuid4().hex}", None
    elif backend == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        base, options = f"s3://{bucket}", {"endpoint_url": request.getfixturevalue("s3_endpoint")}
    else:
        raise ValueError(f"unknown backend {backend!r}")

    def make(**kwargs: object) -> litstore.Store:
        store = litstore.Store.create(f"{base}/store-{next(counter)}", storage_options=options, **kwargs)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    if backend == "memory":
        for store in made:
            empty_memory_store(store)


def empty_memory_store(store: litstore.Store) -> None:
    """Remove every file of a ``memory://`` store, whose files would otherwise outlive its test."""
    storage = store.storage
    for name in storage.names(""):
        if storage.exists(name):
            storage.delete(name)
        else:
            storage.delete_tree(name)
