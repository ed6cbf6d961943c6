"""Timestamps far from the capture's own: old CreateTime records (MirrorMaker, backfills), unset clocks, answers
that come months later, pcapng clocks past 2262 or offset by -2^62 s. Every such value must be kept when
timestamp[us, UTC] can hold it, and otherwise be null with a note, without costing the export its tables."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests import craft
from tests.helpers import export_tables, kafkacap

# records: when some
TABLES = ("cluster", "connections", "errors", "exchanges", "files", "group_heartbeats", "groups", "partitions",
          "records", "share_consumption", "share_ranges", "transaction_steps", "transactions")
CAPTURE_START = 1_700_000_000.0
UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
INT64_MAX = (1 << 63) - 1


def record_batch(timestamp_ms: int, count: int = 2) -> bytes:
    """A v2 record batch (kafka-python's builder) whose records all carry ``timestamp_ms``."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for offset in range(count):
        builder.append(offset, timestamp_ms, None, b"value", [])
    return bytes(builder.build())


def produce_request_v3(corr: int, records: bytes) -> bytes:
    """Produce v3: transactional_id, acks, timeout, [topic, [partition, records]]."""
    body = (craft.kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + craft.kstring("topic-a")
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", len(records)) + records)
    return craft.request(0, 3, corr, body=body)


def fetch_request_v4(corr: int) -> bytes:
    """Fetch v4: replica_id, max_wait, min_bytes, max_bytes, isolation, [topic, [partition, offset, max]]."""
    body = (struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0) + struct.pack(">i", 1) + craft.kstring("topic-a")
            + struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1 << 20))
    return craft.request(1, 4, corr, body=body)


def fetch_response_v4(corr: int, records: bytes) -> bytes:
    """Fetch v4 response: throttle, [topic, [partition, error, high watermark, last stable, aborted, records]]."""
    body = (struct.pack(">i", 0) + struct.pack(">i", 1) + craft.kstring("topic-a") + struct.pack(">i", 1)
            + struct.pack(">ihqq", 0, 0, 2, 2) + struct.pack(">i", -1) + struct.pack(">i", len(records)) + records)
    return craft.response(corr, body)


def conversation_with_records(timestamp_ms: int) -> list:
    """A heartbeat, a Produce and a Fetch of records stamped ``timestamp_ms``, then another heartbeat."""
    c = craft.Conversation(t=CAPTURE_START)
    c.handshake()
    c.send(True, craft.heartbeat_request(0))
    c.send(False, craft.heartbeat_response(0))
    c.send(True, produce_request_v3(1, record_batch(timestamp_ms)))
    c.send(False, craft.produce_response_v3(1))
    c.send(True, fetch_request_v4(2))
    c.send(False, fetch_response_v4(2, record_batch(timestamp_ms)))
    c.send(True, craft.heartbeat_request(3))
    c.send(False, craft.heartbeat_response(3))
    c.fin()
    return c.packets


def export(capture: Path, out: Path) -> dict[str, list[dict]]:
    """``kafkacap export --records``: every table must be written; their rows, by table."""
    tables = export_tables(capture, out, "--records")
    assert sorted(tables) in (list(TABLES), [t for t in TABLES if t != "records"])
    return {t: tables[t].to_pylist() if t in tables else [] for t in TABLES}


def by_correlation(rows: list[dict]) -> dict[int, dict]:
    return {r["correlation_id"]: r for r in rows}


def assert_heartbeats_intact(tables: dict[str, list[dict]]) -> None:
    """The exchanges before and after the odd one are whole: status, api and plausible times."""
    exchanges = by_correlation(tables["exchanges"])
    assert sorted(exchanges) == [0, 1, 2, 3]
    for corr in (0, 3):
        row = exchanges[corr]
        assert (row["api_name"], row["status"], row["note"]) == ("Heartbeat", "ok", None)
        assert abs(row["request_first_ts"].timestamp() - CAPTURE_START) < 60
        assert 0 < row["latency_ms"] < 10
    assert len(tables["connections"]) == 1 and tables["files"][0]["status"] == "ok"


def ms_time(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


@pytest.mark.parametrize("timestamp_ms", [
    pytest.param(0, id="epoch"),
    pytest.param(int((CAPTURE_START - 200 * 86400) * 1000), id="200-days-before"),
    pytest.param(int(dt.datetime(2300, 1, 1, tzinfo=UTC).timestamp() * 1000), id="after-2262"),
])
def test_records_stamped_far_from_the_capture_keep_their_time(tmp_path, timestamp_ms):
    cap = craft.write(tmp_path / "far.pcap", conversation_with_records(timestamp_ms))
    tables = export(cap, tmp_path / "out")
    assert_heartbeats_intact(tables)
    stamped = ms_time(timestamp_ms)
    assert [r["timestamp"] for r in tables["records"]] == [stamped] * 4
    partitions = {r["api_name"]: r for r in tables["partitions"]}
    for api in ("Produce", "Fetch"):
        assert partitions[api]["first_record_ts"] == partitions[api]["max_record_ts"] == stamped
    fetch = partitions["Fetch"]
    age_ms = (fetch["response_last_ts"] - stamped) / dt.timedelta(milliseconds=1)
    assert fetch["data_age_ms"] == pytest.approx(age_ms, abs=1e-3)
    assert by_correlation(tables["exchanges"])[2]["status"] == "ok"


def test_records_stamped_at_int64_max_have_no_time_and_say_why(tmp_path):
    """INT64_MAX ms is past what timestamp[us] holds: null, the records and their exchanges kept."""
    cap = craft.write(tmp_path / "far.pcap", conversation_with_records(INT64_MAX))
    tables = export(cap, tmp_path / "out")
    assert_heartbeats_intact(tables)
    assert [r["timestamp"] for r in tables["records"]] == [None] * 4
    assert [r["offset"] for r in tables["records"]] == [0, 1, 0, 1]
    for row in tables["partitions"]:
        assert row["first_record_ts"] is row["max_record_ts"] is None
        assert row["records"] == 2
        assert row["data_age_ms"] is None
    exchanges = by_correlation(tables["exchanges"])
    assert exchanges[1]["status"] == exchanges[2]["status"] == "ok"
    assert exchanges[1]["record_count"] == exchanges[2]["record_count"] == 2


def test_a_response_months_after_its_request_has_its_exact_latency(tmp_path):
    """200 days is more nanoseconds than a float64 holds exactly (2^53 ns is about 104 days)."""
    c = craft.Conversation(t=CAPTURE_START)
    c.handshake()
    c.send(True, craft.heartbeat_request(0))
    c.send(False, craft.heartbeat_response(0))
    c.send(True, craft.heartbeat_request(1))
    c.t += 200 * 86400
    c.send(False, craft.heartbeat_response(1))
    c.send(True, craft.heartbeat_request(2))
    c.send(False, craft.heartbeat_response(2))
    c.fin()
    cap = craft.write(tmp_path / "late.pcap", c.packets)
    tables = export(cap, tmp_path / "out")
    exchanges = by_correlation(tables["exchanges"])
    assert sorted(exchanges) == [0, 1, 2]
    late = exchanges[1]
    spanned = late["response_last_ts"] - late["request_last_ts"]
    assert late["latency_ms"] == pytest.approx(spanned / dt.timedelta(milliseconds=1), abs=1e-3)
    assert late["latency_ms"] > 200 * 86400 * 1000
    assert exchanges[0]["latency_ms"] < 10 and exchanges[2]["latency_ms"] < 10


def pcapng(packets: list, ts_ns: list[int], tsoffset_s: int = 0) -> bytes:
    """A pcapng of Ethernet ``packets`` stamped ``ts_ns`` (one interface, nanosecond resolution, if_tsoffset),
    written field by field: the 64-bit timestamps and offset are what is under test."""
    def block(block_type: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        length = len(body) + 12
        return struct.pack("<II", block_type, length) + body + struct.pack("<I", length)

    section = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    options = (struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HHq", 14, 8, tsoffset_s)
               + struct.pack("<HH", 0, 0))
    interface = block(1, struct.pack("<HHI", 1, 0, 65535) + options)
    blocks = []
    for packet, ts in zip(packets, ts_ns, strict=True):
        data = bytes(packet)
        blocks.append(block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data)) + data))
    return section + interface + b"".join(blocks)


def test_pcapng_times_past_2262_are_kept(tmp_path):
    """Past 2262 a time no longer fits int64 nanoseconds, but timestamp[us] holds it."""
    packets = conversation_with_records(int(CAPTURE_START * 1000))
    start = int(dt.datetime(2300, 1, 1, tzinfo=UTC).timestamp()) * 10**9
    ts = [start + i * 1_000_000 for i in range(len(packets))]  # a millisecond apart
    cap = tmp_path / "future.pcapng"
    cap.write_bytes(pcapng(packets, ts))
    tables = export(cap, tmp_path / "out")
    first = EPOCH + dt.timedelta(microseconds=start // 1000)

    def packet_time(number: int) -> dt.datetime:
        return first + dt.timedelta(milliseconds=number - 1)

    exchanges = by_correlation(tables["exchanges"])
    assert sorted(exchanges) == [0, 1, 2, 3]
    for row in exchanges.values():
        assert row["request_first_ts"] == packet_time(row["request_frame"])
        assert row["response_last_ts"] == packet_time(row["response_frame"])
        assert row["latency_ms"] == pytest.approx(row["response_frame"] - row["request_frame"])
        assert (row["status"], row["note"]) == ("ok", None)
    for row in tables["partitions"]:
        assert row["response_last_ts"] == exchanges[row["correlation_id"]]["response_last_ts"]
    for row in tables["records"]:
        assert row["frame_ts"] in (exchanges[1]["request_last_ts"], exchanges[2]["response_last_ts"])
    assert len(tables["records"]) == 4
    assert tables["connections"][0]["first_ts"] == first
    assert tables["files"][0]["first_ts"] == first
    assert tables["files"][0]["last_ts"] == packet_time(len(packets))


def test_pcapng_times_offset_by_minus_2_to_the_62_seconds_are_null_and_say_why(tmp_path):
    """-2^62 s is some 146 billion years before 1970: no timestamp holds it; the rows stay, their times null."""
    packets = conversation_with_records(int(CAPTURE_START * 1000))
    ts = [int(CAPTURE_START * 10**9) + i * 1_000_000 for i in range(len(packets))]
    cap = tmp_path / "offset.pcapng"
    cap.write_bytes(pcapng(packets, ts, tsoffset_s=-(1 << 62)))
    tables = export(cap, tmp_path / "out")
    exchanges = by_correlation(tables["exchanges"])
    assert sorted(exchanges) == [0, 1, 2, 3]
    for row in exchanges.values():
        assert row["request_first_ts"] is row["response_last_ts"] is None
        assert row["latency_ms"] == pytest.approx(row["response_frame"] - row["request_frame"])  # offset cancels
        assert row["status"] == "ok"
        assert "capture time" in row["note"]
    assert exchanges[1]["record_count"] == exchanges[2]["record_count"] == 2
    partitions = {r["api_name"]: r for r in tables["partitions"]}
    assert sorted(partitions) == ["Fetch", "Produce"]
    for row in partitions.values():
        assert row["request_last_ts"] is row["response_last_ts"] is None
        assert row["first_record_ts"] == ms_time(int(CAPTURE_START * 1000))
    assert partitions["Fetch"]["data_age_ms"] is None  # the response time is unknown
    assert [r["frame_ts"] for r in tables["records"]] == [None] * 4
    connection, = tables["connections"]
    assert connection["first_ts"] is connection["last_ts"] is None
    assert connection["requests"] == connection["responses"] == 4
    files, = tables["files"]
    assert files["first_ts"] is files["last_ts"] is None
    assert files["packets"] == len(packets)
    assert "capture time" in files["message"]


# 34001-01-01: 80 Gregorian cycles of 400 years (146,097 days each) after 2001-01-01.
YEAR_34001_MS = (int(dt.datetime(2001, 1, 1, tzinfo=UTC).timestamp()) + 80 * 146_097 * 86_400) * 1000


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_exports_write_years_past_9999_as_they_are(tmp_path, fmt):
    """Python's datetime ends at year 9999 and Arrow's CSV writer wraps some way past it: a record stamped
    34001-01-01 must read so in CSV and JSON lines, the capture's own times as usual."""
    cap = craft.write(tmp_path / "far.pcap", conversation_with_records(YEAR_34001_MS))
    out = tmp_path / "out"
    kafkacap("export", cap, "-o", out, "--records", "--format", fmt, "--no-progress")
    text = (out / f"records.{fmt}").read_text()
    stamp = "34001-01-01T00:00:00.000000+00:00" if fmt == "jsonl" else "34001-01-01 00:00:00.000000Z"
    assert text.count(stamp) == 4
    exchanges = (out / f"exchanges.{fmt}").read_text()
    assert exchanges.count("2023-11-14") >= 8  # the capture's own times, in the usual form
