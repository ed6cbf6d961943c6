#!/usr/bin/env python3
"""Wall time and peak memory of ``kafkacap show`` on the shapes that grew with the capture: a connection of a
million pipelined tiny exchanges (``show --frame``), and one Metadata request naming eight million empty
topics (a body of millions of entries). Each run is a child process; its peak RSS comes from wait4.

    python benchmarks/bench_show.py [--runs 3] [--scale 1.0] [--keep DIR]

The captures are written first (tests/hostile.py's packet writer), ``--scale`` times the issue's sizes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.craft import request, response  # noqa: E402
from tests.hostile import Conn, PcapWriter  # noqa: E402


def pipelined(path: Path, count: int) -> int:
    """``count`` ApiVersions v0 requests pipelined a hundred to a packet, then their answers; returns the
    packet number of the requests of the middle hundred."""
    out = PcapWriter(path)
    c = Conn(out, 40001).handshake()
    for start in range(0, count, 100):
        c.send(True, b"".join(request(18, 0, corr, None) for corr in range(start, start + 100)))
    for start in range(0, count, 100):
        c.send(False, b"".join(response(corr, b"\x00" * 6) for corr in range(start, start + 100)))
    out.close()
    return 3 + count // 200


def many_topics(path: Path, topics: int) -> int:
    """Three small Metadata exchanges, then one whose request names ``topics`` empty topics; returns a packet
    of that request."""
    out = PcapWriter(path)
    c = Conn(out, 40002).handshake()
    for corr in range(1, 4):
        c.exchange(request(3, 1, corr, "m", struct.pack(">i", 0)), response(corr, b"\x00" * 12))
    c.exchange(request(3, 1, 4, "m", struct.pack(">i", topics) + b"\x00\x00" * topics), response(4, b"\x00" * 12))
    out.close()
    return 12


def run(args: list[str]) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "analyzer.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write the captures here and keep them")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-show-"))
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    count = int(1_000_000 * args.scale) // 100 * 100
    packet = pipelined(folder / "pipelined.pcap", count)
    cases.append((f"{count:,} pipelined exchanges, show --frame", ["show", str(folder / "pipelined.pcap"),
                                                                    "--frame", str(packet)]))
    topics = int(8_000_000 * args.scale)
    packet = many_topics(folder / "topics.pcap", topics)
    cases.append((f"Metadata of {topics:,} topics, show --frame", ["show", str(folder / "topics.pcap"),
                                                                   "--frame", str(packet)]))
    cases.append((f"Metadata of {topics:,} topics, show --json", ["show", str(folder / "topics.pcap"),
                                                                  "--frame", str(packet), "--json"]))
    print(f"{'case':48} {'wall s (median)':>16} {'peak RSS MB (max)':>18}  exit")
    for name, cmd in cases:
        results = [run(cmd) for _ in range(args.runs)]
        print(f"{name:48} {statistics.median(r[0] for r in results):16.2f} {max(r[1] for r in results):18.0f}"
              f"  {sorted({r[2] for r in results})}")


if __name__ == "__main__":
    main()
