"""Every way to stop ``kafkacap live`` finishes its open parts: SIGINT, SIGTERM and SIGHUP (the terminal or
ssh session closed), and a second signal during the finish is noted, not acted on."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.cli import commands, stopping
from tests.cli.test_cli_exits import finish, kafkacap
from tests.helpers import SAMPLES, export_tables, truth

SAMPLE = SAMPLES / "tansu_consumer_group.pcap"


def _unread(fd: int) -> int:
    """Bytes in a pipe not read yet (FIONREAD works on either end on Linux)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@contextlib.contextmanager
def _live_reading_the_sample(out: Path, *options: object):
    """``kafkacap live --read - --write OUT --rotate 60s OPTIONS`` fed the sample on a pipe left open (a live
    source), yielded once it has read every byte and analysed them; killed if the test leaves it running."""
    read, write = os.pipe()
    process = kafkacap("live", "--read", "-", "--write", out, "--rotate", "60s", *options, stdin=read)
    os.close(read)
    try:
        os.write(write, SAMPLE.read_bytes())
        deadline = time.monotonic() + 60
        while _unread(write) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # what was read reaches the analysis
        assert process.poll() is None, process.stderr.read()
        yield process
    finally:
        os.close(write)
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe")
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_open_part(tmp_path: Path, signum: int) -> None:
    """The capture arrives on stdin, which stays open (a live source); --rotate 60s keeps every exchange in the
    open part until the signal, which must write it whole."""
    out = tmp_path / "rolling"
    with _live_reading_the_sample(out, "--no-screen") as process:
        process.send_signal(signum)
        code, err = finish(process, timeout=120)
    assert code == 0, err
    rows = pq.read_table(out / "exchanges").to_pylist()
    exported = export_tables(SAMPLE, tmp_path / "export", tables=("exchanges",))["exchanges"].to_pylist()
    assert len(rows) == len(exported) == len(truth(SAMPLE)["requests"])

    def key(row: dict) -> tuple:
        return row["connection_id"], row["correlation_id"], row["api_name"], row["status"]

    assert sorted(map(key, rows)) == sorted(map(key, exported))
    assert not list(out.rglob(".*"))  # every part renamed into place whole


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe")
def test_a_closed_standard_output_finishes_the_open_part(tmp_path: Path) -> None:
    """``kafkacap live ... | head``: the screen's next refresh meets the closed pipe; the open part is written
    whole all the same, and the command ends as a closed pipe ends any other (141)."""
    out = tmp_path / "rolling"
    with _live_reading_the_sample(out) as process:
        process.stdout.close()  # as head does once it has its lines
        code, err = finish(process, timeout=120)
    assert code == 141, err
    exported = export_tables(SAMPLE, tmp_path / "export", tables=("exchanges",))["exchanges"]
    assert pq.read_table(out / "exchanges").num_rows == exported.num_rows > 0
    assert not list(out.rglob(".*"))


def test_a_signal_during_the_finish_is_noted_and_let_go(capsys) -> None:
    restore = commands._stop_quietly_on_signals()
    try:
        with stopping.finishing("the open parts"):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)  # the handlers run between bytecodes
        said = capsys.readouterr().err.splitlines()
        assert said == [f"kafkacap: {name} received while finishing the open parts; it ends by itself in a moment"
                        for name in ("SIGTERM", "SIGHUP")]
        with pytest.raises(commands._HungUp):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
        with pytest.raises(commands._Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    finally:
        restore()


def test_sighup_ends_an_export_with_129(tmp_path: Path) -> None:
    """Outside live, SIGHUP ends a command as SIGTERM does, with its own code and line."""
    from tests.cli.test_cli_exits import error_lines, fifo_capture, wait_until_read

    fifo = fifo_capture(tmp_path, "capture.pcap")
    process = kafkacap("export", fifo, "-o", tmp_path / "out", "--no-progress", start_new_session=True)
    writers = []
    try:
        writers = wait_until_read([fifo], process)
        os.kill(process.pid, signal.SIGHUP)
        code, err = finish(process, timeout=60)
    finally:
        for fd in writers:
            os.close(fd)
        if process.poll() is None:
            process.kill()
        process.wait()
    assert (code, error_lines(err)) == (129, ["error: hung up"])
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_killed_runs_kept_packets_are_recovered_by_the_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves the current pcap part hidden, maybe cut inside a packet: the next run with the same
    --pcap FILE cuts it after its last whole packet and puts it in place, where export reads it."""
    from analyzer.capture.live_sources import RollingPcap
    from tests.helpers import pcap_records

    header, records = pcap_records(SAMPLE)
    killed = RollingPcap(str(tmp_path / "kept.pcap"), 1)
    for record in records:
        sec, usec, caplen, _ = struct.unpack_from("<IIII", record)
        killed.packet(sec * 1_000_000_000 + usec * 1000, record[16:16 + caplen])
    killed._file.write(b"\x01\x02\x03\x04\x05")  # a record cut short by the kill
    killed._file.flush()  # what reached the disk before the kill; the process ends without closing it
    hidden = killed._hidden

    found = RollingPcap(str(tmp_path / "kept.pcap"), 1).recover_leftovers()
    (path,) = [p for _, p, _ in found]
    assert found == [(hidden, path, len(records))] and not Path(hidden).exists()
    first = struct.unpack_from("<II", records[0])
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(first[0])) + f"{first[1]:06d}Z"
    assert Path(path).name == f"kept-{stamp}-000000.pcap"
    exported = export_tables(path, tmp_path / "out", tables=("exchanges",))["exchanges"]
    assert exported.num_rows == export_tables(SAMPLE, tmp_path / "whole", tables=("exchanges",))["exchanges"].num_rows


def test_a_killed_runs_hidden_table_parts_are_named_and_left(tmp_path: Path) -> None:
    """SIGKILL leaves each table's open Parquet part without its index: the next live run into the folder
    names each one on stderr and leaves it; the rest of the folder reads as before."""
    from tests.hostile import Conn, PcapWriter, heartbeats

    flood = tmp_path / "heartbeats.pcap"
    writer = PcapWriter(flood)
    heartbeats(Conn(writer, 40100).handshake(), 40_000)  # more rows than a row group: one is written hidden
    writer.close()
    out = tmp_path / "rolling"
    read, write = os.pipe()
    process = kafkacap("live", "--read", "-", "--write", out, "--rotate", "60s", "--no-screen", stdin=read)
    os.close(read)
    try:
        data = flood.read_bytes()

        def feed() -> None:
            with contextlib.suppress(OSError):  # the reader is killed midway: EPIPE
                os.write(write, data)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        deadline = time.monotonic() + 60
        while not list(out.glob("exchanges/.part-*.parquet.tmp")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first row group is written as the rows come
        time.sleep(0.5)
        process.kill()
        process.wait()
        feeder.join(timeout=30)
    finally:
        os.close(write)
    left = sorted(out.rglob(".part-*.parquet.tmp"))
    assert left
    with open(SAMPLE, "rb") as capture:  # a stream that ends: so does the run
        again = kafkacap("live", "--read", "-", "--write", out, "--rotate", "60s", "--no-screen", stdin=capture)
        code, err = finish(again, timeout=120)
    assert code == 0, err
    named = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert [line.split(": ")[1] for line in named] == [str(p) for p in left]
    assert all("cannot be read; left as it is" in line for line in named)
    assert sorted(out.rglob(".part-*.parquet.tmp")) == left
