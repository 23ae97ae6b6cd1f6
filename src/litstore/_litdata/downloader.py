"""litdata's chunk downloads: plain-http S3 endpoints, and telling a download's fault from a damaged chunk.

litdata builds its obstore client with fixed client options, which override
obstore's ``AWS_ALLOW_HTTP`` setting, so it refuses ``http://`` endpoints. This
module registers, through litdata's public ``register_downloader``, a subclass of its
S3 downloader that only adds ``allow_http``. It overrides ``S3Downloader._get_store``,
a private litdata method: re-check it when the litdata pin moves.

litdata downloads chunks in a prefetch thread and re-raises its failure as a
``RuntimeError`` chained to the original; :func:`download_fault` finds the storage
client's error in that chain, so streaming can report a network fault as one.
"""

from __future__ import annotations

import socket
from typing import Any, cast

from litdata.streaming.downloader import (
    _OBSTORE_CLIENT_OPTIONS,
    S3Downloader,
    _cached_obstore_store,
    _obstore_credential_provider,
    register_downloader,
)


class _PlainHttpS3Downloader(S3Downloader):
    """litdata's S3 downloader, except that its obstore client may use plain http.

    Against an ``https://`` endpoint this class behaves exactly like litdata's.
    """

    def _get_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        def build() -> Any:
            meta = self._client.client.meta
            config: dict[str, Any] = {"endpoint": meta.endpoint_url, "virtual_hosted_style_request": False}
            if meta.region_name:
                config["region"] = meta.region_name
            return S3Store(
                bucket,
                config=config,  # type: ignore[arg-type]
                credential_provider=_obstore_credential_provider(self._client),
                client_options=cast(Any, {**_OBSTORE_CLIENT_OPTIONS, "allow_http": True}),
            )

        return _cached_obstore_store(self, build)


def allow_plain_http_s3() -> None:
    """Let litdata in this process download chunks from ``s3://`` over a plain-http endpoint."""
    register_downloader("s3://", _PlainHttpS3Downloader, overwrite=True)


#: Modules whose exceptions are a storage client's: the request failed, the bytes were never read.
_CLIENT_MODULES = ("obstore", "botocore", "boto3", "s3transfer", "urllib3", "requests", "google", "azure")


def download_fault(exc: BaseException) -> BaseException | None:
    """The storage client's error (a network or service fault) behind ``exc``, if there is one.

    Walks ``exc``'s chain of causes: an error raised by obstore, boto3 or another storage
    client, or a connection error or timeout, means a chunk could not be downloaded,
    not that the chunk is damaged.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        module = type(current).__module__.partition(".")[0]
        if module in _CLIENT_MODULES or isinstance(current, (ConnectionError, TimeoutError, socket.gaierror)):
            return current
        current = current.__cause__ or current.__context__
    return None
