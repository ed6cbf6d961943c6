#!/usr/bin/env python3
"""kafkacap live under sustained load: a long capture replayed onto loopback with tcpreplay while
``kafkacap live -i lo --write DIR`` watches; prints the rate it kept up with, the kernel's drops, the exchanges it
found against those expected, and its memory over time.

    sudo python benchmarks/bench_live.py [--pps 25000] [--minutes 10] [--rotate 60s] [--sample 10]
    sudo python benchmarks/bench_live.py --capture FILE --loops 3     # any capture, replayed as it is

The default capture is the steady one (``benchmarks/bench_real.py``: real clients against Tansu, about 96 k
packets over a minute) replicated one copy after another (copy k on its own addresses 127.k.0.1, as
``bench_real.replicate`` moves them, and shifted in time past the copy before), as many copies as ``--minutes`` at
``--pps`` need; cached in bench-data/ as steady-seq-xN.pcap. Copies laid end to end make a run of any length
whose connections never collide, unlike a capture replayed in a loop (its connections repeat with the same
sequence numbers, read as retransmissions; tcpreplay's ``--unique-ip`` gives a connection's two directions
different addresses from the second loop on). tcpreplay paces the packets at ``--pps`` per second.

Every ``--sample`` seconds the live process's resident memory is read from /proc. At the end the exchanges in
the rolling tables are compared with those ``kafkacap export`` finds in one copy, times the copies. Needs root
(packet capture and injection) and tcpreplay (Debian's package).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real import DATA, PORT, STEADY, moved, read_pcap, record_steady  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GAP_NS = 1_000_000_000  # between one copy's last packet and the next one's first


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def prioritised(pid: int, nice: int) -> None:
    """Give the scheduling group of ``pid``'s session (an autogroup) the niceness ``nice``, where there is one."""
    group = Path(f"/proc/{pid}/autogroup")
    if nice and group.exists():
        group.write_text(str(nice))


def sequential(source: Path, copies: int, folder: Path = DATA) -> tuple[Path, int]:
    """``folder``/STEM-seq-xN.pcap: ``copies`` copies of ``source`` one after another, each on its own addresses
    (cached by that name); (path, packets)."""
    header, nano, packets = read_pcap(source)
    target = folder / f"{source.stem}-seq-x{copies}.pcap"
    if target.exists():
        return target, len(packets) * copies
    span = packets[-1][0] - packets[0][0] + GAP_NS
    print(f"laying {copies} copies of {source.name} ({len(packets):,} packets) end to end ...", flush=True)
    record = struct.Struct("<IIII")
    partial = target.with_suffix(".partial")
    with open(partial, "wb", buffering=1 << 22) as out:
        out.write(header)
        for k in range(copies):
            shift = k * span
            for ts, frame in packets:
                frame = moved(frame, k)
                sec, frac = divmod(ts + shift, 1_000_000_000)
                out.write(record.pack(sec, frac if nano else frac // 1000, len(frame), len(frame)))
                out.write(frame)
    partial.rename(target)
    return target, len(packets) * copies


def exchanges_in(capture: Path, port: int) -> int:
    """The exchanges ``kafkacap export`` finds in a capture file."""
    with tempfile.TemporaryDirectory(prefix="kafkacap-expected-") as tmp:
        subprocess.run([sys.executable, "-m", "analyzer.cli", "export", str(capture), "-o", f"{tmp}/out",
                        "--port", str(port), "--no-progress", "--jobs", "1"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        return pq.read_metadata(f"{tmp}/out/exchanges.parquet").num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="replay this capture as it is (default: the steady "
                        "capture, copies end to end)")
    parser.add_argument("--loops", type=int, default=1, help="with --capture: tcpreplay's --loop")
    parser.add_argument("--copies", type=int, help="copies of the steady capture (default: enough for --minutes)")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--pps", type=int, default=25_000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--sample", type=float, default=10, help="seconds between RSS samples")
    parser.add_argument("--rotate", default="60s", help="live's --rotate")
    parser.add_argument("--nice", type=int, default=0, help="run live and tcpreplay at this niceness, each in its "
                        "own session whose scheduling group gets it too (with the kernel's autogroups, a process's "
                        "own niceness weighs only against its session's): a negative one on a machine whose other "
                        "jobs would take their CPU")
    parser.add_argument("--json", type=Path, help="write the figures (and the whole RSS series) here")
    args = parser.parse_args()
    if shutil.which("tcpreplay") is None:
        raise SystemExit("tcpreplay is not installed (apt-get install -y tcpreplay)")
    if args.capture is not None:
        capture = args.capture.resolve()
        per_copy = exchanges_in(capture, args.port)
        copies = args.loops
        packets = None
    else:
        source = record_steady() if not STEADY.exists() else STEADY
        packets_per_copy = len(read_pcap(source)[2])
        copies = args.copies or max(1, -(-int(args.minutes * 60 * args.pps) // packets_per_copy))
        capture, packets = sequential(source, copies)
        per_copy = exchanges_in(source, args.port)
    expected = per_copy * copies
    with tempfile.TemporaryDirectory(prefix="kafkacap-live-") as tmp:
        rolling = Path(tmp) / "rolling"
        planned = (packets or 0) / args.pps if packets else args.minutes * 60
        niced = ["nice", "-n", str(args.nice)] if args.nice else []
        live = subprocess.Popen([*niced, sys.executable, "-m", "analyzer.cli", "live", "-i", "lo", "--port",
                                 str(args.port), "--no-screen", "--write", str(rolling), "--rotate", args.rotate,
                                 "--duration", str(planned + 120)], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        prioritised(live.pid, args.nice)
        time.sleep(3)
        started = time.monotonic()
        replay = subprocess.Popen([*niced, "tcpreplay", "-i", "lo", f"--pps={args.pps}", f"--loop={args.loops}",
                                   str(capture)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        prioritised(replay.pid, args.nice)
        samples: list[tuple[float, float]] = []
        next_sample = started + args.sample
        while replay.poll() is None:
            time.sleep(min(1.0, max(0.0, next_sample - time.monotonic())))
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - started, rss_mb(live.pid)))
                print(f"{samples[-1][0]:7.0f} s  RSS {samples[-1][1]:7.1f} MB", flush=True)
                next_sample += args.sample
        replay_out, _ = replay.communicate(timeout=30)
        elapsed = time.monotonic() - started
        time.sleep(3)  # the last responses reach the analysis
        samples.append((time.monotonic() - started, rss_mb(live.pid)))
        live.send_signal(signal.SIGINT)
        out, err = live.communicate(timeout=300)
        found = pq.read_table(rolling / "exchanges", columns=["api_key"]).num_rows \
            if (rolling / "exchanges").exists() else 0
        parts = len(list((rolling / "exchanges").glob("part-*.parquet"))) if found else 0
    actual = next((line for line in replay_out.splitlines() if "Actual:" in line), "").strip()
    rated = next((line for line in replay_out.splitlines() if "Rated:" in line), "").strip()
    sent = re.search(r"Actual: (\d+) packets \((\d+) bytes\)", actual)
    sent_packets, sent_bytes = (int(sent.group(1)), int(sent.group(2))) if sent else (None, None)
    drops = re.search(r"kernel drops ([\d,]+|unknown)", out)
    figures = {
        "capture": capture.name, "copies": copies, "pps_asked": args.pps, "rotate": args.rotate, "nice": args.nice,
        "seconds": round(elapsed, 1), "packets_sent": sent_packets,
        "packets_per_s": round(sent_packets / elapsed) if sent_packets else None,
        "wire_mb_per_s": round(sent_bytes / elapsed / 1e6, 2) if sent_bytes else None,
        "exchanges_found": found, "exchanges_expected": expected,
        "exchanges_per_s": round(found / elapsed), "kernel_drops": drops.group(1) if drops else None,
        "parts": parts, "rss_mb": [[round(at), round(mb, 1)] for at, mb in samples],
    }
    print(f"\ntcpreplay: {actual}\n           {rated}")
    print(f"live: {out.strip().splitlines()[-1] if out.strip() else err.strip()[-300:]}")
    print(f"kernel drops: {figures['kernel_drops']}")
    print(f"exchanges in the rolling tables: {found:,} of {expected:,} expected ({per_copy:,} per copy x {copies}); "
          f"{found / elapsed:,.0f}/s over {elapsed:.0f} s, {parts} parts")
    if sent_bytes:
        print(f"rate: {figures['packets_per_s']:,} packets/s, {figures['wire_mb_per_s']} MB/s on the wire")
    if samples:
        peak = max(mb for _, mb in samples)
        print(f"RSS: first {samples[0][1]:.0f} MB (at {samples[0][0]:.0f} s), max {peak:.0f} MB, "
              f"last {samples[-1][1]:.0f} MB (at {samples[-1][0]:.0f} s)")
        print("RSS series (MB): " + ", ".join(f"{mb:.0f}" for _, mb in samples))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if live.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
