"""Planting a stranger's store: after a test edits chunks and manifests, make the rest of the store agree.

A hostile test writes a record's bytes into a chunk and commits its content hash in
the manifest, so the only thing wrong with the store is the record itself. A
format-3 store also holds each record's content hash in its chunk's hashes sidecar
and in the version's key runs, and readers check against those instead: left
honest, they would catch the edit as plain damage before the defence under test is
reached. :func:`restamp` rewrites them (and the committed fingerprint) from the
newest version's edited manifest, as a hostile writer's own commit would have.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyroaring import BitMap

import litstore
from litstore.format import chunkhashes, hashing, keyrun, layout
from litstore.format import deletions as deletion_format
from litstore.storage.local import LocalStorage
from litstore.txn import keyruns
from litstore.txn.stage import write_chunk_hashes


def restamp(root: Path | str) -> None:
    """Make the newest version of the local store at ``root`` consistent with its (edited) manifest.

    Its chunks' hashes sidecars take each manifest row's content hash at that row; its
    key runs become one full run of the manifest; its commit record lists that run and
    the fingerprint of the manifest. A format-2 store has no sidecars or runs: only the
    fingerprint changes.
    """
    root = Path(root)
    storage = LocalStorage(str(root))
    version = litstore.open(root).head()
    manifest = version.manifest()
    number = version.version.number
    record_path = root / layout.version_record(number)
    record = json.loads(record_path.read_bytes())

    by_chunk: dict[str, list[tuple[int, bytes]]] = {}
    for chunk, row, content in zip(
        manifest.column("chunk").to_pylist(),
        manifest.column("row").to_pylist(),
        manifest.column("content_hash").to_pylist(),
    ):
        by_chunk.setdefault(chunk, []).append((row, content))
    for chunk, rows in by_chunk.items():
        sidecar = root / layout.chunk_hashes(chunk)
        if not sidecar.exists():
            continue
        data = sidecar.read_bytes()
        hashes = bytearray(data[chunkhashes.HEADER.size : len(data) - chunkhashes.FOOTER.size])
        for row, content in rows:  # rows the manifest does not name (a swapped row's own) keep their hash
            hashes[chunkhashes.HASH_BYTES * row : chunkhashes.HASH_BYTES * (row + 1)] = content
        write_chunk_hashes(storage, chunk, bytes(hashes))

    if record.get("key_runs"):
        entries, names = keyruns.full_run(manifest)
        path = layout.key_run(number, record["transaction"])
        data = keyrun.encode(entries, names)
        storage.write(path, data)
        record["key_runs"] = [{"path": path, "entries": len(entries), "size": len(data)}]
    record["fingerprint"] = hashing.fingerprint_hex(
        hashing.fingerprint_sum(manifest.column("key").to_pylist(), manifest.column("content_hash").to_pylist())
    )
    storage.write(layout.version_record(number), json.dumps(record, indent=1).encode())


def plant_dead_rows(
    root: Path | str, chunk: str, rows: list[int], *, dead: int | None = None, stamp: bool = True
) -> str:
    """Give ``chunk`` the deletion vector ``rows`` in the newest version of the local store at ``root``.

    The block is appended to the newest version's deletions file (made if it has none)
    and the commit record's reference to it rewritten, as a hostile writer's own commit
    would: its checksum recomputed (``stamp``; else the old one kept) and its count
    ``dead`` (``len(rows)`` if not given). Rows are not checked: out of range is the
    point of some tests. Returns the deletions file's path in the store.
    """
    root = Path(root)
    number = litstore.open(root).version.number
    record_path = root / layout.version_record(number)
    record = json.loads(record_path.read_bytes())
    path = layout.deletions(number, record["transaction"])
    data = (root / path).read_bytes() if (root / path).is_file() else deletion_format.MAGIC
    block = bytes(BitMap(rows).serialize())
    refs = [ref for ref in record.get("deletions", []) if ref["chunk"] != chunk]
    old = next((ref for ref in record.get("deletions", []) if ref["chunk"] == chunk), None)
    checksum = deletion_format.checksum(chunk, block) if stamp or old is None else old["checksum"]
    refs.append(
        {
            "chunk": chunk,
            "path": path,
            "offset": len(data),
            "length": len(block),
            "dead": len(rows) if dead is None else dead,
            "checksum": checksum,
        }
    )
    (root / path).write_bytes(data + block)
    record["deletions"] = sorted(refs, key=lambda ref: ref["chunk"])
    record_path.write_text(json.dumps(record, indent=1))
    return path
