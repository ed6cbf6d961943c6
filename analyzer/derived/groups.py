"""The ``groups`` table: one row per consumer group generation, from the group APIs' exchanges of a whole run.

A classic group moves from generation to generation through rebalances: every member sends JoinGroup (a new
one first gets MEMBER_ID_REQUIRED and joins again with the id it was given), the coordinator answers all of
them once the group settles with the new generation id, then each member's SyncGroup brings its assignment.
A member stops consuming when it rejoins and resumes when its SyncGroup answer arrives; that gap is what an
operator calls the stop time of a rebalance. Heartbeat and OffsetCommit carry the generation in between;
LeaveGroup ends a membership.

The rows come from the exchanges table's group columns (group_id, member_id, generation_id, ...,
subscription, assignment), so the CLI and the Spark job derive the same table from the same rows. Only
JoinGroup, SyncGroup and LeaveGroup rows are gone over one by one (a few per member and rebalance); heartbeats
and commits are counted by vectorised group-by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import EXCHANGES_SCHEMA, GROUPS_SCHEMA, TS

COLUMNS = ("capture_file", "connection_id", "client_ip", "client_port", "broker_ip", "broker_port", "client_id",
           "api_name", "request_first_ts", "response_last_ts", "error_name", "group_id", "member_id",
           "generation_id", "group_instance_id", "protocol_type", "protocol_name", "group_leader", "subscription",
           "assignment")
# Errors of a JoinGroup that still belong to the member's attempt to join (it tries again at once).
_RETRIED_JOIN = ("MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
                 "UNKNOWN_MEMBER_ID")


DETAIL_APIS = ("JoinGroup", "SyncGroup", "LeaveGroup")
COUNTED_APIS = ("Heartbeat", "OffsetCommit")
COUNT_KEYS = ["capture_file", "group_id", "generation_id", "member_id", "api_name"]
COUNTS_SCHEMA = pa.schema([("capture_file", pa.string()), ("group_id", pa.string()), ("generation_id", pa.int32()),
                           ("member_id", pa.string()), ("api_name", pa.string()), ("requests", pa.int64()),
                           ("last_ts", TS)])


def _with_columns(exchanges: pa.Table) -> pa.Table:
    """``exchanges`` with every column of COLUMNS (an older table's missing ones as nulls of their type)."""
    t = exchanges
    for name in COLUMNS:
        if name not in t.column_names:
            t = t.append_column(EXCHANGES_SCHEMA.field(name), pa.nulls(t.num_rows, EXCHANGES_SCHEMA.field(name).type))
    return t.select(list(COLUMNS)).cast(pa.schema([EXCHANGES_SCHEMA.field(c) for c in COLUMNS]))


def detail_rows(exchanges: pa.Table) -> pa.Table:
    """The JoinGroup, SyncGroup and LeaveGroup rows of ``exchanges`` (a few per member and rebalance), gone
    over one by one; a filter a caller can apply batch by batch."""
    t = _with_columns(exchanges)
    return t.filter(pc.and_(pc.is_in(t["api_name"], pa.array(DETAIL_APIS)), pc.is_valid(t["group_id"])))


def member_counts(exchanges: pa.Table) -> pa.Table:
    """Heartbeats and commits per group, generation, member and API, with the last answer's time: partial
    counts of any slice of the rows, merged by ``merge_counts``."""
    t = _with_columns(exchanges)
    t = t.filter(pc.and_(pc.is_in(t["api_name"], pa.array(COUNTED_APIS)),
                         pc.and_(pc.is_valid(t["group_id"]), pc.is_valid(t["generation_id"]))))
    agg = t.group_by(COUNT_KEYS).aggregate([([], "count_all"), ("response_last_ts", "max")])
    return agg.rename_columns({"count_all": "requests", "response_last_ts_max": "last_ts"}).select(
        COUNTS_SCHEMA.names).cast(COUNTS_SCHEMA)


def merge_counts(parts: list[pa.Table]) -> pa.Table:
    """Partial ``member_counts`` summed."""
    if not parts:
        return COUNTS_SCHEMA.empty_table()
    agg = pa.concat_tables(parts).group_by(COUNT_KEYS).aggregate([("requests", "sum"), ("last_ts", "max")])
    return agg.rename_columns({"requests_sum": "requests", "last_ts_max": "last_ts"}).select(
        COUNTS_SCHEMA.names).cast(COUNTS_SCHEMA)


@dataclass
class _Member:
    member_id: str
    group_instance_id: str | None = None
    client_id: str | None = None
    client_ip: str | None = None
    client_port: int | None = None
    connection_id: int | None = None
    subscription: list | None = None
    assignment: list | None = None
    join_ts: datetime | None = None
    synced_ts: datetime | None = None
    left_ts: datetime | None = None
    heartbeats: int = 0
    commits: int = 0


@dataclass
class _Generation:
    group_id: str
    generation_id: int
    capture_file: str | None = None
    broker_ip: str | None = None
    broker_port: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    last_seen: datetime | None = None

    def seen(self, ts: datetime | None) -> None:
        if ts is not None and (self.last_seen is None or ts > self.last_seen):
            self.last_seen = ts


def _earliest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000.0, 3)


def groups_table(detail: pa.Table, counts: pa.Table) -> pa.Table:
    """The groups table from a whole run's ``detail_rows`` and ``member_counts``."""
    detail = detail.sort_by([("request_first_ts", "ascending")])
    generations: dict[tuple[str, str, int], _Generation] = {}  # (capture, group, generation) -> it
    attempts: dict[tuple, datetime] = {}  # (capture, group, member or connection) -> first unanswered join
    member_of: dict[tuple[str, int], tuple[str, str]] = {}  # (capture, connection) -> (group, member id)

    def generation(r: dict) -> _Generation:
        key = (r["capture_file"], r["group_id"], r["generation_id"])
        g = generations.get(key)
        if g is None:
            g = generations[key] = _Generation(r["group_id"], r["generation_id"], r["capture_file"], r["broker_ip"],
                                               r["broker_port"])
        return g

    def member(g: _Generation, r: dict) -> _Member:
        m = g.members.get(r["member_id"])
        if m is None:
            m = g.members[r["member_id"]] = _Member(r["member_id"])
        m.client_id = m.client_id or r["client_id"]
        m.client_ip = m.client_ip or r["client_ip"]
        m.client_port = m.client_port or r["client_port"]
        m.connection_id = m.connection_id if m.connection_id is not None else r["connection_id"]
        m.group_instance_id = m.group_instance_id or r["group_instance_id"]
        return m

    for r in detail.to_pylist():
        api, err, group, cap = r["api_name"], r["error_name"], r["group_id"], r["capture_file"]
        conn = f"connection {r['connection_id']}"
        ok = err == "NONE"
        who = r["member_id"] or conn
        if api == "JoinGroup":
            start = r["request_first_ts"]
            if not ok:
                if err in _RETRIED_JOIN and start is not None:
                    for key in ((cap, group, who), (cap, group, conn)):
                        attempts.setdefault(key, start)
                continue
            if r["generation_id"] is None or not r["member_id"]:
                continue
            g = generation(r)
            m = member(g, r)
            first = _earliest(attempts.pop((cap, group, r["member_id"]), None),
                              attempts.pop((cap, group, conn), None), start)
            m.join_ts = _earliest(m.join_ts, first)
            m.subscription = r["subscription"] if r["subscription"] is not None else m.subscription
            g.protocol_type = g.protocol_type or r["protocol_type"]
            g.protocol_name = g.protocol_name or r["protocol_name"]
            g.leader = g.leader or r["group_leader"]
            g.seen(r["response_last_ts"])
            member_of[cap, r["connection_id"]] = (group, r["member_id"])
        elif api == "SyncGroup":
            if not ok or r["generation_id"] is None or not r["member_id"]:
                continue
            g = generation(r)
            m = member(g, r)
            m.synced_ts = r["response_last_ts"]
            m.assignment = r["assignment"]
            g.protocol_name = g.protocol_name or r["protocol_name"]
            g.seen(r["response_last_ts"])
            member_of[cap, r["connection_id"]] = (group, r["member_id"])
        else:  # LeaveGroup: v3+ names its members in an array; the connection says who it was
            ident = (group, r["member_id"]) if r["member_id"] else member_of.get((cap, r["connection_id"]))
            if ident is None or not ok:
                continue
            latest = max((g for (c, gid, _), g in generations.items()
                          if c == cap and gid == ident[0] and ident[1] in g.members),
                         key=lambda g: g.generation_id, default=None)
            if latest is not None:
                latest.members[ident[1]].left_ts = r["request_first_ts"]
                latest.seen(r["response_last_ts"])

    for r in counts.to_pylist():
        g = generations.get((r["capture_file"], r["group_id"], r["generation_id"]))
        if g is None:
            continue
        m = g.members.get(r["member_id"])
        if m is not None:
            if r["api_name"] == "Heartbeat":
                m.heartbeats += r["requests"]
            else:
                m.commits += r["requests"]
        g.seen(r["last_ts"])
    return _table(generations)


def _table(generations: dict[tuple[str, int], _Generation]) -> pa.Table:
    out = []
    by_group: dict[tuple[str, str], list[_Generation]] = {}
    for g in generations.values():
        by_group.setdefault((g.capture_file or "", g.group_id), []).append(g)
    for capture_file, group_id in sorted(by_group):
        previous: _Generation | None = None
        gens = sorted(by_group[capture_file, group_id], key=lambda g: g.generation_id)
        for i, g in enumerate(gens):
            members = sorted(g.members.values(), key=lambda m: (m.join_ts is None, m.join_ts, m.member_id))
            before = set(previous.members) if previous is not None and previous.generation_id == g.generation_id - 1 \
                else None
            start = _earliest(*(m.join_ts for m in members))
            synced = [m.synced_ts for m in members if m.synced_ts is not None]
            end = max(synced) if synced and len(synced) == len(members) else None
            stops = [_ms(m.join_ts, m.synced_ts) for m in members if before is not None and m.member_id in before]
            stops = [s for s in stops if s is not None]
            following = gens[i + 1] if i + 1 < len(gens) else None
            next_start = None
            if following is not None:
                next_start = _earliest(*(m.join_ts for m in following.members.values()))
            out.append({
                "capture_file": g.capture_file, "group_id": group_id, "group_protocol": "classic",
                "generation_id": g.generation_id,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name, "leader": g.leader,
                "broker_ip": g.broker_ip, "broker_port": g.broker_port,
                "member_count": len(members),
                "members": [{
                    "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_ip": m.client_ip, "client_port": m.client_port, "connection_id": m.connection_id,
                    "subscription": m.subscription, "assignment": m.assignment, "join_ts": m.join_ts,
                    "synced_ts": m.synced_ts, "waited_ms": _ms(m.join_ts, m.synced_ts), "left_ts": m.left_ts,
                    "heartbeats": m.heartbeats, "commits": m.commits} for m in members],
                "joined": None if before is None else sorted(set(g.members) - before),
                "left": None if before is None else sorted(before - set(g.members)),
                "rebalance_start": start, "rebalance_end": end, "rebalance_ms": _ms(start, end),
                "stop_ms": max(stops) if stops else None,
                "ended": next_start if next_start is not None else g.last_seen,
                "next_generation_id": following.generation_id if following is not None else None,
                "moved": None,
            })
            previous = g
    return pa.Table.from_pylist(out, schema=GROUPS_SCHEMA)
