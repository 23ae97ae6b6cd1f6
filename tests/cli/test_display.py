"""The command line shows a stranger's text as text: no escape sequence, no markup, no quadratic time.

A store is written through the API with keys, field names, values, a commit message and
metadata that carry terminal escape sequences (window title, OSC 52 clipboard write,
OSC 8 hyperlink, screen clear, SGR colours, C1 controls), bidi overrides, rich markup and
a lone surrogate. Every command that prints store content runs through the real typer app
(``litstore.cli.main`` under typer's ``CliRunner`` isolation, so the exit code and the
error line are the console script's) and its output is checked: no unsafe code point
arrives raw, the escapes are visible, markup is shown literally, and a 200 KB value
without spaces is shown cut, quickly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

import litstore
from litstore.cli import display, interchange, main

HOSTILE = (
    "A\x1b]0;owned-title\x07B\x1b]52;c;cHduZWQ=\x07C\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\"
    "D\x1b[2J\x1b[31mE\x9b2JF\x9d0;t\x9cG\u202eH\u2066I\x7fJ\rK\x08L\tM\x00N\ud800O"
)
MARKUP = "[red]P[/red][/tmp][bold]Q:smile:"
TEXT = HOSTILE + MARKUP
KEY = "k\x1b[2J[red]0[/red]\u202e"
LONG = "y" * 200_000

#: Code points that must never reach the terminal raw (newline is the output's own layout).
FORBIDDEN = {chr(point) for point in [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F)]} - {"\n"}
FORBIDDEN |= {chr(point) for point in [*range(0x2066, 0x206A), *range(0xD800, 0xE000)]}


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float


def run(*args: object) -> Run:
    """``litstore ARGS`` as the console script runs it (``main``), its output captured by typer's CliRunner."""
    with CliRunner().isolation() as (stdout, stderr, _):
        start = time.perf_counter()
        try:
            main([str(arg) for arg in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
        seconds = time.perf_counter() - start
        sys.stdout.flush()  # the text streams CliRunner put in place, over stdout and stderr
        sys.stderr.flush()
        out, err = stdout.getvalue().decode("utf-8"), stderr.getvalue().decode("utf-8")
    assert "Traceback" not in err, err
    return Run(code, out, err, seconds)


def flat(text: str) -> str:
    """``text`` without whitespace and table borders: what a cell holds, however rich wrapped it."""
    return re.sub(r"[\s\u2500-\u257f]", "", text)


def assert_safe(text: str) -> None:
    """No unsafe code point arrives raw; the hostile text's escapes and markup are there to read."""
    raw = sorted(FORBIDDEN & set(text))
    assert not raw, f"raw {[hex(ord(char)) for char in raw]} in output"


def assert_shows(output: str, text: str) -> None:
    assert flat(display.escaped(text)) in flat(output), output


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A store whose version 1 carries hostile text everywhere, and version 2 a 200 KB message and value."""
    path = tmp_path / "store"
    store = litstore.Store.create(path)
    store.append(
        [{"id": KEY, "value": TEXT, TEXT: 1, "nested": [TEXT, {"k": TEXT}]}, {"id": "plain", "value": MARKUP}],
        message=TEXT.replace("\ud800", ""),  # a commit record is JSON: no lone surrogate there
        metadata={"note": TEXT.replace("\ud800", "")},
    )
    store.append([{"id": "long", "value": LONG}], message=LONG)
    return path


def test_log(root: Path) -> None:
    result = run("log", root)
    assert result.code == 0
    assert_safe(result.stdout)
    assert_shows(result.stdout, MARKUP)
    assert "\\x1b]0;owned-title\\x07" in flat(result.stdout)
    assert "(199,800morecharacters)" in flat(result.stdout) and result.seconds < 3


def test_show(root: Path) -> None:
    result = run("show", root, "1")
    assert result.code == 0
    assert_safe(result.stdout)
    assert_shows(result.stdout, "message: " + TEXT.replace("\ud800", ""))
    assert "\\u202e" in result.stdout
    long = run("show", root, "2")
    assert long.code == 0 and long.seconds < 3
    assert f"… ({200_000 - display.SHOWN_CHARACTERS:,} more characters)" in long.stdout
    assert len(long.stdout) < 3 * display.SHOWN_CHARACTERS


def test_get(root: Path) -> None:
    result = run("get", root, KEY)
    assert result.code == 0
    assert_safe(result.stdout)
    assert_shows(result.stdout, TEXT)  # the field name that is hostile text, and the value
    long = run("get", root, "long")
    assert long.code == 0 and long.seconds < 3 and "(198,000morecharacters)" in flat(long.stdout)
    plain = run("get", root, "plain")
    assert_shows(plain.stdout, MARKUP)


def test_get_json_escapes_what_json_dumps_leaves_raw(root: Path) -> None:
    result = run("get", root, KEY, "--json")
    assert result.code == 0
    assert_safe(result.stdout)
    assert json.loads(result.stdout, object_hook=interchange.json_object_hook) == litstore.open(root)[KEY]


def test_sql(root: Path) -> None:
    result = run("sql", root, 'SELECT key AS "[red]k\x1b]0;x\x07", split FROM manifest ORDER BY key', "--at", "1")
    assert result.code == 0
    assert_safe(result.stdout)
    assert_shows(result.stdout, KEY)
    assert "[red]k" in result.stdout
    keys = {row["key"] for row in json.loads(run("sql", root, "SELECT key FROM manifest", "--json", "-V", "1").stdout)}
    assert keys == {KEY, "plain"}


def test_tags_lists_valid_tags_and_names_a_stray_file_safely(root: Path) -> None:
    litstore.open(root).tags.create("release", 1)
    (root / "tags" / f"{HOSTILE[:20]}[red]x.json").write_text("{}")  # no valid tag name: not a tag
    for command in ("tags", "log"):
        result = run(command, root)
        assert result.code == 0, result.stderr
        assert "release" in result.stdout
        assert_safe(result.stdout + result.stderr)
        assert "not a valid tag" in result.stderr and "[red]x" in result.stderr
    assert json.loads(run("tags", root, "--json").stdout) == {"release": 1}


def test_diff_and_verify_reports(root: Path, tmp_path: Path) -> None:
    diff = run("diff", root, "0", "1")
    assert diff.code == 0
    assert_safe(diff.stdout)
    assert "[red]0[/red]" in diff.stdout
    expected = tmp_path / "keys.txt"
    expected.write_text("plain\nlong\n")
    report = run("verify", root, "--expected-keys", expected, "--no-progress")
    assert report.code == 1
    assert_safe(report.stdout)
    assert "unexpected keys" in report.stdout and "[red]0[/red]" in report.stdout


def test_an_error_line_quoting_hostile_text_is_escaped(root: Path, tmp_path: Path) -> None:
    path = (
        tmp_path / f"out{HOSTILE.replace(chr(0), '').replace(chr(0xD800), '')}.csv"
    )  # a path holds no NUL or surrogate
    result = run("export", root, path)
    assert result.code == 2 and not result.stdout
    assert_safe(result.stderr)
    assert result.stderr.startswith("litstore: error: ") and "\\x1b]0;owned-title\\x07" in result.stderr
    missing = run("get", root, TEXT)
    assert missing.code == 3  # not found
    assert_safe(missing.stderr)


def test_escaped_is_linear_and_leaves_ordinary_text_alone() -> None:
    assert display.escaped("héllo 日本 🐱 \\x") == "héllo 日本 🐱 \\x"
    assert display.escaped("\x1b\x9b\u202e\ud800\n") == "\\x1b\\x9b\\u202e\\ud800\\x0a"
    start = time.perf_counter()
    display.shown(HOSTILE * 20_000, limit=10**9)
    assert time.perf_counter() - start < 10  # quadratic would take minutes on this input (loaded CI: ~1 s)
    assert json.loads(display.json_text({"v": HOSTILE})) == {"v": HOSTILE}
    assert not FORBIDDEN & set(display.json_text({"v": HOSTILE}))


def test_audit_report(tmp_path: Path) -> None:
    store = litstore.Store.create(tmp_path / "store")
    store.append([{"id": KEY, "value": TEXT}, {"id": "twin", "value": TEXT}])  # identical records, two keys
    result = run("audit", store.root)
    assert result.code == 1
    assert_safe(result.stdout)
    assert "[red]0[/red]" in result.stdout


@pytest.mark.integration
def test_the_console_script_process_writes_no_raw_control_character(root: Path) -> None:
    for args in (["show", root, "1"], ["get", root, KEY], ["log", root]):
        result = subprocess.run(
            [sys.executable, "-m", "litstore", *map(str, args)],
            capture_output=True,
            timeout=60,
            check=False,
            env={**os.environ, "COLUMNS": "100"},
        )
        assert result.returncode == 0, result.stderr
        text = result.stdout.decode("utf-8")
        assert_safe(text)
        assert "[red]" in text
