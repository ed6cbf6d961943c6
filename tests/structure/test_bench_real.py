"""The real-traffic benchmark's replicator (benchmarks/bench_real.py) on recorded captures: every packet of
every copy is written, on that copy's own loopback address and shifted by its delay, and tshark and kafkacap
each find the copies' Kafka traffic as many times over as there are copies."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import dpkt
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_real  # noqa: E402

COPIES = 3
SAMPLES = {"tansu_consumer_group.pcap": 9092, "tansu_pipelined_producer.pcap": 9092}


def _packets(path: Path) -> list[tuple[int, bytes]]:
    """(time in ns, frame) as dpkt reads them: Decimal seconds from a nanosecond pcap, float from a µs one."""
    with open(path, "rb") as handle:
        return [(int(ts * 10**9) if isinstance(ts, Decimal) else round(ts * 1e6) * 1000, frame)
                for ts, frame in dpkt.pcap.Reader(handle)]


def _without_ip_checksum(frame: bytes, copy: int = 0) -> bytes:
    """The frame with the copy's address put back to 127.0.0.1 and its IP checksum, found valid, zeroed."""
    ihl = (frame[14] & 0x0F) * 4
    header = bytearray(frame[14:14 + ihl])
    assert dpkt.in_cksum(bytes(header)) == 0
    if copy:
        address = bench_real.copy_address(copy)
        assert address in (header[12:16], header[16:20])
        assert {bytes(header[12:16]), bytes(header[16:20])} <= {address, bench_real.LOOPBACK}
        for at in (12, 16):
            if header[at:at + 4] == address:
                header[at:at + 4] = bench_real.LOOPBACK
    header[10:12] = b"\0\0"
    return frame[:14] + bytes(header) + frame[14 + ihl:]


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def replica(request, tmp_path_factory) -> tuple[Path, Path]:
    source = REPO / "sample_pcaps" / request.param
    size_mb = ((COPIES - 1) * source.stat().st_size + 1) / 1e6
    return source, bench_real.replicate(source, size_mb, tmp_path_factory.mktemp("replica"))


def test_every_copy_keeps_every_packet_moved_and_shifted(replica):
    source, target = replica
    original, copied = _packets(source), _packets(target)
    assert target.name == f"{source.stem}-x{COPIES}.pcap"
    assert len(copied) == COPIES * len(original) == bench_real.packets_in(target)
    assert [ts for ts, _ in copied] == sorted(ts for ts, _ in copied)
    by_copy: dict[int, list[tuple[int, bytes]]] = {}
    for ts, frame in copied:
        ip = dpkt.ethernet.Ethernet(frame).data
        moved = ip.src if ip.src != bench_real.LOOPBACK else ip.dst
        copy = moved[1] + 256 * moved[2]
        by_copy.setdefault(copy, []).append((ts - copy * bench_real.SHIFT_NS, frame))
    assert sorted(by_copy) == list(range(COPIES))
    assert by_copy[0] == original
    expected = [(ts, _without_ip_checksum(frame)) for ts, frame in original]
    for copy in range(1, COPIES):
        assert [(ts, _without_ip_checksum(frame, copy)) for ts, frame in by_copy[copy]] == expected


def test_tshark_and_kafkacap_find_each_copy(replica, tmp_path):
    source, target = replica
    port = SAMPLES[source.name]
    counts = {}
    for path in (source, target):
        listing = tmp_path / f"{path.stem}.tsv"
        subprocess.run(bench_real.tshark_into(listing, path, port), check=True, capture_output=True)
        out = tmp_path / path.stem
        subprocess.run(bench_real.kafkacap_command(path, out, ["--headers-only", "--jobs", "1"], REPO, port),
                       check=True, capture_output=True)
        counts[path] = (bench_real.tshark_frames(listing), *bench_real.kafkacap_frames(out),
                        pq.read_metadata(out / "connections.parquet").num_rows)
    tshark, exchanges, frames, connections = counts[source]
    assert exchanges and frames == tshark
    assert counts[target] == (COPIES * tshark, COPIES * exchanges, COPIES * frames, COPIES * connections)


def test_frames_not_on_loopback_ipv4_are_refused():
    with open(REPO / "sample_pcaps" / "tansu_ipv6_confluent.pcapng", "rb") as handle:
        frame = next(frame for _, frame in dpkt.pcapng.Reader(handle))
    assert bench_real.moved(frame, 0) == frame
    with pytest.raises(ValueError, match="127.0.0.1"):
        bench_real.moved(frame, 1)
