"""Streaming a pinned version into training through litdata's ``StreamingDataset``.

Each (version, split) gets its own small *view* directory outside the store root::

    <views>/<store id>/<version>-<transaction>/<split>/index.json   the split's litdata index
    <views>/.../<split>/fragments -> <root>/fragments               local stores: a symlink
    <views>/.../<split>/cache/                                      s3 stores: litdata's chunk cache

A local store streams with the view directory as litdata's input directory, so
litdata memory-maps the committed chunks in place through the symlink (no copy of
chunk data). An S3 store streams with the store URL as input directory, the view's
index as ``index_path`` and the view's own ``cache/``. Either way the store root is
never written by readers (a shared, read-only store streams fine), and two versions
never share an ``index.json`` or a cache: litdata copies a custom ``index_path`` into
its input or cache directory, so versions sharing one would read each other's.

:class:`VersionDataset` decodes each item back into its record and records the
version it streams in ``state_dict()``, so a loader state saved on one version
refuses to resume on another.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from litdata import StreamingDataset

from litstore._litdata.downloader import allow_plain_http_s3
from litstore._litdata.index import ChunkInfo, index_document
from litstore.errors import LitstoreError, StreamStateError
from litstore.format import codec, layout
from litstore.format.models import StoreConfig, Version
from litstore.storage import Storage

_STATE_KEY = "litstore"


def decode_item(item: Any) -> Any:
    """litdata transform: the stored bytes of one item -> its record."""
    return codec.decode(item)


def open_dataset(
    storage: Storage, config: StoreConfig, version: Version, split: str | None, chunks: list[ChunkInfo], **kwargs: Any
) -> VersionDataset:
    """A :class:`VersionDataset` over ``chunks`` of one version and split of the store on ``storage``."""
    root = storage.local_path(layout.FRAGMENTS)
    remote = storage.url.startswith("s3://")
    if root is None and not remote:
        raise LitstoreError(f"litdata cannot stream from {storage.url}: use a local or s3:// store")
    directory = view(
        storage.url,
        root is not None,
        version.number,
        version.transaction or "initial",
        split,
        chunks,
        config.chunk_bytes,
    )
    identity = {"root": storage.url, "version": version.number, "split": split, "fingerprint": version.fingerprint}
    if root is not None:
        return VersionDataset(str(directory), identity, **kwargs)
    kwargs.setdefault("cache_dir", str(directory / "cache"))
    kwargs.setdefault("storage_options", dict(storage.options))
    plain_http = str(storage.options.get("endpoint_url", "")).startswith("http://")
    return VersionDataset(
        storage.url, identity, plain_http=plain_http, index_path=str(directory / "index.json"), **kwargs
    )


class VersionDataset(StreamingDataset):
    """A litdata ``StreamingDataset`` over one pinned version (and split) of a store.

    Behaves exactly like ``StreamingDataset`` (shuffle, workers, DDP, ``StreamingDataLoader``
    resume) and yields decoded records. Build it with ``store.dataset(...)``.
    """

    def __init__(self, input_dir: str, identity: dict[str, Any], plain_http: bool = False, **kwargs: Any) -> None:
        self._plain_http = plain_http
        if plain_http:
            allow_plain_http_s3()
        transform = kwargs.pop("transform", None)
        user_transforms: list[Callable[[Any], Any]] = (
            [] if transform is None else list(transform) if isinstance(transform, list) else [transform]
        )
        super().__init__(input_dir, transform=[decode_item, *user_transforms], **kwargs)
        self.identity = dict(identity)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A DataLoader worker started with "spawn" unpickles the dataset in a fresh
        # interpreter: register the plain-http downloader there too.
        self.__dict__.update(state)
        if state.get("_plain_http"):
            allow_plain_http_s3()

    def state_dict(self, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict[str, Any]:
        state: dict[str, Any] = super().state_dict(num_samples_yielded, num_workers, batch_size)
        state[_STATE_KEY] = self.identity
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get(_STATE_KEY)
        if saved != self.identity:
            raise StreamStateError(
                f"this loader state was saved while streaming {_describe(saved)}; "
                f"it cannot resume a dataset over {_describe(self.identity)}"
            )
        super().load_state_dict(state_dict)


def _describe(identity: dict[str, Any] | None) -> str:
    if not identity:
        return "something other than a litstore version"
    split = identity.get("split") or "all splits"
    return f"version {identity['version']} ({split}, fingerprint {identity['fingerprint']}) of {identity['root']}"


def views_root() -> Path:
    """Where view directories live: ``$LITSTORE_VIEWS`` or a folder in the temp directory."""
    return Path(os.environ.get("LITSTORE_VIEWS") or Path(tempfile.gettempdir()) / "litstore-views")


def view(
    root: str, local: bool, version: int, transaction: str, split: str | None, chunks: list[ChunkInfo], chunk_bytes: int
) -> Path:
    """Make (or reuse) the view directory of one version and split of a store.

    The directory is named by the commit's transaction id, unique to that commit, so
    a view (and litdata's cache in it) can never be mistaken for another store's or
    another commit's, even of a store recreated at the same location.
    """
    store_id = hashlib.sha256(root.encode()).hexdigest()[:16]
    directory = views_root() / store_id / f"{version:08d}-{transaction}" / (split or "_all")
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "fragments"
    target = Path(root) / "fragments"
    if local and not link.is_symlink():
        temporary = directory / f".fragments-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target, target_is_directory=True)
        os.replace(temporary, link)
    index = directory / "index.json"
    document = index_document(chunks, chunk_bytes)
    if not index.exists() or index.read_bytes() != document:
        temporary = directory / f".index-{os.getpid()}.json"
        temporary.write_bytes(document)
        os.replace(temporary, index)
    return directory
