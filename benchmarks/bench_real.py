#!/usr/bin/env python3
"""kafkacap against tshark on real client traffic: the steady capture, replicated to a few hundred MB.

    python benchmarks/bench_real.py [--size-mb 320] [--repeat 3] [--capture FILE] [--json FILE]

The capture: ``sample_pcaps/record.py --only steady`` (kafka-python, confluent-kafka and aiokafka against Tansu
for about a minute: many small Produce requests, a consumer group fetching and committing), recorded once into
bench-data/steady/ unless ``--capture`` names one. Replicated: copy k of the packets has its IPv4 addresses
moved from 127.0.0.1 to 127.k.0.1 (its own connections, to its own broker address; IP header checksums fixed,
TCP checksums left as they are: neither tool checks them) and its times shifted by k x 7 ms, and all copies
are merged in time order, as concurrent clients would be (rather than one after another: the analysis then
holds eleven times the connections at once, as a busier capture would); classic pcap, cached in bench-data/.

Timed in one run, interleaved (tshark, then each kafkacap mode, ``--repeat`` times): ``tshark -r CAP -d
tcp.port==P,kafka -Y kafka -T fields -e kafka.correlation_id -e kafka.api_key`` and ``kafkacap export CAP -o DIR
--port P --no-progress`` with ``--jobs 1``, ``--jobs 2`` and ``--headers-only --jobs 1``, the kafkacap of this
checkout (``python -m analyzer.cli``), and with ``--baseline DIR`` another checkout's ``--jobs 1`` (each
checkout's modules compiled to bytecode first, as an installed package has them). Printed per mode: min and median
wall seconds, peak RSS (the process tree, sampled from /proc), the ratio tshark / kafkacap of the mins and of the
medians, exchanges (rows of exchanges.parquet), and wall time per exchange and per packet (medians), then whether
issue 17's targets are met. Cross-check: the Kafka frames tshark lists (correlation ids, requests and responses)
against kafkacap's (requests plus answered responses of its exchanges).
"""

from __future__ import annotations

import argparse
import heapq
import json
import mmap
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
from bench_export import compile_bytecode, measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench-data"
STEADY = DATA / "steady" / "steady.pcap"
PORT = 9093  # the steady scenario's broker port
SHIFT_NS = 7_000_000
LOOPBACK = bytes([127, 0, 0, 1])
# issue 17: one process >= 6x tshark within 400 MB, two jobs >= 10x tshark
TARGETS = {"jobs1": (6.0, 400.0), "jobs2": (10.0, None)}


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


def copy_address(copy: int) -> bytes:
    return bytes([127, copy % 256, copy // 256, 1])


def moved(frame: bytes, copy: int) -> bytes:
    """The frame with 127.0.0.1 as source or destination moved to 127.copy.0.1 (IPv4 over Ethernet). Anything
    else is refused: a frame left as it is would put copies on one connection."""
    if copy == 0:
        return frame
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or LOOPBACK not in (frame[26:30], frame[30:34]):
        raise ValueError("the replicator moves IPv4 frames to or from 127.0.0.1 only")
    ihl = (frame[14] & 0x0F) * 4
    header = bytearray(frame[14:14 + ihl])
    address = copy_address(copy)
    for at in (12, 16):
        if header[at:at + 4] == LOOPBACK:
            header[at:at + 4] = address
    header[10:12] = b"\0\0"
    header[10:12] = struct.pack(">H", _ip_checksum(bytes(header)))
    return frame[:14] + bytes(header) + frame[14 + ihl:]


def replicate(source: Path, size_mb: float, folder: Path = DATA) -> Path:
    """``folder``/STEM-xN.pcap, N copies of ``source`` making at least ``size_mb`` MB (cached by that name)."""
    size = source.stat().st_size
    copies = max(1, -(-int(size_mb * 1e6) // size))
    target = folder / f"{source.stem}-x{copies}.pcap"
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


def kafkacap_command(capture: Path, out: Path, flags: list[str], tree: Path = REPO, port: int = PORT) -> list[str]:
    """This checkout's kafkacap, or another's (``env -C`` runs it there: ``-m`` puts the working folder first)."""
    return ["env", "-C", str(tree), sys.executable, "-m", "analyzer.cli", "export", str(capture), "-o", str(out),
            "--port", str(port), "--no-progress", *flags]


def tshark_command(capture: Path, port: int = PORT) -> list[str]:
    return ["tshark", "-r", str(capture), "-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "fields",
            "-e", "kafka.correlation_id", "-e", "kafka.api_key"]


def tshark_into(listing: Path, capture: Path, port: int) -> list[str]:
    """tshark with its listing kept (``exec``: the timed process is tshark itself), for the frame count."""
    return ["sh", "-c", 'exec "$@" > "$0"', str(listing), *tshark_command(capture, port)]


def tshark_frames(listing: Path) -> int:
    """Kafka frames in a tshark listing: one line per packet, the correlation ids of its frames comma-separated."""
    frames = 0
    with open(listing) as lines:
        for line in lines:
            ids = line.split("\t", 1)[0]
            frames += ids.count(",") + 1 if ids.strip() else 0
    return frames


def kafkacap_frames(out: Path) -> tuple[int, int]:
    """(exchanges, Kafka frames: requests plus the responses matched to them)."""
    table = pq.read_table(out / "exchanges.parquet", columns=["request_size", "response_size"])
    rows = table.num_rows
    return rows, 2 * rows - table["request_size"].null_count - table["response_size"].null_count


def packets_in(path: Path) -> int:
    """Records of a classic pcap, counted from their headers."""
    count, pos = 0, 24
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        while pos + 16 <= len(data):
            pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
            count += 1
    return count


def cost(wall: float, count: int | None) -> float | None:
    """Microseconds of wall time per item."""
    return wall / count * 1e6 if count else None


def targets_met(figures: dict) -> list[str]:
    """One line per target of issue 17 that this run measured."""
    lines = []
    for mode, (ratio, peak) in TARGETS.items():
        if mode not in figures["modes"]:
            continue
        got = figures["modes"][mode]
        met = got["ratio_min"] >= ratio and (peak is None or got["peak_mb"] <= peak)
        limit = f" within {peak:.0f} MB" if peak else ""
        lines.append(f"{mode}: {got['ratio_min']:.2f}x tshark, {got['peak_mb']:.0f} MB "
                     f"(target >= {ratio:.0f}x{limit}): {'met' if met else 'not met'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="a steady capture (default: record one)")
    parser.add_argument("--port", type=int, default=PORT, help="the capture's broker port")
    parser.add_argument("--size-mb", type=float, default=320)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="jobs1,jobs2,headers-only")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of an older commit) "
                        "whose kafkacap export --jobs 1 runs interleaved with the others, as 'baseline'")
    args = parser.parse_args()
    if shutil.which("tshark") is None:
        raise SystemExit("tshark is not installed (apt-get install -y tshark)")
    source = args.capture.resolve() if args.capture else None
    os.chdir(REPO)  # python -m analyzer.cli runs this checkout
    capture = replicate(source or record_steady(), args.size_mb)
    packets = packets_in(capture)
    modes = {"jobs1": ["--jobs", "1"], "jobs2": ["--jobs", "2"], "headers-only": ["--headers-only", "--jobs", "1"]}
    chosen = [m for m in args.modes.split(",") if m]
    trees = {mode: REPO for mode in chosen}
    if args.baseline:
        modes["baseline"] = modes["jobs1"]
        trees["baseline"] = args.baseline.resolve()
        chosen.append("baseline")
    for tree in set(trees.values()):
        compile_bytecode(tree)
    walls: dict[str, list[float]] = {"tshark": []}
    peaks: dict[str, float] = {}
    found: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="kafkacap-real-") as tmp:
        listing = Path(tmp) / "tshark.tsv"
        for _ in range(args.repeat):
            wall, tree, _ = measure(tshark_into(listing, capture, args.port))
            walls["tshark"].append(wall)
            peaks["tshark"] = max(peaks.get("tshark", 0), tree)
            for mode in chosen:
                out = Path(tmp) / mode
                shutil.rmtree(out, ignore_errors=True)
                wall, tree, _ = measure(kafkacap_command(capture, out, modes[mode], trees[mode], args.port))
                walls.setdefault(mode, []).append(wall)
                peaks[mode] = max(peaks.get(mode, 0), tree)
                found[mode] = kafkacap_frames(out)
                if not found[mode][0]:
                    raise SystemExit(f"kafkacap {mode} found no exchanges in {capture}")
        frames = tshark_frames(listing)
    size = capture.stat().st_size / 1e6
    print(f"\n{capture.name}: {size:.0f} MB, {packets:,} packets; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'':14} {'min s':>7} {'median s':>9} {'peak MB':>8} {'x tshark':>9} {'(median)':>9} {'exchanges':>10} "
          f"{'us/exchange':>12} {'us/packet':>10}")
    base_min, base_median = min(walls["tshark"]), statistics.median(walls["tshark"])
    figures: dict = {"capture": capture.name, "mb": size, "packets": packets, "tshark_frames": frames,
                     "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), "modes": {}}
    for mode, times in walls.items():
        median = statistics.median(times)
        exchanges, kafka_frames = found.get(mode, (None, None))
        per_exchange = cost(median, exchanges)
        shown = f"{per_exchange:12.2f}" if per_exchange else f"{'':12}"
        print(f"{mode:14} {min(times):7.2f} {median:9.2f} {peaks[mode]:8.0f} {base_min / min(times):9.2f} "
              f"{base_median / median:9.2f} {exchanges or '':>10} {shown} {cost(median, packets):10.2f}")
        figures["modes"][mode] = {"walls": times, "min": min(times), "median": median, "peak_mb": peaks[mode],
                                  "ratio_min": base_min / min(times), "ratio": base_median / median,
                                  "exchanges": exchanges, "frames": kafka_frames, "us_per_exchange": per_exchange,
                                  "us_per_packet": cost(median, packets)}
    print(f"\nKafka frames: tshark lists {frames:,}")
    for mode, (exchanges, kafka_frames) in found.items():
        verdict = "the same" if kafka_frames == frames else f"{kafka_frames - frames:+,} against tshark"
        print(f"  kafkacap {mode}: {exchanges:,} exchanges, {kafka_frames:,} frames (requests and responses): "
              f"{verdict}")
    for line in targets_met(figures):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
