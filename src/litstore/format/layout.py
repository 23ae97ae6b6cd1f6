"""Where each file lives under a store root (paths relative to the root)::

    litstore.json                                   StoreConfig
    versions/<v>.json                               Version: its creation is the commit
    versions/<v>-<txn>/<split>/index.json           litdata index of that version's split
    manifests/<v>-<txn>.parquet                     manifest delta of version v
    manifests/<v>-<txn>.checkpoint.parquet          full manifest at version v (some versions)
    fragments/<txn>/chunk-<txn>-<n>.bin             litdata chunks, written once, never changed
    tags/<name>.json                                Tag: a name for a version

``<txn>`` is the id of the write attempt (also its fragment id). Every file a writer
writes before its commit carries it, so writers racing for the same version number
never write the same path: the loser's files are simply never referenced. The commit
record names the files of its version.

Version numbers are zero-padded to 8 digits so that listings sort; readers parse
them as integers, so larger numbers still work.
"""

from __future__ import annotations

import re
import uuid

CONFIG = "litstore.json"
VERSIONS = "versions"
MANIFESTS = "manifests"
FRAGMENTS = "fragments"
TAGS = "tags"
#: An advisory claim on the next commit by a writer that keeps losing races (``txn/claims.py``).
TURN = f"{VERSIONS}/turn.claim"
#: Every name litstore writes at the top of a store root.
TOP_LEVEL = (CONFIG, VERSIONS, MANIFESTS, FRAGMENTS, TAGS)
#: A chunk file must be smaller than this: litdata's chunk header holds 32-bit offsets.
CHUNK_SIZE_LIMIT = 2**32

_VERSION_FILE = re.compile(r"(\d+)\.json")
_TRANSACTION = re.compile(r"[0-9a-f]{20}")
_CHUNK = re.compile(r"fragments/([0-9a-f]{20})/chunk-([0-9a-f]{20})-(\d{1,9})\.bin")


def check_transaction(transaction: str) -> str:
    """``transaction`` if it is a transaction id (20 lowercase hex digits), else ``ValueError``."""
    if not isinstance(transaction, str) or not _TRANSACTION.fullmatch(transaction):
        raise ValueError(f"{transaction!r} is not a transaction id")
    return transaction


def check_chunk(path: str) -> str:
    """``path`` if it names a chunk as litstore writes them, else ``ValueError``."""
    match = _CHUNK.fullmatch(path) if isinstance(path, str) else None
    if match is None or match.group(1) != match.group(2):
        raise ValueError(f"{path!r} is not a chunk path of this store's layout")
    return path


_OWN_FILES = re.compile(
    r"fragments/[0-9a-f]{20}/chunk-[0-9a-f]{20}-\d{1,9}\.bin"
    r"|manifests/\d{8,}-[0-9a-f]{20}(\.checkpoint)?\.parquet"
    r"|versions/\d{8,}-[0-9a-f]{20}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}/index\.json"
    r"|versions/turn\.claim"
)
_TEMPORARY = re.compile(r"(.*/)?\.tmp-[0-9a-f]{32}-[^/]+")


def is_own_file(path: str) -> bool:
    """Whether ``path`` is a data file litstore writes (a chunk, manifest or index): gc deletes no other."""
    return _OWN_FILES.fullmatch(path) is not None


def is_temporary(path: str) -> bool:
    """Whether ``path`` is a local backend's temporary file (``.tmp-<id>-<name>``)."""
    return _TEMPORARY.fullmatch(path) is not None


def new_transaction() -> str:
    """A fresh transaction id."""
    return uuid.uuid4().hex[:20]


def version_name(number: int) -> str:
    return f"{number:08d}"


def version_record(number: int) -> str:
    return f"{VERSIONS}/{version_name(number)}.json"


def index_directory(number: int, transaction: str) -> str:
    return f"{VERSIONS}/{version_name(number)}-{transaction}"


def split_index(number: int, transaction: str, split: str) -> str:
    return f"{index_directory(number, transaction)}/{split}/index.json"


def manifest_delta(number: int, transaction: str) -> str:
    return f"{MANIFESTS}/{version_name(number)}-{transaction}.parquet"


def manifest_checkpoint(number: int, transaction: str) -> str:
    return f"{MANIFESTS}/{version_name(number)}-{transaction}.checkpoint.parquet"


def fragment(transaction: str) -> str:
    return f"{FRAGMENTS}/{transaction}"


def chunk(transaction: str, number: int) -> str:
    return f"{FRAGMENTS}/{transaction}/chunk-{transaction}-{number}.bin"


def version_numbers(names: list[str]) -> list[int]:
    """The version numbers among the entry names of ``versions/``, ascending."""
    return sorted(int(match.group(1)) for name in names if (match := _VERSION_FILE.fullmatch(name)))


def tag(name: str) -> str:
    return f"{TAGS}/{name}.json"
