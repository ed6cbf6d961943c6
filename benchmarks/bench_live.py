#!/usr/bin/env python3
"""kafkacap live under sustained load: the steady capture replayed onto loopback with tcpreplay, looped, while
``kafkacap live -i lo`` watches; prints the rate it kept up with, the kernel's drops and memory over time.

    sudo python benchmarks/bench_live.py [--capture bench-data/steady-x1.pcap] [--pps 20000] [--minutes 10]

Replayed packets keep their addresses and ports (the steady scenario's broker is on 9093); the recording holds
its connections whole (SYN to FIN), so each loop's connections start afresh on the same ports, as a client that
reconnects (tcpreplay's ``--unique-ip`` is not used: it gives the two directions of a connection different
addresses from the second loop on). tcpreplay paces the packets at ``--pps`` per second, looping as many times
as the duration needs. Every ``--sample`` seconds the
live process's resident memory is read from /proc; at the end the exchanges it saw (the rolling tables) are
compared with the exchanges one replay holds times the loops that completed. Needs root (packet capture and
injection) and tcpreplay (Debian's package).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, default=REPO / "bench-data" / "steady-x1.pcap")
    parser.add_argument("--port", type=int, default=9093)
    parser.add_argument("--pps", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--sample", type=float, default=10)
    parser.add_argument("--rotate", default="10s", help="live's --rotate (rows are held in memory until then)")
    args = parser.parse_args()
    if shutil.which("tcpreplay") is None:
        raise SystemExit("tcpreplay is not installed (apt-get install -y tcpreplay)")
    capture = args.capture.resolve()
    packets = int(subprocess.run(["capinfos", "-c", "-M", "-T", str(capture)], capture_output=True, text=True,
                                 check=True).stdout.split()[-1]) if shutil.which("capinfos") else None
    with tempfile.TemporaryDirectory(prefix="kafkacap-live-") as tmp:
        rolling = Path(tmp) / "rolling"
        seconds = args.minutes * 60
        live = subprocess.Popen([sys.executable, "-m", "analyzer.cli", "live", "-i", "lo", "--port", str(args.port),
                                 "--no-screen", "--write", str(rolling), "--rotate", args.rotate, "--duration",
                                 str(seconds + 30)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(3)
        loops = max(1, int(seconds * args.pps / packets) + 1) if packets else 1000
        started = time.monotonic()
        replay = subprocess.Popen(["tcpreplay", "-i", "lo", f"--pps={args.pps}", f"--loop={loops}", str(capture)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        samples = []
        while time.monotonic() - started < seconds and replay.poll() is None:
            time.sleep(args.sample)
            samples.append((time.monotonic() - started, rss_mb(live.pid)))
            print(f"{samples[-1][0]:7.0f} s  RSS {samples[-1][1]:7.1f} MB", flush=True)
        replay.send_signal(signal.SIGINT)
        replay_out, _ = replay.communicate(timeout=30)
        elapsed = time.monotonic() - started
        time.sleep(2)
        live.send_signal(signal.SIGINT)
        out, err = live.communicate(timeout=120)
        sent = next((line for line in replay_out.splitlines() if "Actual:" in line), "").strip()
        exchanges = pq.read_table(rolling / "exchanges").num_rows if (rolling / "exchanges").exists() else 0
    print(f"\ntcpreplay: {sent}")
    print(f"live: {out.strip().splitlines()[-1] if out.strip() else err.strip()[-300:]}")
    print(f"exchanges in the rolling tables: {exchanges:,} ({exchanges / elapsed:,.0f}/s over {elapsed:.0f} s)")
    if samples:
        shown = ", ".join(f"{mb:.0f} MB at {at:.0f} s" for at, mb in samples[::max(1, len(samples) // 6)])
        print(f"RSS: {shown}; last {samples[-1][1]:.0f} MB, max {max(mb for _, mb in samples):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
