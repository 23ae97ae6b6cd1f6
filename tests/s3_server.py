"""A real S3 endpoint on loopback for the S3 tests: moto's server, in a thread of the test process.

``s3_endpoint`` (session-scoped) starts ``ThreadedMotoServer`` on 127.0.0.1 and an
ephemeral port, points boto3 at fake credentials through the environment (so
spawned child processes and litdata's chunk downloads see them too) and yields the
endpoint URL. ``s3_bucket`` creates one fresh bucket per test, so tests never see
each other's objects.

Everything goes over HTTP to the server, exactly as it would to S3: nothing in
litstore or boto3 is mocked in-process.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest

if TYPE_CHECKING:
    from moto.s3.responses import S3Response

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "litstore-test",
    "AWS_SECRET_ACCESS_KEY": "litstore-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}

_bucket_numbers = itertools.count()


def _atomic_conditional_put(put_object: Callable[..., Any]) -> Callable[..., Any]:
    """moto checks ``If-None-Match: *`` and then stores the object as two separate steps.

    Its threaded server can interleave two requests between those steps, so both
    conditional PUTs of one key "succeed" (real S3 never allows that). litstore's
    commit relies on S3's guarantee, so the test server provides it: object PUTs are
    serialized, which makes check-and-store one atomic step, as on S3.
    """
    lock = threading.Lock()

    @functools.wraps(put_object)
    def locked(self: S3Response) -> Any:
        with lock:
            return put_object(self)

    return locked


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server on loopback, with fake credentials in the environment."""
    # Imported here: a run without S3 tests (the fast loop) need not import moto.
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAKE_CREDENTIALS.items():
            patch.setenv(name, value)
        # Never read a developer's real AWS configuration or credentials.
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent/litstore-test-aws-config")
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/litstore-test-aws-credentials")
        patch.delenv("AWS_PROFILE", raising=False)
        patch.delenv("AWS_SESSION_TOKEN", raising=False)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        patch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        patch.setattr(S3Response, "put_object", _atomic_conditional_put(S3Response.put_object))
        # werkzeug logs one line per request at INFO; keep the test output readable.
        patch.setattr(logging.getLogger("werkzeug"), "level", logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A new, empty bucket on the test server; its name."""
    name = f"litstore-test-{next(_bucket_numbers)}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name
