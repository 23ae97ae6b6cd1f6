"""A warm ranged GET (what a lookup reads) through boto3 and through obstore, against moto on loopback.

    python benchmarks/bench_ranged_get.py --n 300

Both clients are warmed first (connection pool open, credentials resolved); each then
reads the same 200-byte range of one 1 MiB object ``--n`` times. Prints the median and
95th percentile per GET. moto's own per-request cost dominates on loopback, so the
difference between the clients is what matters, not the absolute figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))


def _timed(call: Callable[[], bytes], n: int) -> tuple[float, float]:
    for _ in range(20):
        call()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.95 * (n - 1))] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    from litstore.storage.objectstore import ObjectStorage
    from litstore.storage.s3 import S3Storage

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        on_boto3 = S3Storage("s3://bench/store", {"endpoint_url": endpoint})
        on_obstore = ObjectStorage(
            "s3://bench/store",
            {
                "endpoint": endpoint,
                "allow_http": True,
                "region": "us-east-1",
                "access_key_id": "bench",
                "secret_access_key": "bench",
            },
        )
        on_boto3.write("chunk.bin", os.urandom(1 << 20))
        for name, storage in (("boto3", on_boto3), ("obstore", on_obstore)):
            median, p95 = _timed(lambda storage=storage: storage.read_range("chunk.bin", 500_000, 500_200), args.n)
            print(f"{name:8s} warm ranged GET: median {median:.2f} ms, p95 {p95:.2f} ms ({args.n} GETs)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
