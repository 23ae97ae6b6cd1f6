"""``verify`` in memory that does not grow with the store: the manifest and the chunks compared by sums.

:func:`litstore.ops.verify.verify` matches every manifest row with the item at its
place, holding ~42 bytes a record (4.2 GB at 100M small records) to name what
disagrees. Where the version has key runs, :func:`check` first proves that nothing
does, holding nothing per record:

- each live manifest row's place (chunk and row), pair hash (key and content) and
  split is summed as the manifest streams in (:func:`~litstore.ops.verify_listed.place_words`,
  a seeded :class:`~litstore.ops.verify_listed.IndexDigest` drawn for this check), and
  the same of every live item as each chunk is read, with the split that lists its
  chunk: the two sums agree (but for a chance of about 2**-128) exactly when the rows
  and the live items are the same set, so every row's item is there and holds its key,
  content and split, and no live item is unlisted (a chunk listed twice counts its
  items twice: the sums differ);
- the key runs are summed against the manifest as always (:mod:`litstore.ops.verify_index`),
  and the runs resolve each key once: a key the manifest lists twice makes those sums
  differ, so agreeing sums also mean no duplicate keys;
- each chunk's hashes sidecar is compared with its items' content hashes as they are
  read; deletion vectors must decode (dead items are neither summed nor listed);
- the counts and the fingerprints are what the commit record says;
- with expected keys, the rows' keyprints sum to the distinct expected keys' (the rows'
  keys being distinct, as above): the version holds exactly those keys.

When all of that holds the report is that of a sound version, and it is exact. When
anything does not (or cannot be told this way: a version without key runs, an expected
key not of the store's key type), :func:`check` returns ``None`` and ``verify`` runs the full match,
which names each problem at the old cost: a damaged store is read twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from litstore._litdata.index import ChunkInfo
from litstore.errors import IntegrityError
from litstore.format import hashing
from litstore.format.models import StoreConfig, Version
from litstore.ops import verify_deletions, verify_index, verify_listed, verify_stored
from litstore.ops.verify_listed import INDEX_MODULUS, IndexDigest, Names
from litstore.storage import Storage


def check(
    storage: Storage,
    config: StoreConfig,
    version: Version,
    chunks: dict[str, list[ChunkInfo]],
    progress: bool = False,
    num_workers: int = 0,
    expected_keys: list[Any] | None = None,
) -> tuple[int, int, int] | None:
    """Prove ``version`` sound by sums (see the module docstring), holding exactly ``expected_keys`` if given:
    ``(records, chunks, data fingerprint)``; ``None`` where it is not, or the sums cannot tell (then run the
    full match).

    Raises:
        IntegrityError: a manifest file or the commit record is damaged.
    """
    digest = verify_index.index_digest(config, version)
    if digest is None:
        return None
    places = IndexDigest()
    expected: tuple[int, int] | None = None
    if expected_keys is not None:
        expected = _expected_sum(config, expected_keys, places)
        if expected is None:
            return None
    names = Names()
    listings = [(split, chunk) for split in sorted(chunks) for chunk in chunks[split]]
    listing_chunks = [names.chunk(chunk.filename) for _, chunk in listings]
    listing_splits = [names.split(split) for split, _ in listings]
    listed_chunks = [chunk for _, chunk in listings]
    dead_rows = verify_deletions.DeadRows(storage, version, listings)
    sidecars = _Sidecars(storage, listings)
    found_counts: dict[str, int] = {}
    records = data_fingerprint = place_sum = 0
    with contextlib.ExitStack() as stack:
        thread = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="litstore-verify"))
        read: Iterator[verify_stored.StoredPart]
        if num_workers:
            pool = stack.enter_context(verify_stored.worker_pool(num_workers))
            reading = pool.submit(verify_listed.read_listed_and_names, storage, config, version, names, digest, places)
            read = verify_stored.read_in_workers(storage, listed_chunks, config.key, config.key_type, pool)
        else:  # a thread sums the key runs, then reads chunks, while the manifest streams in here
            summed = verify_index.sum_key_runs(storage, version, names, digest, thread)
            chunks_read = verify_stored.read_in_thread(storage, listed_chunks, config.key, config.key_type, thread)
            read = stack.enter_context(contextlib.closing(chunks_read))
            listed = verify_listed.read_listed(storage, config, version, names, digest=digest, places=places)
        bar = stack.enter_context(tqdm(total=len(listings), desc="verifying", unit="chunk", disable=not progress))
        for stored in read:
            part = stored.part
            if part.stop is None:
                bar.update()
            if not stored.found or stored.problems or stored.items < 0:
                return None  # a chunk missing or damaged: named by the full match
            start = min(part.start, stored.items)
            dead = dead_rows.mask(part.listing, start, len(stored.pairs))
            if dead is None:
                return None
            live = ~dead
            if not stored.keyed[live].all() or not sidecars.agree(part.listing, start, stored.contents):
                return None
            at = np.arange(len(live), dtype=np.uint64) if live.all() else np.flatnonzero(live).astype(np.uint64)
            pairs = stored.pairs if len(at) == len(live) else stored.pairs[at]
            location = (np.uint64(listing_chunks[part.listing]) << np.uint64(32)) | (at + np.uint64(start))
            split = np.full(len(at), listing_splits[part.listing], np.uint16)
            place_sum += places.sum_words(verify_listed.place_words(location, pairs, split))
            records += len(at)
            name = listings[part.listing][0]
            found_counts[name] = found_counts.get(name, 0) + len(at)
            data_fingerprint += hashing.digest_sum(pairs)
        if num_workers:  # the runs are summed once the chunks the manifest names have their numbers
            listed, names = reading.result()
            summed = verify_index.sum_key_runs(storage, version, names, digest)
    dead_rows.finish()
    problems, entries_sum = summed.result()
    sound = (
        not dead_rows.problems
        and not problems
        and entries_sum == listed.index_sum
        and place_sum % INDEX_MODULUS == listed.place_sum
        and records == len(listed)
        and all(found_counts.get(name, 0) == count for name, count in version.counts.items())
        and sum(found_counts.values()) == sum(version.counts.values())
        and hashing.fingerprint_hex(data_fingerprint)
        == hashing.fingerprint_hex(listed.fingerprint)
        == version.fingerprint
        and (expected is None or expected == (listed.key_sum, len(listed)))
    )
    return (records, len(listings), data_fingerprint) if sound else None


def _expected_sum(config: StoreConfig, keys: list[Any], places: IndexDigest) -> tuple[int, int] | None:
    """The key sum and count of the distinct ``keys``, as a version holding exactly them sums its rows' keys;
    ``None`` if one is not of the store's key type (the full match names it)."""
    if not all(hashing.is_key(key, config.key_type) for key in keys):
        return None
    key_type = pa.string() if config.key_type == "str" else pa.int64()
    wanted = pc.unique(pa.array(keys, key_type))
    words = np.ascontiguousarray(hashing.keyprint_rows(wanted)).view(np.uint64).reshape(-1, 2)
    return places.sum_words((words[:, 0].copy(), words[:, 1].copy())) % INDEX_MODULUS, len(wanted)


class _Sidecars:
    """Each listed chunk's hashes sidecar, compared with its items' content hashes as they are read."""

    def __init__(self, storage: Storage, listings: list[tuple[str, ChunkInfo]]) -> None:
        self._storage = storage
        self._listings = listings
        self._present: dict[str, set[str]] = {}
        self._current: tuple[int, np.ndarray | None] | None = None

    def agree(self, listing: int, start: int, contents: np.ndarray) -> bool:
        """Whether the sidecar of listing ``listing``'s chunk holds ``contents`` (the items from ``start``); a
        chunk without one agrees (readers check it against the manifest), one that does not parse does not."""
        if self._current is None or self._current[0] != listing:
            try:
                words = verify_index.sidecar_words(self._storage, self._present, self._listings[listing][1])
                self._current = (listing, words)
            except IntegrityError:
                return False
        words = self._current[1]
        if words is None:
            return True
        held = words[start : start + len(contents)]
        computed = np.ascontiguousarray(contents).view(np.uint64).reshape(-1, 2)
        return len(held) == len(computed) and bool((held == computed).all())
