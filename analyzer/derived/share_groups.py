"""The ``share_consumption`` table: per share group, topic and member, what it was given and what it did, from
a whole run's share_ranges, fed batch by batch.

Records are followed one by one from their acquisition to the acknowledgement the same member sends for them:
the time between is the member's processing time. A record acquired again (a higher delivery count) and never
acknowledged by its earlier holder was lost to that holder: its acquisition lock ran out, or its session ended.
Records held at the capture's end are unacknowledged. The batches come in each connection's order (a member
acknowledges after it acquires), not in one order across connections, so the delivery count, not the time,
says which acquisition came first. The broker locks a few thousand records per partition, so few are held at any
time; past MAX_HELD held records, or for a range claiming more than MAX_TRACKED offsets, records are counted but
not followed one by one (``untracked``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import SHARE_CONSUMPTION_SCHEMA

COLUMNS = ("capture_file", "client_id", "ts", "group_id", "member_id", "topic", "partition", "first_offset",
           "last_offset", "action", "delivery_count", "error_name")
MAX_TRACKED = 100_000  # offsets of one range followed one by one; the broker locks ~2,000 per partition
MAX_HELD = 500_000  # records held (acquired, not yet acknowledged) over all partitions: ~100 MB
MAX_DONE = 500_000  # acknowledged records remembered by their highest delivery count
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ACTIONS = ("accept", "release", "reject", "renew")


@dataclass
class _Counts:
    client_id: str | None = None
    acquired: int = 0
    redelivered: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    untracked: int = 0
    failed_acks: int = 0
    processing: array = field(default_factory=lambda: array("f"))  # ms, to float32: 4 bytes a record
    first_ts: int | None = None  # microseconds
    last_ts: int | None = None


class ShareConsumption:
    """share_consumption, made from share_ranges batches as they pass (memory: the records held, not the run)."""

    def __init__(self) -> None:
        self.stats: dict[tuple, _Counts] = {}
        # (capture, group, topic, partition) -> offset -> [highest delivery count seen, [[member, acquired ts,
        # delivery count] of each acquisition not acknowledged yet]]
        self.held: dict[tuple, dict[int, list]] = {}
        self.held_count = 0
        self.done = 0  # records acknowledged by everyone who acquired them, kept as their highest delivery count

    def _counts(self, key: tuple, client_id: str | None) -> _Counts:
        s = self.stats.get(key)
        if s is None:
            s = self.stats[key] = _Counts(client_id)
        return s

    def feed(self, ranges: pa.Table) -> None:
        """Times are taken as microseconds (integers): a datetime per row costs more than the rest of the row."""
        ranges = ranges.select(list(COLUMNS))
        ranges = ranges.set_column(COLUMNS.index("ts"), "ts", ranges["ts"].cast(pa.int64()))
        for batch in ranges.to_batches(max_chunksize=65536):
            columns = [batch.column(c).to_pylist() for c in COLUMNS]
            for values in zip(*columns, strict=True):
                self._one(dict(zip(COLUMNS, values, strict=True)))

    def _one(self, r: dict) -> None:
        if r["group_id"] is None or r["first_offset"] is None or r["last_offset"] is None:
            return
        key = (r["capture_file"], r["group_id"], r["topic"], r["member_id"])
        s = self._counts(key, r["client_id"])
        ts = r["ts"]  # microseconds
        if ts is not None:
            s.first_ts = ts if s.first_ts is None or ts < s.first_ts else s.first_ts
            s.last_ts = ts if s.last_ts is None or ts > s.last_ts else s.last_ts
        place = self.held.setdefault((r["capture_file"], r["group_id"], r["topic"], r["partition"]), {})
        size = r["last_offset"] - r["first_offset"] + 1
        member = r["member_id"]
        if r["action"] == "acquired":
            s.acquired += size
            count = r["delivery_count"] or 1
            if count > 1:
                s.redelivered += size
            if size > MAX_TRACKED or self.held_count + size > MAX_HELD:
                s.untracked += size
                return
            for offset in range(r["first_offset"], r["last_offset"] + 1):
                record = place.get(offset)
                if record is None:
                    record = place[offset] = [count, []]
                elif not record[1]:
                    self.done -= 1  # a record acknowledged before, delivered again
                record[0] = max(record[0], count)
                for entry in record[1]:
                    if entry[0] == member:  # acquired again by the same member: the newer delivery stands
                        entry[1], entry[2] = ts, max(entry[2], count)
                        break
                else:
                    record[1].append([member, ts, count])
                    self.held_count += 1
        elif r["action"] in ACTIONS:
            if r["error_name"] not in (None, "NONE"):
                s.failed_acks += size
                return
            s.counts[r["action"]] += size
            if r["action"] == "renew":
                return
            offsets = (range(r["first_offset"], r["last_offset"] + 1) if size <= len(place)
                       else [o for o in place if r["first_offset"] <= o <= r["last_offset"]])
            for offset in offsets:
                record = place.get(offset)
                if not record or not record[1]:
                    continue
                entries = record[1]
                for i, entry in enumerate(entries):
                    if entry[0] == member:
                        del entries[i]
                        self.held_count -= 1
                        if ts is not None and entry[1] is not None:
                            s.processing.append((ts - entry[1]) / 1000.0)
                        break
                if not entries:  # kept as its highest delivery count: an older delivery may still come in
                    self.done += 1
            if self.done > MAX_DONE:
                self._forget_done(place)

    def _forget_done(self, place: dict[int, list]) -> None:
        """Forget the lower half of a partition's acknowledged records (its older deliveries came in long ago)."""
        done = sorted(o for o, record in place.items() if not record[1])
        for offset in done[:max(1, len(done) // 2)]:
            del place[offset]
            self.done -= 1

    def finish(self) -> pa.Table:
        lost: dict[tuple, int] = {}
        unacknowledged: dict[tuple, int] = {}
        for (cap, group, topic, _), offsets in self.held.items():
            for latest, entries in offsets.values():
                for member, _, count in entries:
                    into = lost if count < latest else unacknowledged
                    into[cap, group, topic, member] = into.get((cap, group, topic, member), 0) + 1
        rows = []
        for key in sorted(self.stats, key=lambda k: tuple("" if v is None else str(v) for v in k)):
            s = self.stats[key]
            p50 = p99 = top = None
            if s.processing:
                q = pc.tdigest(pa.array(s.processing, pa.float64()), q=[0.5, 0.99]).to_pylist()
                p50, p99, top = round(q[0], 3), round(q[1], 3), round(max(s.processing), 3)
            rows.append({"capture_file": key[0], "group_id": key[1], "topic": key[2], "member_id": key[3],
                         "client_id": s.client_id, "first_ts": _time(s.first_ts), "last_ts": _time(s.last_ts),
                         "acquired_records": s.acquired, "redelivered_records": s.redelivered,
                         "accepted": s.counts["accept"], "released": s.counts["release"],
                         "rejected": s.counts["reject"], "renewed": s.counts["renew"],
                         "failed_acks": s.failed_acks, "lock_lost": lost.get(key, 0),
                         "unacknowledged": unacknowledged.get(key, 0), "untracked": s.untracked,
                         "processed": len(s.processing), "processing_p50_ms": p50, "processing_p99_ms": p99,
                         "processing_max_ms": top})
        return pa.Table.from_pylist(rows, schema=SHARE_CONSUMPTION_SCHEMA)


def _time(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def share_consumption_table(ranges: pa.Table) -> pa.Table:
    """The share_consumption table from a whole run's share_ranges (COLUMNS of them), in any order of
    connections."""
    made = ShareConsumption()
    made.feed(ranges)
    return made.finish()
