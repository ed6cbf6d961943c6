"""The flow table's bulk path: a chunk of packets in columns, handled a connection at a time.

Most packets of a Kafka capture change nothing but counters: an ACK for bytes already seen, a segment in
the middle of a frame body or of a frame head being collected. Per packet, the flow table's loop spends a
microsecond finding that out. Here numpy finds it for all the packets of a chunk at once, and the
interpreter only visits the packets that matter:

- a packet is *regular* when it has no SYN, FIN or RST, carries its whole payload, continues its direction's
  byte stream exactly, and acknowledges no byte the capture has not shown of the other direction. Whether
  it does is decided for the whole chunk at once, against the sequence numbers the flows would have if
  every packet before it were regular; a run of regular packets is taken in bulk only when the flows'
  actual state matches that prediction where the run starts. A run changes the TCP state by sums
  (packets, bytes, next sequence number);
- within such a run, the framers see only the packets where a frame body ends or a head is complete
  (found by bisecting the running byte count); the segments between are counted off, or appended to the
  head in progress, in bulk; the two directions' frames are handed on in packet order, so requests and
  responses reach the matcher as they would packet by packet;
- any other packet (loss, reordering, a handshake, a new flow, a flow being probed) goes through the
  ordinary per-packet loop (``FlowTable.feed``) and the bulk path resumes after it.

Connections are independent, so they are taken one after another within a chunk; the rows come out
grouped by connection within each chunk instead of interleaved (the tables' row order is not part of their
meaning). The result is otherwise exactly what the per-packet loop gives (tests compare the two).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from analyzer.capture.chunks import PacketChunk, number_keys
from analyzer.capture.linklayer import NO_PAYLOAD
from analyzer.session.connection import reverse_key
from analyzer.tcp.flows import IGNORED, FlowTable
from analyzer.tcp.reassembly import HalfStream
from analyzer.tcp.shards import work_per_key

MASK32 = 0xFFFFFFFF
HALF32 = 0x80000000
ACK = 0x10
PER_PACKET_STEP = 8  # packets fed one by one before checking again whether a connection can go back to bulk


def feed_chunk(table: FlowTable, chunk: PacketChunk) -> None:
    """Feed one chunk to ``table``; leaves its clock where the per-packet loop would."""
    if chunk.tuples is not None:
        table.feed(chunk.tuples)
    elif len(chunk):
        _Bulk(table, chunk).feed()
    if chunk.last_frame:
        table.skipped_to(chunk.last_frame, chunk.last_ts)


class _Bulk:
    """One chunk in columns: the regularity of every packet and, per direction (flow key), its packets in
    order with running byte counts (a list, for bisection) and predicted sequence numbers.

    Packets are also kept sorted by flow key ("sorted positions"): one direction's packets are then a
    contiguous, time-ordered slice, ``lo[k]:lo[k + 1]`` for key number k.
    """

    def __init__(self, table: FlowTable, chunk: PacketChunk) -> None:
        self.table = table
        self.chunk = chunk
        n = len(chunk)
        keys, inverse = number_keys(chunk.keys)  # flow keys to small integers
        self.keys = keys
        key_index = {k: i for i, k in enumerate(keys)}
        flows = table.flows
        count = len(keys)
        self.reverse = reverse = [reverse_key(key) for key in keys]
        plan = table.shards
        if plan is not None and plan.balance:  # decided on every packet of the chunk, as in every process
            plan.plan_chunk(keys, reverse, work_per_key(inverse, count, chunk.flags, chunk.seg_len))
        # Packets of ignored flows (another shard's connections, other ports) leave the columns at once.
        self.frames = None  # the kept packets' numbers, when some were left out
        ignored = [flows.get(key) is IGNORED for key in keys]
        if any(ignored):
            kept = np.flatnonzero(~np.asarray(ignored)[inverse])
            self.frames = kept + chunk.first_frame
            inverse = inverse[kept]
            chunk = PacketChunk(chunk.first_frame, chunk.ts[kept], chunk.keys[kept], chunk.seq[kept],
                                chunk.ack[kept], chunk.flags[kept], chunk.start[kept], chunk.stop[kept],
                                chunk.seg_len[kept], chunk.buf)
            self.chunk = chunk
            n = len(kept)
        self.key_of = inverse
        # Each key's direction state at the chunk's start, and its peer's.
        next0 = np.full(count, -1, np.int64)
        peer_next0 = np.full(count, -1, np.int64)
        peer = np.full(count, -1, np.int64)
        for k, (key, rev) in enumerate(zip(keys, reverse, strict=True)):
            h = flows.get(key)
            if h.__class__ is HalfStream:
                next0[k] = h.next_seq
                peer_next0[k] = h.peer.next_seq
            peer[k] = key_index.get(rev, -1)
        self.next0 = next0.tolist()
        self.peer_next0 = peer_next0.tolist()

        order = np.argsort(inverse, kind="stable")  # radix sort for 16-bit key numbers
        sorted_key = inverse[order].astype(np.int64)
        lo = np.searchsorted(sorted_key, np.arange(count + 1))
        self.lo = lo.tolist()
        lo_of = lo[sorted_key]  # each sorted position's segment start
        seq = chunk.seq[order]
        seg = chunk.seg_len[order]
        flags = chunk.flags[order]
        positions = np.arange(n, dtype=np.int64)
        data = seg > 0
        # The direction's next sequence number after each packet (its last data packet's end), and before.
        last_data = np.maximum.accumulate(np.where(data, positions, -1))
        ends = (seq + seg) & MASK32
        after = np.where(last_data >= lo_of, ends[np.maximum(last_data, 0)], next0[sorted_key])
        before = np.empty_like(after)
        before[1:] = after[:-1]
        first_in_segment = positions == lo_of
        before[first_in_segment] = next0[sorted_key[first_in_segment]]
        # The peer's next sequence number when each packet was sent: after its last packet before this one.
        peer_key = peer[sorted_key]
        chunk_index = order.astype(np.int64)
        combined = (sorted_key << 32) | chunk_index
        where = np.searchsorted(combined, (np.maximum(peer_key, 0) << 32) | chunk_index)
        has_peer = (peer_key >= 0) & (where > lo[np.maximum(peer_key, 0)])
        edge = np.where(has_peer, after[np.maximum(where - 1, 0)], peer_next0[sorted_key])
        ahead = (chunk.ack[order] - edge) & MASK32
        irregular = (flags & 0x07) != 0
        irregular |= data & ((seq != before) | ((chunk.stop - chunk.start)[order] != seg))
        irregular |= ((flags & ACK) != 0) & (edge >= 0) & (ahead != 0) & (ahead < HALF32)
        self.irregular = np.empty(n, bool)
        self.irregular[order] = irregular

        self.order = order.tolist()  # sorted position -> chunk index
        self.order_array = order
        self.after = after  # read at a few positions per run: .item(), not a list of every packet
        self.cum = np.concatenate(([0], np.cumsum(seg))).tolist()  # bytes before each sorted position
        self.ts = chunk.ts
        self._payloads: tuple[list[int], list[int]] | None = None

    def frame(self, i: int) -> int:
        """The packet number of the chunk's i-th (kept) packet."""
        return self.frames.item(i) if self.frames is not None else self.chunk.first_frame + i

    def payloads(self) -> tuple[list[int], list[int]]:
        """Where each sorted position's payload starts and stops, as lists (built when heads are collected)."""
        if self._payloads is None:
            order = self.order_array
            self._payloads = self.chunk.start[order].tolist(), self.chunk.stop[order].tolist()
        return self._payloads

    # -- per connection ------------------------------------------------------------------------------

    def feed(self) -> None:
        keys = self.keys
        groups: dict[bytes, int] = {}
        group_of_key = [groups.setdefault(min(key, rev), len(groups))
                        for key, rev in zip(keys, self.reverse, strict=True)]
        group = np.asarray(group_of_key, np.int64)[self.key_of]
        if len(groups) < 1 << 15:
            group = group.astype(np.int16)
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(len(groups) + 1)).tolist()
        irregular = np.flatnonzero(self.irregular[order]).tolist()  # in group order
        members: list[list[int]] = [[] for _ in groups]
        for k, g in enumerate(group_of_key):
            members[g].append(k)
        flows = self.table.flows
        for g, ks in enumerate(members):
            if all(flows.get(keys[k]) is IGNORED for k in ks):
                continue
            a, b = bounds[g], bounds[g + 1]
            self._connection(order[a:b], irregular[bisect_left(irregular, a):bisect_left(irregular, b)], a, ks)

    def _connection(self, idx: np.ndarray, irregular: list[int], base: int, ks: list[int]) -> None:
        """One connection's packets (chunk indexes, in order): regular runs in bulk, the rest one by one.
        ``idx`` stays an array: only the packets at run boundaries and those fed one by one are read."""
        n = len(idx)
        r = 0
        bad = 0  # the next irregular packet, as an index into `irregular`
        while r < n:
            conn = self._ready(idx.item(r), ks)
            if conn is None:  # a few packets one by one, then look again
                self._some(idx[r:r + PER_PACKET_STEP].tolist())
                r += PER_PACKET_STEP
                if all(self.table.flows.get(self.keys[k]) is IGNORED for k in ks):
                    return  # found to be another shard's or not Kafka: the rest would be dropped anyway
                continue
            while bad < len(irregular) and irregular[bad] - base < r:
                bad += 1
            j = irregular[bad] - base if bad < len(irregular) else n
            if j > r:
                self._run(conn, idx.item(r), idx.item(j - 1) + 1, ks)
            if j < n:
                self._some([idx.item(j)])
            r = j + 1

    def _ready(self, at: int, ks: list[int]):
        """The connection of these keys if its state before packet ``at`` is what the regularity test
        assumed (nothing held out of order, each direction's next sequence number as predicted), else None."""
        flows = self.table.flows
        h = flows.get(self.keys[ks[0]])
        if h.__class__ is not HalfStream:
            return None
        conn = h.conn
        for k in ks:
            half = flows.get(self.keys[k])
            if half is not conn.to_broker and half is not conn.to_client:
                return None
            if half.holding or half.next_seq != self._predicted(k, at):
                return None
        if len(ks) == 1:  # the other direction sent nothing in this chunk: its state must be as it was
            other = h.peer
            if other.holding or other.next_seq != self.peer_next0[ks[0]]:
                return None
        return conn

    def _predicted(self, k: int, at: int) -> int:
        """Key k's next sequence number before chunk packet ``at`` if every packet before were regular."""
        lo = self.lo[k]
        p = bisect_left(self.order, at, lo, self.lo[k + 1])
        return self.after.item(p - 1) if p > lo else self.next0[k]

    def _some(self, at: list[int]) -> None:
        """Chunk packets (indexes ``at``) through the per-packet loop."""
        c = self.chunk
        view, keys, key_of, frame = c.buf, self.keys, self.key_of, self.frame
        seq, ack, flags, ts, start, stop, seg_len = c.seq, c.ack, c.flags, c.ts, c.start, c.stop, c.seg_len
        packets = []
        for i in at:
            seg = seg_len.item(i)
            packets.append((frame(i), ts.item(i), keys[key_of.item(i)], seq.item(i), ack.item(i), flags.item(i),
                            view[start.item(i):stop.item(i)] if seg else NO_PAYLOAD, seg))
        self.table.feed(packets)

    def _run(self, conn, first: int, stop: int, ks: list[int]) -> None:
        """The regular packets of one connection with chunk indexes in [first, stop)."""
        sides = []
        order = self.order
        for k in ks:
            lo, hi = self.lo[k], self.lo[k + 1]
            a = bisect_left(order, first, lo, hi)
            b = bisect_left(order, stop, a, hi)
            if a == b:
                continue
            half = self.table.flows[self.keys[k]]
            nbytes = self.cum[b] - self.cum[a]
            half.take_run(b - a, self.ts.item(order[b - 1]), nbytes, self.after.item(b - 1))
            if nbytes:
                sides.append((half.sink, a, b))
        if not sides:
            return
        cum = self.cum
        chunk = self.chunk
        view, ts, start, stop_at = chunk.buf, self.ts, chunk.start, chunk.stop
        # Packet numbers: the chunk's first plus the index, unless ignored flows' packets were left out.
        first_frame, frames = chunk.first_frame, self.frames
        # The framers read their packets in packet order across both directions (requests before their
        # responses); a direction with nothing to read in this run never has a next packet (ic = -1).
        sb, kb, endb = sides[0]
        sc, kc, endc = sides[1] if len(sides) == 2 else (None, 0, 0)
        eb = _next_event(sb, cum, kb, endb, self)
        ec = _next_event(sc, cum, kc, endc, self) if sc is not None else 0
        ib = order[eb] if eb < endb else -1
        ic = order[ec] if ec < endc else -1
        while ib >= 0 or ic >= 0:
            if ic < 0 or 0 <= ib < ic:
                sb.data(ts.item(ib), first_frame + ib if frames is None else frames.item(ib),
                        view[start.item(ib):stop_at.item(ib)])
                eb = _next_event(sb, cum, eb + 1, endb, self)
                ib = order[eb] if eb < endb else -1
            else:
                sc.data(ts.item(ic), first_frame + ic if frames is None else frames.item(ic),
                        view[start.item(ic):stop_at.item(ic)])
                ec = _next_event(sc, cum, ec + 1, endc, self)
                ic = order[ec] if ec < endc else -1


def _next_event(s, cum: list[int], k: int, end: int, bulk: _Bulk) -> int:
    """Count off (or append to the head in progress) the packets from sorted position k on that framer
    ``s`` need not read; return the position of the next one it must read (``end`` if none)."""
    base = cum[k]
    left = s.body_left
    if left:
        e = bisect_left(cum, base + left, k + 1, end + 1) - 1
        if e > k:
            s.skip_body(cum[e] - base)
        return e
    missing = s.head_missing
    if not missing:  # the next data packet (an ACK never reaches the framer)
        return bisect_left(cum, base + 1, k + 1, end + 1) - 1
    e = bisect_left(cum, base + missing, k + 1, end + 1) - 1
    if e > k:
        start, stop = bulk.payloads()
        # The payloads of positions k..e-1, at C speed.
        s.extend_head(b"".join(map(bulk.chunk.buf.__getitem__, map(slice, start[k:e], stop[k:e]))))
    return e
