"""The heartbeats of the broker-driven group protocols: the ``group_heartbeats`` table.

KIP-848 consumer groups (ConsumerGroupHeartbeat), share groups (KIP-932, ShareGroupHeartbeat) and Streams groups
(KIP-1071, StreamsGroupHeartbeat) have no JoinGroup and SyncGroup: a member heartbeats with its member epoch
and what it owns, and the coordinator answers with its epoch and, when it changed, its new assignment (topic
partitions; for Streams, tasks). Member epoch 0 in a request joins, -1 leaves, -2 leaves as a static member. A
row per exchange keeps all of it; the groups table's KIP-848 rows are made from these rows
(analyzer.derived.groups).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT, STREAMS_GROUP_HEARTBEAT = 68, 76, 88
HEARTBEAT_APIS = {CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat", SHARE_GROUP_HEARTBEAT: "ShareGroupHeartbeat",
                  STREAMS_GROUP_HEARTBEAT: "StreamsGroupHeartbeat"}
TASK_KINDS = ("active", "standby", "warmup")


class GroupHeartbeat(NamedTuple):
    """One row of group_heartbeats as the session writes it (capture file and error name come later; topic ids
    in ``owned`` and ``assignment`` are named when the rows are drained)."""

    connection_id: int
    correlation_id: int
    client_id: str | None
    client_ip: str | None
    client_port: int | None
    broker_ip: str | None
    broker_port: int | None
    api_name: str
    api_version: int
    request_ts: int | None
    response_ts: int | None
    group_id: str | None = None
    member_id: str | None = None
    instance_id: str | None = None
    rack_id: str | None = None
    request_epoch: int | None = None
    response_epoch: int | None = None
    rebalance_timeout_ms: int | None = None
    subscribed_topics: list[str] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: list | None = None
    assignment: list | None = None
    owned_tasks: list[dict] | None = None
    tasks: list[dict] | None = None
    heartbeat_interval_ms: int | None = None
    error_code: int | None = None
    error_message: str | None = None


def _partitions(entries) -> list[tuple[str | bytes, list[int]]] | None:
    if entries is None:
        return None
    return [(t.get("topic_id"), list(t.get("partitions") or ())) for t in entries]


def _tasks(body: dict) -> list[dict] | None:
    """A Streams heartbeat's tasks, active, standby and warm-up (None when the body leaves them out: unchanged)."""
    if all(body.get(f"{kind}_tasks") is None for kind in TASK_KINDS):
        return None
    return [{"kind": kind, "subtopology_id": t.get("subtopology_id"), "partitions": list(t.get("partitions") or ())}
            for kind in TASK_KINDS for t in body.get(f"{kind}_tasks") or ()]


def heartbeat_of(key: int, rq: dict | None, rs: dict | None, base: GroupHeartbeat) -> GroupHeartbeat:
    """The row of one heartbeat exchange from its decoded bodies (None where they did not parse)."""
    fields: dict = {}
    if rq is not None:
        fields.update(group_id=rq.get("group_id"), member_id=rq.get("member_id") or None,
                      instance_id=rq.get("instance_id"), rack_id=rq.get("rack_id"),
                      request_epoch=rq.get("member_epoch"), rebalance_timeout_ms=rq.get("rebalance_timeout_ms"),
                      subscribed_topics=rq.get("subscribed_topic_names"),
                      subscribed_regex=rq.get("subscribed_topic_regex"), server_assignor=rq.get("server_assignor"))
        if key == STREAMS_GROUP_HEARTBEAT:
            fields["owned_tasks"] = _tasks(rq)
        else:
            fields["owned"] = _partitions(rq.get("topic_partitions"))
    if rs is not None:
        fields.update(error_code=rs.get("error_code"), error_message=rs.get("error_message"),
                      response_epoch=rs.get("member_epoch"), heartbeat_interval_ms=rs.get("heartbeat_interval_ms"))
        if rs.get("member_id"):
            fields["member_id"] = rs["member_id"]
        if key == STREAMS_GROUP_HEARTBEAT:
            fields["tasks"] = _tasks(rs)
        elif rs.get("assignment") is not None:
            fields["assignment"] = _partitions(rs["assignment"].get("topic_partitions"))
    return base._replace(**fields)


class GroupHeartbeats:
    """The group_heartbeats rows of the exchanges answered so far, until they are drained."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[GroupHeartbeat] = []

    def add(self, base: GroupHeartbeat, key: int, rq: dict | None, rs: dict | None) -> None:
        self.rows.append(heartbeat_of(key, rq, rs, base))

    def drain(self, topic_name: Callable[[str | bytes], str | None]) -> list[GroupHeartbeat]:
        """The rows, topic ids named (by the names the run knows now)."""
        rows, self.rows = self.rows, []
        return [r._replace(owned=_named(r.owned, topic_name), assignment=_named(r.assignment, topic_name))
                for r in rows]

    def __len__(self) -> int:
        return len(self.rows)


def _named(entries: list | None, topic_name: Callable[[str | bytes], str | None]) -> list[dict] | None:
    if entries is None:
        return None
    return [{"topic": topic_name(t), "partitions": p} for t, p in entries]
