"""Throughput of analyzer.capture.files: iterate every packet of a large Ethernet/IPv4/TCP pcap (and its .gz).

    python benchmarks/bench_capture.py [--size-mb 800] [--dir /tmp/kafkacap-bench] [--gzip] [--pcapng]
                                       [--repeat 3]

The capture is generated once with plain struct writes (~800-byte frames on average, Kafka-like text
payloads so that gzip has something to compress) and reused by later runs. Reported: MB/s of file bytes
(and of decompressed pcap bytes for the .gz) and packets/s, best of --repeat runs.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import struct
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.capture.files import open_capture  # noqa: E402

MEAN_FRAME = 800
ETH_IP_TCP = 14 + 20 + 20


def _text_pool() -> bytes:
    """Repetitive but varied bytes, like JSON records in Kafka batches."""
    events = (b"click", b"view", b"purchase", b"logout")
    rows = [
        b'{"user_id":%d,"event":"%s","amount":%d.%02d,"ts":16%08d}' % (
            i * 7919 % 100000, events[i % 4], i % 977, i % 100, i * 31337 % 10**8)
        for i in range(4000)
    ]
    return b"\n".join(rows)


def generate(path: Path, size_mb: int) -> None:
    """Write a µs little-endian pcap of Ethernet/IPv4/TCP frames, 8 flows, 86..1514 bytes (mean 800)."""
    pool = _text_pool()
    eth = bytes.fromhex("020000000001020000000002") + b"\x08\x00"
    record = struct.Struct("<IIII")
    iptcp = struct.Struct("!BBHHHBBH4s4sHHIIBBHHH")
    target = size_mb * 1_000_000
    written = 0
    seqs = [1000 * i for i in range(8)]
    sizes = [MEAN_FRAME - ETH_IP_TCP + (i * 379 % 1429) - 714 for i in range(1429)]  # payloads 32..1460
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        n = 0
        chunk: list[bytes] = []
        while written < target:
            flow = n % 8
            size = sizes[n % len(sizes)]
            start = (n * 2654435761) % (len(pool) - 1500)
            payload = pool[start:start + size]
            ip = iptcp.pack(0x45, 0, 40 + size, n & 0xFFFF, 0x4000, 64, 6, 0,
                            bytes((10, 0, 0, 1 + flow)), bytes((10, 0, 1, 1)), 40000 + flow, 9092,
                            seqs[flow], 12345, 0x50, 0x18, 65535, 0, 0)
            seqs[flow] = (seqs[flow] + size) & 0xFFFFFFFF
            frame_len = ETH_IP_TCP + size
            ts = 1_700_000_000_000_000 + n * 10
            chunk.append(record.pack(ts // 1_000_000, ts % 1_000_000, frame_len, frame_len))
            chunk.append(eth)
            chunk.append(ip)
            chunk.append(payload)
            written += 16 + frame_len
            n += 1
            if len(chunk) >= 40_000:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))


def to_pcapng(pcap: Path, out: Path) -> None:
    """The same packets as one pcapng section: SHB, one Ethernet IDB (microseconds), EPBs."""
    data = pcap.read_bytes()
    blocks = [struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28),
              struct.pack("<IIHHII", 1, 20, 1, 0, 262144, 20)]
    pos = 24
    with open(out, "wb") as handle:
        handle.write(b"".join(blocks))
        batch = []
        while pos + 16 <= len(data):
            sec, usec, caplen, origlen = struct.unpack_from("<IIII", data, pos)
            frame = data[pos + 16:pos + 16 + caplen]
            units = sec * 1_000_000 + usec
            length = 32 + caplen + (-caplen % 4)
            head = struct.pack("<IIIIIII", 6, length, 0, units >> 32, units & 0xFFFFFFFF, caplen, origlen)
            batch.append(head + frame + b"\0" * (-caplen % 4) + struct.pack("<I", length))
            pos += 16 + caplen
            if len(batch) >= 20_000:
                handle.write(b"".join(batch))
                batch.clear()
        handle.write(b"".join(batch))


def measure(path: Path, repeat: int) -> tuple[float, float, int, int]:
    """Best wall time and best CPU time (this process, all threads) of `repeat` full iterations,
    packets yielded, file bytes. On a shared machine the CPU time is the steadier figure."""
    best_wall = best_cpu = float("inf")
    count = size = 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        with open_capture(path) as capture:
            deque(capture.packets(), maxlen=0)  # consume at C speed: this times the reader alone
            count, size = capture.stats.tcp_packets, capture.stats.file_bytes
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, count, size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=800)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kafkacap-bench"))
    parser.add_argument("--gzip", action="store_true", help="also measure a gzip-compressed copy")
    parser.add_argument("--pcapng", action="store_true", help="also measure the same packets as pcapng")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    plain = args.dir / f"eth-ipv4-tcp-{args.size_mb}mb.pcap"
    if not plain.exists():
        print(f"generating {plain} ...", flush=True)
        generate(plain, args.size_mb)
    targets = [plain]
    if args.gzip:
        packed = plain.with_name(plain.name + ".gz")
        if not packed.exists():
            print(f"compressing {packed} ...", flush=True)
            with open(plain, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 16 << 20)
        targets.append(packed)
    if args.pcapng:
        ng = plain.with_suffix(".pcapng")
        if not ng.exists():
            print(f"converting {ng} ...", flush=True)
            to_pcapng(plain, ng)
        targets.append(ng)

    pcap_bytes = plain.stat().st_size
    for target in targets:
        wall, cpu, packets, file_bytes = measure(target, args.repeat)
        print(f"{target.name}: {file_bytes / 1e6:.0f} MB file, {packets} packets", flush=True)
        for label, seconds in (("wall", wall), ("cpu", cpu)):
            line = (f"  {label:4s} {seconds:6.2f} s: {file_bytes / seconds / 1e6:5.0f} MB/s of file bytes, "
                    f"{packets / seconds / 1e6:.2f} M packets/s")
            if target.suffix == ".gz":
                line += f", {pcap_bytes / seconds / 1e6:.0f} MB/s of pcap bytes"
            print(line, flush=True)


if __name__ == "__main__":
    main()
