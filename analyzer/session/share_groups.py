"""What share-group consumers were given and what they did with it: the ``share_ranges`` table.

A share group (KIP-932) hands records out like a queue: a ShareFetch response acquires ranges of offsets for a
member, each with its delivery count (2 and up: delivered before and not accepted, released or timed out); the
member acknowledges each record, piggy-backed on its next ShareFetch or with ShareAcknowledge: accept (done),
release (give it to someone else), reject (never again), renew (keep the lock longer). A row per range and
action; a range acknowledged with one type per offset becomes a row per run of the same type.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import NamedTuple

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
SHARE_APIS = {SHARE_FETCH: "ShareFetch", SHARE_ACKNOWLEDGE: "ShareAcknowledge"}
ACK_TYPES = {0: "gap", 1: "accept", 2: "release", 3: "reject", 4: "renew"}
ACQUIRED = "acquired"
MAX_RANGES_PER_EXCHANGE = 100_000  # rows one exchange may add (a flood of tiny ranges is counted, not kept)


class ShareRange(NamedTuple):
    """One row of share_ranges as the session writes it (the capture file, the topic's name and the error name
    come later)."""

    connection_id: int
    correlation_id: int
    client_id: str | None
    client_ip: str | None
    broker_ip: str | None
    broker_port: int | None
    api_name: str
    ts: int | None
    group_id: str | None
    member_id: str | None
    topic: str | bytes | None
    topic_id: str | None
    partition: int | None
    first_offset: int | None
    last_offset: int | None
    action: str
    delivery_count: int | None
    lock_timeout_ms: int | None
    error_code: int | None


def _runs(first: int, last: int, types: list[int]) -> list[tuple[int, int, str]]:
    """(first, last, action) of an acknowledgement batch: one type for the range, or one per offset."""
    if not types:  # Kafka sends at least one; none says nothing of what was done
        return [(first, last, "unknown")]
    if len(types) == 1:
        return [(first, last, ACK_TYPES.get(types[0], f"type {types[0]}"))]
    runs: list[tuple[int, int, str]] = []
    for i, t in enumerate(types[:last - first + 1]):
        name = ACK_TYPES.get(t, f"type {t}")
        if runs and runs[-1][2] == name and runs[-1][1] == first + i - 1:
            runs[-1] = (runs[-1][0], first + i, name)
        else:
            runs.append((first + i, first + i, name))
    return runs


def _topic_id(t: dict) -> tuple[bytes | None, str | None]:
    raw = t.get("topic_id")
    return (raw, str(uuid.UUID(bytes=bytes(raw)))) if raw is not None and len(raw) == 16 else (None, None)


def ranges_of(key: int, rq: dict | None, rs: dict | None, base: dict, request_ts: int | None,
              response_ts: int | None) -> tuple[list[ShareRange], int]:
    """The rows of one ShareFetch or ShareAcknowledge exchange from its decoded bodies (None where they did not
    parse), and how many ranges were left out over MAX_RANGES_PER_EXCHANGE."""
    rows: list[ShareRange] = []
    left_out = 0
    group = member = None
    if rq is not None:
        group, member = rq.get("group_id"), rq.get("member_id")
    lock = None if rs is None else rs.get("acquisition_lock_timeout_ms")
    answers: dict[tuple[bytes | None, int], dict] = {}
    if rs is not None:
        for t in rs.get("responses") or ():
            for p in t.get("partitions") or ():
                answers[t.get("topic_id"), p.get("partition_index")] = p

    def add(ts, raw, topic_id, partition, first, last, action, count, error) -> None:
        nonlocal left_out
        if len(rows) >= MAX_RANGES_PER_EXCHANGE:
            left_out += 1
            return
        rows.append(ShareRange(**base, ts=ts, group_id=group, member_id=member, topic=raw, topic_id=topic_id,
                               partition=partition, first_offset=first, last_offset=last, action=action,
                               delivery_count=count, lock_timeout_ms=lock, error_code=error))

    for t in (rq or {}).get("topics") or ():
        raw, topic_id = _topic_id(t)
        for p in t.get("partitions") or ():
            answer = answers.get((t.get("topic_id"), p.get("partition_index")))
            if answer is None:
                error = None if rs is None else rs.get("error_code")
            else:
                error = answer.get("acknowledge_error_code") if key == SHARE_FETCH else answer.get("error_code")
                error = error or (rs.get("error_code") if rs is not None else None)
            for batch in p.get("acknowledgement_batches") or ():
                first, last = batch.get("first_offset"), batch.get("last_offset")
                if first is None or last is None or last < first:
                    continue
                for a, b, action in _runs(first, last, list(batch.get("acknowledge_types") or ())):
                    add(request_ts, raw, topic_id, p.get("partition_index"), a, b, action, None, error)
    if key == SHARE_FETCH and rs is not None:
        for t in rs.get("responses") or ():
            raw, topic_id = _topic_id(t)
            for p in t.get("partitions") or ():
                for acquired in p.get("acquired_records") or ():
                    add(response_ts, raw, topic_id, p.get("partition_index"), acquired.get("first_offset"),
                        acquired.get("last_offset"), ACQUIRED, acquired.get("delivery_count"), p.get("error_code"))
    return rows, left_out


class ShareRanges:
    """The share_ranges rows of the exchanges answered so far, until they are drained."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[ShareRange] = []

    def add(self, base: dict, key: int, rq: dict | None, rs: dict | None, request_ts: int | None,
            response_ts: int | None) -> str | None:
        """Adds the exchange's rows; returns a note for the exchange row when some were left out."""
        rows, left_out = ranges_of(key, rq, rs, base, request_ts, response_ts)
        self.rows += rows
        if left_out:
            return (f"share_ranges: the first {MAX_RANGES_PER_EXCHANGE:,} ranges of the exchange kept, "
                    f"{left_out:,} more left out")
        return None

    def drain(self, topic_name: Callable[[str | bytes], str | None]) -> list[ShareRange]:
        """The rows, each topic named by its id (the names the run knows now; else the id in UUID form)."""
        rows, self.rows = self.rows, []
        names: dict[str | bytes, str | None] = {}  # the few topics of many rows, each named once
        out = []
        for r in rows:
            topic = r.topic
            if topic is not None:
                name = names.get(topic, names)
                if name is names:
                    name = names[topic] = topic_name(topic)
                r = r._replace(topic=name)
            out.append(r)
        return out

    def __len__(self) -> int:
        return len(self.rows)
