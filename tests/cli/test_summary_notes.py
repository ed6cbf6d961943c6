"""What the summary owes the operator beyond its figures: what --headers-only leaves out, and record batches
that failed --verify-crc (counted in the partitions table) among the anomalies."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner
from crc32c import crc32c

from analyzer.cli.commands import main

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
CAPTURE = SAMPLES / "tansu_kafka_python_codecs.pcap"


def kafkacap(*args) -> str:
    result = CliRunner().invoke(main, [*map(str, args), "--no-progress"])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_headers_only_summary_says_what_it_leaves_out():
    full = kafkacap("summary", CAPTURE, "--detect-ports")
    fast = kafkacap("summary", CAPTURE, "--detect-ports", "--headers-only")
    note = " ".join(fast[fast.index("Connections and anomalies"):].split())  # the line comes after the tables
    assert "--headers-only" in note and "per partition" in note and "Produce" in note and "OffsetCommit" in note
    assert "--headers-only" not in full


def first_record_batch(data: bytes) -> int:
    """Where the first v2 record batch lies whole in one packet: magic 2, a length that fits, and a CRC-32C
    (computed here with the crc32c package) that matches."""
    for at in range(len(data) - 61):
        if data[at + 16] != 2:
            continue
        (length,) = struct.unpack_from(">i", data, at + 8)
        if 49 <= length <= len(data) - at - 12 and \
                struct.unpack_from(">I", data, at + 17)[0] == crc32c(data[at + 21:at + 12 + length]):
            return at
    raise AssertionError("no record batch")


def test_crc_failures_are_in_the_summary_anomalies(tmp_path):
    data = bytearray(CAPTURE.read_bytes())
    at = first_record_batch(bytes(data))
    (length,) = struct.unpack_from(">i", data, at + 8)
    data[at + 12 + length - 1] ^= 0x01  # the last byte of the batch: its last record's value
    damaged = tmp_path / "crc.pcap"
    damaged.write_bytes(bytes(data))

    out = kafkacap("export", damaged, "-o", tmp_path / "out", "--detect-ports", "--verify-crc", "--summary")
    failed = [p for p in pq.read_table(tmp_path / "out" / "partitions.parquet").to_pylist() if p["crc_failures"]]
    assert [p["crc_failures"] for p in failed] == [1]
    row = next(line for line in out.splitlines() if "record batches failing their CRC" in line)
    assert re.search(r"│\s+1\s+│", row), row
    where = next(line for line in out.splitlines() if "topic[partition]" in line)
    assert f"{failed[0]['api_name']} {failed[0]['topic']}[{failed[0]['partition']}]: 1" in where, where

    clean = kafkacap("summary", CAPTURE, "--detect-ports", "--verify-crc")
    row = next(line for line in clean.splitlines() if "record batches failing their CRC" in line)
    assert re.search(r"│\s+0\s+│", row), row
    unchecked = kafkacap("summary", CAPTURE, "--detect-ports")
    row = next(line for line in unchecked.splitlines() if "record batches failing their CRC" in line)
    assert "not checked (--verify-crc)" in row


def test_a_headers_only_summary_does_not_claim_crcs_were_checked():
    out = kafkacap("summary", CAPTURE, "--detect-ports", "--headers-only", "--verify-crc")
    row = next(line for line in out.splitlines() if "record batches failing their CRC" in line)
    assert "not checked (--headers-only" in row, row
