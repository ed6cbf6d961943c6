"""The capture reader: any bytes as a capture file (pcap, pcapng, compressed), read both ways it can be.

Documented error: :class:`analyzer.capture.files.CaptureError` when the file cannot be read as a capture at all;
damage further in is reported in ``stats.damage``, never raised.
"""

from __future__ import annotations

from analyzer.capture.files import CaptureError, open_capture
from tests.fuzz.targets._scratch import scratch_file

ALLOWED = (CaptureError,)


def test_one_input(data: bytes) -> None:
    path = scratch_file(data)
    try:
        with open_capture(path) as capture:
            for packet in capture.packets():
                frame_no, ts_ns, key, seq, ack, flags, payload, seg_len = packet
                assert len(key) in (12, 36), key
                assert seg_len >= 0 and 0 <= seq < 1 << 32 and 0 <= ack < 1 << 32, packet
        with open_capture(path) as capture:  # the chunked column reading of plain pcaps
            chunks = capture.chunks()
            if chunks is not None:
                for _ in chunks:
                    pass
    except ALLOWED:
        pass
