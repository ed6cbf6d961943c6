"""Tables to the small tables the plots draw: counts, sums and percentiles per interval and per key, top-N.

Everything here is pyarrow kernels and ``group_by`` over whole columns (no Python loop over rows), so the
cost grows with the rows but the output only with the number of intervals and series shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import expected_errors
from dissectors.kafka.errors import EXPECTED_ERRORS as _EXPECTED

MAX_BINS = 300  # intervals on a time axis, at most
TOP_N = 8  # series drawn by name; the rest are summed as OTHER
OTHER = "other"
QUANTILES = (0.5, 0.99)
HIST_PER_DECADE = 10  # latency histogram buckets per factor of ten (each about 26 % wide)

# Waits rather than service time: a Fetch is held by the broker until data arrives or max_wait_ms passes,
# JoinGroup until the rebalance completes, SyncGroup until the leader sends the assignment.
WAIT_APIS = ("Fetch", "JoinGroup", "SyncGroup")
GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
              "DescribeGroups", "ListGroups", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "DeleteGroups")
# Errors that are steps of the protocol rather than failures (dissectors.kafka.errors.EXPECTED_ERRORS).
EXPECTED_ERRORS = {e.name: e.apis for e in _EXPECTED}

_STEPS = [  # (seconds, multiple, unit for floor_temporal, label)
    (0.001, 1, "millisecond", "1 ms"), (0.01, 10, "millisecond", "10 ms"), (0.1, 100, "millisecond", "100 ms"),
    (1, 1, "second", "1 s"), (5, 5, "second", "5 s"), (10, 10, "second", "10 s"), (30, 30, "second", "30 s"),
    (60, 1, "minute", "1 min"), (300, 5, "minute", "5 min"), (900, 15, "minute", "15 min"),
    (3600, 1, "hour", "1 h"), (21600, 6, "hour", "6 h"), (86400, 1, "day", "1 day"), (604800, 7, "day", "7 days"),
]


@dataclass(frozen=True)
class Interval:
    """The width of a time bin: floor_temporal's (multiple, unit), its seconds and a label for axes."""

    seconds: float
    multiple: int
    unit: str
    label: str

    def floor(self, ts: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
        return pc.floor_temporal(ts, multiple=self.multiple, unit=self.unit)


def choose_interval(start: pa.Scalar | None, end: pa.Scalar | None) -> Interval:
    """The narrowest width that puts the span into at most MAX_BINS intervals."""
    span = 0.0
    if start is not None and end is not None and start.is_valid and end.is_valid:
        span = (end.value - start.value) / 1e6
    for seconds, multiple, unit, label in _STEPS:
        if span / seconds <= MAX_BINS:
            return Interval(seconds, multiple, unit, label)
    days = math.ceil(span / MAX_BINS / 86400)
    return Interval(days * 86400.0, days, "day", f"{days} days")


def min_max(*columns: pa.ChunkedArray) -> tuple[pa.Scalar | None, pa.Scalar | None]:
    """Earliest and latest value over several timestamp columns (None when all are empty or null)."""
    lo = hi = None
    for col in columns:
        if len(col) == 0 or col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        a, b = mm["min"], mm["max"]
        lo = a if lo is None or a.value < lo.value else lo
        hi = b if hi is None or b.value > hi.value else hi
    return lo, hi


def group(t: pa.Table, keys: list[str], aggs: list[tuple], names: list[str], use_threads: bool = True) -> pa.Table:
    """``t.group_by(keys).aggregate(aggs)`` as a table of ``keys`` then ``names`` (one per aggregate), whatever
    order pyarrow puts them in; ``(None, "count_all")`` counts rows."""
    spec = [([], "count_all") if a[0] is None else a for a in aggs]
    g = t.group_by(keys, use_threads=use_threads).aggregate(spec)
    out = ["count_all" if a[0] is None else f"{a[0]}_{a[1]}" for a in aggs]
    return g.select([*keys, *out]).rename_columns([*keys, *names])


def top_keys(t: pa.Table, key: str, weight: str | None, n: int = TOP_N) -> list:
    """The n values of ``key`` with the largest sum of ``weight`` (or the most rows), largest first."""
    if t.num_rows == 0:
        return []
    g = group(t, [key], [(None, "count_all") if weight is None else (weight, "sum")], ["w"])
    g = g.filter(pc.is_valid(g[key])).sort_by([("w", "descending"), (key, "ascending")])
    return g[key].slice(0, n).to_pylist()


def keep_top(values: pa.ChunkedArray, top: list) -> pa.ChunkedArray:
    """``values`` with every value outside ``top`` (nulls too) replaced by OTHER."""
    values = values.cast(pa.string())
    keep = pc.fill_null(pc.is_in(values, pa.array(top, pa.string())), False)
    return pc.if_else(keep, values, pa.scalar(OTHER))


def counts_by_interval(t: pa.Table, ts: str, series: str, interval: Interval, frame: str | None = None,
                       sums: tuple[str, ...] = ()) -> pa.Table:
    """Rows per (interval, series) as ``bin``, ``series``, ``count``, the sums of ``sums`` columns, and, with
    ``frame``, the capture file and packet number of the interval's first row (to open it in Wireshark)."""
    cols = {"bin": interval.floor(t[ts]), "series": t[series], "ts": t[ts]}
    for name in sums:
        cols[name] = t[name]
    if frame is not None:
        cols["capture_file"] = t["capture_file"]
        cols["frame"] = t[frame]
    w = pa.table(cols).filter(pc.is_valid(cols["bin"]))
    aggs = [(None, "count_all"), *((name, "sum") for name in sums)]
    names = ["count", *sums]
    if frame is not None:
        w = w.sort_by([("ts", "ascending"), ("frame", "ascending")])
        aggs += [("capture_file", "first"), ("frame", "first")]
        names += ["capture_file", "frame"]
    g = group(w, ["bin", "series"], aggs, names, use_threads=frame is None)
    return g.sort_by([("bin", "ascending"), ("series", "ascending")])


def latency_by_interval(t: pa.Table, interval: Interval) -> pa.Table:
    """p50 and p99 (t-digest) of latency_ms per (interval, series), with the count and the slowest exchange
    (its latency, capture file and response packet). ``t``: ts, series, latency_ms, capture_file, frame."""
    t = t.filter(pc.is_valid(t["latency_ms"]))
    w = pa.table({"bin": interval.floor(t["ts"]), "series": t["series"], "latency_ms": t["latency_ms"],
                  "capture_file": t["capture_file"], "frame": t["frame"]})
    w = w.filter(pc.is_valid(w["bin"])).sort_by([("latency_ms", "descending"), ("frame", "ascending")])
    g = group(w, ["bin", "series"], [
        ("latency_ms", "tdigest", pc.TDigestOptions(q=list(QUANTILES))), ("latency_ms", "count"),
        ("latency_ms", "max"), ("capture_file", "first"), ("frame", "first")],
        ["q", "count", "max", "capture_file", "frame"], use_threads=False)
    q = pc.list_flatten(g["q"]).to_numpy(zero_copy_only=False).reshape(-1, len(QUANTILES))
    return pa.table({"bin": g["bin"], "series": g["series"], "p50": q[:, 0], "p99": q[:, 1], "count": g["count"],
                     "max": g["max"], "capture_file": g["capture_file"], "frame": g["frame"]}
                    ).sort_by([("series", "ascending"), ("bin", "ascending")])


def latency_histogram(t: pa.Table) -> pa.Table:
    """Exchanges per (series, log bucket of latency_ms): bucket b holds [10^(b/10), 10^((b+1)/10)) ms;
    latencies below 1 µs (0 included) fall in the 1 µs bucket."""
    t = t.filter(pc.is_valid(t["latency_ms"]))
    clipped = pc.max_element_wise(t["latency_ms"], pa.scalar(1e-3))
    bucket = pc.floor(pc.multiply(pc.log10(clipped), float(HIST_PER_DECADE))).cast(pa.int32())
    g = group(pa.table({"series": t["series"], "bucket": bucket}), ["series", "bucket"], [(None, "count_all")],
              ["count"])
    return g.sort_by([("series", "ascending"), ("bucket", "ascending")])


def bucket_edges(bucket: int) -> tuple[float, float]:
    return 10 ** (bucket / HIST_PER_DECADE), 10 ** ((bucket + 1) / HIST_PER_DECADE)


def latency_series(api_name: pa.ChunkedArray, record_count: pa.ChunkedArray) -> pa.ChunkedArray:
    """The latency series of each exchange: its API, with Fetch split into empty responses (most of them
    long polls that waited for max_wait_ms) and responses that carried records."""
    is_fetch = pc.fill_null(pc.equal(api_name, "Fetch"), False)
    fetch = pc.if_else(pc.greater(record_count, 0), pa.scalar("Fetch (with records)"),
                       pa.scalar("Fetch (empty)"))
    fetch = pc.fill_null(fetch, "Fetch")  # --headers-only: no record counts
    return pc.if_else(is_fetch, fetch, pc.fill_null(api_name, "(unknown API)"))


def is_wait(series: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.or_(pc.starts_with(series, "Fetch"), pc.is_in(series, pa.array(WAIT_APIS[1:])))


def expected_error(error_name: pa.ChunkedArray, api_name: pa.ChunkedArray) -> pa.ChunkedArray:
    """Whether each (error, API) pair is a step of the protocol (the tables' classification)."""
    return expected_errors(error_name, api_name)


def error_table(errors: pa.Table, frames: pa.Table, limit: int = 50) -> tuple[pa.Table, int]:
    """Errors grouped by (error, API, client, topic, partition): count, first and last time, the first
    response packet; the ``limit`` largest groups and the number of groups in all. ``frames``: capture_file,
    connection_id, correlation_id, api_key, response_frame of the exchanges that hold errors."""
    if errors.num_rows == 0:
        return errors.select([]).append_column("count", pa.array([], pa.int64())), 0
    joined = errors.join(frames, ["capture_file", "connection_id", "correlation_id", "api_key"], join_type="left outer")
    joined = joined.sort_by([("response_last_ts", "ascending"), ("response_frame", "ascending")])
    keys = ["error_name", "api_name", "client_id", "topic", "partition", "expected", "retriable"]
    w = joined.select([*keys, "response_last_ts", "capture_file", "response_frame"])
    g = group(w, keys, [(None, "count_all"), ("response_last_ts", "min"), ("response_last_ts", "max"),
                        ("capture_file", "first"), ("response_frame", "first")],
              ["count", "first_ts", "last_ts", "capture_file", "frame"], use_threads=False)
    g = g.sort_by([("expected", "ascending"), ("count", "descending"), ("first_ts", "ascending")])
    return g.slice(0, limit), g.num_rows


def sum_by(t: pa.Table, keys: list[str], sums: list[str]) -> pa.Table:
    """Sums of ``sums`` and the row count (``rows``) per ``keys``."""
    return group(t, keys, [*((c, "sum") for c in sums), (None, "count_all")], [*sums, "rows"])
