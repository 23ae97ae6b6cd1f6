"""Where each file lives under a store root (paths relative to the root)::

    litstore.json                                   StoreConfig
    versions/<v>.json                               Version: its creation is the commit
    versions/head.hint                              the number of a recent commit, in decimal (a hint, see below)
    versions/<v>-<txn>/<split>/index.json           litdata index of that version's split
    manifests/<v>-<txn>.parquet                     manifest delta of version v
    manifests/<v>-<txn>.checkpoint.parquet          full manifest at version v (some versions)
    manifests/<v>-<txn>.keys                        key run written by version v (format 3)
    manifests/<v>-<txn>.deletions                   dead rows of the chunks version v marked (format 4)
    manifests/<v>-<txn>.listing                     full listing of version v, written by gc (format 6)
    fragments/<txn>/chunk-<txn>-<n>.bin             litdata chunks, written once, never changed
    fragments/<txn>/chunk-<txn>-<n>.hashes          the chunk's items' content hashes (format 3, format/chunkhashes.py)
    fragments/<txn>/lease-<id>.json                 FragmentLease: gc leaves the fragment alone while it runs
    fragments/<txn>/doomed-<id>.json                gc is removing files of the fragment (commits refuse it)
    fragments/<id>/clock.json                       gc's probe of the storage's own clock (removed at once)
    versions/<v>.expiring/<id>.json                 gc is about to expire version v (tags wait for it)
    tags/<name>.json                                Tag: a name for a version
    branches/<b>/branch.json                        Branch: where branch b starts (base line, version)
    branches/<b>/versions/<v>.json                  branch b's own commit records (v above its start)
    branches/<b>/versions/<v>-<txn>/<split>/...     and split indexes
    branches/<b>/versions/head.hint, turn.claim     as versions/ has them, for branch b
    branches/<b>/tags/<name>.json                   branch b's tags

``<txn>`` is the id of the write attempt (also its fragment id). Every file a writer
writes before its commit carries it, so writers racing for the same version number
never write the same path: the loser's files are simply never referenced. The commit
record names the files of its version.

Version numbers are zero-padded to 8 digits so that listings sort; readers parse
them as integers, so larger numbers still work.

The head hint is overwritten (best effort) by every writer after its commit record is
created, so that finding the newest version costs a few lookups instead of a listing
of ``versions/`` (:func:`litstore.read.log.head_number`). Nothing trusts it: a reader
checks that its record exists and that the next one does not, and lists otherwise. It
is no commit record (:func:`version_numbers` skips it) and no data file
(:func:`is_own_file` does not match it, so gc never removes it).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

CONFIG = "litstore.json"
VERSIONS = "versions"
MANIFESTS = "manifests"
FRAGMENTS = "fragments"
TAGS = "tags"
BRANCHES = "branches"
#: An advisory claim on the next commit by a writer that keeps losing races (``txn/claims.py``).
TURN = f"{VERSIONS}/turn.claim"
#: The number of a recent commit, written after each commit; readers check it (``read/log.py``).
HEAD_HINT = f"{VERSIONS}/head.hint"
#: Every name litstore writes at the top of a store root.
TOP_LEVEL = (CONFIG, VERSIONS, MANIFESTS, FRAGMENTS, TAGS, BRANCHES)
#: A chunk file must be smaller than this: litdata's chunk header holds 32-bit offsets.
CHUNK_SIZE_LIMIT = 2**32

_VERSION_FILE = re.compile(r"(\d+)\.json")
_TRANSACTION = re.compile(r"[0-9a-f]{20}")
_CHUNK = re.compile(r"fragments/([0-9a-f]{20})/chunk-([0-9a-f]{20})-(\d{1,9})\.bin")
_CHUNK_FILE = re.compile(r"fragments/([0-9a-f]{20})/chunk-([0-9a-f]{20})-(\d{1,9})\.(bin|hashes)")
#: Chunk names joined by newlines, each one as :data:`_CHUNK` takes it (the back-references: its fragment's
#: id twice), matched in one pass.
_CHUNK_LINES = re.compile(
    r"(?:fragments/([0-9a-f]{20})/chunk-\1-\d{1,9}\.bin\n)*fragments/([0-9a-f]{20})/chunk-\2-\d{1,9}\.bin"
)


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


def check_chunks(paths: Sequence[str]) -> Sequence[str]:
    """``paths`` if each names a chunk as litstore writes them (:func:`check_chunk`), else ``ValueError`` naming one
    that does not.

    Checked all at once by :func:`are_chunks` (a compaction's commit record drops 1,000 chunks after 1,000
    small appends, and every process that opens the version reads it): a name holding a newline would
    pass as two, so the number of newlines is checked too.
    """
    if not paths:
        return paths
    try:
        joined = "\n".join(paths)
    except TypeError:  # (not all strings)
        joined = ""
    if joined.count("\n") == len(paths) - 1 and are_chunks(joined):
        return paths
    for path in paths:  # (which one)
        check_chunk(path)
    return paths


def are_chunks(joined: str) -> bool:
    """Whether ``joined`` is one or more names :func:`check_chunk` takes, joined by ``"\\n"``.

    A key run's chunk table, checked whole by one regular expression: a run that names
    1,000 chunks (a checkpoint after many small commits) in 0.25 ms, against 1.5 ms for
    each name on its own, in every process that opens the run.
    """
    if len(joined) >= _COLUMNWISE:
        alike = _alike_chunks(joined)
        if alike is not None:
            return alike
    return _CHUNK_LINES.fullmatch(joined) is not None


#: From this many characters of names, :func:`are_chunks` looks at names of one length as the columns of an
#: array: 1,000 names in ~0.05 ms, against 0.21 ms for the regular expression (a compaction's commit record
#: drops that many after 1,000 small appends, and every process that opens the version reads it).
_COLUMNWISE = 4096


def _alike_chunks(joined: str) -> bool | None:
    """:func:`are_chunks` for names of one length and ASCII, column by column; ``None`` for any other text (the
    regular expression decides)."""
    import numpy as np

    try:
        data = joined.encode("ascii")
    except UnicodeEncodeError:
        return None
    width = data.find(b"\n")
    digits = width - 62  # fragments/ + 20 hex + /chunk- + 20 hex + - + digits + .bin
    count = (len(data) + 1) // (width + 1) if width > 0 else 0
    if not 1 <= digits <= 9 or count * (width + 1) != len(data) + 1:
        return None
    rows = np.frombuffer(data + b"\n", np.uint8).reshape(count, width + 1)

    def column(start: int, stop: int) -> bytes:
        return rows[:, start:stop].tobytes()

    if column(width, width + 1) != b"\n" * count:
        return None  # names of several lengths
    fragment = column(10, 30)
    return (
        column(0, 10) == b"fragments/" * count
        and column(30, 37) == b"/chunk-" * count
        and column(57, 58) == b"-" * count
        and column(width - 4, width) == b".bin" * count
        and fragment == column(37, 57)
        and not fragment.translate(None, b"0123456789abcdef")
        and not column(58, 58 + digits).translate(None, b"0123456789")
    )


_OWN_FILES = re.compile(
    r"fragments/[0-9a-f]{20}/chunk-[0-9a-f]{20}-\d{1,9}\.(bin|hashes)"
    r"|fragments/[0-9a-f]{20}/((lease|doomed)-[0-9a-f]{20}|clock)\.json"
    r"|versions/\d{8,}\.expiring/[0-9a-f]{20}\.json"
    r"|manifests/\d{8,}-[0-9a-f]{20}(\.checkpoint)?\.parquet"
    r"|manifests/\d{8,}-[0-9a-f]{20}\.(keys|deletions|listing)"
    r"|versions/\d{8,}-[0-9a-f]{20}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}/index\.json"
    r"|versions/turn\.claim"
)
_TEMPORARY = re.compile(r"(.*/)?\.tmp-[0-9a-f]{32}-[^/]+")


def is_chunk(path: str) -> bool:
    """Whether ``path`` names a chunk as litstore writes them."""
    match = _CHUNK.fullmatch(path)
    return match is not None and match.group(1) == match.group(2)


def is_chunk_file(path: str) -> bool:
    """Whether ``path`` names a chunk or a chunk's hashes sidecar: the data files of a fragment, which gc
    removes only under its mark (:mod:`litstore.txn.leases`)."""
    match = _CHUNK_FILE.fullmatch(path)
    return match is not None and match.group(1) == match.group(2)


def is_own_file(path: str) -> bool:
    """Whether ``path`` is a data file litstore writes (a chunk, manifest, key run, deletions file or index):
    gc deletes no other."""
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


def key_run(number: int, transaction: str) -> str:
    return f"{MANIFESTS}/{version_name(number)}-{transaction}.keys"


#: What :func:`key_run` names (anchored: a pydantic field pattern is searched, not matched).
KEY_RUN_PATTERN = r"^manifests/([0-9]{8,})-[0-9a-f]{20}\.keys$"


def deletions(number: int, transaction: str) -> str:
    """The deletion vectors version ``number`` wrote (:mod:`litstore.format.deletions`)."""
    return f"{MANIFESTS}/{version_name(number)}-{transaction}.deletions"


_DELETIONS = re.compile(r"manifests/(\d{8,})-[0-9a-f]{20}\.deletions")


def deletions_number(path: str) -> int:
    """The version that wrote deletions file ``path``, else ``ValueError``."""
    match = _DELETIONS.fullmatch(path) if isinstance(path, str) else None
    if match is None:
        raise ValueError(f"{path!r} is not a deletions file path of this store's layout")
    return int(match.group(1))


def listing(number: int, transaction: str) -> str:
    """The full listing of version ``number`` (its chunks and deletion vectors) that gc writes where it cuts
    the chain a format-6 version's listing is composed from (:class:`~litstore.format.models.Listing`)."""
    return f"{MANIFESTS}/{version_name(number)}-{transaction}.listing"


def fragment(transaction: str) -> str:
    return f"{FRAGMENTS}/{transaction}"


def chunk(transaction: str, number: int) -> str:
    return f"{FRAGMENTS}/{transaction}/chunk-{transaction}-{number}.bin"


def chunk_hashes(chunk_path: str) -> str:
    """The hashes sidecar of the chunk ``chunk_path`` (checked: ``ValueError`` if it names no chunk)."""
    return check_chunk(chunk_path).removesuffix(".bin") + ".hashes"


def lease(transaction: str, holder: str) -> str:
    """A lease on fragment ``transaction`` taken by ``holder`` (the stager, or a commit)."""
    return f"{FRAGMENTS}/{transaction}/lease-{holder}.json"


def doomed(transaction: str, collector: str) -> str:
    """The mark gc ``collector`` sets on fragment ``transaction`` before it removes any of its files."""
    return f"{FRAGMENTS}/{transaction}/doomed-{collector}.json"


def is_lease(name: str) -> bool:
    """Whether a file name inside a fragment directory is a lease."""
    return re.fullmatch(r"lease-[0-9a-f]{20}\.json", name) is not None


def is_doomed_mark(name: str) -> bool:
    """Whether a file name inside a fragment directory is gc's mark that it is removing files."""
    return re.fullmatch(r"doomed-[0-9a-f]{20}\.json", name) is not None


def clock_probe(collector: str) -> str:
    """The file gc ``collector`` writes to read the storage's own clock."""
    return f"{FRAGMENTS}/{collector}/clock.json"


def expiring(number: int) -> str:
    """The directory of marks by gcs about to expire version ``number``."""
    return f"{VERSIONS}/{version_name(number)}.expiring"


def expiring_mark(number: int, collector: str) -> str:
    return f"{expiring(number)}/{collector}.json"


def version_numbers(names: list[str]) -> list[int]:
    """The version numbers among the entry names of ``versions/``, ascending."""
    return sorted(int(match.group(1)) for name in names if (match := _VERSION_FILE.fullmatch(name)))


def tag(name: str) -> str:
    return f"{TAGS}/{name}.json"


def branch_directory(name: str) -> str:
    """Where branch ``name`` keeps its record, its own commit records and its tags."""
    return f"{BRANCHES}/{name}"


def branch_record(name: str) -> str:
    return f"{branch_directory(name)}/branch.json"
