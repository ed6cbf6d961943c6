"""The flow table: routes each captured TCP packet to its connection's half-stream.

The table maps the capture key of each direction (src addr + dst addr + ports) straight to that
direction's ``HalfStream``, so the common packet costs one dict lookup and a few integer operations; every
other kind of entry (flows to ignore, flows being probed for Kafka, a handshake waiting for its last ACK)
is a small marker object handled off the fast path. Connections are created when a flow is first seen on
a Kafka port (or, with port detection, once a request-shaped frame is seen on it), replaced when a new SYN
reuses the same ports, and retired some time after they close so memory follows the open connections,
not the length of the capture.

Hostile or broken traffic can open connections without end (a SYN flood, a scan, a capture that misses every
FIN). A client's SYN is held as a small marker until anything else is seen on its flow, when the connection
is built and the SYN replayed into it (a flood of unanswered SYNs costs a marker each, not a connection); the
table holds at most ``max_half_open`` such markers, ``max_connections`` connections and ``max_probes`` flows
under port detection.
Past the limit the least valuable state goes first (connections that never carried a byte, then the longest
idle), closed as ``evicted`` with their requests in flight reported, and counted in ``evicted``; packets that
come later for an evicted flow start a new connection mid-stream, as at the start of a capture.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from analyzer.session.connection import Connection, address_text, reverse_key, split_key
from analyzer.session.matching import Outputs
from analyzer.tcp.reassembly import ACK, FIN, MASK32, RST, SYN, HalfStream
from analyzer.tcp.shards import ShardPlan
from dissectors.kafka.framing import DEFAULT_KEEP, DEFAULT_MAX_FRAME
from dissectors.kafka.headers import looks_like_request
from dissectors.kafka.records import Limits

_INT32 = struct.Struct(">i")

RETIRE_AFTER_NS = 30 * 1_000_000_000  # closed connections leave the table this long after closing
PROBE_PACKETS = 24  # packets of an unknown flow looked at before deciding it is not Kafka
PROBE_DATA_PACKETS = 8
# About 3.5 KB of state per idle connection: 50 k of them stay under 200 MB. A broker rarely serves more from
# one capture point; a flood of handshakes makes many more, and those are the first to go.
MAX_CONNECTIONS = 50_000
MAX_HALF_OPEN = 100_000  # client SYNs held (about 400 bytes each) before their flow shows anything else
MAX_SYN_REPEATS = 8  # retransmissions of a SYN kept in its marker (to be replayed); later ones are counted
MAX_PROBES = 20_000  # flows on unknown ports held (a few packets each) while port detection looks at them
MAX_IGNORED = 400_000  # flow keys remembered as not ours; past it they are forgotten and judged again
EVICT_SHARE = 8  # an eviction frees an eighth of the limit, so its sort is paid once per many new flows
EVICTED_NOTE = "connection state dropped: more connections open at once than the flow table holds"


class _Ignored:
    """Flows that are not ours (other ports, other shard, not Kafka)."""

    __slots__ = ()


IGNORED = _Ignored()


class _Probe:
    """A flow on no known port, held (a few packets) until it shows a request-shaped frame or gives up."""

    __slots__ = ("packets", "data_packets")

    def __init__(self) -> None:
        self.packets: list[tuple] = []
        self.data_packets = 0


class _SynSent:
    """A client's SYN on a Kafka port with nothing else seen on its flow yet: the packets to replay into the
    connection once the flow shows more (payloads are empty, so no capture buffer is kept alive)."""

    __slots__ = ("client_key", "packets", "dropped", "last_ts")

    def __init__(self, client_key: bytes, syn: tuple) -> None:
        self.client_key = client_key
        self.packets = [syn]
        self.dropped = 0  # retransmissions beyond MAX_SYN_REPEATS
        self.last_ts = syn[1]

    def row(self, ended: str) -> tuple:
        """The connection row (CONNECTION_ROW_FIELDS order) of a SYN nothing followed: what Connection.row
        gives for one, without building a connection (some 40 us each, which a flood multiplies)."""
        no, ts = self.packets[0][:2]
        src, dst, sport, dport = split_key(self.client_key)
        return (no, address_text(src), sport, address_text(dst), dport, ts, self.last_ts,
                len(self.packets) + self.dropped, 0, 0, 0, 0, 0, 0, 0, 0, None, True, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                None, False, ended)


class _AwaitHandshakeAck:
    """The client's direction after a SYN-ACK: its next packet completes the handshake (RTT)."""

    __slots__ = ("half",)

    def __init__(self, half: HalfStream) -> None:
        self.half = half


class FlowTable:
    """All connections of one capture file (or of one shard of it)."""

    def __init__(
        self,
        ports: Iterable[int] = (9092,),
        detect_ports: bool = False,
        shard: tuple[int, int] | None = None,
        keep: int = DEFAULT_KEEP,
        max_frame: int = DEFAULT_MAX_FRAME,
        bodies: bool = True,
        verify_crc: bool = False,
        records: bool = False,
        limits: Limits | None = None,
        balance_shards: bool = False,
        max_connections: int = MAX_CONNECTIONS,
        max_probes: int = MAX_PROBES,
        max_half_open: int = MAX_HALF_OPEN,
    ) -> None:
        self.ports = frozenset(ports)
        self.detect_ports = detect_ports
        self.shard = shard
        # With a balanced plan, the bulk path calls plan_chunk at every chunk (analyzer.tcp.shards).
        self.shards = None if shard is None else ShardPlan(*shard, balance_shards, self.ports, detect_ports)
        self.keep = keep
        self.max_frame = max_frame
        self.flows: dict[bytes, object] = {}
        # Keys of flows marked IGNORED: a reader given this set drops their packets before they get here.
        self.ignored: set[bytes] = set()
        self.open: list[Connection] = []
        # Rows of the exchanges, errors, partitions (and records) tables, drained by the caller.
        self.out = Outputs(bodies, verify_crc, records, limits)
        self.rows = self.out.exchanges
        self.connection_rows: list[tuple] = []
        self.now = 0
        self.last_frame = 0  # packet number of the last packet fed
        self.probed_out = 0  # flows looked at and found not to be Kafka
        self.max_connections = max_connections
        self.max_probes = max_probes
        self.max_half_open = max_half_open
        self.half_open: dict[bytes, _SynSent] = {}  # by client key, oldest first
        self.probes = 0  # flows held under port detection now
        self.evicted = 0  # connections dropped over max_connections
        self.probes_evicted = 0  # flows given up over max_probes before port detection could decide

    # -- the packet loop -----------------------------------------------------------------------------

    def feed(self, packets: Iterable[tuple]) -> None:
        """Process packets ``(frame_no, ts_ns, key, seq, ack, flags, payload, seg_len)``."""
        get = self.flows.get
        half_cls = HalfStream
        slow = self._slow
        ts = self.now
        no = self.last_frame
        for pkt in packets:
            no, ts, key, seq, ack, flags, payload, seg_len = pkt
            h = get(key)
            if h.__class__ is not half_cls:
                if h is IGNORED:
                    continue
                slow(h, pkt)
                continue
            h.packets += 1
            h.last_ts = ts
            if flags & 0x07:  # SYN, FIN, RST
                slow(h, pkt)
                continue
            # The ACK first: it tells what the sender had received before it sent this packet's data, so
            # a loss it reveals (say, of a request) is settled before this data (its response) is read.
            p = h.peer
            if ack != p.next_seq and flags & 0x10:
                pn = p.next_seq
                if pn >= 0 and ((ack - pn) & 0xFFFFFFFF) < 0x80000000:
                    p.peer_ack(ts, ack)
            if seg_len:
                if h.next_seq == seq and not h.ooo and len(payload) == seg_len:
                    # The in-order fast path of HalfStream.segment, inlined.
                    h.payload_bytes += seg_len
                    h.next_seq = (seq + seg_len) & 0xFFFFFFFF
                    h.sink.data(ts, no, payload)
                else:
                    h.segment(ts, no, seq, payload, seg_len)
        self.now = ts
        self.last_frame = no

    def finish(self) -> None:
        """End of capture: close every connection and emit all connection rows."""
        self.connection_rows.extend(marker.row("capture_end") for marker in self.half_open.values())
        self.half_open.clear()
        self.probed_out += len({id(v) for v in self.flows.values() if v.__class__ is _Probe})
        self.probes = 0
        for conn in self.open:
            conn.close(self.now, "capture_end")
            self.connection_rows.append(conn.row())
        self.open.clear()
        self.flows.clear()

    def settle_half_open(self) -> None:
        """Build the connections of every SYN still held (at the end of a file whose connections are followed
        into the next file of its rotated set, which may hold the rest of the handshake)."""
        for marker in list(self.half_open.values()):
            self._promote(marker, None)

    def retire_closed(self) -> None:
        """Emit and forget connections closed long enough ago that no more of their packets will come."""
        horizon = self.now - RETIRE_AFTER_NS
        keep: list[Connection] = []
        flows = self.flows
        for conn in self.open:
            if conn.ended is not None and conn.closing_ts < horizon:
                self.connection_rows.append(conn.row())
                flows.pop(conn.client_key, None)
                flows.pop(conn.broker_key, None)
                conn.release()
            else:
                keep.append(conn)
        self.open = keep

    # -- slow path -----------------------------------------------------------------------------------

    def _slow(self, h: object, pkt: tuple) -> None:
        no, ts, key, seq, ack, flags, payload, seg_len = pkt
        if h is None:
            h = self._new_flow(pkt)
            if h is None:
                return
            h.packets += 1
            h.last_ts = ts
        elif h.__class__ is _Probe:
            self._probe(h, pkt)
            return
        elif h.__class__ is _SynSent:
            first = h.packets[0]
            if key == h.client_key and flags == first[5] and seq == first[3]:  # the SYN again
                h.last_ts = ts
                if len(h.packets) < MAX_SYN_REPEATS:
                    h.packets.append((no, ts, key, seq, ack, flags, b"", 0))
                else:
                    h.dropped += 1
                return
            self._promote(h, pkt)
            return
        elif h.__class__ is _AwaitHandshakeAck:
            half = h.half
            conn = half.conn
            self.flows[key] = half
            if flags & ACK and not flags & SYN:
                conn.handshake_ts = ts
            h = half
            h.packets += 1
            h.last_ts = ts
        conn = h.conn
        if flags & SYN:
            if self._is_new_connection(h, conn, seq, flags):
                self._replace(conn, ts)
                self.flows.pop(key, None)
                self.flows.pop(reverse_key(key), None)
                h = self._new_flow(pkt)
                if h is None:
                    return
                h.packets += 1
                h.last_ts = ts
                conn = h.conn
            if h.isn < 0:
                h.syn(ts, seq)
                if h.payload_bytes == 0 and h.gap_bytes == 0:
                    h.sink.begin()  # the stream's first byte comes next
                if flags & ACK:
                    # SYN-ACK from the broker: the client's next packet completes the handshake.
                    if conn.syn_ts >= 0 and conn.handshake_ts < 0 and h is conn.to_client:
                        self.flows[conn.client_key] = _AwaitHandshakeAck(conn.to_broker)
                elif conn.syn_ts < 0:
                    conn.syn_ts = ts
            seq = (seq + 1) & MASK32
        if flags & ACK:
            h.peer.peer_ack(ts, ack)
        if seg_len:
            h.segment(ts, no, seq, payload, seg_len)
        if flags & FIN:
            h.fin((seq + seg_len) & MASK32)
            if h.peer.fin_seen:
                conn.close(ts, "fin")
        if flags & RST:
            conn.close(ts, "rst")

    def _ignore(self, key: bytes, rev: bytes) -> None:
        if len(self.ignored) >= MAX_IGNORED:
            self._forget_ignored()
        self.flows[key] = self.flows[rev] = IGNORED
        self.ignored.add(key)
        self.ignored.add(rev)

    def _forget_ignored(self) -> None:
        """Forget every flow marked as not ours: judging one again costs a port check (or a shard lookup,
        which answers the same), while remembering them all grows with every flow the capture ever saw."""
        flows = self.flows
        for key in self.ignored:
            if flows.get(key) is IGNORED:
                del flows[key]
        self.ignored.clear()  # in place: the readers hold this set

    def skipped_to(self, no: int, ts: int) -> None:
        """The reader dropped packets of ignored flows up to packet ``no`` at ``ts``: advance the clock as
        feeding them would have."""
        if no > self.last_frame:
            self.last_frame = no
            self.now = ts

    def _is_new_connection(self, h: HalfStream, conn: Connection, seq: int, flags: int) -> bool:
        """A SYN on a known flow opens a new connection when it is not a retransmission of the first."""
        if h.isn < 0:
            return conn.ended is not None or (not flags & ACK and h.payload_bytes > 0)
        return seq != h.isn

    def _replace(self, conn: Connection, ts: int) -> None:
        conn.close(ts, "reused")
        self.connection_rows.append(conn.row())
        self.open.remove(conn)
        conn.release()

    def _new_flow(self, pkt: tuple) -> HalfStream | None:
        no, ts, key, seq, ack, flags, payload, seg_len = pkt
        src, dst, sport, dport = split_key(key)
        rev = reverse_key(key)
        if self.shards is not None and not self.shards.owns(key, rev):
            self._ignore(key, rev)
            return None
        ports = self.ports
        to_kafka, from_kafka = dport in ports, sport in ports
        if not (to_kafka or from_kafka):
            if self.detect_ports:
                if self.probes >= self.max_probes:
                    self._evict_probes()
                probe = _Probe()
                self.flows[key] = self.flows[rev] = probe
                self.probes += 1
                self._probe(probe, pkt)
            else:
                self._ignore(key, rev)
            return None
        if flags & SYN:
            sender_is_client = not flags & ACK
            if sender_is_client and not seg_len:
                self._hold_syn(key, rev, (no, ts, key, seq, ack, flags, b"", 0))
                return None
        else:
            sender_is_client = to_kafka
        return self._open(no, ts, key if sender_is_client else rev, sender_is_client)

    def _hold_syn(self, key: bytes, rev: bytes, syn: tuple) -> None:
        if len(self.half_open) >= self.max_half_open:
            self._evict_half_open()
        marker = _SynSent(key, syn)
        self.flows[key] = self.flows[rev] = marker
        self.half_open[key] = marker

    def _promote(self, marker: _SynSent, pkt: tuple | None) -> None:
        """The flow of a held SYN shows more (or the file ends): build its connection and replay."""
        key = marker.client_key
        del self.half_open[key]
        self.flows.pop(key, None)
        self.flows.pop(reverse_key(key), None)
        first = marker.packets[0]
        half = self._open(first[0], first[1], key, True)
        half.packets += marker.dropped
        self.feed(marker.packets if pkt is None else [*marker.packets, pkt])
        half.last_ts = max(half.last_ts, marker.last_ts)  # the repeats not kept

    def _open(self, conn_id: int, ts: int, client_key: bytes, sender_is_client: bool) -> HalfStream:
        if len(self.open) >= self.max_connections:
            self._evict_connections()
        conn = Connection(conn_id, client_key, ts, self.out, self.keep, self.max_frame)
        self.flows[client_key] = conn.to_broker
        self.flows[reverse_key(client_key)] = conn.to_client
        self.open.append(conn)
        return conn.to_broker if sender_is_client else conn.to_client

    def _probe(self, probe: _Probe, pkt: tuple) -> None:
        """Port detection: a flow is Kafka once a segment starts with a plausible request frame."""
        probe.packets.append(pkt)
        payload = pkt[6]
        if len(payload) >= 12:
            probe.data_packets += 1
            size = _INT32.unpack_from(payload, 0)[0]
            if 8 <= size <= self.max_frame and looks_like_request(payload, 4, min(len(payload), size + 4), size):
                key = pkt[2]
                self.flows.pop(key, None)
                self.flows.pop(reverse_key(key), None)
                self.probes -= 1
                first = probe.packets[0]
                self._open(first[0], first[1], key, True)
                self.feed(probe.packets)  # replay what the probe held, now as a Kafka connection
                return
        if len(probe.packets) >= PROBE_PACKETS or probe.data_packets >= PROBE_DATA_PACKETS:
            key = pkt[2]
            self._ignore(key, reverse_key(key))
            self.probes -= 1
            self.probed_out += 1

    # -- limits --------------------------------------------------------------------------------------

    def _evict_connections(self) -> None:
        """Close and emit an eighth of the open connections: those closed already, then those that never
        carried a byte (handshakes of a flood, scans), then the longest idle."""
        def value(conn: Connection) -> tuple[bool, bool, int]:
            b, c = conn.to_broker, conn.to_client
            carried = b.payload_bytes or c.payload_bytes or b.gap_bytes or c.gap_bytes
            return conn.ended is None, bool(carried), max(b.last_ts, c.last_ts, conn.first_ts)

        ranked = sorted(self.open, key=value)
        cut = max(1, self.max_connections // EVICT_SHARE)
        flows = self.flows
        for conn in ranked[:cut]:
            if conn.ended is None:
                conn.close(self.now, "evicted", EVICTED_NOTE)
                self.evicted += 1
            self.connection_rows.append(conn.row())
            for key in (conn.client_key, conn.broker_key):
                if flows.get(key) is not None and flows[key] is not IGNORED:
                    del flows[key]
            conn.release()
        self.open = ranked[cut:]

    def _evict_half_open(self) -> None:
        """The oldest eighth of the held SYNs become connections (closed as evicted, so rows come out and
        their state goes): a SYN-ACK that comes later starts a connection of its own."""
        cut = max(1, self.max_half_open // EVICT_SHARE)
        flows, held = self.flows, self.half_open
        for marker in [m for _, m in zip(range(cut), held.values(), strict=False)]:
            key = marker.client_key
            del held[key]
            del flows[key]
            del flows[reverse_key(key)]
            self.connection_rows.append(marker.row("evicted"))
        self.evicted += cut

    def _evict_probes(self) -> None:
        """Give up on the oldest eighth of the flows held for port detection (counted as not Kafka)."""
        cut = max(1, self.max_probes // EVICT_SHARE)
        gone: list[bytes] = []
        seen: set[int] = set()
        for key, value in self.flows.items():  # insertion order: oldest first
            if value.__class__ is _Probe and id(value) not in seen:
                seen.add(id(value))
                gone.append(key)
                if len(gone) == cut:
                    break
        for key in gone:
            self._ignore(key, reverse_key(key))
        self.probes -= len(gone)
        self.probes_evicted += len(gone)
        self.probed_out += len(gone)
