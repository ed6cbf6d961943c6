"""Record batches and legacy message sets, checked against real captures, their truth files, kafka-python's
record decoder, hostile payloads and random bytes."""

from __future__ import annotations

import gzip
import json
import random
import struct
import subprocess
import sys
import zlib
from functools import cache
from pathlib import Path

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.kafka.apis import is_known
from dissectors.kafka.codecs import CorruptData, DecompressionRefused, RecordsError, xxh32
from dissectors.kafka.extract import extract
from dissectors.kafka.records import Limits, batches, crc32c_slow, records
from tests.dissectors.test_decoder import kafka_frames, public_sources

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_pcaps"
PUBLIC = REPO.parent / "shared" / "pcaps" / "public"
PRODUCE, FETCH = 0, 1


@cache
def record_spans(path: Path, ports: tuple[int, ...], api_key: int, is_response: bool) -> tuple:
    """(topic, records bytes) of every partition of the capture's Produce requests or Fetch responses; a topic
    named by id (Produce v13) by the name a response of the capture gives that id."""
    out, names = [], {}
    for response, key, version, _corr, _port, frame, body in kafka_frames(path, ports):
        if not is_known(key, version):  # a too-new client's v99 request (kafka44_unsupported_versions): no layout
            continue
        found = extract(frame, body, len(frame), key, version, response, partial=True)
        names.update(found.topic_ids or {})
        if key == api_key and response == is_response:
            for p in found.partitions:
                if p.record_bytes:
                    out.append((p.topic, bytes(frame[p.records_offset:p.records_offset + p.record_bytes])))
    return tuple((names.get(topic, topic) if isinstance(topic, bytes) else topic, data) for topic, data in out)


def truths() -> list[Path]:
    """Plaintext samples with records (the TLS samples' record counts are checked in test_sample_truth.py)."""
    return sorted(p for p in SAMPLES.glob("*.truth.json")
                  if json.loads(p.read_text())["topics"] and "tls" not in json.loads(p.read_text()))


@pytest.mark.parametrize("truth", truths(), ids=lambda p: p.name.removesuffix(".truth.json"))
def test_produced_batches_carry_the_codecs_and_counts_of_the_truth(truth):
    facts = json.loads(truth.read_text())
    spans = record_spans(SAMPLES / facts["capture"], (facts["broker"]["port"],), PRODUCE, False)
    codecs: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for topic, data in spans:
        found = batches(data, 0, len(data), verify_crc=True)
        assert found and all(b.crc_ok and not b.truncated and b.note is None for b in found)
        assert sum(b.wire_bytes for b in found) == len(data)
        want_magic = 2 if facts["topics"][topic]["message_format"] == "v2" else 0
        assert {b.magic for b in found} == {want_magic}
        codecs.setdefault(topic, set()).update(b.codec for b in found)
        counts[topic] = counts.get(topic, 0) + sum(b.record_count for b in found)
        assert len(list(records(data, 0, len(data)))) == sum(b.record_count for b in found)
    for topic, said in facts["topics"].items():
        assert codecs[topic] == set(said["codecs"]), topic
        # a Produce retried after an error (a leader that moved) carries its records twice on the wire
        assert counts[topic] == said["produced"] + said["produced_acks0"] + said.get("produced_retried", 0), topic


def kafka_python_view(data: bytes) -> list[tuple]:
    """(offset, timestamp, key size, value size, header keys) of each record, by kafka-python's decoder."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.legacy_records import LegacyRecordBatch

    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        chunk = data[pos:pos + size]
        batch = DefaultRecordBatch(chunk) if chunk[16] == 2 else LegacyRecordBatch(chunk, chunk[16])
        for r in batch:
            headers = [k for k, _ in r.headers] if chunk[16] == 2 else []
            out.append((r.offset, r.timestamp, len(r.key) if r.key is not None else -1,
                        len(r.value) if r.value is not None else -1, headers))
        pos += size
    return out


@pytest.mark.parametrize("capture", ["tansu_kafka_python_codecs.pcap", "tansu_confluent_codecs.pcap",
                                     "tansu_aiokafka_codecs.pcap", "kafka09_legacy.pcap"])
def test_records_equal_kafka_pythons_decoding(capture):
    pytest.importorskip("kafka")
    port = json.loads((SAMPLES / capture.replace(".pcap", ".truth.json")).read_text())["broker"]["port"]
    checked = 0
    for api_key, is_response in ((PRODUCE, False), (FETCH, True)):
        for _topic, data in record_spans(SAMPLES / capture, (port,), api_key, is_response):
            if any(b.truncated for b in batches(data, 0, len(data))):
                continue
            mine = [(r.offset, r.timestamp, r.key_size, r.value_size, r.header_keys)
                    for r in records(data, 0, len(data))]
            assert mine == kafka_python_view(data)
            checked += len(mine)
    assert checked > 40


@pytest.mark.parametrize("codec", [0, 1])  # none, gzip
def test_records_of_every_varint_width_equal_what_kafka_python_built(codec):
    """Each record field read in place (size, timestamp and offset deltas, key and value sizes, header
    count) takes values of one, two and three varint bytes, in a batch built by kafka-python's encoder: the
    records read back are the ones put in, and what kafka-python's decoder reads."""
    pytest.importorskip("kafka")
    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(codec)
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    base_ts = 1_700_000_000_000
    small, large = [0, 1, 63, 64, 200], [8191, 8192, 20000]  # zigzag: up to 63 fits one byte, up to 8191 two
    put = []
    for offset in range(9000):  # offset deltas past 63 and 8191
        widths = large if offset % 97 == 0 else small
        key = None if offset % 11 == 0 else bytes(rng.choice(widths))
        value = None if offset % 13 == 0 else bytes(rng.choice(widths))
        headers = [(f"h{i}", b"v") for i in range(rng.choice([0, 0, 0, 1, 64]) if offset % 50 == 0 else 0)]
        ts = base_ts + rng.choice([0, 1, 63, 64, 5000, 8191, 9000, 3_000_000])  # negative deltas too
        builder.append(offset, ts, key, value, headers)
        put.append((offset, ts, -1 if key is None else len(key), -1 if value is None else len(value),
                    [k for k, _ in headers]))
    data = bytes(builder.build())
    mine = [(r.offset, r.timestamp, r.key_size, r.value_size, r.header_keys) for r in records(data, 0, len(data))]
    assert mine == put == kafka_python_view(data)


def test_kafka09_lz4_frames_have_the_old_header_checksum():
    """The legacy capture's lz4 wrappers need the KAFKA-3160 correction: the lz4 package refuses them."""
    lz4_frame = pytest.importorskip("lz4.frame")
    spans = record_spans(SAMPLES / "kafka09_legacy.pcap", (9092,), PRODUCE, False)
    lz4_sets = [data for topic, data in spans if topic.endswith("-lz4")]
    assert lz4_sets
    for data in lz4_sets:
        value = data[26:26 + struct.unpack_from(">i", data, 22)[0]]
        with pytest.raises(RuntimeError):
            lz4_frame.decompress(value)
        assert value[6] == (xxh32(value[:6]) >> 8) & 0xFF  # covers the magic: the old Kafka way
        assert batches(data, 0, len(data))[0].record_count == 5


def test_xxh32_matches_the_lz4_package():
    """lz4's frame header checksum is xxh32 of the descriptor: compare with frames the lz4 package writes."""
    lz4_frame = pytest.importorskip("lz4.frame")
    for content_size in (False, True):
        frame = lz4_frame.compress(b"x" * 1000, store_size=content_size)
        end = 6 + (8 if content_size else 0)
        assert frame[end] == (xxh32(frame[4:end]) >> 8) & 0xFF


def test_xxh32_equals_the_xxhash_package_at_every_length_an_lz4_header_checksum_covers():
    """A Kafka 0.8/0.9 checksum covers magic and descriptor: up to 18 bytes with content size and dictionary id."""
    xxhash = pytest.importorskip("xxhash")
    rng = random.Random(7)
    for n in range(40):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert xxh32(data) == xxhash.xxh32_intdigest(data), n


@pytest.mark.parametrize("compress", [lambda data: gzip.compress(data, mtime=0),
                                      lambda data: bytes(cramjam.snappy.compress(data))], ids=["gzip", "snappy"])
def test_refused_payloads_are_charged_to_the_file_budget(compress):
    """A payload refused only after expanding to its bound cost that work: charged to the file's budget, a
    capture of thousands of such payloads stops costing once the budget is spent."""
    codec = 1 if compress(b"")[:2] == b"\x1f\x8b" else 2
    bomb = compress(bytes(2 << 20))
    limits = Limits(max_batch_bytes=1 << 20, max_total_bytes=4 << 20)
    for _ in range(10):
        with pytest.raises(DecompressionRefused):
            limits.expand(codec, bomb)
    assert limits.refused == 10
    # About four refusals' work at 1 MiB each (the bytes each really expanded before it was refused, a growing
    # buffer's earlier attempts included), then nothing left to expand into.
    assert 4 << 20 <= limits.total_bytes <= 6 << 20


def test_a_payload_refused_by_its_declared_size_costs_nothing():
    lz4_frame = pytest.importorskip("lz4.frame")
    limits = Limits(max_batch_bytes=1 << 20, max_total_bytes=4 << 20)
    with pytest.raises(DecompressionRefused):
        limits.expand(3, lz4_frame.compress(bytes(2 << 20), store_size=True))
    assert limits.refused == 1 and limits.total_bytes == 0


def test_crc32c_fallback_equals_the_crc32c_package():
    crc32c = pytest.importorskip("crc32c")
    for data in (b"", b"123456789", bytes(range(256)) * 3):
        assert crc32c_slow(data) == crc32c.crc32c(data)
    assert crc32c_slow(b"123456789") == 0xE3069283  # the check value of CRC-32C


# ---------------------------------------------------------------------------------------------------------
# Public captures


@cache
def public_spans() -> tuple:
    sources = public_sources()
    out = []
    for name, source in sources.items():
        for api_key, is_response in ((PRODUCE, False), (FETCH, True)):
            for topic, data in record_spans(PUBLIC / name, source["ports"], api_key, is_response):
                out.append((name, topic, data))
    return tuple(out)


@pytest.mark.skipif(not PUBLIC.exists(), reason="../shared/pcaps/public is not available")
def test_public_batches_verify_and_decode():
    spans = public_spans()
    assert spans
    seen_magic, complete = set(), 0
    for name, _topic, data in spans:
        found = batches(data, 0, len(data), verify_crc=True)
        for b in found:
            seen_magic.add(b.magic)
            if not b.truncated:
                assert b.crc_ok, (name, b)
                complete += 1
        assert all(not b.truncated for b in found[:-1])
        decoded = list(records(data, 0, len(data)))
        assert len(decoded) == sum(b.record_count for b in found if not b.truncated), name
    assert complete >= 8 and 2 in seen_magic


@pytest.mark.skipif(not (PUBLIC / "deepflowio-deepflow__00-produce-v7-sw8.pcap").exists(),
                    reason="../shared/pcaps/public is not available")
def test_sw8_trace_header_is_surfaced():
    traces = [r.trace for name, _t, data in public_spans() if name.endswith("produce-v7-sw8.pcap")
              for r in records(data, 0, len(data))]
    assert traces and all(t is not None and t.startswith("sw8=1-") for t in traces)


# ---------------------------------------------------------------------------------------------------------
# Truncation, corruption, bombs


def sample_sets() -> list[bytes]:
    spans = []
    for capture in ("tansu_kafka_python_codecs.pcap", "tansu_confluent_codecs.pcap", "kafka09_legacy.pcap"):
        spans += [data for _t, data in record_spans(SAMPLES / capture, (9092,), PRODUCE, False)]
    return spans


def test_a_cut_final_batch_is_flagged_not_raised():
    for data in sample_sets():
        whole = batches(data, 0, len(data))
        for cut in (1, 5, len(data) - whole[-1].wire_bytes + 20, len(data) - whole[-1].wire_bytes + 70):
            if not 0 < cut < len(data) or len(data) - cut <= len(data) - whole[-1].wire_bytes:
                continue
            part = batches(data, 0, len(data) - cut)
            assert part[-1].truncated and not any(b.truncated for b in part[:-1])
            assert part[:-1] == whole[:len(part) - 1]
            assert sum(b.wire_bytes for b in part) == len(data) - cut
            assert len(list(records(data, 0, len(data) - cut))) <= sum(b.record_count for b in whole)


def test_a_flipped_byte_fails_the_crc():
    for data in sample_sets():
        last = len(data) - 3  # inside the last batch's payload, covered by both CRC kinds
        bad = bytearray(data)
        bad[last] ^= 0x40
        found = batches(bytes(bad), 0, len(bad), verify_crc=True, decompress_legacy=False)
        assert found[-1].crc_ok is False
        assert all(b.crc_ok for b in found[:-1])


def v2_batch(codec: int, payload: bytes, count: int) -> bytes:
    from crc32c import crc32c

    after_crc = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + payload
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), 0, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc


BOMB_SCRIPT = r"""
import resource, sys, time, zlib, cramjam
from dissectors.kafka.records import Limits, batches, records
from dissectors.kafka.codecs import DecompressionRefused
from tests.dissectors.test_records import v2_batch, legacy_message
GIB, CHUNK = 1 << 30, bytes(1 << 24)
def gzip_bomb():
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return b"".join([c.compress(CHUNK) for _ in range(GIB // len(CHUNK))] + [c.flush()])
def zstd_bomb():
    c = cramjam.zstd.Compressor(3)
    for _ in range(GIB // len(CHUNK)): c.compress(CHUNK)
    return bytes(c.finish())
def snappy_bomb():  # raw: a block declares 1 GiB (the length is all a refusal reads)
    one = bytes(cramjam.snappy.compress_raw(CHUNK))
    return bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + one[4:]
def lz4_bomb():
    c = cramjam.lz4.Compressor()
    for _ in range(GIB // len(CHUNK)): c.compress(CHUNK)
    return bytes(c.finish())
for codec, make in ((1, gzip_bomb), (2, snappy_bomb), (3, lz4_bomb), (4, zstd_bomb)):
    bomb = make()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        list(records(v2_batch(codec, bomb, 1), 0, len(v2_batch(codec, bomb, 1))))
        raise SystemExit(f"codec {codec}: not refused")
    except DecompressionRefused:
        pass
    wrapper = legacy_message(codec, bomb)
    legacy = batches(wrapper, 0, len(wrapper))[0]
    assert legacy.refused and legacy.record_count == 1, legacy
    took = time.perf_counter() - start
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print(codec, len(bomb), f"{took:.3f}", grew)
"""


def legacy_message(codec: int, value: bytes, magic: int = 0) -> bytes:
    body = struct.pack(">bb", magic, codec) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body


def test_decompression_bombs_are_refused_fast_in_bounded_memory():
    """1 GiB of zeros in every codec, in a v2 batch and a legacy wrapper, under the default 64 MiB limit."""
    run = subprocess.run([sys.executable, "-c", BOMB_SCRIPT], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines()]
    assert [row[0] for row in rows] == ["1", "2", "3", "4"]
    for codec, size, took, grew_mib in rows:
        assert int(size) < 8 << 20, codec  # small on the wire
        assert float(took) < 3.0, codec
        assert int(grew_mib) < 3 * 64 + 16, codec  # within a small multiple of the limit, never the GiB


def test_limits_are_shared_and_count_refusals():
    payload = zlib.compress(bytes(1000))
    batch = v2_batch(0, _records_of_size(1000), 1)
    assert len(list(records(batch, 0, len(batch)))) == 1
    gz = v2_batch(1, zlib.compress(_records_of_size(1000)), 1)
    limits = Limits(max_batch_bytes=10_000, max_total_bytes=2_500)
    assert len(list(records(gz, 0, len(gz), limits=limits))) == 1
    assert len(list(records(gz, 0, len(gz), limits=limits))) == 1
    with pytest.raises(DecompressionRefused):
        list(records(gz, 0, len(gz), limits=limits))
    assert list(records(gz, 0, len(gz), limits=limits, skip_refused=True)) == []
    assert limits.refused == 2 and 2_500 <= limits.total_bytes <= 2_501  # the refused expansion spent the rest
    assert payload  # a zlib stream (not gzip) is accepted too: the batch above used one


def _records_of_size(value_size: int) -> bytes:
    """One v2 record with a value of ``value_size`` bytes, written by hand from the spec's layout."""
    def zigzag(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(value_size) + bytes(value_size) + zigzag(0)
    return zigzag(len(body)) + body


def test_corrupt_payloads_raise_records_errors():
    batch = v2_batch(4, b"\x28\xb5\x2f\xfd" + b"\x00" * 20, 1)
    with pytest.raises(CorruptData):
        list(records(batch, 0, len(batch)))
    wrapper = legacy_message(2, b"\xff" * 30)
    (info,) = batches(wrapper, 0, len(wrapper))
    assert info.note and not info.refused and info.record_count == 1


# ---------------------------------------------------------------------------------------------------------
# Fuzzing: only RecordsError escapes


def only_records_errors(data: bytes) -> None:
    for verify in (False, True):
        try:
            batches(data, 0, len(data), verify_crc=verify, limits=Limits(1 << 20, 1 << 22))
        except RecordsError:
            pass
    try:
        for _ in records(data, 0, len(data), limits=Limits(1 << 20, 1 << 22)):
            pass
    except RecordsError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_records_errors(data):
    only_records_errors(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_real_batches_raise_only_records_errors(draw):
    sets = sample_sets()
    data = bytearray(draw.draw(st.sampled_from(sets)))
    for _ in range(draw.draw(st.integers(1, 4))):
        at = draw.draw(st.integers(0, len(data) - 1))
        data[at] = draw.draw(st.integers(0, 255))
    only_records_errors(bytes(data[:draw.draw(st.integers(0, len(data)))]))


def test_codec_errors_are_records_errors():
    for codec in (1, 2, 3, 4, 7):
        for junk in (b"", b"\x00", b"\x04\x22\x4d\x18\x60\x40\x00", bytes(cramjam.zstd.compress(b"x"))[:-2]):
            wrapper = legacy_message(codec, junk)
            batches(wrapper, 0, len(wrapper))
            try:  # an empty payload may decode to an empty message set; anything else is an error
                assert list(records(wrapper, 0, len(wrapper))) == [], (codec, junk)
            except RecordsError:
                pass


# ---------------------------------------------------------------------------------------------------------
# Speed
