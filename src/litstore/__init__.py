"""litstore: a keyed, versioned dataset on LitData's chunk format.

>>> import litstore
>>> store = litstore.Store.create("data/pets", key="id", splits=litstore.HashSplit(train=0.9, val=0.1))
>>> version = store.append([{"id": "cat-1", "label": 0}])
>>> store["cat-1"]["label"]
0
"""

from litstore.diff import Diff
from litstore.errors import (
    ConflictError,
    DuplicateKeyError,
    IntegrityError,
    InvalidRecordError,
    KeyFieldError,
    KeyNotFoundError,
    LitstoreError,
    QueryError,
    SchemaError,
    SplitError,
    StorageError,
    StoreExistsError,
    StoreNotFoundError,
    TagError,
    VerificationError,
    VersionNotFoundError,
)
from litstore.gc import GCReport
from litstore.models import FieldSplit, HashSplit, StoreConfig, Tag, Version
from litstore.snapshot import Snapshot
from litstore.store import Store, open  # noqa: A004  (litstore.open is the API)
from litstore.verify import VerifyReport

__version__ = "0.1.0"

__all__ = [
    "ConflictError",
    "Diff",
    "DuplicateKeyError",
    "FieldSplit",
    "GCReport",
    "HashSplit",
    "IntegrityError",
    "InvalidRecordError",
    "KeyFieldError",
    "KeyNotFoundError",
    "LitstoreError",
    "QueryError",
    "SchemaError",
    "Snapshot",
    "SplitError",
    "StorageError",
    "Store",
    "StoreConfig",
    "StoreExistsError",
    "StoreNotFoundError",
    "Tag",
    "TagError",
    "VerificationError",
    "VerifyReport",
    "Version",
    "VersionNotFoundError",
    "open",
]
