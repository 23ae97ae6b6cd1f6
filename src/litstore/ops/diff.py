"""What changed between two versions: keys from their manifests, and on request which fields.

:meth:`Diff.of` reads manifests only, never chunk data: when the version log says which
keys the commits between the two versions touched, and the versions' fingerprints
confirm that those keys are all that changed, only those keys' rows of both versions
(:func:`litstore.read.manifests.touched_rows`); otherwise both whole manifests
(:meth:`Diff.between`). The results are the same, even where a delta row was relabelled
after commit. :meth:`Diff.with_fields` then decodes the changed records alone (the old
record from the old version, the new one from the new) to name the top-level fields
whose values differ.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from litstore import query
from litstore.errors import InvalidArgumentError, UnsupportedValueError, describe
from litstore.format import codec
from litstore.read import manifests

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

# Changed records decoded at once by with_fields: bounds memory on large diffs.
_FIELDS_BATCH = 1024
# Stands in for a field one side lacks: never the same as a stored value.
_ABSENT: Any = object()


@dataclass(frozen=True)
class Diff:
    """Keys added, removed and changed (same key, new content hash) from ``old`` to ``new``.

    Attributes:
        old, new: the two version numbers.
        added, removed, changed: Arrow tables with columns ``key`` and ``split``; with
            ``store.diff(a, b, fields=True)``, ``changed`` also has a ``fields`` column
            (list of str): the top-level fields whose values differ.
        counts, split_counts, field_counts: how many of each, overall, per split, per field.
        summary(): a readable account.

    A record that only moved to another chunk, with the same content, is not changed.
    """

    old: int
    new: int
    added: pa.Table
    removed: pa.Table
    changed: pa.Table

    @classmethod
    def of(cls, old_view: VersionReader, new_view: VersionReader) -> Diff:
        """The diff of two versions, from the rows of the keys touched between them when the log allows."""
        old, new = old_view.version, new_view.version
        rows = manifests.touched_rows(old_view.storage, old_view.config, old, new)
        if rows is None:
            return cls.between(old.number, new.number, old_view.manifest(), new_view.manifest())
        return cls.between(old.number, new.number, *rows)

    @classmethod
    def between(cls, old: int, new: int, old_manifest: pa.Table, new_manifest: pa.Table) -> Diff:
        """The diff of two manifests, or of any rows of them that hold every key whose row differs.

        Only the ``key``, ``content_hash`` and ``split`` columns are read; no record is.
        """
        parts = query.diff(old_manifest, new_manifest)
        return cls(old, new, parts["added"], parts["removed"], parts["changed"])

    def with_fields(self, old_view: VersionReader, new_view: VersionReader) -> Diff:
        """This diff with a ``fields`` column on ``changed``, read from the two versions' records."""
        keys = self.changed.column("key").to_pylist()
        fields = changed_fields(old_view, new_view, keys)
        changed = self.changed.append_column("fields", pa.array(fields, pa.list_(pa.string())))
        return dataclasses.replace(self, changed=changed)

    @property
    def counts(self) -> dict[str, int]:
        """``{"added": n, "removed": n, "changed": n}``."""
        return {"added": self.added.num_rows, "removed": self.removed.num_rows, "changed": self.changed.num_rows}

    @property
    def split_counts(self) -> dict[str, dict[str, int]]:
        """Per split: ``{"train": {"added": n, "removed": n, "changed": n}, ...}``."""
        result: dict[str, dict[str, int]] = {}
        for kind, table in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            for split in table.column("split").to_pylist():
                entry = result.setdefault(split, {"added": 0, "removed": 0, "changed": 0})
                entry[kind] += 1
        return dict(sorted(result.items()))

    @property
    def has_fields(self) -> bool:
        """Whether this diff names the changed fields (it was made with ``fields=True``)."""
        return "fields" in self.changed.column_names

    @property
    def field_counts(self) -> dict[str, int]:
        """Per field, how many changed records differ in it; most changed first.

        Raises:
            InvalidArgumentError: the diff was made without ``fields=True``.
        """
        if not self.has_fields:
            raise InvalidArgumentError(
                f"the diff of versions {self.old} -> {self.new} was made without fields=True, so it does not "
                "know which fields changed; use store.diff(old, new, fields=True)"
            )
        counts = Counter(name for names in self.changed.column("fields").to_pylist() for name in names)
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def __bool__(self) -> bool:
        """True when the versions differ."""
        return any(self.counts.values())

    def summary(self, examples: int = 3) -> str:
        """A readable account: totals (and changed fields), per split, and a few example keys of each kind."""
        counts = self.counts
        changed = f"~{counts['changed']} changed"
        if self.has_fields and self.field_counts:
            changed += " (" + ", ".join(f"{name}: {count}" for name, count in self.field_counts.items()) + ")"
        lines = [f"version {self.old} -> {self.new}: +{counts['added']} added, -{counts['removed']} removed, {changed}"]
        for split, entry in self.split_counts.items():
            lines.append(f"  {split}: +{entry['added']} -{entry['removed']} ~{entry['changed']}")
        for kind, table in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            if table.num_rows:
                shown = describe(table.column("key").slice(0, examples).to_pylist(), examples)
                if table.num_rows > examples:
                    shown += f" and {table.num_rows - examples} more"
                lines.append(f"  {kind}: {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        counts = self.counts
        return (
            f"<Diff {self.old} -> {self.new}: +{counts['added']} added, -{counts['removed']} removed, "
            f"~{counts['changed']} changed>"
        )


def changed_fields(old_view: VersionReader, new_view: VersionReader, keys: Sequence[Any]) -> list[list[str]]:
    """For each of ``keys`` (in both versions), the sorted top-level fields whose values differ.

    A field present on one side only differs. Records are read in batches, so memory
    holds one batch of each version at a time.
    """
    result: list[list[str]] = []
    for start in range(0, len(keys), _FIELDS_BATCH):
        batch = keys[start : start + _FIELDS_BATCH]
        for before, after in zip(old_view.get_many(batch), new_view.get_many(batch), strict=True):
            names = sorted(set(before) | set(after), key=str)
            result.append(
                [str(name) for name in names if not _same(before.get(name, _ABSENT), after.get(name, _ABSENT))]
            )
    return result


def _same(old: Any, new: Any) -> bool:
    """Whether two decoded values are the same content: same type and the same canonical bytes.

    Canonical bytes compare numpy arrays and tensors by dtype, shape and bytes, and
    str and bytes exactly; ``1`` and ``1.0`` differ, two NaNs do not.
    """
    if type(old) is not type(new) or old is _ABSENT or new is _ABSENT:
        return False
    try:
        return codec.encode(old) == codec.encode(new)
    except UnsupportedValueError:
        # A decoded media object (a PIL image, a video reader) has no canonical bytes.
        try:
            return bool(old == new)
        except (TypeError, ValueError):
            return False
