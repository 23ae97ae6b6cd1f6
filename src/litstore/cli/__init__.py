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

import sys
from collections.abc import Iterable

from litstore.cli import data, history, inspect  # noqa: F401  (each module adds its commands to the app)
from litstore.cli.common import _err, app
from litstore.cli.display import shown
from litstore.errors import (
    IntegrityError,
    InvalidRecordError,
    KeyNotFoundError,
    LitstoreError,
    StoreNotFoundError,
    VersionNotFoundError,
)

__all__ = ["app", "exit_code", "main"]

#: The commands in the order ``litstore --help`` lists them: making a store, reading it, its history, data.
_ORDER = (
    "create log show get diff verify sql tag tags untag branch branches merge restore gc compact upgrade "
    "export import upsert delete update audit"
).split()
app.registered_commands.sort(key=lambda command: _ORDER.index(command.name or str(command.callback.__name__)))  # type: ignore[union-attr]


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
