"""Parallel ingest, the way LitData's ``optimize(fn, inputs, num_workers)`` works: ``Store.ingest``.

``fn(input)`` turns one input (a JSONL line, an image path, a tar shard, ...) into a
record or an iterable of records. Each worker process opens the store and stages one
fragment, streaming, in bounded memory, from small blocks of inputs it takes from a
shared queue until the queue is empty: a worker that is faster, or started sooner,
takes more blocks, so no worker sits idle while another finishes a large share, and
each worker still writes full chunks into one fragment. When every worker is done,
the fragments are committed once, as one version, through the public commit protocol
(:mod:`litstore.txn`): the same put-if-absent, rebase and conflict rules as any write.
If any input fails, the other workers stop at their next block; if any input fails
or two workers produce the same key, nothing is committed and every staged fragment
is removed.

Workers share no state with the caller (``fn`` must be importable, e.g. a module-level
function, as with ``optimize``), but each runs with the caller's environment variables
and working directory as they are when ``ingest`` is called, as a spawned worker would:
credentials, endpoints, ``CUDA_VISIBLE_DEVICES`` or tokens that ``fn`` reads follow the
caller. Where the platform has it, workers are forked from multiprocessing's fork
server, which is itself a fresh process (so this is as safe as ``spawn`` in a caller with
threads) and imports litstore once for all the workers of every ingest of the calling
process: a ``spawn`` worker spends about 0.6 s importing litstore, numpy, pyarrow and
pandas before it does any work, paid again by every call, a fixed cost that no number of
workers shortens. Elsewhere workers are spawned. Two consequences of the fork server:
a variable read only when a library is imported (e.g. the BLAS thread count numpy reads
from ``OMP_NUM_THREADS``) keeps the value it had when the fork server started; and
starting the fork server is process-wide: a caller that uses the ``forkserver`` start
method after an ingest gets this fork server, with litstore imported in it (the preload
list the caller set is left as it was). ``num_workers=0`` runs everything in the calling
process.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from tqdm.auto import tqdm

from litstore.errors import IngestError, InvalidArgumentError, LitstoreError
from litstore.txn import StagedFragment, discard
from litstore.txn.commit import check_arguments

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext
    from multiprocessing.queues import Queue
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    from litstore.format.models import Version
    from litstore.store import Store

#: Blocks of inputs per worker: the last blocks keep every worker busy until the end (a
#: worker idles for at most one block's time), and taking a block from the queue costs a
#: worker about 3 microseconds of CPU, nothing next to ``fn`` and staging.
_BLOCKS_PER_WORKER = 256

#: How often (seconds) the progress bar is moved while workers run.
_PROGRESS_EVERY = 0.2

#: What the fork server imports before it forks any worker, after what the caller asked it
#: to preload (by default the caller's main module, which a spawned worker imports first):
#: litstore's write path, and pandas, which pyarrow imports the first time it converts
#: Python values (where pandas is not installed the fork server skips it).
_PRELOAD = ("litstore.ingest", "litstore.store", "pandas")

#: Held while the process-wide preload list is changed and put back.
_PRELOAD_LOCK = threading.Lock()

#: A block of inputs: the position of its first input in ``inputs``, and the inputs.
Block = tuple[int, Sequence[Any]]


def ingest(
    store: Store,
    fn: Callable[[Any], Any],
    inputs: Iterable[Any],
    *,
    num_workers: int | None = None,
    mode: Literal["append", "upsert"] = "append",
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = True,
) -> Version:
    """Run ``fn`` over ``inputs`` in ``num_workers`` processes and commit what it returns as one version.

    See :meth:`litstore.Store.ingest`. The first ingest with workers starts the fork server
    (about 120 MB resident), which stays alive until the calling process exits, so that
    later ingests fork their workers from it.

    Raises:
        IngestError: ``fn`` failed on an input, an input cannot be sent to a worker process,
            or a worker process died; nothing was committed.
        InvalidArgumentError: ``fn``, ``num_workers``, ``mode``, ``message`` or ``metadata``
            cannot be used; nothing ran and nothing was written.
    """
    if not callable(fn):
        raise InvalidArgumentError(f"fn must be a function of one input, got {fn!r}")
    check_arguments(mode, message, metadata)  # before fn runs: a typo must not cost the whole ingest
    items = list(inputs)
    workers = os.cpu_count() or 1 if num_workers is None else num_workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise InvalidArgumentError(f"num_workers must be a whole number >= 0, got {num_workers!r}")
    blocks: list[Block] = [
        (start, items[start:stop]) for start, stop in _bounds(len(items), max(workers, 1) * _BLOCKS_PER_WORKER)
    ]
    fragments: list[StagedFragment] = []
    try:
        with tqdm(total=len(items), desc="ingesting inputs", unit="input", disable=not progress) as bar:
            if workers == 0:
                staged = store.stage(_records(fn, blocks, lambda block: bar.update(len(block[1]))))
                if len(staged):
                    fragments.append(staged)
                else:
                    discard(store.storage, staged)
            else:
                _run_workers(store, fn, blocks, workers, fragments, bar)
        return store.commit(fragments, mode=mode, message=message, metadata=metadata, progress=progress)
    except BaseException:
        for fragment in fragments:
            discard(store.storage, fragment)
        raise


def _run_workers(
    store: Store, fn: Callable[[Any], Any], blocks: list[Block], workers: int, fragments: list[StagedFragment], bar: Any
) -> None:
    """Stage ``blocks`` in ``workers`` processes, appending each worker's fragment to ``fragments``.

    Raises:
        InvalidArgumentError: ``fn`` cannot be sent to a worker process.
        IngestError: ``fn`` failed on an input, or an input cannot be sent to a worker
            process (the other workers stop at their next block); or a worker process died.
        LitstoreError: whatever a worker raised first (a rejected record, a key twice).
    """
    try:
        pickle.dumps(fn)
    except Exception as exc:  # a callable may refuse with anything
        raise InvalidArgumentError(
            f"fn must be importable by worker processes (a module-level function), got {fn!r}: {exc}"
        ) from exc
    context = _context()
    queue: Queue[bytes | None] = context.Queue()
    stop = context.Event()
    done: Synchronized[int] = context.Value("q", 0)
    root, options, model = store.root, dict(store.storage.options), store.head().model
    shared = (queue, stop, done, dict(os.environ))
    try:
        with ProcessPoolExecutor(workers, context, initializer=_join, initargs=shared) as pool:
            try:
                pending = {pool.submit(_stage_blocks, root, options, model, fn) for _ in range(workers)}
                for block in blocks:
                    queue.put(_packed(block))
                for _ in range(workers):
                    queue.put(None)  # one end marker per worker
                failures: list[BaseException] = []
                while pending:
                    finished, pending = wait(pending, None if bar.disable else _PROGRESS_EVERY, FIRST_EXCEPTION)
                    bar.update(done.value - bar.n)
                    for future in finished:
                        failure = future.exception()
                        if failure is None:
                            fragment = future.result()
                            if fragment is not None:
                                fragments.append(fragment)
                        elif not isinstance(failure, _Stopped):
                            failures.append(failure)
                            stop.set()
                if failures:
                    raise failures[0]
            except BaseException:
                stop.set()  # the workers stop at their next block instead of finishing every block
                raise
    except BrokenProcessPool as exc:
        raise IngestError(
            "a worker process died before it finished: it could not import the calling script "
            "(guard the script's top-level code with `if __name__ == '__main__':`), it was killed "
            f"(e.g. for memory), or fn ended it; nothing was committed ({exc})"
        ) from exc
    finally:
        queue.cancel_join_thread()  # blocks no worker will take must not keep this process from exiting
        queue.close()


def _packed(block: Block) -> bytes:
    """``block`` pickled here, so that an input that cannot reach a worker is an error, not lost.

    (The queue pickles in a background thread, which only prints such a failure and drops the block.)

    Raises:
        IngestError: an input of ``block`` cannot be pickled; the error names it.
    """
    try:
        return pickle.dumps(block, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an input may refuse with anything (ctypes: ValueError); found below
        pass
    offset, values = block
    for position, value in enumerate(values, offset):
        try:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # as above; named in the IngestError
            raise _failure(position, value, exc, sent=True) from exc
    raise AssertionError("a block that cannot be pickled holds an input that cannot be pickled")


def _context() -> BaseContext:
    """How worker processes are started: forked from the fork server where there is one, else spawned.

    The fork server is started here, if it is not running, with litstore added to the
    modules it preloads; the process-wide preload list is then put back as it was.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    with _PRELOAD_LOCK:
        # multiprocessing has no getter for the list; its default is the caller's main module.
        previous = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        context.set_forkserver_preload([*previous, *(name for name in _PRELOAD if name not in previous)])
        try:
            forkserver.ensure_running()
        finally:
            context.set_forkserver_preload(previous)
    return context


def _bounds(count: int, wanted: int) -> list[tuple[int, int]]:
    """``wanted`` contiguous, nearly equal ``(start, stop)`` ranges of ``count`` inputs (none empty)."""
    parts = max(1, min(wanted, count))
    bounds = [count * part // parts for part in range(parts + 1)]
    return [(start, stop) for start, stop in itertools.pairwise(bounds) if stop > start]


class _Stopped(Exception):
    """A worker stopped taking blocks because another worker failed."""


# Set in each worker process by ``_join``: the pool's queue of blocks, its stop signal
# and its count of inputs done (shared objects reach a worker only as it starts).
_queue: Queue[bytes | None] | None = None
_stop: Event | None = None
_done: Synchronized[int] | None = None


def _join(queue: Queue[bytes | None], stop: Event, done: Synchronized[int], environ: dict[str, str]) -> None:
    """In a worker, as it starts: keep the pool's shared objects and take the caller's environment.

    A worker forked from the fork server inherits the environment of the moment the fork
    server started; ``fn`` must see the caller's environment of this ingest instead.
    """
    global _queue, _stop, _done
    _queue, _stop, _done = queue, stop, done
    for name in os.environ.keys() - environ.keys():
        del os.environ[name]
    os.environ.update(environ)


def _stage_blocks(
    root: str, options: dict[str, Any], model: type[pydantic.BaseModel] | None, fn: Callable[[Any], Any]
) -> StagedFragment | None:
    """In a worker: stage the records ``fn`` makes of the blocks it takes from the queue (``None``: no records)."""
    from litstore.store import Store

    store = Store.open(root, schema=model, storage_options=options or None)
    staged = store.stage(_records(fn, _taken_blocks(), _count_done))
    if len(staged):
        return staged
    discard(store.storage, staged)  # the other workers took every block, or fn made no records
    return None


def _taken_blocks() -> Iterator[Block]:
    """Blocks from the pool's queue until its end marker; :class:`_Stopped` once another worker failed."""
    assert _queue is not None and _stop is not None, "only called in a worker started by _run_workers"
    while True:
        if _stop.is_set():
            raise _Stopped
        packed = _queue.get()
        if packed is None:
            return
        yield pickle.loads(packed)


def _count_done(block: Block) -> None:
    assert _done is not None, "only called in a worker started by _run_workers"
    with _done.get_lock():
        _done.value += len(block[1])


def _records(fn: Callable[[Any], Any], blocks: Iterable[Block], finished: Callable[[Block], None]) -> Iterator[Any]:
    """The records ``fn`` makes of each input of ``blocks``; a failure of ``fn`` names the input."""
    for block in blocks:
        offset, values = block
        for position, value in enumerate(values, offset):
            try:
                made = fn(value)
                if made is None:
                    continue
                if isinstance(made, (Mapping, pydantic.BaseModel)):
                    yield made
                    continue
                produced = made
            except LitstoreError:
                raise
            except Exception as exc:  # the caller's fn: any failure is reported with its input
                raise _failure(position, value, exc) from exc
            yield from _guarded(produced, position, value)
        finished(block)


def _guarded(records: Iterable[Any], position: int, value: Any) -> Iterator[Any]:
    """Iterate what ``fn`` returned for one input; a failure while iterating names the input."""
    iterator = iter(records)
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # a generator returned by fn may fail half-way
            raise _failure(position, value, exc) from exc
        yield record


def _failure(position: int, value: Any, exc: BaseException, sent: bool = False) -> IngestError:
    """The error naming input ``position``: ``fn`` failed on it or (``sent``) it cannot be sent to a worker."""
    shown = repr(value)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    what = (
        f"input {position} ({shown}) cannot be sent to a worker process"
        if sent
        else f"fn failed on input {position} ({shown})"
    )
    return IngestError(f"{what}: {exc!r}; nothing was committed", position, value)
