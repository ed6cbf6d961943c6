"""The report page: sections of figures and captions built from a TableSource, laid out as one HTML file with
plotly.js inlined (it must open on a laptop with no network). ``build`` is pure; ``write_report`` writes."""

from __future__ import annotations

import datetime as dt
import html
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.derived import triage as triage_rules
from analyzer.derived.span import files_span
from analyzer.report import aggregate as ag
from analyzer.report import figures as fg
from analyzer.report import scans
from analyzer.report.source import TableSource
from analyzer.tables.schemas import TS

MAX_CONNECTIONS = scans.MAX_CONNECTIONS
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


def time_span(source: TableSource) -> tuple[pa.Scalar | None, pa.Scalar | None]:
    """The capture span, before any scan: from the files table (one row per capture file) when it has
    times, else from the exchanges' and connections' timestamp columns (their Parquet statistics, so no row
    is read, unless a row group lacks them)."""
    files = source.read("files", ["first_ts", "last_ts"])
    start, end = source_range(files)
    if start is None:
        start, end = source.time_range("exchanges", ["request_first_ts", "response_first_ts", "response_last_ts"])
        c_start, c_end = source.time_range("connections", ["first_ts", "last_ts"])
        start, end = ag.earlier(start, c_start), ag.later(end, c_end)
    return start, end


def source_range(files: pa.Table) -> tuple[pa.Scalar | None, pa.Scalar | None]:
    lo = hi = None
    for c in ("first_ts", "last_ts"):
        col = files[c]
        if len(col) and col.null_count < len(col):
            mm = pc.min_max(col)
            lo, hi = ag.earlier(lo, mm["min"]), ag.later(hi, mm["max"])
    return lo, hi


def build(source: TableSource, title: str = "kafkacap report", use_aggregates: bool = True,
          min_interval_s: float = 0.0) -> Report:
    """Every section of the page: the span first (interval chosen before any scan), then each table scanned
    once in batches (the exchanges twice for the consumer-group markers, and narrowed for the packets of
    the errors). With the Spark job's aggregate tables (and ``use_aggregates``), the overview and latency
    come from them, at intervals of a minute or more (their resolution); ``min_interval_s`` asks for
    intervals at least that wide in any case."""
    from_aggregates = use_aggregates and scans.has_exchange_aggregates(source)
    start, end = time_span(source)
    interval = ag.choose_interval(start, end, at_least=max(min_interval_s, 60.0 if from_aggregates else 0.0))
    ex = (scans.read_exchange_aggregates if from_aggregates else scans.scan_exchanges)(source, interval)
    files = source.read("files", [
        "capture_file", "capture_set", "format", "file_bytes", "packets", "first_ts", "last_ts", "exchanges",
        "connections",
        "status", "message", "kafka_packets", "tls_packets", "other_tcp_packets", "non_tcp_packets",
        "undecodable_packets", "damaged_places", "skipped_bytes"])
    conns = scans.scan_connections(source, interval)
    facts = _facts(ex, files, conns, start, end, interval)
    traffic, tr = _traffic(source, interval)
    sections = [
        _overview(ex, interval),
        _latency(ex, interval),
        _errors(source, ex, interval),
        traffic,
        _groups(source, ex, interval, tr),
        _consumer_lag(source),
        _share_groups(source, interval),
        _transactions(source, interval, start, end),
        _triage(source),
        _connections(conns, files, interval),
    ]
    return Report(title, facts, [s for s in sections if s is not None], interval)


def _facts(ex: scans.ExchangeAggregates, files, conns: scans.ConnectionAggregates, start, end,
           interval) -> list[tuple[str, str]]:
    span = "unknown"
    covered = files_span(files) if files.num_rows else None
    if covered is not None and len(covered.intervals) > 1:
        span = (f"{_when(start)} to {_when(end)}: {len(covered.intervals)} captures that do not overlap, "
                f"{covered.seconds:,.3f} s in all")
    elif start is not None and end is not None:
        span = f"{_when(start)} to {_when(end)} ({(end.value - start.value) / 1e6:,.3f} s)"
    packets = pc.sum(files["packets"]).as_py() or 0 if files.num_rows else 0
    facts = [
        ("capture span", span),
        ("capture files", f"{files.num_rows:,} ({packets:,} packets)"),
        ("brokers", f"{conns.brokers.text()} (address:port)"),
        ("clients", f"{ex.clients.text()} client ids from {conns.client_ips.text()} addresses"),
        ("connections", f"{conns.rows:,}"),
        ("exchanges", f"{ex.rows:,} ({ex.errors - ex.expected:,} failed; {ex.expected:,} more answered with an "
                      "expected error, a protocol step such as MEMBER_ID_REQUIRED)"),
        ("time interval of the plots", interval.label),
    ]
    if ex.from_aggregates:
        facts.append(("drawn from", "the Spark job's per-minute aggregates (exchange_counts, latency_histogram, "
                                    "api_usage) for the overview and latency"))
    return facts


def _folded(t: ag.SeriesOverTime) -> str:
    return (f" Series beyond the {ag.MAX_SERIES_KEPT:,} largest at some point were folded into "
            f"'{ag.OTHER}' as the tables were read." if t.folded else "")


def _overview(ex: scans.ExchangeAggregates, interval: ag.Interval) -> Section:
    s = Section("overview", "Overview")
    counts = ex.requests.result()
    if ex.rows == 0 or counts is None:
        why = "The exchanges table is empty: no Kafka request or response was found (check --port or --detect-ports)."
        s.parts.append(Part("Requests over time by API", "", empty=why))
        s.parts.append(Part("Errors over time by name", "", empty=why))
        return s
    s.parts.append(Part(
        "Requests over time by API",
        f"Exchanges per {interval.label}, stacked by API ({ag.TOP_N} busiest by name, the rest as '{ag.OTHER}'). "
        "Look for bursts, gaps where traffic stopped, and an API whose share changes (a Metadata or "
        "FindCoordinator storm is clients reconnecting). Hover gives the first request's packet number in each "
        "interval." + _folded(ex.requests),
        fg.stacked_counts(_frame_of(counts, "request_frame"), interval, "exchanges", "request")))
    failed = ex.failures.result()
    if failed is None:
        s.parts.append(Part("Errors over time by name", "", empty="No exchange has a non-zero error code."))
    else:
        s.parts.append(Part(
            "Errors over time by name",
            f"Exchanges with a non-zero error code per {interval.label}, by the error's name (the top-level error, "
            "else the first nested one); names marked 'expected' (grey, hatched, stacked on top) are steps of the "
            "protocol, not failures. A steady trickle of one name is usually a misconfigured client; a burst "
            "of many at once, a broker event. The Errors section breaks them down by client, topic and partition."
            + _folded(ex.failures),
            _error_bars(_frame_of(failed, "response_frame"), interval, "exchanges with an error",
                        "response with the error")))
    return s


def _error_bars(t: pa.Table, interval: ag.Interval, what: str, frame_label: str):
    """Errors per interval: failures in colour at the bottom of each bar, expected steps in grey above."""
    palette = fg.error_colours(sorted(set(t["series"].to_pylist())))
    return fg.stacked_counts(t, interval, what, frame_label, palette,
                             hatched={n for n in palette if n.endswith(ag.EXPECTED_SUFFIX)})


def _frame_of(t: pa.Table, column: str) -> pa.Table:
    return t.append_column("frame", t[column])


def _latency(ex: scans.ExchangeAggregates, interval: ag.Interval) -> Section:
    s = Section("latency", "Latency", intro=(
        "latency_ms is the broker-side view: from the request's last byte to the response's last byte. "
        "Exchanges the broker held by design (the waited column: a Fetch long poll that ran out its max_wait_ms, "
        "a JoinGroup or SyncGroup held until the group settled) are drawn apart from service time, with the "
        "Fetches that brought records after a while (they may have been held until data arrived). Service time "
        "is service_ms: latency less the long poll's max_wait_ms where it ran out. Percentiles are read from "
        f"histograms of {ag.HIST_PER_DECADE} buckets per factor of ten (each {ag.bucket_edges(0)[1] - 1:.1%} "
        f"wide): within {ag.PERCENTILE_ERROR:.1%} of the exact value, which they equal when the bucket holds one "
        "value; the slowest is exact."))
    h = ex.latency.result()
    if h is None:
        why = ("No exchange has a latency: none had both its request and its response in the capture."
               if ex.rows else "The exchanges table is empty.")
        for title in ("Service time over time", "Waits over time", "Latency distribution per API"):
            s.parts.append(Part(title, "", empty=why))
        return s
    held = pc.fill_null(h["held"], True)
    service, waits = h.filter(pc.invert(held)), h.filter(held)
    if service.num_rows:
        top = ag.top_keys(service, "series", "count")
        service = ag.merge_histograms(service.set_column(1, "series", ag.keep_top(service["series"], top)),
                                      ["bin", "series"])
        s.parts.append(Part(
            "Service time over time (p50 and p99 per API)",
            f"Median (solid) and 99th percentile (dotted) latency per {interval.label} and API, log scale. A p99 "
            "far above the p50 is a tail worth a look; a step in both is the broker or the network. Hover names "
            "the slowest exchange's response packet.",
            fg.latency_lines(_lines(service), interval)))
    else:
        s.parts.append(Part("Service time over time", "", empty="Every exchange with a latency is a wait "
                            "(Fetch, JoinGroup, SyncGroup), drawn below."))
    if waits.num_rows:
        waits = ag.merge_histograms(waits.drop_columns(["held"]), ["bin", "series"])
        s.parts.append(Part(
            "Waits over time (Fetch long polls, group joins)",
            f"The same percentiles for the APIs whose latency is mostly time spent waiting, per {interval.label}. "
            "Empty Fetch responses near the consumers' fetch.max.wait.ms (500 ms by default) are idle consumers, "
            "not a slow broker; JoinGroup and SyncGroup last as long as the rebalance.",
            fg.latency_lines(_lines(waits), interval)))
    else:
        s.parts.append(Part("Waits over time", "", empty="No Fetch, JoinGroup or SyncGroup exchange has a latency."))
    s.parts.append(Part(
        "Latency distribution per API",
        f"How many exchanges of each API (Fetch split as above) fell in each latency bucket ({ag.HEATMAP_PER_DECADE} "
        "per factor of ten on a log axis, colour on a log scale; hover gives a bucket's bounds and count): service "
        "time, or the whole latency for the waits. Two humps in one row are two populations: e.g. cached and "
        "uncached reads, or two brokers.",
        fg.latency_heatmap(ag.coarse_histogram(h, "series"), ag.HEATMAP_PER_DECADE)))
    return s


def _lines(h: pa.Table) -> pa.Table:
    return ag.percentiles(h, ["series", "bin"]).sort_by([("series", "ascending"), ("bin", "ascending")])


def _errors(source: TableSource, ex: scans.ExchangeAggregates, interval: ag.Interval) -> Section:
    s = Section("errors", "Errors")
    errors = scans.scan_errors(source, interval)
    counts = errors.over_time.result()
    groups = errors.groups.result()
    if errors.rows == 0 or groups is None:
        why = ("The errors table is empty: no response carried a non-zero error code"
               + (" (or bodies were not decoded: --headers-only reads top-level errors into exchanges only)."
                  if ex.rows and ex.unchecked else "."))
        s.parts.append(Part("Errors over time", "", empty=why))
        s.parts.append(Part("Which client, topic and partition", "", empty=why))
        return s
    groups = groups.sort_by([("expected", "ascending"), ("count", "descending"), ("first_ts", "ascending")])
    table = groups.slice(0, scans.MAX_ERROR_GROUPS)
    keys = pa.concat_tables([t.select(list(scans.ErrorAggregates.EXCHANGE)) for t in (table, counts)
                             if t is not None])
    frames = scans.response_frames(source, keys)
    if counts is not None:
        counts = scans.attach_frames(counts, frames, [("bin", "ascending"), ("series", "ascending")])
        s.parts.append(Part(
            "Errors over time",
            f"Every non-zero error code in the responses (top-level, per topic and per partition: one response can "
            f"hold many) per {interval.label}, by name. Names marked 'expected' are steps of the group protocol, "
            "not failures: MEMBER_ID_REQUIRED answers a consumer's first JoinGroup by design, REBALANCE_IN_PROGRESS "
            "tells members to rejoin; they are drawn in grey, hatched, above the failures. Hover gives the first "
            "response's packet." + _folded(errors.over_time),
            _error_bars(counts, interval, "error codes", "response")))
    else:
        s.parts.append(Part("Errors over time", "", empty="No error row has a response time."))
    table = scans.attach_frames(table, frames, [("expected", "ascending"), ("count", "descending"),
                                                ("first_ts", "ascending")])
    n = groups.num_rows
    of = f"more than {n:,} (only the {n:,} largest were kept)" if errors.groups.truncated else f"{n:,}"
    shown = f"the {table.num_rows} largest of {of} groups" if n > table.num_rows else f"{n} groups"
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


def _traffic(source: TableSource, interval: ag.Interval) -> tuple[Section, scans.TrafficAggregates]:
    s = Section("traffic", "Traffic")
    tr = scans.scan_partitions(source, interval)
    if not tr.bytes:
        why = ("No Produce or Fetch partition carried record bytes"
               + (" (the partitions table is empty: --headers-only, or no Produce/Fetch in the capture)."
                  if tr.rows == 0 else "."))
        for title in ("Record bytes per topic over time", "Busiest partitions", "Compression per codec"):
            s.parts.append(Part(title, "", empty=why))
        return s, tr
    merged = [t for t in (tr.produce.merged(), tr.fetch.merged()) if t is not None]
    top = ag.top_keys(pa.concat_tables([t.select(["series", "bytes"]) for t in merged]), "series", "bytes")
    palette = fg.colours([*top, ag.OTHER])
    parts = [t.result(top) for t in (tr.produce, tr.fetch)]
    parts = [p if p is not None else _no_traffic() for p in parts]
    s.parts.append(Part(
        "Record bytes per topic over time",
        f"Record bytes on the wire (compressed, as sent) per {interval.label} and topic: produced (Produce "
        "requests, top) and fetched (Fetch responses, bottom). Hover adds the records. A producer hammering one "
        "topic, or consumers re-reading far more than is produced, shows here." + _folded(tr.produce)
        + _folded(tr.fetch),
        fg.time_range(fg.two_rows(fg.traffic_over_time(parts[0], interval, palette),
                                  fg.traffic_over_time(parts[1], interval, palette),
                                  ("Produce (request record bytes)", "Fetch (response record bytes)"),
                                  f"bytes per {interval.label}"), interval)))
    per = []
    for kind in ("produced", "fetched"):
        g = tr.per_partition[kind].result()
        if g is None:
            g = pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
                          "count": pa.array([], pa.int64()), "bytes": pa.array([], pa.int64()),
                          "records": pa.array([], pa.int64())})
        per.append(g.select(["topic", "partition", "bytes", "records", "count"]).rename_columns(
            ["topic", "partition", f"{kind}_bytes", f"{kind}_records", f"{kind}_rows"]))
    tp = per[0].join(per[1], ["topic", "partition"], join_type="full outer")
    for c in ("produced_bytes", "fetched_bytes", "produced_records", "fetched_records"):
        tp = tp.set_column(tp.schema.get_field_index(c), c, pc.fill_null(tp[c], 0))
    tp = tp.append_column("total", pc.add(tp["produced_bytes"], tp["fetched_bytes"]))
    tp = tp.sort_by([("total", "descending"), ("topic", "ascending"), ("partition", "ascending")])
    s.parts.append(Part(
        "Busiest partitions",
        f"The {min(TOP_PARTITIONS, tp.num_rows)} topic-partitions with the most record bytes (of "
        f"{'more than ' if any(a.truncated for a in tr.per_partition.values()) else ''}{tp.num_rows:,}), "
        "produced and fetched. One partition far above its siblings is a hot key or a producer's partitioner.",
        fg.top_partitions(tp.slice(0, TOP_PARTITIONS))))
    g = tr.codecs.result()
    if g is None:
        s.parts.append(Part("Compression per codec", "", empty="No Produce request carried record batches whose "
                            "codec was read."))
    else:
        g = g.select(["codec", "bytes", "uncompressed_bytes", "batches", "records", "count"]).rename_columns(
            ["codec", "wire_bytes", "uncompressed_bytes", "batches", "records", "rows"])
        s.parts.append(Part(
            "Compression per codec",
            "Record bytes producers sent per codec, on the wire and uncompressed (the size a batch's compressed "
            "data declares, else measured by decompressing it within the limits), with the ratio of the two under "
            "each codec. Fetch is left out: it returns the same batches. "
            "A codec with a ratio near 1 costs CPU for nothing; 'none' with large volume may be worth compressing.",
            fg.compression(g.sort_by([("wire_bytes", "descending")]))))
    return s, tr


def _no_traffic() -> pa.Table:
    return pa.table({"bin": pa.array([], pa.timestamp("us", "UTC")), "series": pa.array([], pa.string()),
                     "count": pa.array([], pa.int64()), "bytes": pa.array([], pa.int64()),
                     "records": pa.array([], pa.int64())})


def _groups(source: TableSource, ex: scans.ExchangeAggregates, interval: ag.Interval,
            tr: scans.TrafficAggregates) -> Section:
    s = Section("groups", "Consumer groups", intro=(
        "Each group's generations from the groups table (classic groups: JoinGroup and SyncGroup) and epochs "
        "(KIP-848 consumer groups, share groups and Streams groups: the coordinator moves members from epoch to "
        "epoch in their heartbeats): when each member was without partitions during a rebalance, or reconciling "
        "to a new epoch, and when it consumed; then the group protocol's exchanges themselves, and the lag Fetch "
        "responses report."))
    timeline, shown = group_segments(*latest_generations(source))
    if timeline.num_rows == 0:
        s.parts.append(Part("Generations and rebalances", "", empty="No consumer group generation is in the "
                            "groups table (no JoinGroup or group heartbeat answered in the capture, or an export "
                            "from before it)."))
    else:
        epochs = sorted(set(pc.unique(timeline["kind"]).to_pylist()) & {"epoch: reconciling", "epoch: owning"})
        s.parts.append(Part(
            "Generations and rebalances",
            "One row per member. Classic groups (generations): red from its JoinGroup to its assignment (no "
            "partitions to consume: a rebalance's stop time), blue consuming, until it rejoins or leaves. "
            + ("KIP-848 consumer, share and Streams groups (epochs; the row names the protocol): orange from the "
               "heartbeat that moved the member to a new epoch until it owns all it was given (it keeps consuming "
               "the partitions that stay: only those that move stop), light blue owning, until its next epoch or "
               "its leave; a thin dotted black line on the row of the member a partition moved to is the time no "
               "member consumed it (the groups table's moved gap_ms). " if epochs else "")
            + "A long red or orange column across members is a slow rebalance; many short ones a rebalance storm; "
            "a row that ends early, a member that left." + shown, fg.group_timeline(timeline)))
    g, note = ex.groups.select(source)
    if g is None or g.num_rows == 0:
        s.parts.append(Part("Group protocol exchanges per client", "",
                            empty="No group-protocol exchange (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, "
                                  "OffsetCommit, ...) is in the exchanges table."))
    else:
        s.parts.append(Part(
            "Group protocol exchanges per client",
            "One marker per exchange, by client and API; a cross is a response with an error. A rebalance shows as "
            "a column of JoinGroup and SyncGroup across clients; a rebalance storm as such columns again and "
            "again; a member that stops heartbeating as a row that ends." + note, fg.group_events(g)))
    lag = tr.lag.result()
    if lag is None:
        s.parts.append(Part("Consumer lag reported by Fetch", "", empty="No Fetch response reported a high "
                            "watermark for an offset fetched from (headers only, or no Fetch in the capture)."))
    else:
        s.parts.append(Part(
            "Consumer lag reported by Fetch",
            f"The largest lag (high watermark minus the offset fetched from, as the broker reported it) per "
            f"{interval.label} and topic, over all partitions and consumers. Lag that keeps rising means "
            "consumers fall behind; a saw-tooth is batching." + _folded(tr.lag),
            fg.lag_lines(lag.sort_by([("series", "ascending"), ("bin", "ascending")]), interval)))
    return s


TOP_LAG_SERIES = 20  # group topic-partitions drawn over time: the laggiest


def _consumer_lag(source: TableSource) -> Section:
    s = Section("lag", "Consumer lag", intro=(
        "Each committed offset (OffsetCommit requests, OffsetFetch responses) against the latest high watermark a "
        "Fetch response (a consumer's or a follower's) reported for its topic-partition at or before it, in the "
        "same capture file: the records the group had yet to get past. OffsetFetch v8+ does not name its group in "
        "the exchanges table; it is given the one group its client speaks for elsewhere."))
    b = scans.scan_lag(source)
    series = b.series()
    if series.num_rows == 0:
        why = ("No group committed or fetched an offset in the capture (no OffsetCommit or OffsetFetch with an "
               "offset, or --headers-only).")
        s.parts.append(Part("Lag at each commit", "", empty=why))
        s.parts.append(Part("Laggiest partitions at the end", "", empty=why))
        return s
    series = series.filter(pc.is_valid(series["lag"]))
    end = b.at_end()
    label = pc.binary_join_element_wise(end["group_id"], ": ", end["topic"], "[",
                                        end["partition"].cast(pa.string()), "]", "")
    end = end.append_column("label", label)
    if series.num_rows == 0:
        s.parts.append(Part("Lag at each commit", "", empty="No Fetch response reported a high watermark for a "
                            "committed topic-partition before its commit."))
    else:
        label = pc.binary_join_element_wise(series["group_id"], ": ", series["topic"], "[",
                                            series["partition"].cast(pa.string()), "]", "")
        series = series.append_column("series", label)
        peak = series.group_by("series").aggregate([("lag", "max")]).sort_by(
            [("lag_max", "descending"), ("series", "ascending")])
        kept = peak["series"].slice(0, TOP_LAG_SERIES)
        note = (f" The {TOP_LAG_SERIES} with the largest lag are drawn, of {peak.num_rows:,}."
                if peak.num_rows > TOP_LAG_SERIES else "")
        s.parts.append(Part(
            "Lag at each commit",
            "One line per group and topic-partition: the lag at each of its committed offsets. A line that keeps "
            "rising is a group falling behind; one at 0 is caught up. Hover names the watermark's Fetch (consumer "
            "or follower) and the offset's packet." + note,
            fg.committed_lag(series.filter(pc.is_in(series["series"], kept)))))
    known = end.filter(pc.is_valid(end["lag"]))
    if known.num_rows == 0:
        s.parts.append(Part("Laggiest partitions at the end", "", empty="No Fetch response reported a high "
                            "watermark for a committed topic-partition."))
    else:
        top = known.sort_by([("lag", "descending"), ("label", "ascending")]).slice(0, TOP_PARTITIONS)
        s.parts.append(Part(
            "Laggiest partitions at the end",
            f"The {top.num_rows} group topic-partitions with the largest last known lag (of {known.num_rows:,}): "
            "the last high watermark of the capture minus the last committed offset. Hover also gives the lag at "
            "that last commit.", fg.laggiest_partitions(top)))
    return s


def _triage(source: TableSource) -> Section:
    s = Section("triage", "Failure triage", intro=(
        "Failures only: the errors that are not steps of the protocol, clients retrying the same failing request "
        f"({triage_rules.MIN_FAILURES} or more failures, each within {triage_rules.STORM_GAP_S:g} s of the one "
        f"before), and clients reconnecting in a loop ({triage_rules.MIN_CONNECTIONS} or more connections shorter "
        f"than {triage_rules.SHORT_S:g} s to one broker, one after another, at most {triage_rules.LOOP_GAP_S:g} s "
        "apart)."))
    errors, storms, loops = scans.scan_triage(source)
    if errors.num_rows == 0:
        s.parts.append(Part("Unexpected errors per client", "", empty="No exchange failed with an error other than "
                            "the protocol's expected steps."))
    else:
        s.parts.append(Part(
            "Unexpected errors per client", f"Failed exchanges per client, API and error, most first (the first "
            f"{min(errors.num_rows, 50)} of {errors.num_rows:,}); packet: the first one's response.",
            table_html=_html_table(errors.slice(0, 50), [
                ("client_id", "client_id"), ("client_ip", "address"), ("api_name", "API"), ("error_name", "error"),
                ("count", "count"), ("connections", "connections"), ("first_ts", "first (UTC)"),
                ("last_ts", "last (UTC)"), ("capture_file", "capture file"), ("frame", "packet")])))
    if storms.num_rows == 0:
        s.parts.append(Part("Retry storms", "", empty="No client failed the same request with the same error "
                            f"{triage_rules.MIN_FAILURES} times in a row."))
    else:
        storms = storms.append_column("rate", pc.round(storms["per_second"], 2))
        s.parts.append(Part(
            "Retry storms", "The same client, API, topics and error, failing again and again; rate: failures per "
            "second after the first. More than one connection: the client reconnected between attempts too.",
            table_html=_html_table(storms.slice(0, 50), [
                ("client_id", "client_id"), ("client_ip", "address"), ("api_name", "API"), ("topics", "topics"),
                ("error_name", "error"), ("failures", "failures"), ("rate", "per second"),
                ("connections", "connections"), ("first_ts", "first (UTC)"), ("last_ts", "last (UTC)"),
                ("capture_file", "capture file"), ("frame", "packet")])))
    if loops.num_rows == 0:
        s.parts.append(Part("Reconnect loops", "", empty="No client opened short connections to one broker one "
                            "after another."))
    else:
        loops = loops.append_column("rate", pc.round(loops["per_minute"], 1))
        s.parts.append(Part(
            "Reconnect loops", "Short connections from one client to one broker, each opened after the one before "
            "closed. Without exchange: refused or closed before any request (a broker down, a wrong port or "
            "protocol); after a failure: the last exchange failed or SASL authentication did.",
            table_html=_html_table(loops.slice(0, 50), [
                ("client_id", "client_id"), ("client_ip", "client"), ("broker_ip", "broker"),
                ("broker_port", "port"), ("connections", "connections"), ("rate", "per minute"),
                ("resets", "resets"), ("without_exchange", "without exchange"), ("failed_last", "after a failure"),
                ("last_errors", "errors"), ("first_ts", "first (UTC)"), ("last_ts", "last (UTC)"),
                ("capture_file", "capture file"), ("connection_id", "first connection")])))
    return s


GROUP_COLUMNS = ["capture_file", "group_id", "group_protocol", "generation_id", "members", "ended", "moved"]
MAX_GENERATIONS = 500  # the latest generations (epochs) drawn; the groups table holds them all
# How the timeline names each protocol (a null group_protocol, an export from before the column: classic).
PROTOCOLS = {"classic": "classic", "consumer": "consumer, KIP-848", "share": "share, KIP-932",
             "streams": "streams, KIP-1071"}
_SEGMENTS = pa.schema([("member", pa.string()), ("kind", pa.string()), ("start", TS), ("end", TS),
                       ("text", pa.string())])


def latest_generations(source: TableSource) -> tuple[pa.Table, int]:
    """The groups table's latest MAX_GENERATIONS rows (by ended), read batch by batch, and its rows in all."""
    top = ag.TopRows(MAX_GENERATIONS, [("ended", "descending")])
    for t in source.scan("groups", GROUP_COLUMNS):
        top.add(t)
    if top.rows is None:
        return source.read("groups", GROUP_COLUMNS), 0
    return top.rows, top.seen


def _assigned(protocol: str, assignment) -> str:
    parts = "; ".join(f"{a['topic']} {','.join(map(str, a['partitions'] or ()))}" for a in (assignment or ()))
    return f"{'tasks' if protocol == 'streams' else 'partitions'} {parts or 'none'}"


def _member_row(g: dict, protocol: str, names: dict, member_id: str | None) -> str:
    """A member's row in the timeline: group (and protocol, but for classic groups) and client_id."""
    name = names.get((g["capture_file"], g["group_id"], member_id)) or member_id
    return f"{g['group_id']}: {name}" if protocol == "classic" else f"{g['group_id']} ({protocol}): {name}"


def group_segments(groups: pa.Table, rows: int | None = None) -> tuple[pa.Table, str]:
    """The timeline's segments from the groups table (one row per generation, or per epoch of the heartbeat
    protocols: a few per rebalance), and a note when only the latest MAX_GENERATIONS of ``rows`` were kept.

    Classic generations: each member without partitions from its JoinGroup to its assignment, then consuming until
    its next JoinGroup (in the next generation), its LeaveGroup or the generation's end. Epochs of the KIP-848,
    share and Streams groups alike: each member reconciling from the heartbeat that moved it to the epoch until
    it owns what it was given (it keeps the partitions that stay), then owning until the heartbeat that moves it
    to its next epoch (epochs it skipped included), its leave or the epoch's end; and each moved partition's
    time without a consumer, on the row of the member it went to."""
    total = max(rows or 0, groups.num_rows)
    if groups.num_rows > MAX_GENERATIONS:
        groups = groups.sort_by([("ended", "descending")]).slice(0, MAX_GENERATIONS)
    note = (f" The latest {MAX_GENERATIONS:,} generations and epochs are drawn (of {total:,}); the groups table "
            "holds them all." if total > groups.num_rows else "")
    gens = sorted(groups.to_pylist(), key=lambda g: (g["capture_file"] or "", g["group_id"] or "",
                                                     g["generation_id"] if g["generation_id"] is not None else -1))
    seen: dict[tuple, list] = {}  # (capture, group, member id) -> its (generation, join) in order
    names: dict[tuple, str] = {}  # (capture, group, member id) -> its client_id
    for g in gens:
        for m in g["members"] or ():
            key = (g["capture_file"], g["group_id"], m["member_id"])
            seen.setdefault(key, []).append((g["generation_id"], m["join_ts"]))
            if m["client_id"]:
                names[key] = m["client_id"]
    next_join: dict[tuple, dt.datetime] = {}  # (capture, group, member id, generation) -> its next join
    for key, joins in seen.items():
        for (gen, _), (later, join) in zip(joins, joins[1:], strict=False):
            if join is not None and gen is not None and later is not None:
                next_join.setdefault((*key, gen), join)
    out = []
    for g in gens:
        protocol = g["group_protocol"] or "classic"
        classic = protocol == "classic"
        for m in g["members"] or ():
            row = _member_row(g, protocol, names, m["member_id"])
            gen = g["generation_id"]
            text = f"{'generation' if classic else PROTOCOLS.get(protocol, protocol) + ' epoch'} {gen}; " + \
                _assigned(protocol, m["assignment"])
            if m.get("errors"):  # an export from before the column: no such field
                text += f"; errors {', '.join(m['errors'])}"
            waited = "?" if m["waited_ms"] is None else f"{m['waited_ms']:,.1f}"
            if m["join_ts"] is not None and m["synced_ts"] is not None:
                out.append({"member": row, "kind": "rebalance: no partitions" if classic else "epoch: reconciling",
                            "start": m["join_ts"], "end": m["synced_ts"],
                            "text": f"{text}; " + (f"waited {waited} ms" if classic else
                                                   f"reconciled {waited} ms after the epoch began")})
            if m["synced_ts"] is not None:
                key = (g["capture_file"], g["group_id"], m["member_id"])
                if classic:  # its join in the next generation only: a member absent from it left the group
                    end = dict(seen[key]).get(gen + 1) if gen is not None else None
                else:  # its next epoch, whichever: a member may skip epochs the group went through
                    end = next_join.get((*key, gen))
                end = end or m["left_ts"] or g["ended"]
                if end is not None and end >= m["synced_ts"]:
                    out.append({"member": row, "kind": "consuming" if classic else "epoch: owning",
                                "start": m["synced_ts"], "end": end, "text": text})
        moves: dict[tuple, list] = {}
        for mv in g["moved"] or ():
            if mv["released_ts"] is not None and mv["acquired_ts"] is not None:
                moves.setdefault((mv["to_member"], mv["from_member"], mv["released_ts"], mv["acquired_ts"],
                                  mv["gap_ms"], mv["topic"]), []).append(mv["partition"])
        for (to, frm, released, acquired, gap, topic), partitions in moves.items():
            gap = "?" if gap is None else f"{gap:,.1f}"
            giver = names.get((g["capture_file"], g["group_id"], frm)) or frm or "a member that left"
            them = "them" if len(partitions) > 1 else "it"
            out.append({"member": _member_row(g, protocol, names, to), "kind": "moved: no consumer",
                        "start": released, "end": acquired,
                        "text": f"{PROTOCOLS.get(protocol, protocol)} epoch {g['generation_id']}; moved "
                                f"{'tasks ' if protocol == 'streams' else ''}{topic} "
                                f"{','.join(map(str, sorted(partitions)))} from {giver}: no member consumed {them} "
                                f"for {gap} ms"})
    return pa.Table.from_pylist(out, schema=_SEGMENTS), note


SHARE_TABLE_COLUMNS = [("label", "member (topic)"), ("acquired_records", "given"),
                       ("redelivered_records", "redelivered"), ("accepted", "accepted"), ("released", "released"),
                       ("rejected", "rejected"), ("renewed", "renewed"), ("lock_lost", "lock lost"),
                       ("unacknowledged", "unacknowledged"), ("failed_acks", "failed acks"),
                       ("p50", "processing p50"), ("p99", "processing p99"), ("first_ts", "first (UTC)"),
                       ("last_ts", "last (UTC)")]


def _unique_labels(rows: list[dict]) -> list[str]:
    """A row label per share member and topic: group, client_id and topic; with the member id's start (then the
    capture file) where two rows would read alike."""
    labels = [f"{r['group_id']}: {r['client_id'] or r['member_id']} ({r['topic']})" for r in rows]
    for extra in (lambda r: f" {(r['member_id'] or '')[:8]}", lambda r: f" [{r['capture_file']}]"):
        twice = {x for x in labels if labels.count(x) > 1}
        labels = [x + extra(r) if x in twice else x for x, r in zip(labels, rows, strict=True)]
    return labels


def _ms_text(v: float | None) -> str:
    return "" if v is None else f"{v:,.3f} ms"


def _share_groups(source: TableSource, interval: ag.Interval) -> Section | None:
    """Share groups (KIP-932): only when the capture has their acquisitions or acknowledgements."""
    if source.rows("share_consumption") == 0 and source.rows("share_ranges") == 0:
        return None
    s = Section("share", "Share groups", intro=(
        "Share groups (KIP-932) hand records out one by one: a ShareFetch response acquires records for a member, "
        "locked for it for a while, and the member acknowledges each (accept: done; release: back to the group, to "
        "be delivered again; reject: never delivered again). From the share_consumption table (per group, topic "
        "and member) and share_ranges (each acquired or acknowledged range)."))
    sh = scans.scan_share(source, interval)
    members = sh.members.rows
    if sh.rows == 0 or members is None or members.num_rows == 0:
        s.parts.append(Part("Records per member", "", empty="The share_consumption table is empty: no member was "
                            "seen acquiring records."))
    else:
        rows = members.to_pylist()
        labels = _unique_labels(rows)
        members = members.append_column("label", pa.array(labels, pa.string()))
        members = members.append_column("p50", pa.array([_ms_text(r["processing_p50_ms"]) for r in rows]))
        members = members.append_column("p99", pa.array([_ms_text(r["processing_p99_ms"]) for r in rows]))
        note = (f" The {members.num_rows} given the most records are drawn, of {sh.rows:,}."
                if sh.rows > members.num_rows else "")
        s.parts.append(Part(
            "Records per member",
            "Per member and topic: the records the broker gave it (each delivery counted; hover adds how many "
            "were redeliveries), and what became of them: accepted, released (given back, delivered again), "
            "rejected, lock lost (acquired again before it acknowledged them: its acquisition lock ran out or its "
            "session ended) and unacknowledged (held at the capture's end). Released, rejected and lock-lost "
            "records are records some member could not process." + note,
            fg.share_members(members),
            table_html=_html_table(members, SHARE_TABLE_COLUMNS)))
        timed = members.filter(pc.is_valid(members["processing_p50_ms"]))
        if timed.num_rows == 0:
            s.parts.append(Part("Processing time per member", "", empty="No record was followed from its "
                                "acquisition to its acknowledgement."))
        else:
            s.parts.append(Part(
                "Processing time per member",
                "Per member and topic: the time from a record's acquisition (the ShareFetch response) to its "
                "acknowledgement (the request carrying it), median, 99th percentile and longest, over the records "
                "followed one by one; log scale. A member far to the right of the others is slow to process, and "
                "close to its acquisition lock timeout (30 s by default) it loses records to redelivery." + note,
                fg.share_processing(timed)))
    acquired, acked = sh.acquired.result(), sh.acknowledged.result()
    if acquired is None and acked is None:
        s.parts.append(Part("Acquisitions and acknowledgements over time", "", empty="The share_ranges table "
                            "has no timed range."))
    else:
        parts = [t if t is not None else _no_records() for t in (acquired, acked)]
        top = [scans.FIRST_DELIVERY, scans.REDELIVERY]
        acks = [n for n in ("accept", "release", "reject", "renew") if n in set(parts[1]["series"].to_pylist())]
        acks += sorted(set(parts[1]["series"].to_pylist()) - set(acks) - {ag.OTHER})
        acks += [ag.OTHER] if ag.OTHER in set(parts[1]["series"].to_pylist()) else []
        colours = {scans.FIRST_DELIVERY: fg.PALETTE[0], scans.REDELIVERY: fg.PALETTE[4], "accept": fg.PALETTE[2],
                   "release": fg.PALETTE[1], "reject": fg.PALETTE[3], "renew": fg.PALETTE[5]}
        palette = {n: colours.get(n, fg.OTHER_COLOUR if n == ag.OTHER else fg.PALETTE[7]) for n in top + acks}
        s.parts.append(Part(
            "Acquisitions and acknowledgements over time",
            f"Records per {interval.label}: acquired by the members (top; redeliveries apart: records delivered "
            "before and not accepted), and acknowledged (bottom) by what the member said of them, as the "
            "requests carried them (acknowledgements the broker refused included; share_consumption counts those "
            "apart as failed acks). Hover adds the ranges." + _folded(sh.acknowledged),
            fg.time_range(fg.two_rows(fg.records_over_time(parts[0], interval, palette, "acquired"),
                                      fg.records_over_time(parts[1], interval, palette, "acknowledged"),
                                      ("Acquired (ShareFetch responses)", "Acknowledged (ShareFetch and "
                                       "ShareAcknowledge requests)"), f"records per {interval.label}"),
                          interval)))
    return s


def _no_records() -> pa.Table:
    return pa.table({"bin": pa.array([], TS), "series": pa.array([], pa.string()), "count": pa.array([], pa.int64()),
                     "records": pa.array([], pa.int64())})


def _partitions_text(partitions) -> str:
    return "; ".join(f"{p['topic']} {','.join(map(str, p['partitions'] or ()))}" for p in (partitions or ())) or "none"


def _transaction_hover(r: dict, ms: float | None, bound: str) -> str:
    """The hover's lines after the first (transactional id and outcome) and the time."""
    if bound == "open":
        lasted = f"still open at the capture's end: at least {ms:,.3f} ms"
    elif bound == "begun before":
        lasted = f"begun before the capture: at least {ms:,.3f} ms"
    else:
        lasted = f"lasted {ms:,.3f} ms"
    if r["commit_ms"] is not None:
        lasted += f"; EndTxn answered in {r['commit_ms']:,.3f} ms"
        if (r["end_attempts"] or 0) > 1:
            lasted += f" ({r['end_attempts']} attempts)"
    lines = [f"producer id {r['producer_id']}, epoch {r['producer_epoch']} ({r['client_id'] or 'no client_id'})",
             lasted, f"{r['records'] or 0:,} records in {r['produce_requests'] or 0:,} Produce requests",
             f"partitions: {_partitions_text(r['partitions'])}"]
    if r["groups"]:
        lines.append(f"offsets of group {', '.join(r['groups'])}")
    if r["errors"]:
        lines.append(f"errors: {', '.join(r['errors'])}")
    return "<br>".join(html.escape(x, quote=False) for x in lines)


def transaction_points(t: pa.Table, start: pa.Scalar | None, end: pa.Scalar | None) -> tuple[pa.Table, int]:
    """The markers of the transactions chart: x (its start, else its EndTxn), ms (its duration; for one still
    open at the capture's end, or begun before it, the time it was seen: a lower bound), bound and the hover's
    lines; and how many transactions have no duration and no bound (left out)."""
    first = start.as_py() if start is not None and start.is_valid else None
    last = end.as_py() if end is not None and end.is_valid else None
    rows, left_out = [], 0
    for r in t.to_pylist():
        ms, bound = r["duration_ms"], ""
        if ms is None and r["start_ts"] is not None and r["end_ts"] is None and last is not None:
            ms, bound = max((last - r["start_ts"]).total_seconds() * 1000, 0.0), "open"
        elif ms is None and r["start_ts"] is None and r["end_ts"] is not None and first is not None:
            ms, bound = max((r["end_ts"] - first).total_seconds() * 1000, 0.0), "begun before"
        if ms is None:
            left_out += 1
            continue
        rows.append({"x": r["x"], "ms": max(ms, 1e-3), "bound": bool(bound), "outcome": r["outcome"] or "unknown",
                     "transactional_id": r["transactional_id"], "hover": _transaction_hover(r, ms, bound)})
    schema = pa.schema([("x", TS), ("ms", pa.float64()), ("bound", pa.bool_()), ("outcome", pa.string()),
                        ("transactional_id", pa.string()), ("hover", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema), left_out


def _transactions(source: TableSource, interval: ag.Interval, start: pa.Scalar | None,
                  end: pa.Scalar | None) -> Section | None:
    """Transactions: only when the capture has a transactional producer's transactions."""
    if source.rows("transactions") == 0:
        return None
    s = Section("transactions", "Transactions", intro=(
        "Each transaction of a transactional producer, from the transactions table: from its first request "
        "(AddPartitionsToTxn, a transactional Produce, AddOffsetsToTxn or TxnOffsetCommit) to the EndTxn response "
        "that ended it. Outcome: committed or aborted (EndTxn answered without error), failed (EndTxn answered "
        "with an error the client does not retry, e.g. PRODUCER_FENCED), superseded (a new InitProducerId for "
        "the same transactional id while it was open: the coordinator aborts it), open (no EndTxn answered in "
        "the capture)."))
    tx = scans.scan_transactions(source)
    counts = tx.outcomes.result()
    if counts is not None:
        s.intro += " In all: " + ", ".join(
            f"{n:,} {o}" for o, n in sorted(zip(counts["outcome"].to_pylist(), counts["count"].to_pylist(),
                                                strict=True), key=lambda x: (-x[1], x[0] or ""))) + "."
    points = tx.points.rows
    t, left_out = transaction_points(points, start, end) if points is not None else (None, 0)
    if t is None or t.num_rows == 0:
        s.parts.append(Part("Transactions over time", "", empty="No transaction has a time (start or EndTxn)."))
    else:
        note = (f" {tx.points.n:,} of {tx.rows:,} transactions are drawn: those not committed first, then the "
                "longest." if tx.rows > tx.points.n else "")
        if left_out:
            note += f" {left_out:,} without a start or an end (no duration) are left out."
        s.parts.append(Part(
            "Transactions over time",
            "One marker per transaction: when it started and how long it lasted (its first request to the EndTxn "
            "response; log scale), coloured by outcome. A triangle is a lower bound: a transaction still open at "
            "the capture's end (to the end), or begun before the capture started (from its start). Hover gives "
            "the producer id and epoch, how long the coordinator took to answer EndTxn, the records and "
            "partitions it wrote and the errors met. Aborted or failed ones in a row are a producer in trouble; "
            "durations near transaction.timeout.ms, transactions the coordinator aborted." + note,
            fg.transaction_points(t, interval)))
    per_id = tx.per_id.result()
    if per_id is not None and per_id.num_rows:
        per_id = per_id.set_column(per_id.schema.get_field_index("transactional_id"), "transactional_id",
                                   pc.fill_null(per_id["transactional_id"], "(none)"))
        totals = ag.group(per_id, ["transactional_id"], [("count", "sum")], ["total"])
        totals = totals.sort_by([("total", "descending"), ("transactional_id", "ascending")])
        shown = totals.slice(0, scans.MAX_TRANSACTIONAL_IDS)
        t = per_id.join(shown, ["transactional_id"], join_type="inner")
        longest = [_ms_text(v) or "unknown (none ended)" for v in t["duration_ms"].to_pylist()]
        t = t.append_column("longest", pa.array(longest, pa.string()))
        order = {k: i for i, k in enumerate(shown["transactional_id"].to_pylist())}
        t = t.append_column("rank", pa.array([order[k] for k in t["transactional_id"].to_pylist()], pa.int64()))
        t = t.sort_by([("rank", "ascending"), ("outcome", "ascending")])
        n = totals.num_rows
        note = (f" The {shown.num_rows} ids with the most transactions are drawn, of "
                f"{'more than ' if tx.per_id.truncated else ''}{n:,}." if n > shown.num_rows else "")
        s.parts.append(Part(
            "Transactions per transactional id",
            "Per transactional id (a producer, or the instances that took over its id), its transactions by "
            "outcome; hover adds the longest of each outcome. An id with many aborted, failed or superseded "
            "transactions is a producer that keeps failing or being fenced by another instance." + note,
            fg.transactions_per_id(t)))
    bad = tx.uncommitted.rows
    if bad is not None and bad.num_rows:
        rows = bad.to_pylist()
        bad = bad.append_column("duration", pa.array([_ms_text(r["duration_ms"]) for r in rows], pa.string()))
        bad = bad.append_column("error_list", pa.array([", ".join(r["errors"] or ()) for r in rows], pa.string()))
        bad = bad.append_column("partition_list", pa.array([_partitions_text(r["partitions"]) for r in rows]))
        total = tx.rows - (next((c for o, c in zip(counts["outcome"].to_pylist(), counts["count"].to_pylist(),
                                                     strict=True) if o == "committed"), 0) if counts else 0)
        s.parts.append(Part(
            "Transactions that did not commit",
            f"The first {bad.num_rows} of {total:,} transactions aborted, failed, superseded or open, by time; "
            "errors: those met on the way, in order.",
            table_html=_html_table(bad, [
                ("transactional_id", "transactional id"), ("producer_id", "producer id"),
                ("producer_epoch", "epoch"), ("outcome", "outcome"), ("start_ts", "start (UTC)"),
                ("end_ts", "end (UTC)"), ("duration", "duration"), ("records", "records"),
                ("partition_list", "partitions"), ("error_list", "errors"), ("capture_file", "capture file")])))
    return s


ENDED_ORDER = ("fin", "rst", "reused", "evicted", "capture_end", "continued")


def _ended_order(values: pa.ChunkedArray) -> list[str]:
    """The ways connections ended among ``values`` (``closed: fin`` or ``fin``) in ENDED_ORDER, then the rest."""
    present = set(values.to_pylist()) - {None, ag.OPENED}
    known = [k for e in ENDED_ORDER for k in (e, f"closed: {e}") if k in present]
    return known + sorted(present - set(known))


def _connections(conns: scans.ConnectionAggregates, files: pa.Table, interval: ag.Interval) -> Section:
    s = Section("connections", "Connections and capture health")
    if conns.rows == 0:
        s.parts.append(Part("Connections opened and closed", "", empty="The connections table is empty: no Kafka "
                            "connection was found (check --port or --detect-ports)."))
        s.parts.append(Part("Connection timeline", "", empty="No connection."))
    else:
        merged = conns.events.merged()
        counts = None
        if merged is not None:  # every kind of opening and closing by name
            counts = conns.events.result(sorted(set(merged["series"].to_pylist()) - {None}))
        s.parts.append(Part(
            "Connections opened and closed",
            f"Connections whose handshake is in the capture (opened) and connections that ended (by FIN, reset, "
            f"port reuse or eviction) per {interval.label}; those still open at the end are left out. Many resets, "
            "or opens and closes in lockstep, are clients reconnecting. Hover: the first such connection's "
            "connection_id (its first packet).",
            fg.stacked_counts(counts, interval, "connections", "connection (first packet)",
                              fg.ended_colours(_ended_order(counts["series"]), opened=True)))
            if counts is not None and counts.num_rows else Part(
                "Connections opened and closed", "", empty="No connection opened or closed inside the capture: all "
                "were open before it started and after it ended."))
        c = conns.timeline.rows.drop_columns(["rst"])
        note = ""
        if conns.rows > MAX_CONNECTIONS:
            note = (f" {MAX_CONNECTIONS} of {conns.rows:,} connections are drawn: those with the most "
                    "retransmissions, gaps and resyncs, then the resets.")
        c = c.sort_by([("first_ts", "ascending"), ("capture_file", "ascending"), ("connection_id", "ascending")])
        several = pc.count_distinct(c["capture_file"]).as_py() > 1
        label = pc.binary_join_element_wise(
            "#", c["connection_id"].cast(pa.string()), " ", c["client_ip"], ":", c["client_port"].cast(pa.string()),
            " → ", c["broker_ip"], ":", c["broker_port"].cast(pa.string()), "")
        if several:
            label = pc.binary_join_element_wise(label, " (", c["capture_file"], ")", "")
        c = c.append_column("label", label)
        kinds = _ended_order(c["ended"])
        s.parts.append(Part(
            "Connection timeline",
            "Each connection from its first to its last packet, coloured by how it ended. Hover gives its "
            "retransmissions, gaps (bytes the capture lost) and framer resyncs; the number in the label is the "
            "connection's first packet." + note, fg.connection_timeline(c, fg.ended_colours(kinds))))
    if files.num_rows == 0:
        s.parts.append(Part("Capture health", "", empty="The files table is empty (the Spark job writes it; an "
                            "older export may lack it)."))
        return s
    t = conns.totals
    bad = files.filter(pc.not_equal(files["status"], "ok")).num_rows
    s.parts.append(Part(
        "Capture health",
        f"Packets per capture file by what they were. Over all connections: {t['gaps']:,} gaps ({t['gap_bytes']:,} "
        f"bytes the capture missed), {t['retransmissions']:,} retransmitted segments, {t['resyncs']:,} framer "
        f"resyncs; {bad:,} of {files.num_rows:,} files damaged or unreadable. Gaps mean the capture (not the "
        "network) lost packets: latencies and counts near them are incomplete.",
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


def write_report(source: TableSource, path: str, title: str = "kafkacap report", use_aggregates: bool = True) -> int:
    """Build the page and write it to ``path`` (through a temporary file beside it); returns its size."""
    text = render(build(source, title, use_aggregates))
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
