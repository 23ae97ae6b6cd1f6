"""Commands on versions and lines: ``create``, tags, branches, ``merge``, ``restore``, ``gc``, ``compact``,
``upgrade``."""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

import litstore
import litstore.export
from litstore.cli.common import (
    AtOpt,
    EndpointOpt,
    JsonOpt,
    MessageOpt,
    OldVersionArg,
    ProgressOpt,
    RootArg,
    StorageOpts,
    _at,
    _open,
    _options,
    _out,
    _print_json,
    _progress,
    _said_commit,
    _say,
    _tags,
    app,
    version_ref,
)
from litstore.cli.display import shown
from litstore.errors import (
    InvalidArgumentError,
    StoreExistsError,
)
from litstore.format.models import FieldSplit, HashSplit


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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
    progress: ProgressOpt = None,
    endpoint_url: EndpointOpt = None,
    storage_option: StorageOpts = None,
    as_json: JsonOpt = False,
) -> None:
    """Move a store to format 7: its key index on disk with key filters, deletion vectors, listings by delta.

    A format-1 or 2 store first gets a version with the newest version's records,
    chunks and fingerprint whose commit record lists one key run of every record; then
    litstore.json is switched to format 7: from then on every commit writes a key run
    with its key filter (a lookup reads a few blocks and pages of the index instead of
    the manifest), an upsert or delete marks the rows it supersedes dead instead of
    copying chunks, and a commit record lists only the chunks and deletion vectors it
    changes (a compaction's record no longer names the chunks it dropped: its listing is
    whole). A format-3 or 4 store is switched, then given one version whose run carries
    a key filter; a format-5 or 6 store is switched alone. Older versions read as they
    did. Other writers may keep writing meanwhile; it is safe to interrupt and run
    again. On a format-7 store it does nothing unless the newest version's key runs are
    missing or cut short, or --rebuild is given. litstore releases before format 7
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
