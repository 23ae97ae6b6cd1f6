"""Declaring more fields on a store: a version whose manifest gains typed columns.

:func:`commit_fields` (what ``txn.commit`` does with a
:class:`~litstore.txn.change.FieldAddition`) commits a version with the same records,
chunks, counts and fingerprint, whose manifest (written whole, as a checkpoint, so no
older delta is ever read with the new columns) carries the new columns and whose commit
record lists the full declared set. Older versions keep the fields they had. The
checkpoint is streamed: the head's manifest a row group at a time, each with its new
columns read from the records its rows name (checked against their content hashes),
so a field addition holds one row group at any size, as a commit's checkpoint does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litstore.errors import ConflictError, InvalidArgumentError
from litstore.format import fields as field_format
from litstore.format import layout
from litstore.format.models import Version, declared_fields
from litstore.txn.change import FieldAddition
from litstore.txn.checkpoint import write_extended_checkpoint
from litstore.txn.race import catch_up, commit_time, copy_indexes, put_commit_record

if TYPE_CHECKING:
    from litstore.read.version import VersionReader

_MAX_ATTEMPTS = 20


def commit_fields(
    head: VersionReader, addition: FieldAddition, message: str | None = None, metadata: dict[str, Any] | None = None
) -> VersionReader:
    """Commit a version of ``head``'s records whose manifest also carries the fields ``addition`` declares.

    Raises:
        InvalidArgumentError: a field is declared already.
        SchemaError: some records lack a valid value of a new field (the error names
            them); nothing was committed.
        ConflictError: other writers kept committing first.
    """
    new = dict(addition.fields)
    for _ in range(_MAX_ATTEMPTS):
        declared = declared_fields(head.config, head.version)
        again = field_format.already_declared(new, declared)
        if again:
            shown = {name: declared[name] for name in declared if name.lower() in {n.lower() for n in again}}
            raise InvalidArgumentError(f"fields {again} are declared already, ignoring case (as {shown})")
        every = {**declared, **new}
        version, written = _write(head, addition, every, message, metadata)
        # UncertainCommitError propagates with the files kept: the record may name them.
        if put_commit_record(head, version, written):
            return head.successor(version, head.chunks(), head.built_index)
        for path in written:
            head.storage.delete(path)
        head = catch_up(head)[0]
    raise ConflictError(f"gave up after {_MAX_ATTEMPTS} attempts to add fields; nothing was committed")


def _write(
    head: VersionReader,
    addition: FieldAddition,
    fields: dict[str, str],
    message: str | None,
    metadata: dict[str, Any] | None,
) -> tuple[Version, list[str]]:
    """The new version's files (checkpoint, split indexes as the parent's) and its commit record, not yet created.

    The checkpoint is streamed, the parent's manifest a row group at a time with the new
    columns read from the records it names: held is one row group, at any size.
    """
    parent = head.version
    number = parent.number + 1
    transaction = layout.new_transaction()
    written: list[str] = []
    checkpoint = layout.manifest_checkpoint(number, transaction)
    write_extended_checkpoint(head, checkpoint, dict(addition.fields), addition.plan(head))
    written.append(checkpoint)
    indexes = copy_indexes(head, number, transaction)
    written.extend(indexes.values())
    version = Version(
        number=number,
        parent=parent.number,
        operation="add_fields",
        created_at=commit_time(parent),
        counts=dict(parent.counts),
        fingerprint=parent.fingerprint,
        transaction=transaction,
        checkpoint=checkpoint,
        pending_rows=0,
        indexes=indexes,
        message=message,
        metadata=metadata or {},
        fields=fields,
        key_runs=parent.key_runs,  # the same records in the same places
        deletions=head.deletions.refs,  # the same rows dead (listed in full: format 6's by delta are composed)
    )
    return version, written
