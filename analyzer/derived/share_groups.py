"""The ``share_consumption`` table: per share group, topic and member, what it was given and what it did, from
a whole run's share_ranges.

Records are followed one by one from their acquisition to the acknowledgement the same member sends for them:
the time between is the member's processing time. A record acquired again (a higher delivery count) before its
holder acknowledged it was lost to that holder: its acquisition lock ran out, or its session ended. Records
still held at the capture's end are unacknowledged. The broker locks at most a few thousand records per
partition, so few are held at any time; a range claiming more than MAX_TRACKED offsets is counted but its
records are not followed one by one.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import SHARE_CONSUMPTION_SCHEMA

COLUMNS = ("capture_file", "client_id", "ts", "group_id", "member_id", "topic", "partition", "first_offset",
           "last_offset", "action", "delivery_count", "error_name")
MAX_TRACKED = 100_000  # offsets of one range followed one by one; the broker locks ~2,000 per partition
ACTIONS = ("accept", "release", "reject", "renew")


@dataclass
class _Counts:
    client_id: str | None = None
    acquired: int = 0
    redelivered: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    lock_lost: int = 0
    untracked: int = 0
    failed_acks: int = 0
    processing: array = field(default_factory=lambda: array("d"))
    first_ts: datetime | None = None
    last_ts: datetime | None = None


def share_consumption_table(ranges: pa.Table) -> pa.Table:
    """The share_consumption table from a whole run's share_ranges (COLUMNS of them)."""
    t = ranges.select(list(COLUMNS)).sort_by([("ts", "ascending")])
    stats: dict[tuple, _Counts] = {}
    held: dict[tuple, dict[int, tuple[str, datetime]]] = {}  # (capture, group, topic, partition) -> offset -> holder
    for r in t.to_pylist():
        if r["group_id"] is None or r["first_offset"] is None or r["last_offset"] is None:
            continue
        key = (r["capture_file"], r["group_id"], r["topic"], r["member_id"])
        s = stats.get(key)
        if s is None:
            s = stats[key] = _Counts(r["client_id"])
        s.first_ts = s.first_ts or r["ts"]
        s.last_ts = r["ts"]
        place = held.setdefault((r["capture_file"], r["group_id"], r["topic"], r["partition"]), {})
        size = r["last_offset"] - r["first_offset"] + 1
        if r["action"] == "acquired":
            s.acquired += size
            if (r["delivery_count"] or 1) > 1:
                s.redelivered += size
            if size > MAX_TRACKED:
                s.untracked += size
                continue
            for offset in range(r["first_offset"], r["last_offset"] + 1):
                before = place.get(offset)
                if before is not None:
                    stats[(*key[:3], before[0])].lock_lost += 1
                place[offset] = (r["member_id"], r["ts"])
        elif r["action"] in ACTIONS:
            if r["error_name"] not in (None, "NONE"):
                s.failed_acks += size
                continue
            s.counts[r["action"]] += size
            if r["action"] == "renew":
                continue
            offsets = (range(r["first_offset"], r["last_offset"] + 1) if size <= len(place)
                       else [o for o in place if r["first_offset"] <= o <= r["last_offset"]])
            for offset in offsets:
                holder = place.get(offset)
                if holder is not None and holder[0] == r["member_id"]:
                    del place[offset]
                    if r["ts"] is not None and holder[1] is not None:
                        s.processing.append((r["ts"] - holder[1]).total_seconds() * 1000.0)
    unacknowledged: dict[tuple, int] = {}
    for (cap, group, topic, _), offsets in held.items():
        for member, _ in offsets.values():
            unacknowledged[cap, group, topic, member] = unacknowledged.get((cap, group, topic, member), 0) + 1
    rows = []
    for key in sorted(stats, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        s = stats[key]
        p50 = p99 = top = None
        if s.processing:
            q = pc.tdigest(pa.array(s.processing, pa.float64()), q=[0.5, 0.99]).to_pylist()
            p50, p99, top = round(q[0], 3), round(q[1], 3), round(max(s.processing), 3)
        rows.append({"capture_file": key[0], "group_id": key[1], "topic": key[2], "member_id": key[3],
                     "client_id": s.client_id, "first_ts": s.first_ts, "last_ts": s.last_ts,
                     "acquired_records": s.acquired, "redelivered_records": s.redelivered,
                     "accepted": s.counts["accept"], "released": s.counts["release"],
                     "rejected": s.counts["reject"], "renewed": s.counts["renew"], "failed_acks": s.failed_acks,
                     "lock_lost": s.lock_lost, "unacknowledged": unacknowledged.get(key, 0),
                     "untracked": s.untracked, "processed": len(s.processing), "processing_p50_ms": p50,
                     "processing_p99_ms": p99, "processing_max_ms": top})
    return pa.Table.from_pylist(rows, schema=SHARE_CONSUMPTION_SCHEMA)
