"""The scans behind a report: each table read once in record batches of the columns needed and folded into the
aggregates the sections draw (``aggregate``), so memory stays flat whatever the number of rows. For a Spark
output with the job's aggregate tables (``exchange_counts``, ``latency_histogram``, ``api_usage``), those are
read instead of the exchange rows for the overview, the latency section and the facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from analyzer.derived import lag, triage
from analyzer.report import aggregate as ag
from analyzer.report.source import TableSource

MAX_GROUP_EVENTS = 5000  # markers in the consumer-group timeline
MAX_GROUP_CLIENTS = 60  # its rows
MAX_CONNECTIONS = 200  # bars in the connection timeline
MAX_ERROR_GROUPS = 50  # rows of the error table

EXCHANGE_COLUMNS = ["capture_file", "connection_id", "correlation_id", "client_ip", "api_key", "api_name",
                    "client_id", "request_first_ts", "response_first_ts", "latency_ms", "error_code", "error_name",
                    "status", "request_frame", "response_frame", "record_count", "waited", "service_ms"]
GROUP_EVENT_COLUMNS = ["ts", "api_name", "client", "status", "error_code", "error_name", "latency_ms",
                       "capture_file", "request_frame"]
GROUP_SCAN_COLUMNS = ["api_name", "client_id", "client_ip", "status", "error_code", "error_name", "latency_ms",
                      "capture_file", "request_frame", "request_first_ts", "response_first_ts"]
HIST_KEYS = ["bin", "series", "held"]


def exchange_time(t: pa.Table) -> pa.ChunkedArray:
    """An exchange's time on the plots: its request's first byte, or the response's for an orphan response."""
    return pc.coalesce(t["request_first_ts"], t["response_first_ts"])


def latency_values(t: pa.Table, has_waited: bool) -> pa.Table:
    """series, held and value (ms) of the exchanges with a latency: held by design (the waited column; null, a
    Fetch that brought records after a while, counted with them) are drawn as waits with their latency_ms,
    the rest as service time (service_ms, else latency_ms). Tables without the waited column: waits by API."""
    t = t.filter(pc.is_valid(t["latency_ms"]))
    series = ag.latency_series(t["api_name"], t["record_count"])
    held = pc.fill_null(t["waited"], True) if has_waited else ag.is_wait(series)
    value = pc.if_else(held, t["latency_ms"], pc.coalesce(t["service_ms"], t["latency_ms"]))
    return pa.table({"ts": t["ts"], "series": series, "held": held, "value": value,
                     "capture_file": t["capture_file"], "frame": t["response_frame"]})


def _is_error(status: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(status, "error"), False)


def group_client(client_id: pa.ChunkedArray, client_ip: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.binary_join_element_wise(pc.fill_null(client_id, "(no client_id)"), " @ ", client_ip, "")


def _group_rows(t: pa.Table) -> tuple[pa.Table, pa.ChunkedArray]:
    """The group-protocol exchanges of ``t`` as markers (GROUP_EVENT_COLUMNS), and whether each is kept when
    error-free heartbeats are left out."""
    g = t.filter(pc.fill_null(pc.is_in(t["api_name"], pa.array(ag.GROUP_APIS)), False))
    g = g.append_column("client", group_client(g["client_id"], g["client_ip"]))
    if "ts" not in g.schema.names:
        g = g.append_column("ts", exchange_time(g))
    kept = pc.fill_null(pc.or_(pc.not_equal(g["api_name"], "Heartbeat"), pc.equal(g["status"], "error")), False)
    return g.select(GROUP_EVENT_COLUMNS), kept


class GroupEvents:
    """The group-protocol exchanges drawn as markers: counted per client (with and without the error-free
    heartbeats) in the exchanges' scan, which also keeps the earliest MAX_GROUP_EVENTS of each kind; only when
    more than MAX_GROUP_CLIENTS clients must be chosen from are the exchanges scanned again."""

    def __init__(self) -> None:
        self.per_client = ag.Accumulator(["client"], sums=("kept",), max_groups=ag.MAX_GROUPS)
        self.rows = self.kept = 0
        self.first = {k: ag.TopRows(MAX_GROUP_EVENTS, [("ts", "ascending")]) for k in ("all", "kept")}

    def add(self, t: pa.Table) -> None:
        """``t``: exchanges with the columns of GROUP_SCAN_COLUMNS."""
        g, kept = _group_rows(t)
        if g.num_rows == 0:
            return
        self.rows += g.num_rows
        self.kept += pc.sum(kept).as_py() or 0
        self.per_client.add(pa.table({"client": g["client"], "kept": kept.cast(pa.int64())}))
        self.first["all"].add(g)
        self.first["kept"].add(g.filter(kept))

    def select(self, source: TableSource) -> tuple[pa.Table | None, str]:
        """The markers to draw (None: no group exchange) and a note on what was left out."""
        if self.rows == 0:
            return None, ""
        note = ""
        drop_heartbeats = self.rows > MAX_GROUP_EVENTS
        if drop_heartbeats:
            note = f" Heartbeats without error are left out ({self.rows - self.kept:,} of them)."
        clients = self.per_client.result()
        weight = "kept" if drop_heartbeats else "count"
        clients = clients.filter(pc.greater(clients[weight], 0))
        named = clients.filter(pc.is_valid(clients["client"]))
        if named.num_rows <= MAX_GROUP_CLIENTS:
            total = pc.sum(clients[weight]).as_py() or 0
            if total > MAX_GROUP_EVENTS:
                note += f" Only the first {MAX_GROUP_EVENTS:,} of their {total:,} exchanges are drawn."
            return self.first["kept" if drop_heartbeats else "all"].rows, note
        chosen = ag.top_keys(named, "client", weight, MAX_GROUP_CLIENTS)
        note += f" The {MAX_GROUP_CLIENTS} clients with the most exchanges are drawn (of {named.num_rows:,})."
        total = pc.sum(named.filter(pc.is_in(named["client"], pa.array(chosen)))[weight]).as_py() or 0
        if total > MAX_GROUP_EVENTS:
            note += f" Only the first {MAX_GROUP_EVENTS:,} of their {total:,} exchanges are drawn."
        top = ag.TopRows(MAX_GROUP_EVENTS, [("ts", "ascending")])
        for t in source.scan("exchanges", GROUP_SCAN_COLUMNS,
                             filter=ds.field("api_name").isin(list(ag.GROUP_APIS))):
            g, kept = _group_rows(t)
            if drop_heartbeats:
                g = g.filter(kept)
            top.add(g.filter(pc.fill_null(pc.is_in(g["client"], pa.array(chosen)), False)))
        return top.rows, note


@dataclass
class ExchangeAggregates:
    """What the sections draw from the exchanges (or from the Spark job's aggregates of them)."""

    interval: ag.Interval
    rows: int = 0
    errors: int = 0  # exchanges with status error, failures and expected protocol steps alike
    expected: int = 0  # of those, the protocol steps (ag.expected_error)
    unchecked: int = 0
    clients: ag.Distinct = field(default_factory=ag.Distinct)
    requests: ag.SeriesOverTime = None  # by api_name; first request packet per interval
    failures: ag.SeriesOverTime = None  # status error, by error_series; first failed response packet
    latency: ag.LatencyHistograms = field(default_factory=lambda: ag.LatencyHistograms(HIST_KEYS))
    groups: GroupEvents = field(default_factory=GroupEvents)
    from_aggregates: bool = False

    def __post_init__(self) -> None:
        self.requests = ag.SeriesOverTime(self.interval, first=("request_frame", "capture_file"))
        self.failures = ag.SeriesOverTime(self.interval, first=("response_frame", "capture_file"))

    def add(self, t: pa.Table, has_waited: bool) -> None:
        t = t.append_column("ts", exchange_time(t))
        error = _is_error(t["status"])
        self.rows += t.num_rows
        self.errors += pc.sum(error).as_py() or 0
        self.unchecked += pc.sum(pc.equal(t["status"], "unchecked")).as_py() or 0
        self.clients.add(t["client_id"])
        self.requests.add(t.append_column("series", t["api_name"]))
        failed = t.filter(error)
        if failed.num_rows:
            expected = ag.expected_error(failed["error_name"], failed["api_name"])
            self.expected += pc.sum(expected).as_py() or 0
            self.failures.add(failed.append_column("series", ag.error_series(failed["error_name"], expected)))
        lat = latency_values(t, has_waited)
        self.latency.add(lat.append_column("bin", self.interval.floor(lat["ts"])))
        self.groups.add(t)


def scan_exchanges(source: TableSource, interval: ag.Interval) -> ExchangeAggregates:
    """One scan of the exchanges' rows."""
    agg = ExchangeAggregates(interval)
    has_waited = source.has("exchanges", "waited")
    for t in source.scan("exchanges", EXCHANGE_COLUMNS):
        agg.add(t, has_waited)
    return agg


def has_exchange_aggregates(source: TableSource) -> bool:
    return source.has("exchange_counts") and source.has("latency_histogram") and source.has("api_usage")


def read_exchange_aggregates(source: TableSource, interval: ag.Interval) -> ExchangeAggregates:
    """The Spark job's per-minute aggregates rolled up to ``interval`` (at least a minute); the exchange rows
    are scanned only for the group-protocol ones (the consumer-group section draws each)."""
    agg = ExchangeAggregates(interval, from_aggregates=True)
    for t in source.scan("exchange_counts", ["minute", "api_name", "status", "error_name", "exchanges", "first_ts",
                                             "request_capture_file", "request_frame", "response_capture_file",
                                             "response_frame"]):
        agg.rows += pc.sum(t["exchanges"]).as_py() or 0
        error = _is_error(t["status"])
        agg.errors += pc.sum(pc.if_else(error, t["exchanges"], 0)).as_py() or 0
        unchecked = pc.fill_null(pc.equal(t["status"], "unchecked"), False)
        agg.unchecked += pc.sum(pc.if_else(unchecked, t["exchanges"], 0)).as_py() or 0
        agg.requests.add_partial(pa.table({
            "bin": t["minute"], "series": t["api_name"], "count": t["exchanges"], "ts": t["first_ts"],
            "request_frame": t["request_frame"], "capture_file": t["request_capture_file"]}))
        failed = t.filter(error)
        expected = ag.expected_error(failed["error_name"], failed["api_name"])
        agg.expected += pc.sum(pc.if_else(expected, failed["exchanges"], 0)).as_py() or 0
        agg.failures.add_partial(pa.table({
            "bin": failed["minute"], "series": ag.error_series(failed["error_name"], expected),
            "count": failed["exchanges"],
            "ts": failed["first_ts"], "response_frame": failed["response_frame"],
            "capture_file": failed["response_capture_file"]}))
    for t in source.scan("latency_histogram", ["minute", "series", "held", "bucket", "count", "min_ms", "max_ms",
                                               "slowest_capture_file", "slowest_response_frame"]):
        t = t.set_column(0, "bin", interval.floor(t["minute"])).rename_columns(
            ["bin", "series", "held", "bucket", "count", "min_ms", "max_ms", "capture_file", "frame"])
        agg.latency.add_partial(t.set_column(3, "bucket", t["bucket"].cast(pa.int16())))
    for t in source.scan("api_usage", ["client_id"]):
        agg.clients.add(t["client_id"])
    for t in source.scan("exchanges", GROUP_SCAN_COLUMNS, filter=ds.field("api_name").isin(list(ag.GROUP_APIS))):
        agg.groups.add(t)
    return agg


@dataclass
class ErrorAggregates:
    """The errors table: error codes per interval by name (expected ones labelled), and per (error, API,
    client, topic, partition); each with its first row's exchange, whose response packet is looked up last."""

    interval: ag.Interval
    rows: int = 0
    over_time: ag.SeriesOverTime = None
    groups: ag.Accumulator = None

    KEYS = ("error_name", "api_name", "client_id", "topic", "partition", "expected", "retriable")
    EXCHANGE = ("capture_file", "connection_id", "correlation_id", "api_key")

    def __post_init__(self) -> None:
        self.over_time = ag.SeriesOverTime(self.interval, first=self.EXCHANGE)
        self.groups = ag.Accumulator(list(self.KEYS), mins=("first_ts",), maxs=("last_ts",), max_groups=ag.MAX_GROUPS,
                                     order=[("ts", "ascending"), *((c, "ascending") for c in self.EXCHANGE)],
                                     first=("ts", *self.EXCHANGE))

    def add(self, t: pa.Table) -> None:
        self.rows += t.num_rows
        expected = ag.expected_error(t["error_name"], t["api_name"])
        t = t.append_column("expected", expected)
        label = ag.error_series(t["error_name"], expected)
        self.over_time.add(t.append_column("series", label).append_column("ts", t["response_last_ts"]))
        self.groups.add(t.select([*self.KEYS, *self.EXCHANGE]).append_column("ts", t["response_last_ts"])
                        .append_column("first_ts", t["response_last_ts"])
                        .append_column("last_ts", t["response_last_ts"]))


ERROR_COLUMNS = ["capture_file", "connection_id", "correlation_id", "api_key", "api_name", "client_id",
                 "response_last_ts", "topic", "partition", "error_code", "error_name", "retriable"]


def scan_errors(source: TableSource, interval: ag.Interval) -> ErrorAggregates:
    agg = ErrorAggregates(interval)
    for t in source.scan("errors", ERROR_COLUMNS):
        agg.add(t)
    return agg


def response_frames(source: TableSource, keys: pa.Table) -> pa.Table:
    """The response packet (lowest, should a key repeat) of the failed exchanges with these (capture_file,
    connection_id, correlation_id, api_key): a scan of the exchanges narrowed to those ids."""
    names = list(ErrorAggregates.EXCHANGE)
    keys = keys.select(names).group_by(names).aggregate([])
    found = ag.Accumulator(names, mins=("response_frame",))
    if keys.num_rows:
        narrow = (ds.field("connection_id").isin(pc.unique(pc.drop_null(keys["connection_id"])))
                  & ds.field("correlation_id").isin(pc.unique(pc.drop_null(keys["correlation_id"]))))
        for t in source.scan("exchanges", [*names, "response_frame", "error_count", "status"], filter=narrow):
            t = t.filter(pc.or_(pc.fill_null(pc.greater(t["error_count"], 0), False), pc.equal(t["status"], "error")))
            t = t.select([*names, "response_frame"]).join(keys, names, join_type="inner")
            found.add(t)
    got = found.result()
    if got is None:
        return pa.table({**{n: pa.array([], keys.schema.field(n).type) for n in names},
                         "frame": pa.array([], pa.int64())})
    return got.select([*names, "response_frame"]).rename_columns([*names, "frame"])


def attach_frames(t: pa.Table, frames: pa.Table, order: list[tuple[str, str]]) -> pa.Table:
    """``t`` with the ``frame`` of its (capture_file, connection_id, correlation_id, api_key), sorted by order."""
    names = list(ErrorAggregates.EXCHANGE)
    frames = frames.set_column(frames.schema.get_field_index("frame"), "frame", frames["frame"].cast(pa.int64()))
    return t.join(frames, names, join_type="left outer").sort_by(order)


@dataclass
class TrafficAggregates:
    """The partitions table's Produce and Fetch entries: record bytes per interval and topic, per partition,
    per codec; and the consumer lag Fetch responses report."""

    interval: ag.Interval
    rows: int = 0
    bytes: int = 0
    produce: ag.SeriesOverTime = None
    fetch: ag.SeriesOverTime = None
    per_partition: dict = field(default_factory=dict)
    codecs: ag.Accumulator = field(default_factory=lambda: ag.Accumulator(
        ["codec"], sums=("bytes", "uncompressed_bytes", "batches", "records")))
    lag: ag.SeriesOverTime = None

    def __post_init__(self) -> None:
        self.produce = ag.SeriesOverTime(self.interval, sums=("bytes", "records"), weight="bytes")
        self.fetch = ag.SeriesOverTime(self.interval, sums=("bytes", "records"), weight="bytes")
        self.lag = ag.SeriesOverTime(self.interval, maxs=("max_lag",))
        self.per_partition = {k: ag.Accumulator(["topic", "partition"], sums=("bytes", "records"),
                                                max_groups=ag.MAX_GROUPS)
                              for k in ("produced", "fetched")}

    def add(self, p: pa.Table) -> None:
        self.rows += p.num_rows
        produce = p.filter(pc.equal(p["api_key"], 0))
        fetch = p.filter(pc.and_(pc.equal(p["api_key"], 1),  # consumption: followers' replication left out
                                 pc.invert(pc.fill_null(pc.equal(p["fetch_kind"], "follower"), False))))
        produce = pa.table({"ts": produce["request_last_ts"], "series": produce["topic"],
                            "topic": produce["topic"], "partition": produce["partition"],
                            "bytes": produce["request_record_bytes"], "records": produce["records"],
                            "batches": produce["batches"], "codec": produce["codec"],
                            "uncompressed_bytes": produce["uncompressed_bytes"]})
        fetched = pa.table({"ts": fetch["response_last_ts"], "series": fetch["topic"], "topic": fetch["topic"],
                            "partition": fetch["partition"], "bytes": fetch["response_record_bytes"],
                            "records": fetch["records"]})
        self.bytes += (pc.sum(produce["bytes"]).as_py() or 0) + (pc.sum(fetched["bytes"]).as_py() or 0)
        for t, over_time, kind in ((produce, self.produce, "produced"), (fetched, self.fetch, "fetched")):
            over_time.add(t)
            self.per_partition[kind].add(t.filter(pc.is_valid(t["topic"])).select(["topic", "partition", "bytes",
                                                                                   "records"]))
        self.codecs.add(produce.filter(pc.is_valid(produce["codec"])).select(
            ["codec", "bytes", "uncompressed_bytes", "batches", "records"]))
        lag = fetch.filter(pc.is_valid(fetch["consumer_lag"]))
        self.lag.add(pa.table({"ts": lag["response_last_ts"], "series": lag["topic"], "max_lag": lag["consumer_lag"]}))


PARTITION_COLUMNS = ["api_key", "topic", "partition", "request_last_ts", "response_last_ts", "request_record_bytes",
                     "response_record_bytes", "records", "batches", "codec", "uncompressed_bytes", "consumer_lag",
                     "fetch_kind"]


def scan_partitions(source: TableSource, interval: ag.Interval) -> TrafficAggregates:
    agg = TrafficAggregates(interval)
    for t in source.scan("partitions", PARTITION_COLUMNS, filter=ds.field("api_key").isin([0, 1])):
        agg.add(t)
    return agg


CONNECTION_COLUMNS = ["capture_file", "connection_id", "client_ip", "client_port", "broker_ip", "broker_port",
                      "first_ts", "last_ts", "retransmissions", "out_of_order", "gap_bytes", "gaps", "syn_seen",
                      "requests", "resyncs", "ended", "client_ids", "tls"]


@dataclass
class ConnectionAggregates:
    """The connections table: openings and closings per interval, the connections worth a bar in the
    timeline, the health totals."""

    interval: ag.Interval
    rows: int = 0
    brokers: ag.Distinct = field(default_factory=ag.Distinct)
    client_ips: ag.Distinct = field(default_factory=ag.Distinct)
    events: ag.SeriesOverTime = None
    timeline: ag.TopRows = field(default_factory=lambda: ag.TopRows(
        MAX_CONNECTIONS, [("trouble", "descending"), ("rst", "descending"), ("first_ts", "ascending")]))
    totals: dict = field(default_factory=lambda: dict.fromkeys(("gaps", "gap_bytes", "retransmissions", "resyncs"), 0))

    def __post_init__(self) -> None:
        self.events = ag.SeriesOverTime(self.interval, first=("frame", "capture_file"))

    def add(self, c: pa.Table) -> None:
        self.rows += c.num_rows
        self.brokers.add(pc.binary_join_element_wise(c["broker_ip"], c["broker_port"].cast(pa.string()), ":"))
        self.client_ips.add(c["client_ip"])
        for k in self.totals:
            self.totals[k] += pc.sum(c[k]).as_py() or 0
        opened = c.filter(pc.fill_null(c["syn_seen"], False))
        self.events.add(pa.table({"ts": opened["first_ts"],
                                  "series": pa.repeat(pa.scalar(ag.OPENED), opened.num_rows),
                                  "capture_file": opened["capture_file"], "frame": opened["connection_id"]}))
        closed = c.filter(pc.not_equal(c["ended"], "capture_end"))
        self.events.add(pa.table({"ts": closed["last_ts"],
                                  "series": pc.binary_join_element_wise("closed: ", closed["ended"], ""),
                                  "capture_file": closed["capture_file"], "frame": closed["connection_id"]}))
        trouble = pc.add(pc.add(c["retransmissions"], c["gaps"]), c["resyncs"])
        self.timeline.add(c.append_column("trouble", trouble).append_column("rst", pc.equal(c["ended"], "rst")))


def scan_connections(source: TableSource, interval: ag.Interval) -> ConnectionAggregates:
    agg = ConnectionAggregates(interval)
    for t in source.scan("connections", CONNECTION_COLUMNS):
        agg.add(t)
    return agg


def scan_lag(source: TableSource) -> lag.LagBuilder:
    """The committed offsets (the offset APIs' partition rows and the group APIs' exchanges: a few per commit),
    held to the high watermarks of the Fetch rows, read batch by batch."""
    offset_apis = pa.array(lag.OFFSET_APIS)
    parts = source.read("partitions", lag.PARTITION_COLUMNS, ds.field("api_name").isin(offset_apis))
    ex = source.read("exchanges", lag.EXCHANGE_COLUMNS, ds.field("api_name").isin(pa.array(lag.GROUP_APIS)))
    builder = lag.LagBuilder(lag.offsets(parts, ex))
    if builder.offsets.num_rows:
        fetch = (ds.field("api_name") == "Fetch") & ds.field("high_watermark").is_valid()
        for batch in source.scan("partitions", lag.PARTITION_COLUMNS, fetch):
            builder.add(batch)
    return builder


def scan_triage(source: TableSource) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Unexpected errors, retry storms and reconnect loops: from the failed exchanges, and the closed connections
    with the exchanges of the short ones only."""
    failed = source.read("exchanges", triage.EXCHANGE_COLUMNS, ds.field("status") == "error")
    conns = source.read("connections", triage.CONNECTION_COLUMNS, ds.field("ended").isin(pa.array(triage.CLOSED)))
    short = pc.less(pc.subtract(conns["last_ts"].cast(pa.int64()), conns["first_ts"].cast(pa.int64())),
                    int(triage.SHORT_S * 1e6))
    conns = conns.filter(pc.fill_null(short, False))
    on_short = source.read("exchanges", triage.EXCHANGE_COLUMNS,
                           ds.field("connection_id").isin(pc.unique(conns["connection_id"])
                                                          if conns.num_rows else pa.array([], pa.int64())))
    return (triage.unexpected_errors(failed), triage.retry_storms(failed),
            triage.reconnect_loops(conns, on_short))


# --- Share groups and transactions -------------------------------------------------------------------------------

MAX_SHARE_MEMBERS = 40  # share-group members (per topic) drawn: those given the most records
MAX_TRANSACTIONS = 2000  # transactions drawn as markers: the ones not committed first, then the longest
MAX_TRANSACTIONAL_IDS = 30  # rows of the per-id chart: the ids with the most transactions
MAX_UNCOMMITTED = 50  # rows of the table of transactions that did not commit

SHARE_COLUMNS = ["capture_file", "group_id", "topic", "member_id", "client_id", "first_ts", "last_ts",
                 "acquired_records", "redelivered_records", "accepted", "released", "rejected", "renewed",
                 "failed_acks", "lock_lost", "unacknowledged", "untracked", "processed", "processing_p50_ms",
                 "processing_p99_ms", "processing_max_ms"]
SHARE_RANGE_COLUMNS = ["ts", "action", "first_offset", "last_offset", "delivery_count"]
FIRST_DELIVERY, REDELIVERY = "first delivery", "redelivery"


@dataclass
class ShareAggregates:
    """share_consumption's members (the MAX_SHARE_MEMBERS given the most records), and share_ranges' records per
    interval: acquired (first deliveries and redeliveries) and acknowledged (by action)."""

    interval: ag.Interval
    rows: int = 0
    ranges: int = 0
    members: ag.TopRows = field(default_factory=lambda: ag.TopRows(MAX_SHARE_MEMBERS, [
        ("acquired_records", "descending"), ("capture_file", "ascending"), ("group_id", "ascending"),
        ("topic", "ascending"), ("member_id", "ascending")]))
    acquired: ag.SeriesOverTime = None
    acknowledged: ag.SeriesOverTime = None

    def __post_init__(self) -> None:
        self.acquired = ag.SeriesOverTime(self.interval, sums=("records",), weight="records")
        self.acknowledged = ag.SeriesOverTime(self.interval, sums=("records",), weight="records")

    def add_ranges(self, t: pa.Table) -> None:
        self.ranges += t.num_rows
        t = t.append_column("records", pc.add(pc.subtract(t["last_offset"], t["first_offset"]), 1))
        acquired = pc.fill_null(pc.equal(t["action"], "acquired"), False)
        got = t.filter(acquired)
        again = pc.fill_null(pc.greater_equal(got["delivery_count"], 2), False)
        self.acquired.add(pa.table({"ts": got["ts"], "series": pc.if_else(again, REDELIVERY, FIRST_DELIVERY),
                                    "records": got["records"]}))
        acked = t.filter(pc.invert(acquired))
        self.acknowledged.add(pa.table({"ts": acked["ts"], "series": pc.fill_null(acked["action"], "unknown"),
                                        "records": acked["records"]}))


def scan_share(source: TableSource, interval: ag.Interval) -> ShareAggregates:
    agg = ShareAggregates(interval)
    for t in source.scan("share_consumption", SHARE_COLUMNS):
        agg.rows += t.num_rows
        agg.members.add(t.set_column(t.schema.get_field_index("acquired_records"), "acquired_records",
                                     pc.fill_null(t["acquired_records"], 0)))
    for t in source.scan("share_ranges", SHARE_RANGE_COLUMNS):
        agg.add_ranges(t)
    return agg


TRANSACTION_COLUMNS = ["capture_file", "transactional_id", "producer_id", "producer_epoch", "client_id", "start_ts",
                       "end_request_ts", "end_ts", "duration_ms", "commit_ms", "outcome", "partitions", "groups",
                       "produce_requests", "records", "end_attempts", "errors"]


@dataclass
class TransactionAggregates:
    """The transactions table: counts per transactional id and outcome (with the longest), the transactions
    drawn as markers (MAX_TRANSACTIONS: those not committed first, then the longest) and the first of those
    that did not commit."""

    rows: int = 0
    per_id: ag.Accumulator = field(default_factory=lambda: ag.Accumulator(
        ["transactional_id", "outcome"], maxs=("duration_ms",), max_groups=ag.MAX_GROUPS))
    points: ag.TopRows = field(default_factory=lambda: ag.TopRows(MAX_TRANSACTIONS, [
        ("committed", "ascending"), ("duration_ms", "descending"), ("x", "ascending")]))
    uncommitted: ag.TopRows = field(default_factory=lambda: ag.TopRows(MAX_UNCOMMITTED, [
        ("x", "ascending"), ("transactional_id", "ascending")]))
    outcomes: ag.Accumulator = field(default_factory=lambda: ag.Accumulator(["outcome"]))

    def add(self, t: pa.Table) -> None:
        self.rows += t.num_rows
        t = t.append_column("x", pc.coalesce(t["start_ts"], t["end_request_ts"], t["end_ts"]))
        committed = pc.fill_null(pc.equal(t["outcome"], "committed"), False)
        t = t.append_column("committed", committed)
        self.per_id.add(t.select(["transactional_id", "outcome", "duration_ms"]))
        self.outcomes.add(t.select(["outcome"]))
        self.points.add(t.filter(pc.is_valid(t["x"])))
        self.uncommitted.add(t.filter(pc.invert(committed)))


def scan_transactions(source: TableSource) -> TransactionAggregates:
    agg = TransactionAggregates()
    for t in source.scan("transactions", TRANSACTION_COLUMNS):
        agg.add(t)
    return agg
