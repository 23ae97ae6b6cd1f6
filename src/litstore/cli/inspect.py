"""Commands that read a version: ``log``, ``show``, ``get``, ``diff``, ``verify``, ``sql`` and ``audit``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Column, Table
from rich.text import Text

import litstore
import litstore.export
from litstore.cli import display, interchange
from litstore.cli.common import (
    _LOG_MESSAGE_CHARACTERS,
    AtOpt,
    EndpointOpt,
    JsonOpt,
    OldVersionArg,
    OldVersionOpt,
    ProgressOpt,
    RootArg,
    StorageOpts,
    _at,
    _cell,
    _field,
    _key,
    _open,
    _out,
    _print_json,
    _progress,
    _read_text,
    _say,
    _snapshot,
    _tags_by_version,
    _time,
    _version_doc,
    app,
    version_ref,
)
from litstore.cli.display import shown, shown_lines


@app.command()
def log(
    root: RootArg, endpoint_url: EndpointOpt = None, storage_option: StorageOpts = None, as_json: JsonOpt = False
) -> None:
    """List the versions, oldest first."""
    store = _open(root, endpoint_url, storage_option)
    tags = _tags_by_version(store)
    versions = store.versions()
    if as_json:
        _print_json([_version_doc(version, tags.get(version.number, [])) for version in versions])
        return
    table = Table("version", "time (UTC)", "operation", "changes", "records", "message")
    for column in table.columns[:5]:
        column.no_wrap = True
    for version in versions:
        named = " ".join(f"({name})" for name in tags.get(version.number, []))
        table.add_row(
            shown(f"{version.number} {named}".strip()),
            Text(_time(version.created_at)),
            shown(version.operation),
            Text(f"+{version.added} ~{version.replaced} -{version.removed}"),
            Text(str(version.total)),
            shown(version.message or "", limit=_LOG_MESSAGE_CHARACTERS),
        )
    _out.print(table)


@app.command()
def show(
    root: RootArg,
    version: OldVersionArg = None,
    at: AtOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Describe one version: records, chunks and bytes per split, fingerprint, message."""
    store = _open(root, endpoint_url, storage_option)
    snapshot = _snapshot(store, _at(at, version, "the VERSION argument"))
    info = snapshot.version
    chunks = snapshot.chunks()
    splits = {
        split: {
            "records": info.counts.get(split, 0),
            "chunks": len(chunks.get(split, [])),
            "bytes": sum(chunk.num_bytes for chunk in chunks.get(split, [])),
        }
        for split in sorted(set(info.counts) | set(chunks))
    }
    document = _version_doc(info, _tags_by_version(store).get(info.number, []))
    document["splits"] = splits
    if as_json:
        _print_json(document)
        return
    tags = f" (tags: {', '.join(document['tags'])})" if document["tags"] else ""
    _out.print(shown(f"version {info.number}{tags}: {info.operation} at {_time(info.created_at)} UTC"))
    _out.print(shown(f"records {info.total}, fingerprint {info.fingerprint}"))
    if info.message:
        _out.print(Text("message: ") + shown(info.message))
    if info.metadata:
        _out.print(Text("metadata: ") + shown(display.json_text(info.metadata)))
    table = Table("split", "records", "chunks", "bytes")
    for split, entry in splits.items():
        table.add_row(
            shown(split), Text(str(entry["records"])), Text(str(entry["chunks"])), Text(f"{entry['bytes']:,}")
        )
    _out.print(table)


@app.command()
def get(
    root: RootArg,
    key: Annotated[str, typer.Argument(help="The record's key.", show_default=False)],
    at: AtOpt = None,
    version: OldVersionOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Print one record (JSON: bytes as {"$base64": ...}, media as {"$media": ...}, arrays as lists)."""
    store = _open(root, endpoint_url, storage_option)
    snapshot = _snapshot(store, _at(at, version, "--version"))
    with litstore.encoded_media():  # media are shown from their headers, never decoded
        record = snapshot[_key(store, key)]
    if as_json:
        _print_json(interchange.to_json(record))
        return
    table = Table("field", "value")
    for name, value in record.items():
        table.add_row(_field(name), _cell(value, limit=200))
    _out.print(table)


@app.command()
def diff(
    root: RootArg,
    old: Annotated[str, typer.Argument(help="The older version.", show_default=False)],
    new: Annotated[str | None, typer.Argument(help="The newer version (default: latest).")] = None,
    examples: Annotated[int, typer.Option(help="Example keys shown for each kind of change.")] = 5,
    fields: Annotated[
        bool, typer.Option("--fields", help="Also name the fields that changed (reads the changed records).")
    ] = False,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """What changed between two versions: counts per split and example keys (and, with --fields, the fields)."""
    store = _open(root, endpoint_url, storage_option)
    found = store.diff(version_ref(store, old), None if new is None else version_ref(store, new), fields=fields)
    if as_json:
        document: dict[str, Any] = {"old": found.old, "new": found.new, "counts": found.counts}
        document["splits"] = found.split_counts
        if fields:
            document["fields"] = {litstore.export.column_name(name): n for name, n in found.field_counts.items()}
        document["examples"] = {
            kind: table.column("key").slice(0, examples).to_pylist()
            for kind, table in (("added", found.added), ("removed", found.removed), ("changed", found.changed))
        }
        _print_json(document)
    else:
        _say(found.summary(examples))


@app.command()
def verify(
    root: RootArg,
    version: OldVersionArg = None,
    at: AtOpt = None,
    expected_keys: Annotated[
        Path | None, typer.Option(help="A file of the keys the version must hold exactly, one per line.")
    ] = None,
    progress: ProgressOpt = None,
    num_workers: Annotated[int, typer.Option(min=0, help="Processes that read and hash the chunks (0: this one).")] = 0,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a version against its data; exit code 1 if anything is wrong."""
    store = _open(root, endpoint_url, storage_option)
    keys = None
    if expected_keys is not None:
        lines = _read_text(expected_keys).splitlines()
        keys = [_key(store, line.strip()) for line in lines if line.strip()]
    version = _at(at, version, "the VERSION argument")
    report = store.verify(
        None if version is None else version_ref(store, version),
        keys,
        progress=_progress(progress),
        num_workers=num_workers,
    )
    if as_json:
        _print_json(
            {
                "ok": report.ok,
                "version": report.version,
                "records_checked": report.records_checked,
                "chunks_checked": report.chunks_checked,
                "fingerprint": report.fingerprint,
                "problems": report.problems(),
            }
        )
    else:
        _out.print(shown_lines(report.summary(), style="" if report.ok else "red"))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def sql(
    root: RootArg,
    query: Annotated[str, typer.Argument(help="DuckDB SQL over the table `manifest`.", show_default=False)],
    at: AtOpt = None,
    version: OldVersionOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Run DuckDB SQL over a version's manifest (one row per record: key, split, chunk, ...)."""
    store = _open(root, endpoint_url, storage_option)
    version = _at(at, version, "--version")
    result = store.sql(query, None if version is None else version_ref(store, version))
    rows = result.to_pylist()
    if as_json:
        _print_json(interchange.to_json(rows))
        return
    table = Table(*(Column(shown(name)) for name in result.column_names))
    for row in rows:
        table.add_row(*(_cell(value) for value in row.values()))
    _out.print(table)


@app.command()
def audit(
    root: RootArg,
    at: AtOpt = None,
    examples: Annotated[int, typer.Option(min=0, help="Example groups shown of each kind.")] = 5,
    field: Annotated[
        list[str] | None,
        typer.Option("--field", "-f", help="A field to compare (repeat it); default: all but the key and split field."),
    ] = None,
    near: Annotated[bool, typer.Option("--near", help="Also find near duplicates (needs datasketch).")] = False,
    threshold: Annotated[float, typer.Option(help="Near texts: the least estimated Jaccard similarity.")] = 0.8,
    image_distance: Annotated[int, typer.Option(help="Near images: the most bits their hashes differ in.")] = 3,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Find identical (or, --near, near) records under different keys, and across splits; exit code 1 if any."""
    store = _open(root, endpoint_url, storage_option)
    report = store.audit(
        None if at is None else version_ref(store, at),
        fields=field or None,
        near=near,
        threshold=threshold,
        image_distance=image_distance,
        examples=examples,
        progress=_progress(progress),
    )
    if as_json:
        _print_json(
            interchange.to_json(
                {
                    "ok": report.ok,
                    "version": report.version,
                    "records_checked": report.records_checked,
                    "duplicate_group_count": report.duplicate_group_count,
                    "duplicate_record_count": report.duplicate_record_count,
                    "cross_split_group_count": report.cross_split_group_count,
                    "cross_split_record_count": report.cross_split_record_count,
                    "duplicate_groups": [list(group) for group in report.duplicate_groups],
                    "cross_split_groups": [
                        {split: list(keys) for split, keys in group.items()} for group in report.cross_split_groups
                    ],
                    "fields": None if report.fields is None else list(report.fields),
                    "near": report.near,
                    "near_group_count": report.near_group_count,
                    "near_record_count": report.near_record_count,
                    "near_cross_split_group_count": report.near_cross_split_group_count,
                    "near_groups": [
                        {
                            "keys": list(group.keys),
                            "splits": {split: list(keys) for split, keys in group.splits.items()},
                            "scores": group.scores,
                        }
                        for group in report.near_groups
                    ],
                }
            )
        )
    else:
        _out.print(shown_lines(report.summary(), style="" if report.ok else "red"))
    if not report.ok:
        raise typer.Exit(1)
