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


class ExpectedError(NamedTuple):
    """An error that is a step of the protocol, not a failure, when a response of one of ``apis`` holds it."""

    name: str
    apis: tuple[str, ...]
    source: str  # where the protocol says so


_GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
               "TxnOffsetCommit", "ConsumerGroupHeartbeat", "DescribeGroups")
# Operators read failure rates: these answers are how a healthy client and broker move through a rebalance or
# a session reset, and counting them as failures makes every consumer group look broken.
EXPECTED_ERRORS: tuple[ExpectedError, ...] = (
    ExpectedError("MEMBER_ID_REQUIRED", ("JoinGroup",),
                  "KIP-394: a JoinGroup (v4+) without a member id is answered MEMBER_ID_REQUIRED with the id the "
                  "member then joins with"),
    ExpectedError("REBALANCE_IN_PROGRESS", ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit"),
                  "protocol guide, error 27: \"The group is rebalancing, so a rejoin is needed\": how the "
                  "coordinator tells members to rejoin"),
    ExpectedError("FETCH_SESSION_ID_NOT_FOUND", ("Fetch",),
                  "KIP-227: an incremental fetch session the broker evicted; the client starts a new session "
                  "with a full fetch"),
    ExpectedError("NOT_COORDINATOR", (*_GROUP_APIS, "FindCoordinator"),
                  "protocol guide, error 16 (retriable): the coordinator moved; the client finds the new one "
                  "with FindCoordinator and retries"),
)
_EXPECTED = {(e.name, api) for e in EXPECTED_ERRORS for api in e.apis}


def is_expected(error: str | None, api: str | None) -> bool:
    """Whether ``error`` in a response of ``api`` is a protocol step (``EXPECTED_ERRORS``), not a failure."""
    return (error, api) in _EXPECTED


def error_name(code: int) -> str:
    """``"NONE"`` for 0, the guide's name for a known code, ``UNDEFINED_ERROR_<code>`` otherwise."""
    info = ERRORS.get(code)
    return info.name if info is not None else f"UNDEFINED_ERROR_{code}"


def is_retriable(code: int) -> bool | None:
    """Whether the guide marks the error retriable; None for an undefined code."""
    info = ERRORS.get(code)
    return info.retriable if info is not None else None
