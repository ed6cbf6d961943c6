"""What a consumer group member subscribed to and was given: the exchanges columns ``subscription`` and
``assignment``, read from the group APIs' opaque bytes.

The compiled matcher hands the bodies of the few exchanges that carry them (JoinGroup, SyncGroup,
ConsumerGroupHeartbeat: a handful per member and rebalance) to :mod:`analyzer.session.details`, which decodes
them with the full decoder; :class:`GroupDetails` reads the consumer protocol from them and keeps the results by
row until the exchanges are drained. The hot
path (Produce, Fetch) never comes here.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from dissectors.kafka import consumer_protocol

JOIN_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT = 11, 14, 68
DETAIL_APIS = frozenset((JOIN_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT))

SUBSCRIPTION_TYPE = pa.list_(pa.string())
ASSIGNMENT_TYPE = pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))]))

# A topic of a KIP-848 assignment is a 16-byte id, named at drain time like every other topic id.
Assigned = list[tuple[str | bytes, list[int]]]


def details(key: int, rq: dict | None, rs: dict | None) -> tuple[list[str] | None, Assigned | None]:
    """(subscription, assignment) of one group exchange from its decoded request and response bodies (None
    where they did not parse); None where the exchange does not carry it."""
    sub: list[str] | None = None
    got: Assigned | None = None
    if key == JOIN_GROUP:
        if rq is not None and rq.get("protocol_type") == "consumer" and rq.get("protocols"):
            sub = consumer_protocol.subscription(rq["protocols"][0].get("metadata"))
    elif key == SYNC_GROUP:
        if rs is not None and not rs.get("error_code") and rs.get("protocol_type") in (None, "consumer"):
            found = consumer_protocol.assignment(rs.get("assignment"))
            got = None if found is None else [(t.topic, t.partitions) for t in found]
    elif key == CONSUMER_GROUP_HEARTBEAT:
        if rq is not None and rq.get("subscribed_topic_names") is not None:
            sub = list(rq["subscribed_topic_names"])
        if rs is not None and not rs.get("error_code") and rs.get("assignment") is not None:
            got = [(t["topic_id"], list(t["partitions"])) for t in rs["assignment"].get("topic_partitions") or ()]
    return sub, got


class GroupDetails:
    """Subscriptions and assignments by exchange row, until the exchange rows are drained."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple[int, list[str] | None, Assigned | None]] = []

    def add(self, row: int, key: int, rq: dict | None, rs: dict | None) -> None:
        """The exchange written as row ``row`` of the exchange columns held now, its bodies decoded."""
        sub, got = details(key, rq, rs)
        if sub is not None or got is not None:
            self.rows.append((row, sub, got))

    def drain(self, n: int, topic_name: Callable[[str | bytes], str | None]) -> tuple[pa.Array, pa.Array]:
        """The ``subscription`` and ``assignment`` columns of the ``n`` rows drained now (null elsewhere)."""
        subs: list = [None] * n
        assigned: list = [None] * n
        for row, sub, got in self.rows:
            if row < n:
                subs[row] = sub
                if got is not None:
                    assigned[row] = [{"topic": topic_name(t), "partitions": p} for t, p in got]
        self.rows = []
        return pa.array(subs, SUBSCRIPTION_TYPE), pa.array(assigned, ASSIGNMENT_TYPE)
