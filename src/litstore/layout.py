"""Where each file lives under a store root (paths relative to the root)::

    litstore.json                                   StoreConfig
    versions/<v>.json                               Version: its creation is the commit
    versions/<v>/<split>/index.json                 litdata index of that version's split
    manifests/<v>.parquet                           manifest delta of version v
    manifests/<v>.checkpoint.parquet                full manifest at version v (some versions)
    fragments/<fragment>/chunk-<fragment>-<n>.bin   litdata chunks, written once, never changed
    tags/<name>.json                                Tag: a name for a version

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


def split_index(number: int, split: str) -> str:
    return f"{VERSIONS}/{version_name(number)}/{split}/index.json"


def manifest_delta(number: int) -> str:
    return f"{MANIFESTS}/{version_name(number)}.parquet"


def manifest_checkpoint(number: int) -> str:
    return f"{MANIFESTS}/{version_name(number)}.checkpoint.parquet"


def fragment(fragment_id: str) -> str:
    return f"{FRAGMENTS}/{fragment_id}"


def version_numbers(names: list[str]) -> list[int]:
    """The version numbers among the entry names of ``versions/``, ascending."""
    return sorted(int(match.group(1)) for name in names if (match := _VERSION_FILE.fullmatch(name)))


def tag(name: str) -> str:
    return f"{TAGS}/{name}.json"
