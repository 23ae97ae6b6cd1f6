"""What the command line shows of text it did not write: stranger-controlled strings made safe for a terminal.

A store's keys, field names and values, commit messages and metadata, tag names, the
rows of a SQL query and the error messages that quote any of them are written by
whoever wrote the store. Printed as they are, they could drive the terminal: ``ESC ]``
sets the window title, writes the clipboard (OSC 52) or hides a link (OSC 8), ``ESC [2J``
clears the screen, a C1 ``CSI`` (U+009B) does the same on some terminals, and the bidi
overrides (U+202A-U+202E, U+2066-U+2069) make text read differently from what it is.
Handed to rich as ``str``, ``[red]`` or ``[/tmp]`` would be read as markup (text
restyled, or a ``MarkupError``) and rich's highlighter takes time quadratic in the length
of a long word.

So every such string reaches the terminal through :func:`shown` (or :func:`shown_lines`
for a report litstore composed, whose line breaks are its own), and every ``--json``
document through :func:`json_text`:

- C0 controls (newline and tab included), DEL, C1 controls, the bidi controls, the
  line and paragraph separators and lone surrogates (which no terminal encoding can
  write) are shown escaped, ``\\x1b``, ``\\u202e``, ``\\ud800``, the way Python's ``repr``
  shows them; a backslash is shown as it is, so the display is for reading, not for
  parsing (``--json`` is for parsing);
- a value is cut after :data:`SHOWN_CHARACTERS` characters (fewer where a command says,
  such as ``log``'s messages), followed by ``… (N more characters)``, so a 200 KB value
  costs what 2,000 characters cost; rich folds what is left, never hides it;
- the result is a :class:`rich.text.Text`, never parsed as markup or highlighted.

Work is linear in the length of the text (one ``str.translate``).
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

#: How many characters of one value are shown before it is cut.
SHOWN_CHARACTERS = 2000

#: The code points never written to a terminal as they are.
_UNSAFE = [
    *range(0x00, 0x20),  # C0 controls: ESC, BEL, CR, backspace, ...
    0x7F,  # DEL
    *range(0x80, 0xA0),  # C1 controls: CSI (0x9b), OSC (0x9d), ST (0x9c), ...
    0x061C,  # Arabic letter mark
    0x200E,  # left-to-right mark
    0x200F,  # right-to-left mark
    0x2028,  # line separator
    0x2029,  # paragraph separator
    *range(0x202A, 0x202F),  # bidi embeddings and overrides
    *range(0x2066, 0x206A),  # bidi isolates
    *range(0xD800, 0xE000),  # lone surrogates (a str may hold them; no encoding writes them)
]

_TERMINAL_ESCAPES = {point: f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" for point in _UNSAFE}
_JSON_ESCAPES = {point: f"\\u{point:04x}" for point in _UNSAFE}


def escaped(text: str) -> str:
    """``text`` with every unsafe code point (see the module docstring) written as its escape."""
    return text.translate(_TERMINAL_ESCAPES)


def cut(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """``text``, or its first ``limit`` characters and ``… (N more characters)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def shown(text: str, limit: int = SHOWN_CHARACTERS, style: str = "") -> Text:
    """A stranger's string as the terminal may show it: cut, escaped, plain text (never markup).

    A word too long for its table column is folded onto the next lines, not ellipsised
    by rich: what is cut is cut here, and says how much.
    """
    return Text(escaped(cut(text, limit)), style=style, overflow="fold")


def shown_lines(text: str, limit: int = SHOWN_CHARACTERS, style: str = "") -> Text:
    """Like :func:`shown`, keeping the line breaks: for reports litstore wrote that quote a stranger's text."""
    return Text("\n".join(escaped(cut(line, limit)) for line in text.split("\n")), style=style, overflow="fold")


def json_text(document: Any) -> str:
    """``document`` as one JSON text: non-ASCII text as it is, the unsafe code points as ``\\uXXXX`` escapes.

    ``json.dumps`` escapes C0 controls itself but writes DEL, C1 controls, bidi controls
    and lone surrogates as they are; those only ever occur inside JSON strings, where
    ``\\uXXXX`` means the same code point, so the document reads back unchanged.
    """
    return json.dumps(document, ensure_ascii=False).translate(_JSON_ESCAPES)
