"""Kafka's protocol definitions as the generator reads them, and the protocol guide's generated pages, both made
from the release jars on Maven Central.

The definitions folder comes from ``tools/kafka_definitions.py``, the guide's pages from ``tools/protocol_guide.py``
(both cached after the first run); a test that needs them is skipped where Maven, Java or Maven Central cannot be
reached, and runs on any clone elsewhere.
"""

from __future__ import annotations

import html
import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

from tools import protocol_guide
from tools.kafka_definitions import BEFORE_KIP_896, NEWEST, prepare
from tools.maven import MavenError

__all__ = ["BEFORE_KIP_896", "NEWEST", "Guide", "available", "definitions", "guide"]


@cache
def _prepared() -> Path | str:
    try:
        return prepare()
    except (MavenError, OSError) as exc:
        return str(exc)


def definitions() -> Path:
    """The definitions folder: ``kafka-messages/<release>/`` and ``errors.tsv``."""
    folder = _prepared()
    if isinstance(folder, str):
        pytest.skip(f"Kafka's definitions could not be made from the release jars: {folder}")
    return folder


def available() -> bool:
    """Whether the definitions can be had here (for ``skipif``; made on the first call)."""
    return not isinstance(_prepared(), str)


class Guide(NamedTuple):
    """One release's generated pages of the protocol guide, as text the way the page reads: each line of a grammar
    (``<pre>``) on its own line without its indentation, each table row as ``cell | cell |``, each heading."""

    release: str
    messages: str  # the request and response headers, then per API its heading and every version's grammar
    errors: str  # "Error | Code | Retriable | Description |", then one row per code
    api_keys: str  # "Name | Key |", then one row per API


def page_text(markup: str) -> str:
    """A page printed by Kafka's Protocol, Errors or ApiKeys class, as text."""
    lines = []
    for part in re.split(r"(<pre>.*?</pre>)", markup, flags=re.S):
        if part.startswith("<pre>"):
            lines += [line.strip() for line in html.unescape(part[5:-6]).splitlines() if line.strip()]
            continue
        for element in re.finditer(r"<tr>(.*?)</tr>|<h5>(.*?)</h5>", part, flags=re.S):
            if element[2] is not None:
                lines.append(_plain(element[2]))
            else:
                cells = [_plain(cell) for cell in re.findall(r"<t[dh]>(.*?)</t[dh]>", element[1], flags=re.S)]
                lines.append(" ".join(f"{cell} |" if cell else "|" for cell in cells))
    return "\n".join(lines) + "\n"


def _plain(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


@cache
def _guide(release: str) -> Guide | str:
    try:
        folder = protocol_guide.prepare(release)
        pages = [page_text((folder / page).read_text(encoding="utf-8")) for page in (
            "protocol_messages.html", "protocol_errors.html", "protocol_api_keys.html")]
    except (MavenError, OSError) as exc:
        return str(exc)
    return Guide(release, *pages)


def guide(release: str = BEFORE_KIP_896) -> Guide:
    """``release``'s guide pages, printed by its kafka-clients jar (the 3.9 guide's pages by default: the
    grammars and error table of the 3.9 guide, line for line)."""
    found = _guide(release)
    if isinstance(found, str):
        pytest.skip(f"Kafka {release}'s protocol guide pages could not be printed from its jar: {found}")
    return found
