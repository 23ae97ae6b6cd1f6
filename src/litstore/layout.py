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

CONFIG = "litstore.json"
VERSIONS = "versions"
MANIFESTS = "manifests"
FRAGMENTS = "fragments"
TAGS = "tags"

_VERSION_FILE = re.compile(r"(\d+)\.json")


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


def version_numbers(names: list[str]) -> list[int]:
    """The version numbers among the entry names of ``versions/``, ascending."""
    return sorted(int(match.group(1)) for name in names if (match := _VERSION_FILE.fullmatch(name)))


def tag(name: str) -> str:
    return f"{TAGS}/{name}.json"
