"""Tables to the small tables the plots draw, in bounded memory: the rows are read batch by batch and folded
into partial aggregates (counts, sums, minima, maxima, the first row by some order, log-bucket histograms) that
merge exactly, so the memory held grows with the intervals and series shown, never with the rows read.

Every partial is a pyarrow table and every merge a pyarrow ``group_by`` (no Python loop over rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import expected_errors
from dissectors.kafka.apis import WAIT_APIS
from dissectors.kafka.errors import EXPECTED_ERRORS as _EXPECTED

MAX_BINS = 300  # intervals on a time axis, at most
TOP_N = 8  # series drawn by name; the rest are summed as OTHER
OTHER = "other"
OPENED = "opened (SYN)"  # the series of the connections whose handshake is in the capture
QUANTILES = (0.5, 0.99)
MAX_SERIES_KEPT = 4096  # distinct series an accumulator keeps per interval before folding the smallest into OTHER
MERGE_ROWS = 1 << 18  # buffered partial rows that trigger a merge
MAX_GROUPS = 200_000  # groups kept by the accumulators keyed by names (clients, topic-partitions, errors)
MERGE_PARTS = 16  # buffered partial tables that trigger a merge (many small tables cost more than their rows)

# Latency histograms: bucket b holds [10^(b/50), 10^((b+1)/50)) ms, each 4.7 % wide; values are clipped to
# [1 µs, 10^9 ms] (buckets -150 to 449). Merging histograms is adding counts, so it is exact; a percentile is
# read as the representative value of the bucket holding its rank (see percentiles), within PERCENTILE_ERROR.
HIST_PER_DECADE = 50
HIST_FIRST, HIST_LAST = -150, 449
HIST_EDGES = tuple(10 ** (b / HIST_PER_DECADE) for b in range(HIST_FIRST, HIST_LAST + 2))
PERCENTILE_ERROR = 10 ** (0.5 / HIST_PER_DECADE) - 1  # largest relative error of a percentile (2.3 %)
HEATMAP_PER_DECADE = 10  # the heatmap's coarser buckets: HIST_PER_DECADE / 5

GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
              "DescribeGroups", "ListGroups", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "DeleteGroups",
              "ShareGroupHeartbeat", "ShareGroupDescribe", "StreamsGroupHeartbeat", "StreamsGroupDescribe")
# Errors that are steps of the protocol rather than failures (dissectors.kafka.errors.EXPECTED_ERRORS).
EXPECTED_ERRORS = {e.name: e.apis for e in _EXPECTED}
EXPECTED_SUFFIX = " (expected)"  # on a series of errors that are protocol steps, so charts draw them apart

_STEPS = [  # (seconds, multiple, unit for floor_temporal, label)
    (0.001, 1, "millisecond", "1 ms"), (0.01, 10, "millisecond", "10 ms"), (0.1, 100, "millisecond", "100 ms"),
    (1, 1, "second", "1 s"), (5, 5, "second", "5 s"), (10, 10, "second", "10 s"), (30, 30, "second", "30 s"),
    (60, 1, "minute", "1 min"), (300, 5, "minute", "5 min"), (900, 15, "minute", "15 min"),
    (3600, 1, "hour", "1 h"), (21600, 6, "hour", "6 h"), (86400, 1, "day", "1 day"), (604800, 7, "day", "7 days"),
]


@dataclass(frozen=True)
class Interval:
    """The width of a time bin: floor_temporal's (multiple, unit), its seconds and a label for axes; and the
    capture span (µs since the epoch), into which times are held: a time outside it (tables put together by
    hand) is drawn in the first or last interval rather than adding intervals without bound."""

    seconds: float
    multiple: int
    unit: str
    label: str
    first_us: int | None = None
    last_us: int | None = None

    def floor(self, ts: pa.ChunkedArray | pa.Array) -> pa.Array:
        """Each time's interval start, counted from the epoch as floor_temporal counts (the widths are whole
        numbers of ms, s, min, h or days): integer floor division, several times faster than floor_temporal."""
        if isinstance(ts, pa.ChunkedArray):
            ts = ts.combine_chunks()
        if not pa.types.is_timestamp(ts.type):
            return pc.floor_temporal(ts, multiple=self.multiple, unit=self.unit)
        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[ts.type.unit]
        width = round(self.seconds * per_second)
        if width < 1:
            return pc.floor_temporal(ts, multiple=self.multiple, unit=self.unit)
        values = pc.fill_null(ts.cast(pa.int64()), 0).to_numpy()
        if self.first_us is not None and self.last_us is not None:
            values = np.clip(values, self.first_us * per_second // 1_000_000, self.last_us * per_second // 1_000_000)
        floored = pa.array(values // width * width, pa.int64(), mask=ts.is_null().to_numpy(zero_copy_only=False)
                           if ts.null_count else None)
        return floored.cast(ts.type)


def choose_interval(start: pa.Scalar | None, end: pa.Scalar | None, at_least: float = 0.0) -> Interval:
    """The narrowest width, of ``at_least`` seconds or more, that puts the span into at most MAX_BINS intervals."""
    span = 0.0
    bounds: tuple[int | None, int | None] = (None, None)
    if start is not None and end is not None and start.is_valid and end.is_valid:
        first, last = (pc.cast(x, pa.timestamp("us", "UTC")).value for x in (start, end))
        span, bounds = (last - first) / 1e6, (first, last)
    for seconds, multiple, unit, label in _STEPS:
        if seconds >= at_least and span / seconds <= MAX_BINS:
            return Interval(seconds, multiple, unit, label, *bounds)
    days = max(1, math.ceil(span / MAX_BINS / 86400))
    return Interval(days * 86400.0, days, "day", f"{days} days", *bounds)


def earlier(a: pa.Scalar | None, b: pa.Scalar | None) -> pa.Scalar | None:
    if a is None or not a.is_valid:
        return b if b is not None and b.is_valid else None
    return a if b is None or not b.is_valid or a.value <= b.value else b


def later(a: pa.Scalar | None, b: pa.Scalar | None) -> pa.Scalar | None:
    if a is None or not a.is_valid:
        return b if b is not None and b.is_valid else None
    return a if b is None or not b.is_valid or a.value >= b.value else b


def group(t: pa.Table, keys: list[str], aggs: list[tuple], names: list[str], use_threads: bool = True) -> pa.Table:
    """``t.group_by(keys).aggregate(aggs)`` as a table of ``keys`` then ``names`` (one per aggregate), whatever
    order pyarrow puts them in; ``(None, "count_all")`` counts rows."""
    spec = [([], "count_all") if a[0] is None else a for a in aggs]
    g = t.group_by(keys, use_threads=use_threads).aggregate(spec)
    out = ["count_all" if a[0] is None else f"{a[0]}_{a[1]}" for a in aggs]
    return g.select([*keys, *out]).rename_columns([*keys, *names])


_FIRST = pc.ScalarAggregateOptions(skip_nulls=False)


@dataclass
class Accumulator:
    """Per-``keys`` aggregates of tables added one batch at a time, merged exactly: the row count (``count``),
    sums, minima and maxima of columns, and the values of ``first`` columns from the row that comes first by
    ``order`` (a sort_by list; ties keep the order the rows were added in). ``result`` is the merged table.
    With ``max_groups``, a merge that leaves more groups keeps only that many with the most rows (``truncated``
    says so): a bound on memory for keys whose number hostile tables could make as large as the rows."""

    keys: list[str]
    sums: tuple[str, ...] = ()
    mins: tuple[str, ...] = ()
    maxs: tuple[str, ...] = ()
    order: list[tuple[str, str]] = field(default_factory=list)
    first: tuple[str, ...] = ()
    _parts: list[pa.Table] = field(default_factory=list)
    _rows: int = 0
    max_groups: int | None = None
    truncated: bool = False
    _dirty: bool = False  # a part added as it came (add_partial) may hold a key twice

    def _reduce(self, t: pa.Table, raw: bool) -> pa.Table:
        if self.order:
            t = t.sort_by(self.order)
        aggs = [(None, "count_all") if raw else ("count", "sum")]
        aggs += [(c, "sum") for c in self.sums] + [(c, "min") for c in self.mins] + [(c, "max") for c in self.maxs]
        aggs += [(c, "first", _FIRST) for c in self.first]
        names = ["count", *self.sums, *self.mins, *self.maxs, *self.first]
        return group(t, self.keys, aggs, names, use_threads=not self.order)

    def add(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        part = self._reduce(t, raw=True)
        self._parts.append(part)
        self._rows += part.num_rows
        if self._rows > MERGE_ROWS or len(self._parts) >= MERGE_PARTS:
            self._merge()

    def _merge(self) -> None:
        if len(self._parts) > 1 or (self._parts and self._dirty):
            merged = self._reduce(pa.concat_tables(self._parts), raw=False)
            if self.max_groups is not None and merged.num_rows > self.max_groups:
                merged = merged.sort_by([("count", "descending")]).slice(0, self.max_groups)
                self.truncated = True
            self._parts = [merged]
            self._dirty = False
        self._rows = sum(p.num_rows for p in self._parts)

    def add_partial(self, t: pa.Table) -> None:
        """Aggregates made elsewhere, with the columns (and names) of ``result``."""
        if t.num_rows:
            self._parts.append(t)
            self._dirty = True
            self._rows += t.num_rows
            if self._rows > MERGE_ROWS or len(self._parts) >= MERGE_PARTS:
                self._merge()

    def result(self) -> pa.Table | None:
        """The merged aggregates (None when nothing was added)."""
        self._merge()
        return self._parts[0] if self._parts else None


class TopRows:
    """The first ``n`` rows by ``order`` of tables added one batch at a time (ties: the earlier added first)."""

    def __init__(self, n: int, order: list[tuple[str, str]]) -> None:
        self.n, self.order = n, order
        self.rows: pa.Table | None = None
        self.seen = 0

    def add(self, t: pa.Table) -> None:
        self.seen += t.num_rows
        if t.num_rows == 0 and self.rows is not None:
            return
        both = t if self.rows is None else pa.concat_tables([self.rows, t])
        self.rows = both.sort_by(self.order).slice(0, self.n) if self.order else both.slice(0, self.n)


class Distinct:
    """Distinct non-null values of a column, kept up to ``limit`` of them (then only "more than limit")."""

    def __init__(self, limit: int = 100_000) -> None:
        self.values: set = set()
        self.limit = limit
        self.overflow = False

    def add(self, values: pa.Array | pa.ChunkedArray) -> None:
        if self.overflow or len(values) == 0:
            return
        self.values.update(v for v in pc.unique(pc.drop_null(values)).to_pylist())
        if len(self.values) > self.limit:
            self.overflow = True
            self.values = set()

    def text(self) -> str:
        return f"more than {self.limit:,}" if self.overflow else f"{len(self.values):,}"


def top_keys(t: pa.Table, key: str, weight: str, n: int = TOP_N) -> list:
    """The n values of ``key`` with the largest sum of ``weight`` over ``t`` (an aggregate), largest first."""
    if t.num_rows == 0:
        return []
    g = group(t, [key], [(weight, "sum")], ["w"])
    g = g.filter(pc.is_valid(g[key])).sort_by([("w", "descending"), (key, "ascending")])
    return g[key].slice(0, n).to_pylist()


def keep_top(values: pa.ChunkedArray | pa.Array, top: list) -> pa.ChunkedArray | pa.Array:
    """``values`` with every value outside ``top`` (nulls too) replaced by OTHER."""
    values = values.cast(pa.string())
    keep = pc.fill_null(pc.is_in(values, pa.array(top, pa.string())), False)
    return pc.if_else(keep, values, pa.scalar(OTHER))


class SeriesOverTime:
    """Aggregates per (interval ``bin``, ``series``) of tables added batch by batch, drawn with the TOP_N series
    by ``weight`` (the row count, or a summed column) and the rest folded into OTHER at the end. Should the
    series be more than MAX_SERIES_KEPT, the smallest by their running totals are folded into OTHER early
    (``folded`` says so: the named series' own figures are then exact only if they were never that small)."""

    def __init__(self, interval: Interval, sums: tuple[str, ...] = (), maxs: tuple[str, ...] = (),
                 first: tuple[str, ...] = (), weight: str = "count") -> None:
        self.interval = interval
        order = [("ts", "ascending"), *((c, "ascending") for c in first)] if first else []
        self.acc = Accumulator(["bin", "series"], sums=sums, maxs=maxs, order=order,
                               first=("ts", *first) if first else ())
        self.weight = weight
        self.folded = False
        self._raw = ("ts", "series", *sums, *maxs, *first)
        self._partial = ("bin", "series", "count", *sums, *maxs, *(("ts", *first) if first else ()))

    def add(self, t: pa.Table) -> None:
        """Rows: ``t`` holds ts (timestamp), series (string) and the sums, maxs and first columns."""
        t = t.select(list(self._raw))
        t = t.set_column(1, "series", t["series"].cast(pa.string())).append_column("bin", self.interval.floor(t["ts"]))
        self.acc.add(t.filter(pc.is_valid(t["bin"])))
        self._bound()

    def add_partial(self, t: pa.Table) -> None:
        """Aggregates already made (by the Spark job) over finer intervals: ``t`` holds bin (any time in
        the interval), series, count and the other columns of the result."""
        t = t.set_column(t.schema.get_field_index("bin"), "bin", self.interval.floor(t["bin"]))
        t = t.set_column(t.schema.get_field_index("series"), "series", t["series"].cast(pa.string()))
        t = t.select(list(self._partial))
        t = t.filter(pc.is_valid(t["bin"]))
        self.acc.add_partial(t)
        self._bound()

    def _bound(self) -> None:
        if self.acc._rows <= MERGE_ROWS // 2:
            return
        self.acc._merge()
        part = self.acc._parts[0]
        if pc.count_distinct(part["series"], mode="all").as_py() <= MAX_SERIES_KEPT:
            return
        top = top_keys(part, "series", self.weight, MAX_SERIES_KEPT)
        self.acc._parts = [self.acc._reduce(part.set_column(1, "series", keep_top(part["series"], top)), raw=False)]
        self.acc._rows = self.acc._parts[0].num_rows
        self.folded = True

    def merged(self) -> pa.Table | None:
        """Every series' aggregates (None when no row had a time)."""
        self.acc._merge()
        return self.acc._parts[0] if self.acc._parts and self.acc._parts[0].num_rows else None

    def result(self, top: list | None = None, n: int = TOP_N) -> pa.Table | None:
        """The aggregates with the series in ``top`` (default: the ``n`` largest by weight) by name, the rest
        as OTHER, sorted by (bin, series); None when no row had a time."""
        part = self.merged()
        if part is None:
            return None
        if top is None:
            top = top_keys(part, "series", self.weight, n)
        if pc.count_distinct(part["series"], mode="all").as_py() > len(top) or not top:
            part = self.acc._reduce(part.set_column(1, "series", keep_top(part["series"], top)), raw=False)
        return part.sort_by([("bin", "ascending"), ("series", "ascending")])


# --- Latency histograms ---------------------------------------------------------------------------------------

_EDGES = np.array(HIST_EDGES)


def bucket_of(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The histogram bucket of each value in ms (non-null, not NaN): the b with HIST_EDGES[b] <= v <
    HIST_EDGES[b + 1], clipped to the first and last bucket. By comparison with the edges (no logarithm), so
    that another engine comparing with the same edges puts every value in the same bucket."""
    v = np.asarray(values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array)
                   else values.combine_chunks().to_numpy(zero_copy_only=False), dtype=np.float64)
    idx = np.searchsorted(_EDGES, v, side="right") - 1
    return pa.array(np.clip(idx, 0, len(_EDGES) - 2) + HIST_FIRST, pa.int16())


def bucket_edges(bucket: int, per_decade: int = HIST_PER_DECADE) -> tuple[float, float]:
    return 10 ** (bucket / per_decade), 10 ** ((bucket + 1) / per_decade)


class LatencyHistograms:
    """Per (key columns, bucket): exchanges, the smallest and largest value, and the slowest exchange's capture
    file and response packet (ties: the lower packet number, then the file name)."""

    COLUMNS = ("count", "min_ms", "max_ms", "capture_file", "frame")

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.acc = Accumulator([*keys, "bucket"], mins=("min_ms",),
                               order=[("value", "descending"), ("frame", "ascending"), ("capture_file", "ascending")],
                               first=("value", "capture_file", "frame"))

    def add(self, t: pa.Table) -> None:
        """``t``: the key columns, value (ms), capture_file, frame; rows without a value are left out."""
        t = t.filter(pc.and_(pc.is_valid(t["value"]), pc.invert(pc.is_nan(t["value"]))))
        if t.num_rows == 0:
            return
        t = t.select([*self.keys, "value", "capture_file", "frame"])
        t = t.append_column("bucket", bucket_of(t["value"])).append_column("min_ms", t["value"])
        self.acc.add(t)

    def add_partial(self, t: pa.Table) -> None:
        """Histograms made elsewhere: the key columns, bucket, count, min_ms, max_ms, capture_file, frame."""
        t = t.select([*self.keys, "bucket", "count", "min_ms", "max_ms", "capture_file", "frame"])
        self.acc.add_partial(t.rename_columns([*self.keys, "bucket", "count", "min_ms", "value", "capture_file",
                                               "frame"]))

    def result(self) -> pa.Table | None:
        """keys, bucket, count, min_ms, max_ms, capture_file, frame (None when no value was added)."""
        r = self.acc.result()
        if r is None:
            return None
        return r.rename_columns([*self.keys, "bucket", "count", "min_ms", "max_ms", "capture_file", "frame"])


def merge_histograms(h: pa.Table, keys: list[str]) -> pa.Table:
    """A histogram table (as LatencyHistograms.result) merged over fewer ``keys`` (e.g. series folded)."""
    acc = LatencyHistograms(keys)
    acc.add_partial(h)
    return acc.result()


def percentiles(h: pa.Table, keys: list[str], quantiles: tuple[float, ...] = QUANTILES) -> pa.Table:
    """Per ``keys`` of a histogram table (keys, bucket, count, min_ms, max_ms, capture_file, frame): the
    exchanges, the largest value and its exchange, and each quantile q as ``p<100q>``.

    The quantile is the value of rank floor(q * (n - 1)) (0-based: pyarrow's interpolation="lower"): the
    bucket holding that rank is found from the cumulative counts, and its representative value is the
    geometric middle of its edges, held within the smallest and largest value the bucket saw. The true value
    lies in the same bucket, so the error is below PERCENTILE_ERROR (relative); it is exact when the bucket
    holds one distinct value, and the largest value (``max``) is always exact."""
    h = h.sort_by([*((k, "ascending") for k in keys), ("bucket", "ascending")])
    g = group(h, keys, [(None, "count_all"), ("count", "sum"), ("max_ms", "max")], ["buckets", "count", "max"],
              use_threads=False)
    slow = h.sort_by([*((k, "ascending") for k in keys), ("max_ms", "descending"), ("frame", "ascending"),
                      ("capture_file", "ascending")])
    slow = group(slow, keys, [("capture_file", "first", _FIRST), ("frame", "first", _FIRST)],
                 ["capture_file", "frame"], use_threads=False)
    counts = h["count"].to_numpy().astype(np.int64)
    cum = np.cumsum(counts)
    n = g["count"].to_numpy().astype(np.int64)
    before = np.concatenate([[0], np.cumsum(n)[:-1]])
    bucket = h["bucket"].to_numpy().astype(np.float64)
    lo = h["min_ms"].to_numpy(zero_copy_only=False).astype(np.float64)
    hi = h["max_ms"].to_numpy(zero_copy_only=False).astype(np.float64)
    cols = {k: g[k] for k in keys}
    cols |= {"count": g["count"], "max": g["max"]}
    for q in quantiles:
        rank = np.floor(q * (n - 1)).astype(np.int64)
        idx = np.searchsorted(cum, before + rank, side="right")
        mid = 10 ** ((bucket[idx] + 0.5) / HIST_PER_DECADE)
        cols[f"p{round(q * 100)}"] = np.clip(mid, lo[idx], hi[idx])
    out = pa.table(cols)
    return out.append_column("capture_file", slow["capture_file"]).append_column("frame", slow["frame"])


def coarse_histogram(h: pa.Table, key: str) -> pa.Table:
    """Exchanges per (``key``, heatmap bucket), HEATMAP_PER_DECADE buckets per factor of ten."""
    step = HIST_PER_DECADE // HEATMAP_PER_DECADE
    coarse = pc.floor(pc.divide(h["bucket"].cast(pa.float64()), float(step))).cast(pa.int32())
    g = group(pa.table({"series": h[key], "bucket": coarse, "count": h["count"]}), ["series", "bucket"],
              [("count", "sum")], ["count"])
    return g.sort_by([("series", "ascending"), ("bucket", "ascending")])


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


def error_series(error_name: pa.ChunkedArray, expected: pa.ChunkedArray) -> pa.ChunkedArray:
    """The series of each error: its name, with EXPECTED_SUFFIX when it is a protocol step."""
    return pc.if_else(pc.fill_null(expected, False),
                      pc.binary_join_element_wise(error_name, EXPECTED_SUFFIX, ""), error_name)
