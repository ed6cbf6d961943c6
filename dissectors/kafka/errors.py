"""Kafka error codes: names as the protocol guide spells them (``NOT_LEADER_OR_FOLLOWER``), retriability.

The data comes from ``_generated/errors.py``. Codes a broker may send that the table does not know (newer
brokers, or edited captures) still get a stable name, so reports can group them.
"""

from __future__ import annotations

from typing import NamedTuple

from dissectors.kafka._generated import errors as _generated


class ErrorInfo(NamedTuple):
    code: int
    name: str
    retriable: bool
    description: str


ERRORS: dict[int, ErrorInfo] = {row[0]: ErrorInfo(*row) for row in _generated.ERRORS}


def error_name(code: int) -> str:
    """``"NONE"`` for 0, the guide's name for a known code, ``UNDEFINED_ERROR_<code>`` otherwise."""
    info = ERRORS.get(code)
    return info.name if info is not None else f"UNDEFINED_ERROR_{code}"


def is_retriable(code: int) -> bool | None:
    """Whether the guide marks the error retriable; None for an undefined code."""
    info = ERRORS.get(code)
    return info.retriable if info is not None else None
