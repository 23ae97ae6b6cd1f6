"""A branch of a store seen as a store: a :class:`Storage` that puts the branch's commit records where they belong.

A branch ``b`` made from version ``F`` of its base line (``main``, or another branch)
shares every data file with the store (chunks, manifests, key runs, deletion vectors:
names unique store-wide by their transaction id) and keeps what ``versions/`` holds of
its own versions under its own directory::

    branches/<b>/branch.json                    Branch: base line and from_version F
    branches/<b>/versions/<n>.json              b's version n, for n > F
    branches/<b>/versions/head.hint             b's head hint
    branches/<b>/versions/turn.claim            b's advisory commit claim
    branches/<b>/versions/<n>.expiring/...      gc's marks on b's version n
    branches/<b>/versions/<n>-<txn>/<split>/... the split indexes of b's version n
    branches/<b>/tags/<name>.json               b's tags

:class:`BranchStorage` maps those paths: ``versions/<n>.json`` (and ``<n>.expiring/``,
``<n>-<txn>/``) is b's own for ``n > F`` and the base line's otherwise (recursively, for a branch of a
branch); the head hint, the claim and ``tags/`` are b's own; every other path is the
root's. So the commit protocol, the version log, tags, gc and every reader work on a
branch unchanged: b's version ``F + 1`` is created with put-if-absent exactly as
main's next version is, racing only writers of b. A store without branches has no
``branches/`` directory and reads and writes as before, byte for byte.

A view's :attr:`~BranchStorage.url` is the root's with ``#branch=<b>`` after it, which
:func:`litstore.storage.open_storage` opens again (pickled stores and snapshots, the
CLI's ``ROOT#branch=b``), and which keeps streaming's private views of a branch apart
from main's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO

import pydantic

from litstore.errors import (
    IntegrityError,
    StorageError,
    UncertainCommitError,
    VersionNotFoundError,
    first_problem,
)
from litstore.format import layout
from litstore.format.models import MAIN_BRANCH, Branch, check_branch_name
from litstore.storage.base import FileInfo, Storage
from litstore.storage.base import MissingFileError as _MissingFile

if TYPE_CHECKING:
    import mmap

    from litstore.storage.base import LitdataInput

#: What a root URL carries after it to name a branch: ``data/pets#branch=relabel``.
URL_MARK = "#branch="
#: What of ``versions/`` belongs to the line that owns version ``<n>``: its record, gc's marks, its split indexes.
_RECORD_PATH = re.compile(r"versions/(\d+)(\.json|\.expiring(/.*)?|-[0-9a-f]{20}(/.*)?)")
_OWN_PATHS = (layout.HEAD_HINT, layout.TURN)
_RECORD_NAME = re.compile(r"(\d+)\.json")


def read_branch(root: Storage, name: str) -> Branch:
    """Branch ``name``'s record.

    Raises:
        VersionNotFoundError: there is no such branch (or the name is not a valid branch name).
        IntegrityError: the record is damaged.
    """
    try:
        check_branch_name(name)
    except ValueError as exc:
        raise VersionNotFoundError(f"there is no branch {name!r}: {exc}") from exc
    path = layout.branch_record(name)
    try:
        data = root.read(path)
    except _MissingFile:
        raise VersionNotFoundError(f"there is no branch {name!r}; branches: {branch_names(root) or 'none'}") from None
    try:
        branch = Branch.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"branch record {path} is damaged: {first_problem(exc, 'document')}") from exc
    if branch.name != name:
        raise IntegrityError(f"branch record {path} says it is branch {branch.name!r}")
    return branch


def branch_names(root: Storage) -> list[str]:
    """The names of every branch of the store at ``root`` (sorted)."""
    return sorted(name for name in root.names(layout.BRANCHES) if root.exists(layout.branch_record(name)))


def lineage(root: Storage, name: str) -> tuple[tuple[str, int], ...]:
    """``(branch, from_version)`` from branch ``name`` down to the one made from ``main``.

    Raises:
        VersionNotFoundError: a branch on the way does not exist.
        IntegrityError: a record is damaged, or the bases form a loop or do not go down.
    """
    chain: list[tuple[str, int]] = []
    current = name
    while current != MAIN_BRANCH:
        branch = read_branch(root, current)
        if (chain and branch.from_version > chain[-1][1]) or any(seen == current for seen, _ in chain):
            raise IntegrityError(f"branch record {layout.branch_record(current)} is damaged: its bases do not go down")
        chain.append((branch.name, branch.from_version))
        current = branch.base
    return tuple(chain)


class BranchStorage(Storage):
    """The store at ``root`` as branch ``name`` sees it (see the module docstring)."""

    def __init__(self, root: Storage, name: str) -> None:
        self.root = root
        self.branch = name
        self.chain = lineage(root, name)
        self.record = read_branch(root, name)  # as opened: a commit checks the branch is still this one
        self.options = root.options
        self.concurrent_reads = root.concurrent_reads

    def __reduce__(self) -> tuple[Any, ...]:
        return (BranchStorage, (self.root, self.branch))

    @property
    def url(self) -> str:
        return f"{self.root.url}{URL_MARK}{self.branch}"

    @property
    def from_version(self) -> int:
        """The version of the base line this branch starts from."""
        return self.chain[0][1]

    def line_of(self, number: int) -> str:
        """The branch whose own record version ``number`` is, for this branch (``main``: the root's)."""
        for name, start in self.chain:
            if number > start:
                return name
        return MAIN_BRANCH

    def owns(self, number: int) -> bool:
        """Whether version ``number`` is one of this branch's own (its record is under its directory)."""
        return number > self.from_version

    def _map(self, path: str) -> str:
        match = _RECORD_PATH.fullmatch(path)
        if match is not None:
            line = self.line_of(int(match.group(1)))
            return path if line == MAIN_BRANCH else f"{layout.branch_directory(line)}/{path}"
        if path in _OWN_PATHS or path == layout.TAGS or path.startswith(f"{layout.TAGS}/"):
            return f"{layout.branch_directory(self.branch)}/{path}"
        return path

    def _own_versions(self) -> str:
        return f"{layout.branch_directory(self.branch)}/{layout.VERSIONS}"

    def _record_names(self) -> list[str]:
        """The names of the commit records this branch sees: each line's own, within its range."""
        upper: int | None = None
        found: list[str] = []
        lines = [*self.chain, (MAIN_BRANCH, -1)]
        for name, start in lines:
            directory = layout.VERSIONS if name == MAIN_BRANCH else f"{layout.branch_directory(name)}/{layout.VERSIONS}"
            for entry in self.root.names(directory):
                match = _RECORD_NAME.fullmatch(entry)
                if match and int(match.group(1)) > start and (upper is None or int(match.group(1)) <= upper):
                    found.append(entry)
            upper = start
        return sorted(found)

    def confirm_commit(self, number: int) -> None:
        """Check, right after this branch's commit record ``number`` was created, that the branch still exists
        as it was opened; if it was deleted (or deleted and made again) meanwhile, remove the record and raise.

        :meth:`litstore.branches.Branches.delete` removes the branch record first and the
        branch's files after it: a record created before that removal is the branch's
        (and goes with it), one created after it would be a version nobody reaches.

        Raises:
            VersionNotFoundError: the branch was deleted while the commit was made; nothing was
                committed (not a :class:`ConflictError`: trying again cannot succeed).
            UncertainCommitError: the branch record could not be read to tell.
        """
        if not self.owns(number) or self.unchanged(number):
            return
        self.root.delete(self._map(layout.version_record(number)))
        raise VersionNotFoundError(
            f"there is no branch {self.branch!r}: it was deleted while version {number} was being committed to it. "
            "Nothing was committed (gc removes the staged files)"
        )

    def unchanged(self, number: int) -> bool:
        """Whether the branch is still the one this view was opened on (not deleted, nor deleted and made again),
        asked while committing version ``number``; nothing is removed.

        Raises:
            UncertainCommitError: the branch record could not be read to tell.
        """
        try:
            current: Branch | None = read_branch(self.root, self.branch)
        except VersionNotFoundError:
            current = None
        except StorageError as exc:
            raise UncertainCommitError(
                f"version {number} of branch {self.branch!r} was being committed, but the branch record cannot be "
                f"read to see whether the branch was deleted meanwhile: {exc}. Open the store again to see"
            ) from exc
        return current == self.record

    # -- the contract, path by path ------------------------------------------------

    def read(self, path: str) -> bytes:
        return self.root.read(self._map(path))

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return self.root.read_range(self._map(path), start, end)

    def read_ranges(self, path: str, spans: Sequence[tuple[int, int]]) -> Sequence[bytes | memoryview]:
        return self.root.read_ranges(self._map(path), spans)

    def write(self, path: str, data: bytes, *, durable: bool = False) -> None:
        self.root.write(self._map(path), data, durable=durable)

    def overwrite(self, path: str, data: bytes) -> None:
        self.root.overwrite(self._map(path), data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self.root.put_if_absent(self._map(path), data)

    def sync(self, paths: Sequence[str]) -> None:
        self.root.sync([self._map(path) for path in paths])

    def exists(self, path: str) -> bool:
        return self.root.exists(self._map(path))

    def names(self, prefix: str) -> list[str]:
        if prefix == layout.VERSIONS:
            return self._record_names()
        return self.root.names(self._map(prefix))

    def walk(self, prefix: str) -> list[FileInfo]:
        if prefix != layout.VERSIONS:
            return self.root.walk(self._map(prefix))
        # This branch's own records, hint, marks and split indexes, under the names this view gives them
        # (what gc reads the times of and removes): its base lines' files are theirs to collect.
        own = self._own_versions()
        return [found._replace(path=layout.VERSIONS + found.path.removeprefix(own)) for found in self.root.walk(own)]

    def delete(self, path: str) -> None:
        self.root.delete(self._map(path))

    def temporary_files(self, prefix: str) -> list[FileInfo]:
        return self.root.temporary_files(self._own_versions() if prefix == layout.VERSIONS else self._map(prefix))

    def listing(self, prefix: str) -> tuple[list[FileInfo], list[FileInfo]]:
        return self.walk(prefix), self.temporary_files(prefix)

    def local_path(self, path: str) -> str | None:
        return self.root.local_path(self._map(path))

    def litdata_input(self) -> LitdataInput | None:
        return self.root.litdata_input()

    def mapped(self, path: str) -> mmap.mmap | bytes | None:
        return self.root.mapped(self._map(path))

    @contextmanager
    def staging(self, prefix: str) -> Iterator[str]:
        with self.root.staging(self._map(prefix)) as directory:
            yield directory

    def write_file(self, path: str, local: str) -> None:
        self.root.write_file(self._map(path), local)

    @contextmanager
    def reading(self, path: str) -> Iterator[BinaryIO]:
        with self.root.reading(self._map(path)) as handle:
            yield handle

    @contextmanager
    def writing(self, path: str, *, durable: bool = False) -> Iterator[BinaryIO]:
        with self.root.writing(self._map(path), durable=durable) as handle:
            yield handle


def open_branch(root: Storage, name: str) -> Storage:
    """The store at ``root`` as branch ``name`` sees it; ``root`` itself for ``main``.

    Raises:
        VersionNotFoundError: there is no such branch.
    """
    if isinstance(root, BranchStorage):
        root = root.root
    return root if name == MAIN_BRANCH else BranchStorage(root, name)


def confirm_commit(storage: Storage, number: int) -> None:
    """:meth:`BranchStorage.confirm_commit` for a branch view; nothing for main's line (it is never deleted)."""
    if isinstance(storage, BranchStorage):
        storage.confirm_commit(number)


def base_lines(storage: Storage) -> list[tuple[str, Storage, int]]:
    """``(line, view, newest)`` for each line a branch view's history runs through below its own, nearest first:
    its versions up to ``newest`` are the view's too (``[]`` for main's line)."""
    if not isinstance(storage, BranchStorage):
        return []
    chain = storage.chain
    bases = [name for name, _ in chain[1:]] + [MAIN_BRANCH]
    return [(base, open_branch(storage.root, base), start) for base, (_, start) in zip(bases, chain, strict=True)]


def branch_of(storage: Storage) -> str:
    """The branch ``storage`` is a view of (``main`` for a plain backend)."""
    return storage.branch if isinstance(storage, BranchStorage) else MAIN_BRANCH


def root_of(storage: Storage) -> Storage:
    """The backend under a branch view (``storage`` itself for a plain backend)."""
    return storage.root if isinstance(storage, BranchStorage) else storage


def owns(storage: Storage, number: int) -> bool:
    """Whether version ``number`` seen through ``storage`` is the storage's own line's (not a base's)."""
    return storage.owns(number) if isinstance(storage, BranchStorage) else True


def split_url(text: str) -> tuple[str, str | None]:
    """A root URL and the branch it names (``None``: none), from ``text`` as :attr:`BranchStorage.url` writes it."""
    root, mark, name = text.rpartition(URL_MARK)
    if not mark:
        return text, None
    try:
        return root, check_branch_name(name)
    except ValueError:
        return text, None


def branch_points(storage: Storage) -> list[int]:
    """The versions of ``storage``'s line that branches were made from (each branch based on this line)."""
    root, line = root_of(storage), branch_of(storage)
    points = []
    for name in branch_names(root):
        branch = read_branch(root, name)
        if branch.base == line:
            points.append(branch.from_version)
    return points


def other_lines(storage: Storage) -> list[Storage]:
    """A view of every line of versions of the store other than ``storage``'s own (main's included)."""
    root, line = root_of(storage), branch_of(storage)
    lines: list[Storage] = [] if line == MAIN_BRANCH else [root]
    return lines + [BranchStorage(root, name) for name in branch_names(root) if name != line]
