"""Finding the same record under different keys: what :meth:`Store.audit` runs.

A record's content hash covers its key field too, so two records that differ only in
their key have different content hashes and the manifest cannot find them. ``audit``
therefore decodes every record, drops the key field, encodes the rest canonically
(:func:`litstore.format.codec.encode`) and hashes it
(:func:`litstore.format.hashing.content_hash`). Records are read chunk by chunk and
only a few fixed bytes per record are kept (its digest, split and where its key is:
:mod:`litstore.ops.audit_rows`), so memory grows with the number of records at about 26
bytes each, never with their size or their keys, and no manifest is composed.

Two kinds of finding:

- duplicate groups: two or more keys whose records are identical apart from the key;
- cross-split groups: the duplicate groups whose keys lie in more than one split, the
  same example in training and evaluation data (leakage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from litstore.errors import InvalidArgumentError, describe
from litstore.format import codec, hashing
from litstore.format.models import FieldSplit
from litstore.format.stored_media import keeping_media
from litstore.ops import audit_near
from litstore.ops.audit_rows import AuditedRows, duplicate_groups

if TYPE_CHECKING:
    from litstore.read.version import VersionReader


@dataclass(frozen=True)
class NearGroup:
    """Records found near one another (``audit(near=True)``), though not identical.

    Attributes:
        keys: the group's keys, sorted.
        splits: the keys of each split the group lies in.
        scores: per signal, its least similar link: ``"text"`` the lowest estimated Jaccard
            similarity, ``"image"`` the most bits two linked image hashes differ in.
    """

    keys: tuple[Any, ...]
    splits: dict[str, tuple[Any, ...]]
    scores: dict[str, float]


@dataclass(frozen=True)
class AuditReport:
    """What :meth:`Store.audit` found in one version. ``ok`` is true when no two keys hold the same content.

    Attributes:
        version: the version audited.
        records_checked: records read.
        duplicate_group_count: groups of two or more keys whose records are identical apart
            from the key (cross-split groups included).
        duplicate_record_count: records in those groups.
        cross_split_group_count: duplicate groups whose keys lie in more than one split.
        cross_split_record_count: records in those groups.
        duplicate_groups: up to ``examples`` duplicate groups, largest first, each a tuple of
            sorted keys.
        cross_split_groups: up to ``examples`` cross-split groups, largest first, each
            ``{split: sorted keys}``.
        fields: the fields compared; ``None``: every field but the key and a field split's field.
        near: whether near duplicates were searched (``near=True``).
        near_group_count, near_record_count: groups of near (not identical) records, and
            the records in them; near_cross_split_group_count: those across splits.
        near_groups: up to ``examples`` :class:`NearGroup`, largest first.
        summary(): a readable account.
    """

    version: int
    records_checked: int
    duplicate_group_count: int = 0
    duplicate_record_count: int = 0
    cross_split_group_count: int = 0
    cross_split_record_count: int = 0
    duplicate_groups: tuple[tuple[Any, ...], ...] = ()
    cross_split_groups: tuple[dict[str, tuple[Any, ...]], ...] = ()
    fields: tuple[str, ...] | None = None
    near: bool = False
    near_group_count: int = 0
    near_record_count: int = 0
    near_cross_split_group_count: int = 0
    near_groups: tuple[NearGroup, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every record's content is unique (and, with ``near=True``, no two are near)."""
        return self.duplicate_group_count == 0 and self.near_group_count == 0

    def summary(self) -> str:
        """A readable account: counts and a few example groups of each kind."""
        compared = "" if self.fields is None else f" (fields {', '.join(self.fields)})"
        head = f"version {self.version}: {self.records_checked} records audited{compared}"
        if self.ok:
            return f"{head}: OK, no duplicate content" + (", none near" if self.near else "")
        lines = [
            f"{head}: {self.duplicate_group_count} groups of identical records under different keys "
            f"({self.duplicate_record_count} records), {self.cross_split_group_count} of them across splits "
            f"({self.cross_split_record_count} records)"
        ]
        if self.near:
            lines.append(
                f"  {self.near_group_count} groups of near-duplicate records ({self.near_record_count} records), "
                f"{self.near_cross_split_group_count} of them across splits"
            )
        for group in self.duplicate_groups:
            lines.append(f"  duplicates: {describe(list(group))}")
        for split_group in self.cross_split_groups:
            shown = "; ".join(f"{split}: {describe(list(keys))}" for split, keys in split_group.items())
            lines.append(f"  across splits: {shown}")
        for near in self.near_groups:
            shown = "; ".join(f"{split}: {describe(list(keys))}" for split, keys in near.splits.items())
            scores = ", ".join(f"{kind} {score:g}" for kind, score in sorted(near.scores.items()))
            lines.append(f"  near ({scores}): {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        verdict = (
            "OK"
            if self.ok
            else f"{self.duplicate_group_count} duplicate groups, {self.cross_split_group_count} across splits"
            + (f", {self.near_group_count} near groups" if self.near else "")
        )
        return f"<AuditReport version {self.version}: {verdict}, {self.records_checked} records audited>"


def audit(
    snapshot: VersionReader,
    *,
    fields: Sequence[str] | None = None,
    near: bool = False,
    threshold: float = 0.8,
    image_distance: int = 3,
    examples: int = 5,
    progress: bool = False,
) -> AuditReport:
    """Audit the version ``snapshot`` reads; ``examples`` bounds the example groups of each kind.

    Raises:
        InvalidArgumentError: ``fields`` is not a list of field names or no record has any
            of them, ``threshold`` is not in (0, 1], or ``image_distance`` not in 0..31.
        MissingDependencyError: ``near=True`` and datasketch is not installed.
    """
    chosen = _chosen_fields(fields)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise InvalidArgumentError(f"threshold is a Jaccard similarity in (0, 1], not {threshold!r}")
    if isinstance(image_distance, bool) or not isinstance(image_distance, int) or not 0 <= image_distance < 32:
        raise InvalidArgumentError(f"image_distance is a number of bits in 0..31, not {image_distance!r}")
    finder = audit_near.NearDuplicates(threshold, image_distance) if near else None
    rows = AuditedRows(snapshot.config.key_type)
    try:
        _read(snapshot, rows, chosen, finder, progress)
        if chosen is not None and not len(rows) and len(snapshot):
            raise InvalidArgumentError(f"no record of version {snapshot.version.number} has any of the fields {chosen}")
        groups = duplicate_groups(rows.digests(), rows.split_numbers())
        across = groups.sizes[groups.across]
        near_found = _near_groups(finder, rows, examples) if finder is not None else _NearFound()
        return AuditReport(
            version=snapshot.version.number,
            records_checked=len(snapshot),
            fields=None if chosen is None else tuple(chosen),
            duplicate_group_count=len(groups.sizes),
            duplicate_record_count=int(groups.sizes.sum()),
            cross_split_group_count=len(across),
            cross_split_record_count=int(across.sum()),
            duplicate_groups=tuple(tuple(sorted(rows.keys.take(group))) for group in groups.largest(examples)),
            cross_split_groups=tuple(rows.by_split(group) for group in groups.largest(examples, across=True)),
            near=near,
            near_group_count=near_found.count,
            near_record_count=near_found.records,
            near_cross_split_group_count=near_found.across,
            near_groups=near_found.examples,
        )
    finally:
        rows.close()
        if finder is not None:
            finder.close()


def _chosen_fields(fields: Sequence[str] | None) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str) or not all(isinstance(name, str) for name in fields) or not fields:
        raise InvalidArgumentError(f"fields is a non-empty list of field names, not {fields!r}")
    return list(dict.fromkeys(fields))


@dataclass(frozen=True)
class _NearFound:
    count: int = 0
    records: int = 0
    across: int = 0
    examples: tuple[NearGroup, ...] = ()


def _near_groups(finder: audit_near.NearDuplicates, rows: AuditedRows, examples: int) -> _NearFound:
    """The groups of records linked by near pairs (pairs of identical records left to the exact groups).

    Memory follows the pairs found, not the records; keys are read for the examples only.
    """
    parent: dict[int, int] = {}

    def root(row: int) -> int:
        parent.setdefault(row, row)
        while parent[row] != row:
            parent[row] = parent[parent[row]]
            row = parent[row]
        return row

    digests = rows.digests()
    scores: dict[int, dict[str, float]] = {}
    kept = []
    for pair in finder.pairs():
        if (digests[pair.first] != digests[pair.second]).any():
            kept.append(pair)
            a, b = root(pair.first), root(pair.second)
            if a != b:
                parent[max(a, b)] = min(a, b)
    for pair in kept:
        seen = scores.setdefault(root(pair.first), {})
        best = min if pair.kind == "text" else max  # the least similar link: lowest Jaccard, most bits apart
        seen[pair.kind] = best(seen.get(pair.kind, pair.score), pair.score)
    members: dict[int, list[int]] = {}
    for row in sorted(parent):
        members.setdefault(root(row), []).append(row)
    splits = rows.split_numbers()
    groups = [np.array(group, np.int64) for group in members.values()]
    across = sum(len(set(splits[group].tolist())) > 1 for group in groups)
    groups.sort(key=lambda group: (-len(group), int(group[0])))
    shown = []
    for group in groups[:examples]:
        by_split = rows.by_split(group)
        keys = tuple(sorted(key for keys in by_split.values() for key in keys))
        shown.append(NearGroup(keys, by_split, scores[root(int(group[0]))]))
    return _NearFound(len(groups), sum(len(group) for group in groups), across, tuple(shown))


def _read(
    snapshot: VersionReader,
    rows: AuditedRows,
    chosen: list[str] | None,
    finder: audit_near.NearDuplicates | None,
    progress: bool,
) -> None:
    """Add every record that has one of the compared fields to ``rows`` (and ``finder``): split, key, digest.

    Records are read with media left as stored (never decoded), so an image's digest is
    that of its bytes. Row ``i`` of ``rows`` is the ``i``-th record given to ``finder``.
    """
    key_field = snapshot.config.key
    rule = snapshot.config.splits
    left_out = {key_field, rule.field} if isinstance(rule, FieldSplit) else {key_field}
    with tqdm(total=len(snapshot), desc="auditing records", unit="rec", disable=not progress) as bar:
        for split, key, record in keeping_media(snapshot.split_items()):
            if chosen is None:
                content = {name: value for name, value in record.items() if name not in left_out}
            else:
                content = {name: record[name] for name in chosen if name in record}
            bar.update(1)
            if not content:
                continue
            if finder is not None:
                finder.add(len(rows), content)
            rows.add(split, key, hashing.content_hash(codec.encode(content)))
