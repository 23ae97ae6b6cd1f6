"""A store's branches: lines of versions that start from a version of another line, and merging them.

``store.branches.create("relabel", from_=12)`` writes ``branches/relabel/branch.json``
(a :class:`~litstore.format.models.Branch`) and nothing else: the branch's first version
is its base line's version 12, read in place (chunks, key runs, deletion vectors and
split indexes are shared, never copied). ``Store.open(root, branch="relabel")`` (or
``store.at("branch:relabel")``) is a store like any other whose writes commit versions
13, 14, ... of its own line, with the same put-if-absent protocol, racing only the
writers of that branch (:mod:`litstore.storage.branched` says where the records live).

:func:`merge` applies one line's changes since the lines parted to another, by key, as
one commit: a key both changed (to different contents) is a
:class:`~litstore.errors.MergeConflictError` naming the keys, and nothing is committed.

``Store.branches`` makes a :class:`Branches` over the store; what it uses of the store is
the :class:`BranchOwner` protocol, so this module never imports :mod:`litstore.store`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from litstore import txn
from litstore.errors import (
    SHOWN_CULPRITS,
    ConflictError,
    InvalidArgumentError,
    MergeConflictError,
    MissingFileError,
    UncertainCommitError,
    VersionNotFoundError,
    describe,
)
from litstore.format import layout
from litstore.format import manifest as manifest_format
from litstore.format.models import MAIN_BRANCH, Branch, Version, check_branch_name, declared_fields
from litstore.ops.diff import Diff
from litstore.read import log
from litstore.read.version import VersionReader
from litstore.storage import branched
from litstore.txn import update

if TYPE_CHECKING:
    from litstore.snapshot import VersionRef
    from litstore.storage import Storage

#: How long creating a branch waits for a gc that is expiring its start version to finish, in seconds.
_GC_WAIT = 10.0
#: The commit metadata entry a merge records: which branch, at which of its versions, it took in.
MERGED_FROM = "merged_from"


class _Head(Protocol):
    @property
    def version(self) -> Version: ...

    def resolve(self, version: VersionRef) -> int: ...


class BranchOwner(Protocol):
    """What :class:`Branches` uses of a store: :class:`litstore.Store` is one."""

    @property
    def storage(self) -> Storage: ...

    def head(self) -> _Head: ...


class Branches(Mapping[str, Branch]):
    """The store's branches: a read-only mapping of name to :class:`~litstore.format.models.Branch`, plus
    :meth:`create` and :meth:`delete`. ``main`` (the store's own line) is no entry."""

    def __init__(self, store: BranchOwner) -> None:
        self._store = store

    def __getitem__(self, name: str) -> Branch:
        try:
            return branched.read_branch(branched.root_of(self._store.storage), name)
        except VersionNotFoundError as exc:
            raise KeyError(name) from exc

    def __iter__(self) -> Iterator[str]:
        return iter(branched.branch_names(branched.root_of(self._store.storage)))

    def __len__(self) -> int:
        return len(branched.branch_names(branched.root_of(self._store.storage)))

    def __repr__(self) -> str:
        return f"Branches({ {name: branch.from_version for name, branch in self.items()}!r})"

    def create(self, name: str, from_: VersionRef | None = None) -> Branch:
        """Start branch ``name`` from version ``from_`` (default: the head) of this handle's line.

        Writes one small record; the branch shares every file of that version. Creating
        an existing branch with the same start returns it; with another start it raises
        (a branch never moves). A version a branch starts from is kept by every gc, as a
        tagged one is.

        Raises:
            InvalidArgumentError: the name is invalid, or a branch of that name starts elsewhere.
            VersionNotFoundError: no such version (or gc expired it meanwhile).
        """
        try:
            check_branch_name(name)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from exc
        storage = self._store.storage
        root = branched.root_of(storage)
        head = self._store.head()
        number = head.version.number if from_ is None else head.resolve(from_)
        line = storage.line_of(number) if isinstance(storage, branched.BranchStorage) else MAIN_BRANCH
        base = branched.open_branch(root, line)
        log.read_version(base, number)
        left = root.names(layout.branch_directory(name))
        if left and not root.exists(layout.branch_record(name)):
            raise InvalidArgumentError(
                f"files of a deleted branch {name!r} are still there (a deletion was stopped, or a writer of the "
                f"branch finished after it): run store.branches.delete({name!r}) to finish it, then create the branch"
            )
        branch = Branch(name=name, base=line, from_version=number, created_at=datetime.now(UTC))
        if not root.put_if_absent(layout.branch_record(name), branch.model_dump_json(indent=1).encode()):
            current = branched.read_branch(root, name)
            if (current.base, current.from_version) == (line, number):
                return current
            raise InvalidArgumentError(
                f"branch {name!r} already starts from version {current.from_version} of {current.base!r}; "
                "a branch never moves: pick another name"
            )
        if line != MAIN_BRANCH and not _unchanged(root, base):  # its base was deleted meanwhile
            root.delete(layout.branch_record(name))
            raise VersionNotFoundError(
                f"there is no branch {line!r}: it was deleted while branch {name!r} was being made from it; "
                f"branch {name!r} was not created"
            )
        _outlive_gc(root, base, branch)
        return branch

    def delete(self, name: str) -> None:
        """Delete branch ``name``: its record, its own commit records, tags and split indexes.

        The chunks and other data files only its versions listed stay until a gc no longer
        finds them needed by any line (main's records are never touched). The branch
        record goes first, so from then on no reader, writer or gc sees the branch; a
        writer whose commit record lands after that is told so and its record removed
        (:meth:`litstore.storage.branched.BranchStorage.confirm_commit`); one that landed
        before goes with the branch. Safe to run again: a deletion that was stopped
        part-way is finished.

        Raises:
            InvalidArgumentError: ``name`` is main, the branch this handle is on, or the base of other
                branches (delete those first).
            VersionNotFoundError: there is no branch ``name``.
            ConflictError: a branch was made from this one while it was being deleted; it was not deleted.
        """
        root = branched.root_of(self._store.storage)
        if name == MAIN_BRANCH:
            raise InvalidArgumentError("main is the store's own line: it cannot be deleted")
        if name == branched.branch_of(self._store.storage):
            raise InvalidArgumentError(
                f"this store handle is on branch {name!r}: delete it from a handle on another line "
                "(litstore.open(root).branches.delete(...))"
            )
        path = layout.branch_record(name)
        try:
            record = root.read(path)
        except MissingFileError:
            if not root.names(layout.branch_directory(name)):
                raise VersionNotFoundError(
                    f"there is no branch {name!r}; branches: {branched.branch_names(root) or 'none'}"
                ) from None
            root.delete_tree(layout.branch_directory(name))  # what a stopped deletion left
            return
        _refuse_children(root, name)
        root.delete(path)
        try:
            _refuse_children(root, name)  # one made meanwhile: put the record back (it never changes)
        except InvalidArgumentError as exc:
            root.put_if_absent(path, record)
            raise ConflictError(f"{exc}; it was made while {name!r} was being deleted, which was undone") from None
        root.delete_tree(layout.branch_directory(name))


def _refuse_children(root: Storage, name: str) -> None:
    children = [child for child in branched.branch_names(root) if branched.read_branch(root, child).base == name]
    if children:
        raise InvalidArgumentError(
            f"branch {name!r} is the base of {describe(children, SHOWN_CULPRITS)}: delete those first"
        )


def _unchanged(root: Storage, view: Storage) -> bool:
    """Whether the branch ``view`` sees is still the one it was opened on (not deleted, nor made again)."""
    try:
        return isinstance(view, branched.BranchStorage) and branched.read_branch(root, view.branch) == view.record
    except VersionNotFoundError:
        return False


def _outlive_gc(root: Storage, base: Storage, branch: Branch) -> None:
    """Make sure the version ``branch`` starts from was not expired by a gc that read the branches before
    it was written (as :meth:`litstore.tags.Tags.create` does for a tag); undo the branch if it was.

    Raises:
        VersionNotFoundError: gc expired the version while the branch was being created.
        ConflictError: a gc keeps marking the version for longer than this waits.
    """
    number = branch.from_version
    deadline = time.monotonic() + _GC_WAIT
    while base.names(layout.expiring(number)) and time.monotonic() < deadline:
        time.sleep(0.02)
    marked = bool(base.names(layout.expiring(number)))
    record = log.read_record(base, number)
    if isinstance(record, Version) and not marked:
        return
    root.delete(layout.branch_record(branch.name))
    if isinstance(record, Version):
        raise ConflictError(f"gc is expiring version {number}: branch {branch.name!r} was not created; try again")
    raise VersionNotFoundError(
        f"version {number} was expired by a gc that ran while branch {branch.name!r} was being created; "
        "the branch was not created"
    )


def fork_point(root: Storage, first: str, second: str) -> int:
    """The newest version lines ``first`` and ``second`` share: where they parted.

    Raises:
        InvalidArgumentError: the two are the same line.
        VersionNotFoundError: a branch does not exist.
    """
    if first == second:
        raise InvalidArgumentError(f"cannot merge {first!r} into itself")
    lines = [branched.open_branch(root, name) for name in (first, second)]

    def line_of(storage: Storage, number: int) -> str:
        return storage.line_of(number) if isinstance(storage, branched.BranchStorage) else MAIN_BRANCH

    starts = {start for storage in lines if isinstance(storage, branched.BranchStorage) for _, start in storage.chain}
    for start in sorted(starts, reverse=True):
        if line_of(lines[0], start) == line_of(lines[1], start):
            return start
    raise AssertionError("two lines of one store always share version 0")  # pragma: no cover


def _head(storage: Storage, config: Any) -> VersionReader:
    number = log.head_number(storage)
    return VersionReader(storage, config, log.read_version(storage, 0 if number is None else number))


def _last_merge(target: VersionReader, source: str, after: int) -> tuple[int, int] | None:
    """``(target version, source version)`` of the newest merge of ``source`` into ``target``'s line after
    version ``after``, from the commit records' metadata; ``None`` if there is none."""
    for number in range(target.version.number, after, -1):
        try:
            version = log.read_version(target.storage, number)
        except VersionNotFoundError:
            continue
        merged = version.metadata.get(MERGED_FROM) if version.operation == "merge" else None
        if isinstance(merged, dict) and merged.get("branch") == source and isinstance(merged.get("version"), int):
            return number, merged["version"]
    return None


def _changed_keys(diff: Diff) -> set[Any]:
    return (
        set(diff.added.column("key").to_pylist())
        | set(diff.removed.column("key").to_pylist())
        | set(diff.changed.column("key").to_pylist())
    )


def _contents(reader: VersionReader, keys: list[Any]) -> dict[Any, bytes]:
    """The content hash of each of ``keys`` that ``reader``'s version holds."""
    if not keys:
        return {}
    asked = pa.array(keys, manifest_format.schema(reader.config.key_type).field("key").type)
    rows = reader.rows_for_keys(asked)
    return dict(zip(rows.column("key").to_pylist(), rows.column("content_hash").to_pylist(), strict=True))


def merge(
    storage: Storage,
    source: str,
    into: str,
    *,
    message: str | None = None,
    metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> VersionReader:
    """Apply the changes line ``source`` made since it parted from line ``into`` to ``into``, as one version.

    For each key ``source`` added, changed or removed since the base (the version the two
    lines share; after an earlier merge of ``source`` into ``into``, the version of
    ``source`` that merge took in), ``into`` gets ``source``'s record (copied from its
    stored bytes, content hash kept) or loses the key. A key ``into`` also changed since
    the base is a conflict unless both ended the same (same content, or both deleted).
    The commit's metadata records ``{"merged_from": {"branch": source, "version": n}}``.
    Returns ``into``'s new head (its old head if there was nothing to apply).

    Raises:
        MergeConflictError: both lines changed some keys differently; names them; nothing was committed.
        ConflictError: a writer of ``into`` changed the same keys while the merge committed.
        VersionNotFoundError: a branch does not exist.
    """
    root = branched.root_of(storage)
    config = log.read_config(root)
    point = fork_point(root, source, into)
    source_head = _head(branched.open_branch(root, source), config)
    target_head = _head(branched.open_branch(root, into), config)
    base = point
    earlier = _last_merge(target_head, source, point)
    if earlier is not None and earlier[1] > point:
        try:
            source_head.at(earlier[1])
            base = earlier[1]
        except VersionNotFoundError:
            base = point  # gc expired the version merged then: judge from where the lines parted
    theirs = _changed_keys(Diff.of(source_head.at(base), source_head))
    if base == point:
        ours_diff = Diff.of(target_head.at(point), target_head)
    else:  # what the target holds now against what it took in last time
        ours_diff = Diff.between(
            base, target_head.version.number, source_head.at(base).manifest(), target_head.manifest()
        )
    both = sorted(theirs & _changed_keys(ours_diff), key=repr)
    source_contents = _contents(source_head, sorted(theirs, key=repr))
    target_contents = _contents(target_head, both)
    conflicts = [key for key in both if source_contents.get(key) != target_contents.get(key)]
    if conflicts:
        raise MergeConflictError(
            f"cannot merge {source!r} into {into!r}: {len(conflicts)} keys were changed on both since version "
            f"{base}: {describe(conflicts, SHOWN_CULPRITS)}; nothing was committed. Make the two agree on them "
            "(upsert or delete on either line), then merge again",
            conflicts,
        )
    settled = set(both)
    upserts = sorted((key for key in theirs - settled if key in source_contents), key=repr)
    deletes = tuple(sorted((key for key in theirs - settled if key not in source_contents), key=repr))
    if not upserts and not deletes:
        return target_head
    fields = declared_fields(config, target_head.version)
    staged = txn.stage(target_head.storage, config, update.copied_runs(source_head, upserts, fields), progress)
    fragments = [staged] if len(staged) else []
    recorded = {MERGED_FROM: {"branch": source, "version": source_head.version.number}, **(metadata or {})}
    try:
        return txn.commit(
            target_head, txn.Merge(fragments, deletes), message=message, metadata=recorded, progress=progress
        )
    except BaseException as exc:
        if not isinstance(exc, UncertainCommitError):
            txn.discard(target_head.storage, staged)
        raise
