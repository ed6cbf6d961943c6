"""One Kafka TCP connection: two half-streams, their framers, the exchange matcher and the per-connection
counters that become a row of the ``connections`` table. Pure: packets' fields in, rows out.
"""

from __future__ import annotations

import re
import struct

from analyzer.session.matching import ExchangeMatcher, Outputs
from analyzer.session.sasl import SaslWatch
from analyzer.tables.schemas import CONNECTION_ROW_FIELDS
from analyzer.tcp.keys import address_text, endpoint_text, reverse_key, split_key
from analyzer.tcp.reassembly import HalfStream
from analyzer.tls.layer import StreamStart, TlsDirection, TlsSession
from dissectors.kafka.framing import FIND_SPAN, FrameSplitter
from dissectors.kafka.headers import looks_like_request

NO_SASL = (None, None, None)  # mechanism, principal, outcome of a connection that did not authenticate

# A request starts with a size below 16 MiB, an api key below 128 and a version below 64: a cheap C-speed
# filter in front of the full plausibility check while resynchronising.
_REQUEST_CANDIDATE = re.compile(rb"\x00[\x00-\xff]{3}\x00[\x00-\x7f]\x00[\x00-\x3f]", re.DOTALL)


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
CORRELATION_WINDOW = 1 << 20  # how far past the last seen correlation id a client may have gone


def find_request(buf, start: int, end: int) -> int:
    m = _REQUEST_CANDIDATE.search(buf, start, end)
    return m.start() if m else -1


# The request stream's finder and validator after a loss, called with the connection's matcher first (the
# framer's ``owner``). A client keeps its client_id and counts its correlation ids up; so after a loss the
# next request carries the same client_id bytes (a selective anchor for a C-speed search) and an id a little
# above the last one. Request-shaped bytes inside record data rarely pass both.


def find_request_of(m: ExchangeMatcher, buf, start: int, end: int) -> int:
    anchor = m.client_id_bytes
    if anchor:
        data = buf if isinstance(buf, bytes) else bytes(buf)
        # The anchor's first bytes only: a finder must recognise a candidate within FIND_SPAN bytes (the
        # validator compares the whole client_id).
        at = data.find(_INT16.pack(len(anchor)) + anchor[:FIND_SPAN - 14], start + 12, end)
        return at - 12 if at >= 0 else -1
    return find_request(buf, start, end)


def request_plausible_for(m: ExchangeMatcher, buf, off: int, end: int, size: int, fresh: bool) -> bool:
    if not looks_like_request(buf, off, end, size):
        return False
    if m.last_request_corr is None:
        return True
    corr = _INT32.unpack_from(buf, off + 4)[0]
    if not 0 <= (corr - m.last_request_corr) & 0xFFFFFFFF < CORRELATION_WINDOW:
        return False
    anchor = m.client_id_bytes
    if anchor is not None:
        length = _INT16.unpack_from(buf, off + 8)[0]
        return length == len(anchor) and buf[off + 10:off + 10 + length] == anchor
    return True


class Connection:
    """State of one client-broker connection. ``to_broker``/``to_client`` are its half-streams."""

    __slots__ = ("conn_id", "client_key", "broker_key", "client_ip", "client_port", "broker_ip", "broker_port",
                 "first_ts", "to_broker", "to_client", "requests", "responses", "matcher", "ended", "syn_ts",
                 "handshake_ts", "closing_ts", "tls", "sasl")

    def __init__(self, conn_id: int, client_key: bytes, ts: int, out: Outputs, keep: int,
                 max_frame: int) -> None:
        src, dst, sport, dport = split_key(client_key)
        self.conn_id = conn_id
        self.client_key = client_key
        self.broker_key = reverse_key(client_key)
        self.client_ip = endpoint_text(src)
        self.client_port = sport
        self.broker_ip = address_text(dst)
        self.broker_port = dport
        self.first_ts = ts
        self.matcher = m = ExchangeMatcher(
            out, (conn_id, self.client_ip, self.client_port, self.broker_ip, self.broker_port))
        # Made at the first SASL request (the matcher's request handler asks for it: watch_sasl): most connections
        # never authenticate in the capture, and an idle connection's every byte counts.
        self.sasl: SaslWatch | None = None
        # The matcher takes the framers' frames in C (a FrameSink); as their owner it also answers their validity
        # and search callbacks, shared functions rather than bound methods per stream.
        self.requests = FrameSplitter(None, request_plausible_for, find_request_of, keep, max_frame, m,
                                      frames=m, responses=False)
        self.responses = FrameSplitter(None, ExchangeMatcher.response_plausible, ExchangeMatcher.find_response,
                                       keep, max_frame, m, frames=m, responses=True)
        m.connection = self
        self.to_broker = b = HalfStream(self.requests)
        self.to_client = c = HalfStream(self.responses)
        # Each direction's first bytes say whether it is TLS (analyzer.tls), and the sink is chosen then.
        self.tls: TlsSession | None = None
        b.sink = StreamStart(self, True, self.requests)
        c.sink = StreamStart(self, False, self.responses)
        b.peer, c.peer = c, b
        b.conn = c.conn = self
        self.ended: str | None = None
        self.syn_ts = -1
        self.handshake_ts = -1
        self.closing_ts = -1

    def watch_sasl(self) -> SaslWatch:
        """The SASL watch, made at the connection's first SaslHandshake or SaslAuthenticate request."""
        self.sasl = sasl = SaslWatch(self.matcher)
        sasl.framer = self.responses
        return sasl

    def start_stream(self, to_broker: bool, tls: bool):
        """The sink of a direction whose first bytes were just seen: its framer, or a TLS layer in front of it."""
        half, framer = (self.to_broker, self.requests) if to_broker else (self.to_client, self.responses)
        if tls:
            if self.tls is None:
                self.tls = TlsSession(self.matcher.out)
            half.sink = TlsDirection(self.tls, to_broker, framer)
        else:
            half.sink = framer
        return half.sink

    def speaks_07(self) -> None:
        """Kafka 0.7: a response may be a bare 2-byte error code."""
        self.responses.set_min_frame(2)

    def can_hand_over(self, boundary: int) -> bool:
        """Whether a reader starting afresh after packet ``boundary`` (the next file of a rotated set) now
        sees what we see: every request sent before it has been answered (or settled), and no frame is half
        read nor any segment held out of order. Requests sent after it are the fresh reader's too."""
        if self.syn_ts >= 0 and self.handshake_ts < 0:  # the handshake's last ACK is still to come
            return False
        m = self.matcher
        if any(req.first_no <= boundary for req in m.in_flight()):
            return False
        if m.legacy is not None and any(req.first_no <= boundary for req in m.legacy.pending):
            return False
        for half in (self.to_broker, self.to_client):
            if half.holding:
                return False
            s = half.sink
            if not (s.opaque() or s.at_boundary()):
                return False
        return True

    def hand_over(self) -> None:
        """Forget the requests still in flight: the next file's analysis has them and reports their fate."""
        self.matcher.forget_in_flight()

    def close(self, ts: int, how: str, note: str | None = None) -> None:
        """Deliver what is buffered and settle requests in flight (again, if late packets brought more);
        ``note`` says why on the rows of requests that were never answered."""
        if self.ended is None:
            self.ended = how
            self.closing_ts = ts
        self.to_broker.flush(ts)
        self.to_client.flush(ts)
        self.to_broker.sink.finish(ts)
        self.to_client.sink.finish(ts)
        self.matcher.close("capture ended" if how == "capture_end" else note)

    def release(self) -> None:
        """Break the reference cycles (half-streams with each other and with the connection, the matcher with
        the connection) once the flow table lets the connection go: its memory is then freed at once, not at
        the cyclic collector's next full pass, which an analysis makes rare (analyzer.pipeline.collector) while
        connections come and go by the hundred thousand."""
        b, c = self.to_broker, self.to_client
        b.peer = c.peer = b.conn = c.conn = None
        b.sink = self.requests  # a direction that never carried a byte still holds its StreamStart
        c.sink = self.responses
        self.matcher.connection = None

    def row(self) -> tuple:
        """The connections-table row (CONNECTION_ROW_FIELDS order)."""
        b, c, m, tls, rq, rs = self.to_broker, self.to_client, self.matcher, self.tls, self.requests, self.responses
        rtt = (self.handshake_ts - self.syn_ts) / 1e6 if self.syn_ts >= 0 and self.handshake_ts >= 0 else None
        mechanism, principal, outcome = self.sasl.row() if self.sasl is not None else NO_SASL
        values = {}
        if tls is not None:
            values = {"tls_version": tls.version_text, "tls_cipher": tls.cipher_text, "tls_sni": tls.sni,
                      "tls_decrypted": tls.decrypted, "tls_note": tls.why_not, "tls_record_bytes": tls.skipped_bytes(),
                      "tls_alerts": tls.alerts_text}
        return _row_of(
            connection_id=self.conn_id, client_ip=self.client_ip, client_port=self.client_port,
            broker_ip=self.broker_ip, broker_port=self.broker_port, first_ts=self.first_ts,
            last_ts=max(b.last_ts, c.last_ts, self.first_ts), packets_to_broker=b.packets, packets_to_client=c.packets,
            bytes_to_broker=b.wire_bytes, bytes_to_client=c.wire_bytes,
            retransmissions=b.retransmitted + c.retransmitted, out_of_order=b.out_of_order + c.out_of_order,
            gap_bytes=b.gap_bytes + c.gap_bytes, gaps=b.gaps + c.gaps,
            stream_bytes=b.payload_bytes + b.gap_bytes + c.payload_bytes + c.gap_bytes, handshake_rtt_ms=rtt,
            syn_seen=self.syn_ts >= 0, requests=rq.frames, responses=rs.frames, unanswered=m.unanswered,
            orphan_responses=m.orphans, malformed=m.malformed, resyncs=rq.resyncs + rs.resyncs,
            framed_bytes=rq.framed_bytes + rs.framed_bytes, skipped_bytes=rq.skipped_bytes + rs.skipped_bytes,
            truncated_frames=rq.truncated_frames + rs.truncated_frames,
            client_ids=",".join(sorted(c for c in m.client_ids if c is not None)) or None,
            tls=tls is not None or rq.tls or rs.tls, sasl_mechanism=mechanism, sasl_principal=principal,
            sasl_outcome=outcome, ended=self.ended, **values)


class KafkaConnections:
    """The flow table's connection factory (``FlowTable(connections=...)``): each flow the table takes becomes a
    Kafka connection writing its rows into ``out``, its frames kept up to ``keep`` bytes and ``max_frame`` long."""

    __slots__ = ("out", "keep", "max_frame")

    def __init__(self, out: Outputs, keep: int, max_frame: int) -> None:
        self.out = out
        self.keep = keep
        self.max_frame = max_frame

    def __call__(self, conn_id: int, client_key: bytes, ts: int) -> Connection:
        return Connection(conn_id, client_key, ts, self.out, self.keep, self.max_frame)

    @staticmethod
    def syn_only_row(conn_id: int, client_key: bytes, first_ts: int, last_ts: int, packets: int,
                     ended: str) -> tuple:
        """The row of a client's SYN that nothing followed, made without a connection (some 40 us each, which a
        flood multiplies): what ``Connection.row`` gives for one."""
        src, dst, sport, dport = split_key(client_key)
        return _row_of(connection_id=conn_id, client_ip=address_text(src), client_port=sport,
                       broker_ip=address_text(dst), broker_port=dport, first_ts=first_ts, last_ts=last_ts,
                       packets_to_broker=packets, syn_seen=True, tls=False, ended=ended)


# A connection row's values before anything is counted: zero counters, the rest null.
_COUNTERS = ("packets_to_broker", "packets_to_client", "bytes_to_broker", "bytes_to_client", "retransmissions",
             "out_of_order", "gap_bytes", "gaps", "stream_bytes", "requests", "responses", "unanswered",
             "orphan_responses", "malformed", "resyncs", "framed_bytes", "skipped_bytes", "truncated_frames")
_EMPTY_ROW = {name: 0 if name in _COUNTERS else None for name in CONNECTION_ROW_FIELDS}


def _row_of(**values) -> tuple:
    """A connections row (CONNECTION_ROW_FIELDS order) from the values given by field name, the rest empty."""
    unknown = values.keys() - _EMPTY_ROW.keys()
    if unknown:
        raise KeyError(f"not connections columns: {sorted(unknown)}")
    row = dict(_EMPTY_ROW)
    row.update(values)
    return tuple(row.values())
