"""Checking stored records against their committed content hashes, then decoding them: every reader's one path.

Every read of records (``snapshot[key]``, ``get_many``, ``items``, streaming block by
block or item by item, Ray's read tasks) hands the stored bytes of records of one
chunk, with the content hashes their version committed for them, to a
:class:`RecordCheck`, and gets back the decoded records or one
:class:`~litstore.errors.DamagedRecordError`. Its message has one format wherever it
is raised: the keys (where known), the version, the chunk and the rows, and that
``store.verify()`` lists every damaged record. Two kinds of damage are told apart:

- bytes that do not match their committed content hash (the chunk changed after the
  commit): found by :func:`mismatched`, one xxh3-128 hash per record and one
  byte-string comparison per batch;
- bytes that match it yet are not one canonical record each (a damaged or hostile
  writer committed them so): found when the batch does not decode, then looked for
  payload by payload to name the first.

A batch is decoded in one MessagePack pass (:func:`~litstore.format.codec.decode_each`,
or :func:`~litstore.format.codec.decode_framed` for a block of a mapped chunk), so the
check adds no Python code per record; the culprits are looked for only on failure.
:mod:`litstore.ops.verify` looks for every damage instead of stopping at the first,
and reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from litstore.errors import DamagedRecordError, IntegrityError, describe
from litstore.format import codec, hashing

#: The keys of the records at some rows of a chunk, in the order of the rows (``None`` where not known).
KeyLookup = Callable[[str, np.ndarray], Sequence[Any]]

_VERIFY = "store.verify() lists every damaged record"
_PAYLOAD = "the payload"  # how a decode error names the one payload it decoded


def mismatched(payloads: Sequence[bytes | memoryview], expected: np.ndarray) -> np.ndarray:
    """Positions of the ``payloads`` whose content hash is not the ``(n, 16)`` ``expected`` row."""
    found = hashing.content_hash_rows(payloads)
    if found.shape == expected.shape and found.tobytes() == expected.tobytes():
        return _NONE  # the common case: one comparison; the culprits are looked for only on failure
    return np.flatnonzero((found != expected).any(axis=1))


_NONE = np.empty(0, dtype=np.intp)
_NONE.flags.writeable = False


def asked_keys(keys: Sequence[Any], hits: np.ndarray) -> Callable[[np.ndarray], list[Any]]:
    """For :meth:`RecordCheck.records`' ``keys``: the keys asked for at positions of a batch whose records are
    those of ``keys[hits]`` (called only to name damaged ones)."""
    return lambda positions: [keys[i] for i in hits[positions].tolist()]


class RecordCheck:
    """Checks and decodes the records of one version, and names damaged ones; see the module docstring.

    Args:
        version: the version's number, named in errors (``None``: not known).
        lookup: the keys of the records at rows of a chunk, called only to name damaged
            records whose keys the caller did not give (``None``: they are named by
            chunk and row alone).
    """

    __slots__ = ("_lookup", "version")

    def __init__(self, version: int | None, lookup: KeyLookup | None = None) -> None:
        self.version = version
        self._lookup = lookup

    def __repr__(self) -> str:
        return f"<RecordCheck version {self.version}>"

    def records(
        self,
        chunk: str,
        rows: np.ndarray,
        payloads: Sequence[bytes | memoryview],
        expected: np.ndarray | None,
        keys: Callable[[np.ndarray], Sequence[Any]] | None = None,
    ) -> list[Any]:
        """The records ``payloads`` (items ``rows`` of ``chunk``) encode, in order, each checked first.

        Args:
            expected: the committed content hashes of the payloads, an ``(n, 16)`` uint8
                array in the same order; ``None`` decodes them unchecked.
            keys: the keys the caller asked for at positions of ``payloads``, called only
                to name damaged records (default: the ``lookup``).

        Raises:
            DamagedRecordError: a payload does not match its content hash (every one that
                does not is named), or one is not a canonical record (the first is named).
        """
        if expected is not None:
            damaged = mismatched(payloads, expected)
            if len(damaged):
                raise self.mismatch(chunk, rows[damaged], None if keys is None else keys(damaged))
        try:
            return codec.decode_each(payloads, f"chunk {chunk}")
        except IntegrityError as exc:
            raise self._first_malformed(chunk, rows, payloads, keys, checked=expected is not None) from exc

    def record(
        self, chunk: str, row: int, payload: bytes | memoryview, expected: bytes | memoryview | None, key: Any = None
    ) -> Any:
        """:meth:`records` for one payload (``expected``: its 16-byte content hash; ``key``: its key, if known)."""
        if expected is not None and hashing.content_hash(payload) != expected:
            raise self.mismatch(chunk, np.array([row]), None if key is None else [key])
        try:
            return codec.decode(payload, _PAYLOAD)
        except IntegrityError as exc:
            raise self.malformed(chunk, row, str(exc), key, checked=expected is not None) from exc

    def keyed(
        self, chunk: str, rows: Sequence[int], records: Sequence[Any], keys: Sequence[Any], key_field: str, by: str
    ) -> None:
        """Check that each of ``records`` (items ``rows`` of ``chunk``, checked and decoded) is a record holding
        the key it was read for, ``keys``: a place that ``by`` (the key index, the manifest) gives a key, pointing
        at another key's record, content hash and all, never passes as that key's record.

        Raises:
            DamagedRecordError: one is not a record (a dict).
            IntegrityError: one has no ``key_field`` (the config names another field), or holds another key.
        """
        for row, record, key in zip(rows, records, keys, strict=True):
            if not isinstance(record, dict):
                raise self.malformed(chunk, row, f"a {type(record).__name__}, not a record (a dict)", key)
            if key_field not in record:
                raise IntegrityError(
                    f"the record at chunk {chunk}, row {row}{self._of_version()} has no field {key_field!r}, which "
                    "the store's config names as its key: the config or the record is damaged"
                )
            if record[key_field] != key:
                raise IntegrityError(
                    f"{by}{self._of_version()} points key {key!r} at chunk {chunk}, row {row}, which holds another "
                    "record: it is damaged; store.verify() checks the version"
                )

    def mismatch(self, chunk: str, rows: np.ndarray, keys: Sequence[Any] | None = None) -> DamagedRecordError:
        """The error for the records at ``rows`` of ``chunk`` whose bytes do not match their committed content hash."""
        keys = self._keys(chunk, rows, keys)
        places = f"row {rows[0]}" if len(rows) == 1 else f"rows {describe(rows.tolist())}"
        named = f"keys {describe(keys)}; " if any(key is not None for key in keys) else ""
        return DamagedRecordError(
            f"{len(rows)} record(s){self._of_version()} do not match their committed content hash "
            f"({named}chunk {chunk}, {places}): the chunk is damaged; {_VERIFY}",
            self.version,
            chunk,
            rows.tolist(),
            keys,
        )

    def malformed(
        self, chunk: str, row: int, reason: str, key: Any = None, *, checked: bool = True
    ) -> DamagedRecordError:
        """The error for the record at ``row`` of ``chunk``, which is not one canonical record (``reason`` says how).

        ``checked``: its bytes were found to match their committed content hash (else
        they were read unchecked, and may have been damaged after the commit).
        """
        (key,) = self._keys(chunk, np.array([row]), None if key is None else [key])
        named = "" if key is None else f" of key {key!r}"
        matching = " matches its committed content hash but" if checked else ", read without its content hash check,"
        cause = "a damaged or hostile writer committed it" if checked else "the chunk may be damaged"
        return DamagedRecordError(
            f"the record{named} ({self._where()}chunk {chunk}, row {row}){matching} is not one canonical record "
            f"({reason}): {cause}; {_VERIFY}",
            self.version,
            chunk,
            [row],
            [key],
        )

    def _first_malformed(
        self,
        chunk: str,
        rows: np.ndarray,
        payloads: Sequence[bytes | memoryview],
        keys: Callable[[np.ndarray], Sequence[Any]] | None,
        checked: bool,
    ) -> IntegrityError:
        """The error naming the first of ``payloads`` that is not one canonical record alone."""
        for position, payload in enumerate(payloads):
            try:
                codec.decode(payload, _PAYLOAD)
            except IntegrityError as exc:
                key = None if keys is None else keys(np.array([position]))[0]
                return self.malformed(chunk, int(rows[position]), str(exc), key, checked=checked)
        return IntegrityError(f"records of chunk {chunk} do not decode together, yet each decodes alone")

    def _keys(self, chunk: str, rows: np.ndarray, keys: Sequence[Any] | None) -> list[Any]:
        if keys is not None:
            return list(keys)
        if self._lookup is not None:
            return list(self._lookup(chunk, rows))
        return [None] * len(rows)

    def _of_version(self) -> str:
        return "" if self.version is None else f" of version {self.version}"

    def _where(self) -> str:
        return "" if self.version is None else f"version {self.version}; "
