"""Properties of the layers beyond "no crash", under hypothesis:

- reassembly: any order and repetition of a stream's segments, without holes, gives back the stream;
- framing: the frames of the sample captures' request streams are the same however the bytes are cut;
- extraction: on bodies kio encodes (an independent encoder), the extractor finds the errors and topics
  that a walk of the full decoder's tree along Kafka's JSON message definitions finds (the extract fuzz
  target checks the errors on any bytes);
- decompression: payloads that expand past the bound are refused in every codec, the rest come back whole.
"""

from __future__ import annotations

import gzip
import io
import struct
from collections import Counter
from functools import cache

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.tcp.reassembly import HalfStream
from dissectors.kafka import codecs
from dissectors.kafka.codecs import DecompressionRefused
from dissectors.kafka.decoder import decode
from dissectors.kafka.extract import extract
from dissectors.kafka.headers import looks_like_request
from dissectors.sink import ByteSink
from tests.dissectors.test_roundtrip import (
    DEFINITIONS,
    KIO_BODIES,
    by_api,
    draw_kio_body,
    json_definitions,
    json_message,
    kio,
    snake,
)
from tests.fuzz.seeds import frames, sample_captures, streams
from tests.fuzz.targets.extract import errors_in_tree
from tests.fuzz.targets.framing import split

MASK32 = 0xFFFFFFFF  # sequence numbers wrap at 2**32
QUICK = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------------------------------------------
# Reassembly


class Collect(ByteSink):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.gaps = 0

    def data(self, ts_ns: int, frame_no: int, chunk: memoryview) -> None:
        self.chunks.append(bytes(chunk))

    def gap(self, ts_ns: int, nbytes: int) -> None:
        self.gaps += nbytes


@st.composite
def shuffled_segments(draw) -> tuple[int, bytes, list[tuple[int, int]]]:
    """(initial sequence number, stream, segments as (start, end) in any order, some repeated or merged)."""
    stream = draw(st.binary(min_size=1, max_size=3000))
    isn = draw(st.sampled_from((0, MASK32 - 5, MASK32 - 1500)) | st.integers(0, MASK32))
    cuts = sorted(draw(st.sets(st.integers(1, len(stream) - 1), max_size=60))) if len(stream) > 1 else []
    bounds = [0, *cuts, len(stream)]
    segments = list(zip(bounds, bounds[1:], strict=False))
    repeats = draw(st.lists(st.sampled_from(segments), max_size=10))
    spans = draw(st.lists(st.tuples(st.sampled_from(bounds), st.sampled_from(bounds)), max_size=5))
    overlapping = [(a, b) for a, b in spans if a < b]  # retransmissions that merge several segments
    order = draw(st.permutations(segments + repeats + overlapping))
    return isn, stream, order


@QUICK
@given(shuffled_segments())
def test_reassembly_of_any_order_and_repetition_without_holes_gives_the_stream(case):
    isn, stream, order = case
    sink = Collect()
    half = HalfStream(sink)
    half.syn(0, isn)
    for no, (start, end) in enumerate(order):
        half.segment(no, no, (isn + 1 + start) & MASK32, memoryview(stream[start:end]), end - start)
    half.flush(len(order))
    assert b"".join(sink.chunks) == stream
    assert sink.gaps == 0 and half.gap_bytes == 0


# ---------------------------------------------------------------------------------------------------------
# Framing


@cache
def request_streams() -> list[bytes]:
    """Client-to-broker streams of the sample captures that start at a frame (their SYN was captured)."""
    out = []
    for path in sample_captures():
        for stream in streams(path).values():
            found = frames(stream)
            if len(found) >= 2 and looks_like_request(found[0], 4, len(found[0]), len(found[0]) - 4):
                out.append(stream[:200_000])
    return out


@QUICK
@given(st.data())
def test_the_framer_finds_the_same_frames_however_the_stream_is_cut(data):
    stream = data.draw(st.sampled_from(request_streams()))
    keep = data.draw(st.sampled_from((64, 256, 1 << 20)))
    whole, _ = split(stream, 0, keep)
    cut, splitter = split(stream, data.draw(st.integers(0, 127)), keep)  # 0-127: cuts without losses
    assert cut == whole
    assert [size for size, _head, _lossy in whole] == [len(f) - 4 for f in frames(stream)][:len(whole)]
    assert len(whole) == len(frames(stream)) and splitter.skipped_bytes == 0


def test_there_are_request_streams_to_cut():
    assert len(request_streams()) >= 10


# ---------------------------------------------------------------------------------------------------------
# Extraction against the full decoder


def message_structs(message: dict) -> dict[str, list]:
    """The common structs of a JSON message definition by name."""
    return {s["name"]: s["fields"] for s in message.get("commonStructs", ())}


def walk_topics(fields: list, value, structs: dict[str, list], out: set) -> None:
    """Topic names of a decoded tree: the fields Kafka's JSON definitions mark ``entityType: topicName``."""
    if isinstance(value, list):
        for item in value:
            walk_topics(fields, item, structs, out)
        return
    if not isinstance(value, dict):
        return
    for field in fields:
        key = snake(field["name"])
        if key not in value or value[key] is None:
            continue
        item = value[key]
        if field.get("entityType") == "topicName":
            out.update(t for t in (item if isinstance(item, list) else [item]) if t)
        inner = field.get("fields") or structs.get(field["type"].removeprefix("[]"))
        if inner:
            walk_topics(inner, item, structs, out)


@pytest.mark.skipif(kio is None, reason="kio is not installed")
@pytest.mark.skipif(not DEFINITIONS, reason="Kafka's definitions are not available (topics are found by their JSON)")
@pytest.mark.parametrize("key, is_response, versions", by_api(KIO_BODIES))
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_extract_finds_the_errors_and_topics_the_full_decoder_shows(key, is_response, versions, data):
    json_definitions()
    for version in versions:
        _, _, buf = draw_kio_body(data, key, version, is_response)
        tree = decode(buf, 0, len(buf), key, version, is_response)
        found = extract(buf, 0, len(buf), key, version, is_response)
        errors: Counter = Counter()
        if is_response:
            errors_in_tree(tree, "", errors)
        assert Counter((e.field_path, e.error_code) for e in found.errors) == errors, f"v{version}"
        message = json_message(key, version, is_response)
        topics: set = set()
        walk_topics(message["fields"], tree, message_structs(message), topics)
        assert {t for t in found.topics if isinstance(t, str) and t} == topics, f"v{version}"


# ---------------------------------------------------------------------------------------------------------
# Decompression bounds


def compress(codec: int, data: bytes, declared: bool) -> bytes:
    """``data`` compressed as Kafka clients do (with or without the size declared up front, where the format
    has that choice)."""
    if codec == codecs.GZIP:
        return gzip.compress(data, mtime=0)
    if codec == codecs.SNAPPY:
        if declared:
            return bytes(cramjam.snappy.compress_raw(data))
        block = bytes(cramjam.snappy.compress_raw(data))  # xerial framing, as the Java client writes it
        return codecs.XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec == codecs.LZ4:
        import lz4.frame

        return lz4.frame.compress(data, store_size=declared)
    if declared:
        return bytes(cramjam.zstd.compress(data))
    import zstandard

    writer = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(writer, closefd=False) as stream:
        stream.write(data)
    return writer.getvalue()


@QUICK
@given(codec=st.sampled_from((codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD)),
       size=st.integers(0, 300_000), bound=st.sampled_from((0, 1000, 1 << 16, 1 << 18)),
       declared=st.booleans(), pattern=st.binary(min_size=1, max_size=16))
def test_decompression_returns_the_payload_within_the_bound_and_refuses_past_it(codec, size, bound, declared,
                                                                                   pattern):
    pytest.importorskip({codecs.LZ4: "lz4.frame", codecs.ZSTD: "zstandard"}.get(codec, "cramjam"))
    data = (pattern * (size // len(pattern) + 1))[:size]
    payload = compress(codec, data, declared)
    if size > bound:
        with pytest.raises(DecompressionRefused):
            codecs.decompress(codec, payload, bound)
    else:
        assert bytes(codecs.decompress(codec, payload, bound)) == data


# ---------------------------------------------------------------------------------------------------------
# TLS records across segments


class Plaintext(ByteSink):
    def __init__(self) -> None:
        self.bytes = bytearray()

    def data(self, ts_ns: int, frame_no: int, chunk: memoryview) -> None:
        self.bytes += chunk

    def gap(self, ts_ns: int, nbytes: int) -> None:
        raise AssertionError("no bytes were lost")


def tls_plaintext(segments: list[tuple[bool, bytes]], cuts: list[list[int]]) -> tuple[bytes, bytes, int]:
    """Both directions' plaintext (client's, server's) and the records opened, each segment handed over in the
    pieces ``cuts`` gives (positions inside it)."""
    from analyzer.tls.layer import TlsDirection, TlsSession
    from tests.fuzz.targets.tls import KEYS, Outputs

    session = TlsSession(Outputs(KEYS))
    sinks = (Plaintext(), Plaintext())
    directions = (TlsDirection(session, True, sinks[0]), TlsDirection(session, False, sinks[1]))
    for no, ((from_client, payload), at) in enumerate(zip(segments, cuts, strict=True)):
        bounds = [0, *sorted(set(at)), len(payload)]
        for start, end in zip(bounds, bounds[1:], strict=False):
            if end > start:
                directions[0 if from_client else 1].data(no, no, memoryview(payload)[start:end])
    return bytes(sinks[0].bytes), bytes(sinks[1].bytes), session.opened


@cache
def tls_samples() -> list[list[tuple[bool, bytes]]]:
    from tests.fuzz.seeds import SAMPLES, TLS_SAMPLES, tls_connections

    return [conn for name in TLS_SAMPLES for conn in tls_connections(SAMPLES / name)]


@QUICK
@given(st.data())
def test_tls_plaintext_is_the_same_however_the_segments_are_cut(data):
    segments = data.draw(st.sampled_from(tls_samples()))
    whole = tls_plaintext(segments, [[] for _ in segments])
    cuts = [data.draw(st.lists(st.integers(0, len(payload)), max_size=6)) for _, payload in segments]
    assert tls_plaintext(segments, cuts) == whole


def test_the_sample_tls_connections_decrypt():
    """The property above compares something: the sample connections with logged keys give Kafka plaintext
    (a request's size prefix then its api key and version, as the truth files' clients sent)."""
    opened = [tls_plaintext(conn, [[] for _ in conn]) for conn in tls_samples()]
    readable = [(client, server) for client, server, records in opened if records]
    assert len(readable) >= 10
    for client, _server in readable:
        assert looks_like_request(client, 4, len(client), struct.unpack_from(">i", client)[0])
