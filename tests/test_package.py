"""The package's surface: ``__all__`` is honest and every error is a ``LitstoreError`` (lint and types: ``.ci/run``)."""

from __future__ import annotations

import litstore


def test_all_names_every_public_member() -> None:
    public = {name for name in dir(litstore) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(litstore, name)).__name__ == "module"}
    assert set(litstore.__all__) == public - modules
    assert litstore.__all__ == sorted(litstore.__all__)


def test_every_error_is_a_litstore_error() -> None:
    errors = [getattr(litstore, name) for name in litstore.__all__ if name.endswith("Error")]
    assert len(errors) >= 10
    for error in errors:
        assert issubclass(error, litstore.LitstoreError), error
    assert issubclass(litstore.KeyNotFoundError, KeyError)
    assert issubclass(litstore.InvalidRecordError, ValueError)
    assert issubclass(litstore.VersionNotFoundError, LookupError)
    assert issubclass(litstore.StorageError, OSError)
