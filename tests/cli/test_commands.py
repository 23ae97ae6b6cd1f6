"""The ``litstore`` command line, run as the console script runs it: ``litstore.cli.main``.

Every command runs against a store in a real directory and against S3 (moto's server on
loopback, ``tests/s3_server.py``). The tests read what a script would read (``--json``
on stdout, the exit code) and check it against the store through the public API:

- a JSONL file imported and exported again comes back equal, bytes included;
- ``verify`` exits 0 on a sound store and 1 once a chunk byte is flipped;
- ``gc`` without ``--yes`` removes nothing, with ``--yes`` removes what it listed;
- ``upgrade`` gives a format-2 store its key index once, and says so when there is nothing to do;
- a user error exits 2 with one line on stderr and no traceback;
- the ``litstore`` console script is installed, and ``import litstore`` never loads typer or rich.

Commands run in this process, under typer's ``CliRunner`` isolation (stdout, stderr and the
exit code are the console script's; a fresh interpreter per command would cost a second or
more of torch import each). ``python -m litstore`` and the console script themselves run in
a subprocess once each (``test_version_prints_litstore_s_version``, the packaging test).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import litstore
from litstore.cli import interchange, main
from litstore.format import layout

pytestmark = pytest.mark.integration

Record = dict[str, Any]


def _record(i: int, label: int = 0) -> Record:
    return {
        "id": f"k{i:03d}",
        "label": label,
        "score": i / 4,
        "text": f"ünïcode {i}",
        "blob": bytes([i % 256]) * (i % 7),
        "tags": ["a", str(i)],
        "meta": {"ok": i % 2 == 0, "note": None},
        "part": "val" if i % 4 == 0 else "train",
    }


def _json_line(record: Record) -> str:
    """A record as ``litstore import`` reads it: bytes as ``{"$base64": ...}``."""
    return json.dumps(interchange.to_json(record), ensure_ascii=False)


def _write_jsonl(path: Path, records: list[Record]) -> Path:
    path.write_text("".join(_json_line(record) + "\n" for record in records), encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> dict[str, Record]:
    records = [json.loads(line, object_hook=interchange.json_object_hook) for line in path.read_text().splitlines()]
    return {record["id"]: record for record in records}


@dataclass(frozen=True)
class Result:
    """What a run of the command line left: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as a 120-column terminal shows them (rich reads ``COLUMNS`` as it prints)."""
    monkeypatch.setenv("COLUMNS", "120")


def cli(*args: object, code: int = 0) -> Result:
    """Run ``litstore ARGS`` (``litstore.cli.main``); check its exit code and that it printed no traceback."""
    with CliRunner().isolation() as (stdout, stderr, _):
        try:
            main([str(arg) for arg in args])
            returncode = 0
        except SystemExit as exc:
            returncode = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
        sys.stdout.flush()  # the text streams CliRunner put in place, over stdout and stderr
        sys.stderr.flush()
        result = Result(returncode, stdout.getvalue().decode("utf-8"), stderr.getvalue().decode("utf-8"))
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def cli_json(*args: object, code: int = 0) -> Any:
    return json.loads(cli(*args, "--json", code=code).stdout)


def _error_line(result: Result) -> str:
    """The one error line on stderr (progress bars may come before it); nothing on stdout."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("litstore: error: ")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr
    assert not result.stdout, result.stdout
    return errors[0]


# -- packaging ------------------------------------------------------------------------


def test_console_script_is_installed_and_import_litstore_stays_light() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, litstore; print(sorted({'typer', 'rich'} & set(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
    bin_dir = Path(sys.executable).parent
    script = shutil.which("litstore", path=str(bin_dir))
    if script is None:
        pytest.skip(f"no litstore console script in {bin_dir}: run `pip install -e .` to install it")
    result = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "verify" in result.stdout and "export" in result.stdout


# -- a local store, every command -----------------------------------------------------------


def test_local_store_end_to_end(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    first = [_record(i) for i in range(40)]
    updates = [_record(i, label=9) for i in range(35, 45)]  # 5 replaced, 5 added
    source = _write_jsonl(tmp_path / "in.jsonl", first)

    assert "created" in cli("create", root, "--splits", "train=0.75,val=0.25", "--chunk-bytes", "1024").stdout
    assert "version 1: +40" in cli("import", root, source, "--message", "first").stdout
    done = cli_json("import", root, _write_jsonl(tmp_path / "up.jsonl", updates), "--upsert", "--no-progress")
    assert done["committed"] and (done["number"], done["added"], done["replaced"]) == (2, 5, 5)

    history = cli_json("log", root)
    assert [(v["number"], v["operation"], v["message"]) for v in history] == [
        (0, "create", None),
        (1, "append", "first"),
        (2, "upsert", None),
    ]
    assert "first" in cli("log", root).stdout

    store = litstore.open(root)
    shown = cli_json("show", root, "1")
    assert shown["records"] == 40 and shown["fingerprint"] == store.at(1).version.fingerprint
    chunks = store.at(1).chunks()
    assert shown["splits"] == {
        split: {
            "records": store.at(1).version.counts[split],
            "chunks": len(chunks[split]),
            "bytes": sum(chunk.num_bytes for chunk in chunks[split]),
        }
        for split in ("train", "val")
    }
    assert "fingerprint" in cli("show", root).stdout

    assert cli_json("get", root, "k036") == interchange.to_json(_record(36, label=9))
    assert cli_json("get", root, "k036", "--at", "1") == interchange.to_json(_record(36))
    assert "<1 bytes: 24>" in cli("get", root, "k036").stdout  # bytes summarised, not dumped

    changes = cli_json("diff", root, "1", "2")
    assert changes["counts"] == {"added": 5, "removed": 0, "changed": 5}
    assert set(changes["examples"]["added"]) == {f"k{i:03d}" for i in range(40, 45)}
    assert "+5 added" in cli("diff", root, "1").stdout

    rows = cli_json("sql", root, "SELECT split, count(*) AS n FROM manifest GROUP BY split ORDER BY split")
    assert {row["split"]: row["n"] for row in rows} == store.version.counts
    assert cli_json("sql", root, "SELECT count(*) AS n FROM manifest", "-V", "1") == [{"n": 40}]

    cli("tag", root, "release-1", "1")
    assert cli_json("tags", root) == {"release-1": 1}
    assert cli_json("show", root, "release-1")["number"] == 1
    assert "already names version 1" in _error_line(cli("tag", root, "release-1", "--at", "2", code=2))
    cli("tag", root, "release-1", "2", "--move")
    assert cli_json("tags", root) == {"release-1": 2}
    cli("untag", root, "release-1")
    assert cli_json("tags", root) == {}
    assert cli_json("show", root, history[1]["created_at"])["number"] == 1  # an ISO time: the version current then

    assert "OK" in cli("verify", root).stdout
    expected = tmp_path / "keys.txt"
    expected.write_text("\n".join(f"k{i:03d}" for i in range(44)))  # k044 missing from the list
    report = cli_json("verify", root, "--expected-keys", expected, code=1)
    assert not report["ok"] and any("unexpected keys" in line for line in report["problems"])

    exported = tmp_path / "v1.jsonl"
    cli("export", root, exported, "--at", "1")
    assert _read_jsonl(exported) == _read_jsonl(source)  # the round trip gives back the input
    cli("export", root, tmp_path / "val.parquet", "--split", "val")
    val_keys = {row["key"] for row in store.manifest().to_pylist() if row["split"] == "val"}
    table = pq.read_table(tmp_path / "val.parquet").to_pylist()
    assert {row["id"] for row in table} == val_keys
    assert all(row == store[row["id"]] for row in table)  # bytes stay binary in Parquet
    copy = str(tmp_path / "copy")
    cli("create", copy)
    cli("import", copy, tmp_path / "val.parquet", "--no-progress")
    assert dict(litstore.open(copy).items()) == {key: store[key] for key in val_keys}


def test_version_prints_litstore_s_version() -> None:
    assert cli("--version").stdout.strip() == f"litstore {litstore.__version__}"
    # ``python -m litstore`` for real, once: the module entry point, its output and exit code.
    result = subprocess.run(
        [sys.executable, "-m", "litstore", "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert (result.returncode, result.stdout.strip()) == (0, f"litstore {litstore.__version__}"), result.stderr


def test_gc_is_a_dry_run_without_yes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root, "--chunk-bytes", "1024")
    cli("import", root, _write_jsonl(tmp_path / "a.jsonl", [_record(i) for i in range(20)]), "--no-progress")
    upsert = _write_jsonl(tmp_path / "b.jsonl", [_record(i, label=1) for i in range(20)])
    cli("import", root, upsert, "--upsert", "--no-progress")
    before = sorted(str(path) for path in root.rglob("*"))

    planned = cli_json("gc", root, "--keep-last", "1", "--grace", "0s")
    assert planned["dry_run"] and planned["expired_versions"] == [0, 1] and planned["removed_files"]
    assert "pass --yes" in cli("gc", root, "--keep-last", "1", "--grace", "0s").stdout
    assert sorted(str(path) for path in root.rglob("*")) == before
    assert [v["number"] for v in cli_json("log", root)] == [0, 1, 2]

    done = cli_json("gc", root, "--keep-last", "1", "--grace", "0s", "-y")  # (-y is --yes)
    assert not done["dry_run"] and done["removed_files"] == planned["removed_files"]
    assert not any((root / name).exists() for name in done["removed_files"])
    assert [v["number"] for v in cli_json("log", root)] == [2]
    cli("verify", root, "--no-progress")


def test_compact_merges_chunks_and_keeps_every_record(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root, "--chunk-bytes", "1024")
    records = [_record(i) for i in range(30)]
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", records), "--no-progress")  # many 1 KiB chunks
    result = cli_json("compact", root, "--target-chunk-bytes", "100000", "--no-progress")
    assert result["compacted"] and result["chunks_after"] < result["chunks_before"]
    assert cli_json("compact", root, "--target-chunk-bytes", "100000")["compacted"] is False
    cli("verify", root, "--no-progress")
    cli("export", root, tmp_path / "out.jsonl")
    assert _read_jsonl(tmp_path / "out.jsonl") == {record["id"]: record for record in records}


def test_compact_min_live_rewrites_chunks_with_dead_rows(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root, "--chunk-bytes", "4096")
    records = [_record(i) for i in range(60)]
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", records), "--no-progress")
    store = litstore.open(root)
    store.delete(["k001"])  # one dead row: above the default min_live
    assert store.head().reader.deletions.refs
    assert cli_json("compact", root, "--no-progress")["compacted"] is False
    result = cli_json("compact", root, "--min-live", "1", "--no-progress")
    assert result["compacted"] and not litstore.open(root).head().reader.deletions.refs
    assert "min_live must be in [0, 1]" in _error_line(cli("compact", root, "--min-live", "2", code=2))
    cli("verify", root, "--no-progress")
    cli("export", root, tmp_path / "out.jsonl")
    assert _read_jsonl(tmp_path / "out.jsonl") == {record["id"]: record for record in records if record["id"] != "k001"}


def test_upgrade_gives_a_format_2_store_its_key_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    litstore.Store.create(root, key="id", chunk_bytes=1024, format_version=2)  # as an older litstore made it
    records = [_record(i) for i in range(30)]
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", records), "--no-progress")
    result = cli_json("upgrade", root, "--no-progress", "--message", "index")
    assert result == {
        "committed": True,
        "format_before": 2,
        "format_version": 7,
        "version": 2,
        "records": 30,
        "key_runs": 1,
    }
    again = cli("upgrade", root)
    assert again.stdout.startswith("nothing to do: the store is format 7 and version 2's key index is on disk")
    assert cli("upgrade", root, "--rebuild", "--no-progress").stdout.startswith("rebuilt the key index: version 3 ")
    store = litstore.open(root)
    assert store.config.format_version == 7 and store.version.number == 3 and store.version.operation == "upgrade"
    assert store.at(2).version.message == "index"
    assert store.get_many([record["id"] for record in records]) == records
    assert not store.diff(1, 3)
    cli("verify", root, "--no-progress")


def test_verify_exits_1_when_a_chunk_byte_is_flipped(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root)
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", [_record(i) for i in range(10)]), "--no-progress")
    chunk = root / litstore.open(root).chunks()["train"][0].filename
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    assert "FAILED" in cli("verify", root, "--no-progress", code=1).stdout
    assert cli_json("verify", root, "--no-progress", code=1)["ok"] is False


def test_verify_names_a_sidecar_that_disagrees_with_the_manifest(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root)
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", [_record(i) for i in range(10)]), "--no-progress")
    sidecar = layout.chunk_hashes(litstore.open(root).chunks()["train"][0].filename)
    (root / sidecar).write_bytes((root / sidecar).read_bytes()[:-1])
    shown = cli("verify", root, "--no-progress", code=1).stdout
    assert "FAILED" in shown and "key index and sidecar problems" in shown and sidecar in shown.replace("\n", "")
    (line,) = cli_json("verify", root, "--no-progress", code=1)["problems"]
    assert line.startswith("1 key index and sidecar problems (file, problem)") and sidecar in line


def test_verify_num_workers_must_not_be_negative(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cli("create", root)
    cli("import", root, _write_jsonl(tmp_path / "in.jsonl", [_record(i) for i in range(10)]), "--no-progress")
    assert cli_json("verify", root, "--no-progress", "--num-workers", "0")["ok"] is True
    cli("verify", root, "--no-progress", "--num-workers", "-1", code=2)


def test_errors_exit_with_their_kind_s_code_and_one_line(tmp_path: Path) -> None:
    """2: usage; 3: not found (store, key, version, tag); 1: bad data (see the litstore.cli docstring)."""
    missing = tmp_path / "nowhere"
    assert str(missing) in _error_line(cli("log", missing, code=3))
    root = tmp_path / "store"
    cli("create", root, "--key-type", "int")
    assert f"litstore import {root} FILE" in _error_line(cli("create", root, code=2))
    assert "integers" in _error_line(cli("get", root, "abc", code=2))
    assert "is not in version 0" in _error_line(cli("get", root, "7", code=3))
    assert "does not exist" in _error_line(cli("show", root, "--at", "9", code=3))
    assert "no tag 'nope'" in _error_line(cli("untag", root, "nope", code=3))
    assert ".jsonl or .parquet" in _error_line(cli("export", root, tmp_path / "out.csv", code=2))
    assert "No such option" in cli("log", root, "--bogus", code=2).stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\nnot json\n')
    assert "line 2" in _error_line(cli("import", root, bad, code=1))
    assert [v["number"] for v in cli_json("log", root)] == [0]  # nothing was committed
    assert "duration" in _error_line(cli("gc", root, "--older-than", "soon", code=2))


# -- S3 ----------------------------------------------------------------------------------


def test_s3_store_end_to_end(s3_endpoint: str, s3_bucket: str, tmp_path: Path) -> None:
    url = f"s3://{s3_bucket}/cli"
    endpoint = ("--endpoint-url", s3_endpoint)
    records = [_record(i) for i in range(20)]
    source = _write_jsonl(tmp_path / "in.jsonl", records)

    cli("create", url, *endpoint, "--split-field", "part", "--split-names", "train,val", "--chunk-bytes", "1024")
    cli("import", url, source, *endpoint, "--no-progress")
    assert [v["operation"] for v in cli_json("log", url, "--storage-option", f"endpoint_url={s3_endpoint}")] == [
        "create",
        "append",
    ]
    assert cli_json("get", url, "k003", *endpoint) == interchange.to_json(records[3])
    assert cli_json("sql", url, "SELECT count(*) AS n FROM manifest", *endpoint) == [{"n": 20}]
    cli("tag", url, "v1", *endpoint)
    assert cli_json("tags", url, *endpoint) == {"v1": 1}
    assert cli_json("diff", url, "0", "v1", *endpoint)["counts"]["added"] == 20
    cli("export", url, tmp_path / "out.jsonl", *endpoint)
    assert _read_jsonl(tmp_path / "out.jsonl") == _read_jsonl(source)
    assert cli_json("gc", url, "--keep-last", "1", *endpoint)["dry_run"] is True
    cli("verify", url, *endpoint, "--no-progress")

    store = litstore.open(url, storage_options={"endpoint_url": s3_endpoint})
    name = f"cli/{store.chunks()['val'][0].filename}"
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    data = bytearray(client.get_object(Bucket=s3_bucket, Key=name)["Body"].read())
    data[-1] ^= 0xFF
    client.put_object(Bucket=s3_bucket, Key=name, Body=bytes(data))
    assert cli_json("verify", url, *endpoint, "--no-progress", code=1)["ok"] is False

    assert "no litstore store" in _error_line(cli("log", f"s3://{s3_bucket}/elsewhere", *endpoint, code=3))
