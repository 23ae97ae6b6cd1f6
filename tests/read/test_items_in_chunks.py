"""items() of a format-3 version reads its chunks as its split indexes list them, checked against their sidecars."""

from __future__ import annotations

from pathlib import Path

import pytest

import litstore
from litstore.errors import DamagedRecordError
from litstore.format import layout
from litstore.read import version as version_module


def _store(tmp_path: Path, format_version: int = 3) -> litstore.Store:
    store = litstore.Store.create(tmp_path / "s", key="id", format_version=format_version, chunk_bytes=4096)
    store.append([{"id": f"k{i:04d}", "v": i, "pad": "x" * 40} for i in range(300)])
    store.upsert([{"id": f"k{i:04d}", "v": -i} for i in range(0, 300, 7)])
    store.delete([f"k{i:04d}" for i in range(3, 300, 11)])
    return store


def _no_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the manifest was composed")

    monkeypatch.setattr(version_module.VersionReader, "manifest", refuse)
    monkeypatch.setattr(version_module.VersionReader, "key_index", refuse)


def test_items_of_a_format_3_version_need_no_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = dict(_store(tmp_path, 2).items())
    (tmp_path / "s").rename(tmp_path / "two")  # the same history, format 3 this time
    _store(tmp_path)
    fresh = litstore.open(tmp_path / "s")
    _no_manifest(monkeypatch)
    found = dict(fresh.items())
    assert found == expected
    assert len(found) == len(fresh)


def test_a_chunk_changed_under_its_sidecar_names_the_key(tmp_path: Path) -> None:
    store = _store(tmp_path)
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    chunk = tmp_path / "s" / listed[-1]
    data = bytearray(chunk.read_bytes())
    data[-3] ^= 0xFF  # the last item's bytes
    chunk.write_bytes(bytes(data))
    with pytest.raises(DamagedRecordError) as caught:
        list(litstore.open(tmp_path / "s").items())
    assert chunk.name in str(caught.value)
    assert "k0" in str(caught.value)  # named by its key, from the manifest composed only now


def test_a_missing_sidecar_reads_through_the_key_index(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = dict(store.items())
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    sidecar = tmp_path / "s" / layout.chunk_hashes(listed[0])
    sidecar.unlink()
    assert layout.is_chunk_file(str(sidecar.relative_to(tmp_path / "s")))
    assert dict(litstore.open(tmp_path / "s").items()) == expected


def test_a_damaged_sidecar_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    listed = [chunk.filename for chunks in store.chunks().values() for chunk in chunks]
    sidecar = tmp_path / "s" / layout.chunk_hashes(listed[0])
    data = bytearray(sidecar.read_bytes())
    data[20] ^= 0x01
    sidecar.write_bytes(bytes(data))
    with pytest.raises(litstore.IntegrityError, match="sidecar"):
        list(litstore.open(tmp_path / "s").items())
