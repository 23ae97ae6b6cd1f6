"""A store's tags: names for versions, as a read-only mapping with ways to change it.

``tags/<name>.json`` is a :class:`~litstore.format.models.Tag`. A tag never moves
silently: naming another version with an existing tag needs ``move=True``. A tag
that ``create`` returned protects its version from every gc, including one that was
running while it was created.

``Store.tags`` makes a :class:`Tags` over the store; what it uses of the store is the
:class:`TagOwner` protocol, so this module never imports :mod:`litstore.store`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from litstore.errors import ConflictError, TagError, VersionNotFoundError
from litstore.format import layout
from litstore.format.models import Tag, Version, check_tag_name
from litstore.read import log

if TYPE_CHECKING:
    from litstore.snapshot import VersionRef
    from litstore.storage import Storage


#: How long creating a tag waits for a gc that is expiring its version to finish, in seconds.
_GC_WAIT = 10.0


class _Head(Protocol):
    """What tags read of a store's head: its version, and how it resolves a version reference."""

    @property
    def version(self) -> Version: ...

    def resolve(self, version: VersionRef) -> int: ...


class TagOwner(Protocol):
    """What :class:`Tags` uses of a store: :class:`litstore.Store` is one."""

    @property
    def storage(self) -> Storage: ...

    def head(self) -> _Head: ...


class Tags(Mapping[str, int]):
    """The store's tags: a read-only mapping of name to version number, plus ways to change it.

    ``store.tags["release-1"]``, ``dict(store.tags)``, ``store.tags.create(...)``,
    ``store.tags.delete(...)``. A tag never moves silently.

    On a branch the mapping also holds the tags of the lines it starts from that name a
    version of its history (as git's tags are seen from any branch, but numbers are
    per line: a base's tag of a version after the branch left it is not the branch's
    version of that number, so it is left out, and ``at(name)`` says where to read it).
    ``create`` and ``delete`` change the branch's own tags; an own tag shadows a base's.
    """

    def __init__(self, store: TagOwner) -> None:
        self._store = store

    def __getitem__(self, name: str) -> int:
        try:
            return log.find_tag(self._store.storage, name).version
        except VersionNotFoundError as exc:
            raise KeyError(name) from exc

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self) -> list[str]:
        """The tags this line sees, by name; a stray file under ``tags/`` is listed too, and its lookup raises
        ``KeyError``, which is how the CLI finds and names it."""
        return log.visible_tag_names(self._store.storage)

    def __repr__(self) -> str:
        return f"Tags({dict(self)!r})"

    def create(self, name: str, version: VersionRef | None = None, *, move: bool = False) -> Tag:
        """Name ``version`` (default: the latest) ``name``; ``store.at(name)`` then reads it.

        Tagging an existing name with another version raises unless ``move=True``.

        Raises:
            TagError: the name is invalid, or it names another version and ``move`` is false.
            VersionNotFoundError: no such version.
        """
        try:
            check_tag_name(name)
        except ValueError as exc:
            raise TagError(str(exc)) from exc
        storage = self._store.storage
        number = self._store.head().version.number if version is None else self._store.head().resolve(version)
        tag = Tag(name=name, version=number, created_at=datetime.now(UTC))
        data = tag.model_dump_json(indent=1).encode()
        if storage.put_if_absent(layout.tag(name), data):
            self._outlive_gc(tag, None)
            return tag
        current = log.read_tag(storage, name)
        if current.version == number:
            return current
        if not move:
            raise TagError(
                f"tag {name!r} already names version {current.version}; pass move=True to point it at {number}"
            )
        storage.write(layout.tag(name), data, durable=True)  # (a torn tag would hide the version it named)
        self._outlive_gc(tag, current)
        return tag

    def _outlive_gc(self, tag: Tag, replaced: Tag | None) -> None:
        """Make sure the version ``tag`` names was not expired by a gc that read the tags before it was written.

        gc marks the versions it will expire, then reads the tags again (see
        :mod:`litstore.ops.gc`): if no mark is there now, any gc still to expire the
        version will see this tag. While marks are there, wait for them to go; if the
        version was expired after all, the tag is undone (``replaced`` written back).

        Raises:
            VersionNotFoundError: gc expired the version while the tag was being written.
            ConflictError: a gc keeps marking the version for longer than this waits.
        """
        storage = self._store.storage
        deadline = time.monotonic() + _GC_WAIT
        while storage.names(layout.expiring(tag.version)) and time.monotonic() < deadline:
            time.sleep(0.02)
        marked = bool(storage.names(layout.expiring(tag.version)))
        record = log.read_record(storage, tag.version)
        if isinstance(record, Version) and not marked:
            return
        if replaced is None:
            storage.delete(layout.tag(tag.name))
        else:
            storage.write(layout.tag(tag.name), replaced.model_dump_json(indent=1).encode(), durable=True)
        if isinstance(record, Version):
            raise ConflictError(
                f"gc is expiring version {tag.version} (or a gc was killed while doing so; the next gc clears "
                f"that after its grace period): tag {tag.name!r} was not created; try again"
            )
        raise VersionNotFoundError(
            f"version {tag.version} was expired by a gc that ran while tag {tag.name!r} was being created; "
            "the tag was not created"
        )

    def delete(self, name: str) -> None:
        """Remove tag ``name`` (the version it named stays).

        Raises:
            VersionNotFoundError: there is no such tag.
            TagError: the tag is one of a line this branch starts from (delete it on that line).
        """
        storage = self._store.storage
        try:
            log.read_tag(storage, name)
        except VersionNotFoundError:
            log.find_tag(storage, name)  # raises if the name is no tag this line sees either
            raise TagError(
                f"tag {name!r} is a tag of a line this branch starts from, not the branch's own: delete it on that "
                "line (store.at('branch:LINE').tags.delete(...))"
            ) from None
        storage.delete(layout.tag(name))
