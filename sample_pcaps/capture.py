"""Packet capture on loopback around a scenario: tcpdump when installed, else the scapy sniffer process.

Both tools run as child processes that are started, given time to open their socket (packets sent before
that are lost), and stopped with SIGINT so they flush the file. Either way the result is a libpcap file;
`pcap_to_pcapng` rewrites it as pcapng when a scenario asks for that format.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

SETTLE_SECONDS = 1.5
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0


class CaptureError(RuntimeError):
    pass


def capture_privilege_problem() -> str | None:
    """Why this process cannot open a packet socket, or None when it can."""
    import socket

    try:
        probe = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except PermissionError:
        return "capturing needs root or CAP_NET_RAW (opening a packet socket was refused)"
    except (AttributeError, OSError) as exc:
        return f"packet sockets are not available here: {exc}"
    probe.close()
    return None


def choose_tool(preferred: str = "auto") -> str:
    if preferred == "tcpdump" and not shutil.which("tcpdump"):
        raise CaptureError("tcpdump was requested but is not installed")
    if preferred in ("tcpdump", "scapy"):
        return preferred
    return "tcpdump" if shutil.which("tcpdump") else "scapy"


class LoopbackCapture:
    """One capture of TCP traffic on a port; use as a context manager so the child always stops."""

    def __init__(self, path: Path, port: int, *, iface: str = "lo", tool: str = "auto",
                 nanosecond: bool = False) -> None:
        self.path = Path(path)
        self.port = port
        self.iface = iface
        self.tool = choose_tool(tool)
        self.nanosecond = nanosecond and self.tool == "tcpdump"
        self.packets: int | None = None
        self.dropped: int | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._output: list[str] = []

    def _command(self) -> list[str]:
        if self.tool == "tcpdump":
            # --immediate-mode: without it packets wait in the kernel ring until a block fills or times out,
            # and whatever is still there when tcpdump gets SIGINT never reaches the file.
            command = ["tcpdump", "-i", self.iface, "-s", "0", "-U", "-n", "--immediate-mode", "-B", "32768",
                       "-w", str(self.path)]
            if self.nanosecond:
                command.append("--time-stamp-precision=nano")
            if os.geteuid() == 0:
                command += ["-Z", "root"]  # keep the file owned by whoever recorded, not the tcpdump user
            return command + [f"tcp port {self.port}"]
        sniffer = Path(__file__).with_name("sniffer.py")
        return [sys.executable, str(sniffer), "--iface", self.iface, "--port", str(self.port),
                "--out", str(self.path)]

    def start(self) -> LoopbackCapture:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        ready_marker = "listening on" if self.tool == "tcpdump" else "ready"
        self._proc = subprocess.Popen(self._command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True)
        ready = threading.Event()

        def read_output() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            for line in self._proc.stdout:
                self._output.append(line.rstrip())
                if ready_marker in line:
                    ready.set()

        threading.Thread(target=read_output, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while not ready.wait(0.1):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise CaptureError(f"{self.tool} did not start: " + " | ".join(self._output[-5:]))
        time.sleep(SETTLE_SECONDS)
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        time.sleep(0.5)  # let the last FIN/ACK reach the socket
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._kill()
        time.sleep(0.1)
        self._proc = None
        self._parse_counts()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def _parse_counts(self) -> None:
        for line in self._output:
            words = line.split()
            if line.endswith("packets captured") or (words[:1] == ["packets"] and len(words) == 2):
                self.packets = int(words[0] if words[0] != "packets" else words[1])
            elif line.endswith("packets dropped by kernel"):
                self.dropped = int(words[0])

    def __enter__(self) -> LoopbackCapture:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def read_pcap(path: Path) -> tuple[int, bool, list[tuple[int, int, bytes]]]:
    """(linktype, nanosecond, [(timestamp_ns, original_length, data)]) of a little- or big-endian pcap."""
    blob = Path(path).read_bytes()
    magic = blob[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
              b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None:
        raise CaptureError(f"{path} is not a libpcap file")
    nanosecond = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack_from(endian + "I", blob, 20)[0] & 0x0FFFFFFF
    packets = []
    offset = 24
    unit = 1 if nanosecond else 1000
    while offset + 16 <= len(blob):
        seconds, fraction, caplen, origlen = struct.unpack_from(endian + "IIII", blob, offset)
        offset += 16
        packets.append((seconds * 1_000_000_000 + fraction * unit, origlen, blob[offset:offset + caplen]))
        offset += caplen
    return linktype, nanosecond, packets


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\x00" * (-len(value) % 4)


def _block(block_type: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack("<II", block_type, length) + body + struct.pack("<I", length)


def pcap_to_pcapng(source: Path, target: Path, *, interface: str = "lo", comment: str = "") -> None:
    """Rewrite a libpcap file as pcapng: one section, one interface with nanosecond resolution."""
    linktype, _nanosecond, packets = read_pcap(source)
    end_of_options = struct.pack("<HH", 0, 0)
    shb_options = _option(4, b"kafkacap sample_pcaps/record.py")
    if comment:
        shb_options += _option(1, comment.encode())
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + shb_options + end_of_options)]
    idb_options = _option(2, interface.encode()) + _option(9, bytes([9])) + end_of_options
    out.append(_block(0x00000001, struct.pack("<HHI", linktype, 0, 262144) + idb_options))
    for timestamp_ns, origlen, data in packets:
        body = struct.pack("<IIIII", 0, timestamp_ns >> 32, timestamp_ns & 0xFFFFFFFF, len(data), origlen)
        out.append(_block(0x00000006, body + data + b"\x00" * (-len(data) % 4)))
    Path(target).write_bytes(b"".join(out))
