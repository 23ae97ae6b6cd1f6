"""audit(near=True) on many short texts: time and memory of the near-duplicate search.

    PYTHONPATH=src python benchmarks/bench_audit_near.py --records 100000

Plants one near copy (one word changed) for every 1,000 records, and reports the
seconds and peak traced memory of ``NearDuplicates`` (signatures and banding) alone and
of a whole ``store.audit(near=True)``, beside datasketch's own ``MinHashLSH`` holding
the same signatures (what it was measured against).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc

import numpy as np

import litstore
from litstore.ops import audit_near


def _texts(count: int) -> list[str]:
    rng = np.random.default_rng(1)
    words = np.array([f"w{i}" for i in range(5000)])
    texts = [" ".join(rng.choice(words, size=12)) for _ in range(count)]
    for i in range(0, count - 1, 1000):
        texts[i + 1] = texts[i].rsplit(" ", 1)[0] + " planted"
    return texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--store", action="store_true", help="also time a whole store.audit(near=True)")
    parser.add_argument("--memory", action="store_true", help="trace memory (tracemalloc slows Python ~10x)")
    args = parser.parse_args()
    texts = _texts(args.records)

    if args.memory:
        tracemalloc.start()
    start = time.perf_counter()
    finder = audit_near.NearDuplicates(0.8, 3)
    for row, text in enumerate(texts):
        finder.add(row, {"text": text})
    signed = time.perf_counter()
    pairs = list(finder.pairs())
    done = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(
        f"NearDuplicates: {args.records:,} texts, signatures {signed - start:.1f} s "
        f"({(signed - start) / args.records * 1e6:.0f} us each), banding {done - signed:.2f} s, "
        f"{len(pairs)} pairs, peak {peak / 2**20:.0f} MiB"
    )

    from datasketch import LeanMinHash, MinHashLSH  # the same scheme NearDuplicates signs with (affine32)

    if args.memory:
        tracemalloc.start()
    start = time.perf_counter()
    lsh = MinHashLSH(threshold=0.8, num_perm=audit_near.PERMUTATIONS)
    signatures = np.asarray(finder._texts.array())
    for row, signature in enumerate(signatures):
        lsh.insert(row, LeanMinHash(seed=1, hashvalues=signature.astype(np.uint64), scheme="affine32"))
    inserted = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"MinHashLSH insert of the same signatures: {inserted - start:.1f} s, peak {peak / 2**20:.0f} MiB")

    if args.store:
        with tempfile.TemporaryDirectory() as root:
            store = litstore.Store.create(f"{root}/s", key="id", key_type="int")
            store.append({"id": i, "text": text} for i, text in enumerate(texts))
            start = time.perf_counter()
            report = store.audit(near=True)
            print(f"store.audit(near=True): {time.perf_counter() - start:.1f} s, {report.near_group_count} near groups")


if __name__ == "__main__":
    main()
