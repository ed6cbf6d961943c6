"""Record decoding and decompression against hostile batches: what memory and time they may take.

A batch that expands to millions of tiny records reaches the records table in slices, every record of it;
the decompression budget is charged for the work refused and corrupt payloads cost, so thousands of bombs
spend it once and the rest are refused untouched; every refusal is counted once, in Produce requests and
Fetch responses, for all four codecs."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import cramjam
import pyarrow as pa
import pytest

import dissectors.kafka.records as records_module
from dissectors.kafka.codecs import GZIP, LZ4, SNAPPY, ZSTD, CorruptData, decompress
from dissectors.kafka.records import Limits, batches, records
from tests.craft import kstring, request, response
from tests.helpers import analyze_tables
from tests.hostile import (
    Conn,
    PcapWriter,
    legacy_message,
    produce_response_v3,
    produce_v2,
    produce_v3,
    record_batch,
    tiny_records,
)

MIB = 1 << 20
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def streamed(codec: str, data: bytes) -> bytes:
    """``data`` compressed the way a streaming producer writes it: no declared content size to refuse on,
    so refusing means expanding up to the limit (snappy in its framed format; raw snappy always declares)."""
    if codec == "gzip":
        return gzip.compress(data, 6)
    if codec == "snappy":
        return bytes(cramjam.snappy.compress(data))
    compressor = cramjam.lz4.Compressor() if codec == "lz4" else cramjam.zstd.Compressor()
    compressor.compress(data)
    return bytes(compressor.finish())


def one_record(value_size: int) -> bytes:
    """One v2 record (null key, no headers) whose value is ``value_size`` zeros."""
    def zigzag(n: int) -> bytes:
        n, out = (n << 1) ^ (n >> 63), bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out) + bytes([n])
    body = b"\x00\x00\x00\x01" + zigzag(value_size) + bytes(value_size) + b"\x00"
    return zigzag(len(body)) + body


def bomb_batch(codec: str, expands_to: int = 2 * MIB) -> bytes:
    return record_batch(streamed(codec, one_record(expands_to)), 1, codec)


class CountingCodec:
    """Stands in for codecs.decompress and counts the payloads handed to a codec."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, codec: int, data, bound: int):
        self.calls += 1
        return decompress(codec, data, bound)


@pytest.mark.parametrize("codec", CODECS)
def test_refused_bombs_spend_the_budget_then_are_refused_untouched(codec: str, monkeypatch) -> None:
    """50 bombs of 2 MiB under a 1 MiB batch limit and a 4 MiB budget: each of the first few costs about the
    limit, which is charged; once the budget is spent, the rest are refused without reaching the codec."""
    counting = CountingCodec()
    monkeypatch.setattr(records_module, "decompress", counting)
    limits = Limits(max_batch_bytes=MIB, max_total_bytes=4 * MIB)
    batch = bomb_batch(codec)
    for _ in range(50):
        assert list(records(batch, 0, len(batch), limits=limits, skip_refused=True)) == []
    assert limits.refused == 50
    assert 4 * MIB <= limits.total_bytes <= 4 * MIB + 2 * MIB  # charged for the work, at most ~one limit over
    assert counting.calls <= 4  # each charged attempt expanded at least the 1 MiB limit


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_a_refusal_expands_little_more_than_the_limit(codec: str) -> None:
    """The output buffer grows x4 up to one byte over the limit, never to the limit and then again past it
    (which expanded the limit twice)."""
    with pytest.raises(records_module.DecompressionRefused) as caught:
        decompress(CODECS[codec], streamed(codec, bytes(2 * MIB)), MIB)
    assert MIB < caught.value.produced <= 1.5 * MIB


def test_after_the_budget_a_refusal_says_so() -> None:
    limits = Limits(max_batch_bytes=MIB, max_total_bytes=2 * MIB)
    batch = bomb_batch("gzip")
    refusals = []
    for _ in range(4):
        try:
            list(records(batch, 0, len(batch), limits=limits))
        except records_module.DecompressionRefused as exc:
            refusals.append(str(exc))
    assert len(refusals) == 4
    assert "budget" not in refusals[0]
    assert "decompression budget of 2097152 bytes for this capture is spent" in refusals[-1]


def test_legacy_wrapper_bombs_spend_the_budget_once() -> None:
    """A message set of 200 gzip wrappers, each expanding past the batch limit: every one is reported refused
    and counted as one message; only the first few are expanded."""
    wrapper = legacy_message(gzip.compress(legacy_message(bytes(2 * MIB)), 9), "gzip")
    message_set = wrapper * 200
    limits = Limits(max_batch_bytes=MIB, max_total_bytes=4 * MIB)
    found = batches(message_set, 0, len(message_set), limits=limits)
    assert len(found) == 200
    assert all(b.refused and b.record_count == 1 for b in found)
    assert limits.refused == 200
    assert "is spent" in found[-1].note and "is spent" not in found[0].note
    assert 4 * MIB <= limits.total_bytes <= 6 * MIB


def test_corrupt_payloads_are_charged_for_what_they_expanded() -> None:
    """A gzip stream cut short after 2 MiB of output: refused as corrupt, and those 2 MiB are charged."""
    cut = gzip.compress(bytes(2 * MIB))[:-20]
    with pytest.raises(CorruptData) as caught:
        decompress(GZIP, cut, 8 * MIB)
    assert caught.value.produced >= 2 * MIB - 64 * 1024
    limits = Limits(max_batch_bytes=8 * MIB, max_total_bytes=64 * MIB)
    batch = record_batch(cut, 1, "gzip")
    with pytest.raises(CorruptData):
        list(records(batch, 0, len(batch), limits=limits))
    assert limits.total_bytes == caught.value.produced
    garbage = zlib.compress(bytes(4096))[:2] + b"\xff" * 100  # a zlib header, then no valid deflate block
    with pytest.raises(CorruptData) as caught:
        decompress(GZIP, garbage, 8 * MIB)
    assert 0 < caught.value.produced <= 1032 * len(garbage)  # at most what deflate could have expanded


# ---------------------------------------------------------------------------------------------------------
# Through the analysis: captures built with the hostile corpus' helpers


def fetch_v4(corr: int, topic: str, records: bytes) -> tuple[bytes, bytes]:
    """A Fetch v4 request for one partition and its response carrying ``records``."""
    asked = (struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0) + struct.pack(">i", 1) + kstring(topic)
             + struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1 << 20))
    answer = (struct.pack(">i", 0) + struct.pack(">i", 1) + kstring(topic) + struct.pack(">i", 1)
              + struct.pack(">ihqq", 0, 0, 100, 100) + struct.pack(">i", 0)
              + struct.pack(">i", len(records)) + records)
    return request(1, 4, corr, "consumer", asked), response(corr, answer)


def export(path: Path, **options) -> tuple[dict[str, list[pa.RecordBatch]], object]:
    tables = analyze_tables(path, records=True, **options)
    assert tables.report.error is None, tables.report.error
    return tables.batches, tables.report


def test_a_flood_of_tiny_records_reaches_the_table_in_slices(tmp_path: Path) -> None:
    """Two zstd batches of 5,000 tiny records with 1,000 rows a batch: every record is in the records table,
    in order, and no table batch holds more than 1,000 (all 5,000 of a batch used to be held at once)."""
    path = tmp_path / "flood.pcap"
    out = PcapWriter(path)
    conn = Conn(out, 41016).handshake()
    batch = record_batch(cramjam.zstd.compress(tiny_records(5000)).read(), 5000, "zstd")
    for corr in (1, 2):
        conn.exchange(produce_v3(corr, "flood", batch), produce_response_v3(corr, "flood"))
    out.close()
    tables, _ = export(path, batch_rows=1000)
    sizes = [b.num_rows for b in tables["records"]]
    assert max(sizes) <= 1000
    rows = pa.Table.from_batches(tables["records"])
    assert rows.column("offset").to_pylist() == list(range(5000)) * 2
    assert rows.column("correlation_id").to_pylist() == [1] * 5000 + [2] * 5000
    partitions = pa.Table.from_batches(tables["partitions"])
    assert partitions.column("records").to_pylist() == [5000, 5000]


def test_bombs_in_produce_and_fetch_are_each_refused_once(tmp_path: Path) -> None:
    """Streamed bombs of all four codecs in Produce requests and Fetch responses, then 100 legacy gzip
    wrappers over the limit, with --records: every refusal counted once (wrappers were counted twice, by
    the batch walk and again by the record walk), the good batch before them decoded, counts exact."""
    path = tmp_path / "bombs.pcap"
    out = PcapWriter(path)
    conn = Conn(out, 41010).handshake()
    good = record_batch(gzip.compress(tiny_records(3)), 3, "gzip")
    conn.exchange(produce_v3(1, "good", good), produce_response_v3(1, "good"))
    corr = 1
    for codec in CODECS:
        corr += 1
        conn.exchange(produce_v3(corr, f"bomb-{codec}", bomb_batch(codec)), produce_response_v3(corr))
        corr += 1
        conn.exchange(*fetch_v4(corr, f"bomb-{codec}", bomb_batch(codec)))
    wrapper = legacy_message(gzip.compress(legacy_message(bytes(2 * MIB)), 9), "gzip")
    corr += 1
    conn.exchange(produce_v2(corr, "legacy", wrapper * 100), produce_response_v3(corr))
    out.close()
    tables, report = export(path, max_batch_mb=1, max_decompressed_mb=4)
    assert report.refused_batches == 8 + 100
    records_table = pa.Table.from_batches(tables["records"])
    assert records_table.column("topic").to_pylist() == ["good"] * 3
    partitions = pa.Table.from_batches(tables["partitions"]).to_pylist()
    counts = {(p["api_key"], p["topic"]): p["records"] for p in partitions}
    assert counts[(0, "good")] == 3 and counts[(0, "legacy")] == 100
    assert all(counts[(key, f"bomb-{codec}")] == 1 for codec in CODECS for key in (0, 1))
