"""Damaged captures: what the undamaged parts hold is found, and the files table says what was passed over.

The sample captures (real clients, real broker) are damaged deterministically. Where the damage is confined
to record or block headers, the expected tables are those of the same capture with exactly the damaged
records left out, written afresh: every other packet must be read, numbered as in that capture.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from analyzer.capture import files as capture_module
from tests.helpers import GROUP, SAMPLES, run_tables, sample_captures
from tests.tcp.test_bulk import sorted_rows

PCAPS = sample_captures((".pcap",))
PCAPNG = SAMPLES / "tansu_ipv6_confluent.pcapng"
ROW_TABLES = ("exchanges", "errors", "partitions", "connections")


def export(path: Path, bulk: bool = True) -> tuple[dict[str, pa.Table], dict]:
    """The tables of one file as the CLI exports them, and its files row."""
    tables = dict(run_tables(path, bulk=bulk))
    files = tables.pop("files").to_pylist()
    assert len(files) == 1
    return tables, files[0]


def put(tmp_path: Path, folder: str, name: str, content: bytes) -> Path:
    """Write a capture; the damaged and expected ones share a name (rows carry it) in folders of their own."""
    path = tmp_path / folder / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


def assert_same_rows(got: dict[str, pa.Table], expected: dict[str, pa.Table]) -> None:
    for name in ROW_TABLES:
        rows = [sorted_rows(t[name]) if name in t else [] for t in (got, expected)]
        assert rows[0] == rows[1], name


def pcap_records(content: bytes) -> tuple[bytes, str, list[tuple[int, int]]]:
    """The global header, the byte order and each record's (start, end) in a clean pcap."""
    order = "<" if content[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records, pos = [], 24
    while pos < len(content):
        caplen, = struct.unpack_from(order + "I", content, pos + 8)
        records.append((pos, pos + 16 + caplen))
        pos += 16 + caplen
    return content[:24], order, records


def without(content: bytes, records: list[tuple[int, int]], lost: set[int]) -> bytes:
    """The capture with the records numbered in ``lost`` left out."""
    return content[:24] + b"".join(content[a:b] for i, (a, b) in enumerate(records) if i not in lost)


def damage_headers(content: bytes, every: int, kind: str) -> tuple[bytes, bytes, int, int]:
    """Every ``every``-th record (from the third) made implausible: a captured length far over the limit, or
    a time more than a day away. Returns the damaged capture, the capture without those records, how many
    were hit and their bytes."""
    _, order, records = pcap_records(content)
    damaged = bytearray(content)
    lost = set(range(2, len(records), every))
    for i in lost:
        start = records[i][0]
        if kind == "length":
            struct.pack_into(order + "I", damaged, start + 8, 0x7FFF0000 + i)
        else:
            sec, = struct.unpack_from(order + "I", content, start)
            struct.pack_into(order + "I", damaged, start, sec ^ 0x40000000)
    return bytes(damaged), without(content, records, lost), len(lost), sum(
        records[i][1] - records[i][0] for i in lost)


@pytest.mark.parametrize("bulk", [True, False], ids=["chunked", "per-packet"])
@pytest.mark.parametrize("kind", ["length", "time"])
@pytest.mark.parametrize("path", PCAPS, ids=lambda p: p.name)
def test_damaged_record_headers_lose_only_their_records(tmp_path, path, kind, bulk):
    damaged, expected, hit, hit_bytes = damage_headers(path.read_bytes(), 9, kind)
    damaged = put(tmp_path, "damaged", "cap.pcap", damaged)
    expected = put(tmp_path, "expected", "cap.pcap", expected)
    got, row = export(damaged, bulk)
    want, want_row = export(expected, bulk)
    assert_same_rows(got, want)
    assert (row["packets"], row["exchanges"]) == (want_row["packets"], want_row["exchanges"])
    assert (row["status"], row["damaged_places"], row["skipped_bytes"]) == ("damaged", hit, hit_bytes)
    assert "resynchronised at byte" in row["message"] and "cut short" not in row["message"]


@pytest.mark.parametrize("chunk_size, read_ahead", [(8 << 20, 2), (1000, 0), (4096, 2)])
def test_damage_in_a_gzip_stream_is_passed_over_too(tmp_path, monkeypatch, chunk_size, read_ahead):
    """Decompressed in chunks smaller than the records and the search (refills while resynchronising)."""
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", chunk_size)
    monkeypatch.setattr(capture_module, "READ_AHEAD_CHUNKS", read_ahead)
    path = GROUP
    damaged, expected, hit, hit_bytes = damage_headers(path.read_bytes(), 9, "length")
    damaged = put(tmp_path, "damaged", "cap.pcap.gz", gzip.compress(damaged))
    expected = put(tmp_path, "expected", "cap.pcap.gz", gzip.compress(expected))
    got, row = export(damaged)
    want, _ = export(expected)
    assert_same_rows(got, want)
    assert (row["damaged_places"], row["skipped_bytes"]) == (hit, hit_bytes)
    assert "at decompressed byte" in row["message"]


@pytest.mark.parametrize("bulk", [True, False], ids=["chunked", "per-packet"])
def test_caplen_over_the_snaplen_and_over_the_file(tmp_path, bulk):
    """A captured length over the snaplen is damage; one running past the end of the file is damage when
    records follow (the file goes on), and a file cut short only when none do."""
    content = (SAMPLES / "tansu_admin.pcap").read_bytes()
    _, order, records = pcap_records(content)
    snaplen, = struct.unpack_from(order + "I", content, 16)
    damaged = bytearray(content)
    struct.pack_into(order + "I", damaged, records[5][0] + 8, snaplen + 1)
    third_last = records[-3][0]
    struct.pack_into(order + "I", damaged, third_last + 8, len(content) - third_last)  # 16 bytes too many
    got, row = export(put(tmp_path, "damaged", "cap.pcap", damaged), bulk)
    want, _ = export(put(tmp_path, "expected", "cap.pcap", without(content, records, {5, len(records) - 3})),
                     bulk)
    assert_same_rows(got, want)
    assert row["damaged_places"] == 2
    assert row["message"].startswith(f"packet record claiming {snaplen + 1} captured bytes (limit {snaplen}) "
                                     f"at byte {records[5][0]}, resynchronised at byte {records[6][0]}")

    struct.pack_into(order + "I", damaged, records[-1][0] + 8, len(content))  # the last one: a cut
    (tmp_path / "cut.pcap").write_bytes(damaged[:records[5][0]] + damaged[records[-1][0]:])
    _, row = export(tmp_path / "cut.pcap", bulk)
    assert row["message"] == f"truncated packet record at byte {records[5][0]} (file cut short?)"


# Long-lived connections of many packets (the cluster's replication and producer streams) lose a third of their
# exchanges: a flip in a TCP sequence number reads as a jump of up to 4 GB, which reassembly takes as a gap
# (gap_bytes 4.8 GB) until the stream realigns. A segment far outside any TCP window should not move the stream.
LONG_LIVED = ("kafka44_cluster.pcap",)


def _flips_last_time(path: Path, flipped: range) -> bool:
    """Whether a flipped byte lands in the header of a classic pcap's last packet record: its time moves, or the
    record is lost and the packet before it is the last."""
    if path.suffix != ".pcap":
        return False
    _, _, records = pcap_records(path.read_bytes())
    last = records[-1][0]
    return any(last <= at < last + 16 for at in flipped)


def rot(tmp_path: Path, paths: list[Path]) -> tuple[int, int]:
    """A byte flipped every 1000 bytes of each capture: (exchanges of the clean captures, of them found)."""
    clean_keys = found_keys = 0
    for path in paths:
        content = bytearray(path.read_bytes())
        for at in range(1000, len(content), 1000):
            content[at] ^= 0x5A
        clean, clean_row = export(path)
        got, row = export(put(tmp_path, "rotten", path.name, bytes(content)))
        keys = [set(zip(*(t["exchanges"].column(c).to_pylist() for c in ("client_port", "correlation_id")),
                        strict=True)) if "exchanges" in t else set() for t in (clean, got)]
        clean_keys += len(keys[0])
        found_keys += len(keys[0] & keys[1])
        assert row["packets"] >= 0.9 * clean_row["packets"], path.name
        if not _flips_last_time(path, range(1000, len(content), 1000)):
            assert row["last_ts"] == clean_row["last_ts"], path.name
    return clean_keys, found_keys


def test_bit_rot_keeps_most_exchanges(tmp_path):
    """A byte flipped every 1000 bytes, payloads included: each capture is read to its end, few packets are
    lost, and most exchanges of the clean captures are found (a flip in a payload can still cost the frames
    of its stream: that is the framer's to recover)."""
    clean_keys, found_keys = rot(tmp_path, [p for p in [*PCAPS, PCAPNG] if p.name not in LONG_LIVED])
    assert found_keys >= 0.8 * clean_keys


@pytest.mark.xfail(strict=True, reason="a flipped sequence number moves a long-lived stream (LONG_LIVED)")
def test_bit_rot_keeps_most_exchanges_of_long_lived_connections(tmp_path):
    clean_keys, found_keys = rot(tmp_path, [p for p in PCAPS if p.name in LONG_LIVED])
    assert clean_keys and found_keys >= 0.8 * clean_keys


# --- pcapng ----------------------------------------------------------------------------------------------

def pcapng_blocks(content: bytes) -> list[tuple[int, int, int]]:
    """(type, start, end) of each block of a little-endian pcapng."""
    blocks, pos = [], 0
    while pos < len(content):
        block_type, length = struct.unpack_from("<II", content, pos)
        blocks.append((block_type, pos, pos + length))
        pos += length
    return blocks


def pcapng_cases() -> dict[str, tuple[bytes, bytes, int, int]]:
    """name -> (damaged, expected, skipped bytes, skipped blocks) for one damaged block of the sample."""
    content = PCAPNG.read_bytes()
    blocks = pcapng_blocks(content)
    _, start, end = [b for b in blocks if b[0] == 6][40]
    after = content[:start] + content[end:]

    def length(value: int) -> bytes:
        damaged = bytearray(content)
        struct.pack_into("<I", damaged, start + 4, value)
        return bytes(damaged)

    undeclared = bytearray(content)
    struct.pack_into("<I", undeclared, start + 8, 7)
    shb_end = blocks[0][2]
    return {
        "length too long": (length(end - start + 400), content, 0, 0),
        "length too short": (length(end - start - 8), content, 0, 0),  # its trailing copy gives the length
        "length absurd": (length(0x7FFF0000), content, 0, 0),
        "length absurd, trailing copy too": (length(0x7FFF0000)[:end - 4] + b"\xff" * 4 + content[end:], after,
                                             end - start, 0),
        "undeclared interface": (bytes(undeclared), after, end - start, 1),
        "packet before any interface": (content[:shb_end] + content[start:end] + content[shb_end:], content,
                                        end - start, 1),
    }


@pytest.mark.parametrize("case", list(pcapng_cases()))
def test_damaged_pcapng_block_loses_at_most_itself(tmp_path, case):
    """A block whose length field alone is damaged is read at the length its trailing copy gives; one on an
    undeclared interface is passed over; one with both copies of its length damaged is lost, alone."""
    damaged, expected, skipped_bytes, skipped_blocks = pcapng_cases()[case]
    damaged = put(tmp_path, "damaged", "cap.pcapng", damaged)
    expected = put(tmp_path, "expected", "cap.pcapng", expected)
    got, row = export(damaged)
    want, want_row = export(expected)
    assert_same_rows(got, want)
    assert row["packets"] == want_row["packets"]
    assert (row["status"], row["damaged_places"]) == ("damaged", 1)
    assert (row["skipped_bytes"], row["skipped_blocks"]) == (skipped_bytes, skipped_blocks)


@pytest.mark.parametrize("chunk_size", [8 << 20, 1000])
def test_damaged_pcapng_blocks_in_a_gzip_stream(tmp_path, monkeypatch, chunk_size):
    """Each damaged block of the cases above, compressed and decompressed in chunks smaller than a block:
    the rows and counts are those of the plain file."""
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", chunk_size)
    for damaged, *_ in pcapng_cases().values():
        plain, plain_row = export(put(tmp_path, "plain", "cap.pcapng", damaged))
        packed, packed_row = export(put(tmp_path, "packed", "cap.pcapng", gzip.compress(damaged)))
        assert_same_rows(packed, plain)
        for column in ("packets", "damaged_places", "skipped_bytes", "skipped_blocks"):
            assert packed_row[column] == plain_row[column], column


# --- every packet accounted -------------------------------------------------------------------------------

def assert_accounted(tables: dict[str, pa.Table], row: dict) -> None:
    """packets = Kafka + TLS + other TCP + non-TCP + undecodable, and the Kafka and TLS packets are those of
    the connections table."""
    parts = ("kafka_packets", "tls_packets", "other_tcp_packets", "non_tcp_packets", "undecodable_packets")
    assert row["packets"] == sum(row[p] for p in parts)
    assert min(row[p] for p in parts) >= 0
    assert row["tcp_packets"] == row["kafka_packets"] + row["tls_packets"] + row["other_tcp_packets"]
    conns = tables["connections"].to_pylist() if "connections" in tables else []
    for tls, column in ((False, "kafka_packets"), (True, "tls_packets")):
        assert row[column] == sum(c["packets_to_broker"] + c["packets_to_client"] for c in conns if c["tls"] == tls)


def test_every_packet_is_accounted_for(tmp_path):
    """On every sample, damaged or not, and on a sample with known other traffic added: each kind counted."""
    for path in [*PCAPS, PCAPNG]:
        assert_accounted(*export(path))
    for i, path in enumerate(PCAPS[:4]):
        damaged, *_ = damage_headers(path.read_bytes(), 7, "length")
        (tmp_path / f"d{i}.pcap").write_bytes(damaged)
        assert_accounted(*export(tmp_path / f"d{i}.pcap"))
    for damaged, *_ in pcapng_cases().values():
        (tmp_path / "d.pcapng").write_bytes(damaged)
        assert_accounted(*export(tmp_path / "d.pcapng"))

    base = SAMPLES / "tansu_admin.pcap"
    content = base.read_bytes()
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    web = IP(src="10.9.0.1", dst="10.9.0.2")
    extra = (
        [eth / ARP()] * 3
        + [eth / web / UDP(sport=5353, dport=5353) / Raw(b"mdns")] * 4
        + [eth / web / TCP(sport=50000 + n, dport=80, flags="S") for n in range(5)]
        + [eth / IP(src="10.9.0.1", dst="10.9.0.2", flags="MF", proto=6) / Raw(b"x" * 24)]
        + [eth / IP(src="10.9.0.1", dst="10.9.0.2", frag=3, proto=6) / Raw(b"y" * 24)]
        + [eth / IP(src="10.9.0.1", dst="10.9.0.2", proto=6)]  # no TCP header after it: too short
    )
    _, order, records = pcap_records(content)
    sec, = struct.unpack_from(order + "I", content, records[-1][0])
    added = b"".join(struct.pack(order + "IIII", sec + 1, 0, len(bytes(p)), len(bytes(p))) + bytes(p)
                     for p in extra)
    (tmp_path / "mixed.pcap").write_bytes(content + added)
    clean_tables, clean = export(base)
    for bulk in (True, False):
        tables, row = export(tmp_path / "mixed.pcap", bulk)
        assert_accounted(tables, row)
        assert (row["kafka_packets"], row["other_tcp_packets"], row["non_tcp_packets"],
                row["undecodable_packets"]) == (clean["kafka_packets"], 5, 7, 3)


@pytest.mark.parametrize("bulk", [True, False], ids=["chunked", "per-packet"])
def test_record_like_garbage_is_passed_over_as_one_place(tmp_path, bulk):
    """Half a megabyte of empty record headers dated three days apart in turn (each looks like a record,
    none makes a chain) between the file header and the sample's records: the search goes through them
    (in bulk, see RecordScan) and every record after them is read."""
    content = (SAMPLES / "tansu_admin.pcap").read_bytes()
    sec, = struct.unpack_from("<I", content, 24)
    decoys = b"".join(struct.pack("<IIII", sec + i % 2 * 3 * 86400, 0, 0, 0) for i in range(1 << 15))
    got, row = export(put(tmp_path, "damaged", "cap.pcap", content[:24] + decoys + content[24:]), bulk)
    want, want_row = export(put(tmp_path, "expected", "cap.pcap", content), bulk)
    assert_same_rows(got, want)
    assert (row["packets"], row["damaged_places"], row["skipped_bytes"]) == (
        want_row["packets"], 1, len(decoys))


@pytest.mark.parametrize("chunk_size", [8 << 20, 1000])
def test_damage_near_the_end_of_a_gzip_stream(tmp_path, monkeypatch, chunk_size):
    """A record claiming more than is left with records after it, and a last record dated years away: the
    stream is read as the plain file is (the data a refill came short of is kept; the last record's time is
    judged at the end of the data, not of a chunk)."""
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", chunk_size)
    content = (SAMPLES / "tansu_admin.pcap").read_bytes()
    _, order, records = pcap_records(content)
    damaged = bytearray(content)
    eighth_last = records[-8][0]
    struct.pack_into(order + "I", damaged, eighth_last + 8, len(content) - eighth_last)
    last = records[-1][0]
    struct.pack_into(order + "I", damaged, last, struct.unpack_from(order + "I", content, last)[0] ^ 0x40000000)
    want, want_row = export(put(tmp_path, "expected", "cap.pcap", without(
        content, records, {len(records) - 8, len(records) - 1})))
    got, row = export(put(tmp_path, "damaged", "cap.pcap", gzip.compress(bytes(damaged))))
    assert_same_rows(got, want)
    assert (row["packets"], row["damaged_places"]) == (want_row["packets"], 2)
