"""Garbage collection: expire old versions and remove files no kept version needs.

What is kept: the latest version, every tagged version, and the versions the caller
keeps (``keep_last``, ``older_than``); with neither, every version is kept and only
debris goes. What goes:

- the commit records of expired versions are replaced by tombstones
  (:class:`~litstore.format.models.ExpiredVersion`): the version can no longer be
  opened, its number can never be committed again, and a writer that was behind
  learns that history it has not seen was expired (it raises ``ConflictError``);
- every data file (chunk, manifest, index) that no kept version references: those
  only expired versions listed, and debris of writers that never committed; and
  temporary files that killed writes left behind.

gc deletes only names it can prove it wrote (:func:`litstore.format.layout.is_own_file`)
and never follows a link (the storage contract), so a crafted store cannot make it
delete anything else.

Restartable: every kept version whose manifest would be composed through an
expired one gets a checkpoint first, and tombstones are written newest first, so a
gc killed at any point leaves every listed version readable, and the next gc
finishes the work.

Concurrency: a file is removed only if it is older than ``grace`` (default one hour)
or referenced by an expired version, so a writer that is still staging or
publishing never loses its files, provided no single write takes longer than
``grace``. A reader that opened a version before gc expired it may fail to read
chunks that gc then removes; keep versions readers still use (tag them, or
``older_than``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from litstore.errors import InvalidArgumentError
from litstore.format import layout
from litstore.format.models import ExpiredVersion, Version
from litstore.storage import Storage
from litstore.txn import log

if TYPE_CHECKING:
    from litstore.snapshot import Snapshot

DEFAULT_GRACE = timedelta(hours=1)


@dataclass(frozen=True)
class GCReport:
    """What :meth:`Store.gc` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    kept_versions: list[int]
    expired_versions: list[int]
    removed_files: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    checkpoints_written: list[int] = field(default_factory=list)

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"gc {verb} {len(self.removed_files)} files ({self.removed_bytes:,} bytes); "
            f"expired versions {self.expired_versions or 'none'}; kept {len(self.kept_versions)} versions"
        )

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"<GCReport {self.summary()}>"


def choose_kept(
    versions: list[Version], tagged: Iterable[int], keep_last: int | None, older_than: timedelta | datetime | None
) -> set[int]:
    """The version numbers gc keeps.

    Raises:
        InvalidArgumentError: ``keep_last`` is below 1 or ``older_than`` is of the wrong type.
    """
    numbers = [version.number for version in versions]
    kept = {numbers[-1], *tagged}
    if keep_last is None and older_than is None:
        return set(numbers)
    if keep_last is not None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise InvalidArgumentError(f"keep_last must be a whole number of at least 1, got {keep_last!r}")
        kept.update(numbers[-keep_last:])
    if older_than is not None:
        if isinstance(older_than, datetime):
            cutoff = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
        elif isinstance(older_than, timedelta):
            cutoff = datetime.now(UTC) - older_than
        else:
            raise InvalidArgumentError(f"older_than must be a timedelta or a datetime, got {older_than!r}")
        kept.update(version.number for version in versions if version.created_at >= cutoff)
    return kept & set(numbers)


def referenced_files(storage: Storage, version: Version) -> set[str]:
    """Every file ``version`` needs: its record, indexes, manifest files and chunks."""
    files = {layout.version_record(version.number), *version.indexes.values()}
    if version.manifest:
        files.add(version.manifest)
    if version.transaction:
        files.add(layout.manifest_checkpoint(version.number, version.transaction))
    if version.checkpoint:
        files.add(version.checkpoint)
    for chunks in log.read_chunks(storage, version).values():
        files.update(chunk.filename for chunk in chunks)
    return files


def collect(
    head: Snapshot,
    keep_last: int | None = None,
    older_than: timedelta | datetime | None = None,
    *,
    dry_run: bool = False,
    grace: timedelta | None = None,
    progress: bool = False,
) -> GCReport:
    """Expire the versions gc does not keep and remove every file no kept version needs."""
    grace = DEFAULT_GRACE if grace is None else grace
    if not isinstance(grace, timedelta):
        raise InvalidArgumentError(f"grace must be a timedelta, got {grace!r}")
    storage, config = head.storage, head.config
    versions = head.versions()
    tagged = [log.read_tag(storage, name).version for name in log.tag_names(storage)]
    kept = choose_kept(versions, tagged, keep_last, older_than)
    expired = [version for version in versions if version.number not in kept]
    # Every index is read (and its chunk names checked) before anything is written, so a
    # store gc refuses is left as it was.
    needed: set[str] = {layout.CONFIG}
    for version in versions:
        if version.number in kept:
            needed |= referenced_files(storage, version)
    expired_files: set[str] = set()
    for version in expired:
        expired_files |= referenced_files(storage, version)
    written: list[int] = []
    if expired and not dry_run:
        checkpoints = [
            (version, log.compose_manifest(storage, config, version.number))
            for version in _needing_checkpoints(storage, versions, kept)
        ]
        for version, full in checkpoints:
            log.write_checkpoint(storage, config, version, full)
            written.append(version.number)
    cutoff = time.time() - grace.total_seconds()
    doomed: list[tuple[str, int]] = []
    for prefix in (layout.FRAGMENTS, layout.MANIFESTS, layout.VERSIONS):
        for found in storage.walk(prefix):
            if found.path in needed or not layout.is_own_file(found.path):
                continue  # commit records are never deleted (expired ones become tombstones), nor strangers' files
            if found.path in expired_files or found.modified < cutoff:
                doomed.append((found.path, found.size))
        doomed.extend(
            (found.path, found.size)
            for found in storage.temporary_files(prefix)
            if found.modified < cutoff and layout.is_temporary(found.path)
        )
    doomed.sort()
    if not dry_run:
        # Tombstones first, newest first: any version not yet tombstoned stays readable.
        now = datetime.now(UTC)
        for version in sorted(expired, key=lambda version: -version.number):
            tombstone = ExpiredVersion(number=version.number, expired_at=now)
            storage.write(layout.version_record(version.number), tombstone.model_dump_json().encode())
        for path, _ in tqdm(doomed, desc="removing unreferenced files", unit="file", disable=not progress):
            storage.delete(path)
    return GCReport(
        dry_run=dry_run,
        kept_versions=sorted(kept),
        expired_versions=[version.number for version in expired],
        removed_files=[path for path, _ in doomed],
        removed_bytes=sum(size for _, size in doomed),
        checkpoints_written=written,
    )


def _needing_checkpoints(storage: Storage, versions: list[Version], kept: set[int]) -> list[Version]:
    """Kept versions whose manifest chain passes through a version that will be expired."""
    manifest_names = set(storage.names(layout.MANIFESTS))
    by_number = {version.number: version for version in versions}
    needing = []
    for version in versions:
        if version.number not in kept:
            continue
        number = version.number
        while number > 0 and number in by_number and log.checkpoint_of(by_number[number], manifest_names) is None:
            number -= 1
            if number > 0 and number not in kept:
                needing.append(version)
                break
    return needing
