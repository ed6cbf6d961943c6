"""pcapng packet blocks too short for their own fields: damage, wherever they lie."""

from __future__ import annotations

import struct

import pytest

from analyzer.capture.files import open_capture


def block(block_type: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack("<II", block_type, length) + body + struct.pack("<I", length)


HEAD = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)) + block(1, struct.pack("<HHI", 1, 0, 0))


@pytest.mark.parametrize("block_type", [2, 6])  # a packet block, an enhanced packet block
@pytest.mark.parametrize("last", [True, False])
def test_a_packet_block_too_short_for_its_fields_is_damage(tmp_path, block_type, last):
    """A packet block of 16 bytes: the data may end before its interface, time and lengths would."""
    after = b"" if last else block(0x0BAD, b"\x00" * 8)
    path = tmp_path / "short.pcapng"
    path.write_bytes(HEAD + block(block_type, b"\x00\x00\x00\x00") + after)
    with open_capture(path) as capture:
        assert list(capture.packets()) == []
        assert capture.stats.damage is not None and "corrupt packet block" in capture.stats.damage
