"""The only package that touches litdata: its chunk layout, writer, index files, media and downloader.

- :mod:`.chunk`: the byte layout of a chunk file (numpy only; never imports litdata);
- :mod:`.index`: litdata ``index.json`` documents (json only);
- :mod:`.writer`: writing chunks with litdata's ``BinaryWriter``;
- :mod:`.media`: litdata media values inside records (:mod:`.formats`: which are decoded);
- :mod:`.folder`: reading a stranger's LitData-optimized folder without litdata's reader;
- :mod:`.downloader`: litdata's chunk downloads through a litstore backend (az://, gs://), and plain-http S3.

Importing this package imports none of them; litdata (and with it torch) is imported
only by the modules that need it, when first used. It installs the record codec's
media values (:func:`litstore.format.codec.install_media_codec`), which import
:mod:`.media` the first time a record holds one. When litdata changes, this
package changes, and ``tests/_litdata/test_litdata_facts.py`` says where.
"""

from __future__ import annotations

import sys
from typing import Any

from litstore.errors import UnsupportedValueError
from litstore.format import codec


def __getattr__(name: str) -> Any:
    """``LITDATA_VERSION``: the installed litdata's release (pinned in pyproject), read when first asked for.

    Reading it needs :mod:`importlib.metadata`, whose import alone took 40 ms of
    ``import litstore``.
    """
    if name == "LITDATA_VERSION":
        from importlib.metadata import version

        return version("litdata")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Media:
    """litdata's media values in records, through :mod:`.media`, imported on first use."""

    def encode(self, value: Any, path: str) -> tuple[str, bytes] | None:
        if not type(value).__module__.startswith("litdata"):
            return None  # media values are litdata's own types: telling so needs no import of litdata
        from litstore._litdata import media

        return media.encode_media(value, path) if media.is_media(value) else None

    def decode(self, data_format: str, data: bytes) -> Any:
        from litstore._litdata import media

        return media.decode_media(data_format, data)

    def check(self, data_format: str, path: str) -> None:
        from litstore._litdata import formats

        if formats.serializer_name(data_format) is None:
            raise UnsupportedValueError(
                path, data_format, f"media of format {data_format!r} are never decoded by litstore"
            )

    def fingerprint(self, value: Any) -> Any:
        if "litstore._litdata.media" not in sys.modules:
            return None  # nothing was decoded yet, so nothing is remembered
        from litstore._litdata import media

        return media.fingerprint(value)


codec.install_media_codec(_Media())
