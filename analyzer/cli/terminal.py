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

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
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


@dataclass(frozen=True)
class Col:
    """A column of a summary table, and how it may give way when the terminal is narrow.

    A key column (``priority`` None) holds what identifies a row or gives its figure: never cut, never
    wrapped (``wrap``: free text that may wrap at spaces, never cut). An optional column (a ``priority``) is
    dropped, lowest priority first, before any key column gives way; its text is cut at ``max_width``.
    ``under``: the key column this one is stacked beneath (two lines in one cell) when key columns alone
    are too wide. ``hoist``: said once in the title when its value is the same on every row.
    """

    header: str
    justify: Literal["left", "right"] = "left"
    priority: int | None = None
    max_width: int | None = None
    wrap: bool = False
    under: str | None = None
    hoist: bool = False


def _cell(value: str | Text) -> Text:
    from rich.text import Text

    return value if isinstance(value, Text) else Text(value)


def _width(text: Text) -> int:
    return max((line.cell_len for line in text.split("\n")), default=0)


def _words(text: Text) -> int:
    return max((len(word) for word in text.plain.split()), default=0)


# Table borders: the left edge, and per column its padding (one each side) and its right edge.
def _overhead(columns: int) -> int:
    return 1 + 3 * columns


def fit_table(console: Console, title: str, columns: Sequence[Col], rows: Sequence[Sequence[str | Text]],
              **table_options: object) -> tuple[Text, Table, str | None]:
    """The title (a line of its own, wrapped at the console's width rather than the table's), a table of
    ``rows`` that fits ``console``'s width without cutting a key cell, and the note that says which columns
    were left out (None when none were). In order, while the table is too wide: constant
    ``hoist`` columns go to the title; headers break and wrap columns wrap at spaces; optional columns are
    dropped, lowest priority first; key columns are stacked ``under`` their partners. Dropped columns then come
    back, highest priority first, where they fit. Only when key columns alone exceed the width does rich fold
    them."""
    from rich.table import Table
    from rich.text import Text

    width = console.width
    cells = [[_cell(v) for v in row] for row in rows]
    names = [c.header for c in columns]
    heading = Text(title)
    shown = list(range(len(columns)))
    for i, col in enumerate(columns):
        values = {row[i].plain for row in cells}
        if col.hoist and len(values) == 1:
            heading.append(f"; {col.header}: ")
            heading.append_text(cells[0][i])  # already inert: a cell of the table
            shown.remove(i)
    below: dict[int, list[int]] = {}  # key column -> the columns stacked under it
    wrapped = False  # headers break at spaces, wrap columns wrap: nothing is lost, but the table is taller

    def need(i: int) -> int:
        """Width of column ``i`` with what is stacked under it: its longest line (word, when wrapped)."""
        col, parts = columns[i], [i, *below.get(i, [])]
        head = max((_words if wrapped else _width)(Text(columns[j].header)) for j in parts)
        texts = [row[j] for row in cells for j in parts]
        body = max(((_words(t) if wrapped and col.wrap else _width(t)) for t in texts), default=0)
        if col.priority is not None and col.max_width is not None:
            body = min(body, col.max_width)
        return max(head, body, 1)

    def total(columns_shown: list[int]) -> int:
        return sum(need(i) for i in columns_shown) + _overhead(len(columns_shown))

    wrapped = total(shown) > width
    dropped: list[int] = []
    for i in sorted((i for i in shown if columns[i].priority is not None), key=lambda i: (columns[i].priority, -i)):
        if total(shown) <= width:
            break
        shown.remove(i)
        dropped.append(i)
    for i, col in enumerate(columns):
        if total(shown) <= width:
            break
        target = names.index(col.under) if col.under in names else None
        if target is not None and i in shown and target in shown:
            below.setdefault(target, []).append(i)
            shown.remove(i)
    for i in sorted(dropped, key=lambda i: (-(columns[i].priority or 0), i)):
        if total(sorted([*shown, i])) <= width:
            shown = sorted([*shown, i])
            dropped.remove(i)
    spare = width - total(shown)
    table = Table(**table_options)
    for i in shown:
        col = columns[i]
        w = need(i)
        if col.wrap and wrapped and spare > 0:  # the room left goes to wrap columns: they wrap no more than needed
            natural = max((_width(row[i]) for row in cells), default=w)
            grow = min(spare, max(0, natural - w))
            w, spare = w + grow, spare - grow
        header = "\n".join(textwrap.fill(columns[j].header, w) for j in [i, *below.get(i, [])])
        table.add_column(Text(header), justify=col.justify, width=w, no_wrap=not col.wrap,
                         overflow="ellipsis" if col.priority is not None else "fold")
    for row in cells:
        out = []
        for i in shown:
            cell = row[i].copy()
            for j in below.get(i, []):
                cell.append("\n")
                cell.append_text(row[j])
            out.append(cell)
        table.add_row(*out)
    note = (f"  not shown at {width} columns: {', '.join(columns[i].header for i in sorted(dropped))} "
            "(a wider terminal shows them; --json has every figure)") if dropped else None
    return heading, table, note


def print_table(console: Console, title: str, columns: Sequence[Col], rows: Sequence[Sequence[str | Text]],
                **table_options: object) -> None:
    """``fit_table``'s title and table printed, with its note under it."""
    heading, table, note = fit_table(console, title, columns, rows, **table_options)
    console.print(heading)
    console.print(table)
    if note:
        console.print(note, style="dim", markup=False, highlight=False)


def address(ip: str | None, port: int | None, missing: str | None = "-") -> str | None:
    """host:port, IPv6 in brackets ([::1]:9092) so the port cannot be read as part of the address."""
    if ip is None:
        return missing
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
