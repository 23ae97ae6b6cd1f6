"""Compaction racing a writer: whichever commits first, the other rebases and no write is lost.

Two handles on one store: one is left behind at the version both started from while
the other commits, then the one behind commits and loses the race for the version
number. A compaction behind an upsert or delete (format 4: the rival marks the rows
dead and leaves the chunk listed) must not move the rows it found live back into
place: that brought the replaced record back, or the deleted one (the rebase now plans
again when a rival marked rows dead in a chunk the compaction drops).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import litstore
from litstore.format import codec, hashing

Record = dict[str, Any]


def _record(i: int, rev: int = 0) -> Record:
    return {"id": f"k{i}", "rev": rev, "blob": bytes([i]) * 40}


def _fingerprint(model: dict[str, Record]) -> str:
    contents = [hashing.content_hash(codec.encode(record)) for record in model.values()]
    return hashing.fingerprint_hex(hashing.fingerprint_sum(list(model), contents))


def _write(store: litstore.Store, rival: str) -> None:
    if rival == "upsert":
        store.upsert([_record(0, rev=1), _record(3, rev=1)])
    else:
        store.delete(["k0", "k3"])


@pytest.mark.parametrize("format_version", [3, 4])
@pytest.mark.parametrize("rival", ["upsert", "delete"])
@pytest.mark.parametrize("behind", ["compaction", "writer"])
def test_compaction_and_a_writer_both_land_in_either_order(
    make_store: Callable[..., litstore.Store], format_version: int, rival: str, behind: str
) -> None:
    store = make_store(key="id", chunk_bytes=2048, format_version=format_version)
    for start in (0, 2, 4):  # three small chunks, each under half of chunk_bytes: all compacted
        store.append([_record(start), _record(start + 1)])
    other = litstore.open(store.root)
    if behind == "compaction":
        _write(other, rival)
        compacted = store.compact()
    else:
        compacted = other.compact()
        _write(store, rival)
    assert compacted.operation == "compact"
    model = {f"k{i}": _record(i) for i in range(6)}
    if rival == "upsert":
        model.update({"k0": _record(0, rev=1), "k3": _record(3, rev=1)})
    else:
        del model["k0"], model["k3"]
    fresh = litstore.open(store.root)
    assert fresh.version.number == 5
    assert dict(fresh.items()) == model
    assert fresh.get_many(sorted(model)) == [model[key] for key in sorted(model)]
    assert fresh.version.fingerprint == _fingerprint(model)
    assert "k0" not in fresh if rival == "delete" else fresh["k0"] == _record(0, rev=1)
