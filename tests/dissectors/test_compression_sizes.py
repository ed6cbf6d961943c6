"""The partitions table's uncompressed_bytes, compression_ratio, records_first_offset and records_last_offset.

The references are independent of the code under test: the records fields are located by the full body
decoder (dissectors.kafka.decoder) in frames cut from the TCP streams by the test helpers, the batches are
walked here with ``struct``, and every compressed payload is decompressed here with ``gzip`` and cramjam's
plain one-shot functions; the offsets are checked against the records table (every record decoded). Then
hostile payloads: declared sizes that lie, framing that is garbage, payloads that are corrupt, and a spent
budget, none of which may raise out of a summary.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from functools import cache

import cramjam
import lz4.frame
import pytest
import xxhash
import zstandard

from dissectors.kafka import codecs
from dissectors.kafka.decoder import RecordsRef, decode
from dissectors.kafka.records import Limits, batches, payload_size, records, summarize
from dissectors.kafka.records_summary import summary_at
from tests.dissectors.test_decoder import kafka_frames
from tests.dissectors.test_records import v2_batch
from tests.helpers import SAMPLES, analyze_tables, broker_port

CODEC_SAMPLES = ("tansu_confluent_codecs", "tansu_kafka_python_codecs", "tansu_aiokafka_codecs")
LEGACY_SAMPLES = ("kafka09_legacy",)
PRODUCE, FETCH = 0, 1
V2_HEADER = 61
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _walk(value, topic, out: list) -> None:
    """(topic, partition, RecordsRef) of every records field in a decoded body."""
    if isinstance(value, dict):
        topic = value.get("name", value.get("topic", value.get("topic_id", topic)))
        for v in value.values():
            if isinstance(v, RecordsRef):
                partition = value.get("index", value.get("partition", value.get("partition_index")))
                out.append((topic, partition, v))
            else:
                _walk(v, topic, out)
    elif isinstance(value, list):
        for v in value:
            _walk(v, topic, out)


@cache
def records_fields(name: str) -> tuple:
    """(client port, api key, correlation id, partition, records bytes) of every Produce request and Fetch
    response partition with records, as the full decoder locates them."""
    out = []
    for response, key, version, corr, port, frame, body in kafka_frames(SAMPLES / f"{name}.pcap",
                                                                         (broker_port(name),)):
        if (key, response) not in ((PRODUCE, False), (FETCH, True)):
            continue
        found: list = []
        _walk(decode(frame, body, len(frame), key, version, response), None, found)
        for _topic, partition, ref in found:
            if ref.length > 0:
                out.append((port, key, corr, partition, bytes(frame[ref.offset:ref.offset + ref.length])))
    return tuple(out)


def unlz4(payload: bytes) -> bytes:
    """An lz4 frame; Kafka 0.8/0.9's header checksum (over the magic number too) is corrected first."""
    try:
        return bytes(cramjam.lz4.decompress(payload))
    except cramjam.DecompressionError:
        flags = payload[4]
        at = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
        fixed = bytearray(payload)
        fixed[at] = xxhash.xxh32(payload[4:at]).intdigest() >> 8 & 0xFF
        return bytes(cramjam.lz4.decompress(bytes(fixed)))


def unsnappy(payload: bytes) -> bytes:
    if payload[:8] == b"\x82SNAPPY\x00":  # xerial: 16-byte header, then (int32 length, raw block) ...
        out, pos = b"", 16
        while pos < len(payload):
            (size,) = struct.unpack_from(">i", payload, pos)
            out += bytes(cramjam.snappy.decompress_raw(payload[pos + 4:pos + 4 + size]))
            pos += 4 + size
        return out
    if payload[:10] == b"\xff\x06\x00\x00sNaPpY":  # the official framing
        return bytes(cramjam.snappy.decompress(payload))
    return bytes(cramjam.snappy.decompress_raw(payload))


def expand(codec: int, payload: bytes) -> bytes:
    if codec == 1:
        return gzip.decompress(payload)
    if codec == 2:
        return unsnappy(payload)
    if codec == 3:
        return unlz4(payload)
    if codec == 4:
        return bytes(cramjam.zstd.decompress(payload))
    raise AssertionError(codec)


def expected_uncompressed(data: bytes) -> int | None:
    """The complete batches' size with every payload uncompressed, batch by batch (None: no complete batch)."""
    total, pos, complete = 0, 0, 0
    while len(data) - pos >= 17:
        length, magic = struct.unpack_from(">i", data, pos + 8)[0], data[pos + 16]
        wire = 12 + length
        if wire > len(data) - pos:
            break
        complete += 1
        if magic == 2:
            codec = struct.unpack_from(">h", data, pos + 21)[0] & 7
            total += wire if codec == 0 else V2_HEADER + len(expand(codec, data[pos + V2_HEADER:pos + wire]))
        else:
            codec = data[pos + 17] & 7
            at = pos + 18 + (8 if magic == 1 else 0)
            (key_size,) = struct.unpack_from(">i", data, at)
            at += 4 + max(key_size, 0)
            (value_size,) = struct.unpack_from(">i", data, at)
            value = data[at + 4:at + 4 + value_size]
            total += wire if codec == 0 else wire - value_size + len(expand(codec, value))
        pos += wire
    return total if complete else None


def analysed(name: str, records: bool) -> dict[str, list[dict]]:
    tables = analyze_tables(SAMPLES / f"{name}.pcap", ports=(broker_port(name),), records=records)
    return {t: table.to_pylist() for t, table in tables.items()}


@cache
def partition_rows(name: str, records: bool) -> tuple[list[dict], dict]:
    """The partitions rows with the client port of their connection, and the analysed tables."""
    tables = analysed(name, records)
    ports = {c["connection_id"]: c["client_port"] for c in tables["connections"]}
    rows = [dict(r, client_port=ports[r["connection_id"]]) for r in tables["partitions"]]
    return rows, tables


@pytest.mark.parametrize("records", [False, True], ids=["default", "records"])
@pytest.mark.parametrize("name", CODEC_SAMPLES + LEGACY_SAMPLES)
def test_uncompressed_bytes_equal_the_payloads_decompressed_here(name, records):
    expected: dict[tuple, int | None] = {}
    for port, key, corr, partition, data in records_fields(name):
        where = (port, key, corr, partition)
        size = expected_uncompressed(data)
        expected[where] = None if size is None or expected.get(where, 0) is None else expected.get(where, 0) + size
    rows, _ = partition_rows(name, records)
    got: dict[tuple, int | None] = {}
    codecs_seen = set()
    for r in rows:
        if r["batches"]:
            where = (r["client_port"], r["api_key"], r["correlation_id"], r["partition"])
            size = r["uncompressed_bytes"]
            got[where] = None if size is None or got.get(where, 0) is None else got.get(where, 0) + size
            codecs_seen.update(r["codec"].split("+"))
            wire = r["request_record_bytes"] if r["api_key"] == PRODUCE else r["response_record_bytes"]
            assert r["compression_ratio"] == pytest.approx(size / wire)
    assert got == expected
    assert None not in got.values()
    if name in CODEC_SAMPLES:
        assert codecs_seen == {"none", "gzip", "snappy", "lz4", "zstd"}
        assert sum(1 for r in rows if r["codec"] not in (None, "none")) >= 8  # Produce and Fetch, four codecs


def test_the_codec_samples_hold_every_way_to_the_size():
    """Every way to the size is taken: lz4 frames with a content size (kafka-python) and without (confluent,
    aiokafka: read from the blocks), zstd frames with one (kafka-python, aiokafka) and without (confluent:
    measured by decompressing), snappy raw (confluent) and xerial-framed (the Python clients), gzip."""
    kinds = set()
    for name in CODEC_SAMPLES:
        for _port, _key, _corr, _partition, data in records_fields(name):
            codec = struct.unpack_from(">h", data, 21)[0] & 7
            payload = memoryview(data)[V2_HEADER:]
            if not codec:
                continue
            declared = codecs.declared_size(codec, payload)
            real = len(expand(codec, bytes(payload)))
            if codec == 3:
                kinds.add(("lz4", "header" if payload[4] & 0x08 else "blocks"))
            elif codec == 4:
                kinds.add(("zstd", "header" if codecs.zstd_content_size(payload) is not None else "decompressed"))
            else:
                kinds.add((CODECS[codec], "xerial" if bytes(payload[:8]) == b"\x82SNAPPY\x00" else "plain"))
            undeclared = codec == 4 and codecs.zstd_content_size(payload) is None
            assert declared == (None if undeclared else real)
    assert kinds == {("lz4", "header"), ("lz4", "blocks"), ("zstd", "header"), ("zstd", "decompressed"),
                     ("snappy", "xerial"), ("snappy", "plain"), ("gzip", "plain")}


@pytest.mark.parametrize("records", [False, True], ids=["default", "records"])
@pytest.mark.parametrize("name", CODEC_SAMPLES + LEGACY_SAMPLES + ("tansu_pipelined_producer", "tansu_consumer_group",
                                                                  "tansu_large_messages"))
def test_records_offsets_are_the_first_and_last_of_the_records_table(name, records):
    rows, _ = partition_rows(name, records)
    _, tables = partition_rows(name, True)
    offsets: dict[tuple, list[int]] = {}
    for r in tables["records"]:
        where = (r["connection_id"], r["correlation_id"], r["topic"], r["partition"])
        offsets.setdefault(where, []).append(r["offset"])
    with_records = 0
    for r in rows:
        found = offsets.get((r["connection_id"], r["correlation_id"], r["topic"], r["partition"]))
        if not found:
            assert r["records_first_offset"] is None and r["records_last_offset"] is None
            continue
        with_records += 1
        assert (r["records_first_offset"], r["records_last_offset"]) == (min(found), max(found)), r
        if r["api_key"] == FETCH:  # what was fetched: up to the high watermark, from the batch holding fetch_offset
            assert r["fetch_offset"] <= r["records_last_offset"] < r["high_watermark"]
    assert with_records >= 4


# ---------------------------------------------------------------------------------------------------------
# Built payloads: every framing, and hostile ones


VALUE = b"".join(b"value %d of the batch, " % i for i in range(40))


def record_bytes(count: int) -> bytes:
    """``count`` v2 records of VALUE, null key, no headers (zigzag varints)."""
    def varint(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = b""
        while n >= 0x80:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])
    out = b""
    for i in range(count):
        body = b"\x00" + varint(0) + varint(i) + varint(-1) + varint(len(VALUE)) + VALUE + varint(0)
        out += varint(len(body)) + body
    return out


RAW = record_bytes(5)


def xerial(raw: bytes, block: int = 300) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for at in range(0, len(raw), block):
        chunk = bytes(cramjam.snappy.compress_raw(raw[at:at + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return out


def lz4_undeclared(raw: bytes) -> bytes:
    """An lz4 frame without a content size (as librdkafka and aiokafka write them), with checksums."""
    return lz4.frame.compress(raw, store_size=False, block_checksum=True, content_checksum=True)


def zstd_undeclared(raw: bytes) -> bytes:
    """A zstd frame without a content size (as confluent-kafka writes them), with its checksum."""
    return zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(raw)


FRAMINGS = {
    "gzip": (1, lambda raw: gzip.compress(raw)),
    "snappy raw": (2, lambda raw: bytes(cramjam.snappy.compress_raw(raw))),
    "snappy xerial": (2, xerial),
    "snappy framed": (2, lambda raw: bytes(cramjam.snappy.compress(raw))),
    "lz4": (3, lambda raw: lz4.frame.compress(raw, store_size=True)),
    "lz4 undeclared": (3, lz4_undeclared),
    "lz4 two frames": (3, lambda raw: lz4.frame.compress(raw[:100]) + lz4.frame.compress(raw[100:])),
    "lz4 one frame declared, one not": (3, lambda raw: lz4.frame.compress(raw[:100]) + lz4_undeclared(raw[100:])),
    "zstd": (4, lambda raw: bytes(cramjam.zstd.compress(raw))),
    "zstd undeclared": (4, zstd_undeclared),
    "zstd after a skippable frame": (4, lambda raw: struct.pack("<II", 0x184D2A5E, 3) + b"abc"
                                     + bytes(cramjam.zstd.compress(raw))),
    "zstd two frames": (4, lambda raw: bytes(cramjam.zstd.compress(raw[:100]))
                        + bytes(cramjam.zstd.compress(raw[100:]))),
}


def both_summaries(data: bytes, limits_of=Limits) -> tuple:
    compiled = summary_at(data, 0, len(data), False, limits_of())
    general = summarize(batches(data, 0, len(data), limits=limits_of()))
    assert compiled == general
    return compiled


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_every_framing_gives_the_decompressed_size(framing):
    codec, compress = FRAMINGS[framing]
    payload = compress(RAW)
    assert len(expand(codec, payload)) == len(RAW)  # the framing is what the test means it to be
    data = v2_batch(codec, payload, 5)
    assert both_summaries(data)[3] == V2_HEADER + len(RAW)
    limits = Limits()
    assert payload_size(codec, payload, 5, limits) == len(RAW)
    twice = data + v2_batch(0, RAW, 5)
    assert both_summaries(twice)[3] == 2 * (V2_HEADER + len(RAW))


def test_a_size_declared_is_read_without_decompressing_and_an_undeclared_one_is_measured():
    """lz4 frames without a content size declare it through their blocks; zstd ones do not."""
    declared, undeclared = Limits(), Limits()
    for codec, payload in ((4, bytes(cramjam.zstd.compress(RAW))), (3, lz4.frame.compress(RAW, store_size=True)),
                           (3, lz4_undeclared(RAW)), (1, gzip.compress(RAW)), (2, xerial(RAW))):
        assert payload_size(codec, payload, 5, declared) == len(RAW)
    assert declared.total_bytes == 0
    assert codecs.declared_size(4, zstd_undeclared(RAW)) is None
    assert payload_size(4, zstd_undeclared(RAW), 5, undeclared) == len(RAW)
    assert undeclared.total_bytes == len(RAW)


def _gzip_with_isize(isize: int) -> bytes:
    return gzip.compress(RAW)[:-4] + struct.pack("<I", isize)


def test_a_lying_size_is_trusted_only_when_plausible():
    """A plausible lie (room for the records, within the codec's reach) is taken as declared: that is the
    documented trade. An implausible one sends the payload to the decompressor, whose own checks (gzip's
    length check) reject it: null, not the lie."""
    limits = Limits()
    assert payload_size(1, _gzip_with_isize(len(RAW) + 10), 5, limits) == len(RAW) + 10
    assert limits.total_bytes == 0
    for lie in (0, 5 * 7 - 1, 1 << 31, len(gzip.compress(RAW)) * 1032 + 100):
        assert payload_size(1, _gzip_with_isize(lie), 5, Limits()) is None, lie
    assert payload_size(1, _gzip_with_isize(13), 2, Limits()) is None  # two records take 14 bytes at least
    small = bytearray(cramjam.zstd.compress(RAW))
    assert small[4] == 0x60  # single segment, a 2-byte content size (less 256)
    small[5:7] = b"\x00\x00"  # says 256 bytes: too few for 100 records, so the frame is decompressed
    assert payload_size(4, bytes(small), 100, Limits()) in (None, len(RAW))
    over = Limits(max_batch_bytes=len(RAW) - 1)
    assert payload_size(4, bytes(cramjam.zstd.compress(RAW)), 5, over) is None  # over the per-batch limit
    assert over.refused == 1 and over.total_bytes == 0


GARBAGE = {
    "gzip cut": (1, gzip.compress(RAW)[:-9]),
    "gzip header only": (1, gzip.compress(RAW)[:10]),
    "snappy varint overlong": (2, b"\xff" * 12),
    "xerial block past the end": (2, xerial(RAW)[:16] + struct.pack(">i", 1 << 30) + b"\x00" * 8),
    "xerial length cut": (2, xerial(RAW)[:18]),
    "xerial block garbage": (2, xerial(RAW)[:16] + struct.pack(">i", 4) + b"\xff\xff\xff\xff"),
    "snappy framed reserved chunk": (2, bytes(cramjam.snappy.compress(RAW))[:10] + b"\x02\x01\x00\x00\x00"),
    "snappy framed chunk past the end": (2, bytes(cramjam.snappy.compress(RAW))[:10] + b"\x00\xff\xff\xff"),
    "lz4 magic only": (3, b"\x04\x22\x4d\x18"),
    "lz4 block past the end": (3, lz4_undeclared(RAW)[:7] + struct.pack("<I", 1 << 20) + b"xx"),
    "lz4 no end mark": (3, lz4.frame.compress(RAW, store_size=False)[:-4]),
    "lz4 not a frame": (3, b"\x00" * 40),
    "zstd reserved block": (4, bytes(cramjam.zstd.compress(RAW))[:6] + b"\x07\x00\x00" + b"\x00" * 20),
    "zstd block past the end": (4, bytes(cramjam.zstd.compress(RAW))[:6] + b"\xf8\xff\xff"),
    "zstd cut": (4, bytes(cramjam.zstd.compress(RAW))[:-3]),
    "zstd skippable past the end": (4, struct.pack("<II", 0x184D2A53, 1 << 30)),
    "unknown codec 5": (5, b"whatever it is" * 4),
    "unknown codec 7": (7, b""),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_payloads_leave_the_size_null_and_never_raise(case):
    codec, payload = GARBAGE[case]
    assert payload_size(codec, payload, 5, Limits()) is None
    data = v2_batch(codec, payload, 5)
    summary = both_summaries(data)
    assert summary[:3] == (1, 5, codecs.codec_name(codec)) and summary[3] is None
    assert both_summaries(data + v2_batch(0, RAW, 5))[3] is None  # one unknown batch: the total is unknown


def test_a_corrupt_payload_that_declares_its_size_keeps_the_declared_size_until_records_are_decoded():
    """The documented trade: without --records the declaration is not checked against the data; the record
    walk (--records) expands the payload, fails, and leaves no size (dissectors.kafka.records.records)."""
    for codec, payload in ((1, bytes(b ^ 0x55 if 20 < i < 40 else b for i, b in enumerate(gzip.compress(RAW)))),
                           (2, bytes(cramjam.snappy.compress_raw(RAW))[:-20])):
        assert payload_size(codec, payload, 5, Limits()) == len(RAW)
        data = v2_batch(codec, payload, 5)
        sizes: dict[int, int] = {}
        with pytest.raises(codecs.CorruptData):
            list(records(data, 0, len(data), sizes=sizes))
        assert sizes == {}
        good = v2_batch(codec, expand_with(codec, RAW), 5)
        list(records(good, 0, len(good), sizes=sizes))
        assert sizes == {0: len(RAW)}


def expand_with(codec: int, raw: bytes) -> bytes:
    return gzip.compress(raw) if codec == 1 else bytes(cramjam.snappy.compress_raw(raw))


def test_every_cut_and_byte_flip_of_a_compressed_batch_never_raises():
    """Every prefix and every flipped byte of one batch per framing: the compiled and the general summary
    agree and neither raises; a size is None or a number."""
    for framing, (codec, compress) in sorted(FRAMINGS.items()):
        data = v2_batch(codec, compress(RAW), 5)
        for cut in range(V2_HEADER, len(data) + 1, 7):
            both_summaries(data[:cut])
        for at in range(V2_HEADER, len(data)):
            broken = bytearray(data)
            broken[at] ^= 0xA5
            size = both_summaries(bytes(broken))[3]
            assert size is None or size >= V2_HEADER, framing


def test_a_spent_budget_leaves_undeclared_sizes_null():
    bare = bytes(cramjam.zstd.compress(RAW))
    limits = Limits(max_total_bytes=len(RAW) - 1)
    data = v2_batch(4, zstd_undeclared(RAW), 5)
    assert codecs.declared_size(4, memoryview(data)[V2_HEADER:]) is None
    assert summary_at(data, 0, len(data), False, limits)[3] is None
    assert limits.total_bytes > 0
    declared = v2_batch(4, bare, 5)
    assert summary_at(declared, 0, len(declared), False, limits)[3] == V2_HEADER + len(RAW)  # costs nothing


def test_records_offsets_of_built_batches():
    """v2: base offset and base offset + last offset delta, as the header says, past int64 null; the cut last
    batch does not count."""
    def batch(base: int, delta: int) -> bytes:
        data = bytearray(v2_batch(0, RAW, 5))
        struct.pack_into(">q", data, 0, base)
        struct.pack_into(">i", data, 23, delta)
        return bytes(data)
    two = batch(100, 4) + batch(105, 9) + batch(200, 4)[:-3]
    assert both_summaries(two)[-2:] == (100, 114)
    assert both_summaries(batch((1 << 63) - 2, 4))[-2:] == ((1 << 63) - 2, None)
    assert both_summaries(batch(-(1 << 63), -1))[-2:] == (-(1 << 63), None)
    assert both_summaries(batch(7, -3))[-2:] == (7, 4)
    assert both_summaries(batch(200, 4)[:-3])[-2:] == (None, None)


def test_legacy_wrapper_offsets_follow_the_inner_messages():
    """A magic 1 wrapper numbers its inner messages relative to its own offset (the last's); magic 0 inner
    messages carry theirs. A wrapper that is not expanded has its own offset as the last and no first."""
    def message(offset: int, magic: int, codec: int, value: bytes) -> bytes:
        body = bytes([magic, codec]) + (b"\x00" * 8 if magic == 1 else b"") + struct.pack(">i", -1)
        body += struct.pack(">i", len(value)) + value
        return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body
    for magic in (0, 1):
        inner = b"".join(message(i, magic, 0, b"v%d" % i) for i in range(3))
        wrapper = message(41, magic, 1, gzip.compress(inner))
        want = (39, 41) if magic == 1 else (0, 2)
        assert both_summaries(wrapper)[-2:] == want
        assert summarize(batches(wrapper, 0, len(wrapper), decompress_legacy=False))[-2:] == (None, 41)
        corrupt = message(41, magic, 1, b"\x1f\x8b not gzip at all")
        assert both_summaries(corrupt)[-2:] == (None, 41) and both_summaries(corrupt)[3] is None


def _records_of(rng: random.Random, size: int) -> bytes:
    """Record-like bytes that compress somewhat (repeats and noise), ``size`` long."""
    words = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) for _ in range(30)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words)
    return bytes(out[:size])


def test_the_compiled_lz4_and_gzip_readings_equal_the_reference_on_random_frames():
    """lz4 frames of every shape (one or many blocks, linked or independent, checksums, content size or not,
    several frames) and gzip members, whole, cut and with bytes flipped: the compiled summary (which reads
    these two codecs in C) equals the general one, and whole frames give the decompressed size."""
    rng = random.Random(18)
    checked = 0
    for _ in range(60):
        raw = _records_of(rng, rng.choice([0, 1, 50, 4000, 70_000, 300_000]))
        if rng.random() < 0.3:
            codec, payload = 1, gzip.compress(raw, compresslevel=rng.choice([1, 6, 9]))
        else:
            codec = 3
            payload = lz4.frame.compress(raw, store_size=rng.random() < 0.3, block_linked=rng.random() < 0.5,
                                         block_size=rng.choice([lz4.frame.BLOCKSIZE_MAX64KB,
                                                                lz4.frame.BLOCKSIZE_MAX256KB]),
                                         block_checksum=rng.random() < 0.5, content_checksum=rng.random() < 0.5)
            if rng.random() < 0.2:
                payload += lz4.frame.compress(raw[:100], store_size=False)
                raw += raw[:100]
        count = max(1, len(raw) // 100)
        data = v2_batch(codec, payload, count)
        assert both_summaries(data)[3] == V2_HEADER + len(raw)  # declared or, if implausible, measured
        for _ in range(12):
            broken = bytearray(data)
            for _ in range(rng.choice([1, 1, 3])):
                broken[rng.randrange(V2_HEADER, len(broken))] ^= 1 << rng.randrange(8)
            if rng.random() < 0.2:
                broken = broken[:rng.randrange(V2_HEADER, len(broken) + 1)]
                struct.pack_into(">i", broken, 8, len(broken) - 12)
            both_summaries(bytes(broken))
            checked += 1
    assert checked == 720


def test_lz4_and_gzip_sizes_are_read_in_c(monkeypatch):
    """The compiled summary asks the Python reading for nothing when an lz4 or gzip size is plausible."""
    from dissectors.kafka import records_summary

    def refuse(*args):
        raise AssertionError("called the Python reading")
    monkeypatch.setattr(records_summary, "_payload_size", refuse)
    for codec, payload in ((3, lz4_undeclared(RAW)), (3, lz4.frame.compress(RAW, store_size=True)),
                           (1, gzip.compress(RAW))):
        data = v2_batch(codec, payload, 5)
        assert summary_at(data, 0, len(data), False, Limits())[3] == V2_HEADER + len(RAW)
