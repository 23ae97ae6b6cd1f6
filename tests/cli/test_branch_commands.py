"""``litstore branch`` (and ``branch --delete``), ``branches``, ``merge`` and ``restore``, run as the console
script runs them.

A branch made on the command line is read and written as ``ROOT#branch=NAME`` by every
command; a merge conflict exits 2 naming the keys, with nothing committed; ``restore``
commits the old version's records.
"""

from __future__ import annotations

from pathlib import Path

import litstore
from tests.cli.test_commands import cli, cli_json


def test_branch_merge_and_restore_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id")
    store.append([{"id": f"k{i}", "label": 0} for i in range(6)])
    made = cli_json("branch", root, "relabel")
    assert made == {"name": "relabel", "base": "main", "from_version": 1}
    side = f"{root}#branch=relabel"
    cli("update", side, "k1", "k2", "--set", "label=1")
    cli("delete", side, "k5")
    assert cli_json("get", side, "k1")["label"] == 1
    assert cli_json("branches", root) == [{"name": "relabel", "base": "main", "from_version": 1, "head": 3}]
    merged = cli_json("merge", root, "relabel")
    assert merged["committed"] and merged["number"] == 2
    assert store.refresh() == 2 and store["k2"]["label"] == 1 and "k5" not in store
    restored = cli_json("restore", root, "1")
    assert restored["committed"] and restored["number"] == 3
    assert dict(litstore.open(root).items()) == dict(store.at(1).items())
    # A conflict: both lines change k0 differently.
    cli("update", side, "k0", "--set", "label=7")
    cli("update", root, "k0", "--set", "label=8")
    result = cli("merge", root, "relabel", code=2)
    assert "k0" in result.stderr and "nothing was committed" in result.stderr
    assert litstore.open(root)["k0"]["label"] == 8


def test_branch_delete_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = litstore.Store.create(root, key="id")
    store.append([{"id": f"k{i}", "label": 0} for i in range(6)])
    cli("branch", root, "relabel")
    cli("update", f"{root}#branch=relabel", "k1", "--set", "label=1")
    assert cli_json("branch", root, "relabel", "--delete") == {"deleted": "relabel"}
    assert cli_json("branches", root) == []
    assert "no branch 'relabel'" in cli("branch", root, "relabel", "-d", code=3).stderr
    assert "main" in cli("branch", root, "main", "--delete", code=2).stderr
    assert "--at" in cli("branch", root, "x", "--delete", "--at", "1", code=2).stderr
    assert litstore.open(root)["k1"]["label"] == 0
