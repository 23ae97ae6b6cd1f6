"""A real Azure Blob Storage endpoint on loopback for the Azure tests: Azurite, started once a session.

``azurite_options`` (session-scoped) starts ``azurite-blob`` (installed by ``.ci/run``
under ``.azurite/``; else found on ``PATH``; the tests skip where it is neither) on
127.0.0.1 and a free port, with its data in a temporary directory, and yields the
``storage_options`` that reach it: Azurite's well-known development account and key.
``azure_container`` creates one fresh container per test (a signed REST call: obstore
cannot create containers).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import free_port, wait_listening

ACCOUNT = "devstoreaccount1"
#: Azurite's published development key (not a secret).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_INSTALLED = Path(__file__).parents[1] / ".azurite" / "node_modules" / ".bin" / "azurite-blob"
_containers = itertools.count()


def _command() -> str | None:
    return str(_INSTALLED) if _INSTALLED.exists() else shutil.which("azurite-blob")


@pytest.fixture(scope="session")
def azurite_options() -> Iterator[dict[str, Any]]:
    """``storage_options`` for Azurite on loopback (skips the test where Azurite is not installed)."""
    command = _command()
    if command is None:
        pytest.skip("azurite-blob is not installed (.ci/run installs it: npm install --prefix .azurite azurite)")
    port = free_port()
    data = tempfile.mkdtemp(prefix="litstore-azurite-")
    arguments = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", data, "--silent"]
    server = subprocess.Popen([command, *arguments, "--skipApiVersionCheck"], stdout=subprocess.DEVNULL)
    try:
        wait_listening(server, port, "Azurite", 60)
        yield {
            "account_name": ACCOUNT,
            "access_key": KEY,
            "endpoint": f"http://127.0.0.1:{port}/{ACCOUNT}",
            "allow_http": True,
        }
    finally:
        server.terminate()  # Azurite waits for idle keep-alive connections to close: then kill it
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def azure_container(azurite_options: dict[str, Any]) -> str:
    """A new, empty container on the Azurite server; its name."""
    name = f"litstore-test-{next(_containers)}"
    date, version = formatdate(usegmt=True), "2021-08-06"
    headers = {"x-ms-date": date, "x-ms-version": version}
    signed = "PUT\n" + "\n" * 11 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    signed += f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
    signature = base64.b64encode(hmac.new(base64.b64decode(KEY), signed.encode(), hashlib.sha256).digest()).decode()
    request = urllib.request.Request(
        f"{azurite_options['endpoint']}/{name}?restype=container",
        method="PUT",
        headers={**headers, "Authorization": f"SharedKey {ACCOUNT}:{signature}", "Content-Length": "0"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
    return name
