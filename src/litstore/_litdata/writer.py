"""Writing chunk files with litdata's own ``BinaryWriter``.

litstore stores every record as a single ``bytes`` leaf (its canonical encoding, see
:mod:`litstore.format.codec`), so every chunk of every fragment has the same litdata
config and any set of chunks forms a valid litdata index. Typed leaves would not:
litdata records numpy dtypes and tree shapes in the config, so chunks written from
differently shaped records could not share one index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litdata.streaming.writer import BinaryWriter
from tqdm.auto import tqdm

from litstore._litdata.index import ChunkInfo


class _FragmentWriter(BinaryWriter):
    """litdata's writer with store-wide unique chunk names and no per-rank index file."""

    def __init__(self, directory: str, fragment: str, first_chunk: int, chunk_bytes: int) -> None:
        super().__init__(directory, chunk_bytes=chunk_bytes, chunk_index=first_chunk)
        self._fragment = fragment

    def get_chunk_filename(self, file_compression: bool | None = None) -> str:
        return f"chunk-{self._fragment}-{self._chunk_index}.bin"

    def write_chunks_index(self) -> str:
        return ""  # litstore writes the index of each version itself.

    @property
    def rank(self) -> int:
        return 0  # chunk names carry the fragment id, not a worker rank.

    def chunk_entries(self) -> list[dict[str, Any]]:
        return list(self._chunks_info)


def write_chunks(
    directory: str,
    fragment: str,
    prefix: str,
    payloads: Sequence[bytes],
    first_chunk: int,
    chunk_bytes: int,
    progress: bool = False,
    description: str = "writing records",
) -> list[ChunkInfo]:
    """Write ``payloads``, in order, as litdata chunks of one fragment into ``directory``.

    Returns the chunks written, named ``<prefix>/chunk-<fragment>-<n>.bin`` with ``n``
    counting up from ``first_chunk``. Item ``i`` of the input is row ``i - start`` of
    the chunk whose cumulative ``num_items`` range holds it.
    """
    writer = _FragmentWriter(directory, fragment, first_chunk, chunk_bytes)
    items = tqdm(payloads, desc=description, unit="rec", disable=not progress)
    for index, payload in enumerate(items):
        writer.add_item(index, payload)
    writer.done()
    return [
        ChunkInfo(
            filename=f"{prefix}/{entry['filename']}", num_items=entry["chunk_size"], num_bytes=entry["chunk_bytes"]
        )
        for entry in writer.chunk_entries()
    ]
