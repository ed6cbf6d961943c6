"""The flow table: routes each captured TCP packet to its connection's half-stream.

The table (compiled in ``_flows.pyx``) maps the capture key of each direction (src addr + dst addr + ports)
straight to that direction's ``HalfStream``, so the common packet costs one dict lookup and a few integer
operations in C; every other kind of entry (flows to ignore, flows being probed for Kafka, a handshake
waiting for its last ACK) is a small marker object handled off the fast path. Connections are created when a
flow is first seen on a Kafka port (or, with port detection, once a request-shaped frame is seen on it),
replaced when a new SYN reuses the same ports, and retired some time after they close so memory follows the
open connections, not the length of the capture.

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

from analyzer.tcp._flows import (
    EVICT_SHARE,
    EVICTED_NOTE,
    IGNORED,
    MAX_CONNECTIONS,
    MAX_HALF_OPEN,
    MAX_IGNORED,
    MAX_PROBES,
    MAX_SYN_REPEATS,
    PROBE_DATA_PACKETS,
    PROBE_PACKETS,
    RETIRE_AFTER_NS,
    FlowTable,
)

__all__ = ["EVICTED_NOTE", "EVICT_SHARE", "IGNORED", "MAX_CONNECTIONS", "MAX_HALF_OPEN", "MAX_IGNORED", "MAX_PROBES",
           "MAX_SYN_REPEATS", "PROBE_DATA_PACKETS", "PROBE_PACKETS", "RETIRE_AFTER_NS", "FlowTable"]
