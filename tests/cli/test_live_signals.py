"""Every way to stop ``kafkacap live`` finishes its open parts: SIGINT, SIGTERM and SIGHUP (the terminal or
ssh session closed), and a second signal during the finish is noted, not acted on."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import sys
import termios
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe")
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_open_part(tmp_path: Path, signum: int) -> None:
    """The capture arrives on stdin, which stays open (a live source); --rotate 60s keeps every exchange in the
    open part until the signal, which must write it whole."""
    out = tmp_path / "rolling"
    read, write = os.pipe()
    process = kafkacap("live", "--read", "-", "--write", out, "--rotate", "60s", "--no-screen", stdin=read)
    os.close(read)
    try:
        os.write(write, SAMPLE.read_bytes())
        deadline = time.monotonic() + 60
        while _unread(write) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # what was read reaches the analysis
        assert process.poll() is None, process.stderr.read()
        process.send_signal(signum)
        code, err = finish(process, timeout=120)
    finally:
        os.close(write)
        if process.poll() is None:
            process.kill()
            process.wait()
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
    read, write = os.pipe()
    process = kafkacap("live", "--read", "-", "--write", out, "--rotate", "60s", stdin=read)
    os.close(read)
    try:
        os.write(write, SAMPLE.read_bytes())
        deadline = time.monotonic() + 60
        while _unread(write) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)
        assert process.poll() is None
        process.stdout.close()  # as head does once it has its lines
        code, err = finish(process, timeout=120)
    finally:
        os.close(write)
        if process.poll() is None:
            process.kill()
            process.wait()
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
