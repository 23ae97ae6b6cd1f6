"""What :func:`litstore.ops.audit.audit` keeps of each record: a few fixed bytes, never a Python object.

Per record: its 16-byte digest (of the compared fields), its split's number (2 bytes)
and where its key is (8 bytes: an ``int`` key itself, or the end of a ``str`` key in a
temporary file the keys are appended to). About 26 bytes a record while the records
stream, and at most 33 more while the duplicates are sorted out; keys become Python
objects only for the example groups a report shows. The duplicate groups are found by
sorting the digests' first words and confirming the second (a 64-bit collision is
never reported as a duplicate).
"""

from __future__ import annotations

import array
import mmap
import tempfile
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

#: Bytes of keys buffered before they are appended to the key file.
_FLUSH = 1 << 20


class Spill:
    """Bytes appended to a temporary file (made on the first flush), buffered :data:`_FLUSH` at a time."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._pending = bytearray()
        self.written = 0  # bytes added, flushed or not
        self.file: Any = None

    def add(self, data: bytes) -> None:
        self._pending += data
        self.written += len(data)
        if len(self._pending) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered: the file then holds every byte added."""
        if not self._pending:
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix=self._prefix)
        self.file.write(self._pending)
        self.file.flush()
        self._pending = bytearray()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class KeyColumn:
    """Each row's key: ``int`` keys in memory (8 bytes each), ``str`` keys in a temporary file (8 bytes each here)."""

    def __init__(self, key_type: Literal["str", "int"]) -> None:
        self._ints: array.array[int] | None = array.array("q") if key_type == "int" else None
        self._ends = array.array("Q")
        self._spill = Spill("litstore-audit-keys-")

    def __len__(self) -> int:
        return len(self._ints) if self._ints is not None else len(self._ends)

    def add(self, key: Any) -> None:
        if self._ints is not None:
            self._ints.append(key)
            return
        self._spill.add(key.encode("utf-8", "surrogatepass"))
        self._ends.append(self._spill.written)

    def take(self, rows: np.ndarray) -> list[Any]:
        """The keys of ``rows``, in that order."""
        if self._ints is not None:
            ints = np.frombuffer(self._ints, dtype=np.int64)
            return [int(key) for key in ints[rows]]
        self._spill.flush()
        if not len(rows) or not self._spill.written:
            return ["" for _ in rows]
        ends = np.frombuffer(self._ends, dtype=np.uint64).astype(np.int64)
        starts = np.concatenate([np.zeros(1, np.int64), ends[:-1]])
        with mmap.mmap(self._spill.file.fileno(), self._spill.written, access=mmap.ACCESS_READ) as mapped:
            return [
                mapped[start:end].decode("utf-8", "surrogatepass")
                for start, end in zip(starts[rows].tolist(), ends[rows].tolist(), strict=True)
            ]

    def close(self) -> None:
        self._spill.close()


class AuditedRows:
    """The rows an audit has read: digest, split and key of each, in the order they were added."""

    def __init__(self, key_type: Literal["str", "int"]) -> None:
        self.keys = KeyColumn(key_type)
        self._digests = bytearray()
        self._splits = array.array("H")
        self._split_numbers: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._splits)

    def add(self, split: str, key: Any, digest: bytes) -> None:
        self._digests += digest
        self._splits.append(self._split_numbers.setdefault(split, len(self._split_numbers)))
        self.keys.add(key)

    def digests(self) -> np.ndarray:
        """Each row's digest as two uint64 words (a view, not a copy)."""
        return np.frombuffer(self._digests, dtype=np.uint64).reshape(-1, 2)

    def split_numbers(self) -> np.ndarray:
        return np.frombuffer(self._splits, dtype=np.uint16)

    def split_names(self) -> list[str]:
        return sorted(self._split_numbers, key=self._split_numbers.__getitem__)

    def by_split(self, rows: np.ndarray) -> dict[str, tuple[Any, ...]]:
        """The keys of ``rows`` per split, each split's keys sorted, the splits in name order."""
        names = self.split_names()
        found: dict[str, list[Any]] = {}
        for key, number in zip(self.keys.take(rows), self.split_numbers()[rows].tolist(), strict=True):
            found.setdefault(names[number], []).append(key)
        return {split: tuple(sorted(keys)) for split, keys in sorted(found.items())}

    def close(self) -> None:
        self.keys.close()


@dataclass(frozen=True)
class Groups:
    """Groups of two or more rows with the same digest.

    Attributes:
        rows: the grouped rows, group after group, each group's rows in the order read.
        starts: where each group begins in ``rows``; ``sizes``: its row count.
        across: whether each group's rows lie in more than one split.
    """

    rows: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    across: np.ndarray

    def largest(self, count: int, *, across: bool = False) -> list[np.ndarray]:
        """The rows of up to ``count`` groups, largest first, ties in the order their first rows were read."""
        chosen = np.flatnonzero(self.across) if across else np.arange(len(self.starts))
        if not len(chosen) or count <= 0:
            return []
        firsts = self.rows[self.starts[chosen]]
        picked = chosen[np.lexsort((firsts, -self.sizes[chosen]))[:count]]
        return [self.rows[self.starts[group] : self.starts[group] + self.sizes[group]] for group in picked]


def duplicate_groups(digests: np.ndarray, splits: np.ndarray) -> Groups:
    """The groups of rows whose digests (``n x 2`` uint64) are equal, with whether each spans splits."""
    count = len(digests)
    if count < 2:
        empty = np.zeros(0, np.int64)
        return Groups(empty, empty, empty, np.zeros(0, bool))
    order = np.argsort(digests[:, 0], kind="stable")
    first = digests[order, 0]
    candidate = np.zeros(count, bool)
    same_first = first[1:] == first[:-1]
    candidate[1:] |= same_first
    candidate[:-1] |= same_first
    del first, same_first
    rows = order[candidate]
    del order, candidate
    # Rows agreeing on the first word: sort them by both words, group the equal ones.
    rows = rows[np.lexsort((rows, digests[rows, 1], digests[rows, 0]))]
    words = digests[rows]
    boundary = np.ones(len(rows), bool)
    boundary[1:] = (words[1:] != words[:-1]).any(axis=1)
    starts = np.flatnonzero(boundary)
    sizes = np.diff(np.append(starts, len(rows)))
    kept = sizes > 1
    grouped = np.repeat(kept, sizes)
    rows = rows[grouped]
    sizes = sizes[kept].astype(np.int64)
    starts = np.cumsum(sizes) - sizes
    if not len(sizes):
        return Groups(rows.astype(np.int64), starts, sizes, np.zeros(0, bool))
    numbers = splits[rows].astype(np.int64)
    across = np.minimum.reduceat(numbers, starts) != np.maximum.reduceat(numbers, starts)
    return Groups(rows.astype(np.int64), starts, sizes, across)
