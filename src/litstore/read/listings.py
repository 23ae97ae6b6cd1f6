"""A version's listing: the chunks of each split and the deletion vector of each chunk with dead rows.

A commit record of format 1-5 (and a format-6 one at a checkpoint) lists everything:
its split indexes name every chunk, its ``deletions`` every vector. A format-6 record
``listed_by_delta`` names only what changed: the chunks it adds (``added_chunks``), the
chunks it drops (``dropped_chunks``) and the vectors it wrote. Its listing is its
parent's with those applied, composed here from the chain of records down to the
newest one listed in full, as a manifest is composed from its deltas down to a
checkpoint. The chain is bounded: a commit lists in full whenever it writes a manifest
checkpoint and every ``checkpoint_interval`` versions; where gc expires a version a kept
one's chain passes through, it writes that kept version's listing
(``manifests/<v>-<txn>.listing``, :class:`~litstore.format.models.Listing`) first, and
the walk stops there when it meets the tombstone (or, racing gc, at the listing of a
version higher up the walk).

Applying a delta checks it against the chain: a record that drops or marks a chunk its
parent does not list, or adds one it already lists, is an
:class:`~litstore.errors.IntegrityError` naming the record, never a listing that
silently differs. Memory is one version's listing (the chunks and references of the
versions walked are read one record at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import pydantic

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, VersionNotFoundError, first_problem
from litstore.format import layout
from litstore.format.models import DeletionRef, ExpiredVersion, ListedChunk, Listing, Version
from litstore.read import log
from litstore.storage import MissingFileError, Storage


@dataclass(frozen=True)
class VersionListing:
    """What one version lists: its chunks per split (only splits with chunks), its deletion vectors by chunk."""

    chunks: dict[str, list[ChunkInfo]]
    deletions: tuple[DeletionRef, ...]


def read_listing(storage: Storage, version: Version, parent: VersionListing | None = None) -> VersionListing:
    """``version``'s listing, composed from its chain of records where it is listed by delta.

    ``parent``, if given, is the listing of ``version.number - 1`` (a caller walking
    versions in order), so a delta record is applied to it without reading anything.

    Raises:
        IntegrityError: an index, a listing or a record of the chain is damaged, missing
            or contradicts the chain.
    """
    deltas: list[Version] = []
    current = version
    base: VersionListing | None = None
    records = log.records_below(storage, version.number)
    while current.listed_by_delta:
        if current is version and parent is not None:
            base = parent
            deltas.append(current)
            break
        below: Version | ExpiredVersion | None
        try:
            below = next(records, None)
        except VersionNotFoundError:
            below = None
        if below is None or isinstance(below, ExpiredVersion):  # gc cut the chain here, after writing a listing
            base, deltas = _gc_listing(storage, current, deltas)
            break
        deltas.append(current)
        current = below
    if base is None:
        base = VersionListing(log.read_chunks(storage, current), current.deletions)
    for delta in reversed(deltas):
        base = apply(base, delta)
    return base


def apply(parent: VersionListing, delta: Version) -> VersionListing:
    """The listing of ``delta`` (a record listed by delta) built on its parent's ``parent``.

    Raises:
        IntegrityError: ``delta`` drops or marks a chunk the parent does not list, or adds one it lists.
    """
    path = layout.version_record(delta.number)
    split_of = {chunk.filename: split for split, listed in parent.chunks.items() for chunk in listed}
    dropped = set(delta.dropped_chunks)
    for name in sorted(dropped - split_of.keys()):
        raise IntegrityError(
            f"commit record {path} is damaged: it drops chunk {name}, which version {delta.number - 1} does not list"
        )
    chunks = {
        split: [chunk for chunk in listed if chunk.filename not in dropped] if dropped else list(listed)
        for split, listed in parent.chunks.items()
    }
    for name in dropped:
        del split_of[name]
    for split, added in delta.added_chunks.items():
        for chunk in added:
            if chunk.chunk in split_of:
                raise IntegrityError(
                    f"commit record {path} is damaged: it adds chunk {chunk.chunk}, which version "
                    f"{delta.number - 1} lists already"
                )
            split_of[chunk.chunk] = split
        chunks.setdefault(split, []).extend(_chunk_info(chunk) for chunk in added)
    refs = {ref.chunk: ref for ref in parent.deletions if ref.chunk not in dropped}
    for ref in delta.deletions:
        if ref.chunk not in split_of:
            raise IntegrityError(
                f"commit record {path} is damaged: it gives chunk {ref.chunk} a deletion vector, but the version "
                "does not list that chunk"
            )
        refs[ref.chunk] = ref
    return VersionListing(
        {split: listed for split, listed in chunks.items() if listed}, tuple(refs[name] for name in sorted(refs))
    )


def as_listing(number: int, listing: VersionListing) -> Listing:
    """``listing`` as the :class:`Listing` file of version ``number`` holds it (gc writes it)."""
    return Listing(
        number=number,
        chunks={
            split: tuple(
                ListedChunk(chunk=chunk.filename, items=chunk.num_items, size=chunk.num_bytes) for chunk in listed
            )
            for split, listed in listing.chunks.items()
        },
        deletions=listing.deletions,
    )


def added_chunks(
    parent: dict[str, list[ChunkInfo]], chunks: dict[str, list[ChunkInfo]]
) -> dict[str, tuple[ListedChunk, ...]]:
    """The chunks ``chunks`` lists that ``parent`` does not, per split, as a record listed by delta adds them."""
    known = {chunk.filename for listed in parent.values() for chunk in listed}
    added: dict[str, tuple[ListedChunk, ...]] = {}
    for split, listed in chunks.items():
        new = tuple(
            ListedChunk(chunk=chunk.filename, items=chunk.num_items, size=chunk.num_bytes)
            for chunk in listed
            if chunk.filename not in known
        )
        if new:
            added[split] = new
    return added


def _chunk_info(chunk: ListedChunk) -> ChunkInfo:
    return ChunkInfo(filename=chunk.chunk, num_items=chunk.items, num_bytes=chunk.size)


def _gc_listing(storage: Storage, version: Version, above: list[Version]) -> tuple[VersionListing, list[Version]]:
    """The listing gc wrote for ``version`` when it expired the version below it, and the records of ``above``
    (newest first, each listed by delta on the next) still to apply to it.

    gc writes the listing of a kept version before its tombstones, newest first, and then
    removes what only expired versions need: a walk that read a record just before gc
    tombstoned it meets the tombstone lower down, where the version it stands on has no
    listing (or gc removed it). The listing gc wrote for a version higher up the walk
    then holds, so those are tried in turn, the lowest first.

    Raises:
        IntegrityError: none of them has a listing, or the one found is damaged.
    """
    for at, candidate in enumerate([version, *reversed(above)]):
        assert candidate.transaction is not None  # (a record listed by delta has one)
        path = layout.listing(candidate.number, candidate.transaction)
        try:
            data = storage.read(path)
        except MissingFileError:
            continue
        try:
            listing = Listing.model_validate_json(data)
        except pydantic.ValidationError as exc:
            raise IntegrityError(f"listing {path} is damaged: {first_problem(exc, 'document')}") from exc
        if listing.number != candidate.number:
            raise IntegrityError(f"listing {path} says it is version {listing.number}'s")
        chunks = {split: [_chunk_info(chunk) for chunk in listed] for split, listed in listing.chunks.items() if listed}
        return VersionListing(chunks, listing.deletions), above[: len(above) - at]
    path = layout.listing(version.number, version.transaction or "")
    raise IntegrityError(
        f"version {version.number} is listed by delta on version {version.number - 1}, which is gone, and its "
        f"listing {path} is missing: the version cannot say which chunks it has"
    )
