"""Consumer lag per group, topic and partition over time: each committed offset against the high watermark.

A group's offsets are on the wire twice: in OffsetCommit requests (what a member committed) and in OffsetFetch
responses (what the coordinator holds). The partition's end is in every Fetch response (high_watermark), to a
consumer or to a follower broker alike: both are the leader's high watermark at the time of the answer. The lag
of a commit is then an as-of join: the latest high watermark any Fetch response reported for that
topic-partition at or before the commit, minus the committed offset. ``hw_fetch_kind`` says whether that
watermark came from a consumer's or a follower's Fetch, ``hw_age_ms`` how old it was.

Offsets are only compared within one capture file (a rotated set counts as one): two captures may be of two
clusters whose topics share names. Everything is column arithmetic; the as-of join is a sorted search, and it
can be fed the Fetch rows batch by batch (``LagBuilder``), so the report never holds a big partitions table.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import TS


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"description": doc})


_KEY = ["capture_file", "topic", "partition"]
GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
              "TxnOffsetCommit", "ConsumerGroupHeartbeat")
OFFSET_APIS = ("OffsetCommit", "OffsetFetch")
# The partitions columns this module reads, and the exchanges columns (the group of each offset exchange).
PARTITION_COLUMNS = ["capture_file", "connection_id", "correlation_id", "api_name", "client_id", "request_last_ts",
                     "response_last_ts", "topic", "partition", "error_code", "fetch_kind", "high_watermark",
                     "committed_offset"]
EXCHANGE_COLUMNS = ["capture_file", "connection_id", "correlation_id", "api_name", "client_id", "client_ip",
                    "group_id", "request_frame", "response_frame"]

LAG_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file of the offset exchange (the high watermark is of the same one)."),
    _f("group_id", pa.string(), "The consumer group."),
    _f("group_from", pa.string(), "request: the exchange names the group (OffsetCommit, OffsetFetch before v8); "
       "client: an OffsetFetch v8+ (its groups are not in the exchanges table), given the one group the same "
       "client_id and address speaks for in its other group exchanges of the capture."),
    _f("topic", pa.string(), "Topic."),
    _f("partition", pa.int32(), "Partition."),
    _f("api_name", pa.string(), "OffsetCommit (the offset a member committed) or OffsetFetch (the offset the "
       "coordinator answered with)."),
    _f("client_id", pa.string(), "client_id of the offset exchange."),
    _f("ts", TS, "When the offset held: the OffsetCommit's request_last_ts, the OffsetFetch's response_last_ts."),
    _f("frame", pa.int64(), "Packet of that request (OffsetCommit) or response (OffsetFetch)."),
    _f("committed_offset", pa.int64(), "The committed offset (the next record the group will read)."),
    _f("high_watermark", pa.int64(), "The latest high watermark a Fetch response reported for the topic-partition "
       "at or before ts (null: none yet)."),
    _f("hw_ts", TS, "response_last_ts of that Fetch response."),
    _f("hw_age_ms", pa.float64(), "ts minus hw_ts in ms: how stale the watermark may be."),
    _f("hw_fetch_kind", pa.string(), "consumer or follower: whose Fetch response reported it."),
    _f("lag", pa.int64(), "high_watermark minus committed_offset: records the group has yet to commit past "
       "(null without a watermark)."),
])

END_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file."),
    _f("group_id", pa.string(), "The consumer group."),
    _f("topic", pa.string(), "Topic."),
    _f("partition", pa.int32(), "Partition."),
    _f("commits", pa.int64(), "Offset observations (commits and offset fetches) of the group for it."),
    _f("committed_offset", pa.int64(), "The last committed offset seen."),
    _f("committed_ts", TS, "Its time (ts of LAG_SCHEMA)."),
    _f("lag_at_commit", pa.int64(), "The lag at that time (see LAG_SCHEMA.lag)."),
    _f("high_watermark", pa.int64(), "The last high watermark any Fetch response of the capture reported."),
    _f("hw_ts", TS, "Its response time."),
    _f("lag", pa.int64(), "The last known lag at the end of the capture: high_watermark minus committed_offset "
       "(null without a watermark)."),
])

_BEST = pa.schema([("hw_ts", TS), ("high_watermark", pa.int64()), ("hw_fetch_kind", pa.string())])


def _ensure(t: pa.Table, columns: list[str], schema: pa.Schema | None = None) -> pa.Table:
    """``t`` with ``columns`` (a missing one, from an older export, as nulls)."""
    from analyzer.tables.schemas import EXCHANGES_SCHEMA, PARTITIONS_SCHEMA

    for c in columns:
        if c not in t.column_names:
            f = next(s.field(c) for s in (schema, PARTITIONS_SCHEMA, EXCHANGES_SCHEMA) if s and c in s.names)
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    return t.select(columns)


def _group_of_client(exchanges: pa.Table) -> pa.Table:
    """Per capture file, client_id and address, the group its group exchanges name when they name exactly one."""
    g = exchanges.filter(pc.and_(pc.is_in(exchanges["api_name"], pa.array(GROUP_APIS)),
                                 pc.is_valid(exchanges["group_id"])))
    keys = ["capture_file", "client_id", "client_ip"]
    agg = g.group_by(keys).aggregate([("group_id", "count_distinct"), ("group_id", "min")])
    agg = agg.filter(pc.equal(agg["group_id_count_distinct"], 1))
    return agg.select([*keys, "group_id_min"]).rename_columns([*keys, "client_group"])


def offsets(partitions: pa.Table, exchanges: pa.Table) -> pa.Table:
    """The committed offsets of the capture: one row per topic-partition of each answered, error-free OffsetCommit
    request and OffsetFetch response that holds an offset (-1, none committed, is left out), with its group."""
    p = _ensure(partitions, PARTITION_COLUMNS)
    p = p.filter(pc.and_(pc.is_in(p["api_name"], pa.array(OFFSET_APIS)),
                         pc.and_(pc.fill_null(pc.greater_equal(p["committed_offset"], 0), False),
                                 pc.fill_null(pc.equal(p["error_code"], 0), False))))
    ex = _ensure(exchanges, EXCHANGE_COLUMNS)
    ex = ex.filter(pc.is_in(ex["api_name"], pa.array(GROUP_APIS)))
    keys = ["capture_file", "connection_id", "correlation_id", "api_name"]
    p = p.join(ex.select([*keys, "client_ip", "group_id", "request_frame", "response_frame"]), keys,
               join_type="left outer")
    p = p.join(_group_of_client(ex), ["capture_file", "client_id", "client_ip"], join_type="left outer")
    named = pc.is_valid(p["group_id"])
    commit = pc.equal(p["api_name"], "OffsetCommit")
    out = pa.table({
        "capture_file": p["capture_file"],
        "group_id": pc.coalesce(p["group_id"], p["client_group"]),
        "group_from": pc.if_else(named, "request", pc.if_else(pc.is_valid(p["client_group"]), "client", None)),
        "topic": p["topic"],
        "partition": p["partition"],
        "api_name": p["api_name"],
        "client_id": p["client_id"],
        "ts": pc.if_else(commit, p["request_last_ts"], p["response_last_ts"]),
        "frame": pc.if_else(commit, p["request_frame"], p["response_frame"]),
        "committed_offset": p["committed_offset"],
    })
    out = out.filter(pc.and_(pc.is_valid(out["group_id"]), pc.is_valid(out["ts"])))
    return out.sort_by([("capture_file", "ascending"), ("group_id", "ascending"), ("topic", "ascending"),
                        ("partition", "ascending"), ("ts", "ascending")])


def watermarks(partitions: pa.Table) -> pa.Table:
    """The high watermarks Fetch responses reported: capture_file, topic, partition, hw_ts, high_watermark,
    hw_fetch_kind (error-free partitions only: an erroring one reports -1 or a stale value)."""
    p = _ensure(partitions, PARTITION_COLUMNS)
    p = p.filter(pc.and_(pc.equal(p["api_name"], "Fetch"),
                         pc.and_(pc.fill_null(pc.greater_equal(p["high_watermark"], 0), False),
                                 pc.and_(pc.fill_null(pc.equal(p["error_code"], 0), False),
                                         pc.is_valid(p["response_last_ts"])))))
    return pa.table({"capture_file": p["capture_file"], "topic": p["topic"], "partition": p["partition"],
                     "hw_ts": p["response_last_ts"], "high_watermark": p["high_watermark"],
                     "hw_fetch_kind": p["fetch_kind"]})


def _key(t: pa.Table) -> pa.ChunkedArray:
    return pc.binary_join_element_wise(pc.fill_null(t["capture_file"], ""), t["topic"],
                                       t["partition"].cast(pa.string()), "\x1f")


def _micros(col: pa.ChunkedArray) -> np.ndarray:
    return col.cast(TS).cast(pa.int64()).to_numpy(zero_copy_only=False)


def asof(queries: pa.Table, marks: pa.Table) -> pa.Table:
    """For each row of ``queries`` (capture_file, topic, partition, ts), the row of ``marks`` (watermarks()) of
    the same topic-partition with the latest hw_ts at or before ts (the largest watermark among ties), as a
    table of _BEST's columns (nulls where there is none). Keys and times become integers: the topic-partition's
    code times the number of distinct times plus the time's rank, so one sorted search answers every query."""
    n = queries.num_rows
    if n == 0 or marks.num_rows == 0:
        return pa.table({f.name: pa.nulls(n, f.type) for f in _BEST})
    codes = pc.dictionary_encode(pa.chunked_array(_key(queries).chunks + _key(marks).chunks).combine_chunks())
    code = codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    times = np.concatenate([_micros(queries["ts"]), _micros(marks["hw_ts"])])
    _, rank = np.unique(times, return_inverse=True)
    combined = code * (int(rank.max()) + 1) + rank
    q, m = combined[:n], combined[n:]
    hw = marks["high_watermark"].to_numpy(zero_copy_only=False)
    order = np.lexsort((hw, m))
    pos = np.searchsorted(m[order], q, side="right") - 1
    found = pos >= 0
    idx = order[np.clip(pos, 0, None)]
    found &= code[n:][idx] == code[:n]
    take = pa.array(np.where(found, idx, 0)).cast(pa.int64())
    picked = marks.select(_BEST.names).take(take)
    mask = pa.array(~found)
    return pa.table({f.name: pc.if_else(mask, pa.nulls(n, f.type), picked[f.name]) for f in _BEST})


class LagBuilder:
    """The lag series of given offsets, fed the Fetch rows in any order and in batches of any size: each batch's
    as-of answers are kept where newer than those of the batches before."""

    def __init__(self, offset_rows: pa.Table) -> None:
        self.offsets = offset_rows
        self.best = asof(offset_rows, _no_marks())
        self.last: pa.Table | None = None  # the latest watermark per topic-partition of the batches so far

    def add(self, partitions: pa.Table) -> None:
        marks = watermarks(partitions)
        if marks.num_rows == 0:
            return
        got = asof(self.offsets, marks)
        later = pc.or_kleene(pc.greater(got["hw_ts"], self.best["hw_ts"]), pc.and_(
            pc.equal(got["hw_ts"], self.best["hw_ts"]), pc.greater(got["high_watermark"], self.best["high_watermark"])))
        newer = pc.and_(pc.is_valid(got["hw_ts"]),
                        pc.fill_null(pc.or_kleene(pc.is_null(self.best["hw_ts"]), later), False))
        self.best = pa.table({c: pc.if_else(newer, got[c], self.best[c]) for c in _BEST.names})
        latest = _latest(marks)
        self.last = latest if self.last is None else _latest(pa.concat_tables([self.last, latest]))

    def series(self) -> pa.Table:
        """The offsets with their watermark and lag (LAG_SCHEMA)."""
        o, b = self.offsets, self.best
        age = pc.divide(pc.subtract(o["ts"].cast(pa.int64()), b["hw_ts"].cast(pa.int64())).cast(pa.float64()),
                        1000.0)
        lag = pc.subtract(b["high_watermark"], o["committed_offset"])
        cols = {**{c: o[c] for c in o.column_names}, "high_watermark": b["high_watermark"], "hw_ts": b["hw_ts"],
                "hw_age_ms": age, "hw_fetch_kind": b["hw_fetch_kind"], "lag": lag}
        return pa.table({f.name: cols[f.name] for f in LAG_SCHEMA}).cast(LAG_SCHEMA)

    def at_end(self) -> pa.Table:
        """The last known lag per group and topic-partition (END_SCHEMA)."""
        return end_lag(self.series(), self.last if self.last is not None else _no_marks())


def _no_marks() -> pa.Table:
    return pa.table({"capture_file": pa.array([], pa.string()), "topic": pa.array([], pa.string()),
                     "partition": pa.array([], pa.int32()), "hw_ts": pa.array([], TS),
                     "high_watermark": pa.array([], pa.int64()), "hw_fetch_kind": pa.array([], pa.string())})


def _latest(marks: pa.Table) -> pa.Table:
    """The last watermark per topic-partition (the largest among ties)."""
    if marks.num_rows == 0:
        return _no_marks()
    s = marks.sort_by([("hw_ts", "ascending"), ("high_watermark", "ascending")])
    agg = s.group_by(_KEY, use_threads=False).aggregate([("hw_ts", "last"), ("high_watermark", "last"),
                                                         ("hw_fetch_kind", "last")])
    return agg.rename_columns({"hw_ts_last": "hw_ts", "high_watermark_last": "high_watermark",
                               "hw_fetch_kind_last": "hw_fetch_kind"}).select(_no_marks().column_names)


def end_lag(series: pa.Table, last_marks: pa.Table) -> pa.Table:
    """Per group and topic-partition: its last offset and lag then, and the lag against the last watermark of
    the capture (``last_marks``: one row per topic-partition, as _latest gives)."""
    if series.num_rows == 0:
        return END_SCHEMA.empty_table()
    keys = ["capture_file", "group_id", "topic", "partition"]
    s = series.sort_by([("ts", "ascending")])
    agg = s.group_by(keys, use_threads=False).aggregate([
        ([], "count_all"), ("committed_offset", "last"), ("ts", "last"), ("lag", "last")])
    agg = agg.rename_columns({"count_all": "commits", "committed_offset_last": "committed_offset",
                              "ts_last": "committed_ts", "lag_last": "lag_at_commit"})
    agg = agg.join(last_marks.select([*_KEY, "high_watermark", "hw_ts"]), _KEY, join_type="left outer")
    agg = agg.append_column("lag", pc.subtract(agg["high_watermark"], agg["committed_offset"]))
    agg = agg.select(END_SCHEMA.names).cast(END_SCHEMA)
    return agg.sort_by([("capture_file", "ascending"), ("group_id", "ascending"), ("topic", "ascending"),
                        ("partition", "ascending")])


def lag_series(partitions: pa.Table, exchanges: pa.Table) -> pa.Table:
    """Every committed offset with the high watermark then and the lag (LAG_SCHEMA), from whole tables."""
    b = LagBuilder(offsets(partitions, exchanges))
    b.add(partitions)
    return b.series()


def lag_at_end(partitions: pa.Table, exchanges: pa.Table) -> pa.Table:
    """The last known lag per group and topic-partition (END_SCHEMA), from whole tables."""
    b = LagBuilder(offsets(partitions, exchanges))
    b.add(partitions)
    return b.at_end()


def laggiest(end: pa.Table, n: int = 10) -> pa.Table:
    """The ``n`` group topic-partitions with the largest last known lag (those without one left out)."""
    t = end.filter(pc.is_valid(end["lag"]))
    return t.sort_by([("lag", "descending"), ("group_id", "ascending"), ("topic", "ascending"),
                      ("partition", "ascending")]).slice(0, n)


def scan_lag(batches: Iterable[pa.Table], offset_rows: pa.Table) -> LagBuilder:
    """A LagBuilder fed every batch of partition rows."""
    b = LagBuilder(offset_rows)
    for batch in batches:
        b.add(batch)
    return b
