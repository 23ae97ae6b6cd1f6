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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from litstore.errors import describe
from litstore.format import codec, hashing

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

# Records hashed between two conversions to Arrow (and progress updates).
_BATCH = 4096


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

    @property
    def ok(self) -> bool:
        """True when every record's content is unique."""
        return self.duplicate_group_count == 0

    def summary(self) -> str:
        """A readable account: counts and a few example groups of each kind."""
        head = f"version {self.version}: {self.records_checked} records audited"
        if self.ok:
            return f"{head}: OK, no duplicate content"
        lines = [
            f"{head}: {self.duplicate_group_count} groups of identical records under different keys "
            f"({self.duplicate_record_count} records), {self.cross_split_group_count} of them across splits "
            f"({self.cross_split_record_count} records)"
        ]
        for group in self.duplicate_groups:
            lines.append(f"  duplicates: {describe(list(group))}")
        for split_group in self.cross_split_groups:
            shown = "; ".join(f"{split}: {describe(list(keys))}" for split, keys in split_group.items())
            lines.append(f"  across splits: {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        verdict = (
            "OK"
            if self.ok
            else f"{self.duplicate_group_count} duplicate groups, {self.cross_split_group_count} across splits"
        )
        return f"<AuditReport version {self.version}: {verdict}, {self.records_checked} records audited>"


def audit(snapshot: VersionReader, *, examples: int = 5, progress: bool = False) -> AuditReport:
    """Audit the version ``snapshot`` reads; ``examples`` bounds the example groups of each kind."""
    manifest = snapshot.manifest()
    key_type = manifest.schema.field("key").type
    parts = list(_digests(snapshot, key_type, progress))
    digests = pa.Table.from_batches(parts, schema=_schema(key_type))
    sizes = digests.group_by("digest").aggregate([("key", "count")])
    repeated = sizes.filter(pc.greater(sizes.column("key_count"), 1)).column("digest")
    rows = digests.filter(pc.is_in(digests.column("digest"), repeated)).join(manifest.select(["key", "split"]), "key")
    groups: dict[bytes, list[tuple[Any, str]]] = {}
    for key, digest, split in zip(*(rows.column(name).to_pylist() for name in ("key", "digest", "split")), strict=True):
        groups.setdefault(digest, []).append((key, split))
    ordered = sorted((sorted(group) for group in groups.values()), key=lambda group: (-len(group), group[0][0]))
    across = [group for group in ordered if len({split for _, split in group}) > 1]
    return AuditReport(
        version=snapshot.version.number,
        records_checked=digests.num_rows,
        duplicate_group_count=len(ordered),
        duplicate_record_count=sum(len(group) for group in ordered),
        cross_split_group_count=len(across),
        cross_split_record_count=sum(len(group) for group in across),
        duplicate_groups=tuple(tuple(key for key, _ in group) for group in ordered[:examples]),
        cross_split_groups=tuple(_by_split(group) for group in across[:examples]),
    )


def _schema(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([("key", key_type), ("digest", pa.binary(16))])


def _digests(snapshot: VersionReader, key_type: pa.DataType, progress: bool) -> Iterator[pa.RecordBatch]:
    """``(key, digest of the record without its key)`` for every record, in batches."""
    key_field = snapshot.config.key
    schema = _schema(key_type)
    keys: list[Any] = []
    digests: list[bytes] = []
    with tqdm(total=len(snapshot), desc="auditing records", unit="rec", disable=not progress) as bar:
        for key, record in snapshot.items():
            content = {name: value for name, value in record.items() if name != key_field}
            keys.append(key)
            digests.append(hashing.content_hash(codec.encode(content)))
            if len(keys) == _BATCH:
                yield pa.record_batch([pa.array(keys, key_type), pa.array(digests, pa.binary(16))], schema=schema)
                bar.update(len(keys))
                keys, digests = [], []
        if keys:
            yield pa.record_batch([pa.array(keys, key_type), pa.array(digests, pa.binary(16))], schema=schema)
            bar.update(len(keys))


def _by_split(group: list[tuple[Any, str]]) -> dict[str, tuple[Any, ...]]:
    result: dict[str, list[Any]] = {}
    for key, split in group:
        result.setdefault(split, []).append(key)
    return {split: tuple(keys) for split, keys in sorted(result.items())}
