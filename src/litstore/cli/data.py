"""Commands that move records in and out: ``export``, ``import``, ``upsert``, ``delete`` and ``update``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from tqdm.auto import tqdm

import litstore
import litstore.export
from litstore.cli import interchange
from litstore.cli.common import (
    AtOpt,
    EndpointOpt,
    JsonOpt,
    MessageOpt,
    OldVersionOpt,
    ProgressOpt,
    RootArg,
    StorageOpts,
    _at,
    _key,
    _open,
    _print_json,
    _progress,
    _said_commit,
    _say,
    _snapshot,
    _version_doc,
    app,
)
from litstore.errors import (
    InvalidArgumentError,
)
from litstore.snapshot import Key, Snapshot


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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
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
    message: MessageOpt = None,
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
