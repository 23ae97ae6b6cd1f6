"""Staging: writing records into a new fragment, before any version lists them.

A :class:`StagedFragment` is small and picklable: its transaction id, the chunks it
wrote and one manifest row per record. It can be produced in another process or on
another machine (a Ray task, a torchrun rank) and handed to
:func:`litstore.txn.commit`, which publishes any number of them as one version.
A fragment that is never committed is invisible; ``gc`` removes it after its grace
period.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from litstore._litdata import chunk as chunk_layout
from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError
from litstore.format import hashing, layout
from litstore.format import manifest as manifest_format
from litstore.format.models import StoreConfig
from litstore.storage import Storage
from litstore.txn.records import Batch


@dataclass(frozen=True)
class StagedFragment:
    """Records written to a fragment of the store and checked; not yet part of any version.

    Attributes:
        transaction: the fragment's id (its files live under ``fragments/<transaction>/``).
        chunks: the chunks written for each split.
        rows: one manifest row per record (``key``, ``key_hash``, ``content_hash``,
            ``split``, ``chunk``, ``row``), in the order the records were given.
    """

    transaction: str
    chunks: dict[str, tuple[ChunkInfo, ...]]
    rows: pa.Table = field(repr=False)

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    def __repr__(self) -> str:
        chunks = sum(len(listed) for listed in self.chunks.values())
        return f"StagedFragment({self.transaction!r}, records={len(self)}, chunks={chunks})"


def stage(
    storage: Storage, config: StoreConfig, batch: Batch, progress: bool = False, description: str = "writing records"
) -> StagedFragment:
    """Write ``batch`` into a new fragment, each split's records in key-hash order.

    Key-hash order makes the chunks depend on the set of records, not on the order
    they came in. The chunks are read back before this returns: every record must
    sit, intact, exactly once where the rows say.

    Raises:
        IntegrityError: the written chunks do not hold every record exactly once.
    """
    from litstore._litdata.writer import write_chunks  # imports litdata: only when writing

    transaction = layout.new_transaction()
    prefix = layout.fragment(transaction)
    record_chunks: list[str] = [""] * len(batch)
    record_rows = np.zeros(len(batch), dtype=np.uint32)
    chunks: dict[str, tuple[ChunkInfo, ...]] = {}
    split_names = np.array(batch.splits, dtype=object)
    next_chunk = 0
    with storage.staging(prefix) as directory:
        for split in sorted(set(batch.splits)):
            members = np.flatnonzero(split_names == split)
            order = _break_hash_ties(members[np.argsort(batch.key_hashes[members], kind="stable")], batch)
            written = write_chunks(
                directory,
                transaction,
                prefix,
                [batch.payloads[i] for i in order],
                first_chunk=next_chunk,
                chunk_bytes=config.chunk_bytes,
                progress=progress,
                description=f"{description} ({split})",
            )
            next_chunk += len(written)
            chunks[split] = tuple(written)
            start = 0
            for written_chunk in written:
                for row, position in enumerate(order[start : start + written_chunk.num_items].tolist()):
                    record_chunks[position] = written_chunk.filename
                    record_rows[position] = row
                start += written_chunk.num_items
            if start != len(order):
                raise IntegrityError(f"litdata wrote {start} of {len(order)} records of split {split!r}")
        _check_landed(directory, prefix, batch, record_chunks, record_rows)
    rows = pa.Table.from_arrays(
        [
            pa.array(batch.keys, manifest_format.schema(config.key_type).field("key").type),
            pa.array(batch.key_hashes, pa.uint64()),
            pa.array(batch.content_hashes, pa.binary(16)),
            pa.array(batch.splits, pa.string()),
            pa.array(record_chunks, pa.string()),
            pa.array(record_rows, pa.uint32()),
        ],
        schema=manifest_format.schema(config.key_type),
    )
    return StagedFragment(transaction, chunks, rows)


def discard(storage: Storage, fragment: StagedFragment) -> None:
    """Remove a staged fragment that will never be committed."""
    storage.delete_tree(layout.fragment(fragment.transaction))


def _break_hash_ties(order: np.ndarray, batch: Batch) -> np.ndarray:
    """Order records that share a key hash by content, so equal input gives equal chunks."""
    hashes = batch.key_hashes[order]
    if len(hashes) < 2 or not np.any(hashes[1:] == hashes[:-1]):
        return order
    return np.array(sorted(order.tolist(), key=lambda i: (int(batch.key_hashes[i]), batch.content_hashes[i])))


def _check_landed(directory: str, prefix: str, batch: Batch, record_chunks: list[str], record_rows: np.ndarray) -> None:
    """Read the new chunk files back from the local staging ``directory``, before any upload.

    Each record must sit, intact, exactly where it is said to be, and each chunk must
    hold exactly the records said to be in it.
    """
    expected_rows: dict[str, int] = {}
    for name in record_chunks:
        expected_rows[name] = expected_rows.get(name, 0) + 1
    opened: dict[str, tuple[mmap.mmap | bytes, np.ndarray]] = {}
    for name, count in expected_rows.items():
        path = os.path.join(directory, name.removeprefix(prefix + "/"))
        with open(path, "rb") as handle:
            data: mmap.mmap | bytes = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""
            )
        offsets = chunk_layout.item_offsets(data, name)
        if len(offsets) - 1 != count:
            raise IntegrityError(f"chunk {name} holds {len(offsets) - 1} records, {count} were written to it")
        opened[name] = (data, offsets)
    for position, (name, row) in enumerate(zip(record_chunks, record_rows.tolist())):
        data, offsets = opened[name]
        if hashing.content_hash(chunk_layout.item_payload(data, offsets, row)) != batch.content_hashes[position]:
            raise IntegrityError(f"record {batch.keys[position]!r} did not land intact in chunk {name} row {row}")
