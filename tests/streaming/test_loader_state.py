"""A loader state edited (or damaged) before resume is refused, naming the entry, before litdata uses it.

Before, litdata used the dataset's part of a ``StreamingDataLoader`` state unchecked: a
negative ``num_samples_yielded`` skipped records, a str raised ``TypeError`` in a worker,
``num_workers=0`` a ``ZeroDivisionError``, and a changed seed read as a damaged chunk.
Each case here edits a real state saved mid-epoch and resumes a real loader from it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from itertools import islice
from typing import Any

import pytest
from litdata import StreamingDataLoader

import litstore
from litstore import StreamStateError

SEED = 42


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> litstore.Store:
    made = litstore.Store.create(tmp_path_factory.mktemp("state") / "store", key="id", chunk_bytes=2048)
    made.append([{"id": f"k{i:03d}", "text": "y" * 50} for i in range(100)])
    return made


def _loader(store: litstore.Store) -> StreamingDataLoader:
    return StreamingDataLoader(store.dataset(seed=SEED), batch_size=4, num_workers=0)


def _keys(batches: Any) -> list[str]:
    return [key for batch in batches for key in batch["id"]]


@pytest.fixture(scope="module")
def saved(store: litstore.Store, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A loader state saved after 5 batches (20 records) of 100."""
    loader = _loader(store)
    assert len(_keys(islice(loader, 5))) == 20
    return copy.deepcopy(loader.state_dict())


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state[name] = value

    return edit


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        del state[name]

    return edit


# (entry, edit of the dataset's state, what the error says)
EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("num_samples_yielded", _set("num_samples_yielded", -8), "is -8, where litdata writes between 0 and 100"),
    ("num_samples_yielded", _set("num_samples_yielded", "20"), "is '20', where litdata writes a whole number"),
    ("num_samples_yielded", _set("num_samples_yielded", 20.0), "is 20.0, where litdata writes a whole number"),
    ("num_samples_yielded", _set("num_samples_yielded", True), "is True, where litdata writes a whole number"),
    ("num_samples_yielded", _set("num_samples_yielded", 101), "between 0 and 100 (this dataset yields 100 records"),
    ("sample_in_epoch", _set("sample_in_epoch", -100), "is -100, where litdata writes between 20 and 120"),
    ("sample_in_epoch", _set("sample_in_epoch", 10**6), "between 20 and 120"),
    ("current_epoch", _set("current_epoch", "1"), "a whole number"),
    ("current_epoch", _set("current_epoch", -1), "at least 0"),
    ("num_workers", _set("num_workers", 0), "is 0, where litdata writes at least 1"),
    ("num_workers", _set("num_workers", "1"), "a whole number"),
    ("batch_size", _set("batch_size", -4), "at least 1"),
    ("world_size", _set("world_size", 0), "at least 1"),
    ("num_canonical_nodes", _set("num_canonical_nodes", 0), "at least 1"),
    ("initial_num_nodes", _set("initial_num_nodes", "1"), "a whole number"),
    ("seed", _set("seed", "42"), "a whole number"),
    ("seed", _set("seed", SEED + 1), f"is {SEED + 1}, but this dataset's is {SEED}"),
    ("shuffle", _set("shuffle", 1), "True or False"),
    ("shuffle", _set("shuffle", True), "is True, but this dataset's is False"),
    ("drop_last", _set("drop_last", "no"), "True or False"),
    ("item_shuffle_window", _set("item_shuffle_window", -1), "at least 0"),
    ("input_dir_url", _set("input_dir_url", 5), "a URL or None"),
    ("input_dir_url", _set("input_dir_url", "s3://elsewhere/store"), "but this dataset's is None"),
    ("input_dir_path", _set("input_dir_path", 5), "a path or None"),
    ("item_loader", _set("item_loader", "x"), "a dict or None"),
    ("subsampled_files", _set("subsampled_files", "x"), "a list of chunk names"),
    ("subsampled_files", _set("subsampled_files", ["fragments/x/chunk-0.bin"]), "the chunks this dataset streams"),
    ("region_of_interest", _set("region_of_interest", [[0, "a"]]), "a list of (start, end) pairs"),
    ("region_of_interest", _set("region_of_interest", [[0, 1]]), "the items this dataset streams"),
    ("state_version", _set("state_version", 3), "is 3, where litdata writes 2"),
    ("resume_mode", _set("resume_mode", "fast"), "'elastic' where present"),
    ("seed", _drop("seed"), "lacks the entries ['seed']"),
    ("extra", _set("extra", 1), "has entries litdata does not write: ['extra']"),
]


@pytest.mark.parametrize(
    ("entry", "edit", "detail"), EDITS, ids=[f"{entry}-{number}" for number, (entry, _, _) in enumerate(EDITS)]
)
def test_an_edited_loader_state_is_refused_naming_the_entry(
    store: litstore.Store, saved: dict[str, Any], entry: str, edit: Callable[[dict[str, Any]], None], detail: str
) -> None:
    state = copy.deepcopy(saved)
    edit(state["dataset"])
    loader = _loader(store)
    with pytest.raises(StreamStateError) as caught:
        loader.load_state_dict(state)
    message = str(caught.value)
    assert repr(entry) in message and detail in message, message
    # Refused before litdata kept any of it: the loader streams its own epoch from the start.
    keys = _keys(loader)
    assert sorted(keys) == [f"k{i:03d}" for i in range(100)]


@pytest.mark.parametrize(("entry", "value"), [("world_size", "two"), ("num_workers", None), ("batch_size", [4])])
def test_entries_litdatas_loader_reads_first_are_checked_on_the_dataset(
    store: litstore.Store, saved: dict[str, Any], entry: str, value: Any
) -> None:
    """``StreamingDataLoader`` calls ``int()`` on these before litstore sees them; the dataset refuses them."""
    state = copy.deepcopy(saved["dataset"])
    state[entry] = value
    with pytest.raises(StreamStateError, match=f"'{entry}' is .*, where litdata writes a whole number"):
        store.dataset(seed=SEED).load_state_dict(state)


def test_a_loader_state_that_is_not_a_dict_is_refused(store: litstore.Store) -> None:
    with pytest.raises(StreamStateError, match="a loader state is a dict, got list"):
        store.dataset(seed=SEED).load_state_dict([1, 2])  # type: ignore[arg-type]


def test_an_unedited_state_resumes_each_record_once(store: litstore.Store, saved: dict[str, Any]) -> None:
    first = _keys(islice(_loader(store), 5))
    resumed = _loader(store)
    resumed.load_state_dict(copy.deepcopy(saved))
    rest = _keys(resumed)
    assert sorted(first + rest) == [f"k{i:03d}" for i in range(100)]
