"""Leases on staged fragments: what keeps gc from removing a fragment a commit may still publish.

A staged fragment is files in ``fragments/<id>/`` that no version lists yet, so gc
sees debris. Two rules keep a slow job (stage, then commit an hour or a day later)
and a routine ``gc()`` from publishing a version whose chunks are gone:

- **A lease protects a fragment.** The stager writes ``lease-<id>.json``
  (:class:`~litstore.format.models.FragmentLease`) before its first chunk, and a commit
  writes one of its own before it looks at the fragment's files. gc removes no file of
  a fragment while any of its leases holds: for ``seconds`` after the storage wrote
  it, judged by the storage's own clock (:func:`storage_clock`), never by a host's.
- **gc marks before it removes, commits look after they lease.** gc writes
  ``doomed-<id>.json`` and then lists the fragment again; a commit writes its lease
  and then lists the fragment (:func:`check_present`). Whichever writes second sees
  the other's file: gc leaves the fragment alone, or the commit raises
  :class:`~litstore.errors.StagedFragmentExpiredError` and publishes nothing. Both
  may see each other; then nothing is removed and the commit can be tried again.

Every chunk a commit publishes must exist with the size its fragment recorded: one
listing per fragment, so a fragment of another store, or one gc removed, is refused
before any version names it. After the commit record is created the version keeps
the fragment, and the commit removes its own lease and the stager's, by name (a
lease that outlives its commit would only delay removing chunks later versions drop).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import pydantic

from litstore.errors import InvalidArgumentError, StagedFragmentExpiredError, StorageError
from litstore.format import layout
from litstore.format.models import FragmentLease
from litstore.storage import FileInfo, MissingFileError, Storage

#: How long a staged fragment is protected from gc without being committed.
DEFAULT_LEASE = timedelta(days=1)


def lease_seconds(lease: timedelta | None) -> float:
    """``lease`` (default :data:`DEFAULT_LEASE`) in seconds, checked."""
    lease = DEFAULT_LEASE if lease is None else lease
    if not isinstance(lease, timedelta) or not timedelta(0) < lease <= timedelta(days=366):
        raise InvalidArgumentError(f"lease must be a timedelta longer than 0 and at most 366 days, got {lease!r}")
    return lease.total_seconds()


def take(storage: Storage, fragment: str, holder: str, seconds: float) -> None:
    """Write ``holder``'s lease on ``fragment``: gc leaves its files alone for ``seconds`` from now."""
    lease = FragmentLease(fragment=fragment, holder=holder, seconds=seconds, taken_at=datetime.now(UTC))
    storage.write(layout.lease(fragment, holder), lease.model_dump_json().encode())


def release(storage: Storage, fragments: Iterable[str], holder: str) -> None:
    """Remove the stager's lease and ``holder``'s on each of ``fragments`` (committed now: their versions keep
    them); by name, no listing. Another writer's lease on the same fragment stays until it runs out. Best effort."""
    for fragment in fragments:
        for lease_holder in dict.fromkeys((fragment, holder)):
            try:
                storage.delete(layout.lease(fragment, lease_holder))
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
