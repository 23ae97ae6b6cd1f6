"""Where stores live: the :class:`Storage` contract and its backends.

=================  ==========================================  ==========================
root               backend                                     module
=================  ==========================================  ==========================
a local path       :class:`~.local.LocalStorage`               :mod:`.local`
``s3://b/prefix``  :class:`~.s3.S3Storage` (boto3)             :mod:`.s3`
``memory://name``  :class:`~.memory.MemoryStorage`             :mod:`.memory`
``az://c/prefix``  :class:`~.objectstore.ObjectStorage`        :mod:`.objectstore`
                   (obstore; ``abfs://`` alike; no streaming)
``gs://b/prefix``  :class:`~.objectstore.ObjectStorage`        :mod:`.objectstore`
                   (obstore; no streaming)
=================  ==========================================  ==========================

:func:`open_storage` picks the backend from the root's scheme and imports its module
only then (``import litstore`` never imports boto3); the local backend, which imports
nothing the package does not, is imported with the package, so opening a local store
compiles or loads no module.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any

from litstore.errors import MissingFileError, StorageError, UnsafePathError
from litstore.storage import branched
from litstore.storage import local as _local  # noqa: F401  (see the module docstring)
from litstore.storage.base import FileInfo, LitdataInput, LocalInput, RemoteInput, Storage, check_path

#: URL scheme -> "module:class" of its backend. A new backend adds one line here.
BACKENDS: dict[str, str] = {
    "file": "litstore.storage.local:LocalStorage",
    "s3": "litstore.storage.s3:S3Storage",
    "memory": "litstore.storage.memory:MemoryStorage",
    "az": "litstore.storage.objectstore:ObjectStorage",
    "abfs": "litstore.storage.objectstore:ObjectStorage",
    "abfss": "litstore.storage.objectstore:ObjectStorage",
    "gs": "litstore.storage.objectstore:ObjectStorage",
}

__all__ = [
    "BACKENDS",
    "FileInfo",
    "LitdataInput",
    "LocalInput",
    "MissingFileError",
    "RemoteInput",
    "Storage",
    "UnsafePathError",
    "check_path",
    "open_storage",
]


def open_storage(root: str | os.PathLike[str] | Storage, options: dict[str, Any] | None = None) -> Storage:
    """The backend for ``root``: a local directory, ``s3://bucket/prefix``, ``az://container/prefix`` or ``memory://name``.

    Raises:
        StorageError: the scheme is not one litstore knows.
    """
    if isinstance(root, Storage):
        return root
    text, branch = branched.split_url(os.fspath(root))
    if branch is not None:  # ROOT#branch=NAME: the store as that branch sees it (storage/branched.py)
        return branched.open_branch(open_storage(text, options), branch)
    scheme, separator, _ = text.partition("://")
    if not separator:
        scheme = "file"
    elif scheme == "file":
        text = text.removeprefix("file://")
    backend = BACKENDS.get(scheme)
    if backend is None:
        known = ", ".join(f"{name}://" for name in sorted(BACKENDS) if name != "file")
        raise StorageError(f"unsupported store location {text!r}: use a local path or one of {known}")
    module_name, _, class_name = backend.partition(":")
    backend_class: type[Storage] = getattr(import_module(module_name), class_name)
    return backend_class(text, options)  # type: ignore[call-arg]
