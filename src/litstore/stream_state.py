"""Checking a loader state field by field before litdata resumes from it.

``StreamingDataLoader.load_state_dict(state)`` hands ``state["dataset"]`` to
:meth:`litstore.streaming.VersionDataset.load_state_dict`, which calls :func:`check`
before litdata sees it. litdata uses these entries unchecked, inside the DataLoader's
workers: a negative ``num_samples_yielded`` skipped records, a ``str`` raised
``TypeError``, ``num_workers=0`` a ``ZeroDivisionError``, and a seed that differs from
the dataset's surfaced as a damaged chunk. Here every entry litdata's ``state_dict``
writes must be present (and nothing else), of its type, in its range, and, where it
describes the dataset (``shuffle``, ``seed``, ``drop_last``, the chunks streamed), equal
to this dataset's, unless the dataset was made with ``force_override_state_dict=True``,
which asks litdata to override those. Any other state raises
:class:`~litstore.errors.StreamStateError` naming the entry.

The entries checked are those litdata 0.2.76 (the pinned version) writes. The loader's
own entries (``state["num_samples_yielded"]``, ``latest_worker_idx``, ``current_epoch``)
are litdata's: it reads them, and ``int()`` of the dataset state's ``world_size``,
``num_workers`` and ``batch_size``, before the dataset state reaches litstore.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, Protocol

from litstore.errors import StreamStateError


class VersionDataset(Protocol):
    """What a state is checked against: the parts of a :class:`litstore.streaming.VersionDataset` (a litdata
    ``StreamingDataset``) that describe what it streams. A Protocol, so this module does not import the
    streaming module that calls it."""

    seed: int
    input_dir: Any
    item_loader: Any
    subsampled_files: Any
    region_of_interest: Any
    _litdata_starts: Any
    _item_shuffle_window: Any
    _force_override_state_dict: bool

    def __len__(self) -> int: ...


#: litdata's loader state format (``state_version``) this litstore resumes.
STATE_VERSION = 2

_AT_LEAST_ONE = (
    "num_workers",
    "batch_size",
    "world_size",
    "num_canonical_nodes",
    "initial_world_size",
    "initial_num_workers",
    "initial_batch_size",
    "initial_num_nodes",
)
_PATHS = ("input_dir_path", "cache_dir_path")  # the view's paths: any, VersionDataset replaces them
_OPTIONAL = frozenset({"resume_mode"})


def check(state: Any, dataset: VersionDataset, identity_key: str) -> dict[str, Any]:
    """``state`` (a dataset's loader state) with its whole numbers as ``int``, if ``dataset`` can resume from it.

    Raises:
        StreamStateError: an entry is missing, unknown, of the wrong type, out of range, or
            describes another dataset (the message names it).
    """
    if not isinstance(state, dict):
        raise StreamStateError(f"a loader state is a dict, got {type(state).__name__}")
    known = {*_CHECKS, *_AT_LEAST_ONE, *_PATHS, *_OPTIONAL, identity_key}
    unknown = sorted(str(name) for name in state if name not in known)
    if unknown:
        raise _refused(f"has entries litdata does not write: {unknown}")
    missing = sorted(name for name in known - _OPTIONAL if name not in state)
    if missing:
        raise _refused(f"lacks the entries {missing}")
    checked = dict(state)
    for name in _AT_LEAST_ONE:
        checked[name] = _whole(state, name, low=1)
    for name in _PATHS:
        if state[name] is not None and not isinstance(state[name], str):
            raise _field(state, name, "a path or None")
    for name, rule in _CHECKS.items():
        checked[name] = rule(checked, name, dataset)
    if "resume_mode" in state and state["resume_mode"] != "elastic":
        raise _field(state, "resume_mode", "'elastic' where present")
    return checked


def _samples_yielded(state: dict[str, Any], name: str, dataset: VersionDataset) -> int:
    epoch = len(dataset)
    return _whole(state, name, low=0, high=epoch, why=f"this dataset yields {epoch} records an epoch on this rank")


def _sample_in_epoch(state: dict[str, Any], name: str, dataset: VersionDataset) -> int:
    # num_samples_yielded * world_size, plus what an elastic resume skipped (at most every record).
    least = _whole(state, "num_samples_yielded", low=0) * state["world_size"]
    total = dataset._litdata_starts[-1]
    return _whole(
        state,
        name,
        low=least,
        high=least + total,
        why=f"num_samples_yielded x world_size is {least}, and at most {total} records more may have been skipped",
    )


def _epoch(state: dict[str, Any], name: str, dataset: VersionDataset) -> int:
    return _whole(state, name, low=0)


def _seed(state: dict[str, Any], name: str, dataset: VersionDataset) -> int:
    seed = _whole(state, name)
    _same(state, name, seed, dataset.seed, dataset)
    return seed


def _flag(attribute: str) -> Callable[[dict[str, Any], str, VersionDataset], bool]:
    def rule(state: dict[str, Any], name: str, dataset: VersionDataset) -> bool:
        if not isinstance(state[name], bool):
            raise _field(state, name, "True or False")
        return bool(_same(state, name, state[name], getattr(dataset, attribute), dataset))

    return rule


def _shuffle_window(state: dict[str, Any], name: str, dataset: VersionDataset) -> Any:
    value = state[name]
    if value is not None:
        value = _whole(state, name, low=0)
    return _same(state, name, value, dataset._item_shuffle_window, dataset)


def _input_url(state: dict[str, Any], name: str, dataset: VersionDataset) -> Any:
    if state[name] is not None and not isinstance(state[name], str):
        raise _field(state, name, "a URL or None")
    return _same(state, name, state[name], dataset.input_dir.url, dataset)


def _item_loader(state: dict[str, Any], name: str, dataset: VersionDataset) -> Any:
    if state[name] is not None and not isinstance(state[name], dict):
        raise _field(state, name, "a dict or None")
    own = dataset.item_loader.state_dict() if dataset.item_loader else None
    if own is None:
        return state[name]  # litdata compares it only with an item loader's state
    return _same(state, name, state[name], own, dataset, _plain(state[name]) == _plain(own))


def _files(state: dict[str, Any], name: str, dataset: VersionDataset) -> Any:
    value = state[name]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise _field(state, name, "a list of chunk names")
    if list(value) != list(dataset.subsampled_files):
        raise _field(state, name, "the chunks this dataset streams")
    return value


def _regions(state: dict[str, Any], name: str, dataset: VersionDataset) -> Any:
    value = state[name]
    pairs = isinstance(value, (list, tuple)) and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 and all(_is_whole(end) for end in pair) for pair in value
    )
    if not pairs:
        raise _field(state, name, "a list of (start, end) pairs")
    if _plain(value) != _plain(dataset.region_of_interest):
        raise _field(state, name, "the items this dataset streams of each chunk")
    return value


def _version(state: dict[str, Any], name: str, dataset: VersionDataset) -> int:
    return _whole(state, name, low=STATE_VERSION, high=STATE_VERSION, why="the loader state format litstore resumes")


_CHECKS: dict[str, Callable[[dict[str, Any], str, VersionDataset], Any]] = {
    "num_samples_yielded": _samples_yielded,
    "sample_in_epoch": _sample_in_epoch,
    "current_epoch": _epoch,
    "seed": _seed,
    "shuffle": _flag("shuffle"),
    "drop_last": _flag("drop_last"),
    "item_shuffle_window": _shuffle_window,
    "input_dir_url": _input_url,
    "item_loader": _item_loader,
    "subsampled_files": _files,
    "region_of_interest": _regions,
    "state_version": _version,
}


def _is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _whole(state: dict[str, Any], name: str, low: int | None = None, high: int | None = None, why: str = "") -> int:
    value = state[name]
    if not _is_whole(value):
        raise _field(state, name, "a whole number")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = f"{low}" if low == high else f"at least {low}" if high is None else f"between {low} and {high}"
        raise _field(state, name, bounds + (f" ({why})" if why else ""))
    return number


def _same(
    state: dict[str, Any], name: str, value: Any, own: Any, dataset: VersionDataset, equal: bool | None = None
) -> Any:
    if dataset._force_override_state_dict or (value == own if equal is None else equal):
        return value
    raise StreamStateError(
        f"loader state entry {name!r} is {_shown(state[name])}, but this dataset's is {_shown(own)}: the state was "
        "saved by a dataset made with other arguments; make the dataset as that one was to resume from it"
    )


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists: a state saved as JSON holds lists where litdata wrote tuples."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _field(state: dict[str, Any], name: str, expected: str) -> StreamStateError:
    return _refused(f"entry {name!r} is {_shown(state[name])}, where litdata writes {expected}")


def _refused(what: str) -> StreamStateError:
    return StreamStateError(
        f"this loader state {what}: it was edited or damaged, or not saved by litstore's StreamingDataset. "
        "Resume from another checkpoint, or start the epoch again"
    )


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
