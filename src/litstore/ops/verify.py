"""Checking a version against its data: what :meth:`Store.verify` runs.

``verify`` trusts nothing it can recompute. It reads every chunk the version's
litdata index files list, hashes every stored item and decodes its key, and
compares that with the manifest and the commit record:

- duplicate keys, in the manifest or in the chunks (a key that would stream twice);
- expected keys that are missing, and keys present but not expected;
- records whose stored bytes do not match their manifest row (content hash, key or
  split), rows the manifest lists but the chunks lack, and chunk rows the manifest
  does not list (key hashes are derived from the keys when a manifest is read, so
  none can disagree with its key);
- chunk files that are missing, truncated, or whose layout is damaged;
- record counts and the fingerprint, recomputed from the manifest and from the
  data, against the commit record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from tqdm.auto import tqdm

from litstore import query
from litstore._litdata import chunk as chunk_layout
from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError, MissingFileError, VerificationError, describe
from litstore.format import codec, hashing
from litstore.format.models import StoreConfig, Version
from litstore.storage import Storage


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``ok`` is true when every list is empty and every figure matches."""

    version: int
    records_checked: int
    chunks_checked: int
    duplicate_keys: list[Any] = field(default_factory=list)
    missing_keys: list[Any] = field(default_factory=list)
    unexpected_keys: list[Any] = field(default_factory=list)
    corrupt_records: list[tuple[Any, str, int, str]] = field(default_factory=list)  # key, chunk, row, problem
    missing_records: list[tuple[Any, str, int]] = field(default_factory=list)
    unlisted_records: list[tuple[Any, str, int]] = field(default_factory=list)
    missing_chunks: list[str] = field(default_factory=list)
    damaged_chunks: list[tuple[str, str]] = field(default_factory=list)  # chunk, problem
    count_mismatches: list[tuple[str, int, int]] = field(default_factory=list)  # split, committed, found
    fingerprint: str = ""
    manifest_fingerprint: str = ""
    data_fingerprint: str = ""

    @property
    def fingerprint_ok(self) -> bool:
        return self.fingerprint == self.manifest_fingerprint == self.data_fingerprint

    @property
    def ok(self) -> bool:
        problems = (
            self.duplicate_keys,
            self.missing_keys,
            self.unexpected_keys,
            self.corrupt_records,
            self.missing_records,
            self.unlisted_records,
            self.missing_chunks,
            self.damaged_chunks,
            self.count_mismatches,
        )
        return self.fingerprint_ok and not any(problems)

    def problems(self) -> list[str]:
        """One line per kind of problem found; empty when ``ok``."""
        lines = []
        for label, items in (
            ("duplicate keys", self.duplicate_keys),
            ("expected keys missing", self.missing_keys),
            ("unexpected keys", self.unexpected_keys),
            ("corrupt records (key, chunk, row, problem)", self.corrupt_records),
            ("records listed but not stored (key, chunk, row)", self.missing_records),
            ("records stored but not listed (key, chunk, row)", self.unlisted_records),
            ("missing chunks", self.missing_chunks),
            ("damaged chunks", self.damaged_chunks),
            ("record counts (split, committed, found)", self.count_mismatches),
        ):
            if items:
                lines.append(f"{len(items)} {label}: {describe(items)}")
        if not self.fingerprint_ok:
            lines.append(
                f"fingerprint mismatch: committed {self.fingerprint}, manifest {self.manifest_fingerprint}, "
                f"data {self.data_fingerprint}"
            )
        return lines

    def summary(self) -> str:
        """A readable account of the check."""
        head = (
            f"version {self.version}: {self.records_checked} records in {self.chunks_checked} chunks checked, "
            f"fingerprint {self.fingerprint}"
        )
        problems = self.problems()
        if not problems:
            return f"{head}: OK"
        return "\n".join([f"{head}: FAILED", *(f"  - {line}" for line in problems)])

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        verdict = "OK" if self.ok else f"FAILED ({len(self.problems())} kinds of problem)"
        return f"<VerifyReport version {self.version}: {verdict}, {self.records_checked} records checked>"

    def raise_if_failed(self) -> VerifyReport:
        """Return ``self`` if ``ok``, else raise :class:`VerificationError` with the summary."""
        if not self.ok:
            raise VerificationError(self.summary(), self)
        return self


def _stored_rows(
    storage: Storage,
    key_field: str,
    chunks: dict[str, list[ChunkInfo]],
    progress: bool,
) -> tuple[dict[str, list[Any]], list[str], list[tuple[str, str]]]:
    """Read every listed chunk: one row per stored item, plus missing and damaged chunks."""
    columns: dict[str, list[Any]] = {"chunk": [], "row": [], "key": [], "content_hash": [], "split": []}
    missing: list[str] = []
    damaged: list[tuple[str, str]] = []
    listed = [(split, chunk) for split in sorted(chunks) for chunk in chunks[split]]
    for split, chunk in tqdm(listed, desc="verifying", unit="chunk", disable=not progress):
        try:
            data = storage.read(chunk.filename)
        except MissingFileError:
            missing.append(chunk.filename)
            continue
        if len(data) != chunk.num_bytes:
            damaged.append((chunk.filename, f"{len(data)} bytes, the index says {chunk.num_bytes}"))
        try:
            offsets = chunk_layout.item_offsets(data, chunk.filename)
        except IntegrityError as exc:
            damaged.append((chunk.filename, str(exc)))
            continue
        if len(offsets) - 1 != chunk.num_items:
            damaged.append((chunk.filename, f"{len(offsets) - 1} items, the index says {chunk.num_items}"))
        for row in range(len(offsets) - 1):
            payload = chunk_layout.item_payload(data, offsets, row)
            key = None
            if chunk_layout.item_size_matches(data, offsets, row):
                try:
                    record = codec.decode(payload)
                    key = record.get(key_field) if isinstance(record, dict) else None
                except IntegrityError:
                    key = None
            columns["chunk"].append(chunk.filename)
            columns["row"].append(row)
            columns["key"].append(key)
            columns["content_hash"].append(hashing.content_hash(payload))
            columns["split"].append(split)
    return columns, missing, damaged


def _fingerprint(keys: list[Any], contents: list[bytes]) -> str:
    pairs = [(key, content) for key, content in zip(keys, contents) if key is not None]
    return hashing.fingerprint_hex(hashing.fingerprint_sum([k for k, _ in pairs], [c for _, c in pairs]))


def verify(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    listed: pa.Table,
    chunks: dict[str, list[ChunkInfo]],
    expected_keys: Iterable[Any] | None = None,
    progress: bool = False,
) -> VerifyReport:
    """Check ``version`` (manifest ``listed``, ``chunks``) against the stored data."""
    key_type = listed.schema.field("key").type
    columns, missing_chunks, damaged_chunks = _stored_rows(storage, config.key, chunks, progress)
    key_values = [key if hashing.is_key(key, config.key_type) else None for key in columns["key"]]
    stored = pa.table(
        {
            "chunk": pa.array(columns["chunk"], pa.string()),
            "row": pa.array(columns["row"], pa.uint32()),
            "key": pa.array(key_values, key_type),
            "content_hash": pa.array(columns["content_hash"], pa.binary(16)),
            "split": pa.array(columns["split"], pa.string()),
        }
    )
    matched = query.reconcile(listed, stored)

    def rows(table: pa.Table) -> list[tuple[Any, ...]]:
        return list(zip(*(column.to_pylist() for column in table.columns)))

    listed_keys = listed.column("key").to_pylist()
    duplicates = set(query.duplicate_keys(listed)) | set(
        query.duplicate_keys(stored.filter(stored.column("key").is_valid()))
    )
    missing_keys: list[Any] = []
    unexpected_keys: list[Any] = []
    if expected_keys is not None:
        expected = list(expected_keys)
        wrong_type = [key for key in expected if not hashing.is_key(key, config.key_type)]
        expected_table = pa.table(
            {"key": pa.array([k for k in expected if hashing.is_key(k, config.key_type)], key_type)}
        )
        missing_keys = wrong_type + query.keys_not_in(expected_table, listed)
        unexpected_keys = query.keys_not_in(listed, expected_table)
    found_counts: dict[str, int] = {}
    for split in columns["split"]:
        found_counts[split] = found_counts.get(split, 0) + 1
    count_mismatches = [
        (split, committed, found_counts.get(split, 0))
        for split, committed in sorted(version.counts.items())
        if committed != found_counts.get(split, 0)
    ]
    return VerifyReport(
        version=version.number,
        records_checked=len(columns["row"]),
        chunks_checked=sum(len(split_chunks) for split_chunks in chunks.values()),
        duplicate_keys=sorted(duplicates, key=repr),
        missing_keys=missing_keys,
        unexpected_keys=unexpected_keys,
        corrupt_records=rows(matched["mismatched"]),
        missing_records=rows(matched["missing"]),
        unlisted_records=rows(matched["unlisted"]),
        missing_chunks=missing_chunks,
        damaged_chunks=damaged_chunks,
        count_mismatches=count_mismatches,
        fingerprint=version.fingerprint,
        manifest_fingerprint=_fingerprint(listed_keys, listed.column("content_hash").to_pylist()),
        data_fingerprint=_fingerprint(columns["key"], columns["content_hash"]),
    )
