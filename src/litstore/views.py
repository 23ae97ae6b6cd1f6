"""The private *view* directories that streaming hands litdata: one per (version, split) of a store.

Each lives outside the store root::

    <views>/<store id>/<version>-<transaction>/<split>/index.json   the split's litdata index
    <views>/.../<split>/records.arrow    key and content hash of each item, in stream order
    <views>/.../<split>/fragments -> <root>/fragments               local stores: a symlink
    <views>/.../<split>/cache/                                      s3 stores: litdata's chunk cache
    <views>/.../<split>-subset-<digest>/                            a subset's own copied chunks

``<views>`` is ``views_dir=``, else ``$LITSTORE_VIEWS``, else ``litstore-views-<uid>`` in
the temp directory. Every directory from ``<views>`` down is private to the caller
(owned by them, mode 0700): a views root that is not is refused, anything else found
in the way is removed and made again, and the ``fragments`` link is checked to point
exactly at the store before litdata follows it, so another user of a shared temp
directory cannot plant chunks for a training run to read. Creating a view removes the
views of the same store whose version no longer exists.

A view's directory is named by the commit's transaction id, unique to that commit, so
two versions never share an ``index.json`` or a cache: litdata copies a custom
``index_path`` into its input or cache directory, so versions sharing one would read
each other's. :mod:`litstore.streaming` makes the datasets that read them.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pyarrow as pa

from litstore._litdata.index import ChunkInfo, index_document, parse_index_document
from litstore._litdata.writer import ChunkWriter
from litstore.errors import LitstoreError, VersionNotFoundError
from litstore.format import layout
from litstore.format.models import Version
from litstore.read import log
from litstore.read.chunks import ChunkCache
from litstore.storage import Storage

#: A view's file of the key and content hash of each item, in stream order (items are checked against it).
RECORDS_FILE = "records.arrow"


def views_root(views_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where view directories live: ``views_dir``, ``$LITSTORE_VIEWS`` or a per-user folder in the temp directory."""
    if views_dir is not None:
        return Path(views_dir)
    configured = os.environ.get("LITSTORE_VIEWS")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"litstore-views-{os.getuid()}"


def view(
    views: Path,
    storage: Storage,
    local: str | None,
    version: Version,
    split: str | None,
    chunks: list[ChunkInfo],
    chunk_bytes: int,
    records: pa.Table | None,
) -> Path:
    """Make (or reuse) the private view directory of one version and split of a store.

    ``local`` is the store root's local directory, whose ``fragments`` the view links to
    (``None``: a remote store, whose chunks litdata downloads into the view's cache).

    The directory is named by the commit's transaction id, unique to that commit, so
    a view (and litdata's cache in it) can never be mistaken for another store's or
    another commit's, even of a store recreated at the same location.

    Raises:
        LitstoreError: ``views`` exists but is not a directory private to the caller.
    """
    views.parent.mkdir(parents=True, exist_ok=True)
    _private_directory(views, replace=False)
    store_views = _private_directory(views / hashlib.sha256(storage.url.encode()).hexdigest()[:16], replace=True)
    name = f"{version.number:08d}-{version.transaction or 'initial'}"
    _remove_stale_views(storage, store_views, keep=name)
    directory = _private_directory(_private_directory(store_views / name, replace=True) / (split or "_all"), True)
    if local is not None:
        _link_fragments(directory / "fragments", Path(local) / layout.FRAGMENTS)
    _write_if_changed(directory / "index.json", index_document(chunks, chunk_bytes))
    if records is not None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, records.schema) as writer:
            writer.write_table(records.combine_chunks())
        _write_if_changed(directory / RECORDS_FILE, sink.getvalue().to_pybytes())
    return directory


def _private_directory(path: Path, replace: bool) -> Path:
    """``path`` as a directory owned by the caller with mode 0700, made if missing.

    Anything else there (a symlink, a file, a directory open to others) is removed and
    the directory made again if ``replace``, else refused: its contents may have been
    written by someone else.
    """
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    if _is_private(path):
        return path
    info = os.lstat(path)
    if not replace or info.st_uid != os.getuid():
        raise LitstoreError(
            f"{path} is not a directory private to this user (owner uid {info.st_uid}, mode "
            f"{stat.filemode(info.st_mode)}): streaming views must not be readable or writable by others. "
            "Remove it, make it with mode 0700, or pass another views_dir"
        )
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()
    return _private_directory(path, replace=False)


def _link_fragments(link: Path, target: Path) -> None:
    """Point ``link`` at ``target``, replacing whatever else is there."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    temporary = link.with_name(f".fragments-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target, target_is_directory=True)
    os.replace(temporary, link)


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    os.replace(temporary, path)


def _remove_stale_views(storage: Storage, store_views: Path, keep: str) -> None:
    """Remove the views (under ``store_views``) of versions the store no longer has."""
    for entry in store_views.iterdir():
        number, _, transaction = entry.name.partition("-")
        if entry.name == keep or not number.isdigit() or not transaction:
            continue
        try:
            live = log.read_version(storage, int(number))
        except VersionNotFoundError:
            live = None
        except LitstoreError:
            continue  # unreadable here: keep the view rather than guess
        if live is None or (live.transaction or "initial") != transaction:
            shutil.rmtree(entry, ignore_errors=True)


def subset_digest(members: pa.Table) -> str:
    """What names a subset of a version: a hash of its keys, in stream order."""
    digest = hashlib.sha256()
    for key in members.column("key").to_pylist():
        digest.update(repr(key).encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()[:32]


def subset_view(
    views: Path,
    storage: Storage,
    version: Version,
    split: str | None,
    members: pa.Table,
    digest: str,
    chunk_bytes: int,
) -> tuple[Path, list[ChunkInfo]]:
    """Make (or reuse) the view directory holding a copy of the records ``members``; it and its chunks.

    Built in a temporary directory and renamed into place, so a view that exists is
    complete, and two processes (DDP ranks) making the same one at once both end up
    with it.
    """
    views.parent.mkdir(parents=True, exist_ok=True)
    _private_directory(views, replace=False)
    store_views = _private_directory(views / hashlib.sha256(storage.url.encode()).hexdigest()[:16], replace=True)
    name = f"{version.number:08d}-{version.transaction or 'initial'}"
    _remove_stale_views(storage, store_views, keep=name)
    parent = _private_directory(store_views / name, replace=True)
    directory = parent / f"{split or '_all'}-subset-{digest}"
    if directory.is_symlink() or (directory.exists() and not _is_private(directory)):
        _private_directory(directory, replace=True)  # removes it; made again below, complete
        shutil.rmtree(directory)
    if not (directory / "index.json").is_file():
        temporary = Path(tempfile.mkdtemp(dir=parent, prefix=f".{directory.name}-"))
        try:
            _copy_records(storage, members, temporary, chunk_bytes)
            if directory.exists() and not (directory / "index.json").is_file():
                shutil.rmtree(directory, ignore_errors=True)  # an unusable leftover, never a finished view
            try:
                os.rename(temporary, directory)
            except OSError:  # another process finished the same view first
                pass
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    _private_directory(directory, replace=False)
    chunks = parse_index_document((directory / "index.json").read_bytes(), str(directory / "index.json"))
    return directory, chunks


def _is_private(path: Path) -> bool:
    info = os.lstat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _copy_records(storage: Storage, members: pa.Table, directory: Path, chunk_bytes: int) -> None:
    """Write the stored bytes of ``members``, in order, as chunks plus ``index.json`` and the records file."""
    cache = ChunkCache(storage)
    (directory / "chunks").mkdir(mode=0o700)
    writer = ChunkWriter(str(directory / "chunks"), "subset", "chunks", itertools.count(), chunk_bytes)
    names = members.column("chunk").to_pylist()
    rows = members.column("row").to_numpy()
    start = 0
    while start < len(names):  # runs of consecutive members in one chunk: one read each
        end = start + 1
        while end < len(names) and names[end] == names[start]:
            end += 1
        writer.add(cache.payloads(names[start], rows[start:end]))
        start = end
    chunks = writer.close()
    (directory / "index.json").write_bytes(index_document(chunks, chunk_bytes))
    table = members.select(["key", "content_hash"]).combine_chunks()
    with pa.ipc.new_file(str(directory / RECORDS_FILE), table.schema) as out:
        out.write_table(table)
