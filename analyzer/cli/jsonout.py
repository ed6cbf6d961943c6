"""JSON for scripts: one encoding of values for every command's ``--json`` and for ``export --format jsonl``.

Timestamps are ISO 8601 in UTC with microseconds always written (``2026-11-21T01:48:01.913119+00:00``), so a
script can compare them as text; a float that is not finite (never expected, but the bytes come from strangers)
becomes null rather than the ``NaN`` JSON does not have. Output is ASCII: control characters from a capture are
``\\u`` escapes, inert when the JSON is printed on a terminal.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any


def iso(value: dt.datetime) -> str:
    return value.isoformat(timespec="microseconds")


def plain(value: Any) -> Any:
    """``value`` with every float made finite-or-None, recursively (json.dumps would write NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def default(value: object) -> object:
    if isinstance(value, dt.datetime):
        return iso(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(plain(value), default=default, ensure_ascii=True, indent=indent)
