"""Consumer lag (analyzer.derived.lag) held to the clients' own view and to tshark.

The truth files hold the offsets each consumer committed and, for the Java clients, the offsets the broker
acknowledged per partition: a topic written from offset 0 has its high watermark at the last acknowledged
offset plus one, so a consumer that read every record and committed has lag 0 at its last commit, and its
committed offsets are the truth's. tshark 4.0 decodes the legacy sample's OffsetCommit v2 and Fetch v1, so there
the lag is recomputed from tshark's fields alone. The as-of join itself is held to a brute-force search.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from analyzer.cli.lag_view import lag_rows
from analyzer.derived import lag
from tests.helpers import SAMPLES, export_tables, needs_tshark
from tests.helpers import truth as _truth

WITH_COMMITS = ["kafka44_java_clients", "kafka39_java_clients", "tansu_consumer_group", "kafka44_cluster",
                "kafka44_sasl_ssl", "kafka09_legacy"]


def _export(name: str, out: Path) -> dict[str, pa.Table]:
    truth = _truth(name)
    capture = SAMPLES / truth["capture"]
    args = ["--port", str(truth["broker"]["port"])]
    if truth.get("tls"):
        args += ["--tls-keylog", str(SAMPLES / truth["tls"]["keylog"])]
    if truth["broker"].get("nodes"):
        args += ["--detect-ports"]
    return export_tables(capture, out, *args, tables=("partitions", "exchanges"))


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, dict[str, pa.Table]]:
    tmp = tmp_path_factory.mktemp("lag")
    return {name: _export(name, tmp / name) for name in WITH_COMMITS}


@pytest.mark.parametrize("name", WITH_COMMITS)
def test_last_commits_are_the_clients_and_lag_is_zero_once_all_was_read(name, tables) -> None:
    truth = _truth(name)
    t = tables[name]
    end = lag.lag_at_end(t["partitions"], t["exchanges"])
    got = {(r["group_id"], r["topic"], r["partition"]): r for r in end.to_pylist()}
    expected = {(g, topic, int(p)): offset for g, entry in truth["groups"].items()
                for topic, parts in entry["committed"].items() for p, offset in parts.items()}
    assert expected, "the sample's consumers commit"
    assert {k: got[k]["committed_offset"] for k in expected if k in got} == expected
    assert set(expected) <= set(got)
    for group, topic, partition in expected:
        info = truth["topics"][topic]
        detail = info.get("partitions", {}).get(str(partition))
        if detail and detail["offsets"] == list(range(len(detail["offsets"]))):
            # Written from offset 0 and every record acknowledged: the watermark is their count.
            assert got[group, topic, partition]["high_watermark"] == len(detail["offsets"]), (group, topic)
        if info["consumed"] == info["produced"] and not info.get("produced_acks0"):
            assert got[group, topic, partition]["lag_at_commit"] == 0, (group, topic, partition)
            assert got[group, topic, partition]["lag"] == 0, (group, topic, partition)
    # A group's last offsets add up to the records its consumers read (every topic written from offset 0).
    for group, entry in truth["groups"].items():
        for topic, parts in entry["committed"].items():
            if truth["topics"][topic]["consumed"] == truth["topics"][topic]["produced"]:
                assert sum(got[group, topic, int(p)]["committed_offset"] for p in parts) == \
                    truth["topics"][topic]["consumed"]


def test_summary_rows_name_the_same_lags(tables) -> None:
    t = tables["tansu_consumer_group"]
    rows = lag_rows(t["partitions"], t["exchanges"])
    committed = _truth("tansu_consumer_group")["groups"]["billing"]["committed"]["orders"]
    assert {(r["topic"], r["partition"]): r["committed_offset"] for r in rows} == {
        ("orders", int(p)): o for p, o in committed.items()}
    json.dumps(rows)


def _tshark(capture: Path, filter_: str, fields: list[str]) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(capture), "-d", "tcp.port==9092,kafka", "-Y", filter_, "-T", "fields",
                          *(a for f in fields for a in ("-e", f))], capture_output=True, text=True, check=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


@needs_tshark
def test_lag_at_each_commit_is_tsharks(tables) -> None:
    """kafka09_legacy: each OffsetCommit (group, topic, partition, offset, packet) and the high watermark of the
    last single-partition Fetch response before it for that partition, as tshark reads them."""
    capture = SAMPLES / "kafka09_legacy.pcap"
    commits = _tshark(capture, "kafka.api_key==8 && !kafka.request_frame",
                      ["frame.number", "kafka.consumer_group", "kafka.topic_name", "kafka.partition_id",
                       "kafka.offset"])
    marks = _tshark(capture, "kafka.api_key==1 && kafka.request_frame",
                    ["frame.number", "kafka.topic_name", "kafka.partition_id", "kafka.offset"])
    expected = {}
    for frame, group, topic, partition, offset in commits:
        before = [m for m in marks if int(m[0]) < int(frame) and m[1] == topic and m[2] == partition]
        hw = int(before[-1][3].split(",")[0]) if before else None
        expected[group, topic, int(partition), int(frame)] = (int(offset), hw)
    assert len(expected) >= 2
    t = tables["kafka09_legacy"]
    series = lag.lag_series(t["partitions"], t["exchanges"])
    got = {(r["group_id"], r["topic"], r["partition"], r["frame"]): (r["committed_offset"], r["high_watermark"])
           for r in series.to_pylist() if r["api_name"] == "OffsetCommit"}
    assert got == expected
    assert all(r["lag"] == r["high_watermark"] - r["committed_offset"] for r in series.to_pylist())


def _brute(queries: list[dict], marks: list[dict]) -> list[tuple]:
    out = []
    for q in queries:
        seen = [m for m in marks if (m["capture_file"], m["topic"], m["partition"]) ==
                (q["capture_file"], q["topic"], q["partition"]) and m["hw_ts"] <= q["ts"]]
        best = max(seen, key=lambda m: (m["hw_ts"], m["high_watermark"])) if seen else None
        out.append((best["hw_ts"], best["high_watermark"]) if best else (None, None))
    return out


def test_asof_join_is_a_brute_force_search_in_any_batching() -> None:
    """Random offsets and watermarks on a few topic-partitions of two files, with ties: the latest watermark at
    or before each offset's time; the same when the watermarks come in shuffled batches."""
    rng = np.random.default_rng(3)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def rows(n: int, what: str) -> list[dict]:
        return [{"capture_file": f"f{rng.integers(2)}", "topic": f"t{rng.integers(2)}",
                 "partition": int(rng.integers(3)), what: base + dt.timedelta(milliseconds=int(rng.integers(200))),
                 "value": int(rng.integers(1000))} for _ in range(n)]

    q = rows(300, "ts")
    m = rows(400, "hw_ts")
    queries = pa.Table.from_pylist([{**r, "committed_offset": r.pop("value")} for r in q])
    marks = pa.Table.from_pylist([{**r, "high_watermark": r.pop("value"), "hw_fetch_kind": "consumer"} for r in m])
    expected = _brute(queries.to_pylist(), marks.to_pylist())
    whole = lag.asof(queries, marks)
    assert list(zip(whole["hw_ts"].to_pylist(), whole["high_watermark"].to_pylist(), strict=True)) == expected
    assert any(h is None for _, h in expected) and any(h is not None for _, h in expected)
    builder = lag.LagBuilder(queries)
    order = rng.permutation(marks.num_rows)
    for chunk in np.array_split(order, 7):
        part = marks.take(pa.array(chunk))
        builder.add(pa.table({"api_name": ["Fetch"] * part.num_rows, "capture_file": part["capture_file"],
                              "topic": part["topic"], "partition": part["partition"].cast(pa.int32()),
                              "error_code": pa.array([0] * part.num_rows, pa.int16()),
                              "response_last_ts": part["hw_ts"], "high_watermark": part["high_watermark"],
                              "fetch_kind": part["hw_fetch_kind"]}))
    assert list(zip(builder.best["hw_ts"].to_pylist(), builder.best["high_watermark"].to_pylist(),
                    strict=True)) == expected
