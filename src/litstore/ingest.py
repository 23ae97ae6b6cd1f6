"""Parallel ingest, the way LitData's ``optimize(fn, inputs, num_workers)`` works: ``Store.ingest``.

``fn(input)`` turns one input (a JSONL line, an image path, a tar shard, ...) into a
record or an iterable of records. Each worker process opens the store and stages one
fragment, streaming, in bounded memory, from small blocks of inputs it takes from a
shared queue until the queue is empty: a worker that is faster, or started sooner,
takes more blocks, so no worker sits idle while another finishes a large share, and
each worker still writes full chunks into one fragment. When every worker is done,
the fragments are committed once, as one version, through the public commit protocol
(:mod:`litstore.txn`): the same put-if-absent, rebase and conflict rules as any write.
If any input fails, two workers produce the same key, or the caller is interrupted
(Ctrl-C), nothing is committed and every staged fragment is removed.

No worker outlives the ingest. When it stops early (a failure, Ctrl-C), the workers still
running are told to stop and, on POSIX, interrupted (SIGINT: ``KeyboardInterrupt`` in
``fn``, and the partial fragment removed); one still running a few seconds later (``fn``
ignores the interrupt) is killed and its partial fragment left for ``gc``. A worker also
ends itself when its caller is gone, however it died (SIGKILL included): it watches a
pipe whose only writing end the caller holds. ``fn`` is the caller's code, but what it
raises in a worker, ``SystemExit`` included, reaches the caller as an :class:`IngestError`
naming the input, as does a return value that is not a record, an iterable of records
or ``None``.

Workers share no state with the caller (``fn`` must be importable, e.g. a module-level
function, as with ``optimize``), but each runs with the caller's environment variables
and working directory as they are when ``ingest`` is called, as a spawned worker would:
credentials, endpoints, ``CUDA_VISIBLE_DEVICES`` or tokens that ``fn`` reads follow the
caller. Where the platform has it, workers are forked from multiprocessing's fork
server, which is itself a fresh process (so this is as safe as ``spawn`` in a caller with
threads) and imports litstore, and the caller's main script, once for all the workers of
every ingest of the calling process: a ``spawn`` worker spends about 0.6 s importing
litstore, numpy, pyarrow and pandas before it does any work, and runs the caller's script
again (a script that imports torch: 1.5 s more), paid again by every call, a fixed cost
that no number of workers shortens. Elsewhere workers are spawned. Three consequences of
the fork server: a variable read only when a library is imported (e.g. the BLAS thread
count numpy reads from ``OMP_NUM_THREADS``) keeps the value it had when the fork server
started; the script's top-level code runs there once, not in each worker (what it
imports stays resident in the fork server: with torch, ~600 MB); and starting the fork server
is process-wide: a caller that uses the ``forkserver`` start method after an ingest gets
this fork server, with litstore and its main script imported in it (the preload list the
caller set is left as it was). ``num_workers=0`` runs everything in the calling process.

``Store.ingest`` calls this module, never the other way: what ingest uses of a store is
the :class:`IngestTarget` protocol, and a worker reopens the store with the caller's
class.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pydantic
from tqdm.auto import tqdm

from litstore import _forkserver_main
from litstore.errors import IngestError, InvalidArgumentError, LitstoreError
from litstore.txn import StagedFragment, discard
from litstore.txn.change import check_arguments

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    from litstore.format.models import Version
    from litstore.storage import Storage

#: Blocks of inputs per worker: the last blocks keep every worker busy until the end (a
#: worker idles for at most one block's time), and taking a block from the queue costs a
#: worker about 3 microseconds of CPU, nothing next to ``fn`` and staging.
_BLOCKS_PER_WORKER = 256

#: How often (seconds) the progress bar is moved while workers run.
_PROGRESS_EVERY = 0.2

#: How long (seconds) workers told to stop may take to clean up, and then to exit, before
#: they are killed: removing a partial fragment takes milliseconds locally, a few
#: requests on S3.
_GRACE = 3.0

#: The exit code of a worker that ended itself because its caller is gone.
_ORPHANED = 70

#: What the fork server imports before it forks any worker, after what the caller asked it
#: to preload: litstore's write path, pandas, which pyarrow imports the first time it
#: converts Python values (where pandas is not installed the fork server skips it), and the
#: caller's main module, which a spawned worker imports first (``"__main__"`` on the list
#: asks for it, but multiprocessing does not before Python 3.14: see
#: :mod:`litstore._forkserver_main`).
_PRELOAD = ("litstore.ingest", "litstore.store", "pandas", "litstore._forkserver_main")

#: Held while the process-wide preload list is changed and put back.
_PRELOAD_LOCK = threading.Lock()

#: A block of inputs: the position of its first input in ``inputs``, and the inputs.
Block = tuple[int, Sequence[Any]]


class _Head(Protocol):
    """What ingest reads of a store's head: the model its records are validated against."""

    @property
    def model(self) -> type[pydantic.BaseModel] | None: ...


class IngestTarget(Protocol):
    """What ingest uses of a store: :class:`litstore.Store` is one.

    Workers reopen the store with ``type(store).open``, so the class must be importable
    by them (it is pickled by reference).
    """

    @classmethod
    def open(
        cls,
        root: str,
        *,
        schema: type[pydantic.BaseModel] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> IngestTarget: ...

    @property
    def root(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def head(self) -> _Head: ...

    def stage(self, records: Iterable[Any]) -> StagedFragment: ...

    def commit(
        self,
        fragments: Sequence[StagedFragment],
        *,
        mode: Literal["append", "upsert"],
        message: str | None,
        metadata: dict[str, Any] | None,
        progress: bool,
    ) -> Version: ...


def ingest(
    store: IngestTarget,
    fn: Callable[[Any], Any],
    inputs: Iterable[Any],
    *,
    num_workers: int | None = None,
    mode: Literal["append", "upsert"] = "append",
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> Version:
    """Run ``fn`` over ``inputs`` in ``num_workers`` processes and commit what it returns as one version.

    See :meth:`litstore.Store.ingest`. The first ingest with workers starts the fork server
    (about 120 MB resident), which stays alive until the calling process exits, so that
    later ingests fork their workers from it.

    Raises:
        IngestError: ``fn`` failed on an input (raised anything, ``SystemExit`` included, or
            returned what is not a record), an input cannot be sent to a worker process, or a
            worker process died; nothing was committed.
        InvalidArgumentError: ``fn``, ``num_workers``, ``mode``, ``message`` or ``metadata``
            cannot be used; nothing ran and nothing was written.
    """
    if not callable(fn):
        raise InvalidArgumentError(f"fn must be a function of one input, got {fn!r}")
    message, metadata = check_arguments(
        mode, message, metadata
    )  # before fn runs: a typo must not cost the whole ingest
    workers = os.cpu_count() or 1 if num_workers is None else num_workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise InvalidArgumentError(f"num_workers must be a whole number >= 0, got {num_workers!r}")
    items = list(inputs)
    blocks: list[Block] = [
        (start, items[start:stop]) for start, stop in _bounds(len(items), max(workers, 1) * _BLOCKS_PER_WORKER)
    ]
    fragments: list[StagedFragment] = []
    try:
        with tqdm(total=len(items), desc="ingesting inputs", unit="input", disable=not progress) as bar:
            if workers == 0:
                counted = _records(fn, blocks, lambda block: bar.update(len(block[1])), store.head().model)
                staged = store.stage(counted)
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
    store: IngestTarget,
    fn: Callable[[Any], Any],
    blocks: list[Block],
    workers: int,
    fragments: list[StagedFragment],
    bar: Any,
) -> None:
    """Stage ``blocks`` in ``workers`` processes, appending each worker's fragment to ``fragments``.

    However this ends (done, an input failed, Ctrl-C in the caller), no worker is left
    running when it returns: see :func:`_shut_down`.

    Raises:
        InvalidArgumentError: ``fn`` cannot be sent to a worker process.
        IngestError: ``fn`` failed on an input, or an input cannot be sent to a worker
            process; or a worker process died.
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
    lifeline, held = context.Pipe(duplex=False)  # the workers read it; EOF: the caller is gone
    options = dict(store.storage.options)
    shared = (type(store), store.root, options, store.head().model, fn, queue, stop, done, dict(os.environ))
    processes: list[BaseProcess] = []
    running: dict[Connection, BaseProcess] = {}  # the workers whose outcome is still to come
    try:
        for _ in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_work, args=(*shared, lifeline, sender), name="litstore-ingest")
            try:
                process.start()
            finally:
                sender.close()  # the worker's copy is the only one left: its death reads as EOF
            processes.append(process)
            running[receiver] = process
        for block in blocks:
            queue.put(_packed(block))
        for _ in range(workers):
            queue.put(None)  # one end marker per worker
        while running:
            ready = wait([*running, *(process.sentinel for process in running.values())], _PROGRESS_EVERY)
            bar.update(done.get_obj().value - bar.n)  # no lock: a worker killed holding it must not hang this
            for receiver in _finished(running, ready):
                fragment = _outcome(receiver, running.pop(receiver))
                if fragment is not None:
                    fragments.append(fragment)
    finally:
        _shut_down(processes, running, stop, held, fragments)
        lifeline.close()
        queue.cancel_join_thread()  # blocks no worker will take must not keep this process from exiting
        queue.close()


def _finished(running: dict[Connection, BaseProcess], ready: list[Any]) -> list[Connection]:
    """The workers of ``running`` that sent their outcome or exited, by what ``wait`` found ``ready``."""
    return [receiver for receiver, process in running.items() if receiver in ready or process.sentinel in ready]


def _outcome(receiver: Connection, process: BaseProcess) -> StagedFragment | None:
    """What a worker that finished sent: its fragment (``None``: it staged nothing, or stopped).

    Raises:
        LitstoreError: what the worker failed with (an :class:`IngestError` naming an input, ...).
        IngestError: the worker died before it sent anything.
    """
    try:
        sent = receiver.recv() if receiver.poll() else None
    except (EOFError, OSError):
        sent = None  # it exited before it sent anything, or half-way through
    finally:
        receiver.close()
    if sent is not None:
        kind, value = sent
        if kind == "failed":
            raise value
        return value if kind == "staged" else None
    process.join()
    raise IngestError(
        "a worker process died before it finished: it could not import the calling script "
        "(guard the script's top-level code with `if __name__ == '__main__':`), it was killed "
        f"(e.g. for memory), or fn ended it (exit code {process.exitcode}); nothing was committed"
    )


def _shut_down(
    processes: list[BaseProcess],
    running: dict[Connection, BaseProcess],
    stop: Event,
    held: Connection,
    fragments: list[StagedFragment],
) -> None:
    """Stop the workers still ``running`` and wait until every worker process has exited.

    Those still running (an input failed, or Ctrl-C in the caller) are told to stop, and
    on POSIX interrupted at once (SIGINT: ``KeyboardInterrupt`` in ``fn``; their partial
    fragment is removed, as any failed stage removes it); a fragment one had finished is
    added to ``fragments``, for the caller to discard. Then ``held`` is closed, which makes
    every worker's watch (:func:`_watch_caller`) end its process; a worker still there
    after :data:`_GRACE` seconds (``fn`` ignores the interrupt and holds the interpreter
    in C code) is killed, and its partial fragment left for ``gc``.
    """
    try:
        if running:
            stop.set()
            for process in running.values():
                _interrupt(process)
            deadline = time.monotonic() + _GRACE
            while running and (left := deadline - time.monotonic()) > 0:
                ready = wait([*running, *(process.sentinel for process in running.values())], left)
                for receiver in _finished(running, ready):
                    try:
                        fragment = _outcome(receiver, running.pop(receiver))
                    except LitstoreError:
                        continue  # why it stopped: the ingest has failed already
                    if fragment is not None:
                        fragments.append(fragment)
    finally:
        held.close()
        for receiver in running:
            receiver.close()
        deadline = time.monotonic() + _GRACE
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.exitcode is None:
                process.kill()
                process.join()
            process.close()


def _interrupt(process: BaseProcess) -> None:
    """Send a running worker SIGINT (POSIX; elsewhere it stops at its next block, or is killed)."""
    if os.name != "posix" or process.pid is None or process.exitcode is not None:
        return
    try:
        os.kill(process.pid, signal.SIGINT)
    except ProcessLookupError:
        pass  # it exited meanwhile


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


def _context() -> ForkServerContext | SpawnContext:
    """How worker processes are started: forked from the fork server where there is one, else spawned.

    The fork server is started here, if it is not running, with litstore added to the
    modules it preloads, and the caller's main module imported there
    (:mod:`litstore._forkserver_main`); the process-wide preload list is then put back as
    it was.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    with _PRELOAD_LOCK:
        # multiprocessing has no getter for the list; its default is the caller's main module.
        previous = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        context.set_forkserver_preload([*previous, *(name for name in _PRELOAD if name not in previous)])
        try:
            with _forkserver_main.handed_over():
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
    """A worker stopped taking blocks because the ingest is over (another worker failed, Ctrl-C)."""


def _work(
    opener: type[IngestTarget],
    root: str,
    options: dict[str, Any],
    model: type[pydantic.BaseModel] | None,
    fn: Callable[[Any], Any],
    queue: Queue[bytes | None],
    stop: Event,
    done: Synchronized[int],
    environ: dict[str, str],
    lifeline: Connection,
    sender: Connection,
) -> None:
    """A worker process: stage what ``fn`` makes of the blocks it takes from ``queue``; send the outcome.

    The outcome is ``("staged", fragment)`` (``None``: no records), ``("stopped", None)``
    or ``("failed", error)``; whatever ``fn`` raises, ``SystemExit`` included, is sent as
    an :class:`IngestError` naming the input, so it reaches the caller as an error and never
    ends the caller. The worker reopens the store with ``opener.open``, takes the caller's
    environment (one forked from the fork server has the fork server's), and ends itself
    once the caller is gone.
    """
    finished = _watch_caller(lifeline)
    signal.signal(signal.SIGINT, _interrupted)
    for name in os.environ.keys() - environ.keys():
        del os.environ[name]
    os.environ.update(environ)
    outcome: tuple[str, Any]
    try:
        outcome = ("staged", _stage_blocks(opener, root, options, model, fn, _taken_blocks(queue, stop), done))
    except _Stopped:
        outcome = ("stopped", None)
    except LitstoreError as exc:
        outcome = ("failed", exc)
    except BaseException as exc:  # noqa: BLE001 - outside fn (fn's are named by _records): sent, never lost
        outcome = ("failed", IngestError(f"a worker process failed: {exc!r}; nothing was committed"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the outcome must arrive whole: the caller discards the fragment
    finished.set()  # from here the worker exits by itself, running its exit handlers (tqdm's lock is unregistered)
    try:
        sender.send(outcome)
    except OSError:
        pass  # the caller is gone or stopped listening: nothing to tell; gc removes what was staged


def _watch_caller(lifeline: Connection) -> threading.Event:
    """End this worker process as soon as ``lifeline`` reads EOF (its caller died, or gave up waiting for it),
    unless the returned event is set by then (the worker has its outcome and exits by itself).

    The caller holds the only writing end of the pipe; the system closes it when the
    caller exits in any way, SIGKILL included. A watch thread works on every platform
    (a worker forked from the fork server is not the caller's child, so its parent id
    says nothing). What the worker had staged is left for ``gc``.
    """
    finished = threading.Event()

    def watch() -> None:
        try:
            lifeline.recv_bytes()
        except (EOFError, OSError):
            pass
        if not finished.is_set():
            os._exit(_ORPHANED)

    threading.Thread(target=watch, name="litstore-ingest-caller-watch", daemon=True).start()
    return finished


def _interrupted(signum: int, frame: object) -> None:
    """SIGINT in a worker: ``KeyboardInterrupt`` once; the cleanup it starts is not interrupted again."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stage_blocks(
    opener: type[IngestTarget],
    root: str,
    options: dict[str, Any],
    model: type[pydantic.BaseModel] | None,
    fn: Callable[[Any], Any],
    blocks: Iterator[Block],
    done: Synchronized[int],
) -> StagedFragment | None:
    """In a worker: stage the records ``fn`` makes of ``blocks`` (``None``: no records)."""

    def count(block: Block) -> None:
        with done.get_lock():
            done.value += len(block[1])

    store = opener.open(root, schema=model, storage_options=options or None)
    staged = store.stage(_records(fn, blocks, count, model, passed=(LitstoreError,)))
    if len(staged):
        return staged
    discard(store.storage, staged)  # the other workers took every block, or fn made no records
    return None


def _taken_blocks(queue: Queue[bytes | None], stop: Event) -> Iterator[Block]:
    """Blocks from ``queue`` until its end marker; :class:`_Stopped` once ``stop`` is set."""
    while True:
        if stop.is_set():
            raise _Stopped
        packed = queue.get()
        if packed is None:
            return
        yield pickle.loads(packed)


def _records(
    fn: Callable[[Any], Any],
    blocks: Iterable[Block],
    finished: Callable[[Block], None],
    model: type[pydantic.BaseModel] | None,
    passed: tuple[type[BaseException], ...] = (LitstoreError, KeyboardInterrupt),
) -> Iterator[Any]:
    """The records ``fn`` makes of each input of ``blocks``.

    Whatever ``fn`` raises, other than ``passed``, is an :class:`IngestError` naming the
    input, and so is a return value that is not a record, an iterable of records or
    ``None`` (where the store has a schema ``model``, the model judges each record of an
    iterable). In the calling process ``KeyboardInterrupt`` (the caller's Ctrl-C) passes
    unchanged; ``SystemExit`` does not, which would end the caller silently.
    """
    for block in blocks:
        offset, values = block
        for position, value in enumerate(values, offset):
            try:
                made = fn(value)
            except passed:
                raise
            except BaseException as exc:  # the caller's fn: any failure is reported with its input
                raise _failure(position, value, exc) from exc
            if made is None:
                continue
            if _is_record(made):
                yield made
                continue
            if type(made) in (list, tuple) and (model is not None or set(map(type, made)) <= {dict}):
                yield from made  # the common case, checked in one pass (a list cannot fail half-way)
                continue
            if isinstance(made, (str, bytes)) or not isinstance(made, Iterable):
                raise _returned(position, value, made)
            yield from _guarded(made, position, value, passed, model is None)
        finished(block)


def _is_record(value: object) -> bool:
    return isinstance(value, (Mapping, pydantic.BaseModel))


def _guarded(
    records: Iterable[Any], position: int, value: Any, passed: tuple[type[BaseException], ...], plain: bool
) -> Iterator[Any]:
    """Iterate what ``fn`` returned for one input; a failure while iterating, or (``plain``) a record that is
    not a mapping or a model instance, names the input."""
    try:
        iterator = iter(records)
    except passed:
        raise
    except BaseException as exc:  # an iterable of the caller's may refuse with anything
        raise _failure(position, value, exc) from exc
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except passed:
            raise
        except BaseException as exc:  # a generator returned by fn may fail half-way
            raise _failure(position, value, exc) from exc
        if plain and not _is_record(record):
            raise _returned(position, value, record, within=True)
        yield record


def _returned(position: int, value: Any, made: Any, within: bool = False) -> IngestError:
    """The error for input ``position``, for which ``fn`` returned ``made`` (or, ``within``, an iterable holding it)."""
    what = f"{_shown(made)} ({type(made).__name__})"
    return IngestError(
        f"fn returned {'an iterable holding ' if within else ''}{what} for input {position} ({_shown(value)}): "
        "it must return a record (a dict or a model instance), an iterable of records, or None; "
        "nothing was committed",
        position,
        value,
    )


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 200 characters."""
    shown = repr(value)
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _failure(position: int, value: Any, exc: BaseException, sent: bool = False) -> IngestError:
    """The error naming input ``position``: ``fn`` failed on it or (``sent``) it cannot be sent to a worker."""
    shown = _shown(value)
    what = (
        f"input {position} ({shown}) cannot be sent to a worker process"
        if sent
        else f"fn failed on input {position} ({shown})"
    )
    return IngestError(f"{what}: {exc!r}; nothing was committed", position, value)
