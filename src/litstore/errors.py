"""The exceptions litstore raises.

Every error derives from :class:`LitstoreError`; where callers already expect a
built-in type, the error also derives from it, so ``except KeyError`` keeps working::

    LitstoreError
    ├── InvalidRecordError (ValueError)      a batch was rejected; nothing was written
    │   ├── KeyFieldError                    key field missing, None, or of the wrong type
    │   ├── DuplicateKeyError                a key twice in one batch, or already in the store
    │   ├── SchemaError                      a record does not fit the store's schema
    │   │   └── UnsupportedValueError        a value of a type litstore cannot store
    │   └── SplitError                       a record names a split the rule does not know
    ├── InvalidArgumentError (ValueError)    a public call got an argument it cannot use
    ├── KeyNotFoundError (KeyError)          ``store[key]`` for a key that is not there
    ├── VersionNotFoundError (LookupError)   ``store.at(n)`` for a version or tag that does not exist
    ├── TagError (ValueError)                an invalid tag name, or a tag that would silently move
    ├── StoreExistsError (FileExistsError)   ``Store.create`` on a root that holds a store
    ├── StoreNotFoundError (FileNotFoundError)  ``litstore.open`` on a root without one
    ├── QueryError (ValueError)              ``store.sql`` was given a query DuckDB rejects
    ├── StreamStateError (ValueError)        a loader state saved on another version or subset, or edited
    ├── ConflictError                        another writer committed the same version first
    │   └── MergeConflictError               both branches changed the same keys since they parted
    ├── StagedFragmentExpiredError           a staged fragment's files are gone (gc, or another store's)
    ├── IngestError                          ``Store.ingest``'s function failed on an input, or a worker died
    ├── MissingDependencyError (ImportError) an optional dependency (pandas, polars, ray, ...) is not installed
    ├── IntegrityError                       data does not match what was committed
    │   ├── DamagedRecordError               a record read is not the one committed (key, chunk, row)
    │   └── VerificationError                raised by ``VerifyReport.raise_if_failed()``
    └── StorageError (OSError)               the storage backend failed
        ├── MissingFileError (FileNotFoundError)  a file the store needs is not there
        ├── UnsafePathError                  a path that would leave the store root, or not a regular file
        ├── NotDurableError                  a file was created but its fsync failed (a power loss may undo it)
        └── UncertainCommitError             creating a commit record failed; it may exist all the same

Batch errors carry the offending positions and keys in ``.culprits`` and name the
first few of them (and how many there are) in the message.

Every error pickles (see :class:`LitstoreError`): errors cross process boundaries, from
``Store.ingest``'s workers, Ray tasks and DataLoader workers to the caller.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pydantic

#: How many culprits an error message names before it says "and N more".
SHOWN_CULPRITS = 5


class LitstoreError(Exception):
    """Base class of every error litstore raises.

    Every litstore error survives ``pickle`` with its type, message and attributes: it is
    rebuilt from its ``args`` and attributes without calling ``__init__``, so a subclass may
    take constructor arguments other than its ``args``. An attribute whose value cannot be
    pickled (a lambda or a lock a record held, say) comes back as ``None`` rather than making
    the whole error unpicklable, which would lose it on its way out of a worker process; the
    message, which names the value, comes back whole.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        if getattr(_checking, "active", False):  # inside picklable(): the outer check covers this error
            state = dict(vars(self))
        else:
            state = {name: value if picklable(value) else None for name, value in vars(self).items()}
        for base, names in _BUILT_IN_ATTRIBUTES:  # kept by the built-in base, outside __dict__
            if isinstance(self, base):
                state.update((name, getattr(self, name)) for name in names if getattr(self, name) is not None)
        return (_rebuild, (type(self), self.args), state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        for name, value in (state or {}).items():
            setattr(self, name, value)


#: Attributes that built-in bases of litstore errors hold outside the instance ``__dict__``.
_BUILT_IN_ATTRIBUTES: tuple[tuple[type[BaseException], tuple[str, ...]], ...] = (
    (OSError, ("errno", "strerror", "filename", "filename2")),
    (ImportError, ("name", "path")),
)


def _rebuild(cls: type[LitstoreError], args: tuple[Any, ...]) -> LitstoreError:
    """An error of type ``cls`` with ``args``, made without its ``__init__`` (pickle then restores its attributes)."""
    error = cls.__new__(cls, *args)
    error.args = args
    return error


def picklable(value: Any) -> bool:
    """Whether ``value`` can be pickled (to cross to another process).

    A litstore error always can (it leaves out what cannot). Errors met inside ``value``
    (a list of them, say) are pickled as they are during the check, not checked again
    each: otherwise errors nested in errors would be pickled 2**depth times.
    """
    if isinstance(value, LitstoreError):
        return True
    outer = getattr(_checking, "active", False)
    _checking.active = True
    try:
        pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a user's object may refuse with anything (ctypes: ValueError)
        return False
    finally:
        _checking.active = outer
    return True


#: Set while :func:`picklable` pickles a value (per thread).
_checking = threading.local()


def describe(items: Sequence[Any], limit: int = SHOWN_CULPRITS) -> str:
    """``"'a', 'b', 'c' and 4 more"``: the first few items and how many are left."""
    shown = ", ".join(repr(item) for item in items[:limit])
    rest = len(items) - limit
    return f"{shown} and {rest} more" if rest > 0 else shown


def first_problem(exc: pydantic.ValidationError, whole: str) -> str:
    """``"where: what"`` of the first problem pydantic found; ``whole`` names the top level."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or whole
    return f"{where}: {error['msg']}"


class InvalidRecordError(LitstoreError, ValueError):
    """A batch was rejected before anything was written.

    Attributes:
        culprits: ``(position, key)`` of every offending record; ``key`` is ``None``
            where the record has no usable key.
    """

    def __init__(self, message: str, culprits: Sequence[tuple[int, Any]] = ()) -> None:
        super().__init__(message)
        self.culprits: list[tuple[int, Any]] = list(culprits)


class KeyFieldError(InvalidRecordError):
    """A record's key field is missing, ``None``, or not of the store's key type."""


class DuplicateKeyError(InvalidRecordError):
    """A key appears twice in one batch, or ``append`` was given a key the store has."""


class SchemaError(InvalidRecordError):
    """A record does not fit the store's declared schema or holds an unsupported value."""


class UnsupportedValueError(SchemaError):
    """A value in a record has a type litstore cannot store.

    Attributes:
        path: where in the record the value is (``""``: the record itself).
        value: the value; ``None`` in a copy unpickled from another process if it
            cannot be pickled (the message names its type either way).
    """

    def __init__(self, path: str, value: Any, why: str = "") -> None:
        reason = why or f"values of type {type(value).__name__} cannot be stored"
        super().__init__(f"{path or 'record'}: {reason}")
        self.path = path
        self.value = value


class SplitError(InvalidRecordError):
    """A record names a split that the store's split rule does not know."""


class InvalidArgumentError(LitstoreError, ValueError):
    """A public call got an argument it cannot use (a version of the wrong type, ``keep_last=0``, ...)."""


class KeyNotFoundError(LitstoreError, KeyError):
    """The key is not in this version of the store."""

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the whole message.
        return str(self.args[0]) if self.args else ""


class VersionNotFoundError(LitstoreError, LookupError):
    """The requested version (or tag) does not exist."""


class TagError(LitstoreError, ValueError):
    """A tag name is invalid, or tagging would silently move an existing tag."""


class StoreExistsError(LitstoreError, FileExistsError):
    """``Store.create`` was called on a root that already holds a store."""


class StoreNotFoundError(LitstoreError, FileNotFoundError):
    """There is no store at the given root."""


class QueryError(LitstoreError, ValueError):
    """DuckDB rejected a query given to ``store.sql``."""


class StreamStateError(LitstoreError, ValueError):
    """A loader state saved while streaming one version, split or subset was loaded into another.

    Also a state litdata could not have written for this dataset: an entry missing or
    unknown, of the wrong type, out of range (a negative count, one past the epoch), or
    describing another dataset (seed, shuffle, chunks); see :mod:`litstore.stream_state`.
    """


class ConflictError(LitstoreError):
    """Another writer committed the version this write meant to create."""


class MergeConflictError(ConflictError):
    """Both sides of a merge changed the same keys (to different contents) since the branch point; nothing was
    committed. ``.keys`` lists them (sorted by repr)."""

    def __init__(self, message: str, keys: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.keys = list(keys)


class StagedFragmentExpiredError(LitstoreError):
    """A staged fragment handed to ``commit`` does not have its files in this store; nothing was committed.

    Its lease ran out and gc removed (or is removing) it, or it was staged by another
    store. Stage the records again; pass a longer ``lease=`` to ``Store.stage`` for jobs
    that commit more than a day after they stage.
    """


class IngestError(LitstoreError):
    """``Store.ingest``'s function failed on one of the inputs, or a worker process died; nothing was committed.

    Attributes:
        position: the failing input's position in ``inputs``; ``None`` where a worker died.
        input: the failing input (its ``repr`` is in the message); ``None`` where a worker
            died, and in a copy unpickled from another process if it cannot be pickled.
    """

    def __init__(self, message: str, position: int | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.position = position
        self.input = value


class MissingDependencyError(LitstoreError, ImportError):
    """An optional dependency a call needs is not installed; the message says what to install."""


class IntegrityError(LitstoreError):
    """Stored data does not match what was committed, or a write failed its self-check."""


class DamagedRecordError(IntegrityError):
    """Records a read asked for are not the ones their version committed.

    Their stored bytes do not match the committed content hashes (the chunk was
    damaged after the commit), or match them yet are not one canonical record each (a
    damaged or hostile writer committed them so). Raised by every reader of records
    (lookups, ``get_many``, iteration, streaming, Ray's read tasks) at the first batch
    holding damage; ``store.verify()`` lists every damaged record.

    It is made from its message alone too (the rest then empty): PyTorch's DataLoader
    raises a worker's error again in the main process as ``type(error)(message)``.

    Attributes:
        version: the version read (``None`` where the reader does not know it).
        chunk: the chunk holding the records.
        rows: their rows in the chunk.
        keys: their keys, in the order of ``rows``; ``None`` where a key is not known.
    """

    def __init__(
        self,
        message: str,
        version: int | None = None,
        chunk: str = "",
        rows: Sequence[int] = (),
        keys: Sequence[Any] = (),
    ) -> None:
        super().__init__(message)
        self.version = version
        self.chunk = chunk
        self.rows: list[int] = list(rows)
        self.keys: list[Any] = list(keys) if keys else [None] * len(self.rows)


class VerificationError(IntegrityError):
    """``VerifyReport.raise_if_failed()`` found problems; ``.report`` (a ``VerifyReport``) holds them all.

    A ``VerifyReport`` pickles; any other report that cannot comes back as ``None``.
    """

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


class StorageError(LitstoreError, OSError):
    """The storage backend failed to read or write."""


class MissingFileError(StorageError, FileNotFoundError):
    """A file the store needs does not exist."""


class UnsafePathError(StorageError):
    """A path is not a plain relative path inside the store root, leads out of it, or is not a regular file."""


class NotDurableError(StorageError):
    """A file was created but could not be made durable (its fsync failed): it may be gone after a power loss."""


class UncertainCommitError(StorageError):
    """Creating a commit record failed in a way that leaves unknown whether it exists.

    Nothing the commit wrote was removed (the record may reference it): open the store
    again to see whether the version was committed; ``gc`` removes the files if not.
    """
