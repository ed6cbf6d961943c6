"""The report page: sections of figures and captions built from a TableSource, laid out as one HTML file with
plotly.js inlined (it must open on a laptop with no network). ``build`` is pure; ``write_report`` writes."""

from __future__ import annotations

import datetime as dt
import html
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from analyzer.report import aggregate as ag
from analyzer.report import figures as fg
from analyzer.report.source import TableSource

MAX_GROUP_EVENTS = 5000  # markers in the consumer-group timeline
MAX_GROUP_CLIENTS = 60  # its rows
MAX_CONNECTIONS = 200  # bars in the connection timeline
TOP_PARTITIONS = 20


@dataclass
class Part:
    """One figure (or HTML table) with the caption that says what to look for, or the reason it is empty."""

    title: str
    caption: str
    figure: object | None = None  # a plotly Figure
    table_html: str | None = None
    empty: str | None = None


@dataclass
class Section:
    id: str
    title: str
    parts: list[Part] = field(default_factory=list)
    intro: str = ""


def _e(text: object) -> str:
    return html.escape("" if text is None else str(text))


def _when(ts: pa.Scalar | None) -> str:
    if ts is None or not ts.is_valid:
        return "unknown"
    return ts.as_py().astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _html_table(t: pa.Table, columns: list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{_e(label)}</th>" for _, label in columns)
    rows = []
    for row in t.select([c for c, _ in columns]).to_pylist():
        cells = []
        for c, _ in columns:
            v = row[c]
            if isinstance(v, dt.datetime):
                v = v.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            elif isinstance(v, int) and not isinstance(v, bool):
                v = f"{v:,}"
            cells.append(f"<td>{_e('' if v is None else v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section]
    interval: ag.Interval


def _exchange_time(ex: pa.Table) -> pa.ChunkedArray:
    """An exchange's time on the plots: its request's first byte, or the response's for an orphan response."""
    return pc.coalesce(ex["request_first_ts"], ex["response_first_ts"])


def build(source: TableSource, title: str = "kafkacap report") -> Report:
    """Every section of the page from the tables (each read once, only the columns it needs)."""
    ex = source.read("exchanges", [
        "capture_file", "connection_id", "correlation_id", "client_ip", "client_port", "broker_ip", "broker_port",
        "api_key", "api_name", "client_id", "request_first_ts", "response_first_ts", "response_last_ts",
        "latency_ms", "error_code", "error_name", "status", "request_frame", "response_frame", "record_count",
        "error_count", "waited", "service_ms", "group_id"])
    ex = ex.append_column("ts", _exchange_time(ex))
    files = source.read("files", [
        "capture_file", "format", "file_bytes", "packets", "first_ts", "last_ts", "exchanges", "connections",
        "status", "message", "kafka_packets", "tls_packets", "other_tcp_packets", "non_tcp_packets",
        "undecodable_packets", "damaged_places", "skipped_bytes"])
    conns = source.read("connections", [
        "capture_file", "connection_id", "client_ip", "client_port", "broker_ip", "broker_port", "first_ts",
        "last_ts", "retransmissions", "out_of_order", "gap_bytes", "gaps", "syn_seen", "requests", "resyncs",
        "ended", "client_ids", "tls"])
    start, end = ag.min_max(files["first_ts"], files["last_ts"])
    if start is None:
        start, end = ag.min_max(ex["ts"], ex["response_last_ts"], conns["first_ts"], conns["last_ts"])
    interval = ag.choose_interval(start, end)
    facts = _facts(ex, files, conns, start, end, interval)
    sections = [
        _overview(ex, interval),
        _latency(ex, interval),
        _errors(source, ex, interval),
        _traffic(source, interval),
        _groups(source, ex, interval),
        _connections(conns, files, interval),
    ]
    return Report(title, facts, sections, interval)


def _facts(ex, files, conns, start, end, interval) -> list[tuple[str, str]]:
    span = "unknown"
    if start is not None and end is not None:
        span = f"{_when(start)} to {_when(end)} ({(end.value - start.value) / 1e6:,.3f} s)"
    brokers = pc.count_distinct(pc.binary_join_element_wise(
        conns["broker_ip"], conns["broker_port"].cast(pa.string()), ":")).as_py() if conns.num_rows else 0
    client_ids = pc.count_distinct(ex["client_id"]).as_py() if ex.num_rows else 0
    client_ips = pc.count_distinct(conns["client_ip"]).as_py() if conns.num_rows else 0
    errors = pc.sum(pc.equal(ex["status"], "error")).as_py() or 0 if ex.num_rows else 0
    packets = pc.sum(files["packets"]).as_py() or 0 if files.num_rows else 0
    return [
        ("capture span", span),
        ("capture files", f"{files.num_rows:,} ({packets:,} packets)"),
        ("brokers", f"{brokers:,} (address:port)"),
        ("clients", f"{client_ids:,} client ids from {client_ips:,} addresses"),
        ("connections", f"{conns.num_rows:,}"),
        ("exchanges", f"{ex.num_rows:,} ({errors:,} with an error)"),
        ("time interval of the plots", interval.label),
    ]


def _overview(ex: pa.Table, interval: ag.Interval) -> Section:
    s = Section("overview", "Overview")
    if ex.num_rows == 0:
        why = "The exchanges table is empty: no Kafka request or response was found (check --port or --detect-ports)."
        s.parts.append(Part("Requests over time by API", "", empty=why))
        s.parts.append(Part("Errors over time by name", "", empty=why))
        return s
    top = ag.top_keys(ex, "api_name", None)
    t = ex.append_column("series", ag.keep_top(ex["api_name"], top))
    counts = ag.counts_by_interval(t, "ts", "series", interval, frame="request_frame")
    s.parts.append(Part(
        "Requests over time by API",
        f"Exchanges per {interval.label}, stacked by API ({ag.TOP_N} busiest by name, the rest as '{ag.OTHER}'). "
        "Look for bursts, gaps where traffic stopped, and an API whose share changes (a Metadata or "
        "FindCoordinator storm is clients reconnecting). Hover gives the first request's packet number in each "
        "interval.", fg.stacked_counts(counts, interval, "exchanges", "request")))
    err = t.filter(pc.equal(t["status"], "error"))
    if err.num_rows == 0:
        s.parts.append(Part("Errors over time by name", "", empty="No exchange has a non-zero error code."))
    else:
        err = err.set_column(err.schema.get_field_index("series"), "series",
                             ag.keep_top(err["error_name"], ag.top_keys(err, "error_name", None)))
        counts = ag.counts_by_interval(err, "ts", "series", interval, frame="response_frame")
        s.parts.append(Part(
            "Errors over time by name",
            f"Exchanges with a non-zero error code per {interval.label}, by the error's name (the top-level error, "
            "else the first nested one). A steady trickle of one name is usually a misconfigured client; a burst "
            "of many at once, a broker event. The Errors section breaks them down by client, topic and partition.",
            fg.stacked_counts(counts, interval, "failed exchanges", "failed response")))
    return s


def _latency(ex: pa.Table, interval: ag.Interval) -> Section:
    s = Section("latency", "Latency", intro=(
        "latency_ms is the broker-side view: from the request's last byte to the response's last byte. "
        "Exchanges the broker held by design (the waited column: a Fetch long poll that ran out its max_wait_ms, "
        "a JoinGroup or SyncGroup held until the group settled) are drawn apart from service time, with the "
        "Fetches that brought records after a while (they may have been held until data arrived). Service time "
        "is service_ms: latency less the long poll's max_wait_ms where it ran out."))
    t = ex.filter(pc.is_valid(ex["latency_ms"]))
    if t.num_rows == 0:
        why = ("No exchange has a latency: none had both its request and its response in the capture."
               if ex.num_rows else "The exchanges table is empty.")
        for title in ("Service time over time", "Waits over time", "Latency distribution per API"):
            s.parts.append(Part(title, "", empty=why))
        return s
    series = ag.latency_series(t["api_name"], t["record_count"])
    # Held by design (the waited column), or possibly (null: a Fetch that brought records after a while):
    # drawn with the waits; the rest as service time. Tables without the column: by API, as before it.
    held = pc.fill_null(t["waited"], True) if t["waited"].null_count < len(t) else ag.is_wait(series)
    service_ms = pc.coalesce(t["service_ms"], t["latency_ms"])
    t = pa.table({"ts": t["ts"], "series": series, "latency_ms": t["latency_ms"],
                  "capture_file": t["capture_file"], "frame": t["response_frame"]})
    waits = t.filter(held)
    service = t.filter(pc.invert(held))
    service = service.set_column(2, "latency_ms", service_ms.filter(pc.invert(held)))
    if service.num_rows:
        top = ag.top_keys(service, "series", None)
        service = service.set_column(1, "series", ag.keep_top(service["series"], top))
        s.parts.append(Part(
            "Service time over time (p50 and p99 per API)",
            f"Median (solid) and 99th percentile (dotted) latency per {interval.label} and API, log scale, from "
            "t-digests (exact for small counts, within about 1 % otherwise). A p99 far above the p50 is a tail worth "
            "a look; a step in both is the broker or the network. Hover names the slowest exchange's response "
            "packet.", fg.latency_lines(ag.latency_by_interval(service, interval), interval)))
    else:
        s.parts.append(Part("Service time over time", "", empty="Every exchange with a latency is a wait "
                            "(Fetch, JoinGroup, SyncGroup), drawn below."))
    if waits.num_rows:
        s.parts.append(Part(
            "Waits over time (Fetch long polls, group joins)",
            f"The same percentiles for the APIs whose latency is mostly time spent waiting, per {interval.label}. "
            "Empty Fetch responses near the consumers' fetch.max.wait.ms (500 ms by default) are idle consumers, "
            "not a slow broker; JoinGroup and SyncGroup last as long as the rebalance.",
            fg.latency_lines(ag.latency_by_interval(waits, interval), interval)))
    else:
        s.parts.append(Part("Waits over time", "", empty="No Fetch, JoinGroup or SyncGroup exchange has a latency."))
    s.parts.append(Part(
        "Latency distribution per API",
        "How many exchanges of each API (Fetch split as above) fell in each latency bucket (log-spaced, colour on "
        "a log scale). Two humps in one row are two populations: e.g. cached and uncached reads, or two brokers.",
        fg.latency_heatmap(ag.latency_histogram(t))))
    return s


def _errors(source: TableSource, ex: pa.Table, interval: ag.Interval) -> Section:
    s = Section("errors", "Errors")
    errors = source.read("errors", [
        "capture_file", "connection_id", "correlation_id", "api_key", "api_name", "client_id", "response_last_ts",
        "field_path", "topic", "partition", "error_code", "error_name", "retriable"])
    if errors.num_rows == 0:
        why = ("The errors table is empty: no response carried a non-zero error code"
               + (" (or bodies were not decoded: --headers-only reads top-level errors into exchanges only)."
                  if ex.num_rows and pc.sum(pc.equal(ex["status"], "unchecked")).as_py() else "."))
        s.parts.append(Part("Errors over time", "", empty=why))
        s.parts.append(Part("Which client, topic and partition", "", empty=why))
        return s
    expected = ag.expected_error(errors["error_name"], errors["api_name"])
    errors = errors.append_column("expected", expected)
    label = pc.if_else(expected, pc.binary_join_element_wise(errors["error_name"], " (expected)", ""),
                       errors["error_name"])
    t = errors.append_column("series", ag.keep_top(label, ag.top_keys(errors.append_column("l", label), "l", None)))
    frames = ex.filter(pc.or_(pc.fill_null(pc.greater(ex["error_count"], 0), False),
                              pc.equal(ex["status"], "error"))).select(
        ["capture_file", "connection_id", "correlation_id", "api_key", "response_frame"])
    joined = t.join(frames, ["capture_file", "connection_id", "correlation_id", "api_key"], join_type="left outer")
    counts = ag.counts_by_interval(joined, "response_last_ts", "series", interval, frame="response_frame")
    s.parts.append(Part(
        "Errors over time",
        f"Every non-zero error code in the responses (top-level, per topic and per partition: one response can "
        f"hold many) per {interval.label}, by name. Names marked 'expected' are steps of the group protocol, "
        "not failures: MEMBER_ID_REQUIRED answers a consumer's first JoinGroup by design, REBALANCE_IN_PROGRESS "
        "tells members to rejoin. Hover gives the first failed response's packet.",
        fg.stacked_counts(counts, interval, "error codes", "response")))
    table, groups = ag.error_table(errors, frames)
    shown = f"the {table.num_rows} largest of {groups:,} groups" if groups > table.num_rows else f"{groups} groups"
    s.parts.append(Part(
        "Which client, topic and partition",
        f"Error codes grouped by name, API, client, topic and partition ({shown}; unexpected ones first, "
        "then by count). 'retriable' is what the protocol guide says; the packet is the first response "
        "holding the error (frame.number in Wireshark).",
        table_html=_html_table(table, [
            ("error_name", "error"), ("api_name", "API"), ("client_id", "client_id"), ("topic", "topic"),
            ("partition", "partition"), ("count", "count"), ("expected", "expected"), ("retriable", "retriable"),
            ("first_ts", "first (UTC)"), ("last_ts", "last (UTC)"), ("capture_file", "capture file"),
            ("frame", "first packet")])))
    return s


def _traffic(source: TableSource, interval: ag.Interval) -> Section:
    s = Section("traffic", "Traffic")
    p = source.read("partitions", [
        "api_key", "topic", "partition", "request_last_ts", "response_last_ts", "request_record_bytes",
        "response_record_bytes", "records", "batches", "codec", "uncompressed_bytes"],
        filter=ds.field("api_key").isin([0, 1]))
    produce = p.filter(pc.equal(p["api_key"], 0))
    fetch = p.filter(pc.equal(p["api_key"], 1))
    produce = pa.table({"ts": produce["request_last_ts"], "topic": produce["topic"],
                        "partition": produce["partition"], "bytes": produce["request_record_bytes"],
                        "records": produce["records"], "batches": produce["batches"], "codec": produce["codec"],
                        "uncompressed_bytes": produce["uncompressed_bytes"]})
    fetch = pa.table({"ts": fetch["response_last_ts"], "topic": fetch["topic"], "partition": fetch["partition"],
                      "bytes": fetch["response_record_bytes"], "records": fetch["records"]})
    if not (pc.sum(produce["bytes"]).as_py() or pc.sum(fetch["bytes"]).as_py()):
        why = ("No Produce or Fetch partition carried record bytes"
               + (" (the partitions table is empty: --headers-only, or no Produce/Fetch in the capture)."
                  if p.num_rows == 0 else "."))
        for title in ("Record bytes per topic over time", "Busiest partitions", "Compression per codec"):
            s.parts.append(Part(title, "", empty=why))
        return s
    both = pa.concat_tables([produce.select(["topic", "bytes"]), fetch.select(["topic", "bytes"])])
    top = ag.top_keys(both, "topic", "bytes")
    palette = fg.colours([*top, ag.OTHER])
    parts = []
    for t in (produce, fetch):
        t = t.append_column("series", ag.keep_top(t["topic"], top))
        parts.append(ag.counts_by_interval(t, "ts", "series", interval, sums=("bytes", "records")))
    s.parts.append(Part(
        "Record bytes per topic over time",
        f"Record bytes on the wire (compressed, as sent) per {interval.label} and topic: produced (Produce "
        "requests, top) and fetched (Fetch responses, bottom). Hover adds the records. A producer hammering one "
        "topic, or consumers re-reading far more than is produced, shows here.",
        fg.two_rows(fg.traffic_over_time(parts[0], interval, palette),
                    fg.traffic_over_time(parts[1], interval, palette),
                    ("Produce (request record bytes)", "Fetch (response record bytes)"),
                    f"bytes per {interval.label}")))
    per = []
    for kind, t in (("produced", produce), ("fetched", fetch)):
        g = ag.sum_by(t.filter(pc.is_valid(t["topic"])), ["topic", "partition"], ["bytes", "records"])
        per.append(g.rename_columns(["topic", "partition", f"{kind}_bytes", f"{kind}_records", f"{kind}_rows"]))
    tp = per[0].join(per[1], ["topic", "partition"], join_type="full outer")
    for c in ("produced_bytes", "fetched_bytes", "produced_records", "fetched_records"):
        tp = tp.set_column(tp.schema.get_field_index(c), c, pc.fill_null(tp[c], 0))
    tp = tp.append_column("total", pc.add(tp["produced_bytes"], tp["fetched_bytes"]))
    tp = tp.sort_by([("total", "descending"), ("topic", "ascending"), ("partition", "ascending")])
    s.parts.append(Part(
        "Busiest partitions",
        f"The {min(TOP_PARTITIONS, tp.num_rows)} topic-partitions with the most record bytes (of {tp.num_rows:,}), "
        "produced and fetched. One partition far above its siblings is a hot key or a producer's partitioner.",
        fg.top_partitions(tp.slice(0, TOP_PARTITIONS))))
    withc = produce.filter(pc.is_valid(produce["codec"]))
    if withc.num_rows == 0:
        s.parts.append(Part("Compression per codec", "", empty="No Produce request carried record batches whose "
                            "codec was read."))
    else:
        g = ag.sum_by(withc, ["codec"], ["bytes", "uncompressed_bytes", "batches", "records"])
        g = g.rename_columns(["codec", "wire_bytes", "uncompressed_bytes", "batches", "records", "rows"])
        s.parts.append(Part(
            "Compression per codec",
            "Record bytes producers sent per codec, on the wire and uncompressed (uncompressed size as the batches "
            "declare it, where known without decompressing). Fetch is left out: it returns the same batches. "
            "A codec with a ratio near 1 costs CPU for nothing; 'none' with large volume may be worth compressing.",
            fg.compression(g.sort_by([("wire_bytes", "descending")]))))
    return s


def _groups(source: TableSource, ex: pa.Table, interval: ag.Interval) -> Section:
    s = Section("groups", "Consumer groups", intro=(
        "Today's tables hold the group protocol's exchanges (who sent JoinGroup, SyncGroup, Heartbeat, "
        "OffsetCommit... and when) and the lag Fetch responses report; the groups themselves (group id, "
        "generations, members joining and leaving) await the groups table of issue 18, and will be drawn here "
        "then."))
    g = ex.filter(pc.fill_null(pc.is_in(ex["api_name"], pa.array(ag.GROUP_APIS)), False))
    if g.num_rows == 0:
        s.parts.append(Part("Group protocol exchanges per client", "",
                            empty="No group-protocol exchange (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, "
                                  "OffsetCommit, ...) is in the exchanges table."))
    else:
        note = ""
        if g.num_rows > MAX_GROUP_EVENTS:
            keep = pc.or_(pc.not_equal(g["api_name"], "Heartbeat"), pc.equal(g["status"], "error"))
            dropped = g.num_rows
            g = g.filter(keep)
            note = f" Heartbeats without error are left out ({dropped - g.num_rows:,} of them)."
        client = pc.binary_join_element_wise(pc.fill_null(g["client_id"], "(no client_id)"), " @ ", g["client_ip"],
                                             "")
        g = g.append_column("client", client)
        clients = pc.count_distinct(client).as_py()
        if clients > MAX_GROUP_CLIENTS:
            top = ag.top_keys(g, "client", None, MAX_GROUP_CLIENTS)
            g = g.filter(pc.is_in(g["client"], pa.array(top)))
            note += f" The {MAX_GROUP_CLIENTS} clients with the most exchanges are drawn (of {clients:,})."
        if g.num_rows > MAX_GROUP_EVENTS:
            note += f" Only the first {MAX_GROUP_EVENTS:,} of their {g.num_rows:,} exchanges are drawn."
            g = g.sort_by([("ts", "ascending")]).slice(0, MAX_GROUP_EVENTS)
        s.parts.append(Part(
            "Group protocol exchanges per client",
            "One marker per exchange, by client and API; a cross is a response with an error. A rebalance shows as "
            "a column of JoinGroup and SyncGroup across clients; a rebalance storm as such columns again and "
            "again; a member that stops heartbeating as a row that ends." + note, fg.group_events(g)))
    lag = source.read("partitions", ["api_key", "topic", "response_last_ts", "consumer_lag"],
                      filter=ds.field("api_key") == 1)
    lag = lag.filter(pc.is_valid(lag["consumer_lag"]))
    if lag.num_rows == 0:
        s.parts.append(Part("Consumer lag reported by Fetch", "", empty="No Fetch response reported a high "
                            "watermark for an offset fetched from (headers only, or no Fetch in the capture)."))
    else:
        top = ag.top_keys(lag, "topic", None)
        lag = pa.table({"bin": interval.floor(lag["response_last_ts"]),
                        "series": ag.keep_top(lag["topic"], top), "lag": lag["consumer_lag"]})
        lag = lag.filter(pc.is_valid(lag["bin"]))
        agg = ag.group(lag, ["bin", "series"], [("lag", "max"), (None, "count_all")], ["max_lag", "count"])
        s.parts.append(Part(
            "Consumer lag reported by Fetch",
            f"The largest lag (high watermark minus the offset fetched from, as the broker reported it) per "
            f"{interval.label} and topic, over all partitions and consumers. Lag that keeps rising means "
            "consumers fall behind; a saw-tooth is batching.",
            fg.lag_lines(agg.sort_by([("series", "ascending"), ("bin", "ascending")]), interval)))
    return s


ENDED_ORDER = ("fin", "rst", "reused", "evicted", "capture_end", "continued")


def _connections(conns: pa.Table, files: pa.Table, interval: ag.Interval) -> Section:
    s = Section("connections", "Connections and capture health")
    if conns.num_rows == 0:
        s.parts.append(Part("Connections opened and closed", "", empty="The connections table is empty: no Kafka "
                            "connection was found (check --port or --detect-ports)."))
        s.parts.append(Part("Connection timeline", "", empty="No connection."))
    else:
        opened = conns.filter(pc.fill_null(conns["syn_seen"], False))
        events = [pa.table({"ts": opened["first_ts"], "series": pa.repeat(pa.scalar("opened (SYN)"), opened.num_rows),
                            "capture_file": opened["capture_file"], "frame": opened["connection_id"]})]
        closed = conns.filter(pc.not_equal(conns["ended"], "capture_end"))
        events.append(pa.table({"ts": closed["last_ts"],
                                "series": pc.binary_join_element_wise("closed: ", closed["ended"], ""),
                                "capture_file": closed["capture_file"], "frame": closed["connection_id"]}))
        events = pa.concat_tables(events)
        counts = ag.counts_by_interval(events, "ts", "series", interval, frame="frame")
        s.parts.append(Part(
            "Connections opened and closed",
            f"Connections whose handshake is in the capture (opened) and connections that ended (by FIN, reset, "
            f"port reuse or eviction) per {interval.label}; those still open at the end are left out. Many resets, "
            "or opens and closes in lockstep, are clients reconnecting. Hover: the first such connection's "
            "connection_id (its first packet).",
            fg.stacked_counts(counts, interval, "connections", "connection (first packet)"))
            if counts.num_rows else Part("Connections opened and closed", "", empty="No connection opened or "
                                         "closed inside the capture: all were open before it started and after "
                                         "it ended."))
        trouble = pc.add(pc.add(conns["retransmissions"], conns["gaps"]), conns["resyncs"])
        c = conns.append_column("trouble", trouble)
        note = ""
        if c.num_rows > MAX_CONNECTIONS:
            note = (f" {MAX_CONNECTIONS} of {c.num_rows:,} connections are drawn: those with the most "
                    "retransmissions, gaps and resyncs, then the resets.")
            c = c.append_column("rst", pc.equal(c["ended"], "rst"))
            c = c.sort_by([("trouble", "descending"), ("rst", "descending"), ("first_ts", "ascending")])
            c = c.slice(0, MAX_CONNECTIONS).drop_columns(["rst"])
        c = c.sort_by([("first_ts", "ascending"), ("capture_file", "ascending"), ("connection_id", "ascending")])
        several = pc.count_distinct(c["capture_file"]).as_py() > 1
        label = pc.binary_join_element_wise(
            "#", c["connection_id"].cast(pa.string()), " ", c["client_ip"], ":", c["client_port"].cast(pa.string()),
            " → ", c["broker_ip"], ":", c["broker_port"].cast(pa.string()), "")
        if several:
            label = pc.binary_join_element_wise(label, " (", c["capture_file"], ")", "")
        c = c.append_column("label", label)
        kinds = [k for k in ENDED_ORDER if k in set(c["ended"].to_pylist())]
        kinds += sorted(set(c["ended"].to_pylist()) - set(kinds) - {None})
        s.parts.append(Part(
            "Connection timeline",
            "Each connection from its first to its last packet, coloured by how it ended. Hover gives its "
            "retransmissions, gaps (bytes the capture lost) and framer resyncs; the number in the label is the "
            "connection's first packet." + note, fg.connection_timeline(c, fg.colours(kinds))))
    if files.num_rows == 0:
        s.parts.append(Part("Capture health", "", empty="The files table is empty (the Spark job writes it; an "
                            "older export may lack it)."))
        return s
    gaps = pc.sum(conns["gaps"]).as_py() or 0 if conns.num_rows else 0
    lost = pc.sum(conns["gap_bytes"]).as_py() or 0 if conns.num_rows else 0
    retrans = pc.sum(conns["retransmissions"]).as_py() or 0 if conns.num_rows else 0
    resyncs = pc.sum(conns["resyncs"]).as_py() or 0 if conns.num_rows else 0
    bad = files.filter(pc.not_equal(files["status"], "ok")).num_rows
    s.parts.append(Part(
        "Capture health",
        f"Packets per capture file by what they were. Over all connections: {gaps:,} gaps ({lost:,} bytes the "
        f"capture missed), {retrans:,} retransmitted segments, {resyncs:,} framer resyncs; {bad:,} of "
        f"{files.num_rows:,} files damaged or unreadable. Gaps mean the capture (not the network) lost packets: "
        "latencies and counts near them are incomplete.",
        fg.file_packets(files.sort_by([("capture_file", "ascending")]).slice(0, 100)),
        table_html=_html_table(files.sort_by([("status", "descending"), ("capture_file", "ascending")]).slice(0, 100),
                               [("capture_file", "file"), ("format", "format"), ("packets", "packets"),
                                ("kafka_packets", "Kafka packets"), ("exchanges", "exchanges"),
                                ("status", "status"), ("damaged_places", "damaged places"),
                                ("skipped_bytes", "skipped bytes"), ("message", "message")])))
    return s


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#fff;border-bottom:1px solid #ddd;padding:12px 24px}
h1{font-size:1.4em;margin:0 0 6px}
nav a{margin-right:14px;color:#0072B2;text-decoration:none}
main{padding:0 24px 40px;max-width:1400px}
section{margin-top:28px}
h2{font-size:1.2em;border-bottom:2px solid #0072B2;padding-bottom:4px}
h3{font-size:1em;margin:18px 0 4px}
.caption,.intro{max-width:1000px;color:#444;font-size:.92em;margin:4px 0 8px}
.empty{border:1px dashed #bbb;background:#fff;padding:18px;color:#555;font-style:italic}
.figure{background:#fff;border:1px solid #e4e4e4}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:8px 0 0;font-size:.92em}
dt{font-weight:600}
table{border-collapse:collapse;font-size:.85em;background:#fff;margin-top:8px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f0f0f0}
"""


def render(report: Report) -> str:
    """The page as one HTML string: plotly.js and the figures' data inlined, nothing fetched at load."""
    from plotly.offline import get_plotlyjs

    nav = " ".join(f'<a href="#{s.id}">{_e(s.title)}</a>' for s in report.sections)
    facts = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.facts)
    body = []
    n = 0
    for s in report.sections:
        body.append(f'<section id="{s.id}"><h2>{_e(s.title)}</h2>')
        if s.intro:
            body.append(f'<p class="intro">{_e(s.intro)}</p>')
        for part in s.parts:
            body.append(f'<div class="part" data-section="{s.id}"><h3>{_e(part.title)}</h3>')
            if part.empty is not None:
                body.append(f'<div class="empty">{_e(part.empty)}</div>')
            else:
                body.append(f'<p class="caption">{_e(part.caption)}</p>')
                if part.figure is not None:
                    n += 1
                    div = part.figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{s.id}-{n}",
                                              config={"displaylogo": False, "responsive": True})
                    body.append(f'<div class="figure">{div}</div>')
                if part.table_html:
                    body.append(part.table_html)
            body.append("</div>")
        body.append("</section>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(report.title)}</title><style>{_CSS}</style>"
        f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
        f"<header><h1>{_e(report.title)}</h1><nav>{nav}</nav><dl>{facts}</dl></header>"
        f"<main>{''.join(body)}</main></body></html>\n")


def write_report(source: TableSource, path: str, title: str = "kafkacap report") -> int:
    """Build the page and write it to ``path`` (through a temporary file beside it); returns its size."""
    text = render(build(source, title))
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return os.path.getsize(path)
