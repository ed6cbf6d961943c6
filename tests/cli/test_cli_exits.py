"""How the command line ends: one exit code per kind of ending (the README's table), one line on stderr per
failure, never a traceback. Each case runs the console script in a new process, as a user runs it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import commands as cli
from analyzer.pipeline import run as pipeline_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
SCRIPT = "import sys; sys.argv[0] = 'kafkacap'; from analyzer.cli.console import script; script()"


def kafkacap(*args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **popen)


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Exit code and stderr, checked for tracebacks."""
    _, err = process.communicate(timeout=timeout)
    text = err.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    return process.returncode, text


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_an_output_folder_that_cannot_be_created_is_one_line_and_exit_3(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, err = finish(kafkacap("export", SAMPLES / "kafka09_legacy.pcap", "-o", blocker / "out", "--no-progress"))
    assert code == 3
    (line,) = error_lines(err)
    assert line.startswith(f"error: cannot write the tables to {blocker / 'out'}: ")
    assert "Not a directory" in line or f"{blocker}: File exists" in line  # the system's reason


@pytest.mark.parametrize("sample,size,reader_says", [
    ("tansu_ipv6_confluent.pcapng", 30, "truncated block"),  # a section header block cut short
    ("kafka09_legacy.pcap", 20, "cut short"),  # a pcap global header cut short
])
def test_a_file_cut_before_its_first_packet_is_unreadable_exit_1(tmp_path, sample, size, reader_says):
    cut = tmp_path / f"cut{Path(sample).suffix}"
    cut.write_bytes((SAMPLES / sample).read_bytes()[:size])
    code, err = finish(kafkacap("summary", cut, "--no-progress"))
    assert code == 1
    lines = error_lines(err)
    assert len(lines) == 2 and lines[1] == "error: no capture file could be read"
    assert lines[0].startswith(f"error: {cut.name}: ") and reader_says in lines[0]  # the reader's own words


def test_a_cut_file_beside_a_good_one_is_reported_and_the_run_succeeds(tmp_path):
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes((SAMPLES / "tansu_ipv6_confluent.pcapng").read_bytes()[:30])
    code, err = finish(kafkacap("summary", cut, SAMPLES / "kafka09_legacy.pcap", "--no-progress"))
    assert code == 0
    assert [line for line in error_lines(err) if "cut.pcapng" in line][0].startswith("error: cut.pcapng: ")


def test_show_reports_an_unreadable_file_in_the_readers_words(tmp_path):
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((SAMPLES / "kafka09_legacy.pcap").read_bytes()[:20])
    code, err = finish(kafkacap("show", cut, "--frame", 1))
    assert code == 1
    assert "error: cut.pcap: pcap global header cut short" in err and "no exchange there" not in err


def test_usage_errors_exit_2():
    code, err = finish(kafkacap("summary"))
    assert code == 2 and "Missing argument" in err


def fifo_capture(folder: Path, name: str) -> Path:
    """A named pipe as the capture: the analysis waits on it, still running, until the test signals it."""
    path = folder / name
    os.mkfifo(path)
    return path


def wait_until_read(fifos: list[Path], process: subprocess.Popen) -> list[int]:
    """Open each pipe's writing end once the analysis has opened it for reading (then it blocks reading)."""
    writers = []
    deadline = time.monotonic() + 120
    for fifo in fifos:
        while True:
            try:
                writers.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO and time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
    return writers


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how,jobs,expect_code,expect_line", [
    ("ctrl-c", 2, 130, "error: interrupted"),  # the terminal signals the whole process group
    ("ctrl-c", 1, 130, "error: interrupted"),
    ("kill", 2, 143, "error: terminated"),  # SIGTERM to the main process only, as kill and timeout send it
])
def test_a_signal_ends_the_export_with_its_code_no_traceback_no_leftovers(tmp_path, how, jobs, expect_code,
                                                                          expect_line):
    fifos = [fifo_capture(tmp_path, f"capture{i}.pcap") for i in range(jobs)]
    process = kafkacap("export", *fifos, "-o", tmp_path / "out", "--jobs", jobs, "--separate-files",
                       "--no-progress", start_new_session=True)
    writers = []
    try:
        writers = wait_until_read(fifos, process)
        workers = children_of(process.pid)
        assert len(workers) >= (jobs if jobs > 1 else 0)
        if how == "ctrl-c":
            os.killpg(process.pid, signal.SIGINT)
        else:
            os.kill(process.pid, signal.SIGTERM)
        code, err = finish(process, timeout=60)
    finally:
        for fd in writers:
            os.close(fd)
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever a failing run left behind in its session
        except ProcessLookupError:
            pass
        process.wait()
    assert code == expect_code
    assert error_lines(err) == [expect_line]
    deadline = time.monotonic() + 30
    while any(map(running, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(running, workers))
    assert sorted(os.listdir(tmp_path)) in (sorted(f.name for f in fifos), sorted([*(f.name for f in fifos), "out"]))
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_closed_output_pipe_ends_quietly_with_141():
    process = kafkacap("exchanges", SAMPLES / "tansu_consumer_group.pcap", "--json", "--no-progress")
    process.stdout.close()  # as `| head -0` would
    err = process.stderr.read().decode()
    process.wait(timeout=300)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert process.returncode == 141
    assert err == ""


def test_an_internal_error_is_one_line_and_the_traceback_is_saved(tmp_path, monkeypatch):
    def broken_run(*args, **kwargs):
        raise RuntimeError("boom \x1b[2J")

    monkeypatch.setattr(pipeline_run, "run", broken_run)  # the command imports it when it runs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = CliRunner().invoke(cli.main, ["summary", str(SAMPLES / "kafka09_legacy.pcap"), "--no-progress"])
    assert result.exit_code == 4
    assert "Traceback" not in result.output and "\x1b" not in result.output
    (saved,) = tmp_path.glob("kafkacap-traceback-*.txt")
    assert error_lines(result.output) == [
        f"error: internal error (a bug in kafkacap): RuntimeError: boom \\x1b[2J; the traceback is in {saved}; "
        "please attach it to a bug report"]
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "broken_run" in text and "summary" in text


@pytest.mark.parametrize("option", [
    ["--api", "99999999"],  # beyond int16: Arrow raised converting it
    ["--api", "Prodcue"],  # a name no API has: the listing was silently empty
    ["--limit", "-5"],
    ["--min-latency", "nan"],
])
def test_exchanges_filters_that_cannot_match_are_usage_errors(option):
    code, err = finish(kafkacap("exchanges", SAMPLES / "tansu_admin.pcap", *option, "--no-progress"))
    assert code == 2 and "Invalid value" in err, err


def test_exchanges_api_filter_takes_names_in_any_case_and_keys():
    process = kafkacap("exchanges", SAMPLES / "tansu_admin.pcap", "--api", "createtopics", "--api", "3", "--json",
                       "--no-progress")
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    names = {line.split(b'"api_name": "')[1].split(b'"')[0] for line in out.splitlines()}
    assert names == {b"CreateTopics", b"Metadata"}


def _ended_by_script(tmp_path: Path, before: str) -> tuple[subprocess.CompletedProcess, Path]:
    """An export by the console script in a new process, with ``before`` run first in that process."""
    out = tmp_path / "out"
    code = f"{before}\n{SCRIPT}"
    done = subprocess.run([sys.executable, "-c", code, "export", str(SAMPLES / "kafka09_legacy.pcap"), "-o",
                           str(out), "--no-progress"], capture_output=True, text=True, timeout=300)
    return done, out


def test_the_quick_exit_still_runs_the_atexit_functions(tmp_path):
    """The script skips the interpreter's teardown, not what was registered to run at exit (temporary
    folders and worker processes are cleaned up that way)."""
    marker = tmp_path / "ran"
    before = f"import atexit, pathlib; atexit.register(pathlib.Path({str(marker)!r}).touch)"
    done, out = _ended_by_script(tmp_path, before)
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert pq.read_table(out / "exchanges.parquet").num_rows > 0
    assert done.stderr.startswith("wrote ")  # flushed before the process ended


def test_a_thread_still_running_is_waited_for(tmp_path):
    """Another thread of the process still at work when the command ends: the ordinary exit, which waits
    for it, is taken."""
    marker = tmp_path / "finished"
    before = ("import threading, time, pathlib\n"
              f"threading.Thread(target=lambda: (time.sleep(1.5), pathlib.Path({str(marker)!r}).touch())).start()")
    done, _ = _ended_by_script(tmp_path, before)
    assert done.returncode == 0, done.stderr
    assert marker.exists()
