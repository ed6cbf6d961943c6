# cython: language_level=3
"""The flow table: routes each captured TCP packet to its connection's half-stream.

The table maps the capture key of each direction (src addr + dst addr + ports) straight to that direction's
``HalfStream``, so the common packet costs one dict lookup and a few integer operations in C; every other kind
of entry (flows to ignore, flows being probed for Kafka, a handshake waiting for its last ACK) is a small marker
object handled off the fast path. Connections are created when a flow is first seen on a Kafka port (or, with
port detection, once a request-shaped frame is seen on it), replaced when a new SYN reuses the same ports, and
retired some time after they close so memory follows the open connections, not the length of the capture.

Hostile or broken traffic can open connections without end (a SYN flood, a scan, a capture that misses every
FIN). A client's SYN is held as a small marker until anything else is seen on its flow, when the connection
is built and the SYN replayed into it (a flood of unanswered SYNs costs a marker each, not a connection); the
table holds at most ``max_half_open`` such markers, ``max_connections`` connections and ``max_probes`` flows
under port detection.
Past the limit the least valuable state goes first (connections that never carried a byte, then the longest
idle), closed as ``evicted`` with their requests in flight reported, and counted in ``evicted``; packets that
come later for an evicted flow start a new connection mid-stream, as at the start of a capture.

Compiled: the per-packet loop and the handshake, close and marker handling, with the half-streams driven in C;
``flows.pxd`` declares what the bulk path uses of the table besides its Python attributes.
"""

import struct

from libc.stdint cimport int64_t

from analyzer.tcp.reassembly cimport ACK, FIN, RST, SHORT, SYN, HalfStream

from analyzer.tcp.keys import reverse_key, split_key
from analyzer.tcp.shards import ShardPlan

__all__ = ["EVICTED_NOTE", "EVICT_SHARE", "IGNORED", "MAX_CONNECTIONS", "MAX_HALF_OPEN", "MAX_IGNORED", "MAX_PROBES",
           "MAX_SYN_REPEATS", "PROBE_DATA_PACKETS", "PROBE_PACKETS", "RETIRE_AFTER_NS", "FlowTable"]

cdef int64_t MASK32 = 0xFFFFFFFF
cdef int64_t HALF32 = 0x80000000

_INT32 = struct.Struct(">i")

RETIRE_AFTER_NS = 30 * 1_000_000_000  # closed connections leave the table this long after closing
PROBE_PACKETS = 64  # packets of an unknown flow looked at before deciding it is not Kafka
PROBE_DATA_PACKETS = 32  # (a connection seen from its middle may show a long response before its next request)
# A broker rarely serves more connections than this from one capture point; a flood of handshakes makes many
# more, and those are the first to go (benchmarks/bench_idle_connections.py measures one idle connection).
MAX_CONNECTIONS = 50_000
MAX_HALF_OPEN = 100_000  # client SYNs held (a marker each) before their flow shows anything else
MAX_SYN_REPEATS = 8  # retransmissions of a SYN kept in its marker (to be replayed); later ones are counted
MAX_PROBES = 20_000  # flows on unknown ports held (a few packets each) while port detection looks at them
MAX_PORTS_LISTED = 1024  # server ports counted apart in ports_not_decoded; the rest share the entry -1
MAX_IGNORED = 400_000  # flow keys remembered as not ours; past it they are forgotten and judged again
EVICT_SHARE = 8  # an eviction frees an eighth of the limit, so its sort is paid once per many new flows
EVICTED_NOTE = "connection state dropped: more connections open at once than the flow table holds"


cdef class _Ignored:
    """Flows that are not ours (other ports, other shard, not Kafka)."""

    pass


IGNORED = _Ignored()
cdef object _IGNORED = IGNORED
IDLE_NOTE = "connection state dropped: no packet for longer than the live run's idle limit"


cdef class _Probe:
    """A flow on no known port, held (a few packets) until port detection decides (dissectors.kafka.detect)."""

    def __init__(self, int sport, int dport, int server_port, probe):
        self.packets = []
        self.sport = sport
        self.dport = dport
        self.evidence = probe.evidence(server_port)

    cdef int guess_server_port(self):
        """The handshake's server port, else the lower port (clients mostly send from ephemeral ports)."""
        if self.evidence.server_port >= 0:
            return self.evidence.server_port
        return min(self.sport, self.dport)


cdef class _SynSent:
    """A client's SYN on a Kafka port with nothing else seen on its flow yet: the packets to replay into the
    connection once the flow shows more (payloads are empty, so no capture buffer is kept alive)."""

    def __init__(self, bytes client_key, tuple syn):
        self.client_key = client_key
        self.packets = [syn]
        self.last_ts = syn[1]


cdef class _AwaitHandshakeAck:
    """The client's direction after a SYN-ACK: its next packet completes the handshake (RTT)."""

    def __init__(self, HalfStream half):
        self.half = half


cdef class FlowTable:
    """All connections of one capture file (or of one shard of it)."""

    def __init__(self, connections, ports, bint detect_ports=False, shard=None, bint balance_shards=False,
                 Py_ssize_t max_connections=MAX_CONNECTIONS, Py_ssize_t max_probes=MAX_PROBES,
                 Py_ssize_t max_half_open=MAX_HALF_OPEN, Py_ssize_t max_ignored=MAX_IGNORED, probe=None):
        """``connections(conn_id, client_key, ts)`` makes the connection of a flow the table takes (an object
        with ``to_broker``/``to_client`` half-streams, ``broker_key``, ``start_handshake``... as
        analyzer.session.connection.Connection has); the table knows no protocol beyond TCP, so whoever builds it
        says what a connection is. ``probe`` judges the flows on no known port (port detection)."""
        if detect_ports and probe is None:
            raise ValueError("port detection needs a probe (dissectors.kafka.detect.KafkaPortProbe)")
        self.connections = connections
        self.probe = probe
        self.ports = frozenset(ports)
        self.detect_ports = detect_ports
        self.shard = shard
        # With a balanced plan, the bulk path calls plan_chunk at every chunk (analyzer.tcp.shards).
        self.shards = None if shard is None else ShardPlan(*shard, balance_shards, self.ports, detect_ports)
        self.flows = {}
        self.ignored = set()
        self.open = []
        self.connection_rows = []
        self.now = 0
        self.last_frame = 0  # packet number of the last packet fed
        self.probed_out = 0  # flows looked at and found not to be Kafka
        self.max_connections = max_connections
        self.max_probes = max_probes
        self.max_half_open = max_half_open
        self.max_ignored = max_ignored
        self.half_open = {}  # client key -> _SynSent, oldest first
        self.probes = 0  # flows held under port detection now
        self.evicted = 0  # connections dropped over max_connections
        self.probes_evicted = 0  # flows given up over max_probes before port detection could decide
        # Port detection: port -> (why it was taken for Kafka, the packet that showed it), in the order found.
        self.ports_found = {}
        # Server port -> [flows, packets, payload bytes, flows that began TLS] of flows not decoded (on no Kafka
        # port; with detection, those it did not take): what the summary lists as TCP traffic left aside.
        self.ports_not_decoded = {}

    # -- the packet loop -----------------------------------------------------------------------------

    def feed(self, packets) -> None:
        """Process packets ``(frame_no, ts_ns, key, seq, ack, flags, payload, seg_len)``."""
        cdef int64_t no = self.last_frame
        cdef object ts = self.now
        cdef int64_t seq, ack, seg_len
        cdef int flags
        for pkt in packets:
            no, ts, key, seq, ack, flags, payload, seg_len = pkt
            self._one(no, ts, key, seq, ack, flags, payload, seg_len, pkt)
        self.now = ts
        self.last_frame = no

    cdef _one(self, int64_t no, object ts, object key, int64_t seq, int64_t ack, int flags, object payload,
              int64_t seg_len, object pkt):
        cdef object h = self.flows.get(key)
        cdef HalfStream half, p
        cdef int64_t pn
        if type(h) is not HalfStream:
            if h is _IGNORED:
                return
            self._slow(h, no, ts, key, seq, ack, flags, payload, seg_len, pkt)
            return
        half = <HalfStream>h
        half.packets += 1
        half.set_last_ts(ts)
        if half.state & SHORT:
            half.settle_short(seq, seg_len, flags)
        if flags & 0x07:  # SYN, FIN, RST
            self._slow(half, no, ts, key, seq, ack, flags, payload, seg_len, pkt)
            return
        # The ACK first: it tells what the sender had received before it sent this packet's data, so a loss
        # it reveals (say, of a request) is settled before this data (its response) is read.
        p = half.peer
        if p is None:
            raise RuntimeError("a released half-stream is still in the flow table")
        pn = p.next_seq
        if ack != pn and flags & ACK and pn >= 0 and ((ack - pn) & MASK32) < HALF32:
            p.peer_ack(ts, ack)
        if seg_len:
            half.take(ts, no, seq, payload, seg_len)

    def finish(self) -> None:
        """End of capture: close every connection and emit all connection rows."""
        cdef _Probe probe
        self.connection_rows.extend(self._syn_only_row(marker, "capture_end") for marker in self.half_open.values())
        self.half_open.clear()
        for value in {id(v): v for v in self.flows.values() if type(v) is _Probe}.values():
            probe = <_Probe>value
            first_key = probe.packets[0][2]
            if self.flows.get(first_key) is not probe:
                continue  # taken with its port, by the flow before
            verdict = self.probe.judge_at_end(probe.evidence, {first_key: probe.dport,
                                                               reverse_key(first_key): probe.sport})
            if verdict is None:
                self._not_decoded(probe)
                self.probed_out += 1
            else:
                self._take_probe(probe, verdict.client_key)
                self._take_port(verdict.server_port, verdict.reason, probe.packets[0][0])
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
        cdef list keep = []
        cdef dict flows = self.flows
        for conn in self.open:
            if conn.ended is not None and conn.closing_ts < horizon:
                self.connection_rows.append(conn.row())
                flows.pop(conn.client_key, None)
                flows.pop(conn.broker_key, None)
                conn.release()
            else:
                keep.append(conn)
        self.open = keep

    def expire_idle(self, idle_ns) -> int:
        """Close the connections that carried no packet for ``idle_ns`` (ended ``idle``, their requests in flight
        reported): in an endless live run a peer that vanished, or whose FIN the capture missed, must not hold
        its state, and its held segments, for ever. Returns how many were closed."""
        if self.now is None:
            return 0
        horizon = self.now - idle_ns
        cdef list keep = []
        cdef dict flows = self.flows
        cdef Py_ssize_t closed = 0
        for conn in self.open:
            last = max(conn.to_broker.last_ts, conn.to_client.last_ts, conn.first_ts)
            if conn.ended is None and last < horizon:
                conn.close(self.now, "idle", IDLE_NOTE)
                self.connection_rows.append(conn.row())
                for key in (conn.client_key, conn.broker_key):
                    if flows.get(key) is not None and flows[key] is not _IGNORED:
                        del flows[key]
                conn.release()
                closed += 1
            else:
                keep.append(conn)
        self.open = keep
        return closed

    def skipped_to(self, int64_t no, ts) -> None:
        """The reader dropped packets of ignored flows up to packet ``no`` at ``ts``: advance the clock as
        feeding them would have."""
        if no > self.last_frame:
            self.last_frame = no
            self.now = ts

    # -- slow path -----------------------------------------------------------------------------------

    cdef _slow(self, object h, int64_t no, object ts, object key, int64_t seq, int64_t ack, int flags,
               object payload, int64_t seg_len, object pkt):
        cdef HalfStream half
        cdef _SynSent marker
        cdef tuple first
        if pkt is None:
            pkt = (no, ts, key, seq, ack, flags, payload, seg_len)
        elif type(pkt) is not tuple:
            pkt = tuple(pkt)
        if h is None:
            half = self._new_flow(pkt)
            if half is None:
                return
            half.packets += 1
            half.set_last_ts(ts)
        elif type(h) is _Probe:
            self._probe(<_Probe>h, pkt)
            return
        elif type(h) is _SynSent:
            marker = <_SynSent>h
            first = marker.packets[0]
            if key == marker.client_key and flags == first[5] and seq == first[3]:  # the SYN again
                marker.last_ts = ts
                if len(marker.packets) < MAX_SYN_REPEATS:
                    marker.packets.append((no, ts, key, seq, ack, flags, b"", 0))
                else:
                    marker.dropped += 1
                return
            self._promote(marker, pkt)
            return
        elif type(h) is _AwaitHandshakeAck:
            half = (<_AwaitHandshakeAck>h).half
            conn = half.conn
            self.flows[key] = half
            if flags & ACK and not flags & SYN:
                conn.handshake_ts = ts
            half.packets += 1
            half.set_last_ts(ts)
            if half.state & SHORT:
                half.settle_short(seq, seg_len, flags)
        else:
            half = <HalfStream>h
        conn = half.conn
        if half.peer is None:
            raise RuntimeError("a released half-stream is still in the flow table")
        if flags & SYN:
            if self._is_new_connection(half, conn, seq, flags):
                self._replace(conn, ts)
                self.flows.pop(key, None)
                self.flows.pop(reverse_key(key), None)
                half = self._new_flow(pkt)
                if half is None:
                    return
                half.packets += 1
                half.set_last_ts(ts)
                conn = half.conn
            if half.isn < 0:
                half.syn(ts, seq)
                if half.payload_bytes == 0 and half.gap_bytes == 0:
                    half.sink.begin()  # the stream's first byte comes next
                if flags & ACK:
                    # SYN-ACK from the broker: the client's next packet completes the handshake.
                    if conn.syn_ts >= 0 and conn.handshake_ts < 0 and half is conn.to_client:
                        self.flows[conn.client_key] = _AwaitHandshakeAck(conn.to_broker)
                elif conn.syn_ts < 0:
                    conn.syn_ts = ts
            seq = (seq + 1) & MASK32
        if flags & ACK:
            half.peer.peer_ack(ts, ack)
        if seg_len:
            half.segment(ts, no, seq, payload, seg_len)
        if flags & FIN:
            half.fin((seq + seg_len) & MASK32)
            if half.peer.fin_seq >= 0:
                conn.close(ts, "fin")
        if flags & RST:
            conn.close(ts, "rst")

    cdef _ignore(self, key, rev):
        if len(self.ignored) >= self.max_ignored:
            self._forget_ignored()
        self.flows[key] = self.flows[rev] = _IGNORED
        self.ignored.add(key)
        self.ignored.add(rev)

    cdef _forget_ignored(self):
        """Forget every flow marked as not ours: judging one again costs a port check (or a shard lookup,
        which answers the same), while remembering them all grows with every flow the capture ever saw."""
        cdef dict flows = self.flows
        for key in self.ignored:
            if flows.get(key) is _IGNORED:
                del flows[key]
        self.ignored.clear()  # in place: the readers hold this set

    cdef bint _is_new_connection(self, HalfStream h, conn, int64_t seq, int flags) except -1:
        """A SYN on a known flow opens a new connection when it is not a retransmission of the first."""
        if h.isn < 0:
            return conn.ended is not None or (not flags & ACK and h.payload_bytes > 0)
        return seq != h.isn

    cdef _replace(self, conn, ts):
        conn.close(ts, "reused")
        self.connection_rows.append(conn.row())
        self.open.remove(conn)
        conn.release()

    cdef HalfStream _new_flow(self, tuple pkt):
        no, ts, key, seq, ack, flags, payload, seg_len = pkt
        src, dst, sport, dport = split_key(key)
        rev = reverse_key(key)
        if self.shards is not None and not self.shards.owns(key, rev):
            self._ignore(key, rev)
            return None
        ports = self.ports
        to_kafka, from_kafka = dport in ports, sport in ports
        if not (to_kafka or from_kafka) and self.ports_found:
            to_kafka, from_kafka = dport in self.ports_found, sport in self.ports_found
        if not (to_kafka or from_kafka):
            server_port = -1
            if flags & SYN:
                server_port = sport if flags & ACK else dport
            if self.detect_ports:
                if self.probes >= self.max_probes:
                    self._evict_probes()
                probe = _Probe(sport, dport, server_port, self.probe)
                self.flows[key] = self.flows[rev] = probe
                self.probes += 1
                self._probe(probe, pkt)
            else:
                self._count_not_decoded(server_port if server_port >= 0 else min(sport, dport), 1, 0, 0, False)
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

    cdef _hold_syn(self, bytes key, bytes rev, tuple syn):
        if len(self.half_open) >= self.max_half_open:
            self._evict_half_open()
        marker = _SynSent(key, syn)
        self.flows[key] = self.flows[rev] = marker
        self.half_open[key] = marker

    cdef tuple _syn_only_row(self, _SynSent marker, str ended):
        no, ts = marker.packets[0][:2]
        return self.connections.syn_only_row(no, marker.client_key, ts, marker.last_ts,
                                             len(marker.packets) + marker.dropped, ended)

    cdef _promote(self, _SynSent marker, object pkt):
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

    cdef HalfStream _open(self, conn_id, ts, bytes client_key, bint sender_is_client):
        if len(self.open) >= self.max_connections:
            self._evict_connections()
        conn = self.connections(conn_id, client_key, ts)
        self.flows[client_key] = conn.to_broker
        self.flows[conn.broker_key] = conn.to_client
        self.open.append(conn)
        return conn.to_broker if sender_is_client else conn.to_client

    cdef _probe(self, _Probe probe, tuple pkt):
        """Port detection: hold the flow's packets until dissectors.kafka.detect decides; a port found to carry
        Kafka is taken for every flow on it, those held now and those the table gave up on included."""
        probe.packets.append(pkt)
        probe.evidence.packets += 1
        payload = pkt[6]
        key = pkt[2]
        verdict = None
        if len(payload):
            src, dst, sport, dport = split_key(key)
            verdict = self.probe.judge(probe.evidence, key, reverse_key(key), sport, dport, payload)
        if verdict is not None and verdict.kafka:
            self._take_probe(probe, verdict.client_key)
            self._take_port(verdict.server_port, verdict.reason, pkt[0])
            return
        if verdict is not None or len(probe.packets) >= PROBE_PACKETS or probe.evidence.data_packets >= PROBE_DATA_PACKETS:
            self._give_up(probe, key)

    cdef _give_up(self, _Probe probe, key):
        self._not_decoded(probe)
        self._ignore(key, reverse_key(key))
        self.probes -= 1
        self.probed_out += 1

    cdef _not_decoded(self, _Probe probe):
        ev = probe.evidence
        self._count_not_decoded(probe.guess_server_port(), 1, ev.packets, ev.payload_bytes, ev.tls)

    cdef _count_not_decoded(self, int port, Py_ssize_t flows, Py_ssize_t packets, Py_ssize_t nbytes, bint tls):
        counts = self.ports_not_decoded.get(port)
        if counts is None:
            if len(self.ports_not_decoded) >= MAX_PORTS_LISTED:
                port = -1  # the rest, together
                counts = self.ports_not_decoded.get(port)
            if counts is None:
                counts = self.ports_not_decoded[port] = [0, 0, 0, 0]
        counts[0] += flows
        counts[1] += packets
        counts[2] += nbytes
        counts[3] += tls

    cdef _take_probe(self, _Probe probe, bytes client_key):
        """Open the held flow as a Kafka connection (``client_key``: its client's direction) and replay it."""
        self.flows.pop(client_key, None)
        self.flows.pop(reverse_key(client_key), None)
        self.probes -= 1
        first = probe.packets[0]
        self._open(first[0], first[1], client_key, True)
        self.feed(probe.packets)

    cdef _take_port(self, int port, str reason, no):
        """Take ``port`` for Kafka from now on: the flows held on it become connections, and those already
        given up on are forgotten, so their next packets open connections seen from their middle."""
        if port < 0 or port in self.ports or port in self.ports_found:
            return
        self.ports_found[port] = (reason, no)
        cdef _Probe probe
        held = {id(v): v for v in self.flows.values() if type(v) is _Probe}
        for value in held.values():
            probe = <_Probe>value
            if probe.sport == port or probe.dport == port:
                first = probe.packets[0]
                self._take_probe(probe, first[2] if probe.dport == port else reverse_key(first[2]))
        cdef dict flows = self.flows
        for key in [k for k in self.ignored if port in split_key(k)[2:]]:
            self.ignored.discard(key)
            if flows.get(key) is _IGNORED:
                del flows[key]
        if port in self.ports_not_decoded:
            self.probed_out -= self.ports_not_decoded.pop(port)[0]

    # -- limits --------------------------------------------------------------------------------------

    cdef _evict_connections(self):
        """Close and emit an eighth of the open connections: those closed already, then those that never
        carried a byte (handshakes of a flood, scans), then the longest idle."""
        ranked = sorted(self.open, key=_eviction_rank)
        cut = max(1, self.max_connections // EVICT_SHARE)
        cdef dict flows = self.flows
        for conn in ranked[:cut]:
            if conn.ended is None:
                conn.close(self.now, "evicted", EVICTED_NOTE)
                self.evicted += 1
            self.connection_rows.append(conn.row())
            for key in (conn.client_key, conn.broker_key):
                if flows.get(key) is not None and flows[key] is not _IGNORED:
                    del flows[key]
            conn.release()
        self.open = ranked[cut:]

    cdef _evict_half_open(self):
        """The oldest eighth of the held SYNs become connections (closed as evicted, so rows come out and
        their state goes): a SYN-ACK that comes later starts a connection of its own."""
        cut = max(1, self.max_half_open // EVICT_SHARE)
        cdef dict flows = self.flows
        cdef dict held = self.half_open
        cdef _SynSent marker
        for marker in [m for _, m in zip(range(cut), held.values(), strict=False)]:
            key = marker.client_key
            del held[key]
            del flows[key]
            del flows[reverse_key(key)]
            self.connection_rows.append(self._syn_only_row(marker, "evicted"))
        self.evicted += cut

    cdef _evict_probes(self):
        """Give up on the oldest eighth of the flows held for port detection (counted as not Kafka)."""
        cut = max(1, self.max_probes // EVICT_SHARE)
        cdef list gone = []
        cdef set seen = set()
        for key, value in self.flows.items():  # insertion order: oldest first
            if type(value) is _Probe and id(value) not in seen:
                seen.add(id(value))
                gone.append(key)
                if len(gone) == cut:
                    break
        for key in gone:
            self._give_up(<_Probe>self.flows[key], key)
        self.probes_evicted += len(gone)


def _eviction_rank(conn) -> tuple:
    """Closed first, then those that never carried a byte, then the longest idle."""
    cdef HalfStream b = conn.to_broker
    cdef HalfStream c = conn.to_client
    carried = b.payload_bytes or c.payload_bytes or b.gap_bytes or c.gap_bytes
    return conn.ended is None, bool(carried), max(b.last_ts, c.last_ts, conn.first_ts)
