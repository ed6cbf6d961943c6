#!/usr/bin/env python3
"""kafkacap against tshark on real client traffic: the steady capture, replicated to a few hundred MB.

    python benchmarks/bench_real.py [--size-mb 320] [--repeat 3] [--capture FILE] [--json FILE]

The capture: ``sample_pcaps/record.py --only steady`` (kafka-python, confluent-kafka and aiokafka against Tansu
for about a minute: many small Produce requests, a consumer group fetching and committing), recorded once into
bench-data/steady/ unless ``--capture`` names one. Replicated: copy k of the packets has its IPv4 addresses
moved from 127.0.0.1 to 127.k.0.1 (its own connections, to its own broker address; IP header checksums fixed,
TCP checksums left as they are: neither tool checks them) and its times shifted by k x 7 ms, and all copies
are merged in time order, as concurrent clients would be; classic pcap, cached in bench-data/.

Timed in one run, interleaved (tshark, then each kafkacap mode, ``--repeat`` times): ``tshark -r CAP -d
tcp.port==P,kafka -Y kafka -T fields -e kafka.correlation_id -e kafka.api_key`` and ``kafkacap export CAP -o
DIR --port P --no-progress`` with ``--jobs 1``, ``--jobs 2`` and ``--headers-only --jobs 1``, the kafkacap of this
checkout (``python -m analyzer.cli``), and with ``--baseline DIR`` another checkout's ``--jobs 1``. Printed
per mode: min and median wall seconds, peak RSS (the process tree, sampled from /proc), the ratio tshark /
kafkacap of the medians, exchanges (rows of exchanges.parquet), and wall time per exchange and per packet.
tshark's Kafka frame count is printed as a cross-check.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench-data"
STEADY = DATA / "steady" / "steady.pcap"
PORT = 9093  # the steady scenario's broker port
SHIFT_NS = 7_000_000
LOOPBACK = bytes([127, 0, 0, 1])


def record_steady() -> Path:
    if not STEADY.exists():
        print("recording the steady scenario (about 70 s) ...", flush=True)
        subprocess.run([sys.executable, "-m", "sample_pcaps.record", "--only", "steady", "--out",
                        str(STEADY.parent)], cwd=REPO, check=True)
    return STEADY


def read_pcap(path: Path) -> tuple[bytes, bool, list[tuple[int, bytes]]]:
    """(global header, nanosecond?, [(time in ns, record data)])."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise SystemExit(f"{path}: not a little-endian classic pcap")
    nano = magic == 0xA1B23C4D
    linktype = struct.unpack_from("<I", data, 20)[0]
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}, the replicator handles Ethernet only")
    packets, pos = [], 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, pos)
        packets.append((sec * 1_000_000_000 + frac * (1 if nano else 1000), data[pos + 16:pos + 16 + caplen]))
        pos += 16 + caplen
    return data[:24], nano, packets


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def moved(frame: bytes, copy: int) -> bytes:
    """The frame with 127.0.0.1 as source or destination moved to 127.copy.0.1 (IPv4 over Ethernet)."""
    if copy == 0 or len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return frame
    ihl = (frame[14] & 0x0F) * 4
    header = bytearray(frame[14:14 + ihl])
    address = bytes([127, copy % 256, copy // 256, 1])
    for at in (12, 16):
        if header[at:at + 4] == LOOPBACK:
            header[at:at + 4] = address
    header[10:12] = b"\0\0"
    header[10:12] = struct.pack(">H", _ip_checksum(bytes(header)))
    return frame[:14] + bytes(header) + frame[14 + ihl:]


def replicate(source: Path, size_mb: float) -> Path:
    size = source.stat().st_size
    copies = max(1, -(-int(size_mb * 1e6) // size))
    target = DATA / f"{source.stem}-x{copies}.pcap"
    if target.exists():
        return target
    header, nano, packets = read_pcap(source)
    print(f"replicating {source.name} ({size / 1e6:.1f} MB, {len(packets):,} packets) x{copies} ...", flush=True)

    def copy_of(k: int):
        for ts, frame in packets:
            yield ts + k * SHIFT_NS, k, frame

    partial = target.with_suffix(".partial")
    with open(partial, "wb") as out:
        out.write(header)
        for ts, k, frame in heapq.merge(*(copy_of(k) for k in range(copies))):
            frame = moved(frame, k)
            sec, frac = divmod(ts, 1_000_000_000)
            out.write(struct.pack("<IIII", sec, frac if nano else frac // 1000, len(frame), len(frame)))
            out.write(frame)
    partial.rename(target)
    return target


def kafkacap_command(capture: Path, out: Path, flags: list[str], tree: Path = REPO) -> list[str]:
    """This checkout's kafkacap, or another's (``env -C`` runs it there: ``-m`` puts the working folder first)."""
    return ["env", "-C", str(tree), sys.executable, "-m", "analyzer.cli", "export", str(capture), "-o", str(out),
            "--port", str(PORT), "--no-progress", *flags]


def tshark_command(capture: Path) -> list[str]:
    return ["tshark", "-r", str(capture), "-d", f"tcp.port=={PORT},kafka", "-Y", "kafka", "-T", "fields",
            "-e", "kafka.correlation_id", "-e", "kafka.api_key"]


def packets_in(path: Path) -> int:
    return len(read_pcap(path)[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="a steady capture (default: record one)")
    parser.add_argument("--size-mb", type=float, default=320)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="jobs1,jobs2,headers-only")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of an older commit) "
                        "whose kafkacap export --jobs 1 runs interleaved with the others, as 'baseline'")
    args = parser.parse_args()
    if shutil.which("tshark") is None:
        raise SystemExit("tshark is not installed (apt-get install -y tshark)")
    os.chdir(REPO)  # python -m analyzer.cli runs this checkout
    capture = replicate(args.capture or record_steady(), args.size_mb)
    packets = packets_in(capture)
    modes = {"jobs1": ["--jobs", "1"], "jobs2": ["--jobs", "2"], "headers-only": ["--headers-only", "--jobs", "1"]}
    chosen = [m for m in args.modes.split(",") if m]
    trees = {mode: REPO for mode in chosen}
    if args.baseline:
        modes["baseline"] = modes["jobs1"]
        trees["baseline"] = args.baseline.resolve()
        chosen.append("baseline")
    walls: dict[str, list[float]] = {"tshark": []}
    peaks: dict[str, float] = {}
    exchanges: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="kafkacap-real-") as tmp:
        frames = subprocess.run(tshark_command(capture), capture_output=True, text=True, check=True).stdout.count("\n")
        for _ in range(args.repeat):
            wall, tree, _ = measure(tshark_command(capture))
            walls["tshark"].append(wall)
            peaks["tshark"] = max(peaks.get("tshark", 0), tree)
            for mode in chosen:
                out = Path(tmp) / mode
                shutil.rmtree(out, ignore_errors=True)
                wall, tree, _ = measure(kafkacap_command(capture, out, modes[mode], trees[mode]))
                walls.setdefault(mode, []).append(wall)
                peaks[mode] = max(peaks.get(mode, 0), tree)
                exchanges[mode] = pq.read_metadata(out / "exchanges.parquet").num_rows
                if not exchanges[mode]:
                    raise SystemExit(f"kafkacap {mode} found no exchanges in {capture}")
    size = capture.stat().st_size / 1e6
    print(f"\n{capture.name}: {size:.0f} MB, {packets:,} packets; tshark lists {frames:,} Kafka frames; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'':14} {'min s':>7} {'median s':>9} {'peak MB':>8} {'x tshark':>9} {'exchanges':>10} "
          f"{'us/exchange':>12} {'us/packet':>10}")
    base = statistics.median(walls["tshark"])
    figures = {"capture": capture.name, "mb": size, "packets": packets, "tshark_frames": frames, "modes": {}}
    for mode, times in walls.items():
        median = statistics.median(times)
        n = exchanges.get(mode)
        per_exchange = f"{median / n * 1e6:12.2f}" if n else f"{'':12}"
        print(f"{mode:14} {min(times):7.2f} {median:9.2f} {peaks[mode]:8.0f} {base / median:9.2f} "
              f"{n or '':>10} {per_exchange} {median / packets * 1e6:10.2f}")
        figures["modes"][mode] = {"walls": times, "median": median, "peak_mb": peaks[mode],
                                  "ratio": base / median, "exchanges": n}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
