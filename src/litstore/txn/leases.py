"""Leases on staged fragments: what keeps gc from removing a fragment a commit may still publish.

A staged fragment is files in ``fragments/<id>/`` that no version lists yet, so gc
sees debris. Two rules keep a slow job (stage, then commit an hour or a day later)
and a routine ``gc()`` from publishing a version whose chunks are gone:

- **A lease protects a fragment.** The stager writes ``lease-<id>.json``
  (:class:`~litstore.format.models.FragmentLease`) before its first chunk, and a commit
  writes one of its own before it looks at the fragment's files, unless this very
  process wrote the stager's lease moments before (:func:`fresh`: an ``append`` stages
  and commits in one call), which then holds for at least nine tenths of its term from
  the commit's start, as the commit's own would. gc removes no file of a fragment
  while any of its leases holds: for ``seconds`` after the storage wrote it, judged by
  the storage's own clock (:func:`storage_clock`), never by a host's.
- **gc marks before it removes, commits look after they lease.** gc writes
  ``doomed-<id>.json`` and then lists the fragment again; a commit writes its lease
  and then lists the fragment (:func:`check_present`). Whichever writes second sees
  the other's file: gc leaves the fragment alone, or the commit raises
  :class:`~litstore.errors.StagedFragmentExpiredError` and publishes nothing. Both
  may see each other; then nothing is removed and the commit can be tried again.

Every chunk a commit publishes must exist with the size its fragment recorded: one
listing per fragment, so a fragment of another store, or one gc removed, is refused
before any version names it. After the commit record is created the version keeps
the fragment, and the commit removes the leases it relied on, by name (a lease that
outlives its commit would only delay removing chunks later versions drop).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import pydantic

from litstore.errors import InvalidArgumentError, StagedFragmentExpiredError, StorageError
from litstore.format import layout
from litstore.format.models import FragmentLease
from litstore.storage import FileInfo, MissingFileError, Storage

#: How long a staged fragment is protected from gc without being committed.
DEFAULT_LEASE = timedelta(days=1)
#: The longest a stager's lease this process wrote counts as fresh (see :func:`fresh`).
FRESH_SECONDS = 60.0
# The leases this process wrote and has not released: (storage, fragment, holder) -> time.monotonic()
# just before the write (the storage stamped the file later, so the lease holds at least that long).
_written: dict[tuple[str, str, str], float] = {}


def lease_seconds(lease: timedelta | None) -> float:
    """``lease`` (default :data:`DEFAULT_LEASE`) in seconds, checked."""
    lease = DEFAULT_LEASE if lease is None else lease
    if not isinstance(lease, timedelta) or not timedelta(0) < lease <= timedelta(days=366):
        raise InvalidArgumentError(f"lease must be a timedelta longer than 0 and at most 366 days, got {lease!r}")
    return lease.total_seconds()


def take(storage: Storage, fragment: str, holder: str, seconds: float) -> None:
    """Write ``holder``'s lease on ``fragment``: gc leaves its files alone for ``seconds`` from now."""
    started = time.monotonic()
    lease = FragmentLease(fragment=fragment, holder=holder, seconds=seconds, taken_at=datetime.now(UTC))
    storage.write(layout.lease(fragment, holder), lease.model_dump_json().encode())
    _written[(storage.url, fragment, holder)] = started


def fresh(storage: Storage, fragment: str, seconds: float) -> bool:
    """Whether this process wrote the stager's lease on ``fragment`` (of ``seconds``) so recently (less than a
    tenth of its term, and at most :data:`FRESH_SECONDS`, ago) that a commit may rely on it instead of its own.

    Judged by this process's monotonic clock from just before the write; the storage
    stamped the file after that, and its clock runs at the same rate, so the lease
    holds, by the storage's clock, for nine tenths of its term from now: a commit
    that writes its own gets the whole term. A fragment staged by another process
    (a Ray task, an ingest worker) or long ago is never fresh.
    """
    written = _written.get((storage.url, fragment, fragment))
    return written is not None and time.monotonic() - written < min(FRESH_SECONDS, seconds / 10)


def forget(storage: Storage, fragment: str) -> None:
    """Forget the stager's lease on ``fragment`` (discarded: its files are gone)."""
    _written.pop((storage.url, fragment, fragment), None)


def release(storage: Storage, leases: Iterable[tuple[str, str]]) -> None:
    """Remove the ``(fragment, holder)`` leases a commit relied on (its fragments committed now: their versions
    keep them); by name, no listing. Another writer's lease on the same fragment stays until it runs out.
    Best effort."""
    for fragment, holder in leases:
        _written.pop((storage.url, fragment, holder), None)
        try:
            storage.delete(layout.lease(fragment, holder))
        except StorageError:
            pass  # a lease left behind runs out by itself; the commit happened


def check_present(storage: Storage, fragment: str, chunks: Sequence[tuple[str, int]]) -> None:
    """Raise unless every ``(chunk path, size)`` of ``fragment`` is in the store and gc is not removing it.

    Call it after taking a lease (see the module docstring for why the order matters).

    Raises:
        StagedFragmentExpiredError: a chunk is missing or has another size, or gc marked the fragment.
    """
    listing = {found.path: found.size for found in storage.walk(layout.fragment(fragment))}
    if any(layout.is_doomed_mark(path.rsplit("/", 1)[-1]) for path in listing):
        raise StagedFragmentExpiredError(
            f"staged fragment {fragment} is being removed by gc (its lease ran out); nothing was committed. "
            "Stage the records again, with a longer lease= if the job commits long after it stages."
        )
    missing = [path for path, size in chunks if listing.get(path) != size]
    if missing:
        reason = (
            "has no files in this store: was it staged by another store, or removed by gc?"
            if not any(path.endswith(".bin") for path in listing)
            else f"lacks {len(missing)} of its {len(chunks)} chunks (first: {missing[0]}), or they changed size: "
            "gc removed them after its lease ran out, or they were committed and expired before"
        )
        raise StagedFragmentExpiredError(
            f"staged fragment {fragment} {reason}; nothing was committed. Stage the records again, "
            "with a longer lease= if the job commits long after it stages."
        )


def storage_clock(storage: Storage, collector: str) -> float:
    """The storage's own time now, in seconds since the epoch: the modification time of a file written now.

    gc compares file times with this, never with its host's clock, so a host whose
    clock runs ahead cannot make a young file look old.
    """
    probe = layout.clock_probe(collector)
    storage.write(probe, b"{}")
    try:
        found = [info for info in storage.walk(layout.fragment(collector)) if info.path == probe]
    finally:
        storage.delete(probe)
    if not found:
        raise StorageError(f"the storage did not list {probe} right after writing it; gc cannot read its clock")
    return found[0].modified


def holds(storage: Storage, listing: Iterable[FileInfo], now: float) -> bool:
    """Whether any lease among a fragment's files ``listing`` still holds at storage time ``now``.

    A lease file that cannot be read as one holds for the default lease after it was
    written (a stranger's file protects nothing but its own fragment, and not forever).
    """
    for found in listing:
        if not layout.is_lease(found.path.rsplit("/", 1)[-1]):
            continue
        try:
            seconds = FragmentLease.model_validate_json(storage.read(found.path)).seconds
        except MissingFileError:
            continue  # released meanwhile
        except pydantic.ValidationError:
            seconds = DEFAULT_LEASE.total_seconds()
        if found.modified + seconds > now:
            return True
    return False
