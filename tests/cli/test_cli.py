"""The kafkacap command line: outputs, filters, parallel runs, and bad input that must never cost a traceback."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scapy.utils import PcapNgWriter

from analyzer.cli.commands import main
from analyzer.pipeline import run as run_module
from analyzer.pipeline.analyze import capture_names
from tests import craft

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_EXCHANGE_COLUMNS = (
    "capture_file connection_id client_ip client_port broker_ip broker_port api_key api_name api_version "
    "correlation_id client_id request_first_ts request_last_ts response_first_ts response_last_ts latency_ms "
    "request_size response_size error_code error_name throttle_time_ms status"
).split()


def conversation(n: int = 5, cport: int = 40000, t: float = 1_700_000_000.0, error_every: int = 3):
    c = craft.Conversation(cport=cport, t=t)
    c.handshake()
    for corr in range(n):
        c.send(True, craft.heartbeat_request(corr))
        c.send(False, craft.heartbeat_response(corr, error_code=27 if corr % error_every == 0 else 0))
    c.fin()
    return c.packets


def invoke(*args):
    args = [*map(str, args)]
    if args[0] in ("summary", "export", "exchanges"):
        args.append("--no-progress")
    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_export_parquet_has_the_documented_columns(tmp_path):
    cap = craft.write(tmp_path / "a.pcap", conversation())
    res = invoke("export", cap, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet")
    for col in REQUIRED_EXCHANGE_COLUMNS:
        assert col in ex.column_names
        assert ex.schema.field(col).metadata[b"description"]
    assert str(ex.schema.field("request_last_ts").type) == "timestamp[us, tz=UTC]"
    assert ex.num_rows == 5
    assert ex.column("capture_file").to_pylist() == ["a.pcap"] * 5
    files = pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()
    assert [(f["capture_file"], f["status"], f["exchanges"]) for f in files] == [("a.pcap", "ok", 5)]
    conns = pq.read_table(tmp_path / "out" / "connections.parquet")
    assert conns.num_rows == 1


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_other_formats(tmp_path, fmt):
    cap = craft.write(tmp_path / "a.pcap", conversation())
    assert invoke("export", cap, "-o", tmp_path / "out", "--format", fmt).exit_code == 0
    path = tmp_path / "out" / f"exchanges.{fmt}"
    if fmt == "csv":
        rows = pacsv.read_csv(path).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["correlation_id"] for r in rows) == list(range(5))
    assert {r["status"] for r in rows} == {"ok", "error"}


def test_summary_shows_apis_errors_and_clients(tmp_path):
    cap = craft.write(tmp_path / "a.pcap", conversation(6))
    res = invoke("summary", cap)
    assert res.exit_code == 0, res.output
    for text in ("Heartbeat", "REBALANCE_IN_PROGRESS", "test-client", "Connections"):
        assert text in res.output


def test_summary_shows_what_flowed_per_topic():
    """Records produced and fetched per topic, with codec and producers, as the clients report them."""
    truth = json.loads((SAMPLES / "tansu_kafka_python_codecs.truth.json").read_text())
    res = invoke("summary", SAMPLES / truth["capture"])
    assert res.exit_code == 0, res.output
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in res.output.splitlines() if line.startswith("│") and line.count("│") == 9}
    for topic, entry in truth["topics"].items():
        produced, _bytes, producers, codecs, fetched = lines[topic][:5]
        assert int(produced) == entry["produced"] and int(producers) == len(entry["producers"])
        assert codecs == ",".join(entry["codecs"]) and int(fetched) >= entry["consumed"]


def test_exchanges_filters_and_json(tmp_path):
    cap = craft.write(tmp_path / "a.pcap", conversation(6))
    res = invoke("exchanges", cap, "--status", "error", "--json")
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert sorted(r["correlation_id"] for r in rows) == [0, 3]
    res = invoke("exchanges", cap, "--api", "Produce", "--json")
    assert res.output == ""
    res = invoke("exchanges", cap, "--api", "12", "--client", "test-", "--json")
    assert len(res.output.splitlines()) == 6
    res = invoke("exchanges", cap, "--min-latency", "1000", "--json")
    assert res.output == ""
    assert "Heartbeat v3" in invoke("exchanges", cap).output


def test_folder_input_and_parallel_jobs_give_the_same_rows(tmp_path, monkeypatch):
    folder = tmp_path / "caps"
    folder.mkdir()
    for i in range(3):
        craft.write(folder / f"c{i}.pcap", conversation(4 + i, cport=40000 + i))
    (folder / "notes.txt").write_text("not a capture, and not picked up from a folder")
    one = invoke("export", folder, "-o", tmp_path / "one")
    two = invoke("export", folder, "-o", tmp_path / "two", "--jobs", "2")
    assert one.exit_code == two.exit_code == 0
    key = ["capture_file", "connection_id", "correlation_id"]
    a = pq.read_table(tmp_path / "one" / "exchanges.parquet").sort_by([(k, "ascending") for k in key])
    b = pq.read_table(tmp_path / "two" / "exchanges.parquet").sort_by([(k, "ascending") for k in key])
    assert a.num_rows == 4 + 5 + 6 and a.equals(b)


@pytest.mark.parametrize("jobs", [1, 2])
def test_files_of_the_same_name_in_different_folders_stay_apart(tmp_path, jobs):
    """A folder per broker, each with its own capture.pcap: every table keys rows by capture_file, so the
    two files get distinct names (their folders added), and each file's rows equal those of its own export."""
    captures = {"broker1": conversation(4, cport=40000), "broker2": conversation(6, cport=40000)}
    for broker, packets in captures.items():
        (tmp_path / "in" / broker).mkdir(parents=True)
        craft.write(tmp_path / "in" / broker / "capture.pcap", packets)
    assert invoke("export", tmp_path / "in", "-o", tmp_path / "both", "--jobs", jobs).exit_code == 0
    names = [f"{broker}/capture.pcap" for broker in captures]
    files = pq.read_table(tmp_path / "both" / "files.parquet")
    assert sorted(files.column("capture_file").to_pylist()) == names
    for table in ("exchanges", "connections"):
        both = pq.read_table(tmp_path / "both" / f"{table}.parquet")
        assert sorted(set(both.column("capture_file").to_pylist())) == names
        for broker in captures:
            assert invoke("export", tmp_path / "in" / broker, "-o", tmp_path / broker).exit_code == 0
            alone = pq.read_table(tmp_path / broker / f"{table}.parquet")
            assert set(alone.column("capture_file").to_pylist()) == {"capture.pcap"}  # one input: the base name
            mine = both.filter(pc.equal(both.column("capture_file"), f"{broker}/capture.pcap"))
            assert mine.drop_columns(["capture_file"]).to_pylist() == alone.drop_columns(["capture_file"]).to_pylist()


def test_capture_names_add_folders_only_where_base_names_clash():
    paths = ["a/x/cap.pcap", "b/x/cap.pcap", "a/y/cap.pcap", "a/other.pcap", "/srv/other.pcapng"]
    assert capture_names(paths) == {"a/x/cap.pcap": "a/x/cap.pcap", "b/x/cap.pcap": "b/x/cap.pcap",
                                    "a/y/cap.pcap": "y/cap.pcap", "a/other.pcap": "other.pcap",
                                    "/srv/other.pcapng": "other.pcapng"}
    assert capture_names(["hdfs://nn/d1/c.pcap", "hdfs://nn/d2/c.pcap"]) == {
        "hdfs://nn/d1/c.pcap": "d1/c.pcap", "hdfs://nn/d2/c.pcap": "d2/c.pcap"}
    assert capture_names(["same.pcap", "./same.pcap"]) == {"same.pcap": "same.pcap", "./same.pcap": "same.pcap"}


def test_one_large_file_is_split_by_connection_across_jobs(tmp_path, monkeypatch):
    packets = []
    for i in range(12):
        packets += conversation(3, cport=41000 + i, t=1_700_000_000.0 + i * 0.0005)
    packets.sort(key=lambda p: float(p.time))
    cap = craft.write(tmp_path / "big.pcap", packets)
    monkeypatch.setattr(run_module, "SHARD_MIN_BYTES", 0)
    one = invoke("export", cap, "-o", tmp_path / "one")
    two = invoke("export", cap, "-o", tmp_path / "two", "--jobs", "2")
    assert one.exit_code == two.exit_code == 0
    key = [("connection_id", "ascending"), ("correlation_id", "ascending")]
    a = pq.read_table(tmp_path / "one" / "exchanges.parquet").sort_by(key)
    b = pq.read_table(tmp_path / "two" / "exchanges.parquet").sort_by(key)
    assert a.num_rows == 36 and a.equals(b)
    ca = pq.read_table(tmp_path / "one" / "connections.parquet").sort_by("connection_id")
    cb = pq.read_table(tmp_path / "two" / "connections.parquet").sort_by("connection_id")
    assert ca.num_rows == 12 and ca.equals(cb)
    files = pq.read_table(tmp_path / "two" / "files.parquet").to_pylist()
    assert len(files) == 1 and files[0]["exchanges"] == 36


# -- bad input --------------------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    res = invoke("summary", tmp_path / "nope.pcap")
    assert res.exit_code == 1 and "no such file" in res.output


def test_folder_without_captures(tmp_path):
    (tmp_path / "readme.txt").write_text("hello")
    res = invoke("summary", tmp_path)
    assert res.exit_code == 1 and "no capture files" in res.output


@pytest.mark.parametrize("content,expect", [
    (b"", "empty"),
    (b"hello, this is a text file\n" * 20, "not a pcap"),
    (bytes(random.Random(1).getrandbits(8) for _ in range(4096)), "not a pcap"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "cut short"),
])
def test_unreadable_files_give_a_clear_message_and_exit_1(tmp_path, content, expect):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(content)
    res = invoke("export", bad, "-o", tmp_path / "out")
    assert res.exit_code == 1
    assert expect in res.output.lower()
    assert "Traceback" not in res.output


def test_a_bad_file_does_not_spoil_the_good_ones(tmp_path):
    good = craft.write(tmp_path / "good.pcap", conversation())
    bad = tmp_path / "bad.pcap"
    bad.write_text("garbage")
    res = invoke("export", good, bad, "-o", tmp_path / "out")
    assert res.exit_code == 0
    assert pq.read_table(tmp_path / "out" / "exchanges.parquet").num_rows == 5
    files = {f["capture_file"]: f for f in pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()}
    assert files["good.pcap"]["status"] == "ok"
    assert files["bad.pcap"]["status"] == "unreadable" and files["bad.pcap"]["message"]


def test_truncated_pcap_keeps_what_came_before_the_damage(tmp_path):
    packets = conversation(10)
    full = craft.write(tmp_path / "full.pcap", packets)
    data = open(full, "rb").read()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) - 30])  # into the last record (the final ACK)
    res = invoke("export", cut, "-o", tmp_path / "out")
    assert res.exit_code == 0
    assert "truncated" in res.output
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet")
    assert sorted(ex.column("correlation_id").to_pylist()) == list(range(10))
    files = pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()
    assert files[0]["status"] == "damaged"


def test_pcapng_with_a_cut_block_keeps_what_came_before(tmp_path):
    packets = conversation(10)
    path = tmp_path / "full.pcapng"
    with PcapNgWriter(str(path)) as w:
        for p in packets:
            w.write(p)
    data = path.read_bytes()
    # Cut in the middle of the response to correlation id 9 (its packet is 6 from the end).
    size_of_tail = sum(len(bytes(p)) + 32 for p in packets[-6:])
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: len(data) - size_of_tail + 10])
    res = invoke("export", cut, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
    got = {r["correlation_id"]: r["status"] for r in ex}
    assert [got[i] for i in range(9)] == [s for s in ("error", "ok", "ok") * 3]
    assert got[9] == "no_response"
    assert pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()[0]["status"] == "damaged"


def test_export_replaces_previous_tables_without_leftovers(tmp_path):
    cap = craft.write(tmp_path / "a.pcap", conversation(3))
    out = tmp_path / "out"
    assert invoke("export", cap, "-o", out).exit_code == 0
    assert invoke("export", cap, "-o", out).exit_code == 0
    tables = ("cluster", "connections", "errors", "exchanges", "files", "group_heartbeats", "groups", "partitions",
              "share_consumption", "share_ranges", "transaction_steps", "transactions")
    assert sorted(os.listdir(out)) == ["_kafkacap.json", *(f"{t}.parquet" for t in tables)]


def test_show_decodes_a_chosen_exchange_as_a_tree(tmp_path):
    packets = conversation(3, error_every=2)
    cap = craft.write(tmp_path / "a.pcap", packets)
    res = invoke("export", cap, "-o", tmp_path / "out")
    assert res.exit_code == 0
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
    second = next(r for r in ex if r["correlation_id"] == 1)
    res = invoke("show", cap, "--frame", second["request_frame"])
    assert res.exit_code == 0, res.output
    # The request body as Heartbeat v3 lays it out, and the response's error, by name.
    for text in ("Heartbeat v3 correlation_id=1", "group_id: 'group-1'", "generation_id: 7",
                 "member_id: 'member-1'", "error_code: 0"):
        assert text in res.output
    assert "correlation_id=0" not in res.output
    res = invoke("show", cap, "--connection", second["connection_id"], "--limit", "0")
    assert res.output.count("Heartbeat v3 correlation_id=") == 3
    assert "27 REBALANCE_IN_PROGRESS" in res.output
    assert invoke("show", cap, "--frame", 99999).exit_code == 1
    assert invoke("show", cap).exit_code == 2


def test_apis_lists_every_api_key():
    res = invoke("apis")
    assert res.exit_code == 0
    for text in ("Produce", "0-13", "DescribeTopicPartitions", "StreamsGroupDescribe", "ListConfigResources",
                 "ListClientMetricsResources", "UnregisterController"):
        assert text in res.output
    rows = [json.loads(line) for line in invoke("apis", "--json").output.splitlines()]
    assert [r["key"] for r in rows] == list(range(95))
    assert rows[74]["name"] == "ListConfigResources" and rows[74]["former_names"] == ["ListClientMetricsResources"]
    assert rows[0]["former_names"] == [] and (rows[0]["max_version"], rows[1]["max_version"]) == (13, 18)


def test_api_filter_takes_a_renamed_apis_former_name():
    """Key 74 is ListConfigResources since Kafka 4.1: a filter by its old name still finds it, an unknown name is
    a usage error."""
    import pyarrow as pa

    from analyzer.cli.commands import filter_exchanges
    from analyzer.tables.schemas import EXCHANGES_SCHEMA

    ex = pa.Table.from_pylist([{"api_name": "ListConfigResources", "api_key": 74},
                               {"api_name": "Produce", "api_key": 0}], schema=EXCHANGES_SCHEMA)
    for name in ("ListClientMetricsResources", "listconfigresources", "74"):
        assert filter_exchanges(ex, (name,), (), None, None)["api_key"].to_pylist() == [74]
    res = invoke("exchanges", "nothing.pcap", "--api", "ListClientMetrics")
    assert res.exit_code == 2 and "not an API name" in res.output


SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"


@pytest.mark.parametrize("capture", ["tansu_kafka_python_codecs", "tansu_aiokafka_codecs", "kafka09_legacy"])
def test_records_table_and_crc_check_agree_with_the_clients(tmp_path, capture):
    """Every codec from a real client: each record produced is one records row of a Produce request (the
    producers' own count, from the truth file), every batch's CRC verifies, and the codecs are the ones used."""
    truth = json.loads((SAMPLES / f"{capture}.truth.json").read_text())
    path = SAMPLES / truth["capture"]
    res = invoke("export", path, "-o", tmp_path / "out", "--detect-ports", "--records", "--verify-crc")
    assert res.exit_code == 0, res.output
    records = pq.read_table(tmp_path / "out" / "records.parquet").to_pylist()
    parts = pq.read_table(tmp_path / "out" / "partitions.parquet").to_pylist()
    assert records and all(p["crc_failures"] in (0, None) for p in parts)
    assert any(p["crc_failures"] == 0 for p in parts)
    for topic, entry in truth["topics"].items():
        produced = [r for r in records if r["topic"] == topic and r["api_name"] == "Produce"
                    and r["client_id"] in entry["producers"]]
        assert len(produced) == entry["produced"] + entry["produced_acks0"], topic
        codecs = {p["codec"] for p in parts if p["topic"] == topic and p["api_name"] == "Produce" and p["batches"]}
        assert codecs == set(entry["codecs"]), topic


def test_a_decompression_bomb_is_refused_and_reported(tmp_path):
    """A legacy gzip wrapper that would expand to 64 MiB, with a 1 MiB cap: refused, reported, nothing lost."""
    import struct
    import zlib

    inner = zlib.compressobj(wbits=31)
    value = inner.compress(bytes(64 << 20)) + inner.flush()
    body = struct.pack(">bbqi", 1, 1, 1_700_000_000_000, -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    message_set = struct.pack(">qi", 0, len(msg)) + msg
    produce = (struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + craft.kstring("bombs") + struct.pack(">i", 1)
               + struct.pack(">i", 0) + struct.pack(">i", len(message_set)) + message_set)
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.request(0, 2, 1, "bomber", produce))
    c.send(False, craft.produce_response_v3(1))
    cap = craft.write(tmp_path / "bomb.pcap", c.packets)
    res = invoke("export", cap, "-o", tmp_path / "out", "--max-batch-mb", "1")
    assert res.exit_code == 0, res.output
    assert "1 compressed batches over the decompression limits were not expanded" in " ".join(res.output.split())
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
    # (the crafted response names another topic; both are listed)
    assert [(r["api_name"], r["status"], r["topics"][0]) for r in ex] == [("Produce", "ok", "bombs")]


def test_console_script_spares_the_pandas_import(tmp_path):
    """The installed ``kafkacap`` (analyzer.cli.console) runs an export without importing pandas, which
    pyarrow would otherwise import on its first list conversion; pandas still imports afterwards."""
    pytest.importorskip("pandas")  # without pandas installed there is nothing to spare
    import subprocess
    import sys

    sample = Path(__file__).resolve().parents[2] / "sample_pcaps" / "kafka09_legacy.pcap"
    code = (
        "import sys\n"
        f"sys.argv = ['kafkacap', 'export', {str(sample)!r}, '-o', {str(tmp_path / 'out')!r}, '--no-progress']\n"
        "from analyzer.cli.console import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('pandas' in sys.modules)\n"
        "import pandas\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert pq.read_table(tmp_path / "out" / "exchanges.parquet").num_rows > 0


def test_small_analysis_batches_are_gathered_into_row_groups(tmp_path, monkeypatch):
    """The analysis hands over batches of a few rows (here about 7; 16 k by default, to bound the memory its
    Python rows take); the Parquet writer gathers them into row groups of at least ROW_GROUP_ROWS (here
    20), and the rows come out as they do from one batch."""
    from analyzer.capture import chunks as _pcap_chunks
    from analyzer.pipeline.analyze import Options
    from analyzer.tables import writers as output

    cap = str(ROOT / "sample_pcaps" / "tansu_pipelined_producer.pcap")
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 2000)  # rows are handed over between chunks
    read = {}
    for name, rows in (("whole", 1 << 16), ("small", 7)):
        folder = output.TableFolder(str(tmp_path / name))
        monkeypatch.setattr(output, "ROW_GROUP_ROWS", 20 if name == "small" else 1 << 16)
        run_module.run([cap], Options(batch_rows=rows), folder.write)
        folder.commit()
        read[name] = {t: pq.ParquetFile(tmp_path / name / f"{t}.parquet") for t in ("exchanges", "partitions")}
    for table, small in read["small"].items():
        whole = read["whole"][table].read()
        groups = [small.metadata.row_group(i).num_rows for i in range(small.metadata.num_row_groups)]
        # A batch may pass 7 rows by what one frame adds (its partition rows) before the rows are drained.
        assert len(groups) > 2 and all(20 <= n < 40 for n in groups[:-1]) and sum(groups) == whole.num_rows
        assert sorted(map(repr, small.read().to_pylist())) == sorted(map(repr, whole.to_pylist()))


def test_the_last_row_groups_are_written_by_the_writer_threads(tmp_path, monkeypatch):
    """Each table's last gathered row group is encoded by its own writer thread when the input ends, so the
    tables' last row groups, which come together at the end of a run, are encoded side by side."""
    import threading

    from analyzer.pipeline.analyze import Options
    from analyzer.tables import writers as output

    writers: list[tuple[str, str]] = []
    original = output.TableFolder._write_row_group

    def spy(self, table):
        if self._gathered.get(table):
            writers.append((table, threading.current_thread().name))
        return original(self, table)

    monkeypatch.setattr(output.TableFolder, "_write_row_group", spy)
    folder = output.TableFolder(str(tmp_path / "out"))
    run_module.run([str(ROOT / "sample_pcaps" / "tansu_pipelined_producer.pcap")], Options(), folder.write)
    folder.commit()
    assert {t for t, _ in writers} >= {"exchanges", "partitions", "connections"}
    assert all(name == f"kafkacap {t} writer" for t, name in writers), writers
