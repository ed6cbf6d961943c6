# cython: language_level=3
"""The flow table's bulk path: a chunk of packets in columns, handled a connection at a time.

Most packets of a Kafka capture change nothing but counters: an ACK for bytes already seen, a segment in
the middle of a frame body or of a frame head being collected. Here one pass over a chunk's columns finds
that out for all its packets, and the walk over them only visits the packets that matter:

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

Compiled: everything is C over typed views of the chunk's columns (numpy arrays, from the capture layer): one
pass in packet order decides which packets are regular and what each direction's sequence numbers would be; the
walk over connections, runs and the packets a framer must read bisects on the running byte counts, counts bytes
off or collects heads through the byte sinks' declared interface (``dissectors/sink.pxd``), and hands the
irregular packets to the flow table's per-packet step without building packet tuples.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t

import numpy as np

from analyzer.tcp.flows cimport FlowTable
from analyzer.tcp.reassembly cimport ACK, HOLDING, HalfStream
from dissectors.sink cimport ByteSink

from analyzer.capture.chunks import number_keys
from analyzer.capture.linklayer import NO_PAYLOAD
from analyzer.tcp.flows import IGNORED
from analyzer.tcp.keys import reverse_key
from analyzer.tcp.shards import work_per_key

__all__ = ["feed_chunk"]

cdef enum:
    PER_PACKET_STEP = 8  # packets fed one by one before checking again whether a connection can go back to bulk
    PREFETCH_BYTES = 512  # of a payload, asked for ahead of its read: a request's header and the start of its body

cdef object _IGNORED = IGNORED
# Sequence arithmetic modulo 2^32, in C: a bare literal past a C int is a Python int, and would make every packet's
# step Python arithmetic.
cdef int64_t MASK32 = 0xFFFFFFFF
cdef int64_t HALF32 = 0x80000000

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define bulk_prefetch(p) __builtin_prefetch(p)
    #else
    #define bulk_prefetch(p) ((void)0)
    #endif
    """
    void bulk_prefetch(const void* p) noexcept nogil


def feed_chunk(FlowTable table not None, chunk) -> None:
    """Feed one chunk to ``table``; leaves its clock where the per-packet loop would."""
    if chunk.tuples is not None:
        table.feed(chunk.tuples)
    elif len(chunk):
        _Bulk(table, chunk).feed()
    if chunk.last_frame:
        table.skipped_to(chunk.last_frame, chunk.last_ts)


cdef inline Py_ssize_t bisect_left(const int64_t[::1] a, int64_t x, Py_ssize_t lo, Py_ssize_t hi) noexcept:
    """The first index in [lo, hi) whose value is >= x (hi if none); a[lo:hi] is sorted and within a."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline const int64_t[::1] _int64(array):
    return np.ascontiguousarray(array, dtype=np.int64)


cdef class _Bulk:
    """One chunk in columns: the regularity of every packet and, per direction (flow key), its packets in
    order with running byte counts and predicted sequence numbers.

    Packets are also kept sorted by flow key ("sorted positions"): one direction's packets are then a
    contiguous, time-ordered slice, ``lo[k]:lo[k + 1]`` for key number k.
    """

    cdef FlowTable table
    cdef list keys, reverse
    cdef Py_ssize_t n, count
    cdef int64_t first_frame
    cdef bint renumbered  # some packets (of ignored flows) were left out: ``frames`` holds the kept ones' numbers
    # Per kept packet (chunk index): its columns, key number and regularity.
    cdef const int64_t[::1] frames, ts, seq, ack, flags, start, stop, seg_len, key_of
    cdef const uint8_t[::1] irregular
    # Per key number: its packets' sorted positions, its state at the chunk's start and its peer's.
    cdef const int64_t[::1] lo, next0, peer_next0
    # Per sorted position: the chunk index, the next sequence number after it, the bytes before it.
    cdef const int64_t[::1] order, after, cum
    cdef object buf
    cdef Py_buffer view
    cdef bint viewing

    def __cinit__(self):
        self.viewing = False

    def __dealloc__(self):
        if self.viewing:
            PyBuffer_Release(&self.view)

    def __init__(self, FlowTable table, chunk):
        cdef Py_ssize_t k
        cdef HalfStream h
        self.table = table
        n = len(chunk)
        keys, inverse = number_keys(chunk.keys)  # flow keys to small integers
        self.keys = keys
        key_index = {key: i for i, key in enumerate(keys)}
        flows = table.flows
        count = len(keys)
        self.count = count
        self.reverse = reverse = [reverse_key(key) for key in keys]
        plan = table.shards
        if plan is not None:
            if plan.balance:  # decided on every packet of the chunk, as in every process
                plan.plan_chunk(keys, reverse, work_per_key(inverse, count, chunk.flags, chunk.seg_len))
            # Flows first seen in this chunk that another shard handles are marked now, as their first packet
            # would have them marked, so that their packets leave the columns below with the others'.
            for k in range(count):
                key = keys[k]
                if key not in flows and reverse[k] not in flows and not plan.owns(key, reverse[k]):
                    table._ignore(key, reverse[k])
        ts, seq, ack, flags, start, stop, seg_len = (chunk.ts, chunk.seq, chunk.ack, chunk.flags, chunk.start,
                                                     chunk.stop, chunk.seg_len)
        # Packets of ignored flows (another shard's connections, other ports) leave the columns at once.
        self.first_frame = chunk.first_frame
        ignored = [flows.get(key) is IGNORED for key in keys]
        if any(ignored):
            kept = np.flatnonzero(~np.asarray(ignored)[inverse])
            self.renumbered = True
            self.frames = _int64(kept + chunk.first_frame)
            inverse = inverse[kept]
            ts, seq, ack, flags = ts[kept], seq[kept], ack[kept], flags[kept]
            start, stop, seg_len = start[kept], stop[kept], seg_len[kept]
            n = len(kept)
        self.n = n
        self.ts, self.seq, self.ack, self.flags = _int64(ts), _int64(seq), _int64(ack), _int64(flags)
        self.start, self.stop, self.seg_len = _int64(start), _int64(stop), _int64(seg_len)
        self.key_of = _int64(inverse)
        # Each key's direction state at the chunk's start, and its peer's.
        next0 = np.full(count, -1, np.int64)
        peer_next0 = np.full(count, -1, np.int64)
        peer = np.full(count, -1, np.int64)
        for k in range(count):
            obj = flows.get(keys[k])
            if type(obj) is HalfStream and (<HalfStream>obj).peer is not None:
                h = <HalfStream>obj
                next0[k] = h.next_seq
                peer_next0[k] = h.peer.next_seq
            peer[k] = key_index.get(reverse[k], -1)
        self.next0 = next0
        self.peer_next0 = peer_next0

        self._classify(peer)
        self.buf = chunk.buf
        PyObject_GetBuffer(self.buf, &self.view, PyBUF_SIMPLE)
        self.viewing = True

    cdef _classify(self, const int64_t[::1] peer):
        """Sort the packets by key (stably: each direction's in packet order) and decide each one's regularity in
        one pass in packet order, following every direction's next sequence number as if every packet before
        were regular: ``before`` a packet, after it, and its peer's when it was sent (the peer's last packet
        before it, else the peer's state at the chunk's start)."""
        cdef Py_ssize_t n = self.n, count = self.count, i, k, p, pos
        cdef int64_t seg, flag, before, edge, ahead
        cdef bint odd
        lo_array = np.zeros(count + 1, np.int64)
        order_array = np.empty(n, np.int64)
        after_array = np.empty(n, np.int64)
        cum_array = np.empty(n + 1, np.int64)
        irregular_array = np.empty(n, np.uint8)
        running_array = np.array(self.next0, np.int64)  # each key's next sequence number so far
        seen_array = np.zeros(count, np.uint8)  # whether the key has had a packet so far
        cdef int64_t[::1] lo = lo_array, order = order_array, after = after_array, cum = cum_array
        cdef int64_t[::1] running = running_array
        cdef uint8_t[::1] irregular = irregular_array, seen = seen_array
        cdef int64_t[::1] after_at = np.empty(n, np.int64)  # by packet, before sorting
        cdef int64_t[::1] fill
        for i in range(n):
            k = self.key_of[i]
            seg = self.seg_len[i]
            flag = self.flags[i]
            before = running[k]
            p = peer[k]
            edge = running[p] if p >= 0 and seen[p] else self.peer_next0[k]
            odd = (flag & 0x07) != 0
            if seg > 0:
                if self.seq[i] != before or self.stop[i] - self.start[i] != seg:
                    odd = True
                running[k] = (self.seq[i] + seg) & MASK32
            if flag & ACK and edge >= 0:
                ahead = (self.ack[i] - edge) & MASK32
                if ahead != 0 and ahead < HALF32:
                    odd = True
            seen[k] = 1
            after_at[i] = running[k]
            irregular[i] = odd
            lo[k + 1] += 1
        for k in range(count):
            lo[k + 1] += lo[k]
        fill = lo_array[:count].copy()
        for i in range(n):
            k = self.key_of[i]
            pos = fill[k]
            fill[k] = pos + 1
            order[pos] = i
            after[pos] = after_at[i]
        cum[0] = 0
        for pos in range(n):
            cum[pos + 1] = cum[pos] + self.seg_len[order[pos]]
        self.lo, self.order, self.after, self.cum = lo, order, after, cum
        self.irregular = irregular

    cdef inline int64_t frame(self, Py_ssize_t i):
        """The packet number of the chunk's i-th (kept) packet."""
        return self.frames[i] if self.renumbered else self.first_frame + i

    cdef inline void span(self, Py_ssize_t i, Py_ssize_t* a, Py_ssize_t* b) noexcept:
        """The i-th packet's captured payload as [a, b) in the chunk's buffer, clamped to it as a slice is."""
        cdef Py_ssize_t size = self.view.len
        a[0] = min(max(<Py_ssize_t>self.start[i], 0), size)
        b[0] = max(min(<Py_ssize_t>self.stop[i], size), a[0])

    cdef object payload(self, Py_ssize_t i):
        """A view of the i-th packet's captured payload in the chunk's buffer."""
        cdef Py_ssize_t a = 0, b = 0
        self.span(i, &a, &b)
        return self.buf[a:b]

    # -- per connection ------------------------------------------------------------------------------

    def feed(self) -> None:
        cdef Py_ssize_t i, g, k, groups_n
        cdef dict groups = {}
        cdef list keys = self.keys
        group_of_key = np.empty(self.count, np.int64)
        cdef int64_t[::1] gk = group_of_key
        for k in range(self.count):
            gk[k] = groups.setdefault(min(keys[k], self.reverse[k]), len(groups))
        groups_n = len(groups)
        # The chunk's packets grouped by connection, each group in packet order (a counting sort).
        bounds_array = np.zeros(groups_n + 1, np.int64)
        cdef int64_t[::1] bounds = bounds_array
        for i in range(self.n):
            bounds[gk[self.key_of[i]] + 1] += 1
        for g in range(groups_n):
            bounds[g + 1] += bounds[g]
        fill_array = bounds_array[:groups_n].copy()
        cdef int64_t[::1] fill = fill_array
        by_group_array = np.empty(self.n, np.int64)
        cdef int64_t[::1] by_group = by_group_array
        for i in range(self.n):
            g = gk[self.key_of[i]]
            by_group[fill[g]] = i
            fill[g] += 1
        members: list = [[] for _ in range(groups_n)]
        for k in range(self.count):
            (<list>members[gk[k]]).append(k)
        for g in range(groups_n):
            ks = <list>members[g]
            if self._all_ignored(ks):
                continue
            self._connection(by_group, bounds[g], bounds[g + 1], ks)

    cdef _connection(self, const int64_t[::1] idx, Py_ssize_t lo, Py_ssize_t hi, list ks):
        """One connection's packets (chunk indexes idx[lo:hi], in order): regular runs in bulk, the rest one
        by one."""
        cdef Py_ssize_t r = lo, j, stop
        while r < hi:
            if not self._ready(idx[r], ks):  # a few packets one by one, then look again
                stop = min(r + PER_PACKET_STEP, hi)
                self._some(idx, r, stop)
                r = stop
                if self._all_ignored(ks):
                    return  # found to be another shard's or not Kafka: the rest would be dropped anyway
                continue
            j = r
            while j < hi and not self.irregular[idx[j]]:
                j += 1
            if j > r:
                self._run(idx[r], idx[j - 1] + 1, ks)
            if j < hi:
                self._some(idx, j, j + 1)
            r = j + 1

    cdef bint _all_ignored(self, list ks) except -1:
        """Whether every key of ``ks`` is a flow the table ignores (another shard's, not Kafka)."""
        cdef dict flows = self.table.flows
        cdef Py_ssize_t k
        for k in ks:
            if flows.get(self.keys[k]) is not _IGNORED:
                return False
        return True

    cdef bint _ready(self, int64_t at, list ks) except -1:
        """Whether the connection of these keys has, before packet ``at``, the state the regularity test
        assumed (nothing held back, each direction's next sequence number as predicted) and framers to
        count off through."""
        cdef dict flows = self.table.flows
        cdef HalfStream h, half, other
        cdef Py_ssize_t k
        obj = flows.get(self.keys[<Py_ssize_t>ks[0]])
        if type(obj) is not HalfStream:
            return False
        h = <HalfStream>obj
        other = h.peer
        if other is None or not h.sink.counts_off or not other.sink.counts_off:
            return False
        for k in ks:
            obj = flows.get(self.keys[k])
            if obj is not h and obj is not other:
                return False
            half = <HalfStream>obj
            if half.state & HOLDING or half.next_seq != self._predicted(k, at):
                return False
        if len(ks) == 1:  # the other direction sent nothing in this chunk: its state must be as it was
            if other.state & HOLDING or other.next_seq != self.peer_next0[<Py_ssize_t>ks[0]]:
                return False
        return True

    cdef int64_t _predicted(self, Py_ssize_t k, int64_t at):
        """Key k's next sequence number before chunk packet ``at`` if every packet before were regular."""
        cdef Py_ssize_t lo = self.lo[k]
        cdef Py_ssize_t p = bisect_left(self.order, at, lo, self.lo[k + 1])
        return self.after[p - 1] if p > lo else self.next0[k]

    cdef _some(self, const int64_t[::1] idx, Py_ssize_t lo, Py_ssize_t hi):
        """Chunk packets idx[lo:hi] through the flow table's per-packet step, as its feed() would take them."""
        cdef FlowTable table = self.table
        cdef Py_ssize_t r, i
        cdef int64_t seg, no = table.last_frame
        ts = table.now
        for r in range(lo, hi):
            i = idx[r]
            seg = self.seg_len[i]
            no = self.frame(i)
            ts = self.ts[i]
            table._one(no, ts, self.keys[self.key_of[i]], self.seq[i], self.ack[i], <int>self.flags[i],
                       self.payload(i) if seg else NO_PAYLOAD, seg, None)
        table.now = ts
        table.last_frame = no

    cdef _run(self, int64_t first, int64_t stop, list ks):
        """The regular packets of one connection with chunk indexes in [first, stop)."""
        cdef ByteSink sb = None, sc = None
        cdef Py_ssize_t kb = 0, endb = 0, kc = 0, endc = 0, a, b, k, lo, hi
        cdef int64_t nbytes, ib, ic
        cdef HalfStream half
        cdef const int64_t[::1] order = self.order
        for k in ks:
            lo, hi = self.lo[k], self.lo[k + 1]
            a = bisect_left(order, first, lo, hi)
            b = bisect_left(order, stop, a, hi)
            if a == b:
                continue
            half = <HalfStream>self.table.flows[self.keys[k]]
            nbytes = self.cum[b] - self.cum[a]
            half.take_run(b - a, self.ts[order[b - 1]], nbytes, self.after[b - 1])
            if nbytes:
                if sb is None:
                    sb, kb, endb = <ByteSink>half.sink, a, b
                else:
                    sc, kc, endc = <ByteSink>half.sink, a, b
        if sb is None:
            return
        # The framers read their packets in packet order across both directions (requests before their
        # responses); a direction with nothing to read in this run never has a next packet (-1).
        kb = self._next_event(sb, kb, endb)
        ib = order[kb] if kb < endb else -1
        ic = -1
        if sc is not None:
            kc = self._next_event(sc, kc, endc)
            ic = order[kc] if kc < endc else -1
        self._prefetch(kb + 1, endb)  # asked for once each time a direction moves on, a packet ahead
        self._prefetch(kc + 1, endc)
        while ib >= 0 or ic >= 0:
            if ic < 0 or 0 <= ib < ic:
                sb.data(self.ts[ib], self.frame(ib), self.payload(ib))
                kb = self._next_event(sb, kb + 1, endb)
                ib = order[kb] if kb < endb else -1
                self._prefetch(kb + 1, endb)
            else:
                sc.data(self.ts[ic], self.frame(ic), self.payload(ic))
                kc = self._next_event(sc, kc + 1, endc)
                ic = order[kc] if kc < endc else -1
                self._prefetch(kc + 1, endc)

    cdef inline void _prefetch(self, Py_ssize_t k, Py_ssize_t end) noexcept:
        """Ask for what reading sorted position k will need to be brought into the cache: its payload, and the
        packet columns of the position after it. The walk read the packets a chunk earlier and the positions
        jump about the chunk, so each first read otherwise waits on memory."""
        cdef Py_ssize_t i, a, b
        if k + 1 < end:
            i = self.order[k + 1]
            bulk_prefetch(&self.start[i])
            bulk_prefetch(&self.stop[i])
            bulk_prefetch(&self.ts[i])
        if k < end:
            i = self.order[k]
            a = self.start[i]
            b = min(self.stop[i], a + PREFETCH_BYTES, self.view.len)
            while 0 <= a < b:
                bulk_prefetch(<const char*>self.view.buf + a)
                a += 64

    cdef Py_ssize_t _next_event(self, ByteSink s, Py_ssize_t k, Py_ssize_t end) except -1:
        """Count off (or append to the head in progress) the packets from sorted position k on that framer
        ``s`` need not read; return the position of the next one it must read (``end`` if none)."""
        cdef const int64_t[::1] cum = self.cum
        cdef int64_t base
        cdef Py_ssize_t e, left, missing
        if k >= end:
            return end
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
            self._extend_head(s, k, e)
        return e

    cdef int _extend_head(self, ByteSink s, Py_ssize_t k, Py_ssize_t e) except -1:
        """Append the captured payloads of sorted positions k..e-1 to the head ``s`` collects, straight from the
        capture's buffer."""
        cdef Py_ssize_t p, a = 0, b = 0
        cdef const char* src = <const char*>self.view.buf
        for p in range(k, e):
            self.span(self.order[p], &a, &b)
            if b > a:
                s.extend_head_raw(src + a, b - a)
        return 0
