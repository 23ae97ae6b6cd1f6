"""Remote lookups: latency and bytes fetched per lookup on an S3 store.

Runs against a real S3 endpoint on loopback (moto's ThreadedMotoServer), so
latencies are those of a local HTTP round trip, not of a cloud region; the byte
counts are what matters: a lookup reads one chunk header once, then one ranged GET
of the record's bytes.

    python benchmarks/bench_remote.py --n 20000 --lookups 500
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import boto3
import numpy as np
from moto.server import ThreadedMotoServer

import litstore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="records (1 KiB payload each)")
    parser.add_argument("--lookups", type=int, default=500, help="timed lookups")
    args = parser.parse_args()

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}"}
        boto3.client("s3", **options).create_bucket(Bucket="bench")
        rng = np.random.default_rng(0)
        records = [{"id": f"id-{i:08d}", "label": i % 10, "payload": rng.bytes(1024)} for i in range(args.n)]
        url = "s3://bench/store"
        store = litstore.Store.create(url, key="id", storage_options=options)
        started = time.perf_counter()
        store.append(records)
        append_s = time.perf_counter() - started
        chunks = [chunk for listed in store.chunks().values() for chunk in listed]

        remote = litstore.open(url, storage_options=options)
        storage = remote.storage
        keys = [record["id"] for record in records]
        random.seed(0)
        before = storage.bytes_read
        started = time.perf_counter()
        remote[random.choice(keys)]
        first_ms = (time.perf_counter() - started) * 1e3
        first_bytes = storage.bytes_read - before - 0  # includes the manifest and key index load

        timings, fetched = [], []
        for key in random.sample(keys, args.lookups):
            before = storage.bytes_read
            started = time.perf_counter_ns()
            remote[key]
            timings.append((time.perf_counter_ns() - started) / 1e3)
            fetched.append(storage.bytes_read - before)
        timings.sort()

        batch = random.sample(keys, 1_000)
        before = storage.bytes_read
        started = time.perf_counter()
        remote.get_many(batch)
        many_s = time.perf_counter() - started
        many_bytes = storage.bytes_read - before
    finally:
        server.stop()

    chunk_mib = sum(chunk.num_bytes for chunk in chunks) / len(chunks) / 2**20
    print(f"S3 store on loopback moto: {args.n:,} records of ~1 KiB, {len(chunks)} chunk(s) of {chunk_mib:.1f} MiB")
    print(f"append: {append_s:.2f} s")
    print(f"first lookup after open (manifest, key index, chunk header): {first_ms:.1f} ms, {first_bytes:,} bytes")
    print(
        f"lookups, warm ({args.lookups}): p50 {statistics.median(timings):.0f} us, "
        f"p99 {timings[int(len(timings) * 0.99) - 1]:.0f} us, "
        f"bytes per lookup mean {statistics.mean(fetched):,.0f} (max {max(fetched):,})"
    )
    print(f"get_many of 1,000 keys: {many_s * 1e3:.0f} ms, {many_bytes / 1000:,.0f} bytes per key")
    print(f"for scale: litdata's reader fetches the whole chunk ({chunk_mib:.1f} MiB) to read one item of it")


if __name__ == "__main__":
    main()
