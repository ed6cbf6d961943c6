"""Loopback sniffer that writes a libpcap file: the fallback when tcpdump is not installed.

Runs as its own process (``python sniffer.py --port P --out F``) so that the clients' Python threads in the
recording process cannot starve it of the GIL while a burst of 64 KiB loopback segments arrives. It uses
scapy's Linux packet socket, which drops the PACKET_OUTGOING copy that loopback delivers for every packet,
and a kernel BPF filter when libpcap is there to compile one (otherwise it filters the ports itself).

Protocol with the parent: it prints ``ready`` once the socket is open, stops on SIGINT/SIGTERM, then prints
``packets N`` and exits. Self-contained on purpose (standard library + scapy).
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import struct
import sys

SNAPLEN = 262144
SO_RCVBUFFORCE = 33
RECEIVE_BUFFER = 64 * 1024 * 1024
LINKTYPE_ETHERNET = 1


def tcp_ports(frame: bytes) -> tuple[int, int] | None:
    """(src, dst) TCP ports of an Ethernet frame, or None when it is not TCP over IPv4/IPv6."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    if ethertype == 0x0800 and len(frame) >= 34 and frame[23] == 6:
        offset = 14 + (frame[14] & 0x0F) * 4
    elif ethertype == 0x86DD and len(frame) >= 54 and frame[20] == 6:
        offset = 54
    else:
        return None
    if len(frame) < offset + 4:
        return None
    return struct.unpack_from("!HH", frame, offset)


def open_socket(iface: str, port: int):
    """A scapy L2 socket on iface with a BPF filter on the port; returns (socket, filtered_in_kernel)."""
    from scapy.arch.linux import L2Socket
    from scapy.error import Scapy_Exception

    try:
        sock = L2Socket(iface=iface, filter=f"tcp port {port}")
        in_kernel = True
    except Scapy_Exception:
        sock = L2Socket(iface=iface)
        in_kernel = False
    try:
        sock.ins.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    except OSError:
        sock.ins.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    return sock, in_kernel


def sniff(iface: str, port: int, out_path: str) -> int:
    sock, in_kernel = open_socket(iface, port)
    stopping = False

    def stop(_signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    count = 0
    with open(out_path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        print("ready", flush=True)
        while True:
            readable, _, _ = select.select([sock.ins], [], [], 0.2)
            if not readable:
                if stopping:
                    break
                continue
            _cls, frame, ts = sock.recv_raw(SNAPLEN)
            if not frame:
                continue
            if not in_kernel:
                ports = tcp_ports(frame)
                if ports is None or port not in ports:
                    continue
            micros = round(ts * 1_000_000)
            out.write(struct.pack("<IIII", micros // 1_000_000, micros % 1_000_000, len(frame), len(frame)))
            out.write(frame)
            count += 1
    sock.close()
    print(f"packets {count}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iface", default="lo")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return sniff(args.iface, args.port, args.out)


if __name__ == "__main__":
    sys.exit(main())
