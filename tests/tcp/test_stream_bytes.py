"""Every byte of every Kafka stream is accounted for: stream_bytes = framed_bytes + skipped_bytes + gap_bytes.

stream_bytes comes from TCP reassembly, framed and skipped bytes from the framer, so the identity checks that no
byte the reassembler handed on goes missing between the layers (the bulk path counts bytes off without looking
at them). stream_bytes itself is checked against an oracle that reads the raw packets with dpkt: per direction,
from the stream's origin (one past the SYN's sequence number, else the first data segment's) to the furthest
byte a segment carried, the peer acknowledged (the FIN's own number excepted) or a FIN followed. Captures:
every sample and public capture, and samples damaged by loss, duplication, reordering and snaplen cuts.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import dpkt
import pytest

from tests.helpers import PUBLIC_CAPTURES, SAMPLES, run_tables, sample_captures, sample_keylog

PUBLIC_PORTS = (9092, 36333, 9093, 9094, 29092)
MASK32 = 0xFFFFFFFF
SYN, FIN, RST, ACK = 0x02, 0x01, 0x04, 0x10


SAMPLE_PORTS = (9092, 9093, 19092, 9094, 9096, 9193, 9194)  # every sample broker's, and the cluster's controllers


def export(path: Path, ports: tuple[int, ...] = SAMPLE_PORTS, bulk: bool = True) -> tuple[list[dict], dict]:
    tables = run_tables(path, ports=ports, bulk=bulk, tls_keys=sample_keylog(path))  # a TLS sample's own key log
    (files_row,) = tables["files"].to_pylist()
    conns = tables["connections"].to_pylist() if "connections" in tables else []
    return conns, files_row


def _ip_of(linktype: int, data: bytes):
    """The IP packet of a link-layer frame (the link types of the samples and public captures), or None."""
    try:
        if linktype == dpkt.pcap.DLT_EN10MB:
            eth = dpkt.ethernet.Ethernet(data)
            ip = eth.data
        elif linktype == dpkt.pcap.DLT_LINUX_SLL:
            ip = dpkt.sll.SLL(data).data
        elif linktype in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
            ip = dpkt.loopback.Loopback(data).data
        elif linktype in (dpkt.pcap.DLT_RAW, 12, 14):
            ip = dpkt.ip.IP(data) if data[0] >> 4 == 4 else dpkt.ip6.IP6(data)
        else:
            pytest.fail(f"link type {linktype} is not read by this oracle")
    except (dpkt.UnpackError, IndexError):
        return None
    return ip if isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) else None


def _segments(path: Path):
    """(packet number, flow key, seq, ack, flags, TCP payload length on the wire) of every TCP packet."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        reader = dpkt.pcapng.Reader(f) if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
        linktype = reader.datalink()
        for no, (_, data) in enumerate(reader, 1):
            ip = _ip_of(linktype, data)
            if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            if isinstance(ip, dpkt.ip.IP):
                wire = ip.len - ip.hl * 4 - tcp.off * 4
            else:
                wire = ip.plen - tcp.off * 4  # no extension headers in these captures
            key = (bytes(ip.src), tcp.sport, bytes(ip.dst), tcp.dport)
            yield no, key, tcp.seq, tcp.ack, tcp.flags, max(wire, 0)


def oracle_stream_bytes(path: Path, conns: list[dict]) -> dict[int, int]:
    """Per connection id: the bytes of its two streams, from the raw packets."""
    by_tuple = defaultdict(list)  # (ip, port, ip, port) unordered -> sorted connection ids
    for c in conns:
        by_tuple[frozenset(((c["client_ip"], c["client_port"]), (c["broker_ip"], c["broker_port"])))].append(
            c["connection_id"])
    for ids in by_tuple.values():
        ids.sort()
    origin: dict[tuple, int] = {}
    furthest: dict[tuple, int] = {}
    fin_at: dict[tuple, int] = {}
    acks: dict[tuple, list[int]] = defaultdict(list)
    for no, (src, sport, dst, dport), seq, ack, flags, wire in _segments(path):
        ends = frozenset(((_text(src), sport), (_text(dst), dport)))
        ids = [i for i in by_tuple.get(ends, ()) if i <= no]
        if not ids:
            continue
        conn = ids[-1]
        side = (conn, src, sport)
        peer = (conn, dst, dport)
        if flags & SYN:
            origin.setdefault(side, (seq + 1) & MASK32)
        elif wire:
            origin.setdefault(side, seq)
        if wire and side in origin:
            end = (seq + wire - origin[side]) & MASK32
            if end < 1 << 31:
                furthest[side] = max(furthest.get(side, 0), end)
        if flags & FIN and side in origin:
            fin_at[side] = (seq + wire - origin[side]) & MASK32
        if flags & ACK and not flags & RST:
            acks[peer].append(ack)
    total: dict[int, int] = defaultdict(int)
    for side, start in origin.items():
        extent = max(furthest.get(side, 0), fin_at.get(side, 0))  # a FIN's number: the data before it was sent
        for ack in acks.get(side, ()):
            d = (ack - start) & MASK32
            if d < 1 << 31 and not (side in fin_at and d > fin_at[side]):
                extent = max(extent, d)
        total[side[0]] += extent
    return total


def _text(addr: bytes) -> str:
    import ipaddress

    return str(ipaddress.ip_address(addr))


def assert_accounted(path: Path, conns: list[dict], files_row: dict, exact_oracle: bool = True) -> None:
    assert conns, path
    for c in conns:
        assert c["stream_bytes"] == c["framed_bytes"] + c["skipped_bytes"] + c["gap_bytes"] + (
            c["tls_record_bytes"] or 0), (path.name, c)
        assert min(c["stream_bytes"], c["framed_bytes"], c["skipped_bytes"], c["gap_bytes"]) >= 0
    kafka = [c for c in conns if not c["tls"] or c["tls_decrypted"]]  # the files table's Kafka connections
    for column in ("framed_bytes", "skipped_bytes", "gap_bytes"):
        assert files_row[f"kafka_{column}"] == sum(c[column] for c in kafka), column
    # A decrypted TLS connection's stream holds its records' own bytes too; the files table counts the rest.
    assert files_row["kafka_stream_bytes"] == sum(c["stream_bytes"] - (c["tls_record_bytes"] or 0) for c in kafka)
    if exact_oracle:
        oracle = oracle_stream_bytes(path, conns)
        assert {c["connection_id"]: c["stream_bytes"] for c in conns} == {
            c["connection_id"]: oracle.get(c["connection_id"], 0) for c in conns}, path.name


@pytest.mark.parametrize("path", sample_captures(), ids=lambda p: p.name)
def test_sample_streams_are_accounted_for(path):
    conns, files_row = export(path)
    assert_accounted(path, conns, files_row)
    # Clean captures: every byte is in a frame, and frames are what the exchanges say they are.
    assert all(c["gap_bytes"] == 0 for c in conns)
    assert sum(c["framed_bytes"] for c in conns) > 0


@pytest.mark.skipif(not PUBLIC_CAPTURES, reason="public captures (../shared/pcaps/public) not present")
@pytest.mark.parametrize("path", PUBLIC_CAPTURES, ids=lambda p: p.name)
def test_public_streams_are_accounted_for(path):
    conns, files_row = export(path, PUBLIC_PORTS)
    if conns:
        assert_accounted(path, conns, files_row)


def _damaged(source: Path, out: Path, how: str, seed: int) -> Path:
    """A copy of a sample with TCP data packets lost, repeated, swapped or cut short (pcap, same link type)."""
    rnd = random.Random(seed)
    with open(source, "rb") as f:
        reader = dpkt.pcap.Reader(f)
        linktype, snaplen = reader.datalink(), reader.snaplen
        packets = list(reader)
    kept = []
    for ts, data in packets:
        data_packet = len(data) > 120
        if how == "loss" and data_packet and rnd.random() < 0.08:
            continue
        if how == "repeat" and data_packet and rnd.random() < 0.1:
            kept.append((ts, data))
        if how == "snaplen" and data_packet and rnd.random() < 0.2:
            data = data[:rnd.randrange(60, len(data))]
        kept.append((ts, data))
    if how == "reorder":
        for i in range(1, len(kept) - 1, 5):
            if rnd.random() < 0.5:
                kept[i], kept[i + 1] = kept[i + 1], kept[i]
    with open(out, "wb") as f:
        writer = dpkt.pcap.Writer(f, snaplen=snaplen, linktype=linktype)
        for ts, data in kept:
            writer.writepkt(data, ts)
    return out


# "reorder" swaps packets: among them ACKs of FINs captured before their FINs (the FIN's number is no lost byte).
@pytest.mark.parametrize("how", ["loss", "repeat", "snaplen", "reorder"])
@pytest.mark.parametrize("name", ["tansu_consumer_group.pcap", "tansu_confluent_codecs.pcap"])
def test_damaged_streams_are_accounted_for(tmp_path, how, name):
    path = _damaged(SAMPLES / name, tmp_path / name, how, seed=len(how))
    for bulk in (True, False):
        conns, files_row = export(path, bulk=bulk)
        assert_accounted(path, conns, files_row)
    if how in ("loss", "snaplen"):
        assert sum(c["gap_bytes"] for c in conns) > 0
    if how == "repeat":
        assert sum(c["retransmissions"] for c in conns) > 0
