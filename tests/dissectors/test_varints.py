"""The varint readers (dissectors/kafka/varints.py) at their boundaries, and every caller's own error types.

Kafka's limits (ByteUtils): unsigned varints and zigzag varints take at most 5 bytes, varlongs at most 10. The
records reader keeps its 10 bytes for every record field. A too-long varint is malformed (the callers' error
class); one that runs past ``end`` is truncated (their truncated subclass, where they have one).
"""

from __future__ import annotations

import struct

import pytest

from analyzer.cli import show
from analyzer.session.sasl import SaslWatch
from dissectors.kafka import decoder, headers, varints
from dissectors.kafka.codecs import RecordsError
from dissectors.kafka.decoder import DecodeError, DecodeTruncated, decode
from dissectors.kafka.headers import HeaderError, HeaderTruncated, decode_request_header, produce_acks
from dissectors.kafka.records import records
from dissectors.kafka.varints import VarintError, VarintTruncated, varint_readers
from tests.craft import request, uvarint

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def zigzag(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def padded(value: int, width: int) -> bytes:
    """``value`` as an unsigned varint of exactly ``width`` bytes (non-canonical zero padding, which Kafka reads)."""
    out = bytearray()
    for i in range(width):
        out.append(value >> 7 * i & 0x7F | (0x80 if i < width - 1 else 0))
    return bytes(out)


class Bad(Exception):
    pass


class Short(Bad):
    pass


READERS = varint_readers(Bad, Short)
UVARINT_MAX = b"\xff\xff\xff\xff\x7f"  # the largest 5 bytes hold (2**35 - 1), which Kafka cuts to 32 bits


# -- the shared readers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, width", [(0, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (2**28 - 1, 4),
                                          (2**28, 5), (2**32 - 1, 5), (2**35 - 1, 5)])
def test_uvarint_values_up_to_five_bytes(value, width):
    data = uvarint(value)
    assert len(data) == width
    assert READERS.read_uvarint(data + b"\xff", 0, len(data)) == (value, width)
    assert READERS.read_uvarint(b"zz" + data, 2, 2 + width) == (value, 2 + width)


def test_uvarint_limit_is_five_bytes():
    for width in range(1, 6):
        assert READERS.read_uvarint(padded(1, width), 0, width) == (1, width)
    assert READERS.read_uvarint(UVARINT_MAX, 0, 5) == (2**35 - 1, 5)
    for data in (b"\x80" * 5 + b"\x00", b"\xff" * 5 + b"\x01", b"\xff" * 20):
        with pytest.raises(Bad) as info:
            READERS.read_uvarint(data, 0, len(data))
        assert type(info.value) is Bad
    with pytest.raises(Bad) as info:  # too long shows on the fifth byte: the sixth need not be there
        READERS.read_uvarint(b"\x80" * 5, 0, 5)
    assert type(info.value) is Bad


@pytest.mark.parametrize("read", ["read_uvarint", "read_varint", "read_varlong"])
def test_truncation_at_every_byte(read):
    reader = getattr(READERS, read)
    data = padded(1, 10 if read == "read_varlong" else 5)
    for cut in range(len(data)):
        with pytest.raises(Short):
            reader(data, 0, cut)
        with pytest.raises(Short):  # ``end`` is obeyed though the buffer goes on
            reader(data + b"\x00" * 8, 0, cut)
    with pytest.raises(Short):
        reader(data, len(data), len(data))
    with pytest.raises(Short):
        reader(b"", 0, 0)


@pytest.mark.parametrize("value", [0, -1, 1, 63, -64, 64, -65, INT32_MIN, INT32_MAX])
def test_varint_zigzag(value):
    data = zigzag(value)
    assert READERS.read_varint(data, 0, len(data)) == (value, len(data))
    assert READERS.read_varlong(data, 0, len(data)) == (value, len(data))


def test_varint_extremes_take_five_bytes_and_no_more():
    for value in (INT32_MIN, INT32_MAX):
        assert len(zigzag(value)) == 5
    with pytest.raises(Bad) as info:
        READERS.read_varint(zigzag(INT32_MIN - 2**34), 0, 6)  # 6 bytes: a varint is not a varlong
    assert type(info.value) is Bad


@pytest.mark.parametrize("value", [INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, -(2**35), 2**35, 0, -1])
def test_varlong_zigzag(value):
    data = zigzag(value)
    assert READERS.read_varlong(b"?" + data + b"\xff", 1, 1 + len(data)) == (value, 1 + len(data))


def test_varlong_limit_is_ten_bytes():
    assert len(zigzag(INT64_MIN)) == len(zigzag(INT64_MAX)) == 10
    assert READERS.read_varlong(padded(2, 10), 0, 10) == (1, 10)
    for data in (b"\x80" * 10 + b"\x00", b"\xff" * 11, b"\x80" * 10):
        with pytest.raises(Bad) as info:
            READERS.read_varlong(data, 0, len(data))
        assert type(info.value) is Bad


def test_the_default_readers_raise_value_errors():
    assert issubclass(VarintTruncated, VarintError) and issubclass(VarintError, ValueError)
    assert varints.read_uvarint(b"\x96\x01", 0, 2) == (150, 2)
    with pytest.raises(VarintTruncated):
        varints.read_uvarint(b"\x96", 0, 1)
    with pytest.raises(VarintError) as info:
        varints.read_uvarint(b"\x80" * 6, 0, 6)
    assert not isinstance(info.value, VarintTruncated)
    with pytest.raises(VarintTruncated):
        varints.read_varlong(b"\x80" * 9, 0, 9)


# -- each caller's error types -----------------------------------------------------------------------------

TOO_LONG, CUT = b"\x80\x80\x80\x80\x80\x01", b"\x80\x80"


def test_headers_raise_header_error_and_header_truncated():
    with pytest.raises(HeaderError) as info:
        headers.read_uvarint(TOO_LONG, 0, len(TOO_LONG))
    assert not isinstance(info.value, HeaderTruncated)
    with pytest.raises(HeaderTruncated):
        headers.read_uvarint(CUT, 0, len(CUT))
    too_long = request(18, 3, 1, "x", TOO_LONG)  # ApiVersions v3: header v2, whose tag count is too long
    with pytest.raises(HeaderError) as info:
        decode_request_header(too_long, 4, len(too_long))
    assert not isinstance(info.value, HeaderTruncated)
    cut = request(18, 3, 1, "x", CUT)
    with pytest.raises(HeaderTruncated):
        decode_request_header(cut, 4, len(cut))


def test_produce_acks_waits_on_a_truncated_varint_and_rejects_a_long_one():
    flexible = 9  # Produce v9+: a compact transactional_id first
    assert produce_acks(uvarint(4) + b"txn" + struct.pack(">h", -1), 0, 6, flexible) == -1
    assert produce_acks(CUT, 0, len(CUT), flexible) is None
    with pytest.raises(HeaderError):
        produce_acks(TOO_LONG + b"\x00\x01", 0, 8, flexible)


def test_decoder_raises_decode_error_and_decode_truncated():
    for read in (decoder.read_uvarint, decoder.read_varint):
        with pytest.raises(DecodeError) as info:
            read(TOO_LONG, 0, len(TOO_LONG))
        assert not isinstance(info.value, DecodeTruncated)
        with pytest.raises(DecodeTruncated):
            read(CUT, 0, len(CUT))
    with pytest.raises(DecodeError) as info:
        decoder.read_varlong(b"\x80" * 11, 0, 11)
    assert not isinstance(info.value, DecodeTruncated)
    with pytest.raises(DecodeTruncated):
        decoder.read_varlong(b"\x80" * 9, 0, 9)
    assert decoder.read_varlong(zigzag(INT64_MIN), 0, 10) == (INT64_MIN, 10)
    # ApiVersions v3 request: client_software_name is a compact string
    with pytest.raises(DecodeError) as info:
        decode(TOO_LONG, 0, len(TOO_LONG), 18, 3, False)
    assert not isinstance(info.value, DecodeTruncated) and info.value.path == "client_software_name"
    with pytest.raises(DecodeTruncated):
        decode(CUT, 0, len(CUT), 18, 3, False)


def test_show_reads_record_fields_with_the_decoder_readers():
    with pytest.raises(DecodeError) as info:
        show._varint_bytes(TOO_LONG, 0, len(TOO_LONG))
    assert not isinstance(info.value, DecodeTruncated)
    with pytest.raises(DecodeTruncated):
        show._varint_bytes(CUT, 0, len(CUT))


def batch(*bodies: bytes, first_timestamp: int = 1000) -> bytes:
    """A v2 record batch (uncompressed, CRC not checked here) of records with these bodies."""
    data = b"".join(zigzag(len(body)) + body for body in bodies)
    tail = struct.pack(">bIhiqqqhii", 2, 0, 0, len(bodies) - 1, first_timestamp, first_timestamp, -1, -1, -1,
                       len(bodies)) + data
    return struct.pack(">qii", 0, len(tail) + 4, 0) + tail


def record(timestamp_delta: bytes = b"\x00", header_key_length: bytes | None = None) -> bytes:
    """attributes, timestamp delta, offset delta 0, null key, value "v", then no header or one keyed "k"."""
    body = b"\x00" + timestamp_delta + b"\x00" + zigzag(-1) + zigzag(1) + b"v"
    if header_key_length is None:
        return body + b"\x00"
    return body + zigzag(1) + header_key_length + b"k" + zigzag(-1)


def decoded(data: bytes) -> list:
    return list(records(data, 0, len(data)))


def test_records_read_64_bit_zigzag_and_ten_bytes_in_every_field():
    (one,) = decoded(batch(record(zigzag(INT64_MIN))))
    assert one.timestamp == 1000 + INT64_MIN
    (one,) = decoded(batch(record(zigzag(INT64_MAX), header_key_length=padded(2, 10))))
    assert one.timestamp == 1000 + INT64_MAX and one.header_keys == ["k"]
    body = record()
    data = padded(len(body) << 1, 10) + body  # the record length itself in ten bytes
    tail = struct.pack(">bIhiqqqhii", 2, 0, 0, 0, 1000, 1000, -1, -1, -1, 1) + data
    assert [r.value_size for r in decoded(struct.pack(">qii", 0, len(tail) + 4, 0) + tail)] == [1]


@pytest.mark.parametrize("where", ["timestamp_delta", "header_key_length"])
def test_records_raise_records_error_on_an_eleven_byte_varint(where):
    eleven = b"\x80" * 10 + b"\x00"
    data = batch(record(eleven) if where == "timestamp_delta" else record(header_key_length=eleven))
    with pytest.raises(RecordsError) as info:
        decoded(data)
    assert type(info.value) is RecordsError


def test_records_raise_records_error_on_a_varint_cut_at_any_byte():
    full = zigzag(INT64_MIN)
    for cut in range(10):
        body = b"\x00" + full[:cut]  # the record (and its batch) end inside the timestamp delta
        tail = struct.pack(">bIhiqqqhii", 2, 0, 0, 0, 1000, 1000, -1, -1, -1, 1) + zigzag(len(body)) + body
        with pytest.raises(RecordsError) as info:
            decoded(struct.pack(">qii", 0, len(tail) + 4, 0) + tail)
        assert type(info.value) is RecordsError
    cut_header = record(header_key_length=b"\x80")[:-2]  # a header key length whose next byte is not there
    with pytest.raises(RecordsError) as info:
        decoded(batch(cut_header))
    assert type(info.value) is RecordsError


class Matcher:
    legacy = None


def sasl_authenticate_v2(tags: bytes, auth: bytes) -> bytes:
    """A SaslAuthenticate v2 request frame (header v2: its tag buffer is ``tags``) carrying ``auth``."""
    return request(36, 2, 7, "c", tags + uvarint(len(auth) + 1) + auth)


def test_sasl_reads_flexible_tokens_and_passes_over_a_bad_varint():
    for tags, principal in ((b"\x00", "alice"), (uvarint(1) + uvarint(3) + uvarint(1) + b"z", "alice"),
                            (TOO_LONG, None), (b"\x01\x00\x80", None)):
        watch = SaslWatch(Matcher())
        watch.mechanism = "PLAIN"
        frame = sasl_authenticate_v2(tags, b"\0alice\0pw")
        if principal is None and tags.endswith(b"\x80"):
            frame = frame[:frame.index(b"\x01\x00\x80") + 3]  # cut inside the tag's size
        watch._sasl_request(frame, 1)
        assert watch.principal == principal
        assert watch.pending == [(7, 36, 1, 2)]


def test_sasl_response_with_a_bad_tag_buffer_has_no_outcome():
    for tags, outcome in ((b"\x00", "authenticated"), (TOO_LONG, None), (b"\x80", None)):
        watch = SaslWatch(Matcher())
        head = struct.pack(">ii", 0, 7) + tags + (struct.pack(">h", 0) if outcome else b"")
        watch._sasl_response(36, 2, head)
        assert watch.outcome == outcome
