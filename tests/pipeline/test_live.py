"""`kafkacap live`: a real broker and real clients watched on the loopback interface, with rolling tables that
must hold every request the clients logged; a capture stream read as it arrives; rotation settings."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest

from analyzer.capture.live_sources import StreamSource
from analyzer.cli.live_view import parse_rotation
from sample_pcaps import truth_check
from sample_pcaps.brokers import TansuBroker, free_port
from sample_pcaps.record import record_scenario
from sample_pcaps.scenarios import CI_SMOKE
from tests.real.test_e2e_record import _unavailable

SAMPLE = Path(__file__).resolve().parents[2] / "sample_pcaps" / "tansu_consumer_group.pcap"
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


def test_live_on_loopback_sees_every_request_the_clients_sent(tmp_path):
    """... and the packets it kept (--pcap, rotated with the tables), analysed afterwards with ``kafkacap
    export`` as one rotated set, give the same exchanges as the rolling tables."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    broker = TansuBroker("127.0.0.1", free_port(), log_dir=tmp_path)
    scenario = dataclasses.replace(CI_SMOKE, port=broker.port)
    rolling, snapshot, kept = tmp_path / "rolling", tmp_path / "screen.txt", tmp_path / "kept"
    kept.mkdir()
    command = [*truth_check.kafkacap_command(), "live", "-i", "lo", "--port", str(broker.port), "--write",
               str(rolling), "--pcap", str(kept / "lo.pcap"), "--rotate", "1s", "--duration", "120",
               "--snapshot", str(snapshot)]
    live = None
    try:
        broker.start()
        live = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said: list[str] = []
        listening = threading.Event()

        def read_stderr() -> None:
            for line in live.stderr:
                said.append(line)
                if "listening on lo" in line:
                    listening.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        assert listening.wait(30), "".join(said)
        record_scenario(scenario, broker, tmp_path / "capture")
        time.sleep(1.5)  # the last responses reach the analysis and a rotation
        live.send_signal(signal.SIGINT)  # Ctrl-C: the final figures, the last part written
        out, _ = live.communicate(timeout=60)
    finally:
        broker.stop()
        if live is not None and live.poll() is None:
            live.kill()
            live.wait()
    assert live.returncode == 0, "".join(said)
    truth = json.loads((tmp_path / "capture" / f"{scenario.name}.truth.json").read_text())
    assert sorted((rolling / "exchanges").glob("part-*.parquet"))
    assert not list(rolling.rglob(".*.tmp"))  # every part was renamed into place whole
    rows = pq.read_table(rolling / "exchanges").to_pylist()
    pairs, problems = truth_check.match_requests(truth, rows)
    assert not problems, "\n".join(problems)
    assert len(pairs) == len(truth["requests"])
    screen = snapshot.read_text()
    assert "Requests per API" in screen and "Produce" in screen and "kernel drops 0" in screen
    assert f"{len(rows):,} exchanges" in out

    pcaps = sorted(kept.glob("lo-*.pcap"))
    assert pcaps and not list(kept.glob(".*"))  # every file renamed into place whole
    exported = truth_check.export_tables(pcaps, tmp_path / "export", [broker.port])["exchanges"]
    # Packet numbers are left out: export counts them on across files only while a connection runs on into the
    # next file (a chain), so a cut between connections starts the count afresh.
    same = ["client_ip", "client_port", "broker_port", "correlation_id", "api_key", "api_version", "status",
            "error_code", "request_first_ts", "response_last_ts", "request_size", "response_size", "topics"]

    def key(row: dict) -> tuple:
        return tuple(str(row[c]) for c in same)

    assert len(exported) == len(rows)
    assert sorted(map(key, exported)) == sorted(map(key, rows))


def test_a_capture_stream_is_analysed_as_it_arrives():
    read, write = os.pipe()
    data = SAMPLE.read_bytes()
    first = 24 + 2000  # the file header and the first packets; the rest a second later

    def writer() -> None:
        os.write(write, data[:first])
        time.sleep(1.0)
        os.write(write, data[first:])
        os.close(write)

    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        threading.Thread(target=writer, daemon=True).start()
        source = StreamSource("-")
        started = time.monotonic()
        early = source.poll(0.5)
        assert early and time.monotonic() - started < 0.9  # before the writer's second write
        total = len(early)
        while not source.health().ended:
            total += len(source.poll(0.5))
        packets = json.loads(SAMPLE.with_suffix(".truth.json").read_text())["capture_stats"]["packets"]
        assert total == packets == source.health().tcp_packets
        source.close()
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)


def test_rotation_settings():
    assert parse_rotation("60s") == (60.0, None)
    assert parse_rotation("5m") == (300.0, None)
    assert parse_rotation("100MB") == (None, 100_000_000)
    for bad in ("0s", "fast", "-5m", "nanMB"):
        with pytest.raises(click.BadParameter):
            parse_rotation(bad)


def test_rolling_tables_write_whole_parts_per_rotation(tmp_path):
    import datetime as dt

    import pyarrow as pa

    from analyzer.tables.schemas import CONNECTIONS_SCHEMA
    from analyzer.tables.writers import RollingTables

    rolling = RollingTables(str(tmp_path / "r"))
    empty = CONNECTIONS_SCHEMA.empty_table()
    row = {name: None for name in CONNECTIONS_SCHEMA.names} | {"capture_file": "live", "connection_id": 1}
    batch = pa.RecordBatch.from_pylist([row], schema=CONNECTIONS_SCHEMA)
    rolling.write("connections", batch)
    first = rolling.rotate(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert rolling.rotate(dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.UTC)) == []  # nothing gathered: no part
    rolling.write("connections", batch)
    rolling.write("connections", pa.RecordBatch.from_pylist([], schema=CONNECTIONS_SCHEMA))
    second = rolling.rotate(dt.datetime(2026, 1, 1, 0, 2, tzinfo=dt.UTC))
    assert len(first) == len(second) == 1 and first != second
    table = pq.read_table(tmp_path / "r" / "connections")
    assert table.num_rows == 2 and table.schema.equals(empty.schema)
    assert not list((tmp_path / "r").rglob(".*"))


def test_rolling_tables_write_row_groups_as_they_come_and_publish_whole_parts(tmp_path):
    """Rows reach the disk as row groups before the rotation (memory does not grow with the interval), in a
    hidden part no folder reader sees; the rotation publishes the part with every row written, in order."""
    import datetime as dt

    import pyarrow as pa

    from analyzer.tables import writers
    from analyzer.tables.schemas import CONNECTIONS_SCHEMA
    from analyzer.tables.writers import RollingTables

    rolling = RollingTables(str(tmp_path / "r"))
    per_batch = 1000
    batches = writers.ROW_GROUP_ROWS // per_batch * 3 + 7  # three row groups' worth, and some
    base = {name: None for name in CONNECTIONS_SCHEMA.names} | {"capture_file": "live"}
    for b in range(batches):
        rows = [base | {"connection_id": b * per_batch + i} for i in range(per_batch)]
        rolling.write("connections", pa.RecordBatch.from_pylist(rows, schema=CONNECTIONS_SCHEMA))
    held = sum(batch.num_rows for batch in rolling._gathered.get("connections", []))
    assert held < writers.ROW_GROUP_ROWS  # the rest is on its way to the disk
    rolling._queue.join()  # the writer thread has written what it was handed
    (hidden,) = (tmp_path / "r" / "connections").glob(".part-*.tmp")
    assert hidden.stat().st_size > 0
    assert not list((tmp_path / "r" / "connections").glob("part-*"))
    assert pq.read_table(tmp_path / "r" / "connections").num_rows == 0  # the hidden part is not read
    (path,) = rolling.rotate(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert not list((tmp_path / "r").rglob(".*.tmp"))
    meta = pq.read_metadata(path)
    assert meta.num_row_groups >= 3
    ids = pq.read_table(tmp_path / "r" / "connections")["connection_id"].to_pylist()
    assert ids == list(range(batches * per_batch))


def test_rolling_tables_row_groups_are_bounded_in_bytes_too(tmp_path):
    import datetime as dt

    import pyarrow as pa

    from analyzer.tables import writers
    from analyzer.tables.schemas import CONNECTIONS_SCHEMA
    from analyzer.tables.writers import RollingTables

    rolling = RollingTables(str(tmp_path / "r"))
    wide = {name: None for name in CONNECTIONS_SCHEMA.names} | {"capture_file": "x" * 20_000}
    batch = pa.RecordBatch.from_pylist([wide | {"connection_id": i} for i in range(100)], schema=CONNECTIONS_SCHEMA)
    for _ in range(12):  # 2 MB a batch: row groups of fewer rows than ROW_GROUP_ROWS
        rolling.write("connections", batch)
        assert sum(b.nbytes for b in rolling._gathered.get("connections", [])) < writers.ROLLING_ROW_GROUP_BYTES
    (path,) = rolling.rotate(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert pq.read_metadata(path).num_row_groups >= 2 and pq.read_metadata(path).num_rows == 1200


def test_kept_packets_rotate_into_whole_pcap_files_a_reader_takes_as_they_were(tmp_path):
    import datetime as dt

    from analyzer.capture.files import open_capture
    from analyzer.capture.linklayer import ETHERNET
    from analyzer.capture.live_sources import RollingPcap

    with open_capture(SAMPLE) as capture:
        originals = [(ts, key, seq, bytes(payload)) for _no, ts, key, seq, _a, _f, payload, _s in capture.packets()]
    frames = []
    data = SAMPLE.read_bytes()  # a little-endian microsecond pcap: its records as they are
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, caplen, _ = struct.unpack_from("<IIII", data, pos)
        frames.append(((sec * 1_000_000 + usec) * 1000 + 7, data[pos + 16:pos + 16 + caplen]))  # + 7 ns
        pos += 16 + caplen
    pcap = RollingPcap(str(tmp_path / "kept.pcap"), ETHERNET)
    assert pcap.rotate(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) == []  # nothing kept: no file
    half = len(frames) // 2
    paths = []
    for n, (ts, frame) in enumerate(frames):
        pcap.packet(ts, frame)
        if n == half:
            assert list(tmp_path.glob(".kept-*.pcap.tmp")) and not list(tmp_path.glob("kept-*"))
            paths += pcap.rotate(dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.UTC))
    paths += pcap.rotate(dt.datetime(2026, 1, 1, 0, 2, tzinfo=dt.UTC))
    assert [os.path.basename(p) for p in paths] == ["kept-20260101T000100000000Z-000001.pcap",
                                                    "kept-20260101T000200000000Z-000002.pcap"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    assert pcap.packets == len(frames)
    got = []
    for path in paths:
        with open_capture(path) as capture:
            got += [(ts, key, seq, bytes(payload)) for _no, ts, key, seq, _a, _f, payload, _s in capture.packets()]
            assert capture.stats.link_types == [ETHERNET]
    assert got == [(ts + 7, key, seq, payload) for ts, key, seq, payload in originals]

    # export reads the files as one rotated set: the connections running across the cut are stitched, and the
    # exchanges are those of the capture the packets came from
    port = 9092
    whole = truth_check.export_tables([SAMPLE], tmp_path / "whole", [port])["exchanges"]
    rotated = truth_check.export_tables([Path(p) for p in paths], tmp_path / "rotated", [port])["exchanges"]
    columns = ["connection_id", "correlation_id", "api_key", "status", "request_frame", "response_frame",
               "request_size", "response_size", "latency_ms"]
    assert whole and len(rotated) == len(whole)
    assert sorted(tuple(r[c] for c in columns) for r in rotated) == sorted(tuple(r[c] for c in columns) for r in whole)


def test_pcap_needs_an_interface():
    from click.testing import CliRunner

    from analyzer.cli.live import live

    result = CliRunner().invoke(live, ["-r", str(SAMPLE), "--pcap", "x.pcap", "--no-screen"])
    assert result.exit_code == 2 and "--pcap keeps what -i captures" in result.output


def test_on_loopback_each_packet_is_read_once():
    """lo carries every packet twice (leaving and arriving): the kernel filter drops the leaving copy, so it takes
    no room in the receive buffer (nor counts as a drop); the user-space skip is not needed then."""
    import socket

    from analyzer.capture.live_sources import InterfaceSource
    from sample_pcaps.capture import capture_privilege_problem

    problem = capture_privilege_problem()
    if problem:
        pytest.skip(problem)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    for capture_filter in (f"tcp and (port {port})", None):
        source = InterfaceSource("lo", capture_filter)
        source._loopback = False  # no user-space skip: only what the kernel hands up is counted
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        client.sendall(b"x" * 100)
        server.recv(100)
        client.close()
        server.close()
        time.sleep(0.2)
        packets = [p for p in source.poll(0.5) if port in (int.from_bytes(p[2][-4:-2], "big"),
                                                           int.from_bytes(p[2][-2:], "big"))]
        source.close()
        payload = [p for p in packets if p[7]]
        assert len(payload) == 1 and bytes(payload[0][6]) == b"x" * 100, capture_filter
        assert 6 <= len(packets) <= 12, (capture_filter, len(packets))  # handshake, data, ack, close: once each
    listener.close()


def sample_frames(path: Path) -> list[bytes]:
    """The frames of a little-endian classic pcap, as they are."""
    data = path.read_bytes()
    frames, pos = [], 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        frames.append(data[pos + 16:pos + 16 + caplen])
        pos += 16 + caplen
    return frames


def test_the_live_frame_decoder_agrees_with_the_general_one():
    """The one-unpack path in front gives what the layer-by-layer decoder gives, on every frame of the Ethernet
    sample captures and on those frames with a byte of their headers changed (options, fragments, other
    protocols, bad lengths go to the general path)."""
    import random

    from analyzer.capture.linklayer import ETHERNET, decoder
    from analyzer.capture.live_sources import frame_decoder

    quick, general = frame_decoder(ETHERNET), decoder(ETHERNET)
    samples = Path(__file__).resolve().parents[2] / "sample_pcaps"
    frames = [f for p in sorted(samples.glob("*.pcap")) if p.read_bytes()[20] == ETHERNET for f in sample_frames(p)]
    assert len(frames) > 1000
    rng = random.Random(5)
    changed = []
    for frame in frames[::7]:
        at = rng.randrange(min(len(frame), 60))
        edited = bytearray(frame)
        edited[at] = rng.randrange(256)
        changed.append(bytes(edited))
    for frame in frames + changed + [f[:n] for f in frames[:50] for n in (0, 13, 34, 53, 54)]:
        assert quick(frame) == general(frame, 0, len(frame)), frame[:60].hex()
