"""Mirrored traffic: a sample capture wrapped, packet by packet, in the tunnels that carry traffic mirrors and
SPAN sessions (VXLAN, Geneve, GRE with Ethernet or IP inside, ERSPAN types I, II and III, over IPv4 and IPv6),
built with scapy, must give the tables the plain capture gives."""

from __future__ import annotations

from pathlib import Path

import pytest

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific  # noqa: E402
from scapy.contrib.geneve import GENEVE  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import GRE, Ether  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402
from scapy.utils import PcapReader, PcapWriter  # noqa: E402

from analyzer.pipeline.analyze import Options  # noqa: E402
from analyzer.pipeline.run import run  # noqa: E402
from analyzer.tables.schemas import SCHEMAS  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "sample_pcaps" / "tansu_consumer_group.pcap"
OUTER = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _ip_only(frame: bytes) -> bytes:
    return frame[14:]  # the sample is Ethernet without VLAN tags


TUNNELS = {
    "vxlan": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / UDP(sport=50000, dport=4789) / VXLAN(vni=42) / f,
    "geneve": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / UDP(sport=50001, dport=6081)
    / GENEVE(vni=7, proto=0x6558) / f,
    "gre-ethernet": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / GRE(proto=0x6558, key_present=1, key=5) / f,
    "gre-ip-over-ipv6": lambda f: OUTER / IPv6(src="fd00::1", dst="fd00::2") / GRE(proto=0x0800, seqnum_present=1,
                                                                                    sequence_number=1) / _ip_only(f),
    "erspan-i": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / GRE(proto=0x88BE) / f,
    "erspan-ii": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / GRE(proto=0x88BE, seqnum_present=1)
    / ERSPAN_II(session_id=3) / f,
    "erspan-iii": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / GRE(proto=0x22EB, seqnum_present=1)
    / ERSPAN_III(session_id=3, o=1) / ERSPAN_PlatformSpecific() / f,
    "vxlan-in-gre": lambda f: OUTER / IP(src="10.9.0.1", dst="10.9.0.2") / GRE(proto=0x0800)
    / IP(src="10.8.0.1", dst="10.8.0.2") / UDP(sport=50000, dport=4789) / VXLAN(vni=1) / f,
}


def tables(path: Path) -> dict[str, list[dict]]:
    batches: dict[str, list] = {}
    run([str(path)], Options(ports=(9092,)), lambda table, batch: batches.setdefault(table, []).append(batch))
    import pyarrow as pa

    out = {}
    for name in ("exchanges", "connections", "partitions", "errors"):
        t = pa.Table.from_batches(batches.get(name, []), schema=SCHEMAS[name])
        # the bulk path hands rows on grouped by connection, the per-packet one (tunnels) in packet order
        out[name] = sorted(t.drop_columns(["capture_file"]).to_pylist(), key=repr)
    return out


@pytest.fixture(scope="module")
def plain() -> dict:
    return tables(SAMPLE)


@pytest.mark.parametrize("name", TUNNELS)
def test_a_tunnelled_mirror_gives_the_plain_captures_tables(tmp_path, plain, name):
    wrapped = tmp_path / f"{name}.pcap"
    with PcapReader(str(SAMPLE)) as reader, PcapWriter(str(wrapped), linktype=1) as writer:
        for packet in reader:
            outer = TUNNELS[name](bytes(packet))
            outer.time = packet.time
            writer.write(outer)
    got = tables(wrapped)
    assert len(plain["exchanges"]) == 72
    for table in ("exchanges", "connections", "partitions", "errors"):
        assert got[table] == plain[table], table


def test_tunnels_nested_beyond_the_bound_are_counted_not_followed(tmp_path):
    from analyzer.capture.files import open_capture

    inner = bytes(next(iter(PcapReader(str(SAMPLE)))))
    packet = Ether() / IP() / GRE(proto=0x6558) / inner
    for _ in range(40):  # 40 Ethernet-in-GRE layers around a TCP segment
        packet = Ether() / IP() / GRE(proto=0x6558) / packet
    path = tmp_path / "nested.pcap"
    with PcapWriter(str(path), linktype=1) as writer:
        writer.write(packet)
    with open_capture(path) as capture:
        assert list(capture.packets()) == []
        assert capture.stats.non_tcp == 1 and capture.stats.packets == 1
