"""Every litstore error survives pickling: same type, message and attributes.

Errors cross process boundaries (``Store.ingest``'s workers, Ray tasks, DataLoader
workers), where an error that cannot be rebuilt is lost or replaced by a confusing
one. Every public error class of ``litstore.errors`` is found by walking the module,
so a class added later without an entry in ``EXAMPLES`` fails here rather than being
skipped. An attribute whose value cannot be pickled comes back as ``None``; the error
itself still pickles.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import multiprocessing
import pickle
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import litstore
from litstore import errors
from litstore.errors import LitstoreError
from litstore.ops.verify import VerifyReport

PUBLIC_ERRORS = sorted(
    (
        value
        for name, value in vars(errors).items()
        if not name.startswith("_") and isinstance(value, type) and issubclass(value, LitstoreError)
    ),
    key=lambda cls: cls.__name__,
)

MESSAGE = "something about 'x' went wrong"
CULPRITS = [(0, "a"), (3, None), (7, 12)]
REPORT = VerifyReport(version=3, records_checked=10, chunks_checked=2, missing_chunks=["fragments/x.bin"])


def _plain(cls: type[LitstoreError]) -> Callable[[], LitstoreError]:
    return lambda: cls(MESSAGE)


def _batch(cls: type[errors.InvalidRecordError]) -> Callable[[], LitstoreError]:
    return lambda: cls(MESSAGE, CULPRITS)


#: How to build a representative instance of each public error class, by constructor signature.
EXAMPLES: dict[type[LitstoreError], Callable[[], LitstoreError]] = {
    **{
        cls: _plain(cls)
        for cls in (
            errors.LitstoreError,
            errors.InvalidArgumentError,
            errors.KeyNotFoundError,
            errors.VersionNotFoundError,
            errors.TagError,
            errors.StoreExistsError,
            errors.StoreNotFoundError,
            errors.QueryError,
            errors.StreamStateError,
            errors.ConflictError,
            errors.StagedFragmentExpiredError,
            errors.MissingDependencyError,
            errors.IntegrityError,
            errors.StorageError,
            errors.MissingFileError,
            errors.UnsafePathError,
            errors.NotDurableError,
            errors.UncertainCommitError,
        )
    },
    **{
        cls: _batch(cls)
        for cls in (
            errors.InvalidRecordError,
            errors.KeyFieldError,
            errors.DuplicateKeyError,
            errors.SchemaError,
            errors.SplitError,
        )
    },
    errors.UnsupportedValueError: lambda: errors.UnsupportedValueError("meta.when", {1, 2}, "sets cannot be stored"),
    errors.IngestError: lambda: errors.IngestError(MESSAGE, 4, {"path": "a.jpg"}),
    errors.MergeConflictError: lambda: errors.MergeConflictError(MESSAGE, ["a", 7]),
    errors.VerificationError: lambda: errors.VerificationError(MESSAGE, REPORT),
    errors.DamagedRecordError: lambda: errors.DamagedRecordError(MESSAGE, 3, "fragments/c.bin", [4, 9], ["a", None]),
}


def _round_trip(error: BaseException) -> Any:
    return pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))


def test_the_walk_finds_every_error_the_module_docstring_draws() -> None:
    drawn = {"LitstoreError", *re.findall(r"[├└]── (\w+)", errors.__doc__ or "")}
    assert {cls.__name__ for cls in PUBLIC_ERRORS} == drawn


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_survives_pickling(cls: type[LitstoreError]) -> None:
    assert cls in EXAMPLES, f"{cls.__name__} has no entry in EXAMPLES: add one so its pickling is tested"
    error = EXAMPLES[cls]()
    assert type(error) is cls
    copy = _round_trip(error)
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)


@pytest.mark.parametrize(
    ("cls", "attributes"),
    [
        (errors.InvalidRecordError, {"culprits": CULPRITS}),
        (errors.SplitError, {"culprits": CULPRITS}),
        (errors.UnsupportedValueError, {"path": "meta.when", "value": {1, 2}, "culprits": []}),
        (errors.IngestError, {"position": 4, "input": {"path": "a.jpg"}}),
        (errors.VerificationError, {"report": REPORT}),
        (errors.DamagedRecordError, {"version": 3, "chunk": "fragments/c.bin", "rows": [4, 9], "keys": ["a", None]}),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_attributes_come_back(cls: type[LitstoreError], attributes: dict[str, Any]) -> None:
    copy = _round_trip(EXAMPLES[cls]())
    for name, value in attributes.items():
        assert getattr(copy, name) == value, name


def test_errors_keep_their_builtin_bases_and_notes() -> None:
    error = errors.MissingFileError("no file 'x' in /store")
    error.add_note("while reading version 3")
    copy = _round_trip(error)
    assert isinstance(copy, FileNotFoundError)
    assert isinstance(copy, errors.StorageError)
    assert copy.__notes__ == ["while reading version 3"]
    key_error = _round_trip(errors.KeyNotFoundError("key 'k' is not in version 2"))
    assert isinstance(key_error, KeyError)
    assert str(key_error) == "key 'k' is not in version 2"


@pytest.mark.parametrize(
    ("build", "attribute"),
    [
        (lambda unpicklable: errors.UnsupportedValueError("meta.fn", unpicklable), "value"),
        (lambda unpicklable: errors.IngestError(MESSAGE, 2, unpicklable), "input"),
        (lambda unpicklable: errors.VerificationError(MESSAGE, unpicklable), "report"),
        (lambda unpicklable: errors.SchemaError(MESSAGE, [(0, unpicklable)]), "culprits"),
    ],
    ids=["UnsupportedValueError", "IngestError", "VerificationError", "SchemaError"],
)
@pytest.mark.parametrize("unpicklable", [lambda: 0, threading.Lock()], ids=["lambda", "lock"])
def test_an_unpicklable_attribute_comes_back_as_none(
    build: Callable[[Any], LitstoreError], attribute: str, unpicklable: Any
) -> None:
    error = build(unpicklable)
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        pickle.dumps(getattr(error, attribute))
    copy = _round_trip(error)
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert getattr(copy, attribute) is None
    assert getattr(error, attribute) is not None, "the original keeps its value"
    others = {name: value for name, value in vars(error).items() if name != attribute}
    assert {name: value for name, value in vars(copy).items() if name != attribute} == others


def test_a_real_verification_error_survives_pickling(tmp_path: Path) -> None:
    root = tmp_path / "store"
    litstore.Store.create(root, key="id", chunk_bytes=4096).append([{"id": f"k{i}", "v": i} for i in range(50)])
    chunk = next((root / "fragments").rglob("*.bin"))
    chunk.unlink()
    report = litstore.open(root).verify()
    with pytest.raises(errors.VerificationError) as raised:
        report.raise_if_failed()
    copy = _round_trip(raised.value)
    assert type(copy) is errors.VerificationError
    assert str(copy) == str(raised.value)
    assert copy.report == report
    assert copy.report.missing_chunks == [str(chunk.relative_to(root))]


def test_a_real_ingest_error_for_an_input_that_cannot_be_sent_survives_pickling(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "store", key="id")
    with pytest.raises(errors.IngestError) as raised:
        store.ingest(_record_of, [1, threading.Lock()], num_workers=1, progress=False)
    assert raised.value.position == 1
    copy = _round_trip(raised.value)
    assert type(copy) is errors.IngestError
    assert str(copy) == str(raised.value)
    assert (copy.position, copy.input) == (1, None)


def _record_of(value: int) -> dict[str, Any]:
    return {"id": str(value)}


def _raise_unsupported() -> None:
    raise errors.UnsupportedValueError("meta.callback", lambda: 0)


def test_an_error_raised_in_a_worker_process_reaches_the_caller() -> None:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        with pytest.raises(errors.UnsupportedValueError) as raised:
            pool.submit(_raise_unsupported).result()
    assert str(raised.value) == "meta.callback: values of type function cannot be stored"
    assert (raised.value.path, raised.value.value) == ("meta.callback", None)


class _RefusesPickle:
    """An object whose pickling raises ValueError (as a ctypes pointer's does), not TypeError."""

    def __reduce__(self) -> Any:
        raise ValueError("not picklable")


@pytest.mark.parametrize(
    "make",
    [
        lambda: errors.UnsupportedValueError("x", ctypes.pointer(ctypes.c_int(1))),
        lambda: errors.IngestError("fn failed on input 0", 0, ctypes.pointer(ctypes.c_int(1))),
        lambda: errors.UnsupportedValueError("x", _RefusesPickle()),
    ],
    ids=["ctypes-value", "ctypes-input", "reduce-raises-valueerror"],
)
def test_an_attribute_pickle_refuses_with_any_exception_comes_back_as_none(make: Callable[[], Any]) -> None:
    error = make()
    copy = pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert getattr(copy, "value", getattr(copy, "input", "absent")) is None


def test_built_in_attributes_outside_the_instance_dict_survive() -> None:
    missing = errors.MissingFileError(errno.ENOENT, "No such file", "versions/3.json")
    copy = pickle.loads(pickle.dumps(missing, pickle.HIGHEST_PROTOCOL))
    assert (copy.errno, copy.strerror, copy.filename) == (errno.ENOENT, "No such file", "versions/3.json")
    assert str(copy) == str(missing)
    dependency = errors.MissingDependencyError("install pandas", name="pandas")
    assert pickle.loads(pickle.dumps(dependency, pickle.HIGHEST_PROTOCOL)).name == "pandas"


class _CountsPickling:
    calls = 0

    def __reduce__(self) -> Any:
        type(self).calls += 1
        return (_CountsPickling, ())


def test_nested_errors_pickle_their_innermost_value_a_fixed_number_of_times() -> None:
    """Checking each attribute by pickling it used to pickle the innermost one 2**depth times."""
    error: Any = _CountsPickling()
    for level in range(24):
        error = errors.IngestError(f"fn failed on input {level}", level, error)
    _CountsPickling.calls = 0
    copy = pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
    assert _CountsPickling.calls <= 2
    assert copy.position == 23 and copy.input.position == 22


def test_errors_nested_in_lists_pickle_their_innermost_value_a_bounded_number_of_times() -> None:
    """picklable() pickled a list attribute whole, and each error inside it did the same: 2**depth times."""
    _CountsPickling.calls = 0
    error = errors.IngestError("base", 0, _CountsPickling())
    depth = 12
    for level in range(depth):
        error = errors.IngestError(f"level {level}", level, [error])
    pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
    assert _CountsPickling.calls <= 2 * (depth + 1)
