"""Link, IP and TCP header decoding: one frame on a link type chosen by the first byte.

Documented error: none. Undecodable frames give a reason code (an int), never an exception; a decoded
packet's payload range lies inside the frame (its start may pass its stop, an empty payload, when the capture
cut the TCP options); the quick path of ``decoder()`` must give what the general ``decode()`` gives.
"""

from __future__ import annotations

from analyzer.capture import linklayer as link

LINK_TYPES = (link.ETHERNET, link.LINUX_SLL, link.LINUX_SLL2, link.RAW, link.IPV4, link.IPV6, link.NULL,
              link.LOOP, 147)  # 147: a link type kafkacap does not decode

ALLOWED: tuple[type[BaseException], ...] = ()


def test_one_input(data: bytes) -> None:
    if not data:
        return
    linktype = LINK_TYPES[data[0] % len(LINK_TYPES)]
    frame = data[1:]
    general = link.decode(linktype, frame, 0, len(frame))
    quick = link.decoder(linktype)(frame, 0, len(frame))
    if isinstance(general, int):
        assert 0 <= general < link.REASONS, general
        return
    key, seq, ack, flags, start, stop, seg_len = general
    assert len(key) in (12, 36) and 0 <= start and stop <= len(frame) and seg_len >= 0, general
    assert quick == general, (quick, general)
