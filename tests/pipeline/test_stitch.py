"""Rotated capture sets: the files of one capture, analysed file by file and stitched, give the rows of the
whole capture analysed in one pass (what `tcpdump -C` / `-G` users need)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.pipeline.stitch import capture_sets, merge_connections, set_key
from tests.helpers import GROUP, SAMPLES, Paths, canonical_rows, pcap_records, run_tables, split_capture

# Captures with many connections, pipelining, long-polling fetches and frames over many segments.
SPLIT_CASES = ["tansu_consumer_group.pcap", "tansu_large_messages.pcap", "tansu_pipelined_producer.pcap",
               "tansu_confluent_codecs.pcap", "kafka09_legacy.pcap"]


def _export(paths: Paths, jobs: int = 1, stitch: bool = True) -> dict[str, pa.Table]:
    return run_tables(paths, detect_ports=True, jobs=jobs, stitch=stitch, all_tables=True)


def _whole(src: Path, tmp: Path) -> dict[str, pa.Table]:
    """The reference: the capture in one file, named as the set's first file."""
    (tmp / "whole").mkdir()
    one = tmp / "whole" / "cap.pcap"
    one.write_bytes(src.read_bytes())
    return _export([str(one)])


@pytest.mark.parametrize("capture", SPLIT_CASES)
def test_split_capture_gives_the_rows_of_the_whole(capture: str, tmp_path: Path) -> None:
    src = SAMPLES / capture
    whole = _whole(src, tmp_path)
    n = len(pcap_records(src)[1])
    rng = random.Random(capture)
    for attempt in range(4):  # cuts anywhere: inside frames, between a request and its response
        cuts = sorted(rng.sample(range(1, n), 3))
        paths = split_capture(src, tmp_path / f"split{attempt}", cuts)
        parts = _export(list(reversed(paths)), jobs=1 + attempt % 2)  # any order given; shards with --jobs 2
        for table in ("exchanges", "errors", "partitions"):
            assert canonical_rows(parts[table]) == canonical_rows(whole[table]), (table, cuts)
        # Connections: one row per connection; the packet and byte counters add up exactly.
        counters = ("capture_file", "connection_id", "client_ip", "client_port", "broker_ip", "broker_port",
                    "first_ts", "last_ts", "packets_to_broker", "packets_to_client", "bytes_to_broker",
                    "bytes_to_client", "handshake_rtt_ms", "syn_seen")
        assert canonical_rows(parts["connections"].select(counters)) == \
            canonical_rows(whole["connections"].select(counters)), cuts
        # How it ended: the same, except that a FIN pair split over two files reads as capture_end.
        ends = {(r["connection_id"]): r["ended"] for r in parts["connections"].to_pylist()}
        for r in whole["connections"].to_pylist():
            assert ends[r["connection_id"]] in (r["ended"], "capture_end"), (r, cuts)
        files = parts["files"].to_pylist()
        assert [f["capture_set"] for f in files] == ["cap.pcap"] * 4
        assert sorted(f["first_frame"] for f in files) == [1, cuts[0] + 1, cuts[1] + 1, cuts[2] + 1]


MODERN_SPLIT_CASES = ["kafka44_consumer_protocol.pcap", "kafka44_share_group.pcap", "kafka44_transactions.pcap",
                      "kafka44_streams_group.pcap"]
DETAIL_TABLES = ("group_heartbeats", "share_ranges", "transaction_steps", "groups", "transactions",
                 "share_consumption")


@pytest.mark.parametrize("capture", MODERN_SPLIT_CASES)
def test_split_capture_gives_the_modern_answers_of_the_whole(capture: str, tmp_path: Path) -> None:
    """The rows read from the bodies of group heartbeats, share and transaction exchanges, and the tables made
    of them: an exchange the previous file's task owns gives them once, and a topic id a Metadata response in
    another file named is named."""
    src = SAMPLES / capture
    whole = _whole(src, tmp_path)
    n = len(pcap_records(src)[1])
    assert sum(whole[table].num_rows for table in DETAIL_TABLES) > 10
    for attempt in range(2):
        cuts = [n * i // 5 for i in range(1, 5)] if attempt == 0 else sorted(random.Random(capture).sample(
            range(1, n), 3))
        parts = _export(split_capture(src, tmp_path / f"split{attempt}", cuts), jobs=1 + attempt)
        for table in ("exchanges", *DETAIL_TABLES):
            assert canonical_rows(parts[table]) == canonical_rows(whole[table]), (table, cuts)


def test_unstitched_files_stay_apart(tmp_path: Path) -> None:
    """--no-stitch: each file on its own (mid-stream starts, orphans), numbering restarting per file."""
    src = GROUP
    n = len(pcap_records(src)[1])
    paths = split_capture(src, tmp_path, [n // 2])
    apart = _export(paths, stitch=False)
    whole = _whole(src, tmp_path)
    statuses = apart["exchanges"].column("status").to_pylist()
    assert "orphan_response" in statuses or apart["exchanges"].num_rows != whole["exchanges"].num_rows
    assert set(apart["exchanges"].column("capture_file").to_pylist()) == {"cap.pcap", "cap.pcap1"}


def test_files_alike_in_name_but_unrelated_are_not_stitched(tmp_path: Path) -> None:
    """broker1.pcap and broker2.pcap: named like a set, but no connection runs from one into the other."""
    a, b = SAMPLES / "tansu_admin.pcap", SAMPLES / "tansu_broker_errors.pcap"
    (tmp_path / "broker1.pcap").write_bytes(a.read_bytes())
    (tmp_path / "broker2.pcap").write_bytes(b.read_bytes())
    together = _export([str(tmp_path / "broker1.pcap"), str(tmp_path / "broker2.pcap")])
    apart = {name: _export([str(tmp_path / name)]) for name in ("broker1.pcap", "broker2.pcap")}
    for table in ("exchanges", "errors", "partitions", "connections"):
        expected = pa.concat_tables([apart[n][table] for n in apart])
        assert canonical_rows(together[table]) == canonical_rows(expected), table
    assert together["files"].column("continues_in").to_pylist() == [None, None]


def test_set_names() -> None:
    # tcpdump -C: the first file has no number, the next ones count up after the full name.
    c = ["d/cap.pcap", "d/cap.pcap1", "d/cap.pcap2", "d/cap.pcap10", "d/cap.pcap9"]
    assert capture_sets(list(reversed(c))) == [["d/cap.pcap", "d/cap.pcap1", "d/cap.pcap2", "d/cap.pcap9",
                                                 "d/cap.pcap10"]]
    # tcpdump -G with a strftime name, and -z gzip on top.
    g = ["k-20261121-1205.pcap.gz", "k-20261121-1200.pcap.gz"]
    assert capture_sets(g) == [sorted(g)]
    assert set_key("cap.pcap.gz") == set_key("cap.pcap3.gz")
    # Different folders or different names are different sets.
    assert len(capture_sets(["a/cap.pcap", "b/cap.pcap1", "a/other.pcap"])) == 3


def test_merge_connections_adds_up_counters() -> None:
    from analyzer.tables.schemas import CONNECTIONS_SCHEMA
    base = {f.name: None for f in CONNECTIONS_SCHEMA}
    one = {**base, "capture_file": "c", "connection_id": 5, "first_ts": 10, "last_ts": 20, "packets_to_broker": 3,
           "bytes_to_client": 100, "client_ids": "a", "tls": False, "ended": "continued"}
    two = {**base, "capture_file": "c", "connection_id": 5, "first_ts": 21, "last_ts": 40, "packets_to_broker": 4,
           "bytes_to_client": 50, "client_ids": "b", "tls": False, "ended": "fin"}
    other = {**base, "capture_file": "c", "connection_id": 9, "first_ts": 1, "last_ts": 2, "ended": "rst"}
    table = pa.Table.from_pylist([two, other, one], schema=CONNECTIONS_SCHEMA)
    merged = merge_connections(table).to_pylist()
    assert len(merged) == 2
    m = next(r for r in merged if r["connection_id"] == 5)
    assert (m["packets_to_broker"], m["bytes_to_client"], m["client_ids"], m["ended"]) == (7, 150, "a,b", "fin")
    given = [r for r in table.to_pylist() if r["connection_id"] == 5]
    assert m["first_ts"] == min(r["first_ts"] for r in given) and m["last_ts"] == max(r["last_ts"] for r in given)
