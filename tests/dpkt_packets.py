"""TCP segments of a capture read by dpkt: the independent reader the decoder tests compare against."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dpkt


def tcp_packets(path: Path) -> Iterator[tuple[tuple, int, int, bytes]]:
    """(flow, seq, flags, payload) of every TCP segment (Ethernet or Linux cooked, pcap or pcapng)."""
    with path.open("rb") as handle:
        try:
            reader = dpkt.pcap.Reader(handle)
        except ValueError:
            handle.seek(0)
            reader = dpkt.pcapng.Reader(handle)
        link = reader.datalink()
        for _ts, raw in reader:
            if link == dpkt.pcap.DLT_LINUX_SLL:
                ip = dpkt.sll.SLL(raw).data
            else:
                ip = dpkt.ethernet.Ethernet(raw).data
            if isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6) and isinstance(ip.data, dpkt.tcp.TCP):
                tcp = ip.data
                yield (ip.src, tcp.sport, ip.dst, tcp.dport), tcp.seq, tcp.flags, bytes(tcp.data)
