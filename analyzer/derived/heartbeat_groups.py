"""The groups table's rows of the broker-driven protocols: KIP-848 consumer groups, share groups and Streams
groups, one row per group epoch, from the group_heartbeats table.

In these protocols the coordinator computes the assignment. When the group changes (a member joins, leaves or
changes its subscription) it bumps the group epoch; each member then moves to that epoch on its own: it first
gives up what it must (its heartbeats stop listing those partitions as owned), is answered with the new epoch
and its assignment, and acknowledges by listing what it was given. Members keep the partitions that do not move,
so a rebalance stops no one entirely; what stops is each moved partition, from the heartbeat of the member that
released it to the heartbeat of the member that owns it next. Those moves (``moved``) and the time each member
took to reconcile (``waited_ms``) are what an operator asks about.

Streams groups assign tasks, not partitions: a task is written as a pseudo-topic ``<subtopology> (<kind>)``
with its partitions in ``assignment``. Share groups share partitions and acknowledge nothing: a member is
reconciled when its assignment arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from analyzer.tables.schemas import GROUPS_SCHEMA

COLUMNS = ("capture_file", "connection_id", "client_id", "client_ip", "client_port", "broker_ip", "broker_port",
           "api_name", "request_ts", "response_ts", "group_id", "member_id", "instance_id", "request_epoch",
           "response_epoch", "subscribed_topics", "subscribed_regex", "server_assignor", "owned", "assignment",
           "owned_tasks", "tasks", "error_name")
PROTOCOLS = {"ConsumerGroupHeartbeat": "consumer", "ShareGroupHeartbeat": "share", "StreamsGroupHeartbeat": "streams"}
LOSING_ERRORS = frozenset(("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"))
"""Heartbeat errors after which the member has lost its partitions and joins again (epoch 0)."""

Unit = tuple  # (topic, partition), or for Streams (subtopology (kind), partition)


@dataclass
class _AtEpoch:
    """A member's part in one group epoch."""

    member_id: str
    instance_id: str | None = None
    client_id: str | None = None
    client_ip: str | None = None
    client_port: int | None = None
    connection_id: int | None = None
    subscription: list[str] | None = None
    assignment: frozenset[Unit] | None = None
    join_ts: datetime | None = None
    synced_ts: datetime | None = None
    left_ts: datetime | None = None
    heartbeats: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class _Epoch:
    capture_file: str
    group_id: str
    protocol: str
    epoch: int
    broker_ip: str | None = None
    broker_port: int | None = None
    assignor: str | None = None
    members: dict[str, _AtEpoch] = field(default_factory=dict)
    moved: list[dict] = field(default_factory=list)
    last_seen: datetime | None = None

    def seen(self, ts: datetime | None) -> None:
        if ts is not None and (self.last_seen is None or ts > self.last_seen):
            self.last_seen = ts


@dataclass
class _Member:
    epoch: int | None = None
    assignment: frozenset[Unit] | None = None
    owned: frozenset[Unit] = frozenset()
    subscription: list[str] | None = None
    revoked_ts: datetime | None = None  # the request answered with a smaller assignment: its move has begun


def _units(r: dict, side: str) -> frozenset[Unit] | None:
    """What a heartbeat says is owned (side 'owned') or assigned ('assignment'); None: unchanged."""
    if r["api_name"] == "StreamsGroupHeartbeat":
        tasks = r["owned_tasks" if side == "owned" else "tasks"]
        if tasks is None:
            return None
        return frozenset((f"{t['subtopology_id']} ({t['kind']})", p) for t in tasks for p in t["partitions"] or ())
    entries = r[side]
    if entries is None:
        return None
    return frozenset((t["topic"], p) for t in entries for p in t["partitions"] or ())


def _taken_back(new: frozenset[Unit], old: frozenset[Unit]) -> bool:
    """Whether an assignment at the same epoch only takes work away (partitions, or Streams' active tasks; a
    Streams member may keep a task it gives up as a standby): the start of a move to the next epoch."""
    def active(units: frozenset[Unit]) -> frozenset[Unit]:
        return frozenset(u for u in units if not str(u[0]).endswith(("(standby)", "(warmup)")))
    return active(new) < active(old)


def _listed(units: frozenset[Unit] | None) -> list[dict] | None:
    if units is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, p in units:
        by_topic.setdefault(topic, []).append(p)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items(),
                                                                        key=lambda i: (i[0] is None, i[0] or ""))]


def heartbeat_groups(heartbeats: pa.Table, counts: pa.Table) -> list[dict]:
    """The groups table's rows (as dicts in GROUPS_SCHEMA) of the heartbeat protocols' groups, from a whole
    run's group_heartbeats rows and the commit counts of ``analyzer.derived.groups.member_counts``."""
    rows = heartbeats.select(list(COLUMNS)).to_pylist()
    rows.sort(key=lambda r: (r["capture_file"] or "", r["group_id"] or "", r["request_ts"] is None,
                             r["request_ts"] or datetime.min, r["connection_id"] or 0))
    epochs: dict[tuple[str, str, int], _Epoch] = {}
    members: dict[tuple[str, str, str], _Member] = {}
    owner: dict[tuple[str, str, Unit], tuple[str, datetime | None]] = {}  # unit -> (member, since)
    released: dict[tuple[str, str, Unit], tuple[str | None, datetime | None]] = {}  # unit -> (member, when)
    changes: dict[tuple[str, str], list[datetime]] = {}  # members joining, leaving, changing subscription

    def release(cap: str, group: str, member_id: str | None, units, ts) -> None:
        for u in units:
            if owner.get((cap, group, u), (None,))[0] == member_id:
                owner.pop((cap, group, u), None)
                released[cap, group, u] = (member_id, ts)

    for r in rows:
        cap, group, member_id = r["capture_file"] or "", r["group_id"], r["member_id"]
        if group is None or member_id is None:
            continue
        protocol = PROTOCOLS.get(r["api_name"], "consumer")
        m = members.setdefault((cap, group, member_id), _Member())
        ts, err = r["request_ts"], r["error_name"]
        at = epochs[cap, group, m.epoch].members.get(member_id) if (cap, group, m.epoch) in epochs else None
        if r["subscribed_topics"] is not None or r["subscribed_regex"] is not None:
            subscription = r["subscribed_topics"] if r["subscribed_topics"] is not None else [r["subscribed_regex"]]
            if subscription != m.subscription and ts is not None:
                changes.setdefault((cap, group), []).append(ts)
            m.subscription = subscription
        if r["request_epoch"] is not None and r["request_epoch"] <= 0 and ts is not None:
            changes.setdefault((cap, group), []).append(ts)
        if at is not None and r["request_epoch"] == m.epoch:
            at.heartbeats += 1
        if r["request_epoch"] is not None and r["request_epoch"] < 0:  # leaving
            if at is not None:
                at.left_ts = ts
            release(cap, group, member_id, m.owned, ts)
            m.owned, m.epoch, m.assignment = frozenset(), None, None
            continue
        owned = _units(r, "owned")
        if owned is not None:
            release(cap, group, member_id, m.owned - owned, ts)
            for u in owned - m.owned:
                before = released.pop((cap, group, u), None)
                owner[cap, group, u] = (member_id, ts)
                if before is not None and before[0] != member_id and (cap, group, m.epoch) in epochs:
                    gap = None if before[1] is None or ts is None else round(
                        (ts - before[1]).total_seconds() * 1000.0, 3)
                    epochs[cap, group, m.epoch].moved.append({
                        "topic": u[0], "partition": u[1], "from_member": before[0], "to_member": member_id,
                        "released_ts": before[1], "acquired_ts": ts, "gap_ms": gap})
            m.owned = owned
        if err is not None and err != "NONE":
            if at is not None and err not in at.errors:
                at.errors.append(err)
            if err in LOSING_ERRORS:  # fenced: it has lost what it held and joins again
                release(cap, group, None if member_id is None else member_id, m.owned, r["response_ts"])
                m.owned, m.epoch, m.assignment = frozenset(), None, None
            continue
        if err is None or r["response_epoch"] is None or r["response_epoch"] <= 0:
            continue
        epoch = r["response_epoch"]
        e = epochs.get((cap, group, epoch))
        if e is None:
            e = epochs[cap, group, epoch] = _Epoch(cap, group, protocol, epoch, r["broker_ip"], r["broker_port"])
        e.seen(r["response_ts"])
        e.assignor = e.assignor or r["server_assignor"]
        at = e.members.get(member_id)
        if at is None:  # its move to this epoch began with the answer that took partitions away, if one did
            at = e.members[member_id] = _AtEpoch(member_id, join_ts=m.revoked_ts or ts)
            m.revoked_ts = None
        at.instance_id = at.instance_id or r["instance_id"]
        at.client_id = at.client_id or r["client_id"]
        at.client_ip = at.client_ip or r["client_ip"]
        at.client_port = at.client_port or r["client_port"]
        at.connection_id = at.connection_id if at.connection_id is not None else r["connection_id"]
        at.subscription = m.subscription
        m.epoch = epoch
        assigned = _units(r, "assignment")
        if assigned is not None and m.assignment is not None and _taken_back(assigned, m.assignment) \
                and m.epoch == epoch and at.assignment is not None:
            m.assignment = assigned  # partitions taken back for the next epoch: this epoch's row keeps its own
            m.revoked_ts = m.revoked_ts or ts
            continue
        if assigned is not None and assigned != m.assignment:
            m.assignment = assigned
            at.synced_ts = None  # given more at the same epoch: reconciled again once it owns it all
        at.assignment = m.assignment
        if at.synced_ts is None and m.assignment is not None:
            if protocol == "share":
                at.synced_ts = r["response_ts"]
            elif m.owned == m.assignment:  # it owns all it was given at this epoch
                at.synced_ts = ts
    commits: dict[tuple, int] = {}
    for c in counts.to_pylist():
        if c["api_name"] == "OffsetCommit":
            key = (c["capture_file"], c["group_id"], c["generation_id"], c["member_id"])
            commits[key] = commits.get(key, 0) + c["requests"]
    return _rows(epochs, commits, changes)


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000.0, 3)


def _rows(epochs: dict[tuple[str, str, int], _Epoch], commits: dict[tuple, int],
          changes: dict[tuple[str, str], list[datetime]]) -> list[dict]:
    out = []
    first_answer = {key: min((m.join_ts for m in e.members.values() if m.join_ts is not None), default=None)
                    for key, e in epochs.items()}
    starts = {}
    for (cap, group, epoch), start in first_answer.items():
        if start is not None:  # what set the epoch off: the last join, leave or new subscription before it
            since = first_answer.get((cap, group, epoch - 1))
            set_off = [t for t in changes.get((cap, group), ()) if t <= start and (since is None or t > since)]
            if set_off:
                start = max(set_off)
        starts[cap, group, epoch] = start
    for (cap, group, epoch), e in sorted(epochs.items()):
        previous = epochs.get((cap, group, epoch - 1))
        following = min((k[2] for k in epochs if k[:2] == (cap, group) and k[2] > epoch), default=None)
        members = sorted(e.members.values(), key=lambda m: (m.join_ts is None, m.join_ts or datetime.min,
                                                             m.member_id))
        start = starts[cap, group, epoch]
        before = set(previous.members) if previous is not None else None
        end = _reconciled(members, before or set())
        gaps = [mv["gap_ms"] for mv in e.moved if mv["gap_ms"] is not None]
        next_start = None
        if following is not None:
            next_start = starts[cap, group, following]
        out.append({
            "capture_file": cap, "group_id": group, "group_protocol": e.protocol, "generation_id": epoch,
            "protocol_type": e.protocol, "protocol_name": e.assignor, "leader": None,
            "broker_ip": e.broker_ip, "broker_port": e.broker_port, "member_count": len(members),
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                "client_ip": m.client_ip, "client_port": m.client_port, "connection_id": m.connection_id,
                "subscription": m.subscription, "assignment": _listed(m.assignment), "join_ts": m.join_ts,
                "synced_ts": m.synced_ts, "left_ts": m.left_ts,
                "waited_ms": _ms(m.join_ts if before is not None and m.member_id not in before and start is not None
                                 and m.join_ts is not None and m.join_ts > start else start, m.synced_ts),
                "heartbeats": m.heartbeats, "commits": commits.get((cap, group, epoch, m.member_id), 0),
                "errors": m.errors} for m in members],
            "joined": None if before is None else sorted(set(e.members) - before),
            "left": None if before is None else sorted(before - set(e.members)),
            "rebalance_start": start, "rebalance_end": end, "rebalance_ms": _ms(start, end),
            "stop_ms": max(gaps) if gaps else None,
            "ended": next_start if next_start is not None else e.last_seen,
            "next_generation_id": following,
            "moved": sorted(e.moved, key=lambda mv: (mv["acquired_ts"] or datetime.min, mv["topic"] or "",
                                                      mv["partition"])) if e.protocol != "share" else None,
        })
    return out


def _reconciled(members: list[_AtEpoch], continuing: set[str]) -> datetime | None:
    """When every member was reconciled at the epoch: the first time by which the members that carried on from
    the epoch before, and those new that had joined by then, all owned what they were given (a member that
    joins later belongs to the next change, not to this one); None if that time never came."""
    for t in sorted({m.synced_ts for m in members if m.synced_ts is not None}):
        required = [m for m in members if m.member_id in continuing or (m.join_ts is not None and m.join_ts <= t)]
        if all(m.synced_ts is not None and m.synced_ts <= t for m in required):
            return t
    return None


def heartbeat_groups_table(heartbeats: pa.Table, counts: pa.Table) -> pa.Table:
    return pa.Table.from_pylist(heartbeat_groups(heartbeats, counts), schema=GROUPS_SCHEMA)
