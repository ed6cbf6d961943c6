"""Terminal output (rich): the summary of an analysis and the one-line-per-exchange listing.

Only presentation lives here; every figure is computed from the tables with Arrow, the same data the
Parquet export holds, so what the terminal shows and what a notebook finds agree. Every string that came
from a capture (or a file name) goes into a table as ``inert_text``: shown, never obeyed.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table
from rich.text import Text

from analyzer.cli.cluster_view import cluster_rows, print_cluster
from analyzer.cli.connection_problems import print_problems, problem_rows
from analyzer.cli.lag_view import lag_rows, print_lag
from analyzer.cli.ports import found_ports, port_hints, port_lines, ports_not_decoded
from analyzer.cli.terminal import Col, address, inert, inert_text, print_table
from analyzer.cli.triage_view import print_triage, triage_rows
from analyzer.derived.span import Span, reports_span
from analyzer.pipeline.analyze import FileReport
from analyzer.pipeline.run import file_status
from analyzer.tables.schemas import expected_errors
from dissectors.kafka.apis import WAIT_APIS
from dissectors.kafka.errors import is_expected, is_retriable

PERCENTILES = (0.5, 0.95, 0.99)


SUMMARY_TABLES = ("exchanges", "connections", "partitions", "groups", "deliveries", "cluster", "transactions",
                  "share_consumption")
"""The tables the summary reads (print_summary, summary_document)."""


class Collector:
    """A sink that keeps the batches of the tables named (None: of every table) in memory, for the summary and
    the listing; the other tables' batches are let go as they come."""

    def __init__(self, tables: tuple[str, ...] | None = None) -> None:
        self.batches: dict[str, list[pa.RecordBatch]] = {}
        self.kept = None if tables is None else frozenset(tables)

    def __call__(self, table: str, batch: pa.RecordBatch) -> None:
        if self.kept is None or table in self.kept:
            self.batches.setdefault(table, []).append(batch)

    def table(self, name: str, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_batches(self.batches.get(name, []), schema=schema)


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def print_summary(console: Console, exchanges: pa.Table, connections: pa.Table,
                  reports: list[FileReport], partitions: pa.Table | None = None, groups: pa.Table | None = None,
                  deliveries: pa.Table | None = None, *, headers_only: bool = False,
                  verify_crc: bool = False, detect_ports: bool = False, cluster: pa.Table | None = None,
                  transactions: pa.Table | None = None, share_consumption: pa.Table | None = None) -> None:
    """The summary; ``headers_only``, ``verify_crc`` and ``detect_ports`` are the run's options, which decide
    what the figures can and cannot include (the summary says so)."""
    _files(console, reports)
    for line in port_lines(reports, detect_ports):
        console.print(inert_text(line))
    if exchanges.num_rows == 0:
        console.print(Text("No Kafka exchanges found. " + " ".join(hints(exchanges, connections, reports,
                                                                       detect_ports)), style="yellow"))
        print_problems(console, connections)
    else:
        span = reports_span(reports)
        _capture(console, capture_span(exchanges, span))
        _api_usage(console, exchanges, span)
        _slowest(console, slowest(exchanges))
        _errors(console, exchanges)
        print_problems(console, connections)
        print_triage(console, exchanges, connections)
        _brokers(console, broker_rows(exchanges))
        print_cluster(console, cluster)
        _clients(console, exchanges)
        if partitions is not None and partitions.num_rows:
            _topics(console, partitions)
            replication = replication_rows(partitions, span.seconds)
            if replication:
                _replication(console, replication)
        if groups is not None and groups.num_rows:
            _groups(console, group_rows(groups))
        if share_consumption is not None and share_consumption.num_rows:
            _shares(console, share_rows(share_consumption))
        if transactions is not None and transactions.num_rows:
            _transactions(console, transaction_rows(transactions, span.seconds))
        print_lag(console, partitions, exchanges)
        if deliveries is not None and deliveries.num_rows:
            _deliveries(console, delivery_rows(deliveries))
    crc = "not checked (--headers-only decodes no record batch)" if headers_only else (
        None if verify_crc else "not checked (--verify-crc)")
    _connections(console, connections, exchanges, partitions, crc)
    if headers_only:
        console.print(HEADERS_ONLY_NOTE, style="yellow", markup=False)


SLOWEST = 10


def expected_mask(ex: pa.Table) -> pa.ChunkedArray:
    """Per exchange: its error is a protocol step (dissectors.kafka.errors.EXPECTED_ERRORS), not a failure."""
    return expected_errors(ex["error_name"], ex["api_name"])


def failure_mask(ex: pa.Table) -> pa.ChunkedArray:
    return pc.and_(pc.equal(pc.fill_null(ex["status"], ""), "error"), pc.invert(expected_mask(ex)))


def capture_span(ex: pa.Table, span: Span) -> dict:
    """The capture's span (analyzer.derived.span: each capture set from its first to its last packet, captures
    merged where they overlap), the seconds it covers, and the request rate over those seconds."""
    requests = len(ex) - ex["api_key"].null_count
    return {"first": span.first, "last": span.last, "seconds": span.seconds,
            "intervals": [{"first": a, "last": b, "seconds": (b - a).total_seconds()} for a, b in span.intervals],
            "exchanges": len(ex), "requests": requests, "requests_per_second": span.rate(requests)}


def served(ex: pa.Table) -> pa.Table:
    """The answered exchanges the broker did not hold by design (``waited`` false), with their service_ms;
    for tables without those columns (an older export), the answered ones of the APIs that never wait."""
    if "waited" not in ex.column_names:
        s = ex.filter(pc.and_(pc.is_valid(ex["latency_ms"]),
                              pc.invert(pc.fill_null(pc.is_in(ex["api_name"], pa.array(WAIT_APIS)), False))))
        return s.append_column("service_ms", s["latency_ms"])
    return ex.filter(pc.and_(pc.invert(pc.fill_null(ex["waited"], True)), pc.is_valid(ex["service_ms"])))


def slowest(ex: pa.Table, n: int = SLOWEST) -> list[dict]:
    """The ``n`` longest service times (exchanges the broker did not hold by design: see the waited column),
    slowest first, with the packet numbers to open them in Wireshark."""
    s = served(ex)
    top = s.take(pc.select_k_unstable(s["service_ms"], n, [("service_ms", "descending")]))
    top = top.sort_by([("service_ms", "descending"), ("request_frame", "ascending")])
    cols = ("capture_file", "connection_id", "request_frame", "response_frame", "api_name", "api_version",
            "correlation_id", "client_id", "client_ip", "client_port", "broker_ip", "broker_port", "topics",
            "latency_ms", "service_ms", "status", "error_name", "group_id")
    return top.select(list(cols)).to_pylist()


def _digest_groups(t: pa.Table, keys: list[str], values: list[str]) -> pa.TableGroupBy:
    """A group-by whose t-digest percentiles depend only on the rows and their order: one chunk, one thread.
    The digests are merged in the order the chunks are met, and a run with --jobs N hands its rows on in
    batches cut where its processes' timing puts them: the same capture gave another p99 at every run."""
    return t.select([*keys, *values]).combine_chunks().group_by(keys, use_threads=False)


def broker_rows(ex: pa.Table) -> list[dict]:
    """Per broker address: requests, failures, clients, and service-time percentiles (waits left out)."""
    ex = ex.append_column("failed", pc.cast(failure_mask(ex), pa.int64()))
    g = ex.group_by(["broker_ip", "broker_port"]).aggregate([
        ("api_key", "count"), ("failed", "sum"), ("client_ip", "count_distinct")])
    s = served(ex)
    lat = {}
    if s.num_rows:
        for r in _digest_groups(s, ["broker_ip", "broker_port"], ["service_ms"]).aggregate([
                ("service_ms", "tdigest", pc.TDigestOptions(q=[0.5, 0.99]))]).to_pylist():
            lat[(r["broker_ip"], r["broker_port"])] = r["service_ms_tdigest"]
    rows = []
    for r in g.to_pylist():
        q = lat.get((r["broker_ip"], r["broker_port"]), [None, None])
        rows.append({"broker_ip": r["broker_ip"], "broker_port": r["broker_port"], "requests": r["api_key_count"],
                     "failures": r["failed_sum"] or 0, "client_addresses": r["client_ip_count_distinct"],
                     "service_p50_ms": q[0], "service_p99_ms": q[1]})
    rows.sort(key=lambda r: (-r["requests"], r["broker_ip"] or "", r["broker_port"] or 0))
    return rows


def hints(ex: pa.Table, conns: pa.Table, reports: list[FileReport], detect_ports: bool = False) -> list[str]:
    """Why a capture may show no (or few) Kafka exchanges, from what the analysis saw."""
    out = []
    counts = {key: value for key, _, value in anomaly_counts(conns, ex)}
    hidden = counts["tls_connections"] - counts["tls_decrypted"]
    tls = counts["tls_connections"]
    if hidden:
        out.append(f"{hidden:,} TLS connection(s) on the Kafka ports were not decrypted: give the clients' key "
                   "log with --tls-keylog (see the connections table's tls_note for why each was not).")
    if any(r.stats is not None and r.stats.damage for r in reports):
        out.append("Some input is damaged (see the files above).")
    if not any(r.stats is not None and r.stats.tcp_packets for r in reports):
        out.append("No TCP packet was read at all.")
    elif ex.num_rows == 0 and not tls:
        out.extend(port_hints(reports, detect_ports) or [
            "No TCP connection was left aside either." if detect_ports else "Kafka on another port? Try --port "
            "or --detect-ports."])
    return out


def address_column(ips: pa.ChunkedArray, ports: pa.ChunkedArray) -> pa.ChunkedArray:
    """ip:port per row, IPv6 as [ip]:port (as ``terminal.address``)."""
    v6 = pc.fill_null(pc.match_substring(ips, ":"), False)
    host = pc.if_else(v6, pc.binary_join_element_wise("[", ips, "]", ""), ips)
    return pc.binary_join_element_wise(host, pc.cast(ports, pa.string()), ":")


def _capture(console: Console, span: dict) -> None:
    if span["first"] is None:
        return
    rate = span["requests_per_second"]
    counts = f"{span['requests']:,} requests" + (f" ({rate:,.1f}/s)" if rate is not None else "")
    if len(span["intervals"]) == 1:
        console.print(Text.assemble(
            ("Capture: ", "bold"), f"{span['first']:%Y-%m-%d %H:%M:%S.%f} to {span['last']:%Y-%m-%d %H:%M:%S.%f} UTC "
            f"({span['seconds']:,.3f} s), {counts}"))
        return
    console.print(Text.assemble(
        ("Capture: ", "bold"), f"{span['seconds']:,.3f} s covered by {len(span['intervals'])} spans apart, {counts}: ",
        "; ".join(f"{i['first']:%Y-%m-%d %H:%M:%S.%f} to {i['last']:%Y-%m-%d %H:%M:%S.%f} UTC ({i['seconds']:,.3f} s)"
                  for i in span["intervals"])))


def _slowest(console: Console, rows: list[dict]) -> None:
    if not rows:
        return
    columns = (Col("service ms", "right"), Col("api"), Col("client_id", priority=2, max_width=30), Col("client"),
               Col("broker", under="client"), Col("topics", priority=1, max_width=30),
               Col("file", hoist=True, under="packets"), Col("packets"), Col("status", under="api"))
    cells = []
    for r in rows:
        topics = r["topics"] or []
        cells.append((_fmt_ms(r["service_ms"]), inert_text(f"{r['api_name']} v{r['api_version']}"),
                      inert_text(r["client_id"], missing="(null)"),
                      inert_text(address(r["client_ip"], r["client_port"])),
                      inert_text(address(r["broker_ip"], r["broker_port"])),
                      inert_text(", ".join(topics[:3]) + (f" +{len(topics) - 3}" if len(topics) > 3 else "")),
                      inert_text(r["capture_file"]), f"{r['request_frame']}-{r['response_frame']}",
                      inert_text(r["status"] if r["status"] != "error" else r["error_name"])))
    print_table(console, f"Slowest service times (top {SLOWEST}; long polls and group joins the broker held by "
                         "design are left out)", columns, cells)


def _brokers(console: Console, rows: list[dict]) -> None:
    if len(rows) < 1:
        return
    columns = (Col("broker"), Col("requests", "right"), Col("failures", "right"),
               Col("client addresses", "right", priority=1), Col("p50", "right"), Col("p99", "right"))
    print_table(console, "Brokers (service time in ms, waits left out)", columns, [
        (inert_text(address(r["broker_ip"], r["broker_port"])), f"{r['requests']:,}", str(r["failures"] or ""),
         f"{r['client_addresses']:,}", _fmt_ms(r["service_p50_ms"]), _fmt_ms(r["service_p99_ms"])) for r in rows])


HEADERS_ONLY_NOTE = (
    "Headers only (--headers-only): request and response bodies were not decoded, so there are no topics or "
    "partitions, and the errors counted are only those a response carries at its top level. Errors reported "
    "per topic or per partition (Produce, Fetch, ListOffsets, OffsetCommit, CreateTopics, ...) were not seen. "
    "Run without --headers-only for them."
)


def topic_rows(parts: pa.Table) -> list[dict]:
    """Who sends what where, per topic: the records producers attempted and how the brokers answered them
    (``produced``: acknowledged without error; ``produce_failed``: in partition entries answered with an error;
    ``produce_unacknowledged``: sent with acks=0 or never answered), the produced records' bytes, producers and
    codecs; records in the consumers' Fetch responses (``fetched``, whole batches as returned: not the records
    consumed), their bytes and the largest lag."""
    parts = parts.filter(pc.is_valid(parts["records"]))
    if not parts.num_rows:
        return []
    produce = parts.filter(pc.equal(parts["api_key"], 0))
    fetch = parts.filter(pc.and_(pc.equal(parts["api_key"], 1), pc.invert(is_follower(parts))))
    rows: dict[str, dict] = {}
    if produce.num_rows:
        code, records = produce["error_code"], produce["records"]
        none = pa.scalar(None, records.type)
        acked = pc.fill_null(pc.equal(code, 0), False)
        w = pa.table({
            "topic": produce["topic"], "records": records, "client_id": produce["client_id"], "codec": produce["codec"],
            "produced": pc.if_else(acked, records, none),
            "failed": pc.if_else(pc.fill_null(pc.not_equal(code, 0), False), records, none),
            "unacknowledged": pc.if_else(pc.is_null(code), records, none),
            "produced_bytes": pc.if_else(acked, produce["request_record_bytes"],
                                         pa.scalar(None, produce["request_record_bytes"].type))})
        for r in w.group_by("topic").aggregate([
            ("records", "sum"), ("produced", "sum"), ("failed", "sum"), ("unacknowledged", "sum"),
            ("produced_bytes", "sum"), ("client_id", "count_distinct"), ("codec", "distinct"),
        ]).to_pylist():
            rows.setdefault(r["topic"], {}).update(
                produce_attempted=r["records_sum"], produced=r["produced_sum"] or 0,
                produce_failed=r["failed_sum"] or 0, produce_unacknowledged=r["unacknowledged_sum"] or 0,
                produced_bytes=r["produced_bytes_sum"], producers=r["client_id_count_distinct"],
                codecs=sorted(c for c in r["codec_distinct"] if c))
    if fetch.num_rows:
        for r in fetch.group_by("topic").aggregate([
            ("records", "sum"), ("response_record_bytes", "sum"), ("consumer_lag", "max"),
        ]).to_pylist():
            rows.setdefault(r["topic"], {}).update(
                fetched=r["records_sum"], fetched_bytes=r["response_record_bytes_sum"], max_lag=r["consumer_lag_max"])
    keys = ("produce_attempted", "produced", "produce_failed", "produce_unacknowledged", "produced_bytes", "producers",
            "codecs", "fetched", "fetched_bytes", "max_lag")
    out = [{"topic": topic, **{k: r.get(k) for k in keys}} for topic, r in rows.items()]
    out.sort(key=lambda r: (-(r["produced"] or 0), -(r["produce_attempted"] or 0), -(r["fetched"] or 0),
                            r["topic"] or ""))
    return out


def is_follower(parts: pa.Table) -> pa.ChunkedArray:
    """Rows of a follower's Fetch (replication), false where the table does not say (older exports)."""
    if "fetch_kind" not in parts.column_names:
        return pc.equal(parts["api_key"], -1)
    return pc.fill_null(pc.equal(parts["fetch_kind"], "follower"), False)


def replication_rows(parts: pa.Table, seconds: float | None = None) -> list[dict]:
    """Per topic-partition, the followers' Fetch requests: how many (and per second), by how many followers, the
    records they copied, and their lag behind the leader (high_watermark minus fetch_offset, as the leader
    answered): at most, and at the last fetch seen."""
    if not parts.num_rows:
        return []
    f = parts.filter(pc.and_(pc.equal(parts["api_key"], 1), is_follower(parts)))
    if not f.num_rows:
        return []
    lag = pc.subtract(f["high_watermark"], f["fetch_offset"])
    f = f.append_column("lag", lag).sort_by([("response_last_ts", "ascending")])
    out = []
    for r in f.group_by(["topic", "partition"], use_threads=False).aggregate([
        ("replica_id", "count"), ("replica_id", "count_distinct"), ("records", "sum"), ("lag", "max"),
        ("lag", "last"),
    ]).to_pylist():
        out.append({"topic": r["topic"], "partition": r["partition"], "fetches": r["replica_id_count"],
                    "per_second": round(r["replica_id_count"] / seconds, 3) if seconds else None,
                    "followers": r["replica_id_count_distinct"], "records": r["records_sum"] or 0,
                    "max_lag": r["lag_max"], "last_lag": r["lag_last"]})
    out.sort(key=lambda r: (r["topic"] or "", r["partition"] if r["partition"] is not None else -1))
    return out


def _replication(console: Console, rows: list[dict], top: int = 20) -> None:
    def num(v: int | None) -> str:
        return "-" if v is None else f"{v:,}"

    columns = (Col("topic"), Col("partition", "right"), Col("fetches", "right"), Col("per s", "right", priority=2),
               Col("followers", "right", priority=1), Col("records", "right", priority=1), Col("max lag", "right"),
               Col("last lag", "right", priority=3))
    print_table(console, f"Replication: followers' fetches per partition (top {top} by lag; not consumers)", columns, [
        (inert_text(r["topic"]), num(r["partition"]), num(r["fetches"]),
         "-" if r["per_second"] is None else f"{r['per_second']:.1f}", num(r["followers"]), num(r["records"]),
         num(r["max_lag"]), num(r["last_lag"])) for r in sorted(rows, key=lambda r: -(r["max_lag"] or 0))[:top]])


TOPIC_NOTE = (
    "produced: records the broker acknowledged without error (bytes in: theirs); failed: records in partition "
    "entries answered with an error; no ack: records sent with acks=0 or never answered; attempted: every record "
    "sent. fetched: records in the Fetch responses to consumers (bytes out: theirs), whole batches as the broker "
    "returned them, so a record fetched again counts again and records before the fetch offset count too: not the "
    "records consumed. Followers' fetches are under Replication."
)


def _topics(console: Console, parts: pa.Table, top: int = 15) -> None:
    rows = topic_rows(parts)
    if not rows:
        return

    def num(v: int | None) -> str:
        return "-" if v is None else f"{v:,}"

    failed = any(r["produce_failed"] for r in rows)
    unacked = any(r["produce_unacknowledged"] for r in rows)
    columns = [Col("topic"), Col("produced", "right")]
    if failed:
        columns.append(Col("failed", "right"))
    if unacked:
        columns.append(Col("no ack", "right"))
    if failed or unacked:
        columns.append(Col("attempted", "right"))
    columns += [Col("bytes in", "right", priority=2), Col("producers", "right", priority=1),
                Col("codecs", priority=1, max_width=24), Col("fetched", "right"), Col("bytes out", "right", priority=2),
                Col("max lag", "right", priority=3)]
    cells = []
    for r in rows[:top]:
        cells.append((inert_text(r["topic"]), num(r["produced"]),
                      *((num(r["produce_failed"]),) if failed else ()),
                      *((num(r["produce_unacknowledged"]),) if unacked else ()),
                      *((num(r["produce_attempted"]),) if failed or unacked else ()),
                      num(r["produced_bytes"]), num(r["producers"]), inert_text(",".join(r["codecs"] or []) or None),
                      num(r["fetched"]), num(r["fetched_bytes"]), num(r["max_lag"])))
    print_table(console, f"Topics (by records produced, top {top})", columns, cells)
    note = TOPIC_NOTE if failed or unacked else (
        TOPIC_NOTE + " Every record sent was acknowledged without error (so no failed, no ack or attempted column).")
    console.print(f"  {note}", style="dim", markup=False, highlight=False)


def group_rows(groups: pa.Table) -> list[dict]:
    """Per consumer group (and capture): its generations, the rebalances that made them, and how long members
    went without partitions, with one entry per generation; the groups table's names throughout."""
    out: dict[tuple, dict] = {}
    previous: dict[tuple, dict] = {}  # (capture, group) -> its generation before, as the table has it
    for g in groups.sort_by([("capture_file", "ascending"), ("group_id", "ascending"),
                             ("generation_id", "ascending")]).to_pylist():
        key = (g["capture_file"], g["group_id"])
        entry = out.setdefault(key, {
            "capture_file": g["capture_file"], "group_id": g["group_id"],
            "group_protocol": g.get("group_protocol") or "classic", "generations": 0,
            "rebalance_ms_total": 0.0, "waited_ms_total": 0.0, "stop_ms_max": None, "members_max": 0,
            "generation_rows": []})
        before = previous.get(key)
        if before is not None and g["left"] is not None and before["generation_id"] == g["generation_id"] - 1:
            had = {m["member_id"] for m in before["members"]}
            entry["waited_ms_total"] += sum(m["waited_ms"] or 0.0 for m in g["members"] if m["member_id"] in had)
        previous[key] = g
        entry["generations"] += 1
        entry["rebalance_ms_total"] += g["rebalance_ms"] or 0.0
        if g["stop_ms"] is not None:
            entry["stop_ms_max"] = max(entry["stop_ms_max"] or 0.0, g["stop_ms"])
        entry["members_max"] = max(entry["members_max"], g["member_count"])
        entry["generation_rows"].append({
            "generation_id": g["generation_id"], "protocol_name": g["protocol_name"],
            "members": [m["client_id"] or m["member_id"] for m in g["members"]],
            "joined": g["joined"], "left": g["left"],
            "left_ts": {m["client_id"] or m["member_id"]: m["left_ts"] for m in g["members"]
                        if m["left_ts"] is not None},
            "rebalance_start": g["rebalance_start"], "rebalance_ms": g["rebalance_ms"], "stop_ms": g["stop_ms"]})
    for entry in out.values():
        entry["rebalance_ms_total"] = round(entry["rebalance_ms_total"], 3)
        entry["waited_ms_total"] = round(entry["waited_ms_total"], 3)
    return list(out.values())


def delivery_rows(deliveries: pa.Table) -> list[dict]:
    """End-to-end latency per topic and consuming group (or client, outside groups): produced batches
    delivered, and produce-to-fetch percentiles."""
    t = deliveries.append_column("consumer", pc.coalesce(deliveries["group_id"],
                                                         pc.binary_join_element_wise("client ", deliveries[
                                                             "consumer_client_id"], "")))
    agg = _digest_groups(t, ["topic", "consumer"], ["delivery_ms"]).aggregate([
        ([], "count_all"), ("delivery_ms", "tdigest", pc.TDigestOptions(q=[0.5, 0.99])), ("delivery_ms", "max")])
    out = []
    for r in agg.sort_by([("topic", "ascending"), ("consumer", "ascending")]).to_pylist():
        p50, p99 = r["delivery_ms_tdigest"] or (None, None)
        out.append({"topic": r["topic"], "consumer": r["consumer"], "batches": r["count_all"],
                    "delivery_p50_ms": None if p50 is None else round(p50, 3),
                    "delivery_p99_ms": None if p99 is None else round(p99, 3),
                    "delivery_max_ms": r["delivery_ms_max"]})
    return out


def _deliveries(console: Console, rows: list[dict], top: int = 20) -> None:
    columns = (Col("topic"), Col("consumer (group or client)"), Col("batches", "right"), Col("p50", "right"),
               Col("p99", "right"), Col("max", "right", priority=1))
    print_table(console, "End-to-end: produce request to the consumer's fetch response (ms)", columns, [
        (inert_text(r["topic"]), inert_text(r["consumer"]), f"{r['batches']:,}", _fmt_ms(r["delivery_p50_ms"]),
         _fmt_ms(r["delivery_p99_ms"]), _fmt_ms(r["delivery_max_ms"])) for r in rows[:top]])
    if len(rows) > top:
        console.print(f"  ... {len(rows) - top:,} more (kafkacap export: the deliveries table)")


def share_rows(consumption: pa.Table) -> list[dict]:
    """Per share group, topic and member: records given, redelivered, accepted, released, rejected, lost to an
    expired lock, unacknowledged, and processing time; the share_consumption table's names."""
    columns = ["group_id", "topic", "client_id", "member_id", "acquired_records", "redelivered_records", "accepted",
               "released", "rejected", "renewed", "failed_acks", "lock_lost", "unacknowledged", "processing_p50_ms",
               "processing_p99_ms", "processing_max_ms"]
    rows = consumption.select(["capture_file", *columns]).to_pylist()
    return sorted(rows, key=lambda r: tuple("" if r[k] is None else str(r[k]) for k in
                                            ("capture_file", "group_id", "topic", "client_id", "member_id")))


def _shares(console: Console, rows: list[dict], top: int = 20) -> None:
    columns = (Col("group_id"), Col("topic"), Col("member (client)"), Col("given", "right"),
               Col("again", "right", priority=1), Col("accepted", "right"), Col("released", "right"),
               Col("rejected", "right"), Col("lock lost", "right"), Col("unacked", "right", priority=1),
               Col("p50", "right"), Col("p99", "right", priority=1))
    print_table(console, "Share groups: records given to each member and what it did (processing time in ms)",
                columns, [(inert_text(r["group_id"]), inert_text(r["topic"]),
                           inert_text(r["client_id"] or r["member_id"]),
                           f"{r['acquired_records']:,}", f"{r['redelivered_records']:,}", f"{r['accepted']:,}",
                           f"{r['released']:,}", f"{r['rejected']:,}", f"{r['lock_lost']:,}",
                           f"{r['unacknowledged']:,}", _fmt_ms(r["processing_p50_ms"]),
                           _fmt_ms(r["processing_p99_ms"])) for r in rows[:top]])
    console.print("  given: records acquired (each delivery); again: of those, delivered before; lock lost: "
                  "acquired again before it acknowledged them (its lock ran out); processing: acquisition to "
                  "its acknowledgement.", style="dim", markup=False, highlight=False)
    if len(rows) > top:
        console.print(f"  ... {len(rows) - top:,} more (kafkacap export: the share_consumption table)")


OUTCOMES = ("committed", "aborted", "failed", "superseded", "open")


def transaction_rows(transactions: pa.Table, seconds: float | None = None) -> list[dict]:
    """Per transactional id (and capture): transactions by outcome, per second over the capture's span,
    duration and EndTxn time percentiles, and the errors met; the transactions table's names throughout."""
    keys = ["capture_file", "transactional_id"]
    digest = pc.TDigestOptions(q=[0.5, 0.99])
    stats = {(r["capture_file"], r["transactional_id"]): r for r in _digest_groups(
        transactions, keys, ["duration_ms", "commit_ms", "records"]).aggregate([
        ([], "count_all"), ("duration_ms", "tdigest", digest), ("duration_ms", "max"), ("commit_ms", "tdigest", digest),
        ("records", "sum")]).to_pylist()}
    found: dict[tuple, dict] = {}
    for t in transactions.select([*keys, "outcome", "errors"]).to_pylist():
        entry = found.setdefault((t["capture_file"], t["transactional_id"]), {o: 0 for o in OUTCOMES} | {"errors": []})
        if t["outcome"] in entry:
            entry[t["outcome"]] += 1
        entry["errors"] += [e for e in t["errors"] or () if e not in entry["errors"]]
    out = []
    for key in sorted(found, key=lambda k: (k[0] or "", k[1] or "")):
        r = stats[key]
        d50, d99 = r["duration_ms_tdigest"] or (None, None)
        c50, c99 = r["commit_ms_tdigest"] or (None, None)
        out.append({"capture_file": key[0], "transactional_id": key[1], "transactions": r["count_all"],
                    **found[key],
                    "per_second": round(r["count_all"] / seconds, 3) if seconds else None,
                    "duration_p50_ms": None if d50 is None else round(d50, 3),
                    "duration_p99_ms": None if d99 is None else round(d99, 3),
                    "duration_max_ms": r["duration_ms_max"],
                    "commit_p50_ms": None if c50 is None else round(c50, 3),
                    "commit_p99_ms": None if c99 is None else round(c99, 3),
                    "records": r["records_sum"]})
    return out


def _transactions(console: Console, rows: list[dict], top: int = 20) -> None:
    columns = (Col("transactional_id"), Col("txns", "right"), Col("committed", "right"),
               Col("aborted", "right", under="committed"), Col("failed", "right", priority=1),
               Col("open", "right", priority=1), Col("per s", "right", priority=2), Col("p50", "right"),
               Col("p99", "right"), Col("EndTxn p50", "right", priority=1), Col("errors", wrap=True, priority=2))
    print_table(console, "Transactions: first request to EndTxn's answer (ms)", columns, [
        (inert_text(r["transactional_id"]), f"{r['transactions']:,}", f"{r['committed']:,}", f"{r['aborted']:,}",
         f"{r['failed'] + r['superseded']:,}", f"{r['open']:,}",
         "-" if r["per_second"] is None else f"{r['per_second']:,.2f}", _fmt_ms(r["duration_p50_ms"]),
         _fmt_ms(r["duration_p99_ms"]), _fmt_ms(r["commit_p50_ms"]), inert_text(", ".join(r["errors"]) or "-"))
        for r in rows[:top]])
    if len(rows) > top:
        console.print(f"  ... {len(rows) - top:,} more transactional ids (kafkacap export: the transactions table)")


MAX_GENERATION_ROWS = 40


GROUPS_NOTE = (
    "  Columns of the groups table: joined / left: members new to / missing from the generation before (- when "
    "it is not in the capture); left_ts: members that sent LeaveGroup in this generation; rebalance_ms: first "
    "JoinGroup to the last member's assignment; stop_ms: the longest a member of the generation before went "
    "without partitions (its waited_ms). protocol consumer (KIP-848), share and streams: generation_id is the "
    "group epoch, rebalance_ms from the change that set it off to every member owning its assignment, stop_ms "
    "the longest a moved partition had no consumer."
)


def _groups(console: Console, rows: list[dict]) -> None:
    columns = (Col("group_id"), Col("protocol", priority=1), Col("generation_id", "right", under="group_id"),
               Col("members", wrap=True),
               Col("joined", "right"),
               Col("left", "right", under="joined"), Col("left_ts", "right", under="joined"),
               Col("rebalance_ms", "right"), Col("stop_ms", "right", under="rebalance_ms"),
               Col("rebalance_start", priority=1))
    cells = []
    for entry in rows:
        for g in entry["generation_rows"][:MAX_GENERATION_ROWS - len(cells)]:
            cells.append((inert_text(entry["group_id"]), entry["group_protocol"], str(g["generation_id"]),
                          inert_text(", ".join(sorted(set(g["members"])))),
                          "-" if g["joined"] is None else str(len(g["joined"])),
                          "-" if g["left"] is None else str(len(g["left"])), str(len(g["left_ts"])),
                          _fmt_ms(g["rebalance_ms"]), _fmt_ms(g["stop_ms"]),
                          g["rebalance_start"].strftime("%H:%M:%S.%f")[:-3] if g["rebalance_start"] else "-"))
    print_table(console, "Consumer groups: generations and the rebalances that made them (times in ms)", columns,
                cells)
    console.print(GROUPS_NOTE, style="dim", markup=False, highlight=False)
    total = sum(len(e["generation_rows"]) for e in rows)
    if total > len(cells):
        console.print(f"  ... {total - len(cells):,} more generations (kafkacap export: the groups table)")
    for entry in rows:
        if entry["group_protocol"] == "classic":
            waited = (f"members of a generation before went without partitions {_fmt_ms(entry['waited_ms_total'])} "
                      f"ms in all (their waited_ms summed; the longest stop_ms {_fmt_ms(entry['stop_ms_max'])} ms)")
        else:
            waited = (f"members took {_fmt_ms(entry['waited_ms_total'])} ms in all to reconcile (their waited_ms "
                      f"summed); the longest a moved partition had no consumer: {_fmt_ms(entry['stop_ms_max'])} ms")
        console.print(Text(f"  {inert(entry['group_id'])} ({entry['group_protocol']}): {entry['generations']} "
                           f"{'generation' if entry['group_protocol'] == 'classic' else 'epoch'}"
                           f"{'s' if entry['generations'] != 1 else ''}, up to {entry['members_max']} members; "
                           f"{waited}"))


def _files(console: Console, reports: list[FileReport]) -> None:
    columns = (Col("file"), Col("format", priority=2), Col("packets", "right"), Col("connections", "right"),
               Col("exchanges", "right"), Col("seconds", "right", priority=1), Col("status", wrap=True))
    cells = []
    for r in reports:
        status, message = file_status(r)
        style = {"ok": "green", "damaged": "yellow"}.get(status, "red")
        s = r.stats
        fmt = f"{s.format}{'+' + s.compression if s.compression else ''}" if s else "-"
        shown = Text(status, style=style)
        if message:
            shown.append(": " + inert(message))
        cells.append((inert_text(r.name), fmt, f"{s.packets:,}" if s else "-", f"{r.connections:,}",
                      f"{r.exchanges:,}", f"{r.seconds:.2f}", shown))
    print_table(console, "Capture files", columns, cells)


def api_rows(ex: pa.Table, span_seconds: float | None = None) -> list[dict]:
    """Per API and version: requests (and per second over the capture span), failures, expected protocol
    errors, unanswered requests, and latency percentiles; ``wait`` marks the APIs whose latency is a wait."""
    answered = ex.filter(pc.is_valid(ex["latency_ms"]))
    lat = {}
    if answered.num_rows:
        g = _digest_groups(answered, ["api_name", "api_version"], ["latency_ms"]).aggregate([
            ("latency_ms", "tdigest", pc.TDigestOptions(q=list(PERCENTILES))),
            ("latency_ms", "max"),
        ])
        for row in g.to_pylist():
            lat[(row["api_name"], row["api_version"])] = (row["latency_ms_tdigest"], row["latency_ms_max"])
    w = pa.table({"api_name": ex["api_name"], "api_version": ex["api_version"],
                  "failed": pc.cast(failure_mask(ex), pa.int64()), "expected": pc.cast(expected_mask(ex), pa.int64()),
                  "unanswered": pc.cast(pc.equal(ex["status"], "no_response"), pa.int64())})
    g = w.group_by(["api_name", "api_version"]).aggregate([
        ([], "count_all"), ("failed", "sum"), ("expected", "sum"), ("unanswered", "sum")])
    rows = []
    for r in g.to_pylist():
        q, mx = lat.get((r["api_name"], r["api_version"]), ([None] * len(PERCENTILES), None))
        rows.append({
            "api_name": r["api_name"], "api_version": r["api_version"], "requests": r["count_all"],
            "per_second": r["count_all"] / span_seconds if span_seconds else None,
            "failures": r["failed_sum"] or 0, "expected_errors": r["expected_sum"] or 0,
            "no_response": r["unanswered_sum"] or 0, "wait": r["api_name"] in WAIT_APIS,
            "latency_ms": {**{f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, q, strict=True)}, "max": mx}})
    rows.sort(key=lambda r: (-r["requests"], r["api_name"] or "~", -1 if r["api_version"] is None
                             else r["api_version"]))
    return rows


def _api_usage(console: Console, ex: pa.Table, span: Span) -> None:
    rows = api_rows(ex, span.seconds)
    columns = (Col("api"), Col("version", "right"), Col("requests", "right"), Col("per s", "right", priority=4),
               Col("failures", "right"), Col("expected", "right", priority=3),
               Col("no response", "right", priority=3), Col("p50", "right"), Col("p95", "right", priority=1),
               Col("p99", "right"), Col("max", "right", priority=2))
    cells = []
    for r in rows:
        name = inert_text(r["api_name"], missing="(response without request)")
        if r["wait"]:
            name.append("*")
        lat = r["latency_ms"]
        cells.append((name, "-" if r["api_version"] is None else str(r["api_version"]), f"{r['requests']:,}",
                      "-" if r["per_second"] is None else f"{r['per_second']:,.1f}", str(r["failures"] or ""),
                      str(r["expected_errors"] or ""), str(r["no_response"] or ""),
                      *(_fmt_ms(lat[f"p{round(p * 100)}"]) for p in PERCENTILES), _fmt_ms(lat["max"])))
    print_table(console, "Requests by API and version (latency in ms; * waits by design: long polls, group joins)",
                columns, cells)


def error_rows(ex: pa.Table) -> list[dict]:
    errs = ex.filter(pc.fill_null(pc.not_equal(ex["error_code"], 0), False))
    if not errs.num_rows:
        return []
    g = errs.group_by(["error_name", "error_code", "api_name"]).aggregate([("error_code", "count")])
    rows = [{"error_name": r["error_name"], "error_code": r["error_code"], "api_name": r["api_name"],
             "count": r["error_code_count"], "retriable": is_retriable(r["error_code"]),
             "expected": is_expected(r["error_name"], r["api_name"])} for r in g.to_pylist()]
    rows.sort(key=lambda r: (r["expected"], -r["count"], r["error_name"] or "", r["api_name"] or ""))
    return rows


def _errors(console: Console, ex: pa.Table) -> None:
    rows = error_rows(ex)
    if not rows:
        return
    columns = (Col("error"), Col("code", "right", priority=1), Col("retriable", priority=2), Col("expected"),
               Col("api"), Col("count", "right"))
    print_table(console, "Errors (expected: a step of the protocol, not a failure)", columns, [
        (inert_text(row["error_name"], style="dim" if row["expected"] else ""), str(row["error_code"]),
         {True: "yes", False: "no"}.get(row["retriable"], "?"), "yes" if row["expected"] else "",
         inert_text(row["api_name"]), f"{row['count']:,}") for row in rows])


def client_rows(ex: pa.Table, top: int | None = 10) -> list[dict]:
    """Per client id and address: requests, request bytes, failures, and how often and how long the brokers
    throttled it."""
    has_req = ex.filter(pc.is_valid(ex["api_key"]))
    if not has_req.num_rows:
        return []
    throttle = pc.fill_null(has_req["throttle_time_ms"], 0)
    w = pa.table({"client_id": has_req["client_id"], "client_ip": has_req["client_ip"],
                  "api_key": has_req["api_key"], "request_size": has_req["request_size"],
                  "failed": pc.cast(failure_mask(has_req), pa.int64()),
                  "throttled": pc.cast(pc.greater(throttle, 0), pa.int64()), "throttle_ms": throttle})
    g = w.group_by(["client_id", "client_ip"]).aggregate([
        ("api_key", "count"), ("request_size", "sum"), ("failed", "sum"), ("throttled", "sum"),
        ("throttle_ms", "max")])
    rows = [{"client_id": r["client_id"], "client_ip": r["client_ip"], "requests": r["api_key_count"],
             "request_bytes": r["request_size_sum"] or 0, "failures": r["failed_sum"] or 0,
             "throttled": r["throttled_sum"] or 0, "max_throttle_ms": r["throttle_ms_max"] or 0}
            for r in g.to_pylist()]
    rows.sort(key=lambda r: (-r["requests"], r["client_id"] or "", r["client_ip"] or ""))
    return rows[:top] if top else rows


def _clients(console: Console, ex: pa.Table, top: int = 10) -> None:
    rows = client_rows(ex, top)
    if not rows:
        return
    columns = (Col("client_id"), Col("address"), Col("requests", "right"), Col("request bytes", "right", priority=2),
               Col("failures", "right"), Col("throttled", "right", priority=1),
               Col("max throttle ms", "right", priority=1))
    print_table(console, f"Top clients (by requests, top {top})", columns, [
        (inert_text(row["client_id"], missing="(null)"), inert_text(row["client_ip"]), f"{row['requests']:,}",
         f"{row['request_bytes']:,}", str(row["failures"] or ""), str(row["throttled"] or ""),
         str(row["max_throttle_ms"] or "")) for row in rows])


def unnamed_topic_ids(ex: pa.Table, parts: pa.Table | None = None) -> list[str]:
    """The topic ids no response of the run named (analyzer.pipeline.topic_ids): UUID-form entries of the
    exchanges' topics, and partition rows whose topic is still their topic_id."""
    from analyzer.pipeline.topic_ids import UUID_FORM

    found: set[str] = set()
    if ex.num_rows and "topics" in ex.column_names:
        values = pc.list_flatten(ex["topics"])
        found.update(values.filter(pc.fill_null(pc.match_substring_regex(values, UUID_FORM), False)).to_pylist())
    if parts is not None and parts.num_rows and "topic_id" in parts.column_names:
        same = pc.fill_null(pc.equal(parts["topic"], parts["topic_id"]), False)
        found.update(parts["topic_id"].filter(same).to_pylist())
    return sorted(found)


def anomaly_counts(conns: pa.Table, ex: pa.Table, parts: pa.Table | None = None) -> list[tuple[str, str, int]]:
    """(key, label, count) of everything unusual about the connections and their exchanges."""
    def total(col: str) -> int:
        return (pc.sum(conns[col]).as_py() or 0) if conns.num_rows else 0

    statuses = {r["values"]: r["counts"] for r in pc.value_counts(ex["status"]).to_pylist()} if ex.num_rows else {}
    tls = (pc.sum(pc.cast(conns["tls"], pa.int64())).as_py() or 0) if conns.num_rows else 0
    decrypted = (pc.sum(pc.cast(pc.fill_null(conns["tls_decrypted"], False), pa.int64())).as_py() or 0
                 if conns.num_rows and "tls_decrypted" in conns.column_names else 0)
    return [
        ("no_response", "requests without response", statuses.get("no_response", 0)),
        ("acks0", "acks=0 produce requests", statuses.get("acks0", 0)),
        ("orphan_response", "responses without request", statuses.get("orphan_response", 0)),
        ("malformed", "malformed frames", statuses.get("malformed", 0)),
        ("retransmissions", "retransmitted segments", total("retransmissions")),
        ("out_of_order", "out-of-order segments", total("out_of_order")),
        ("gap_bytes", "bytes lost in capture gaps", total("gap_bytes")),
        ("resyncs", "framing resyncs", total("resyncs")),
        ("skipped_bytes", "bytes not placed in frames", total("skipped_bytes")),
        ("truncated_frames", "frames cut by the end", total("truncated_frames")),
        ("unnamed_topic_ids", "topic ids no response named (topic_id)", len(unnamed_topic_ids(ex, parts))),
        ("tls_connections", "TLS connections", tls),
        ("tls_decrypted", "TLS connections decrypted", decrypted),
    ]


def crc_failure_rows(parts: pa.Table | None) -> list[dict]:
    """Record batches failing their CRC, per API, topic and partition (most first)."""
    if parts is None or not parts.num_rows:
        return []
    failed = parts.filter(pc.fill_null(pc.greater(parts["crc_failures"], 0), False))
    if not failed.num_rows:
        return []
    per = failed.group_by(["api_name", "topic", "partition"]).aggregate([("crc_failures", "sum")]).to_pylist()
    per.sort(key=lambda r: (-r["crc_failures_sum"], r["api_name"] or "", r["topic"] or "", r["partition"] or 0))
    return [{"api_name": r["api_name"], "topic": r["topic"], "partition": r["partition"],
             "batches": r["crc_failures_sum"]} for r in per]


SUMMARY_FORMAT = 2  # the version of summary_document's structure; raised when a key changes meaning or goes


def summary_document(exchanges: pa.Table, connections: pa.Table, reports: list[FileReport],
                     partitions: pa.Table | None = None, groups: pa.Table | None = None,
                     deliveries: pa.Table | None = None, *, headers_only: bool = False,
                     verify_crc: bool = False, cluster: pa.Table | None = None,
                     transactions: pa.Table | None = None, share_consumption: pa.Table | None = None) -> dict:
    """What the summary shows, as one JSON-ready structure (``kafkacap summary --json``, documented in
    docs/summary-json.md): the same figures as the terminal, every row in full (no top-N cut but ``slowest``)."""
    span = capture_span(exchanges, reports_span(reports))
    files = []
    for r in reports:
        status, message = file_status(r)
        s = r.stats
        files.append({"file": r.name, "format": s.format if s else None, "compression": s.compression if s else None,
                      "packets": s.packets if s else None, "connections": r.connections, "exchanges": r.exchanges,
                      "analysis_seconds": round(r.seconds, 3), "status": status, "message": message})
    ended = ({r["values"]: r["counts"] for r in pc.value_counts(connections["ended"]).to_pylist()}
             if connections.num_rows else {})
    return {
        "format": SUMMARY_FORMAT,
        "headers_only": headers_only,
        "crc_checked": verify_crc and not headers_only,
        "files": files,
        "connection_failures": problem_rows(connections),
        "ports": {"kafka_found": [{"port": port, "reason": reason, "frame": frame, "file": name}
                                  for port, (reason, frame, name) in found_ports(reports).items()],
                  "tcp_not_decoded": [{"port": port, "connections": flows, "tls_connections": tls}
                                      for port, flows, tls in ports_not_decoded(reports)]},
        "capture": span,
        "apis": api_rows(exchanges, span["seconds"]),
        "slowest_service": slowest(exchanges),
        "errors": error_rows(exchanges),
        "brokers": broker_rows(exchanges),
        "triage": triage_rows(exchanges, connections),
        "lag": lag_rows(partitions, exchanges),
        "cluster": cluster_rows(cluster),
        "clients": client_rows(exchanges, None),
        "topics": topic_rows(partitions) if partitions is not None and partitions.num_rows else [],
        "replication": (replication_rows(partitions, span["seconds"])
                        if partitions is not None and partitions.num_rows else []),
        "groups": group_rows(groups) if groups is not None and groups.num_rows else [],
        "share_groups": (share_rows(share_consumption)
                         if share_consumption is not None and share_consumption.num_rows else []),
        "transactions": (transaction_rows(transactions, span["seconds"])
                         if transactions is not None and transactions.num_rows else []),
        "deliveries": None if deliveries is None else delivery_rows(deliveries) if deliveries.num_rows else [],
        "connections": {"count": connections.num_rows, "ended": dict(sorted(ended.items())),
                        **{key: value for key, _, value in anomaly_counts(connections, exchanges, partitions)}},
        "crc_failures": crc_failure_rows(partitions) if verify_crc and not headers_only else None,
        "hints": hints(exchanges, connections, reports) if exchanges.num_rows == 0 else [],
        "notes": [HEADERS_ONLY_NOTE] if headers_only else [],
    }


def _connections(console: Console, conns: pa.Table, ex: pa.Table, parts: pa.Table | None,
                 crc_unchecked: str | None) -> None:
    if conns.num_rows == 0:
        return
    ended = {r["values"]: r["counts"] for r in pc.value_counts(conns["ended"]).to_pylist()}
    t = Table(title="Connections and anomalies", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right", overflow="fold")
    t.add_row("Kafka connections", f"{conns.num_rows:,}")
    t.add_row("ended by", ", ".join(f"{k} {v:,}" for k, v in sorted(ended.items())))
    t.add_row("with handshake in capture", f"{pc.sum(pc.cast(conns['syn_seen'], pa.int64())).as_py():,}")
    rtt = pc.drop_null(conns["handshake_rtt_ms"])
    if len(rtt):
        t.add_row("handshake RTT p50 / max (ms)",
                  f"{_fmt_ms(pc.approximate_median(rtt).as_py())} / {_fmt_ms(pc.max(rtt).as_py())}")
    for key, label, value in anomaly_counts(conns, ex, parts):
        if key in ("tls_connections", "tls_decrypted"):  # said in detail below
            continue
        style = "yellow" if value else "dim"
        t.add_row(label, f"[{style}]{value:,}[/]")
    _tls_rows(t, conns)
    _crc_failures(t, parts, crc_unchecked)
    console.print(t)


def _tls_rows(t: Table, conns: pa.Table) -> None:
    """TLS connections: how many were decrypted, and for the others why not (each reason with its count)."""
    tls = pc.fill_null(conns["tls"], False)
    decrypted = pc.fill_null(conns["tls_decrypted"], False) if "tls_decrypted" in conns.column_names else None
    n_tls = pc.sum(pc.cast(tls, pa.int64())).as_py() or 0
    n_dec = pc.sum(pc.cast(pc.and_(tls, decrypted), pa.int64())).as_py() or 0 if decrypted is not None else 0
    if n_tls:
        t.add_row("TLS connections decrypted", f"[dim]{n_dec:,}[/]" if not n_dec else f"{n_dec:,}")
    t.add_row("TLS connections (not decoded)", f"[{'yellow' if n_tls - n_dec else 'dim'}]{n_tls - n_dec:,}[/]")
    if decrypted is None or n_tls == n_dec:
        return
    undecoded = conns.filter(pc.and_(tls, pc.invert(decrypted)))
    notes = pc.fill_null(undecoded["tls_note"], "not decrypted")
    for item in sorted(pc.value_counts(notes).to_pylist(), key=lambda r: -r["counts"]):
        t.add_row(Text(f"  {item['values']}"), Text(f"{item['counts']:,}", style="yellow"))


def _crc_failures(t: Table, parts: pa.Table | None, unchecked: str | None, top: int = 10) -> None:
    """Record batches whose CRC did not match, and where (the partitions table counts them per partition);
    ``unchecked`` says why CRCs were not checked, when they were not."""
    if unchecked is not None:
        t.add_row("record batches failing their CRC", Text(unchecked, style="dim"))
        return
    per = crc_failure_rows(parts)
    if not per:
        t.add_row("record batches failing their CRC", Text("0", style="dim"))
        return
    t.add_row("record batches failing their CRC",
              Text(f"{sum(r['batches'] for r in per):,}", style="yellow"))
    where = Text(", ".join(
        f"{inert(r['api_name'] or '?')} {inert(r['topic']) if r['topic'] is not None else '(unknown topic)'}"
        f"[{'?' if r['partition'] is None else r['partition']}]: {r['batches']:,}" for r in per[:top]))
    if len(per) > top:
        where.append(f", and {len(per) - top:,} more partitions (see the partitions table)")
    t.add_row(Text("  in (API topic[partition]: batches)"), where)


def print_exchanges(console: Console, ex: pa.Table, limit: int | None) -> None:
    """One line per exchange; the columns that hold free text (client id, topics) give way first when the
    terminal is narrow, and every line names the packets to open in Wireshark."""
    t = Table(title=f"Exchanges ({ex.num_rows:,})", title_justify="left")
    for col, just, width in (("request time (UTC)", "left", None), ("client", "left", None),
                             ("client_id", "left", 24), ("broker", "left", None), ("api", "left", None),
                             ("corr", "right", None), ("latency ms", "right", None), ("status", "left", None),
                             ("topics", "left", 30), ("packets", "left", None)):
        t.add_column(col, justify=just, max_width=width, no_wrap=True, overflow="ellipsis")
    rows = ex.slice(0, limit).to_pylist() if limit else ex.to_pylist()
    for r in rows:
        ts = r["request_last_ts"] or r["response_last_ts"]
        api = f"{r['api_name']} v{r['api_version']}" if r["api_name"] else (
            f"key {r['api_key']}" if r["api_key"] is not None else "-")
        status = r["status"]
        style = {"ok": "green", "error": "red", "malformed": "red"}.get(status, "yellow")
        shown = r["error_name"] if status == "error" and r["error_name"] else status
        topics = r["topics"]
        frames = "-".join(str(f) for f in (r["request_frame"], r["response_frame"]) if f is not None)
        t.add_row(ts.strftime("%Y-%m-%d %H:%M:%S.%f") if ts else "-",
                  inert_text(address(r["client_ip"], r["client_port"])), inert_text(r["client_id"], missing="(null)"),
                  inert_text(address(r["broker_ip"], r["broker_port"])), inert_text(api),
                  "-" if r["correlation_id"] is None else str(r["correlation_id"]), _fmt_ms(r["latency_ms"]),
                  Text(inert(shown), style=style),
                  inert_text(None if topics is None else ", ".join(topics), missing=""), frames or "-")
    console.print(t)
    if limit and ex.num_rows > limit:
        console.print(f"[dim]{ex.num_rows - limit:,} more rows; use --limit 0 for all, or --json[/]")
