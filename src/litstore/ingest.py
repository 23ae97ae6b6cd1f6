"""Parallel ingest, the way LitData's ``optimize(fn, inputs, num_workers)`` works: ``Store.ingest``.

``fn(input)`` turns one input (a JSONL line, an image path, a tar shard, ...) into a
record or an iterable of records. The inputs are dealt out to worker processes in
contiguous shares; each worker opens the store, runs ``fn`` over its share and
stages what comes out as its own fragment, streaming, in bounded memory. When every
worker is done, the fragments are committed once, as one version, through the public
commit protocol (:mod:`litstore.txn`): the same put-if-absent, rebase and conflict
rules as any write. If any input fails, or two workers produce the same key, nothing
is committed and every staged fragment is removed.

Workers are started with ``spawn`` (no state shared with the caller; ``fn`` must be
importable, e.g. a module-level function, as with ``optimize``). ``num_workers=0``
runs everything in the calling process.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from tqdm.auto import tqdm

from litstore.errors import IngestError, InvalidArgumentError, LitstoreError
from litstore.txn import StagedFragment, discard

if TYPE_CHECKING:
    from litstore.format.models import Version
    from litstore.store import Store

#: Shares per worker: smaller shares balance uneven inputs and move the progress bar.
_SHARES_PER_WORKER = 4


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

    See :meth:`litstore.Store.ingest`.
    """
    if not callable(fn):
        raise InvalidArgumentError(f"fn must be a function of one input, got {fn!r}")
    items = list(inputs)
    workers = os.cpu_count() or 1 if num_workers is None else num_workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise InvalidArgumentError(f"num_workers must be a whole number >= 0, got {num_workers!r}")
    shares = _shares(len(items), max(workers, 1) * _SHARES_PER_WORKER)
    root, options, model = store.root, dict(store.storage.options), store.head().model
    fragments: list[StagedFragment] = []
    try:
        with tqdm(total=len(items), desc="ingesting inputs", unit="input", disable=not progress) as bar:
            if workers == 0:
                for start, stop in shares:
                    fragments.append(_stage_share(root, options, model, fn, items[start:stop], start))
                    bar.update(stop - start)
            else:
                context = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                    futures: dict[Future[StagedFragment], int] = {
                        pool.submit(_stage_share, root, options, model, fn, items[start:stop], start): stop - start
                        for start, stop in shares
                    }
                    pending = set(futures)
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                        for future in done:
                            if future.exception() is None:
                                fragments.append(future.result())
                                bar.update(futures[future])
                        failed = [future for future in done if future.exception() is not None]
                        if failed:
                            for future in pending:
                                future.cancel()
                            for future in wait(pending).done:
                                if not future.cancelled() and future.exception() is None:
                                    fragments.append(future.result())
                            raise failed[0].exception()  # type: ignore[misc]
        return store.commit(fragments, mode=mode, message=message, metadata=metadata, progress=progress)
    except BaseException:
        for fragment in fragments:
            discard(store.storage, fragment)
        raise


def _shares(count: int, wanted: int) -> list[tuple[int, int]]:
    """``wanted`` contiguous, nearly equal ``(start, stop)`` ranges of ``count`` inputs (none empty)."""
    parts = max(1, min(wanted, count))
    bounds = [count * part // parts for part in range(parts + 1)]
    return [(start, stop) for start, stop in itertools.pairwise(bounds) if stop > start]


def _stage_share(
    root: str,
    options: dict[str, Any],
    model: type[pydantic.BaseModel] | None,
    fn: Callable[[Any], Any],
    share: Sequence[Any],
    offset: int,
) -> StagedFragment:
    """In a worker: open the store and stage the records ``fn`` makes of ``share``."""
    from litstore.store import Store

    store = Store.open(root, schema=model, storage_options=options or None)
    return store.stage(_records(fn, share, offset))


def _records(fn: Callable[[Any], Any], share: Sequence[Any], offset: int) -> Iterator[Any]:
    """The records ``fn`` makes of each input; a failure of ``fn`` names the input."""
    for position, value in enumerate(share, offset):
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


def _failure(position: int, value: Any, exc: BaseException) -> IngestError:
    shown = repr(value)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return IngestError(f"fn failed on input {position} ({shown}): {exc!r}; nothing was committed", position, value)
