"""litdata ``index.json`` documents: what litstore writes for each version's split.

A version's split index (``versions/<v>-<txn>/<split>/index.json``) is a litdata
index whose chunk ``filename`` entries are paths relative to the store root
(``fragments/<frag>/chunk-<frag>-<n>.bin``); chunk names are unique store-wide
because litdata's remote downloader keys its cache by file name. Every chunk has
the same config (one ``bytes`` leaf), so any set of chunks is a valid index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from litstore.errors import IntegrityError


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk as a litdata index lists it; ``filename`` is relative to the store root."""

    filename: str
    num_items: int
    num_bytes: int

    def to_index_entry(self) -> dict[str, Any]:
        return {"chunk_bytes": self.num_bytes, "chunk_size": self.num_items, "dim": None, "filename": self.filename}

    @classmethod
    def from_index_entry(cls, entry: dict[str, Any]) -> ChunkInfo:
        return cls(filename=entry["filename"], num_items=int(entry["chunk_size"]), num_bytes=int(entry["chunk_bytes"]))


def index_config(chunk_bytes: int) -> dict[str, Any]:
    """The litdata ``config`` block shared by every litstore chunk (one ``bytes`` leaf)."""
    return {
        "chunk_bytes": chunk_bytes,
        "chunk_size": None,
        "compression": None,
        "compression_batch_size": None,
        "compression_level": None,
        "data_format": ["bytes"],
        "data_spec": '[1, {"type": null, "context": null, "children_spec": []}]',
        "encryption": None,
        "ipc_compression": None,
        "item_loader": "PyTreeLoader",
        "types": "bytes",
    }


def index_document(chunks: Sequence[ChunkInfo], chunk_bytes: int) -> bytes:
    """The bytes of a litdata ``index.json`` listing ``chunks``."""
    document = {"chunks": [chunk.to_index_entry() for chunk in chunks], "config": index_config(chunk_bytes)}
    return json.dumps(document, sort_keys=True).encode()


def parse_index_document(data: bytes, path: str) -> list[ChunkInfo]:
    """The chunks listed by a litdata ``index.json`` written by :func:`index_document`.

    Raises:
        IntegrityError: the file at ``path`` is not such an index.
    """
    try:
        return [ChunkInfo.from_index_entry(entry) for entry in json.loads(data)["chunks"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"index {path} is damaged: {exc!r}") from exc
