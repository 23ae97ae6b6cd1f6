"""What changed between two versions, computed from their manifests alone."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from litstore import query
from litstore.errors import describe


@dataclass(frozen=True)
class Diff:
    """Keys added, removed and changed (same key, new content hash) from ``old`` to ``new``.

    ``added``, ``removed`` and ``changed`` are Arrow tables with columns ``key`` and
    ``split``. A record that only moved to another chunk, with the same content, is
    not changed.
    """

    old: int
    new: int
    added: pa.Table
    removed: pa.Table
    changed: pa.Table

    @classmethod
    def between(cls, old: int, new: int, old_manifest: pa.Table, new_manifest: pa.Table) -> Diff:
        parts = query.diff(old_manifest, new_manifest)
        return cls(old, new, parts["added"], parts["removed"], parts["changed"])

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

    def __bool__(self) -> bool:
        """True when the versions differ."""
        return any(self.counts.values())

    def summary(self, examples: int = 3) -> str:
        """A readable account: totals, per split, and a few example keys of each kind."""
        counts = self.counts
        lines = [
            f"version {self.old} -> {self.new}: "
            f"+{counts['added']} added, -{counts['removed']} removed, ~{counts['changed']} changed"
        ]
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
