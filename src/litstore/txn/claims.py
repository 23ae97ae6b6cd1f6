"""Turns for writers that keep losing: an advisory claim on the next commit.

Put-if-absent on the commit record decides every race, and a writer that loses
rebases and tries again. Under steady contention that is not fair: the writers that
win start their next commit at once, while the loser catches up and often re-plans,
so the same writer can lose again and again (measured: 2 commits against 150). A
writer that lost :data:`CLAIM_AFTER` races in a row therefore creates
``versions/turn.claim`` (put-if-absent, naming itself); every other writer, before
publishing, waits while a fresh claim by another writer stands (a few milliseconds
at a time, at most :data:`CLAIM_TTL`). The claimer removes it once it committed.
The claim names no version number: a winner is always a step ahead, so a claim on
"the next number" would always come too late.

Claims are advisory and only order writers: they never make or block a commit for
longer than their time to live, so a claimer that dies delays others by at most
:data:`CLAIM_TTL`; gc removes claims left behind. They cost one read per commit (a
missing file, locally a failed ``open``).
"""

from __future__ import annotations

import json
import math
import time

from litstore.errors import StorageError
from litstore.format import layout
from litstore.storage import Storage

#: Lost races in a row after which a writer claims the next version number.
CLAIM_AFTER = 2
#: Seconds a claim holds other writers back, at most.
CLAIM_TTL = 1.0
_POLL = 0.003


def claim(storage: Storage, owner: str) -> bool:
    """Claim the next commit for ``owner``; whether the claim is ours."""
    document = json.dumps({"owner": owner, "at": time.time()}).encode()
    if storage.put_if_absent(layout.TURN, document):
        return True
    holder = _holder(storage)
    if holder is None or (holder[0] != owner and time.time() - holder[1] > CLAIM_TTL):
        # Expired (its writer died or stalled) or damaged: take it over. Two writers doing
        # so at once may both delete and create it; reading it back leaves one holder.
        storage.delete(layout.TURN)
        storage.put_if_absent(layout.TURN, document)
        holder = _holder(storage)
    return holder is not None and holder[0] == owner


def release(storage: Storage, owner: str) -> None:
    """Remove ``owner``'s claim, if it still stands."""
    holder = _holder(storage)
    if holder is not None and holder[0] == owner:
        storage.delete(layout.TURN)


def wait_for_turn(storage: Storage, owner: str) -> None:
    """Return when no fresh claim by another writer stands."""
    deadline = time.monotonic() + CLAIM_TTL
    while time.monotonic() < deadline:
        holder = _holder(storage)
        if holder is None or holder[0] == owner or time.time() - holder[1] > CLAIM_TTL:
            return
        time.sleep(_POLL)


def _holder(storage: Storage) -> tuple[str, float] | None:
    """Who holds the claim and since when; ``None`` if nobody (a damaged claim orders nobody)."""
    try:
        found = json.loads(storage.read(layout.TURN))
        holder, at = str(found["owner"]), float(found["at"])
    except (StorageError, ValueError, KeyError, TypeError):
        return None
    # A time that is not a time, or one from the future, would hold writers back forever.
    return (holder, at) if math.isfinite(at) and at <= time.time() + CLAIM_TTL else None
