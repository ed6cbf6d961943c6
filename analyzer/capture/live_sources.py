"""Live packet sources for ``kafkacap live``: a network interface read through a Linux packet socket, or a capture
stream on a pipe (``tcpdump -w - | kafkacap live -r -``), handed on in batches as they arrive.

Both give what the file readers give, (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len) per TCP packet,
so the same flow table analyses them; ``poll(timeout)`` returns the packets that arrived (possibly none) within
the timeout, so the caller keeps its own clock (the screen, rotation) when the link is quiet.

The interface source is an ``AF_PACKET`` socket bound to one interface, with the kernel filter (BPF) compiled
from the Kafka ports by libpcap through scapy when that is available (else every packet comes up and the flow
table drops what is not Kafka), kernel timestamps (``SO_TIMESTAMPNS``), a large receive buffer, and the
kernel's own count of packets it dropped because the reader fell behind (``PACKET_STATISTICS``). On a loopback
interface each packet is seen twice (leaving and arriving); the leaving copy is dropped by the kernel filter
(``inbound``), or skipped here when no filter can be attached.

``RollingPcap`` keeps the raw packets an interface source reads (``kafkacap live --pcap FILE``) as rotating pcap
files, each written under a hidden name and renamed whole.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import os
import queue
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from analyzer.capture.files import Capture, CaptureError, CaptureStats, open_capture
from analyzer.capture.linklayer import ETHERNET, RAW, REASONS, decoder, fast_path, store_counts

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
ARPHRD_ETHER, ARPHRD_LOOPBACK, ARPHRD_NONE = 1, 772, 65534
PACKET_OUTGOING = 4
SNAPLEN = 262_144
RECEIVE_BUFFER = 64 << 20  # what the kernel may queue while the analysis catches up
MAX_BATCH = 4096  # packets handed on per poll at most (the caller's clock still ticks under a flood)
MIN_BATCH = 256  # packets a poll gathers, waiting up to GATHER_SECONDS for them, before handing them on
GATHER_SECONDS = 0.01
QUEUED_PACKETS = 1 << 16  # read but not yet analysed; past it the reader waits (and the pipe's writer with it)
_TIMESPEC = struct.Struct("qq")
_STATS = struct.Struct("II")
PCAP_NANO_MAGIC = 0xA1B23C4D
_PCAP_HEADER = struct.Struct("<IHHiIII")
_PCAP_RECORD = struct.Struct("<IIII")


class LiveError(Exception):
    """The live source cannot be opened (no such interface, not permitted, unsupported link type)."""


class LiveSource(Protocol):
    linktype: int

    def poll(self, timeout: float) -> list[tuple]: ...

    def health(self) -> LiveHealth: ...

    def capture_stats(self) -> CaptureStats: ...

    def close(self) -> None: ...


@dataclass
class LiveHealth:
    """What the source knows about what it saw and missed."""

    packets: int = 0  # captured packets handed on or counted (all of them, not only TCP)
    tcp_packets: int = 0
    kernel_drops: int | None = None  # packets the kernel dropped because the reader fell behind (None: unknown)
    filtered_in_kernel: bool | None = None  # whether a BPF filter runs in the kernel
    ended: bool = False  # a stream source reached its end
    error: str | None = None


def ports_filter(ports: tuple[int, ...], detect_ports: bool) -> str | None:
    """The capture filter for the Kafka ports (None when any port may carry Kafka)."""
    if detect_ports or not ports:
        return None
    return "tcp and (" + " or ".join(f"port {p}" for p in sorted(set(ports))) + ")"


CAPTURE_PERMISSION_HINT = (
    "capturing packets needs root or the CAP_NET_RAW capability; without root: "
    "sudo setcap cap_net_raw,cap_net_admin=eip \"$(readlink -f \"$(command -v python3)\")\" "
    "(gives that Python interpreter the right to capture), or pipe a capture in: "
    "sudo tcpdump -i IFACE -w - -U port PORT | kafkacap live -r -")


def frame_decoder(linktype: int) -> Callable[[bytes], tuple | int]:
    """``decoder(linktype)`` for one whole frame, with the file readers' fast path in front (IPv4 and TCP without
    options below the link header): live, each packet is decoded on its own, and the general path costs several
    calls a packet."""
    general = decoder(linktype)
    fast = fast_path(linktype)
    if fast is None:
        return lambda frame: general(frame, 0, len(frame))
    quick = fast.frame

    def decode(frame: bytes) -> tuple | int:
        decoded = quick(frame)
        return general(frame, 0, len(frame)) if decoded is None else decoded

    return decode


class InterfaceSource:
    """Packets of one network interface, read from a packet socket."""

    def __init__(self, iface: str, capture_filter: str | None) -> None:
        try:
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except PermissionError:
            raise LiveError(f"{iface}: permission denied: {CAPTURE_PERMISSION_HINT}") from None
        except (OSError, AttributeError) as exc:
            raise LiveError(f"{iface}: cannot open a packet socket ({exc}); on systems other than Linux, "
                            "pipe a capture in: tcpdump -w - | kafkacap live -r -") from None
        try:
            self._sock.bind((iface, 0))
        except OSError as exc:
            self._sock.close()
            raise LiveError(f"{iface}: no such interface ({exc.strerror or exc})") from None
        hatype = self._sock.getsockname()[3]
        if hatype in (ARPHRD_ETHER, ARPHRD_LOOPBACK):
            self.linktype = ETHERNET
        elif hatype == ARPHRD_NONE:  # tun devices and the like: IP packets with no link header
            self.linktype = RAW
        else:
            self._sock.close()
            raise LiveError(f"{iface}: link type {hatype} is not supported live; capture with tcpdump -w - and "
                            "pipe it in (kafkacap live -r -)")
        self._loopback = hatype == ARPHRD_LOOPBACK
        self._iface = iface
        self._decode = frame_decoder(self.linktype)
        self._not_tcp = [0] * REASONS  # packets not handed on, by why (linklayer.NON_IP ...), for the files table
        self._first_ts: int | None = None
        self._last_ts: int | None = None
        self._health = LiveHealth(kernel_drops=0)
        for option, value in ((SO_RCVBUFFORCE, RECEIVE_BUFFER), (socket.SO_RCVBUF, RECEIVE_BUFFER)):
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, option, value)
                break
            except OSError:
                continue
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        attached = False
        if self._loopback:
            # The leaving copies are dropped in the kernel, where they would take half the receive buffer (and
            # count as drops when it overflows, though no packet is missed); skipped in poll when this fails.
            attached = self._attach(iface, "inbound" + (f" and ({capture_filter})" if capture_filter else ""))
        if not attached and capture_filter is not None:
            attached = self._attach(iface, capture_filter)
        self._health.filtered_in_kernel = capture_filter is not None and attached
        self._sock.setblocking(False)
        self._frame = 0
        self._cmsg_space = socket.CMSG_SPACE(_TIMESPEC.size)
        # Called with (ts_ns, frame) for every packet read, before it is decoded (RollingPcap.packet).
        self.keep: Callable[[int, bytes], None] | None = None

    def _attach(self, iface: str, capture_filter: str) -> bool:
        """Compile ``capture_filter`` with libpcap (through scapy) and attach it; False when that is not
        possible here (the flow table then drops what is not Kafka, at some cost in CPU)."""
        try:
            import ctypes

            from scapy.arch.common import compile_filter

            program = compile_filter(capture_filter, iface=iface)
            fprog = struct.pack("HL", program.bf_len, ctypes.addressof(program.bf_insns.contents))
            self._sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            self._program = program  # keep the instructions alive while the kernel may read them
            return True
        except Exception:  # noqa: BLE001 - no libpcap or tcpdump to compile with: filter in user space
            return False

    def poll(self, timeout: float) -> list[tuple]:
        """The packets that arrive within ``timeout`` seconds. Once one has come, those that follow within
        ``GATHER_SECONDS`` (up to ``MIN_BATCH``) are gathered with it: handed on one by one as they trickle in,
        each would cost a step of the analysis (a wakeup, a failed read, a call into the flow table)."""
        out: list[tuple] = []
        sock = self._sock
        ready, _, _ = select.select([sock], [], [], max(timeout, 0))
        if not ready:
            return out
        health = self._health
        decode = self._decode
        keep = self.keep
        loopback = self._loopback
        cmsg_space = self._cmsg_space
        deadline = None
        ts_ns = None
        while len(out) < MAX_BATCH:
            try:
                data, ancillary, _flags, address = sock.recvmsg(SNAPLEN, cmsg_space)
            except BlockingIOError:
                if len(out) >= MIN_BATCH:
                    break
                now = time.monotonic()
                if deadline is None:
                    deadline = now + GATHER_SECONDS
                if now >= deadline or not select.select([sock], [], [], deadline - now)[0]:
                    break
                continue
            if loopback and address[2] == PACKET_OUTGOING:
                continue
            ts_ns = None
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    ts_ns = sec * 1_000_000_000 + nsec
            if ts_ns is None:
                ts_ns = time.time_ns()
            if keep is not None:
                keep(ts_ns, data)
            self._frame += 1
            health.packets += 1
            decoded = decode(data)
            if decoded.__class__ is int:
                self._not_tcp[decoded] += 1
                continue
            key, seq, ack, flags, start, stop, seg_len = decoded
            health.tcp_packets += 1
            out.append((self._frame, ts_ns, key, seq, ack, flags, memoryview(data)[start:stop], seg_len))
        if ts_ns is not None:  # times for the files table, kept per poll (not per packet: the loop is hot)
            if self._first_ts is None:
                self._first_ts = out[0][1] if out else ts_ns
            self._last_ts = ts_ns
        return out

    def capture_stats(self) -> CaptureStats:
        """What was read so far, as a file's reader counts it (the files table's row of a live run)."""
        stats = CaptureStats(path=self._iface, format="live", link_types=[self.linktype],
                             first_ts_ns=self._first_ts, last_ts_ns=self._last_ts)
        store_counts(stats, self._frame, self._not_tcp)
        return stats

    def health(self) -> LiveHealth:
        if self._sock.fileno() >= 0:  # once closed, the counts as they were
            try:
                _received, dropped = _STATS.unpack(self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS,
                                                                         _STATS.size))
                self._health.kernel_drops = (self._health.kernel_drops or 0) + dropped  # reset by each read
            except OSError:
                self._health.kernel_drops = None
        return self._health

    def close(self) -> None:
        self._sock.close()


class StreamSource:
    """Packets of a capture stream (pcap or pcapng, possibly compressed) on a pipe or in a file, read by a
    thread so that ``poll`` can return when nothing arrives."""

    def __init__(self, path: str) -> None:
        try:
            self._capture: Capture = open_capture(path, eager=True)
        except CaptureError as exc:
            raise LiveError(str(exc)) from None
        self.linktype = self._capture.stats.link_types[0] if self._capture.stats.link_types else ETHERNET
        self._queue: queue.Queue[tuple | None] = queue.Queue(maxsize=QUEUED_PACKETS)
        self._health = LiveHealth()
        self._tcp_packets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True, name="kafkacap live reader")
        self._thread.start()

    def _read(self) -> None:
        put = self._queue.put
        try:
            for packet in self._capture.packets():
                put(packet)  # one at a time: the reader cannot know whether more are coming soon
                self._tcp_packets += 1
                if self._stop.is_set():
                    return
        except Exception as exc:  # noqa: BLE001 - reported as the source's error, the rows so far are kept
            self._health.error = f"{type(exc).__name__}: {exc}"
        put(None)

    def poll(self, timeout: float) -> list[tuple]:
        out: list[tuple] = []
        get = self._queue.get
        try:
            item = get(timeout=max(timeout, 0))
            while item is not None:
                out.append(item)
                if len(out) >= MAX_BATCH:
                    return out
                item = self._queue.get_nowait()
            self._health.ended = True
        except queue.Empty:
            pass
        return out

    def health(self) -> LiveHealth:
        stats = self._capture.stats
        # the readers count every record at their end; until then the TCP packets handed on are what is known
        self._health.packets = max(stats.packets, self._tcp_packets)
        self._health.tcp_packets = self._tcp_packets
        if stats.damage and not self._health.error:
            self._health.error = stats.damage
        return self._health

    def capture_stats(self) -> CaptureStats:
        """The reader's figures: complete once it has read the whole stream; until then (it stores its counts
        at the end) the packets handed on, and no last time."""
        stats = copy.copy(self._capture.stats)
        stats.on_tls_secrets = None
        if self._thread.is_alive():
            stats.packets = stats.tcp_packets = self._tcp_packets
        return stats

    def close(self) -> None:
        """Stops the reader. One blocked on a stream that sends nothing more (a pipe left open) cannot be woken:
        its capture is left open, a daemon thread that ends with the process (closing a generator another
        thread is running raises)."""
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:  # a reader waiting to put a packet can go on to see the stop
                self._queue.get_nowait()
        self._thread.join(timeout=0.5)
        if not self._thread.is_alive():
            self._capture.close()


def _whole_records(path: str) -> tuple[int, int, int]:
    """(bytes up to the end of the last whole record, whole records, first record's time in ns) of a pcap this
    module wrote (nanosecond, little-endian); (0, 0, 0) when it is not one."""
    with open(path, "rb") as f:
        header = f.read(_PCAP_HEADER.size)
        if len(header) < _PCAP_HEADER.size or _PCAP_HEADER.unpack(header)[0] != PCAP_NANO_MAGIC:
            return 0, 0, 0
        snaplen = _PCAP_HEADER.unpack(header)[5]
        end, packets, first = _PCAP_HEADER.size, 0, 0
        while True:
            record = f.read(_PCAP_RECORD.size)
            if len(record) < _PCAP_RECORD.size:
                break
            sec, nsec, caplen, _ = _PCAP_RECORD.unpack(record)
            if caplen > max(snaplen, SNAPLEN) or nsec >= 1_000_000_000 or len(f.read(caplen)) < caplen:
                break
            if not packets:
                first = sec * 1_000_000_000 + nsec
            end += _PCAP_RECORD.size + caplen
            packets += 1
    return end, packets, first


class RollingPcap:
    """Raw packets kept as pcap (nanosecond timestamps, the source's link type), a file per rotation:
    ``FILE-<UTC start>-<n>.pcap`` beside ``FILE`` (its ``.pcap`` taken off), which ``kafkacap export`` reads
    as one rotated set. The current file is written under a hidden name (``.*.tmp``) and renamed into place
    whole by ``rotate``; a period without packets leaves no file."""

    def __init__(self, path: str, linktype: int, snaplen: int = SNAPLEN) -> None:
        folder, name = os.path.split(os.path.abspath(path))
        if name.lower().endswith(".pcap"):
            name = name[:-5]
        if not name:
            raise LiveError(f"{path}: give a file name for the kept packets")
        if not os.path.isdir(folder):
            raise LiveError(f"{path}: folder {folder} does not exist")
        self._folder, self._name = folder, name
        self._header = _PCAP_HEADER.pack(PCAP_NANO_MAGIC, 2, 4, 0, 0, snaplen, linktype)
        self._hidden = os.path.join(folder, f".{name}-{uuid.uuid4().hex[:8]}.pcap.tmp")
        self._file = None
        self.bytes = 0  # in the current file
        self.packets = 0  # kept in all
        self.parts = 0

    def recover_leftovers(self) -> list[tuple[str, str | None, int]]:
        """The hidden files of this name a run that never finished left (SIGKILL, a power cut): each is cut
        after its last whole packet and renamed into place as ``FILE-<UTC first packet>-000000.pcap``, which
        ``kafkacap export`` reads with the other parts. (hidden path, the path it became or None where it holds
        no whole packet and is left as it is, packets)."""
        found = []
        prefix = f".{self._name}-"
        for entry in sorted(os.listdir(self._folder)):
            if not (entry.startswith(prefix) and entry.endswith(".pcap.tmp")) or len(entry) != len(prefix) + 17:
                continue
            hidden = os.path.join(self._folder, entry)
            if hidden == self._hidden:
                continue
            end, packets, first_ns = _whole_records(hidden)
            if not packets:
                found.append((hidden, None, 0))
                continue
            stamp = dt.datetime.fromtimestamp(first_ns // 1_000_000_000, dt.UTC).replace(
                microsecond=first_ns % 1_000_000_000 // 1000).strftime("%Y%m%dT%H%M%S%fZ")
            path = os.path.join(self._folder, f"{self._name}-{stamp}-000000.pcap")
            if os.path.exists(path):
                found.append((hidden, None, packets))
                continue
            os.truncate(hidden, end)
            os.replace(hidden, path)
            found.append((hidden, path, packets))
        return found

    def packet(self, ts_ns: int, frame: bytes) -> None:
        f = self._file
        if f is None:
            f = self._file = open(self._hidden, "wb", buffering=1 << 20)  # noqa: SIM115 - closed by rotate
            f.write(self._header)
            self.bytes = len(self._header)
        sec, nsec = divmod(ts_ns, 1_000_000_000)
        f.write(_PCAP_RECORD.pack(sec, nsec, len(frame), len(frame)))
        f.write(frame)
        self.bytes += _PCAP_RECORD.size + len(frame)
        self.packets += 1

    def rotate(self, started: dt.datetime) -> list[str]:
        """Close the current file and rename it into place (``started``: when it began); the paths."""
        if self._file is None:
            return []
        self._file.close()
        self._file = None
        self.parts += 1
        stamp = started.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = os.path.join(self._folder, f"{self._name}-{stamp}-{self.parts:06d}.pcap")
        os.replace(self._hidden, path)
        self.bytes = 0
        return [path]
