"""``litstore gc`` keeps a leased staged fragment, and ``--break-leases`` removes it."""

from __future__ import annotations

from pathlib import Path

import litstore
from litstore.format import layout
from tests.cli.test_display import run


def test_gc_keeps_a_leased_fragment_unless_told_to_break_leases(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "s", key="id")
    store.append([{"id": "a"}])
    staged = store.stage([{"id": "b"}, {"id": "c"}])
    fragment = tmp_path / "s" / layout.fragment(staged.transaction)
    assert run("gc", tmp_path / "s", "--grace", "0s", "--yes").code == 0
    assert fragment.is_dir(), "its lease holds"
    dry = run("gc", tmp_path / "s", "--grace", "0s", "--break-leases")
    assert dry.code == 0 and staged.transaction in dry.stdout and fragment.is_dir()
    assert run("gc", tmp_path / "s", "--grace", "0s", "--break-leases", "--yes").code == 0
    assert not fragment.exists()
    assert litstore.open(tmp_path / "s").verify().ok
