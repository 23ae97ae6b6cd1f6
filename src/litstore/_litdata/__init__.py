"""The only package that touches litdata: its chunk layout, writer, index files, media and downloader.

- :mod:`.chunk`: the byte layout of a chunk file (numpy only; never imports litdata);
- :mod:`.index`: litdata ``index.json`` documents (json only);
- :mod:`.writer`: writing chunks with litdata's ``BinaryWriter``;
- :mod:`.media`: litdata media values inside records;
- :mod:`.folder`: reading a stranger's LitData-optimized folder without litdata's reader;
- :mod:`.downloader`: plain-http S3 downloads for litdata's streaming.

Importing this package imports none of them; litdata (and with it torch) is imported
only by the modules that need it, when first used. When litdata changes, this
package changes, and ``tests/test_litdata_facts.py`` says where.
"""

from __future__ import annotations

from importlib.metadata import version

#: The litdata release litstore's chunk layout was checked against (pinned in pyproject).
LITDATA_VERSION: str = version("litdata")
