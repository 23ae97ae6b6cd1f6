"""The race for a version number: creating a commit record, a lost response, catching up with the winners.

Every write that publishes a version (:mod:`.commit`, :mod:`.fields`) ends here: its
commit record is created with put-if-absent (:func:`put_commit_record`), and a writer
that lost catches up with the versions committed since its head (:func:`catch_up`)
to see whether the winners touched the same keys (:func:`clash`) before it tries
again after a short pause (:func:`pause`). A writer that won overwrites the head hint
(``versions/head.hint``) with its number, best effort, so that the next process finds
the head without listing ``versions/`` (:func:`litstore.read.log.head_number`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from litstore import query
from litstore._litdata.index import index_document
from litstore.errors import (
    ConflictError,
    NotDurableError,
    StorageError,
    UncertainCommitError,
    VersionNotFoundError,
    describe,
)
from litstore.format import layout
from litstore.format.models import ExpiredVersion, Version
from litstore.read import listings, log
from litstore.storage import branched

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

#: The longest pause of a writer that lost a race once, in seconds.
MAX_PAUSE = 0.004


def commit_time(parent: Version) -> datetime:
    """The time a version on ``parent`` records: the writer's clock, but never earlier than ``parent``'s.

    Times along the version chain never go back, so ``at(datetime)`` and gc's
    ``older_than`` see versions in commit order even when writers' clocks disagree
    (a writer whose clock is slow stamps its parent's time instead).
    """
    return max(datetime.now(UTC), parent.created_at)


def copy_indexes(parent: VersionReader, number: int, transaction: str) -> dict[str, str]:
    """Write ``parent``'s split indexes to the paths of version ``number`` (attempt ``transaction``); the new paths.

    For commits that list the chunks of a version in full (field additions, upgrades, restores):
    the new version lists them under index paths of its own. A parent with index files of its
    own has them copied byte for byte; one listed by delta (format 6) has its composed chunks written.
    """
    storage = parent.storage
    indexes: dict[str, str] = {}
    if parent.version.listed_by_delta:
        for split, chunks in parent.chunks().items():
            indexes[split] = layout.split_index(number, transaction, split)
            storage.write(indexes[split], index_document(chunks, parent.config.chunk_bytes))
        return indexes
    for split, path in parent.version.indexes.items():
        indexes[split] = layout.split_index(number, transaction, split)
        storage.write(indexes[split], storage.read(path))
    return indexes


def put_commit_record(head: VersionReader, version: Version, written: Sequence[str]) -> bool:
    """Create ``version``'s commit record; whether it is ours now (``False``: another writer's is).

    The files this attempt ``written`` (and the record names) are made durable first
    (:meth:`~litstore.storage.Storage.sync`; the chunks of a staged fragment were when it was
    staged): a record that outlives a power loss never names a file that did not.

    A PUT can succeed on the server while its response is lost: the client retries
    and is told the record exists, or gives up with an error. Either way the record
    is read back, and if it carries this attempt's transaction id the commit
    happened. A record that is ours is then named in the head hint (best effort).

    Raises:
        UncertainCommitError: the PUT failed and reading the record back could not
            tell whether it landed; the caller must not remove anything the record names.
        VersionNotFoundError: the record's branch was deleted meanwhile (the record was removed again).
    """
    head.storage.sync(written)
    if _created(head, version):
        branched.confirm_commit(head.storage, version.number)  # a branch deleted meanwhile: undone, raised
        _write_hint(head, version.number)
        return True
    return False


def _write_hint(head: VersionReader, number: int) -> None:
    """Overwrite the head hint with ``number``: in place (:meth:`~litstore.storage.Storage.overwrite`), as good
    as absent if it fails, another writer's lands after it or a reader sees a mix of the two (readers check it,
    :func:`litstore.read.log.head_number`)."""
    with contextlib.suppress(StorageError):
        head.storage.overwrite(layout.HEAD_HINT, f"{number}\n".encode())


def _created(head: VersionReader, version: Version) -> bool:
    """:func:`put_commit_record` without the hint."""
    storage = head.storage
    path = layout.version_record(version.number)
    # Compact, as gc's tombstones: indented, a format-4 record listing 11 chunks' deletion
    # vectors was 3.1 KB, 15% of it spaces and newlines, and every commit writes one.
    data = version.model_dump_json().encode()
    try:
        if storage.put_if_absent(path, data):
            return True
    except NotDurableError as exc:  # created, and readers see it, but a power loss may take it back
        raise UncertainCommitError(
            f"the commit record of version {version.number} was created but cannot be made durable: {exc}. "
            "Readers see the version now; it may be gone after a power loss. Check the disk, then open the store "
            "again to see"
        ) from exc
    except StorageError as exc:
        try:
            owner = _owner(head, version.number)
        except StorageError:
            owner = None
        if owner == version.transaction:
            return True
        if owner is not None:
            return False  # another writer's record holds the number: ours can never land
        # A branch deleted meanwhile takes the directory the record was being written into with it: then
        # nothing was committed, and saying so is certain. Nothing is removed here: the path may hold another
        # writer's record by now (a branch made again under the name).
        storage = head.storage
        if isinstance(storage, branched.BranchStorage) and not storage.unchanged(version.number):
            raise VersionNotFoundError(
                f"there is no branch {storage.branch!r}: it was deleted while version {version.number} was being "
                f"committed to it ({exc}). Nothing was committed (gc removes the staged files)"
            ) from exc
        raise UncertainCommitError(
            f"creating the commit record of version {version.number} failed and it cannot be read back: "
            f"{exc}. It may have been created all the same; open the store again to see."
        ) from exc
    try:
        return _owner(head, version.number) == version.transaction
    except StorageError as exc:
        raise UncertainCommitError(
            f"version {version.number} exists but its commit record cannot be read back to see whose it is: {exc}"
        ) from exc


def _owner(head: VersionReader, number: int) -> str | None:
    """The transaction of commit record ``number`` (``""`` for a tombstone); ``None`` if there is none."""
    try:
        record = log.read_record(head.storage, number)
    except VersionNotFoundError:
        return None
    if isinstance(record, ExpiredVersion):
        return ""
    return record.transaction or ""


def catch_up(
    head: VersionReader, touching: AbstractSet[str] = frozenset()
) -> tuple[VersionReader, set[Any], set[str], set[str]]:
    """The newest head, the keys the commits since ``head`` changed, the chunks they dropped, and the chunks
    they marked rows of dead (format 4: those whose deletion vector a commit wrote anew).

    A record listed in full names no dropped chunks from format 7: of such a record, the
    chunks of ``touching`` (those the caller's commit marks rows of or moves rows out of,
    all of them its head's) that it no longer lists are given as dropped; its split
    indexes are read for that only where ``touching`` is not empty (an append touches no
    chunk, and nothing of the head's listing is read: gc may have expired the head).

    Where ``head`` holds its listing, each record listed by delta (format 6) is applied to
    it as it is read, so the new head holds its listing too: a writer that lost a race does
    not compose it again from the chain (up to ``checkpoint_interval`` records) for each loss.

    Raises:
        ConflictError: one of those commits was expired by gc before it could be checked.
    """
    touched: set[Any] = set()
    dropped: set[str] = set()
    marked: set[str] = set()
    start = head.version.number
    latest = head.version
    listing = head.built_listing
    for number in log.versions_after(head.storage, start):
        record = log.read_record(head.storage, number)
        if isinstance(record, ExpiredVersion):
            raise ConflictError(
                f"version {number}, committed while this store was at version {start}, has since been expired "
                "by gc, so this write cannot be checked against it; nothing was committed. Move to the newest "
                "version (Store.refresh()) and write again."
            )
        if record.manifest is not None:
            delta = log.read_manifest_file(head.storage, head.config, record.manifest, delta=True)
            touched.update(query.touched_keys(delta))
        dropped.update(record.dropped_chunks)
        if touching and record.transaction is not None and not record.listed_by_delta and not record.dropped_chunks:
            # (Whatever the config this writer holds: the store may have been switched to format 7 since.)
            now = {chunk.filename for listed in log.read_chunks(head.storage, record).values() for chunk in listed}
            dropped |= set(touching) - now
        if record.transaction is not None:
            own = layout.deletions(record.number, record.transaction)
            marked.update(ref.chunk for ref in record.deletions if ref.path == own)
        listing = listings.apply(listing, record) if listing is not None and record.listed_by_delta else None
        latest = record
    return head.successor(latest, None, None, listing=listing), touched, dropped, marked


def clash(head: VersionReader, keys: set[Any]) -> ConflictError | None:
    """The error for ``keys`` this commit touches that writers up to ``head`` changed first (``None``: none)."""
    if not keys:
        return None
    return ConflictError(
        f"another writer committed changes to {len(keys)} of the same keys first "
        f"(now at version {head.version.number}): {describe(sorted(keys, key=repr))}; nothing was committed "
        "(Store.refresh() moves to the newest version, to read their changes or write over them)"
    )


def pause(attempt: int) -> float:
    """How long a writer that lost ``attempt + 1`` races in a row waits before publishing again.

    Short and jittered, and shorter the more often it lost: growing pauses (the usual
    exponential backoff) starve the writer that keeps losing, since the winners start
    their next commit at once. Measured with three processes upserting disjoint keys
    (``tests/txn/test_concurrent_writers.py``).
    """
    return random.uniform(0, MAX_PAUSE / (1 + attempt))
