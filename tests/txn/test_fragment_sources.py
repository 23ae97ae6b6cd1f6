"""``write_fragment`` says which input record each row of the fragment holds, over runs and splits.

Moves (copy-on-write) rely on it to find each moved record's new place without matching
keys: a wrong source would point a key at another record's chunk and row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import litstore
from litstore.txn.records import prepare_runs
from litstore.txn.stage import discard, write_fragment


@settings(max_examples=25, deadline=None)
@given(
    splits=st.lists(st.sampled_from(["train", "val", "test"]), min_size=1, max_size=60),
    run_bytes=st.sampled_from([1, 200, 10_000]),
    as_table=st.booleans(),
)
def test_each_row_holds_the_input_record_its_source_names(
    tmp_path_factory: pytest.TempPathFactory, splits: list[str], run_bytes: int, as_table: bool
) -> None:
    root = Path(tmp_path_factory.mktemp("store"))
    store = litstore.Store.create(root, key="id", splits="split", chunk_bytes=500)
    records = [{"id": f"k{i:03d}", "split": split, "blob": bytes([i]) * (i % 7)} for i, split in enumerate(splits)]
    given = pa.Table.from_pylist(records) if as_table else records  # a table is cut into runs of ~run_bytes
    runs = prepare_runs(given, store.head().config, run_bytes=run_bytes)
    fragment, sources = write_fragment(store.head().storage, store.head().config, runs)
    try:
        assert sorted(sources.tolist()) == list(range(len(records)))  # each input record, once
        assert fragment.rows.column("key").to_pylist() == [records[i]["id"] for i in sources.tolist()]
        assert fragment.rows.column("split").to_pylist() == [records[i]["split"] for i in sources.tolist()]
        for chunk in {name for name in fragment.rows.column("chunk").to_pylist()}:
            rows = np.flatnonzero(np.array(fragment.rows.column("chunk").to_pylist(), dtype=object) == chunk)
            assert fragment.rows.column("row").to_numpy()[rows].tolist() == list(range(len(rows)))
    finally:
        discard(store.head().storage, fragment)
