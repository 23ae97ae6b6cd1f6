"""Finding the same record under different keys: what :meth:`Store.audit` runs.

A record's content hash covers its key field too, so two records that differ only in
their key have different content hashes and the manifest cannot find them. ``audit``
therefore decodes every record, drops the key field, encodes the rest canonically
(:func:`litstore.format.codec.encode`) and hashes it
(:func:`litstore.format.hashing.content_hash`). Records are read chunk by chunk and
only a 16-byte digest per record is kept, so memory grows with the number of records,
never with their size.

Two kinds of finding:

- duplicate groups: two or more keys whose records are identical apart from the key;
- cross-split groups: the duplicate groups whose keys lie in more than one split, the
  same example in training and evaluation data (leakage).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from litstore.errors import InvalidArgumentError, describe
from litstore.format import codec, hashing
from litstore.format.models import FieldSplit
from litstore.format.stored_media import keeping_media
from litstore.ops import audit_near

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

# Records hashed between two conversions to Arrow (and progress updates).
_BATCH = 4096


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
    manifest = snapshot.manifest()
    key_type = manifest.schema.field("key").type
    parts = list(_digests(snapshot, key_type, chosen, finder, progress))
    digests = pa.Table.from_batches(parts, schema=_schema(key_type))
    if chosen is not None and digests.num_rows == 0 and len(snapshot):
        raise InvalidArgumentError(f"no record of version {snapshot.version.number} has any of the fields {chosen}")
    splits = manifest.select(["key", "split"])
    sizes = digests.group_by("digest").aggregate([("key", "count")])
    repeated = sizes.filter(pc.greater(sizes.column("key_count"), 1)).column("digest")
    rows = digests.filter(pc.is_in(digests.column("digest"), repeated)).join(splits, "key")
    groups: dict[bytes, list[tuple[Any, str]]] = {}
    for key, digest, split in zip(*(rows.column(name).to_pylist() for name in ("key", "digest", "split")), strict=True):
        groups.setdefault(digest, []).append((key, split))
    ordered = sorted((sorted(group) for group in groups.values()), key=lambda group: (-len(group), group[0][0]))
    across = [group for group in ordered if len({split for _, split in group}) > 1]
    near_groups = _near_groups(finder, digests, splits) if finder is not None else []
    near_across = [group for group in near_groups if len(group.splits) > 1]
    return AuditReport(
        version=snapshot.version.number,
        records_checked=len(snapshot),
        fields=None if chosen is None else tuple(chosen),
        duplicate_group_count=len(ordered),
        duplicate_record_count=sum(len(group) for group in ordered),
        cross_split_group_count=len(across),
        cross_split_record_count=sum(len(group) for group in across),
        duplicate_groups=tuple(tuple(key for key, _ in group) for group in ordered[:examples]),
        cross_split_groups=tuple(_by_split(group) for group in across[:examples]),
        near=near,
        near_group_count=len(near_groups),
        near_record_count=sum(len(group.keys) for group in near_groups),
        near_cross_split_group_count=len(near_across),
        near_groups=tuple(near_groups[:examples]),
    )


def _chosen_fields(fields: Sequence[str] | None) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str) or not all(isinstance(name, str) for name in fields) or not fields:
        raise InvalidArgumentError(f"fields is a non-empty list of field names, not {fields!r}")
    return list(dict.fromkeys(fields))


def _near_groups(finder: audit_near.NearDuplicates, digests: pa.Table, splits: pa.Table) -> list[NearGroup]:
    """The groups of records linked by near pairs (pairs of identical records left to the exact groups)."""
    parent: dict[int, int] = {}

    def root(row: int) -> int:
        parent.setdefault(row, row)
        while parent[row] != row:
            parent[row] = parent[parent[row]]
            row = parent[row]
        return row

    pairs = list(finder.pairs())
    both = sorted({row for pair in pairs for row in (pair.first, pair.second)})
    digest_of = dict(zip(both, digests.column("digest").take(pa.array(both, pa.int64())).to_pylist(), strict=True))
    kept = [pair for pair in pairs if digest_of[pair.first] != digest_of[pair.second]]
    for pair in kept:
        a, b = root(pair.first), root(pair.second)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for row in list(parent):
        members.setdefault(root(row), []).append(row)
    scores: dict[int, dict[str, float]] = {}
    for pair in kept:
        seen = scores.setdefault(root(pair.first), {})
        best = min if pair.kind == "text" else max  # the least similar link: lowest Jaccard, most bits apart
        seen[pair.kind] = best(seen.get(pair.kind, pair.score), pair.score)
    keys = digests.column("key")
    found = []
    for top, rows in members.items():
        group_keys = keys.take(pa.array(sorted(rows), pa.int64()))
        named = splits.filter(pc.is_in(splits.column("key"), group_keys))
        by_split: dict[str, list[Any]] = {}
        for key, split in sorted(zip(*(named.column(name).to_pylist() for name in ("key", "split")), strict=True)):
            by_split.setdefault(split, []).append(key)
        listed = tuple(sorted(group_keys.to_pylist()))
        found.append(NearGroup(listed, {split: tuple(k) for split, k in sorted(by_split.items())}, scores[top]))
    return sorted(found, key=lambda group: (-len(group.keys), group.keys[0]))


def _schema(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([("key", key_type), ("digest", pa.binary(16))])


def _digests(
    snapshot: VersionReader,
    key_type: pa.DataType,
    chosen: list[str] | None,
    finder: audit_near.NearDuplicates | None,
    progress: bool,
) -> Iterator[pa.RecordBatch]:
    """``(key, digest of the compared fields)`` for every record that has one of them, in batches.

    Records are read with media left as stored (never decoded), so an image's digest is
    that of its bytes. Row ``i`` of the batches is the ``i``-th record given to ``finder``.
    """
    key_field = snapshot.config.key
    rule = snapshot.config.splits
    left_out = {key_field, rule.field} if isinstance(rule, FieldSplit) else {key_field}
    schema = _schema(key_type)
    keys: list[Any] = []
    digests: list[bytes] = []
    row = 0
    with tqdm(total=len(snapshot), desc="auditing records", unit="rec", disable=not progress) as bar:
        for key, record in keeping_media(snapshot.items()):
            if chosen is None:
                content = {name: value for name, value in record.items() if name not in left_out}
            else:
                content = {name: record[name] for name in chosen if name in record}
            bar.update(1)
            if not content:
                continue
            keys.append(key)
            digests.append(hashing.content_hash(codec.encode(content)))
            if finder is not None:
                finder.add(row, content)
            row += 1
            if len(keys) == _BATCH:
                yield pa.record_batch([pa.array(keys, key_type), pa.array(digests, pa.binary(16))], schema=schema)
                keys, digests = [], []
        if keys:
            yield pa.record_batch([pa.array(keys, key_type), pa.array(digests, pa.binary(16))], schema=schema)


def _by_split(group: list[tuple[Any, str]]) -> dict[str, tuple[Any, ...]]:
    result: dict[str, list[Any]] = {}
    for key, split in group:
        result.setdefault(split, []).append(key)
    return {split: tuple(keys) for split, keys in sorted(result.items())}
