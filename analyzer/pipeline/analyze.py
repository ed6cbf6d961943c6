"""Run one capture file (or one shard of its connections) through the pipeline, handing out Arrow batches.

This is the edge between the pure core (flow table, reassembly, framing, matching) and the outside: it
opens the file, feeds packets in steps, drains finished rows into record batches for a sink, and reports
what happened to the file (read fully, damaged, unreadable) without ever raising on bad input.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, islice

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.capture.files import STDIN, Capture, CaptureError, CaptureStats, open_capture
from analyzer.pipeline.carry import Handoff, carried_connections, carry_over, continues
from analyzer.pipeline.collector import collector_tuned
from analyzer.pipeline.options import Options
from analyzer.session.connection import KafkaConnections
from analyzer.session.matching import Outputs
from analyzer.tables.schemas import (
    CONNECTION_ROW_FIELDS,
    cluster_batch,
    connections_batch,
    errors_batch,
    exchanges_batch,
    group_heartbeats_batch,
    partitions_batch,
    records_batch,
    share_ranges_batch,
    topic_text,
    transaction_steps_batch,
)
from analyzer.tcp.bulk import feed_chunk
from analyzer.tcp.flows import FlowTable
from analyzer.tls.keylog import KeyLog
from dissectors.kafka.detect import KafkaPortProbe
from dissectors.kafka.records import Limits

STEP_PACKETS = 1 << 16

BatchSink = Callable[[str, pa.RecordBatch], None]
"""sink(table_name, batch): receives every batch of every table as soon as it is built."""


@dataclass
class FileReport:
    """What became of one input file (or one shard of it)."""

    path: str
    name: str
    stats: CaptureStats | None = None
    exchanges: int = 0
    connections: int = 0
    flows_not_kafka: int = 0
    error: str | None = None  # the file could not be read at all
    seconds: float = 0.0
    shard: tuple[int, int] | None = None
    status_counts: dict[str, int] = field(default_factory=dict)
    refused_batches: int = 0  # compressed batches not expanded: over the decompression limits
    connections_evicted: int = 0  # connections dropped over the flow table's limit (analyzer.tcp.flows)
    requests_dropped: int = 0  # requests dropped from in-flight queues over their limit (analyzer.session.matching)
    kafka_packets: int = 0  # packets of the Kafka connections in its connection rows (TLS ones excluded)
    tls_packets: int = 0  # packets of its TLS connection rows
    # The Kafka (not TLS) connection rows' stream bytes, and how they divide: in frames, skipped, lost in gaps.
    stream_bytes: int = 0
    framed_bytes: int = 0
    stream_skipped_bytes: int = 0
    gap_bytes: int = 0
    continues_in: str | None = None  # name of the next file of its rotated set, when connections run on into it
    handoffs: list[Handoff] = field(default_factory=list)  # the connections that do
    topic_names: dict[bytes, str] = field(default_factory=dict)  # topic id -> name, from the responses it read
    # Port detection: port -> (why it was taken for Kafka, the packet that showed it).
    ports_found: dict[int, tuple[str, int]] = field(default_factory=dict)
    # TCP left aside: server port -> [flows, packets and payload bytes looked at, flows that began TLS].
    ports_not_decoded: dict[int, list[int]] = field(default_factory=dict)


def analyze_file(
    path: str,
    options: Options,
    sink: BatchSink,
    shard: tuple[int, int] | None = None,
    progress: Callable[[int], None] | None = None,
    tap: Callable | None = None,
    following: Sequence[str] = (),
    name_of: Callable[[str], str] = os.path.basename,
    balance_shards: bool = False,
    shard_weights: Sequence[float] = (),
    shard_sample: tuple | None = None,
) -> FileReport:
    """Analyse ``path``; ``progress(n)`` is called now and then with the file bytes read so far.

    ``following``: the next files of a rotated capture set. Connections open at the end of this file are
    followed into them until their exchanges in flight are complete (see ``analyzer.pipeline.carry``).
    ``name_of(path)``: the capture_file name of this file and the following ones (see ``capture_names`` for
    inputs from several folders).
    ``balance_shards``: split the connections by load instead of by hash (``analyzer.tcp.shards``; only for a
    file analysed on its own, not one of a rotated set); ``shard_weights``: each shard's share of the load,
    when not equal (the same in every process of the file); ``shard_sample``: the file's flow sample, when the
    caller took it already (``Capture.flow_sample``, the same in every process).
    """
    with collector_tuned():
        return _analyze_file(path, options, sink, shard, progress, tap, following, name_of, balance_shards,
                             shard_weights, shard_sample)


def _analyze_file(path, options: Options, sink: BatchSink, shard, progress, tap, following: Sequence[str],
                  name_of: Callable[[str], str], balance_shards: bool, shard_weights: Sequence[float],
                  shard_sample: tuple | None) -> FileReport:
    started = time.perf_counter()
    name = name_of(os.fspath(path))
    report = FileReport(path=os.fspath(path), name=name, shard=shard)
    try:
        cap = open_capture(path)
    except CaptureError as exc:
        report.error = str(exc)
        return report
    with cap:
        report.stats = cap.stats
        table = flow_table(options, shard, balance_shards)
        out = table.connections.out
        out.tap = tap
        cap.stats.on_tls_secrets = _file_secrets(out, options.tls_keys)
        if out.records is not None:  # a batch of millions of records reaches the sink in slices
            out.records.spill = lambda: _emit_records(out, name, sink)
            out.records.spill_at = options.batch_rows
        if table.shards is not None and table.shards.balance and options.bulk:
            if shard_weights:
                table.shards.weigh(list(shard_weights))
            sample = shard_sample if shard_sample is not None else cap.flow_sample()
            if sample is not None:
                table.shards.expect(*sample)
        step = _stepper(cap, table, options.bulk)
        rows = out.exchanges
        # Rows are drained after each step, and also as soon as a table fills up within one.
        out.drain_at(options.batch_rows, lambda: _emit_exchanges(table, name, sink, report))
        try:
            while True:
                more = step()
                out.cluster.settle()  # the next step's responses are all later than this one's
                if len(rows) >= options.batch_rows or len(out.partitions) >= options.batch_rows or (
                        out.records is not None and len(out.records) >= options.batch_rows):
                    _emit_exchanges(table, name, sink, report)
                table.retire_closed()
                if table.connection_rows:
                    _emit_connections(table, name, sink, report)
                if not more:
                    break
                if progress is not None:
                    progress(cap.bytes_read())
        except Exception as exc:  # a defect must not cost the user the rows decoded so far
            report.error = f"internal error after packet {table.last_frame}: {exc!r}"
        snapshots: dict[int, tuple] = {}
        if following and report.error is None and cap.stats.damage is None:
            table.settle_half_open()  # held SYNs become connections, to be followed into the next file too
            out.drain_at(None, None)  # following the connections reads the rows they add
            snapshots = _carry_into(following, table, cap.stats, report, name_of)
            out.drain_at(options.batch_rows, lambda: _emit_exchanges(table, name, sink, report))
        try:
            table.finish()
        except Exception as exc:
            report.error = report.error or f"internal error while closing connections: {exc!r}"
        if snapshots:  # connections that run on: this file's share of their counters, marked as continued
            table.connection_rows[:] = [_continued(r, snapshots[r[0]]) if r[0] in snapshots else r
                                        for r in table.connection_rows]
        _emit_exchanges(table, name, sink, report)
        _emit_cluster(table, name, sink)
        _emit_connections(table, name, sink, report)
        note_table(report, table)
        cap.stats.on_tls_secrets = None  # the stats travel back from worker processes: no closure in them
    report.seconds = time.perf_counter() - started
    return report


def note_table(report: FileReport, table: FlowTable) -> None:
    """Copy into ``report`` the flow table's counts the files table reports (what it refused, dropped, left
    aside, found), as they stand now: a live run writes its files row before its end."""
    report.flows_not_kafka = table.probed_out
    report.refused_batches = table.connections.out.limits.refused
    report.connections_evicted = table.evicted + table.probes_evicted
    report.requests_dropped = table.connections.out.requests_dropped
    report.topic_names = dict(table.connections.out.topic_names)
    report.ports_found = dict(table.ports_found)
    report.ports_not_decoded = {port: list(counts) for port, counts in table.ports_not_decoded.items()}


def _file_secrets(out: Outputs, run_keys: KeyLog | None) -> Callable[[bytes], None]:
    """Where a pcapng's Decryption Secrets Blocks go: this file's own key log (the run's, if any, plus the
    file's), made at the first block, in time for the connections whose handshakes follow it."""
    def add(text: bytes) -> None:
        if out.tls_keys is None or out.tls_keys is run_keys:
            out.tls_keys = run_keys.merged(None) if run_keys is not None else KeyLog()
        out.tls_keys.add(text)
    return add


def _stepper(cap: Capture, table: FlowTable, bulk: bool) -> Callable[[], bool]:
    """A function that feeds the table its next step of packets and says whether there may be more."""
    chunks = cap.chunks(table.ignored) if bulk else None
    if chunks is not None:
        def next_chunk() -> bool:
            chunk = next(chunks, None)
            if chunk is None:
                return False
            feed_chunk(table, chunk)
            return True
        return next_chunk
    skipped = [0, 0]
    packets = cap.packets(table.ignored, skipped)

    def next_packets() -> bool:
        before = table.last_frame
        table.feed(islice(packets, STEP_PACKETS))
        table.skipped_to(*skipped)
        return table.last_frame != before
    return next_packets


def capture_names(paths: Sequence[str]) -> dict[str, str]:
    """A distinct capture_file name per file: its base name, or, where several inputs share one (a folder
    per broker, each with its own capture.pcap), as many parent folders as tell them apart ("b1/capture.pcap").
    Every table keys its rows by capture_file, so two files must never share one. Standard input is "stdin"."""
    named = {p: "stdin" for p in paths if p == STDIN}
    paths = [p for p in paths if p != STDIN]
    full = {p: p.rstrip("/") if "://" in p else os.path.normpath(os.path.abspath(p)) for p in paths}
    parts = {p: full[p].replace(os.sep, "/").split("/") for p in paths}
    depth = dict.fromkeys(paths, 1)
    while True:
        groups: dict[str, set[str]] = {}
        for p in paths:
            groups.setdefault("/".join(parts[p][-depth[p]:]), set()).add(full[p])
        clashes = {name for name, same in groups.items() if len(same) > 1}
        if not clashes:
            break
        grown = False
        for p in paths:
            if "/".join(parts[p][-depth[p]:]) in clashes and depth[p] < len(parts[p]):
                depth[p] += 1
                grown = True
        if not grown:
            break
    return {**named, **{p: "/".join(parts[p][-depth[p]:]) for p in paths}}


def _carry_into(following: Sequence[str], table: FlowTable, stats: CaptureStats, report: FileReport,
                name_of: Callable[[str], str]) -> dict[int, tuple]:
    """Follow open connections into the next file(s); returns their connection rows as of this file's end
    (the next file's analysis counts its own packets of them; the stitch stage adds the two up)."""
    snapshots = {c.conn_id: c.row() for c in carried_connections(table, stats.last_ts_ns)}
    if not snapshots:
        return {}
    opened: list = []

    def files() -> Iterator:
        last_ts = stats.last_ts_ns
        for path in following:
            try:
                nxt = open_capture(path)
            except CaptureError:
                return
            opened.append(nxt)
            packets = nxt.packets()
            first = next(packets, None)
            if first is None or not continues(last_ts, first[1]):
                return
            yield name_of(path), chain((first,), packets), lambda cap=nxt: cap.stats.packets
            last_ts = nxt.stats.last_ts_ns

    try:
        report.handoffs = carry_over(table, files(), stats.packets, stats.last_ts_ns)
    except Exception as exc:  # the next file is analysed on its own too; never fail this one for it
        report.error = f"internal error while following connections into {following[0]}: {exc!r}"
        report.handoffs = []
    finally:
        for cap in opened:
            cap.close()
    if report.handoffs:  # names alike and times in sequence are not enough: a connection must run on
        report.continues_in = name_of(following[0])
    return {h.connection_id: snapshots[h.connection_id] for h in report.handoffs}


_TO_BROKER, _TO_CLIENT, _TLS, _STREAM, _FRAMED, _SKIPPED, _GAP, _DECRYPTED, _TLS_RECORD = (
    CONNECTION_ROW_FIELDS.index(f) for f in ("packets_to_broker", "packets_to_client", "tls", "stream_bytes",
                                             "framed_bytes", "skipped_bytes", "gap_bytes", "tls_decrypted",
                                             "tls_record_bytes"))
# last_ts .. stream_bytes in CONNECTION_ROW_FIELDS: what the next file counts again
_PACKET_COUNTERS = slice(CONNECTION_ROW_FIELDS.index("last_ts"), CONNECTION_ROW_FIELDS.index("stream_bytes") + 1)


def _continued(final: tuple, at_end: tuple) -> tuple:
    """The row of a connection that runs on into the next file: the packet counters as of this file's end
    (the next file's row counts the rest), the rest as read up to the hand-over, marked as continued."""
    row = list(final)
    row[_PACKET_COUNTERS] = at_end[_PACKET_COUNTERS]
    row[-1] = "continued"
    return tuple(row)


def _emit_exchanges(table: FlowTable, name: str, sink: BatchSink, report: FileReport) -> None:
    """Drain the exchange rows, and the error and partition rows that belong to them, into batches."""
    out = table.connections.out
    names = partial(topic_text, topic_names=out.topic_names)  # topic ids to text, at the end of the batch
    if out.exchanges:
        columns = out.exchanges.drain(names)
        columns["subscription"], columns["assignment"] = out.details.groups.drain(len(columns["api_key"]), names)
        batch = exchanges_batch(columns, name)
        report.exchanges += batch.num_rows
        counts = report.status_counts
        for item in pc.value_counts(batch.column("status")).to_pylist():
            counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
        sink("exchanges", batch)
    if out.errors:
        sink("errors", errors_batch(out.errors.drain(names), name))
    if out.partitions:
        sink("partitions", partitions_batch(out.partitions.drain(names), name))
    if out.details.heartbeats:
        sink("group_heartbeats", group_heartbeats_batch(out.details.heartbeats.drain(names), name))
    if out.details.shares:
        sink("share_ranges", share_ranges_batch(out.details.shares.drain(names), name))
    if out.details.transactions:
        sink("transaction_steps", transaction_steps_batch(out.details.transactions.drain(names), name))
    if out.records:
        _emit_records(out, name, sink)


def _emit_cluster(table: FlowTable, name: str, sink: BatchSink) -> None:
    """The file ended: the cluster rows go out (only now: responses reach them out of capture order)."""
    rows = table.connections.out.cluster.drain()
    if rows:
        sink("cluster", cluster_batch(rows, name))


def _emit_records(out: Outputs, name: str, sink: BatchSink) -> None:
    sink("records", records_batch(out.records, name, out.topic_names))
    out.records.clear()


def _emit_connections(table: FlowTable, name: str, sink: BatchSink, report: FileReport) -> None:
    rows = table.connection_rows
    if not rows:
        return
    for row in rows:
        if row[_TLS] and not row[_DECRYPTED]:  # TLS only counted
            report.tls_packets += row[_TO_BROKER] + row[_TO_CLIENT]
        else:
            report.kafka_packets += row[_TO_BROKER] + row[_TO_CLIENT]
            report.stream_bytes += row[_STREAM] - (row[_TLS_RECORD] or 0 if row[_TLS] else 0)
            report.framed_bytes += row[_FRAMED]
            report.stream_skipped_bytes += row[_SKIPPED]
            report.gap_bytes += row[_GAP]
    batch = connections_batch(rows, name)
    rows.clear()
    report.connections += batch.num_rows
    sink("connections", batch)


def flow_table(options: Options, shard: tuple[int, int] | None = None, balance_shards: bool = False,
               **limits: int) -> FlowTable:
    """A flow table whose connections are Kafka connections as ``options`` say, their rows gathered in
    ``table.connections.out``: for a file, or for a caller that feeds it packets itself (``kafkacap live``).
    ``limits``: the table's own (``max_connections``, ``max_probes``, ``max_half_open``, ``max_ignored``)."""
    out = Outputs(options.bodies, options.verify_crc, options.records and options.bodies,
                  Limits(options.max_batch_mb << 20, options.max_decompressed_mb << 20))
    out.tls_keys = options.tls_keys
    probe = KafkaPortProbe(options.max_frame, lambda: out.tls_keys) if options.detect_ports else None
    return FlowTable(KafkaConnections(out, options.frame_keep, options.max_frame), options.ports,
                     options.detect_ports, shard, balance_shards, probe=probe, **limits)


def drain(table: FlowTable, name: str, sink: BatchSink, report: FileReport, final: bool = False) -> None:
    """Hand every row the table holds to ``sink`` as batches now (exchanges and theirs, then connections);
    ``final``: the capture ended, so the cluster rows go too."""
    _emit_exchanges(table, name, sink, report)
    table.connections.out.cluster.settle()
    if final:
        _emit_cluster(table, name, sink)
    table.retire_closed()
    _emit_connections(table, name, sink, report)
