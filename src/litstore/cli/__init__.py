"""The ``litstore`` command line: inspect, query, check and maintain a store from a shell.

``litstore COMMAND ROOT ...`` where ``ROOT`` is a local directory or ``s3://bucket/prefix``
(with ``--endpoint-url`` and ``--storage-option KEY=VALUE`` for boto3's client). People
get rich tables; ``--json`` prints one JSON document on stdout for scripts. Progress bars
go to stderr when it is a terminal (``--progress`` / ``--no-progress`` to choose), so a
log file never collects a bar's ``\r`` fragments.

Exit codes (:func:`main`; each error is one line on stderr, never a traceback):

- 0: success;
- 1: a check failed: ``verify`` or ``audit`` found problems, or the data given or read is
  bad (a record refused, a missing image file named by a manifest line, damaged chunks);
- 2: a usage error (a bad option or argument, bad SQL, a store that exists already) and
  any other error (a conflict with another writer, storage failing);
- 3: not found: a key, version, tag or store that is not there.

A branch of a store (``litstore branch ROOT NAME``) is read and written as
``ROOT#branch=NAME`` by every command (``litstore get data/pets#branch=relabel KEY``).

Every command that reads a version takes ``--at VERSION`` (``-V``): a version number
(``3``), a tag name (``release-1``) or an ISO time (``2026-11-30T10:00:00``, UTC unless it
says otherwise: the version current then). A tag whose name also reads as a time wins
over the time. (The older spellings, ``--version``/``-v`` and a positional ``VERSION``,
still work, with a deprecation warning.) ``litstore --version`` prints litstore's version.

Values in JSON: bytes become ``{"$base64": "..."}`` and a dict JSON cannot hold as an
object (one with keys that are not str, or whose only key is ``"$base64"`` or ``"$map"``)
``{"$map": [[key, value], ...]}``; ``import`` reads both back. numpy arrays and tensors
become nested lists, tuples become lists (see :mod:`litstore.cli.interchange`).

Everything a store holds is a stranger's text: keys, field names and values, messages,
metadata, tag names, SQL results and the error messages that quote them reach the
terminal through :mod:`litstore.cli.display` only (control and bidi characters escaped,
long values cut, never rich markup), and ``--json`` through :func:`display.json_text`.

This package is the only importer of typer and rich: ``import litstore`` never loads them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text
from tqdm.auto import tqdm

import litstore
import litstore.export
from litstore.cli import display, interchange
from litstore.cli.display import shown, shown_lines
from litstore.errors import (
    IntegrityError,
    InvalidArgumentError,
    InvalidRecordError,
    KeyNotFoundError,
    LitstoreError,
    StoreExistsError,
    StoreNotFoundError,
    VersionNotFoundError,
)
from litstore.format.models import FieldSplit, HashSplit, Version
from litstore.snapshot import Key, Snapshot, VersionRef

app = typer.Typer(
    name="litstore",
    help="Inspect, query, check and maintain litstore stores (local, s3://, az://, gs://).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Markup, highlighting and emoji codes off: whatever reaches these consoles is shown as it is (see display).
_out = Console(soft_wrap=True, markup=False, highlight=False, emoji=False)
_err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False, emoji=False)


def _show_version(value: bool) -> None:
    if value:
        from litstore import __version__

        _out.print(f"litstore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print litstore's version and exit."),
    ] = False,
) -> None:
    """Inspect, query, check and maintain litstore stores (local, s3://, az://, gs://)."""


def _say(text: str) -> None:
    """Print one line of litstore's own wording that may quote a stranger's text (see :mod:`.display`)."""
    _out.print(shown_lines(text))


def _warn(text: str) -> None:
    _err.print(shown(f"litstore: warning: {text}", style="yellow"))


# -- options every command shares --------------------------------------------------

RootArg = Annotated[str, typer.Argument(help="The store: a local directory or s3://bucket/prefix.", show_default=False)]
EndpointOpt = Annotated[str | None, typer.Option("--endpoint-url", help="S3 endpoint URL (S3-compatible services).")]
StorageOpts = Annotated[
    list[str] | None,
    typer.Option("--storage-option", "-o", help="KEY=VALUE for boto3's S3 client (repeatable); true/false are bools."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
ProgressOpt = Annotated[
    bool | None,
    typer.Option("--progress/--no-progress", help="Show progress bars on stderr (default: when it is a terminal)."),
]
AtOpt = Annotated[
    str | None, typer.Option("--at", "-V", help="The version to read: a number, tag or ISO time (default: latest).")
]
OldVersionOpt = Annotated[str | None, typer.Option("--version", "-v", hidden=True, help="Deprecated: use --at.")]
OldVersionArg = Annotated[str | None, typer.Argument(hidden=True, help="Deprecated: use --at.", show_default=False)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Really do it; without it, only show what would happen.")]


def _at(at: str | None, old: str | None, spelling: str) -> str | None:
    """The ``--at`` version, or the one given in the deprecated ``spelling`` (with a warning)."""
    if old is None:
        return at
    if at is not None:
        raise InvalidArgumentError(f"give the version once, as --at VERSION (not also as {spelling})")
    _warn(f"{spelling} is deprecated: use --at {old}")
    return old


def _progress(progress: bool | None) -> bool:
    """Whether to show progress bars: as asked, else when stderr is a terminal."""
    return sys.stderr.isatty() if progress is None else progress


def _options(endpoint_url: str | None, storage_option: list[str] | None) -> dict[str, Any] | None:
    options: dict[str, Any] = {}
    for item in storage_option or []:
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise InvalidArgumentError(f"--storage-option takes KEY=VALUE, got {item!r}")
        options[name] = {"true": True, "false": False}.get(value.lower(), value)
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options or None


def _open(root: str, endpoint_url: str | None, storage_option: list[str] | None) -> litstore.Store:
    return litstore.open(root, storage_options=_options(endpoint_url, storage_option))


def version_ref(store: litstore.Store, text: str) -> VersionRef:
    """What a ``VERSION`` argument means: a number, else a tag, else an ISO time (see the module docstring)."""
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return text
    return text if text in store.tags else when


def _snapshot(store: litstore.Store, version: str | None) -> Snapshot:
    return store.head() if version is None else store.at(version_ref(store, version))


def _key(store: litstore.Store, text: str) -> Key:
    if store.config.key_type == "int":
        try:
            return int(text)
        except ValueError:
            raise InvalidArgumentError(f"this store's keys are integers, got {text!r}") from None
    return text


# -- values: JSON and Parquet forms, and short summaries -------------------------------


def _cell(value: Any, limit: int = 80) -> Text:
    """A table cell: a string as :func:`display.shown` shows it, any other value as :func:`_summary` does."""
    return shown(value) if isinstance(value, str) else shown(_summary(value, limit))


def _field(name: Any) -> Text:
    """A field name: a str as it is, any other as its export column (``<int 1>``, not ``1``)."""
    return shown(litstore.export.column_name(name))


def _summary(value: Any, limit: int = 80) -> str:
    """A short readable form: bytes and arrays by size and type, media from their headers, long values cut."""
    if isinstance(value, litstore.Media):
        return value.describe()
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return f"<{len(data)} bytes: {data[:8].hex()}{'…' if len(data) > 8 else ''}>"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if tuple(value.shape) == ():  # a numpy scalar
            return repr(value.item())
        return f"<{type(value).__name__} {value.dtype} shape {tuple(value.shape)}>"
    if isinstance(value, dict):
        items = list(value.items())
        shown_items = ", ".join(f"{k!r}: {_summary(v, limit)}" for k, v in items[:16])
        text = "{" + shown_items + (", …" if len(items) > 16 else "") + "}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_summary(v, limit) for v in value[:16]) + (", …" if len(value) > 16 else "") + "]"
    elif isinstance(value, str):
        text = repr(value[:limit])
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _print_json(document: Any) -> None:
    sys.stdout.write(display.json_text(document) + "\n")


def _time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _version_doc(version: Version, tags: list[str]) -> dict[str, Any]:
    return {
        "number": version.number,
        "created_at": version.created_at.isoformat(),
        "operation": version.operation,
        "added": version.added,
        "replaced": version.replaced,
        "removed": version.removed,
        "counts": version.counts,
        "records": version.total,
        "fingerprint": version.fingerprint,
        "message": version.message,
        "metadata": version.metadata,
        "tags": tags,
    }


def _tags(store: litstore.Store) -> dict[str, int]:
    """The store's tags; a file under ``tags/`` whose name is no valid tag name is left out, with a warning."""
    found: dict[str, int] = {}
    for name in store.tags:
        try:
            found[name] = store.tags[name]
        except KeyError:  # not a tag name (a stray file), or a tag removed since it was listed
            _warn(f"left out tags/{name}.json: not a valid tag")
    return found


def _tags_by_version(store: litstore.Store) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for name, number in _tags(store).items():
        found.setdefault(number, []).append(name)
    return found


# -- commands -------------------------------------------------------------------------


@app.command()
def create(
    root: RootArg,
    key: Annotated[str, typer.Option(help="The record field that holds each record's key.")] = "id",
    splits: Annotated[str | None, typer.Option(help="Hash split fractions, e.g. train=0.9,val=0.1.")] = None,
    split_field: Annotated[
        str | None, typer.Option("--splits-from", "--split-field", help="Take each record's split from this field.")
    ] = None,
    split_names: Annotated[str | None, typer.Option(help="With --splits-from: allowed names, e.g. a,b.")] = None,
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            help="Declare a field NAME:TYPE (int, float, str or bool; TYPE? if it may be missing), repeatable: "
            "its values go in the manifest, so sql and --where filter by it.",
        ),
    ] = None,
    key_type: Annotated[str, typer.Option(help="str or int.")] = "str",
    chunk_bytes: Annotated[int, typer.Option(help="Target size of a chunk file.")] = 64 * 1024 * 1024,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an empty store (version 0)."""
    if splits is not None and split_field is not None:
        raise InvalidArgumentError("give --splits or --splits-from, not both")
    rule: HashSplit | FieldSplit | None = None
    if splits is not None:
        rule = HashSplit(_fractions(splits))
    elif split_field is not None:
        names = {"names": tuple(split_names.split(","))} if split_names else {}
        rule = FieldSplit(field=split_field, **names)
    if key_type not in ("str", "int"):
        raise InvalidArgumentError(f"--key-type must be str or int, got {key_type!r}")
    try:
        store = litstore.Store.create(
            root,
            key=key,
            splits=rule,
            key_type=int if key_type == "int" else str,
            fields=_declared(field or []),
            chunk_bytes=chunk_bytes,
            storage_options=_options(endpoint_url, storage_option),
        )
    except StoreExistsError as exc:
        if "already holds a store" not in str(exc):
            raise
        raise StoreExistsError(
            f"{root} already holds a store: add records with `litstore import {root} FILE`, or create one in a "
            "new directory"
        ) from None
    if as_json:
        _print_json({"root": store.root, "config": store.config.model_dump(mode="json"), "fields": store.fields})
    else:
        declared = f", fields {', '.join(f'{n}:{t}' for n, t in store.fields.items())}" if store.fields else ""
        _say(f"created {store.root}: key {key!r} ({store.config.key_type}), splits {', '.join(store.splits)}{declared}")


#: ``--field NAME:TYPE`` type names, as the declared field types they stand for.
_FIELD_TYPES = {"int": "int64", "float": "float64", "str": "string", "bool": "bool"}


def _declared(specs: list[str]) -> dict[str, str] | None:
    """``--field NAME:TYPE`` options as ``Store.create(fields=...)`` takes them."""
    fields: dict[str, str] = {}
    for spec in specs:
        name, separator, type_name = spec.partition(":")
        optional = type_name.endswith("?")
        base = _FIELD_TYPES.get(type_name.removesuffix("?"), type_name.removesuffix("?"))
        if not separator or not name or base not in _FIELD_TYPES.values():
            raise InvalidArgumentError(
                f"--field takes NAME:TYPE with TYPE int, float, str or bool (TYPE? if it may be missing), got {spec!r}"
            )
        if name in fields:
            raise InvalidArgumentError(f"--field {name!r} is given twice")
        fields[name] = base + ("?" if optional else "")
    return fields or None


def _fractions(text: str) -> dict[str, float]:
    fractions: dict[str, float] = {}
    for part in text.split(","):
        name, separator, value = part.partition("=")
        try:
            fractions[name.strip()] = float(value)
        except ValueError:
            separator = ""
        if not separator:
            raise InvalidArgumentError(f"--splits takes NAME=FRACTION,... (e.g. train=0.9,val=0.1), got {text!r}")
    return fractions


#: How much of each message ``log`` shows (``show`` shows more).
_LOG_MESSAGE_CHARACTERS = 200


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
def tag(
    root: RootArg,
    name: Annotated[str, typer.Argument(help="The tag name.", show_default=False)],
    version: OldVersionArg = None,
    at: AtOpt = None,
    move: Annotated[bool, typer.Option(help="Point an existing tag at another version.")] = False,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Name a version."""
    store = _open(root, endpoint_url, storage_option)
    version = _at(at, version, "the VERSION argument")
    created = store.tags.create(name, None if version is None else version_ref(store, version), move=move)
    if as_json:
        _print_json({"name": created.name, "version": created.version})
    else:
        _say(f"tag {created.name} -> version {created.version}")


@app.command()
def tags(
    root: RootArg, endpoint_url: EndpointOpt = None, storage_option: StorageOpts = None, as_json: JsonOpt = False
) -> None:
    """List the tags."""
    named = _tags(_open(root, endpoint_url, storage_option))
    if as_json:
        _print_json(named)
        return
    table = Table("tag", "version")
    for name, number in named.items():
        table.add_row(shown(name), Text(str(number)))
    _out.print(table)


@app.command()
def untag(
    root: RootArg,
    name: Annotated[str, typer.Argument(help="The tag to remove.", show_default=False)],
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a tag (the version it named stays)."""
    _open(root, endpoint_url, storage_option).tags.delete(name)
    if as_json:
        _print_json({"removed": name})
    else:
        _say(f"removed tag {name}")


@app.command()
def branch(
    root: RootArg,
    name: Annotated[str, typer.Argument(help="The branch's name.", show_default=False)],
    at: AtOpt = None,
    delete: Annotated[
        bool,
        typer.Option(
            "--delete", "-d", help="Delete the branch instead (its chunks go with the next gc that finds them unused)."
        ),
    ] = False,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a branch from a version (default: the latest); read and write it as ROOT#branch=NAME. With --delete,
    delete it."""
    store = _open(root, endpoint_url, storage_option)
    if delete:
        if at is not None:
            raise typer.BadParameter("--at names where a new branch starts: not with --delete")
        store.branches.delete(name)
        if as_json:
            _print_json({"deleted": name})
        else:
            _say(f"deleted branch {name}")
        return
    made = store.branches.create(name, None if at is None else version_ref(store, at))
    if as_json:
        _print_json({"name": made.name, "base": made.base, "from_version": made.from_version})
    else:
        _say(f"branch {made.name} from version {made.from_version} of {made.base}")


@app.command()
def branches(
    root: RootArg, endpoint_url: EndpointOpt = None, storage_option: StorageOpts = None, as_json: JsonOpt = False
) -> None:
    """List the branches: each one's base, the version it starts from, and its newest version."""
    store = _open(root, endpoint_url, storage_option)
    rows = [
        (made.name, made.base, made.from_version, store.at(f"branch:{made.name}").version.number)
        for made in store.branches.values()
    ]
    if as_json:
        _print_json([{"name": n, "base": b, "from_version": f, "head": h} for n, b, f, h in rows])
        return
    table = Table("branch", "base", "from", "head")
    for name, base, start, head in rows:
        table.add_row(shown(name), shown(base), Text(str(start)), Text(str(head)))
    _out.print(table)


@app.command()
def merge(
    root: RootArg,
    source: Annotated[str, typer.Argument(help="The branch whose changes to apply.", show_default=False)],
    into: Annotated[str, typer.Option(help="The line to apply them to.")] = "main",
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply a branch's changes since it parted to another line (default: main), by key, as one new version."""
    store = _open(root, endpoint_url, storage_option)
    before = store.at(f"branch:{into}").version.number
    _said_commit(store.merge(source, into=into, message=message), before, as_json, "nothing to merge")


@app.command()
def restore(
    root: RootArg,
    version: Annotated[
        str, typer.Argument(help="The version to restore: a number, tag or ISO time.", show_default=False)
    ],
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Commit a new version with exactly the records of an earlier one (nothing is copied)."""
    store = _open(root, endpoint_url, storage_option)
    before = store.version.number
    _said_commit(store.restore(version_ref(store, version), message=message), before, as_json, "already restored")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str, option: str) -> timedelta | datetime:
    """``30m``, ``12h``, ``7d``, ``2w`` (a duration) or an ISO time."""
    match = _DURATION.fullmatch(text.strip())
    if match:
        return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{option} takes a duration like 30m, 12h, 7d, 2w or an ISO time, got {text!r}"
        ) from None


@app.command()
def gc(
    root: RootArg,
    keep_last: Annotated[int | None, typer.Option(help="Keep the last N versions.")] = None,
    older_than: Annotated[str | None, typer.Option(help="Expire versions older than this (7d, 12h, ISO time).")] = None,
    grace: Annotated[str | None, typer.Option(help="Never remove unreferenced files younger than this (1h).")] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Really remove; without it, only show what would go.")
    ] = False,
    break_leases: Annotated[
        bool,
        typer.Option(
            "--break-leases",
            help="Also remove staged fragments whose lease still holds (debris of killed writers, at once); "
            "a commit of one then fails with StagedFragmentExpiredError.",
        ),
    ] = False,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Expire old versions and remove unreferenced files: a dry run unless --yes."""
    store = _open(root, endpoint_url, storage_option)
    window = None if grace is None else parse_age(grace, "--grace")
    if isinstance(window, datetime):
        raise InvalidArgumentError(f"--grace takes a duration like 1h, got {grace!r}")
    report = store.gc(
        keep_last,
        None if older_than is None else parse_age(older_than, "--older-than"),
        dry_run=not yes,
        grace=window,
        break_leases=break_leases,
        progress=_progress(progress),
    )
    if as_json:
        _print_json(asdict(report))
        return
    _say(report.summary())
    for path in report.removed_files:
        _out.print(shown(f"  {path}"))
    if report.dry_run and (report.removed_files or report.expired_versions):
        _say("dry run: nothing was removed; pass --yes to remove these")


@app.command()
def compact(
    root: RootArg,
    min_fill: Annotated[float, typer.Option(help="Rewrite chunks smaller than this fraction of the target.")] = 0.5,
    min_live: Annotated[
        float, typer.Option(help="Rewrite chunks whose live rows are fewer than this fraction of their rows.")
    ] = 0.8,
    target_chunk_bytes: Annotated[int | None, typer.Option(help="Chunk size to aim for (default: the store's)")] = None,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite under-filled chunks and chunks with many dead rows into full ones, as a new version with the same
    records."""
    store = _open(root, endpoint_url, storage_option)
    before = store.version.number
    chunks_before = sum(len(chunks) for chunks in store.chunks().values())
    after = store.compact(
        target_chunk_bytes=target_chunk_bytes,
        min_fill=min_fill,
        min_live=min_live,
        message=message,
        progress=_progress(progress),
    )
    chunks_after = sum(len(chunks) for chunks in store.chunks().values())
    if as_json:
        _print_json(
            {
                "compacted": after.number != before,
                "version": after.number,
                "chunks_before": chunks_before,
                "chunks_after": chunks_after,
            }
        )
    elif after.number == before:
        _say(f"nothing to compact: version {before} has {chunks_before} chunks")
    else:
        _say(f"version {after.number}: {chunks_before} chunks -> {chunks_after}")


@app.command()
def upgrade(
    root: RootArg,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild", help="Write the key index again even if it opens (a lookup reported a damaged key run)."
        ),
    ] = False,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Move a store to format 6: its key index on disk with key filters, deletion vectors, listings by delta.

    A format-1 or 2 store first gets a version with the newest version's records,
    chunks and fingerprint whose commit record lists one key run of every record; then
    litstore.json is switched to format 6: from then on every commit writes a key run
    with its key filter (a lookup reads a few blocks and pages of the index instead of
    the manifest), an upsert or delete marks the rows it supersedes dead instead of
    copying chunks, and a commit record lists only the chunks and deletion vectors it
    changes. A format-3 or 4 store is switched, then given one version whose run
    carries a key filter; a format-5 store is switched alone. Older versions read as
    they did. Other writers may keep writing meanwhile; it is safe to interrupt and run
    again. On a format-6 store it does nothing unless the newest version's key runs are
    missing or cut short, or --rebuild is given. litstore releases before format 6
    refuse the store afterwards.
    """
    store = _open(root, endpoint_url, storage_option)
    format_before, before = store.config.format_version, store.version.number
    after = store.upgrade(rebuild=rebuild, message=message, progress=_progress(progress))
    committed = after.number != before and after.operation == "upgrade"
    runs = len(after.key_runs)
    if as_json:
        _print_json(
            {
                "committed": committed,
                "format_before": format_before,
                "format_version": store.config.format_version,
                "version": after.number,
                "records": after.total,
                "key_runs": runs,
            }
        )
    elif format_before >= store.config.format_version and not committed:
        _say(
            f"nothing to do: the store is format {format_before} and version {after.number}'s key index is on disk "
            f"({after.total} records in {runs} key runs); --rebuild writes it again"
        )
    elif not committed:
        _say(
            f"upgraded to format {store.config.format_version}: version {after.number} had its key index already "
            f"(format {format_before} {'has it' if format_before >= 3 else 'was left by an upgrade that stopped'})"
        )
    else:
        done = "rebuilt the key index" if format_before >= 3 else f"upgraded to format {store.config.format_version}"
        _say(f"{done}: version {after.number} indexes its {after.total} records in one key run")


def _split_keys(snapshot: Snapshot, split: str | None) -> set[Key] | None:
    """The keys of ``split`` in ``snapshot`` (``None``: every split)."""
    if split is None:
        return None
    if split not in snapshot.splits:
        raise litstore.SplitError(f"unknown split {split!r}; this store's splits are {snapshot.splits}")
    manifest = snapshot.manifest()
    splits = manifest.column("split").to_pylist()
    return {key for key, where in zip(manifest.column("key").to_pylist(), splits) if where == split}


@app.command("export")
def export(
    root: RootArg,
    out: Annotated[Path, typer.Argument(help="OUT.jsonl or OUT.parquet.", show_default=False)],
    at: AtOpt = None,
    version: OldVersionOpt = None,
    split: Annotated[str | None, typer.Option(help="Only this split's records.")] = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a version's records to JSONL (bytes as {"$base64": ...}) or Parquet (Snapshot.to_arrow's columns).

    The file appears whole or not at all. JSONL streams; Parquet holds the version's
    table in memory while it is written.
    """
    kind = interchange.file_kind(out)
    store = _open(root, endpoint_url, storage_option)
    snapshot = _snapshot(store, _at(at, version, "--version"))
    keys = _split_keys(snapshot, split)
    total = len(snapshot) if keys is None else len(keys)
    partial = out.with_name(out.name + ".partial")
    try:
        if kind == "jsonl":
            key_field = snapshot.config.key
            stored = litstore.keeping_media(snapshot.values())
            records = (record for record in stored if keys is None or record[key_field] in keys)
            shown = tqdm(
                records, total=total, desc="exporting", unit="record", disable=not _progress(progress), file=sys.stderr
            )
            interchange.write_jsonl(partial, shown)
        else:
            interchange.write_parquet(partial, snapshot, keys)
        os.replace(partial, out)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    if as_json:
        _print_json({"path": str(out), "records": total, "version": snapshot.version.number})
    else:
        _say(f"wrote {total} records of version {snapshot.version.number} to {out}")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc}") from None


ImageFieldOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--image-field",
        help="A JSONL field whose string values are image paths, relative to the file's folder (repeatable; "
        "default: image). Each file is read, checked to decode and stored as LitData's image recipe stores it.",
    ),
]
NoImagesOpt = Annotated[
    bool, typer.Option("--no-image-paths", help="Keep every string as it is: resolve no image paths.")
]
AllowOutsideOpt = Annotated[
    bool, typer.Option("--allow-outside", help="Also read image paths that lead out of the file's folder.")
]


def _write_file(
    mode: str,
    root: str,
    source: Path,
    image_field: list[str] | None,
    no_image_paths: bool,
    allow_outside: bool,
    message: str | None,
    progress: bool | None,
    endpoint_url: str | None,
    storage_option: list[str] | None,
    as_json: bool,
) -> None:
    """``import`` and ``upsert``: commit the records of a JSONL or Parquet file, and say what was done."""
    interchange.file_kind(source)
    if not source.is_file():
        raise InvalidArgumentError(f"cannot read {source}: no such file")
    image_fields = () if no_image_paths else tuple(image_field or ["image"])
    store = _open(root, endpoint_url, storage_option)
    before = store.version.number
    counted = _Counted(interchange.read_records(source, image_fields=image_fields, allow_outside=allow_outside))
    write = store.upsert if mode == "upsert" else store.append
    version = write(counted.counting(image_fields), message=message, progress=_progress(progress))
    read = f"{counted.records} records" + (f", {counted.images} images" if image_fields else "")
    if as_json:
        document = _version_doc(version, []) | {"committed": version.number != before}
        _print_json(document | {"read": {"records": counted.records, "images": counted.images}})
    elif version.number == before:
        _say(f"read {read} from {source}; nothing to commit: version {before} already holds these records")
    else:
        changes = f"+{version.added} ~{version.replaced} -{version.removed}"
        _say(f"read {read} from {source}; version {version.number}: {changes}, {version.total} records")


class _Counted:
    """Records passed on to a write, counted: how many, and how many image files they hold."""

    def __init__(self, records: Iterable[dict[Any, Any]]) -> None:
        self._records = records
        self.records = 0
        self.images = 0

    def counting(self, image_fields: tuple[str, ...]) -> Iterable[dict[Any, Any]]:
        for record in self._records:
            self.records += 1
            self.images += sum(1 for name in image_fields if type(record.get(name)).__name__ == "Image")
            yield record


@app.command("import")
def import_(
    root: RootArg,
    source: Annotated[Path, typer.Argument(help="SOURCE.jsonl or SOURCE.parquet.", show_default=False)],
    upsert: Annotated[bool, typer.Option(help="Replace records whose keys exist (default: refuse them).")] = False,
    image_field: ImageFieldOpt = None,
    no_image_paths: NoImagesOpt = False,
    allow_outside: AllowOutsideOpt = False,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Append the records of a JSONL manifest or Parquet file as one new version (see `litstore upsert`).

    In JSONL, the string value of an image field (`image` unless --image-field says
    otherwise) is the path of an image file relative to the manifest's folder, as in
    LitData's image recipe: the file is read, checked to decode, and stored. A path that
    names no file, or leads out of the folder, refuses the manifest, naming its line
    (exit code 1); nothing is committed. Bytes are {"$base64": ...}.
    """
    mode = "upsert" if upsert else "append"
    _write_file(
        mode, root, source, image_field, no_image_paths, allow_outside, message, progress, endpoint_url,
        storage_option, as_json,
    )  # fmt: skip


@app.command("upsert")
def upsert_(
    root: RootArg,
    source: Annotated[Path, typer.Argument(help="SOURCE.jsonl or SOURCE.parquet.", show_default=False)],
    image_field: ImageFieldOpt = None,
    no_image_paths: NoImagesOpt = False,
    allow_outside: AllowOutsideOpt = False,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Insert the records of a JSONL or Parquet file and replace those whose keys exist, as one new version.

    Read as `litstore import` reads it (image paths included); unchanged records are not counted.
    """
    _write_file(
        "upsert", root, source, image_field, no_image_paths, allow_outside, message, progress, endpoint_url,
        storage_option, as_json,
    )  # fmt: skip


WhereOpt = Annotated[
    str | None,
    typer.Option("--where", help='A SQL condition on the manifest\'s columns and declared fields, e.g. "label = 2".'),
]


@app.command()
def delete(
    root: RootArg,
    keys: Annotated[list[str] | None, typer.Argument(help="Keys of the records to remove.", show_default=False)] = None,
    where: WhereOpt = None,
    missing_ok: Annotated[bool, typer.Option(help="Pass over keys the store does not hold.")] = False,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove records, by key or by --where, as one new version."""
    if bool(keys) == (where is not None):
        raise InvalidArgumentError("give the keys to delete or --where CONDITION, one of the two")
    store = _open(root, endpoint_url, storage_option)
    before = store.version.number
    if where is not None:
        version = store.delete(where=where, message=message)
    else:
        version = store.delete([_key(store, key) for key in keys or []], missing_ok=missing_ok, message=message)
    _said_commit(version, before, as_json, "removed nothing")


@app.command()
def update(
    root: RootArg,
    keys: Annotated[list[str] | None, typer.Argument(help="Keys of the records to change.", show_default=False)] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="NAME=VALUE, repeatable: set the top-level field NAME. VALUE is read as JSON (3, true, null, "
            '[1, 2], "3"); anything that is not JSON is a string.',
        ),
    ] = None,
    where: WhereOpt = None,
    message: Annotated[str | None, typer.Option(help="The new version's message.")] = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Set fields of records, by key or by --where, as one new version; every other field stays as stored."""
    if bool(keys) == (where is not None):
        raise InvalidArgumentError("give the keys to update or --where CONDITION, one of the two")
    values = _assignments(set_ or [])
    store = _open(root, endpoint_url, storage_option)
    before = store.version.number
    if where is not None:
        version = store.update(values, where=where, message=message)
    else:
        version = store.update({_key(store, key): values for key in keys or []}, message=message)
    _said_commit(version, before, as_json, "changed nothing")


def _assignments(items: list[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` options as the fields to set (see ``update --help``)."""
    if not items:
        raise InvalidArgumentError("give at least one --set NAME=VALUE")
    values: dict[str, Any] = {}
    for item in items:
        name, separator, text = item.partition("=")
        if not separator or not name:
            raise InvalidArgumentError(f"--set takes NAME=VALUE, got {item!r}")
        try:
            values[name] = json.loads(text, object_hook=interchange.json_object_hook)
        except ValueError:  # not JSON (a bare word): the string itself
            values[name] = text
    return values


def _said_commit(version: Version, before: int, as_json: bool, nothing: str) -> None:
    """Print what a write committed (or that it committed nothing)."""
    if as_json:
        _print_json(_version_doc(version, []) | {"committed": version.number != before})
    elif version.number == before:
        _say(f"{nothing}: version {before} is unchanged")
    else:
        changes = f"+{version.added} ~{version.replaced} -{version.removed}"
        _say(f"version {version.number}: {changes}, {version.total} records")


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


def _one_line(error: BaseException) -> str:
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


#: Errors that mean something asked for is not there: exit code 3.
NOT_FOUND: tuple[type[LitstoreError], ...] = (KeyNotFoundError, VersionNotFoundError, StoreNotFoundError)

#: Errors that mean the data given or read is bad: exit code 1, as for a failed check.
BAD_DATA: tuple[type[LitstoreError], ...] = (InvalidRecordError, IntegrityError)


def exit_code(error: LitstoreError) -> int:
    """The exit code of a command that raised ``error`` (see the module docstring): 3, 1 or 2."""
    if isinstance(error, NOT_FOUND):
        return 3
    if isinstance(error, BAD_DATA):
        return 1
    return 2


def main(argv: Iterable[str] | None = None) -> None:
    """Run the command line (the ``litstore`` console script); exits with 0, 1, 2 or 3 (see the module docstring)."""
    try:
        app(args=None if argv is None else list(argv), prog_name="litstore")
    except LitstoreError as exc:
        _err.print(shown(f"litstore: error: {_one_line(exc)}", style="red"))
        sys.exit(exit_code(exc))
