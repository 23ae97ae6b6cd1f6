"""A writer that loses a race to records listed by delta (format 6) carries its listing over them."""

from __future__ import annotations

from pathlib import Path

import pytest

import litstore
from litstore.format import layout


def test_a_writer_that_lost_to_records_listed_by_delta_carries_its_listing_over_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 6: catching up applies the winners' records to the listing the loser holds, instead of composing
    the new head's listing again from its chain (up to ``checkpoint_interval`` record reads each lost race)."""
    loser = litstore.Store.create(tmp_path / "store", chunk_bytes=1024)
    for start in range(0, 300, 10):
        loser.append([{"id": f"k{i:03d}", "v": 0} for i in range(start, start + 10)])
    loser.upsert([{"id": "k000", "v": 1}])  # the loser now holds its head's listing
    winner = litstore.open(loser.root)
    winner.upsert([{"id": "k100", "v": 1}])
    winner.delete(["k200"])
    reads: dict[str, int] = {}
    real_read = type(loser.storage).read

    def read(self: object, path: str) -> bytes:
        if path.startswith(f"{layout.VERSIONS}/") and path.endswith(".json"):
            reads[path] = reads.get(path, 0) + 1
        return real_read(self, path)  # type: ignore[arg-type]

    monkeypatch.setattr(type(loser.storage), "read", read)
    loser.upsert([{"id": "k001", "v": 1}])

    assert loser.head().version.number == 34
    assert not any(layout.version_record(n) in reads for n in range(1, 31)), sorted(reads)
    monkeypatch.undo()
    expected = {f"k{i:03d}": 0 for i in range(300) if i != 200} | {"k000": 1, "k001": 1, "k100": 1}
    assert {key: record["v"] for key, record in litstore.open(loser.root).items()} == expected
