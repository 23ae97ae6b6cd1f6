"""Test helpers shipped with litstore, for litstore's own tests and for anyone writing a backend.

:class:`StorageTests` is the conformance suite of the :class:`~litstore.storage.base.Storage`
contract: a new backend's test module subclasses it and provides a ``storage`` fixture.
Importing this package imports pytest, so only tests should import it.
"""

from litstore.testing.storage import UNSAFE_PATHS, StorageTests

__all__ = ["UNSAFE_PATHS", "StorageTests"]
