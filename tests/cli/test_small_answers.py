"""The small things a new user trips over: failures told from protocol steps, an honest error_expected, a time
filter that says where the capture lies, and an export that says what it wrote and what it replaced."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from tests.helpers import GROUP, SAMPLES, run_cli, truth

ERRORS = SAMPLES / "tansu_broker_errors.pcap"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """kafkacap as its own process, with nothing of the environment but COLUMNS=200 and a bare PATH."""
    return run_cli(*args, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def _rows(*args: str) -> list[dict]:
    done = _cli("exchanges", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_status_failure_is_what_the_scenario_broke_and_expected_is_the_rest() -> None:
    for capture in (ERRORS, GROUP):
        caused = {(e["api_name"], e["error_name"]) for e in truth(capture)["errors"]}
        errors = _rows(str(capture), "--status", "error")
        failures = _rows(str(capture), "--status", "failure")
        expected = _rows(str(capture), "--status", "expected")
        key = ("connection_id", "correlation_id")
        assert sorted(tuple(r[k] for k in key) for r in errors) == sorted(
            tuple(r[k] for k in key) for r in failures + expected)
        # A scenario's deliberate errors include protocol steps (a JoinGroup without a member id); a failure is
        # never anything else.
        assert {(r["api_name"], r["error_name"]) for r in failures} <= caused, capture.name
        assert caused <= {(r["api_name"], r["error_name"]) for r in errors}, capture.name
    assert _rows(str(ERRORS), "--status", "failure")
    assert not _rows(str(GROUP), "--status", "failure"), "a healthy group's rebalances are no failure"
    assert _rows(str(GROUP), "--status", "expected"), "a consumer group shows protocol steps"


def test_error_expected_is_never_null(tmp_path: Path) -> None:
    done = _cli("export", str(GROUP), str(ERRORS), str(SAMPLES / "kafka09_acks0.pcap"), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet", columns=["status", "error_code", "error_expected"])
    assert ex["error_expected"].null_count == 0
    unanswered = pc.is_null(ex["error_code"])
    assert pc.any(unanswered).as_py(), "the samples hold exchanges without an error code"
    assert not pc.any(pc.and_(unanswered, ex["error_expected"])).as_py()
    frame = ex.to_pandas()
    assert len(frame[~frame["error_expected"]]) == ex.num_rows - pc.sum(ex["error_expected"]).as_py()


def test_a_time_filter_that_matches_nothing_says_where_the_capture_lies() -> None:
    done = _cli("exchanges", str(ERRORS), "--since", "2020-01-01", "--until", "2020-01-02")
    assert done.returncode == 0
    every = _rows(str(ERRORS))
    times = sorted(r["request_last_ts"] or r["response_last_ts"] for r in every)
    first, last = times[0][:19].replace("T", " "), times[-1][:19].replace("T", " ")
    assert f"from {first} to {last} UTC" in " ".join(done.stderr.split())


def test_an_export_names_its_folder_and_tables_and_says_what_it_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lines = []
    for capture in (GROUP, ERRORS, GROUP):
        done = _cli("export", str(capture), "-o", str(out))
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("\n") == 1
        lines.append(done.stderr.strip())
    tables = sorted(p.name.split(".")[0] for p in out.iterdir() if p.suffix == ".parquet")
    for line in lines:
        assert f"to {out}: " in line
        listed = line.split(": ", 1)[1].split(" (")[0].split(", ")
        assert sorted(listed) == tables
    assert len({line.split(": ", 1)[1].split(" (")[0] for line in lines}) == 1, "the same order every time"
    assert "replaced" not in lines[0]
    assert all("the earlier export there was replaced" in line for line in lines[1:])
