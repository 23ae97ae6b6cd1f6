"""Tags seen from a branch, through the public API.

A branch sees its own tags and those of the lines it starts from that name a version
of its history (as git's tags are seen from every branch); a base's tag of a version
made after the branch left it names a version the branch does not hold (numbers are
per line), so it is not listed and resolving it says where to read it. Creating and
deleting change the branch's own tags only; an own tag shadows a base's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import litstore
from litstore import TagError, VersionNotFoundError


def _records(keys: range, value: int) -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "value": value} for i in keys]


@pytest.fixture
def store(make_store: Callable[..., litstore.Store]) -> litstore.Store:
    """main: 1 (tag "first"), 2 (tag "release"); branch side from 2; main 3 (tag "after")."""
    store = make_store(key="id")
    store.append(_records(range(10), 0))
    store.tags.create("first", 1)
    store.upsert(_records(range(3), 1))
    store.tags.create("release")
    store.branches.create("side")
    store.upsert(_records(range(3), 2))
    store.tags.create("after")
    return store


def test_a_branch_sees_its_bases_tags_of_its_history(store: litstore.Store) -> None:
    side = litstore.open(store.root, branch="side")
    side.upsert(_records(range(5), 9))  # side's version 3: not main's 3
    assert dict(side.tags) == {"first": 1, "release": 2}
    assert side.at("release")["k001"]["value"] == 1 and side.at("first")["k001"]["value"] == 0
    with pytest.raises(VersionNotFoundError, match=r"version 3 of 'main'.*store\.at\('branch:main'\)\.at\('after'\)"):
        side.at("after")
    assert store.at("branch:side").at("release").version.number == 2
    assert dict(store.tags) == {"first": 1, "release": 2, "after": 3}  # main's own, as before


def test_a_branch_s_own_tags_shadow_and_only_they_change(store: litstore.Store) -> None:
    side = litstore.open(store.root, branch="side")
    side.upsert(_records(range(5), 9))
    side.tags.create("release", 3)  # the branch's own "release": its version 3
    assert side.tags["release"] == 3 and store.tags["release"] == 2
    assert side.at("release")["k001"]["value"] == 9
    with pytest.raises(TagError, match="delete it on that line"):
        side.tags.delete("first")
    side.tags.delete("release")  # its own: main's shows through again
    assert side.tags["release"] == 2 and store.tags["release"] == 2
    with pytest.raises(VersionNotFoundError):
        side.tags.delete("nope")


def test_a_branch_of_a_branch_sees_both_bases(store: litstore.Store) -> None:
    side = litstore.open(store.root, branch="side")
    side.upsert(_records(range(5), 9))  # side 3
    side.tags.create("tried")
    side.upsert(_records(range(5), 10))  # side 4
    side.tags.create("later")
    side.branches.create("deeper", from_=3)
    deeper = litstore.open(store.root, branch="deeper")
    assert dict(deeper.tags) == {"first": 1, "release": 2, "tried": 3}
    assert deeper.at("tried")["k004"]["value"] == 9
