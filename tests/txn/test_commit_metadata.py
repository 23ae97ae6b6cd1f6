"""A version's ``message`` and ``metadata``: checked before anything is written, read back exactly as given.

Before, a ``metadata=`` holding a numpy scalar, bytes or a non-str key, or a ``message=``
that was not a str, raised a pydantic error after the records' chunks were written, and
``{"loss": nan}`` read back as ``{"loss": None}``. Now every write refuses such values
with an :class:`~litstore.InvalidArgumentError` naming the value before it writes a byte;
NaN and infinities are refused (JSON has neither); numpy scalars become the Python
numbers they equal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litstore
from litstore import IntegrityError, InvalidArgumentError, txn
from litstore.format import layout
from tests.conftest import tree_state

MakeStore = Callable[..., litstore.Store]


def _record(i: int) -> dict[str, Any]:
    return {"id": f"k{i:03d}", "label": i % 3, "text": "x" * 200}


def made_record(i: int) -> dict[str, Any]:
    """Module-level so that ``Store.ingest`` could send it to workers."""
    return _record(i)


@pytest.fixture
def store(make_store: MakeStore) -> litstore.Store:
    """A store with work for every write: keys to delete, small chunks to compact, a field to add."""
    made = make_store(key="id", chunk_bytes=4096)
    for start in range(0, 30, 10):
        made.append([_record(i) for i in range(start, start + 10)])
    return made


# Every write that takes message= (and metadata=, except compact): each prepares (commit
# stages a fragment first) and returns the call, given them.
Write = Callable[[dict[str, Any]], Any]
WRITES: dict[str, Callable[[litstore.Store], Write]] = {
    "append": lambda store: lambda said: store.append([_record(100)], **said),
    "upsert": lambda store: lambda said: store.upsert([{**_record(1), "label": 9}], **said),
    "delete": lambda store: lambda said: store.delete(["k002"], **said),
    "commit": lambda store: (lambda staged: lambda said: store.commit([staged], **said))(store.stage([_record(101)])),
    "ingest": lambda store: lambda said: store.ingest(made_record, [200, 201], num_workers=0, progress=False, **said),
    "add_fields": lambda store: lambda said: store.add_fields({"label": int}, **said),
    "compact": lambda store: (
        lambda said: store.compact(min_fill=1.0, **{k: v for k, v in said.items() if k == "message"})
    ),
}

BAD: list[tuple[dict[str, Any], str]] = [
    ({"message": 5}, "message must be a str or None, got int 5"),
    ({"message": b"first import"}, "message must be a str or None, got bytes"),
    ({"message": "half a pair \ud800"}, "message holds '\\ud800', which is not text UTF-8 can encode"),
    ({"metadata": {"loss": float("nan")}}, "metadata['loss'] is nan: JSON has no NaN or infinity"),
    ({"metadata": {"best": [1.0, float("-inf")]}}, "metadata['best'][1] is -inf: JSON has no NaN or infinity"),
    ({"metadata": {"loss": np.float32("nan")}}, "metadata['loss'] is nan"),
    ({"metadata": {"digest": b"\x00\x01"}}, "metadata['digest'] is bytes b'\\x00\\x01'"),
    ({"metadata": {1: "one"}}, "metadata has the key 1 (int): metadata keys are str"),
    ({"metadata": {"nested": {("a", 1): 2}}}, "metadata['nested'] has the key ('a', 1) (tuple)"),
    ({"metadata": {"shape": (3, 4)}}, "metadata['shape'] is tuple (3, 4)"),
    ({"metadata": {"when": object()}}, "metadata['when'] is object"),
    ({"metadata": ["a", "list"]}, "metadata must be a dict of str keys to JSON values, got list"),
]


@pytest.mark.parametrize(
    ("write", "said", "detail"),
    [
        pytest.param(write, said, detail, id=f"{write}-{detail[:40]}")
        for write in sorted(WRITES)
        for said, detail in BAD
        if write != "compact" or "message" in said  # compact takes no metadata
    ],
)
def test_a_bad_message_or_metadata_is_refused_before_anything_is_written(
    store: litstore.Store, write: str, said: dict[str, Any], detail: str
) -> None:
    act = WRITES[write](store)
    root = Path(store.root)
    before, version = tree_state(root), store.version
    with pytest.raises(InvalidArgumentError) as caught:
        act(said)
    assert detail in str(caught.value)
    assert tree_state(root) == before, "nothing may be written"
    assert store.version == version
    assert litstore.open(root).version == version


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_would_commit_with_good_arguments(store: litstore.Store, write: str) -> None:
    """The refusals above refuse writes that would otherwise have written files."""
    before = store.version.number
    said: dict[str, Any] = {"message": "fine", "metadata": {"ok": True}}
    WRITES[write](store)(said)
    assert store.version.number == before + 1
    assert litstore.open(store.root).version.message == "fine"


def test_a_direct_commit_refuses_bad_metadata_before_planning(store: litstore.Store) -> None:
    staged = store.stage([_record(300)])
    root = Path(store.root)
    before = tree_state(root)
    with pytest.raises(InvalidArgumentError, match=r"metadata\['step'\] is bytes"):
        txn.commit(store.head().reader, txn.Write([staged]), metadata={"step": b"1"})
    assert tree_state(root) == before, "the staged fragment is left as it was, and nothing else written"
    assert txn.commit(store.head().reader, txn.Write([staged]), metadata={"step": 1}).version.metadata == {"step": 1}


def test_metadata_reads_back_exactly(store: litstore.Store) -> None:
    given = {
        "loss": np.float32(0.1),
        "steps": np.int64(2**62),
        "epoch": np.uint8(3),
        "converged": np.bool_(True),
        "name": np.str_("run-7"),
        "lr": 3e-4,
        "tiny": 5e-324,
        "negative_zero": -0.0,
        "big": -(2**100),
        "nothing": None,
        "ünïcode": "日本語 ✓",
        "history": [{"step": 1, "loss": 0.5}, [True, False, None]],
    }
    store.append([_record(400)], metadata=given)
    read = litstore.open(store.root).version.metadata
    expected = {
        **given,
        "loss": float(np.float32(0.1)),  # the float32's exact value: 0.10000000149011612
        "steps": 2**62,
        "epoch": 3,
        "converged": True,
        "name": "run-7",
    }
    assert read == expected
    assert type(read["loss"]) is float and type(read["steps"]) is int and type(read["converged"]) is bool
    assert type(read["name"]) is str
    assert math.copysign(1.0, read["negative_zero"]) == -1.0


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="longdouble is float64 on this platform")
def test_a_numpy_number_a_float64_cannot_hold_is_refused(store: litstore.Store) -> None:
    with pytest.raises(InvalidArgumentError, match="which a float64 cannot hold exactly"):
        store.append([_record(500)], metadata={"third": np.longdouble(1) / 3})


def test_metadata_nested_too_deep_or_holding_itself_is_refused(store: litstore.Store) -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(InvalidArgumentError, match="nested more than 32 levels deep"):
        store.append([_record(600)], metadata=looped)
    deep: list[Any] = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(InvalidArgumentError, match="nested more than 32 levels deep"):
        store.append([_record(600)], metadata={"deep": deep})


@pytest.mark.parametrize("written", ['{"loss": NaN}', '{"loss": Infinity}', '{"a": {"b": -Infinity}}'])
def test_a_stranger_commit_record_with_nan_metadata_is_damaged(store: litstore.Store, written: str) -> None:
    path = Path(store.root) / layout.version_record(store.version.number)
    record = json.loads(path.read_text())
    record.pop("metadata", None)
    text = json.dumps(record)
    path.write_text(text[:-1] + f', "metadata": {written}}}')
    with pytest.raises(IntegrityError, match="JSON has no NaN or infinity"):
        litstore.open(store.root)


@pytest.mark.integration  # importing Ray takes seconds
def test_a_ray_write_refuses_a_bad_message_before_any_task_runs(store: litstore.Store) -> None:
    pytest.importorskip("ray")
    import litstore.ray as litstore_ray

    root = Path(store.root)
    before = tree_state(root)
    not_a_dataset: Any = object()  # never reached: the message is checked first
    with pytest.raises(InvalidArgumentError, match="message must be a str or None, got int 5"):
        litstore_ray.write(not_a_dataset, store, message=5)
    assert tree_state(root) == before
