#!/usr/bin/env python3
"""Memory an idle connection holds in the flow table: the bytes per connection a long capture pays for each
client that connected, talked a little and went quiet.

    python benchmarks/bench_idle_connections.py [--connections 20000]

Each connection completes a handshake and one Heartbeat exchange, then stays open and silent. The script
counts what Python's allocators hold (tracemalloc: objects and buffers, compiled ones included) with the flow
table at N/2 and at N connections, rows taken away, and prints the difference per connection, with the largest
allocation sites.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.pipeline.analyze import Options, flow_table  # noqa: E402
from analyzer.tcp.flows import FlowTable  # noqa: E402
from tests.craft import heartbeat_request, heartbeat_response  # noqa: E402

SYN, PSH, ACK = 0x02, 0x08, 0x10
BROKER = bytes([10, 0, 0, 2])


def open_connections(table: FlowTable, first: int, count: int, state: list[int]) -> None:
    """``count`` connections from ports/addresses numbered ``first`` on: handshake, one exchange, then idle."""
    no, ts = state
    packets = []
    for i in range(first, first + count):
        client = bytes([10, 1 + (i >> 16), (i >> 8) & 255, i & 255])
        port = 1024 + i % 60000
        up = client + BROKER + struct.pack(">HH", port, 9092)
        down = BROKER + client + struct.pack(">HH", 9092, port)
        request, response = heartbeat_request(1), heartbeat_response(1)
        c, b = 1000, 9000
        for key, seq, ack, flags, data in ((up, c, 0, SYN, b""), (down, b, c + 1, SYN | ACK, b""),
                                           (up, c + 1, b + 1, ACK, b""), (up, c + 1, b + 1, PSH | ACK, request),
                                           (down, b + 1, c + 1 + len(request), PSH | ACK, response),
                                           (up, c + 1 + len(request), b + 1 + len(response), ACK, b"")):
            no += 1
            ts += 1_000
            packets.append((no, ts, key, seq, ack, flags, memoryview(data), len(data)))
    table.feed(packets)
    state[:] = [no, ts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=20_000)
    args = parser.parse_args()
    half = args.connections // 2
    table = flow_table(Options(), max_connections=args.connections + 200)
    state = [0, 1_700_000_000 * 10**9]
    open_connections(table, 0, 100, state)  # first-use allocations (caches, plans) out of the way
    table.connections.out.exchanges.clear()
    tracemalloc.start()
    open_connections(table, 100, half, state)
    table.connections.out.exchanges.clear()
    at_half = tracemalloc.take_snapshot()
    open_connections(table, 100 + half, args.connections - half, state)
    table.connections.out.exchanges.clear()
    at_full = tracemalloc.take_snapshot()
    assert len(table.open) == args.connections + 100, len(table.open)
    added = args.connections - half
    stats = at_full.compare_to(at_half, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"{len(table.open):,} idle connections open; {total / added:,.0f} bytes per connection")
    for s in stats[:8]:
        frame = s.traceback[0]
        print(f"  {s.size_diff / added:8,.0f} B  {s.count_diff / added:5.1f} blocks  "
              f"{Path(frame.filename).name}:{frame.lineno}")


if __name__ == "__main__":
    main()
