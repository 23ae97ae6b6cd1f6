"""litstore: a keyed, versioned dataset on LitData's chunk format.

>>> import litstore
>>> store = litstore.Store.create("data/pets", key="id", splits=litstore.HashSplit(train=0.9, val=0.1))
>>> version = store.append([{"id": "cat-1", "label": 0}])
>>> store["cat-1"]["label"]
0

The optional parts are submodules reached as attributes and imported on first use
(``litstore.sources.jsonl(...)``, ``litstore.export``, ``litstore.ray``), so ``import
litstore`` stays light. ``litstore.open`` opens a store but is left out of ``__all__``:
``from litstore import *`` does not shadow the built-in ``open``.
"""

from types import ModuleType as _ModuleType

from litstore import _litdata  # noqa: F401  (installs the record codec's media values)
from litstore.branches import Branches
from litstore.errors import (
    ConflictError,
    DamagedRecordError,
    DuplicateKeyError,
    IngestError,
    IntegrityError,
    InvalidArgumentError,
    InvalidRecordError,
    KeyFieldError,
    KeyNotFoundError,
    LitstoreError,
    MergeConflictError,
    MissingDependencyError,
    MissingFileError,
    QueryError,
    SchemaError,
    SplitError,
    StagedFragmentExpiredError,
    StorageError,
    StoreExistsError,
    StoreNotFoundError,
    StreamStateError,
    TagError,
    UnsafePathError,
    UnsupportedValueError,
    VerificationError,
    VersionNotFoundError,
)
from litstore.format.models import Branch, FieldSplit, HashSplit, StoreConfig, Tag, Version
from litstore.format.stored_media import Media, encoded_media, keeping_media
from litstore.ops.audit import AuditReport
from litstore.ops.diff import Diff
from litstore.ops.gc import GCReport
from litstore.ops.verify import VerifyReport
from litstore.snapshot import Snapshot
from litstore.store import Store
from litstore.store import open as open  # noqa: A004  (litstore.open is the API; left out of __all__)
from litstore.tags import Tags
from litstore.txn import StagedFragment

__version__ = "0.1.0"

#: Submodules imported when first reached as an attribute (``litstore.sources``): each imports heavy optional parts.
_LAZY_SUBMODULES = frozenset({"export", "ingest", "query", "ray", "sources", "stream_state", "streaming"})


def __getattr__(name: str) -> _ModuleType:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"litstore.{name}")  # (the import also sets it as an attribute)
    raise AttributeError(f"module 'litstore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES)


__all__ = [
    "AuditReport",
    "Branch",
    "Branches",
    "ConflictError",
    "DamagedRecordError",
    "Diff",
    "DuplicateKeyError",
    "FieldSplit",
    "GCReport",
    "HashSplit",
    "IngestError",
    "IntegrityError",
    "InvalidArgumentError",
    "InvalidRecordError",
    "KeyFieldError",
    "KeyNotFoundError",
    "LitstoreError",
    "Media",
    "MergeConflictError",
    "MissingDependencyError",
    "MissingFileError",
    "QueryError",
    "SchemaError",
    "Snapshot",
    "SplitError",
    "StagedFragment",
    "StagedFragmentExpiredError",
    "StorageError",
    "Store",
    "StoreConfig",
    "StoreExistsError",
    "StoreNotFoundError",
    "StreamStateError",
    "Tag",
    "TagError",
    "Tags",
    "UnsafePathError",
    "UnsupportedValueError",
    "VerificationError",
    "VerifyReport",
    "Version",
    "VersionNotFoundError",
    "encoded_media",
    "keeping_media",
]
