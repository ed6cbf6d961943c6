"""The exchanges whose bodies are read in full, beside the compiled extraction: the group and transaction APIs.

They are a few exchanges per member, rebalance or transaction, so the matcher keeps their request bodies while
they are in flight and hands both bodies here when the response arrives. Each is decoded once, by the full
decoder, and goes to the readers of its kind: the exchanges' subscription and assignment columns
(group_details), the group_heartbeats rows (heartbeats), the share_ranges rows (share_groups) and the
transaction_steps rows (transactions).
"""

from __future__ import annotations

from analyzer.session.group_details import DETAIL_APIS as GROUP_APIS
from analyzer.session.group_details import GroupDetails
from analyzer.session.heartbeats import HEARTBEAT_APIS, GroupHeartbeat, GroupHeartbeats
from analyzer.session.share_groups import SHARE_APIS, ShareRanges
from analyzer.session.transactions import TRANSACTION_APIS, TransactionStep, TransactionSteps
from dissectors.kafka.decoder import decode
from dissectors.kafka.headers import HeaderError

DETAIL_APIS = frozenset((*GROUP_APIS, *HEARTBEAT_APIS, *SHARE_APIS, *TRANSACTION_APIS))
"""API keys whose request bodies the matcher keeps for the readers here."""


MAX_BODY = 4 << 20
"""Bytes of a body decoded in full: a dict per field and array element costs a hundred times the bytes, so a
larger body (real ones are a few KB; a ShareFetch response's records are bytes, not elements) is not read, and
its exchange's note says so."""
MAX_SHARE_FETCH_RESPONSE = 64 << 20  # mostly records, which stay bytes


def decoded(data: bytes | None, key: int, version: int, is_response: bool) -> dict | None:
    """A body decoded in full, or None when it is missing, too large or does not parse (the exchange row says
    why)."""
    if data is None or len(data) > _limit(key, is_response):
        return None
    try:
        return decode(data, 0, len(data), key, version, is_response)
    except (HeaderError, ValueError, OverflowError):
        return None


def _limit(key: int, is_response: bool) -> int:
    return MAX_SHARE_FETCH_RESPONSE if is_response and key in SHARE_APIS else MAX_BODY


class ExchangeDetails:
    """Where the matcher hands the answered exchanges of DETAIL_APIS."""

    __slots__ = ("groups", "heartbeats", "shares", "transactions")

    @property
    def held(self) -> int:
        """Rows held for the tables drained with the exchanges (make_room drains them too past its limit)."""
        return len(self.heartbeats) + len(self.shares) + len(self.transactions)

    def __init__(self) -> None:
        self.groups = GroupDetails()
        self.heartbeats = GroupHeartbeats()
        self.shares = ShareRanges()
        self.transactions = TransactionSteps()

    def add(self, row: int, conn, correlation_id: int, client_id: str | None, key: int, version: int,
            request_ts: int | None, response_ts: int | None, request: bytes | None, response: bytes | None
            ) -> str | None:
        """An answered exchange of DETAIL_APIS on connection ``conn`` (its endpoints), to be written as row
        ``row`` of the exchange columns held now; returns what its row's note should add, if anything."""
        rq = decoded(request, key, version, False)
        rs = decoded(response, key, version, True)
        skipped = [f"{side} body of {len(data):,} bytes not read in full (over {_limit(key, side == 'response'):,})"
                   for side, data in (("request", request), ("response", response))
                   if data is not None and len(data) > _limit(key, side == "response")]
        note = "; ".join(skipped) or None
        if key in GROUP_APIS:
            self.groups.add(row, key, rq, rs)
        if key in HEARTBEAT_APIS:
            self.heartbeats.add(GroupHeartbeat(conn.connection_id, correlation_id, client_id, conn.client_ip,
                                               conn.client_port, conn.broker_ip, conn.broker_port,
                                               HEARTBEAT_APIS[key], version, request_ts, response_ts), key, rq, rs)
        elif key in SHARE_APIS:
            shares = self.shares.add({"connection_id": conn.connection_id, "correlation_id": correlation_id,
                                    "client_id": client_id, "client_ip": conn.client_ip, "broker_ip": conn.broker_ip,
                                    "broker_port": conn.broker_port, "api_name": SHARE_APIS[key]},
                                   key, rq, rs, request_ts, response_ts)
            note = "; ".join(n for n in (note, shares) if n) or None
        elif key in TRANSACTION_APIS:
            self.transactions.add(TransactionStep(conn.connection_id, correlation_id, client_id, conn.broker_ip,
                                                  conn.broker_port, TRANSACTION_APIS[key], version, request_ts,
                                                  response_ts), key, version, rq, rs)
        return note
