"""Capture-derived text made inert for the terminal.

Client ids, topic names, group ids, broker messages, record headers and even file names are written by
strangers. Printed as they are, escape sequences in them drive the operator's terminal (clear the screen,
set the window title, hide the lines that follow), bidirectional overrides make text read backwards, and
rich would take ``[bold]`` or ``[/]`` in them for markup (swallowing text or raising). ``inert`` turns such a
string into one that shows every character and does nothing else; ``inert_text`` wraps it in a rich ``Text``,
which rich prints without markup or emoji codes. Only what goes to a terminal passes here: the tables on
disk keep the exact strings decoded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

_NAMED_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    if char.isprintable():
        return char
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def inert(text: str) -> str:
    """``text`` with every character that is not printable shown as a Python-style escape (``\\x1b``,
    ``\\x85``, ``\\u202e``, ``\\udc80``) and backslashes doubled, so an escape on screen always stands for
    one character of the data.

    Not printable is what ``str.isprintable`` says: Unicode's controls (C0, DEL, C1), format characters
    (bidirectional overrides, zero-width characters), lone surrogates, private-use and unassigned code
    points, and separators other than the ASCII space. Letters, digits, punctuation, symbols and emoji of
    any script are kept as they are.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(map(_escape, text))


def inert_text(text: str | None, style: str = "", missing: str = "-") -> Text:
    """A rich ``Text`` of ``inert(text)`` (``missing``, dimmed, for None): printed as is, never as markup."""
    from rich.text import Text

    if text is None:
        return Text(missing, style="dim")
    return Text(inert(text), style=style)
