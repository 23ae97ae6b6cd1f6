"""The commit protocol, public so that any engine can drive it.

Writing a version is two steps, which may run in different places:

1. **stage**: validate and encode records (:func:`prepare`) and write them into a new
   fragment (:func:`stage`), getting a small, picklable :class:`StagedFragment`. Any
   number of processes or machines may stage at once; nothing is visible yet.
2. **commit**: publish a change (:mod:`.change`: :class:`Write` of any number of
   staged fragments, :class:`Delete`, :class:`Compaction`, :class:`FieldAddition`,
   :class:`Upgrade`) as
   one version (:func:`commit`): plan it against the newest version, copy-on-write
   the chunks that lose rows, and create the commit record with put-if-absent,
   rebasing over other writers or raising :class:`~litstore.errors.ConflictError`.

``Store.append``, ``upsert`` and ``delete`` are thin callers of these; so are
``litstore.ray`` and ``Store.ingest``. A fragment that is never committed is removed
by ``gc`` after its grace period, or at once by :func:`discard`.

Modules: :mod:`.records` (input validation), :mod:`.stage`, :mod:`.change` (what a
commit does, as values), :mod:`.plan`, :mod:`.commit`, :mod:`.race` (the commit record
and catching up), :mod:`.leases` (what keeps gc off staged fragments), :mod:`.fields`,
:mod:`.claims`, :mod:`.keyruns` (the key index on disk), :mod:`.upgrade` (format 2 to 3).
The version log they read is :mod:`litstore.read.log`.
"""

from litstore.txn.change import Change, Compaction, Delete, FieldAddition, Merge, Upgrade, Write
from litstore.txn.commit import commit
from litstore.txn.plan import Plan, plan, refuse_existing, without_unchanged
from litstore.txn.records import Batch, prepare, prepare_runs
from litstore.txn.stage import StagedFragment, discard, stage, write_chunk_hashes

__all__ = [
    "Batch",
    "Change",
    "Compaction",
    "Delete",
    "FieldAddition",
    "Merge",
    "Plan",
    "StagedFragment",
    "Upgrade",
    "Write",
    "commit",
    "discard",
    "plan",
    "prepare",
    "prepare_runs",
    "refuse_existing",
    "stage",
    "without_unchanged",
    "write_chunk_hashes",
]
