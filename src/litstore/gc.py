"""Garbage collection: expire old versions and remove files no kept version needs.

What is kept: the latest version, every tagged version, and the versions the caller
keeps (``keep_last``, ``older_than``); with neither, every version is kept and only
debris goes. What goes:

- the commit records of expired versions are replaced by tombstones
  (:class:`~litstore.models.ExpiredVersion`): the version can no longer be opened,
  its number can never be committed again, and a writer that was behind learns
  that history it has not seen was expired (it raises ``ConflictError``); then
- every file under ``fragments/``, ``manifests/`` and ``versions/`` that no kept
  version references: chunks only expired versions listed, their index files and
  manifest deltas, and debris of writers that never committed.

Before a commit record goes, every kept version whose manifest would be composed
through it gets a full manifest checkpoint of its own, so it stays readable.

Concurrency: a file is removed only if it is older than ``grace`` (default one hour)
or referenced by an expired version, so a writer that is still staging or
publishing never loses its files, provided no single write takes longer than
``grace``. A reader that opened a version before gc expired it may fail to read
chunks that gc then removes; keep versions readers still use (tag them, or
``older_than``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tqdm.auto import tqdm

from litstore import _litdata, layout
from litstore.models import ExpiredVersion, Version
from litstore.storage import Storage

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


def choose_kept(
    versions: list[Version], tagged: Iterable[int], keep_last: int | None, older_than: timedelta | datetime | None
) -> set[int]:
    """The version numbers gc keeps."""
    numbers = [version.number for version in versions]
    kept = {numbers[-1], *tagged}
    if keep_last is None and older_than is None:
        return set(numbers)
    if keep_last is not None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        kept.update(numbers[-keep_last:])
    if older_than is not None:
        cutoff = older_than if isinstance(older_than, datetime) else datetime.now(UTC) - older_than
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
    for path in version.indexes.values():
        files.update(chunk.filename for chunk in _litdata.parse_index_document(storage.read(path), path))
    return files


def collect(
    storage: Storage,
    versions: list[Version],
    kept: set[int],
    has_checkpoint: Callable[[Version], bool],
    write_checkpoint: Callable[[Version], None],
    dry_run: bool,
    grace: timedelta,
    progress: bool,
) -> GCReport:
    """Expire the versions not in ``kept`` and remove every file no kept version needs."""
    expired = [version for version in versions if version.number not in kept]
    written: list[int] = []
    if expired and not dry_run:
        written = _protect_kept_chains(versions, kept, has_checkpoint, write_checkpoint)
    needed: set[str] = {layout.CONFIG}
    for version in versions:
        if version.number in kept:
            needed |= referenced_files(storage, version)
    expired_files: set[str] = set()
    for version in expired:
        expired_files |= referenced_files(storage, version)
    cutoff = time.time() - grace.total_seconds()
    doomed: list[tuple[str, int]] = []
    for prefix in (layout.FRAGMENTS, layout.MANIFESTS, layout.VERSIONS):
        for path, size, modified in storage.walk(prefix):
            if path in needed or _is_record(path) or path.startswith(f"{layout.VERSIONS}/.") or "/.tmp-" in path:
                continue  # commit records are never deleted: expired ones become tombstones
            if path in expired_files or modified < cutoff:
                doomed.append((path, size))
    doomed.sort()
    if not dry_run:
        # Tombstones first: once they are written nobody can open an expired version.
        now = datetime.now(UTC)
        for version in expired:
            tombstone = ExpiredVersion(number=version.number, expired_at=now)
            storage.write(layout.version_record(version.number), tombstone.model_dump_json().encode())
        for path, _ in tqdm(doomed, desc="gc", unit="file", disable=not progress):
            storage.delete(path)
    return GCReport(
        dry_run=dry_run,
        kept_versions=sorted(kept),
        expired_versions=[version.number for version in expired],
        removed_files=[path for path, _ in doomed],
        removed_bytes=sum(size for _, size in doomed),
        checkpoints_written=written,
    )


def _is_record(path: str) -> bool:
    """Whether ``path`` is a commit record (``versions/<v>.json``)."""
    return path.startswith(f"{layout.VERSIONS}/") and path.count("/") == 1


def _protect_kept_chains(
    versions: list[Version],
    kept: set[int],
    has_checkpoint: Callable[[Version], bool],
    write_checkpoint: Callable[[Version], None],
) -> list[int]:
    """Checkpoint each kept version whose manifest chain passes through an expired version."""
    by_number = {version.number: version for version in versions}
    written = []
    for version in versions:
        if version.number not in kept:
            continue
        number = version.number
        while number > 0 and not has_checkpoint(by_number[number]):
            number -= 1
            if number > 0 and number not in kept:
                write_checkpoint(version)
                written.append(version.number)
                break
    return written
