"""What every ``litstore`` command shares: the typer app, the consoles, the options, and how values are shown."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

import litstore
import litstore.export
from litstore.cli import display
from litstore.cli.display import shown, shown_lines
from litstore.errors import (
    InvalidArgumentError,
)
from litstore.format.models import Version
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
MessageOpt = Annotated[str | None, typer.Option(help="The new version's message.")]


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


#: How much of each message ``log`` shows (``show`` shows more).
_LOG_MESSAGE_CHARACTERS = 200


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc}") from None


def _said_commit(version: Version, before: int, as_json: bool, nothing: str) -> None:
    """Print what a write committed (or that it committed nothing)."""
    if as_json:
        _print_json(_version_doc(version, []) | {"committed": version.number != before})
    elif version.number == before:
        _say(f"{nothing}: version {before} is unchanged")
    else:
        changes = f"+{version.added} ~{version.replaced} -{version.removed}"
        _say(f"version {version.number}: {changes}, {version.total} records")
