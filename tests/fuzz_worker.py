"""The child process of ``tests/store/test_fuzzed_stores.py``: reads damaged stores, reports what each read did.

Run as ``python -m tests.fuzz_worker``. It reads one JSON request per line on stdin
(``root``, ``views``, ``keys``, ``versions``, ``tags``, ``diffs``) and answers one JSON
line on the file descriptor named by ``$FUZZ_REPLY_FD`` (stdout is left to whatever
litdata prints). The answer lists, for each operation, either what it read (for reads
of records, ``repr(key)`` and the hex content hash of the record's canonical encoding,
None where a lookup found no record; for ``in``, each key's answer; for a diff, each
key's change and split) or the error's class names (MRO) and message. A crash or a
hang shows in the parent as a missing answer: that is why these reads run in a child
at all.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import litstore
from litstore.format import codec, hashing

Reading = tuple[int, list[tuple[Any, Any]]]  # (version the view claims, (key, record) pairs)


def digest(record: Any) -> str:
    """The hex content hash of ``record``'s canonical encoding (what the manifest commits to)."""
    try:
        return hashing.content_hash(codec.encode(record)).hex()
    except litstore.LitstoreError as exc:
        return f"unencodable: {exc}"


def _digest_or_none(record: Any) -> str | None:
    return None if record is None else digest(record)


def _view(root: str, ref: int | str | None) -> litstore.Snapshot:
    store = litstore.open(root)
    return store.head() if ref is None else store.at(ref)


def _lookups(root: str, ref: int | str | None, keys: list[str]) -> Reading:
    """Each key's record, or None for a key the view says it does not hold."""
    view = _view(root, ref)
    found: list[tuple[Any, Any]] = []
    for key in keys:
        try:
            found.append((key, view[key]))
        except litstore.KeyNotFoundError:
            found.append((key, None))
    return view.version.number, found


def _get_many(root: str, ref: int | str | None, keys: list[str]) -> Reading:
    view = _view(root, ref)
    records = view.get_many(keys, default=None)
    return view.version.number, [(key, record) for key, record in zip(keys, records, strict=True) if record is not None]


def _contains(root: str, ref: int | str | None, keys: list[str]) -> Reading:
    view = _view(root, ref)
    return view.version.number, [(key, key in view) for key in keys]


def changes(diff: litstore.Diff) -> list[tuple[Any, str]]:
    """``(key, "<change> <split>")`` of every key ``diff`` lists (``change``: added, removed or changed)."""
    return [
        (key, f"{kind} {split}")
        for kind, table in (("added", diff.added), ("removed", diff.removed), ("changed", diff.changed))
        for key, split in zip(table.column("key").to_pylist(), table.column("split").to_pylist(), strict=True)
    ]


def _diff(root: str, old: int, new: int) -> Reading:
    diff = litstore.open(root).diff(old, new)
    return diff.new, changes(diff)


def _items(root: str, ref: int | str | None) -> Reading:
    view = _view(root, ref)
    return view.version.number, list(view.items())


def _dataset(root: str, ref: int | str | None, views: str) -> Reading:
    view = _view(root, ref)
    records = list(view.dataset(verify_records=True, views_dir=views))
    key = view.config.key
    return view.version.number, [(record.get(key) if isinstance(record, dict) else None, record) for record in records]


def _verify(root: str, ref: int | str | None) -> Reading:
    view = _view(root, ref)
    view.verify()  # a failing report is a correct answer; only exceptions matter here
    return view.version.number, []


def _versions(root: str) -> Reading:
    store = litstore.open(root)
    store.versions()
    return store.version.number, []


def _attempt(
    name: str, ref: int | str | list[int] | None, step: Callable[[], Reading], show: Callable[[Any], Any] = digest
) -> dict[str, Any]:
    outcome: dict[str, Any] = {"op": name, "ref": ref}
    try:
        claimed, pairs = step()
    # The worker's whole job is to report every failure, of whatever type, to the test.
    except Exception as exc:  # noqa: BLE001
        outcome["error"] = [f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__]
        outcome["message"] = str(exc)[:500]
        if not isinstance(exc, litstore.LitstoreError):
            outcome["traceback"] = traceback.format_exc()
    else:
        outcome["claimed"] = claimed
        outcome["records"] = [[repr(key), show(record)] for key, record in pairs]
    return outcome


def exercise(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every read the fuzz test checks, on the store at ``request["root"]``."""
    root, keys, views = request["root"], request["keys"], request["views"]
    refs: Iterable[int | str | None] = [None, *request["versions"], *request["tags"]]
    outcomes = [_attempt("open", None, lambda: (litstore.open(root).version.number, []))]
    outcomes.append(_attempt("versions", None, lambda: _versions(root)))
    for ref in refs:
        outcomes.append(_attempt("lookup", ref, partial(_lookups, root, ref, keys), show=_digest_or_none))
        outcomes.append(_attempt("get_many", ref, partial(_get_many, root, ref, keys)))
        outcomes.append(_attempt("in", ref, partial(_contains, root, ref, keys), show=bool))
        outcomes.append(_attempt("items", ref, partial(_items, root, ref)))
        outcomes.append(_attempt("verify", ref, partial(_verify, root, ref)))
        outcomes.append(_attempt("dataset", ref, partial(_dataset, root, ref, views)))
    for old, new in request["diffs"]:
        outcomes.append(_attempt("diff", [old, new], partial(_diff, root, old, new), show=str))
    return outcomes


def main() -> None:
    reply = os.fdopen(int(os.environ["FUZZ_REPLY_FD"]), "w", encoding="utf-8")
    for line in sys.stdin:
        reply.write(json.dumps(exercise(json.loads(line))) + "\n")
        reply.flush()


if __name__ == "__main__":
    main()
