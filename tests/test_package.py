"""The package's surface: ``__all__`` is honest and every error is a ``LitstoreError`` (lint and types: ``.ci/run``)."""

from __future__ import annotations

import builtins
import subprocess
import sys

import litstore


def test_all_names_every_public_member() -> None:
    public = {name for name in dir(litstore) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(litstore, name)).__name__ == "module"}
    # litstore.open is the API, but a star import must not shadow the built-in open.
    assert set(litstore.__all__) == public - modules - {"open"}
    assert litstore.__all__ == sorted(litstore.__all__)


def test_a_star_import_leaves_the_builtin_open_alone() -> None:
    names: dict[str, object] = {}
    exec("from litstore import *", names)
    assert "open" not in names and "Store" in names
    assert callable(litstore.open) and litstore.open is not builtins.open


def test_optional_submodules_are_attributes_imported_on_first_use() -> None:
    # A fresh interpreter: in this one another test may have imported them already.
    script = (
        "import sys, litstore\n"
        "lazy = ['litstore.sources', 'litstore.export', 'litstore.streaming', 'litstore.ray']\n"
        "assert not [name for name in lazy if name in sys.modules], [n for n in lazy if n in sys.modules]\n"
        "assert callable(litstore.sources.jsonl) and callable(litstore.export.to_arrow)\n"
        "assert 'litstore.sources' in sys.modules and 'sources' in dir(litstore)\n"
        "try:\n"
        "    litstore.no_such_thing\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_thing' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_error_is_a_litstore_error() -> None:
    errors = [getattr(litstore, name) for name in litstore.__all__ if name.endswith("Error")]
    assert len(errors) >= 10
    for error in errors:
        assert issubclass(error, litstore.LitstoreError), error
    assert issubclass(litstore.KeyNotFoundError, KeyError)
    assert issubclass(litstore.InvalidRecordError, ValueError)
    assert issubclass(litstore.VersionNotFoundError, LookupError)
    assert issubclass(litstore.StorageError, OSError)
