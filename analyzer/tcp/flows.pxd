# cython: language_level=3
"""The flow table (``flows.pyx``): what the bulk path uses of it besides its Python attributes."""

from libc.stdint cimport int64_t

from analyzer.tcp.reassembly cimport HalfStream


# Markers the table holds for flows that have no half-stream (yet).
cdef class _Ignored:
    pass


cdef class _Probe:
    cdef list packets
    cdef int sport, dport
    cdef object evidence
    cdef int guess_server_port(self)


cdef class _SynSent:
    cdef readonly bytes client_key
    cdef list packets
    cdef Py_ssize_t dropped
    cdef object last_ts


cdef class _AwaitHandshakeAck:
    cdef HalfStream half


cdef class FlowTable:
    cdef readonly frozenset ports
    cdef readonly bint detect_ports
    cdef readonly object shard, shards
    # Makes the connection of each flow taken (the pipeline's; the table knows no protocol above TCP).
    cdef readonly object connections
    # Flow key -> that direction's HalfStream, or a marker (the module's _Ignored, _Probe, _SynSent,
    # _AwaitHandshakeAck).
    cdef readonly dict flows
    # Keys of flows marked IGNORED: a reader given this set drops their packets before they get here.
    cdef readonly set ignored
    cdef public list open
    cdef public list connection_rows
    cdef public object now
    cdef public int64_t last_frame
    cdef public Py_ssize_t probed_out, max_connections, max_probes, max_half_open, max_ignored
    cdef readonly dict half_open
    cdef public Py_ssize_t probes, evicted, probes_evicted
    cdef readonly dict ports_found, ports_not_decoded
    cdef readonly object probe

    # One packet through the per-packet path (``pkt``: its tuple when the caller has it, else None).
    cdef _one(self, int64_t no, object ts, object key, int64_t seq, int64_t ack, int flags, object payload,
              int64_t seg_len, object pkt)

    # The table's own steps (declared here because Cython requires it; not for other layers).
    cdef _slow(self, object h, int64_t no, object ts, object key, int64_t seq, int64_t ack, int flags,
               object payload, int64_t seg_len, object pkt)
    cdef _ignore(self, key, rev)
    cdef _forget_ignored(self)
    cdef bint _is_new_connection(self, HalfStream h, conn, int64_t seq, int flags) except -1
    cdef _replace(self, conn, ts)
    cdef HalfStream _new_flow(self, tuple pkt)
    cdef _hold_syn(self, bytes key, bytes rev, tuple syn)
    cdef tuple _syn_only_row(self, _SynSent marker, str ended)
    cdef _promote(self, _SynSent marker, object pkt)
    cdef HalfStream _open(self, conn_id, ts, bytes client_key, bint sender_is_client)
    cdef _probe(self, _Probe probe, tuple pkt)
    cdef _give_up(self, _Probe probe, key)
    cdef _not_decoded(self, _Probe probe)
    cdef _count_not_decoded(self, int port, Py_ssize_t flows, Py_ssize_t packets, Py_ssize_t nbytes, bint tls)
    cdef _take_probe(self, _Probe probe, bytes client_key)
    cdef _take_port(self, int port, str reason, no)
    cdef _evict_connections(self)
    cdef _evict_half_open(self)
    cdef _evict_probes(self)
