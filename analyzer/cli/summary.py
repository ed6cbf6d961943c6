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

from analyzer.cli.terminal import inert, inert_text
from analyzer.pipeline.analyze import FileReport
from analyzer.pipeline.run import file_status
from dissectors.kafka.errors import is_retriable

PERCENTILES = (0.5, 0.95, 0.99)


class Collector:
    """A sink that keeps every batch in memory, for the summary and the listing."""

    def __init__(self) -> None:
        self.batches: dict[str, list[pa.RecordBatch]] = {}

    def __call__(self, table: str, batch: pa.RecordBatch) -> None:
        self.batches.setdefault(table, []).append(batch)

    def table(self, name: str, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_batches(self.batches.get(name, []), schema=schema)


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def print_summary(console: Console, exchanges: pa.Table, connections: pa.Table,
                  reports: list[FileReport], partitions: pa.Table | None = None, *, headers_only: bool = False,
                  verify_crc: bool = False) -> None:
    """The summary; ``headers_only`` and ``verify_crc`` are the run's options, which decide what the
    figures can and cannot include (the summary says so)."""
    _files(console, reports)
    if exchanges.num_rows == 0:
        console.print("[yellow]No Kafka exchanges found.[/] Kafka on another port? Try --port or --detect-ports.")
    else:
        _api_usage(console, exchanges)
        _errors(console, exchanges)
        _clients(console, exchanges)
        if partitions is not None and partitions.num_rows:
            _topics(console, partitions)
    crc = "not checked (--headers-only decodes no record batch)" if headers_only else (
        None if verify_crc else "not checked (--verify-crc)")
    _connections(console, connections, exchanges, partitions, crc)
    if headers_only:
        console.print(HEADERS_ONLY_NOTE, style="yellow", markup=False)


HEADERS_ONLY_NOTE = (
    "Headers only (--headers-only): request and response bodies were not decoded, so there are no topics or "
    "partitions, and the errors counted are only those a response carries at its top level. Errors reported "
    "per topic or per partition (Produce, Fetch, ListOffsets, OffsetCommit, CreateTopics, ...) were not seen. "
    "Run without --headers-only for them."
)


def _topics(console: Console, parts: pa.Table, top: int = 15) -> None:
    """Who sends what where: records and bytes produced and fetched per topic, codecs, producers, lag."""
    parts = parts.filter(pc.is_valid(parts["records"]))
    if not parts.num_rows:
        return
    produce = parts.filter(pc.equal(parts["api_key"], 0))
    fetch = parts.filter(pc.equal(parts["api_key"], 1))
    rows: dict[str, dict] = {}
    if produce.num_rows:
        for r in produce.group_by("topic").aggregate([
            ("records", "sum"), ("request_record_bytes", "sum"), ("client_id", "count_distinct"),
            ("codec", "distinct"),
        ]).to_pylist():
            rows.setdefault(r["topic"], {}).update(
                produced=r["records_sum"], produced_bytes=r["request_record_bytes_sum"],
                producers=r["client_id_count_distinct"], codecs=",".join(sorted(c for c in r["codec_distinct"] if c)))
    if fetch.num_rows:
        for r in fetch.group_by("topic").aggregate([
            ("records", "sum"), ("response_record_bytes", "sum"), ("consumer_lag", "max"),
        ]).to_pylist():
            rows.setdefault(r["topic"], {}).update(
                fetched=r["records_sum"], fetched_bytes=r["response_record_bytes_sum"], lag=r["consumer_lag_max"])
    t = Table(title=f"Topics (by records produced, top {top})", title_justify="left")
    for col in ("topic", "produced", "bytes in", "producers", "codecs", "fetched", "bytes out", "max lag"):
        t.add_column(col, justify="left" if col in ("topic", "codecs") else "right")

    def num(v) -> str:
        return "-" if v is None else f"{v:,}"

    for topic, r in sorted(rows.items(), key=lambda kv: (-(kv[1].get("produced") or 0), -(kv[1].get("fetched")
                                                                                              or 0)))[:top]:
        t.add_row(inert_text(topic), num(r.get("produced")), num(r.get("produced_bytes")), num(r.get("producers")),
                  inert_text(r.get("codecs") or None), num(r.get("fetched")), num(r.get("fetched_bytes")),
                  num(r.get("lag")))
    console.print(t)


def _files(console: Console, reports: list[FileReport]) -> None:
    t = Table(title="Capture files", title_justify="left")
    for col, just in (("file", "left"), ("format", "left"), ("packets", "right"), ("connections", "right"),
                      ("exchanges", "right"), ("seconds", "right"), ("status", "left")):
        t.add_column(col, justify=just)
    for r in reports:
        status, message = file_status(r)
        style = {"ok": "green", "damaged": "yellow"}.get(status, "red")
        s = r.stats
        fmt = f"{s.format}{'+' + s.compression if s.compression else ''}" if s else "-"
        shown = Text(status, style=style)
        if message:
            shown.append(": " + inert(message))
        t.add_row(inert_text(r.name), fmt, f"{s.packets:,}" if s else "-", f"{r.connections:,}",
                  f"{r.exchanges:,}", f"{r.seconds:.2f}", shown)
    console.print(t)


def _api_usage(console: Console, ex: pa.Table) -> None:
    answered = ex.filter(pc.is_valid(ex["latency_ms"]))
    lat = {}
    if answered.num_rows:
        g = answered.group_by(["api_name", "api_version"]).aggregate([
            ("latency_ms", "tdigest", pc.TDigestOptions(q=list(PERCENTILES))),
            ("latency_ms", "max"),
        ])
        for row in g.to_pylist():
            lat[(row["api_name"], row["api_version"])] = (row["latency_ms_tdigest"], row["latency_ms_max"])
    counts = ex.group_by(["api_name", "api_version", "status"]).aggregate([("status", "count")]).to_pylist()
    per: dict[tuple, dict[str, int]] = {}
    for row in counts:
        per.setdefault((row["api_name"], row["api_version"]), {})[row["status"]] = row["status_count"]
    t = Table(title="Requests by API and version (latency in ms)", title_justify="left")
    for col in ("api", "version", "requests", "errors", "no response", "p50", "p95", "p99", "max"):
        t.add_column(col, justify="left" if col == "api" else "right")

    def order(k: tuple) -> tuple:
        return (-sum(per[k].values()), k[0] or "~", k[1] if k[1] is not None else -1)

    for key in sorted(per, key=order):
        st = per[key]
        name, ver = key
        q, mx = lat.get(key, ([None] * len(PERCENTILES), None))
        t.add_row(inert_text(name, missing="(response without request)"), "-" if ver is None else str(ver),
                  f"{sum(st.values()):,}", str(st.get("error", 0) or ""), str(st.get("no_response", 0) or ""),
                  *(_fmt_ms(v) for v in q), _fmt_ms(mx))
    console.print(t)


def _errors(console: Console, ex: pa.Table) -> None:
    errs = ex.filter(pc.fill_null(pc.not_equal(ex["error_code"], 0), False))
    if not errs.num_rows:
        return
    g = errs.group_by(["error_name", "error_code", "api_name"]).aggregate([("error_code", "count")])
    t = Table(title="Errors", title_justify="left")
    for col in ("error", "code", "retriable", "api", "count"):
        t.add_column(col, justify="right" if col in ("code", "count") else "left")
    for row in sorted(g.to_pylist(), key=lambda r: -r["error_code_count"]):
        retriable = is_retriable(row["error_code"])
        t.add_row(inert_text(row["error_name"]), str(row["error_code"]),
                  {True: "yes", False: "no"}.get(retriable, "?"), inert_text(row["api_name"]),
                  f"{row['error_code_count']:,}")
    console.print(t)


def _clients(console: Console, ex: pa.Table, top: int = 10) -> None:
    has_req = ex.filter(pc.is_valid(ex["api_key"]))
    if not has_req.num_rows:
        return
    err = pc.fill_null(pc.not_equal(has_req["error_code"], 0), False)
    has_req = has_req.append_column("is_error", pc.cast(err, pa.int64()))
    g = has_req.group_by(["client_id", "client_ip"]).aggregate([
        ("api_key", "count"), ("request_size", "sum"), ("is_error", "sum"),
    ])
    t = Table(title=f"Top clients (by requests, top {top})", title_justify="left")
    for col in ("client_id", "address", "requests", "request bytes", "errors"):
        t.add_column(col, justify="left" if col in ("client_id", "address") else "right")
    for row in sorted(g.to_pylist(), key=lambda r: -r["api_key_count"])[:top]:
        t.add_row(inert_text(row["client_id"], missing="(null)"), inert_text(row["client_ip"]),
                  f"{row['api_key_count']:,}", f"{row['request_size_sum'] or 0:,}", str(row["is_error_sum"] or ""))
    console.print(t)


def _connections(console: Console, conns: pa.Table, ex: pa.Table, parts: pa.Table | None,
                 crc_unchecked: str | None) -> None:
    if conns.num_rows == 0:
        return

    def total(col: str) -> int:
        return pc.sum(conns[col]).as_py() or 0

    ended = {r["values"]: r["counts"] for r in pc.value_counts(conns["ended"]).to_pylist()}
    t = Table(title="Connections and anomalies", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("Kafka connections", f"{conns.num_rows:,}")
    t.add_row("ended by", ", ".join(f"{k} {v:,}" for k, v in sorted(ended.items())))
    t.add_row("with handshake in capture", f"{pc.sum(pc.cast(conns['syn_seen'], pa.int64())).as_py():,}")
    rtt = pc.drop_null(conns["handshake_rtt_ms"])
    if len(rtt):
        t.add_row("handshake RTT p50 / max (ms)",
                  f"{_fmt_ms(pc.approximate_median(rtt).as_py())} / {_fmt_ms(pc.max(rtt).as_py())}")
    statuses = {r["values"]: r["counts"] for r in pc.value_counts(ex["status"]).to_pylist()} if ex.num_rows else {}
    for label, value in (
        ("requests without response", statuses.get("no_response", 0)),
        ("acks=0 produce requests", statuses.get("acks0", 0)),
        ("responses without request", statuses.get("orphan_response", 0)),
        ("malformed frames", statuses.get("malformed", 0)),
        ("retransmitted segments", total("retransmissions")),
        ("out-of-order segments", total("out_of_order")),
        ("bytes lost in capture gaps", total("gap_bytes")),
        ("framing resyncs", total("resyncs")),
        ("bytes not placed in frames", total("skipped_bytes")),
        ("frames cut by the end", total("truncated_frames")),
    ):
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
    failed = None
    if parts is not None and parts.num_rows:
        failed = parts.filter(pc.fill_null(pc.greater(parts["crc_failures"], 0), False))
    if failed is None or not failed.num_rows:
        t.add_row("record batches failing their CRC", Text("0", style="dim"))
        return
    per = failed.group_by(["api_name", "topic", "partition"]).aggregate([("crc_failures", "sum")]).to_pylist()
    per.sort(key=lambda r: (-r["crc_failures_sum"], r["api_name"] or "", r["topic"] or "", r["partition"] or 0))
    t.add_row("record batches failing their CRC",
              Text(f"{sum(r['crc_failures_sum'] for r in per):,}", style="yellow"))
    where = Text(", ".join(
        f"{inert(r['api_name'] or '?')} {inert(r['topic']) if r['topic'] is not None else '(unknown topic)'}"
        f"[{'?' if r['partition'] is None else r['partition']}]: {r['crc_failures_sum']:,}" for r in per[:top]))
    if len(per) > top:
        where.append(f", and {len(per) - top:,} more partitions (see the partitions table)")
    t.add_row(Text("  in (API topic[partition]: batches)"), where)


def print_exchanges(console: Console, ex: pa.Table, limit: int | None) -> None:
    t = Table(title=f"Exchanges ({ex.num_rows:,})", title_justify="left")
    for col in ("request time (UTC)", "client", "client_id", "broker", "api", "corr", "latency ms", "status",
                "error"):
        t.add_column(col, justify="right" if col in ("corr", "latency ms") else "left")
    rows = ex.slice(0, limit).to_pylist() if limit else ex.to_pylist()
    for r in rows:
        ts = r["request_last_ts"] or r["response_last_ts"]
        api = f"{r['api_name']} v{r['api_version']}" if r["api_name"] else (
            f"key {r['api_key']}" if r["api_key"] is not None else "-")
        status = r["status"]
        style = {"ok": "green", "error": "red", "malformed": "red"}.get(status, "yellow")
        err = r["error_name"] if r["error_code"] else ""
        t.add_row(ts.strftime("%Y-%m-%d %H:%M:%S.%f") if ts else "-",
                  inert_text(f"{r['client_ip']}:{r['client_port']}"), inert_text(r["client_id"], missing="(null)"),
                  inert_text(f"{r['broker_ip']}:{r['broker_port']}"), inert_text(api),
                  str(r["correlation_id"]), _fmt_ms(r["latency_ms"]), Text(status, style=style), inert_text(err or ""))
    console.print(t)
    if limit and ex.num_rows > limit:
        console.print(f"[dim]{ex.num_rows - limit:,} more rows; use --limit 0 for all, or --json[/]")
