"""Every case of the hostile corpus (tests/hostile.py), exported as a user would: no traceback, exit 0, and
the canary exchanges before and after the hostile part both in the tables. Time and memory per case, at
several scales, are benchmarks/bench_hostile.py's (figures in benchmarks/JOURNAL.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import run_cli
from tests.hostile import CANARY_CLIENT, CASES, RECORD_CASES, write_case, write_gz_cases


def export(capture: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``kafkacap export`` as its own process, as a user runs it: its exit code and output are the test's."""
    return run_cli("export", capture, "-o", out, "--jobs", "1", "--no-progress", *extra)


def canaries(out: Path) -> list[str]:
    rows = pq.read_table(out / "exchanges.parquet", columns=["client_id", "status"]).to_pylist()
    return [r["status"] for r in rows if r["client_id"] == CANARY_CLIENT]


@pytest.mark.parametrize("name, mode", [(name, "default") for name in sorted(CASES)]
                         + [(name, "records") for name in sorted(RECORD_CASES)])
def test_hostile_case_keeps_what_surrounds_it(name: str, mode: str, tmp_path: Path) -> None:
    capture = write_case(name, tmp_path / f"{name}.pcap")
    done = export(capture, tmp_path / "out", *(["--records"] if mode == "records" else []))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert canaries(tmp_path / "out") == ["ok", "ok"]
    files = pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()
    assert len(files) == 1 and files[0]["packets"] > 0


def test_cut_and_fake_gzip_files(tmp_path: Path) -> None:
    truncated, fake = write_gz_cases(tmp_path)
    done = export(truncated, tmp_path / "cut")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert canaries(tmp_path / "cut")[:1] == ["ok"]  # the first canary lies before the cut
    files = pq.read_table(tmp_path / "cut" / "files.parquet").to_pylist()
    assert files[0]["status"] == "damaged"
    done = export(fake, tmp_path / "fake")  # a plain pcap named .gz is read by its content
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert canaries(tmp_path / "fake") == ["ok", "ok"]


def _count(out: Path, table: str, column: str, predicate) -> int:
    return sum(1 for v in pq.read_table(out / f"{table}.parquet", columns=[column]).column(column).to_pylist()
               if predicate(v))


def test_what_the_limits_dropped_is_counted_in_the_files_table(tmp_path: Path) -> None:
    """Each limit that dropped state says how much in the files table, and the count agrees with the rows
    that carry the consequence (evicted connections, unanswered rows with the limit's note, refused batches)."""
    counts = {}
    for name in ("bare_syns", "unanswered_flood", "refused_decompressions"):
        out = tmp_path / name
        done = export(write_case(name, tmp_path / f"{name}.pcap"), out)
        assert done.returncode == 0, done.stderr
        (files,) = pq.read_table(out / "files.parquet").to_pylist()
        counts[name] = files
    syns = counts["bare_syns"]
    assert syns["connections_evicted"] >= 100_000 // 8  # one eviction round at least: the SYNs passed the limit
    assert syns["connections_evicted"] == _count(tmp_path / "bare_syns", "connections", "ended",
                                                 lambda v: v == "evicted")
    flood = counts["unanswered_flood"]
    sent = -(-100_000 // 64) * 64  # the case writes its requests 64 to a segment
    assert flood["requests_dropped"] == sent - 10_000  # all but the last 10,000 in flight
    assert flood["requests_dropped"] == _count(tmp_path / "unanswered_flood", "exchanges", "note",
                                               lambda v: v is not None and "in-flight" in v)
    assert counts["refused_decompressions"]["refused_batches"] == 20
    assert all(files["requests_dropped"] == 0 for files in (syns, counts["refused_decompressions"]))
