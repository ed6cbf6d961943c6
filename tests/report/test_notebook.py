"""The analysis notebook: a valid document, run top to bottom, whose pandas and DuckDB answers hold on fresh data.

Its cells (the Spark ones excepted: a JVM start costs more than this whole file may take) are run again on a
new `kafkacap export` of sample_pcaps/ plus one crafted capture with what the samples lack (orphan responses,
packet loss, a malformed frame), once with one Parquet file per table and once with one hive-partitioned folder
per table (the Spark job's layout). Every answer is then recomputed here from the raw Parquet rows in
plain Python (statistics, Counter), so a wrong query, join or filter in the notebook shows up as a mismatch.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import struct
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests import craft
from tests.helpers import ROOT, SAMPLES, TRUTH_FILES, analyze_tables, export_tables, pcap_records
from tests.helpers import truth as read_truth

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = ROOT / "notebooks" / "kafkacap_tables.ipynb"
TABLES = ("exchanges", "errors", "partitions", "connections", "files", "groups", "deliveries", "share_ranges",
          "share_consumption", "transactions", "transaction_steps")
# The column that names a row's capture file: the partitioned copy spreads the files over several dates.
FILE_COLUMN = {"deliveries": "produce_capture_file"}


@pytest.fixture(scope="module")
def notebook():
    return nbformat.read(NOTEBOOK, as_version=4)


def _code_cells(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _is_spark(cell) -> bool:
    return "spark" in cell.metadata.get("tags", [])


# --- the document ------------------------------------------------------------------------------------------


def test_notebook_is_valid_and_was_run_top_to_bottom_without_errors(notebook):
    nbformat.validate(notebook)
    cells = _code_cells(notebook)
    assert len(cells) >= 10
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    for cell in cells:
        assert cell.outputs, f"no output saved for: {cell.source[:60]!r}"
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:60]
        assert not [o for o in cell.outputs if o.get("name") == "stderr"], cell.source[:60]


def test_spark_cells_are_tagged_and_the_others_do_not_need_spark(notebook):
    """The tag is what lets this file skip the JVM; a Spark call in an untagged cell would break that."""
    uses_spark = re.compile(r"\bpyspark\b|\bspark\.")
    spark_cells = [cell for cell in _code_cells(notebook) if _is_spark(cell)]
    assert spark_cells
    assert any("local[1]" in c.source and '"spark.sql.session.timeZone", "UTC"' in c.source for c in spark_cells)
    for cell in _code_cells(notebook):
        assert bool(uses_spark.search(cell.source)) == _is_spark(cell), cell.source[:60]


def test_outputs_hold_no_machine_paths(notebook):
    text = json.dumps([cell.outputs for cell in _code_cells(notebook)])
    assert str(ROOT) not in text
    assert not re.search(r"(?<![\w.])/(home|root|tmp|work|Users|var|private|opt|mnt)/", text)
    assert not re.search(r"[A-Za-z]:\\\\", text)


# --- the answers, re-run on a fresh export -----------------------------------------------------------------


def _troubled_capture(path: Path) -> str:
    """What the sample captures lack: responses to requests from before the capture, errors of clients without
    a client_id, an unanswered request, a lost and a repeated segment, an unknown API key, a malformed header,
    frames cut short."""
    heartbeat = craft.kstring("group-1") + struct.pack(">i", 7) + craft.kstring("member-1") + craft.kstring(None)
    late = craft.Conversation(cport=41000)
    late.send(False, craft.heartbeat_response(1))
    late.send(False, craft.heartbeat_response(2))
    for corr, error_code in ((3, 27), (4, 15)):  # REBALANCE_IN_PROGRESS (not retriable), COORDINATOR_NOT_AVAILABLE
        late.send(True, craft.request(12, 3, corr, None, heartbeat))
        late.send(False, craft.heartbeat_response(corr, error_code=error_code))
    late.send(True, craft.request(12, 3, 5, None, heartbeat))
    late.send(True, craft.request(12, 3, 6, None, heartbeat)[:20], ack=False)
    late.rst(False)
    lossy = craft.Conversation(cport=41001, t=1_700_000_001.0)
    lossy.handshake()
    lossy.send(True, craft.heartbeat_request(1, "lossy"))
    lossy.send(False, craft.heartbeat_response(1))
    lost = lossy.send(True, craft.heartbeat_request(2, "lossy"), sizes=[10, 10, 100])[1]
    lossy.packets.remove(lost)
    lossy.send(False, craft.heartbeat_response(2))
    lossy.send(True, craft.heartbeat_request(3, "lossy"))
    lossy.packets.append(lossy.packets[-2])
    lossy.send(False, craft.heartbeat_response(3))
    lossy.send(True, craft.request(99, 0, 4, "lossy", b"\x00" * 3))
    lossy.send(True, struct.pack(">ihhih", 10 + 3, 12, 3, 40, -7) + b"\x00" * 3)  # a client_id length of -7
    lossy.send(True, craft.heartbeat_request(5, "lossy")[:20], ack=False)
    return craft.write(path, sorted(late.packets + lossy.packets, key=lambda p: p.time))


TRANSACTIONS = SAMPLES / "kafka44_transactions.pcap"
OPEN_TRANSACTION = "kafka44_transactions_open.pcap"


def _open_transaction_capture(path: Path) -> Path:
    """The transactional producer's capture cut just before its first EndTxn request: its transactional id's first
    transaction is open there (no end, no duration), and the id has transactions in two captures."""
    steps = analyze_tables(TRANSACTIONS)["transaction_steps"].to_pylist()
    first_end = min(s["request_ts"] for s in steps if s["api_name"] == "EndTxn").timestamp()
    header, records = pcap_records(TRANSACTIONS)
    order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    scale = 1e9 if header[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e6
    kept = [r for r in records if sum(x / d for x, d in zip(struct.unpack_from(order + "II", r), (1, scale),
                                                            strict=True)) < first_end]
    assert 0 < len(kept) < len(records)
    path.write_bytes(header + b"".join(kept))
    return path


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("notebook") / "out"
    troubled = _troubled_capture(out.parent / "troubled.pcap")
    opened = _open_transaction_capture(out.parent / OPEN_TRANSACTION)
    export_tables([SAMPLES, troubled, opened], out, "--detect-ports", "--deliveries", tables=())
    return out


@pytest.fixture(scope="module")
def partitioned_dir(export_dir) -> Path:
    """The same tables as hive-partitioned folders; files are spread over several dates so that reading a single
    partition folder instead of all of them would lose rows."""
    out = export_dir.parent / "partitioned"
    names = sorted(pq.read_table(export_dir / "files.parquet").column("capture_file").to_pylist())
    first = pq.read_table(export_dir / "files.parquet").column("first_ts")[0].as_py().date()
    date_of = {name: str(first + timedelta(days=i % 3)) for i, name in enumerate(names)}
    for name in TABLES:
        table = pq.read_table(export_dir / f"{name}.parquet")
        column = table.column(FILE_COLUMN.get(name, "capture_file")).to_pylist()
        dates = pa.array([date_of[f] for f in column], pa.string())
        ds.write_dataset(table.append_column("capture_date", dates), out / name, format="parquet",
                         partitioning=["capture_date"], partitioning_flavor="hive",
                         basename_template="part-{i}.parquet")
        (out / name / "_SUCCESS").touch()
    assert len(list((out / "exchanges").iterdir())) == 4  # three date folders and the marker
    return out


def _run_notebook_cells(nb, out: Path) -> dict:
    pytest.importorskip("pandas")
    pytest.importorskip("duckdb")
    namespace: dict = {"display": lambda *args, **kwargs: None}
    with mock.patch.dict(os.environ, {"KAFKACAP_OUT": str(out)}):
        for index, cell in enumerate(_code_cells(nb)):
            if not _is_spark(cell):
                exec(compile(cell.source, f"<notebook cell {index}>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def answers_by_layout(notebook, export_dir, partitioned_dir) -> dict[str, dict]:
    return {"file": _run_notebook_cells(notebook, export_dir), "folder": _run_notebook_cells(notebook, partitioned_dir)}


@pytest.fixture(params=["file", "folder"])
def answers(request, answers_by_layout) -> dict:
    return answers_by_layout[request.param]


@pytest.fixture(scope="module")
def rows(export_dir) -> dict[str, list[dict]]:
    return {name: pq.read_table(export_dir / f"{name}.parquet").to_pylist() for name in TABLES}


def _clean(value):
    """pandas' missing values (NaN, NaT, NA) as None, numpy scalars as Python ones."""
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _records(df, index: bool = False) -> list[dict]:
    df = df.reset_index() if index else df
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_layouts_are_recognised_and_all_rows_are_read(answers, rows):
    layout = answers["table_source"]("exchanges")[1]
    assert {answers["table_source"](name)[1] for name in TABLES} == {layout}
    assert answers["row_counts"].to_dict() == {name: len(rows[name]) for name in TABLES}
    assert {r["status"]: r["exchanges"] for r in _records(answers["status_counts"])} == \
        Counter(r["status"] for r in rows["exchanges"])


def test_files_by_status(answers, rows):
    expected = defaultdict(lambda: [0, 0])
    for f in rows["files"]:
        expected[f["status"]][0] += 1
        expected[f["status"]][1] += f["packets"] or 0
    got = {r["status"]: [r["files"], r["packets"]] for r in _records(answers["files_by_status"], index=True)}
    assert got == dict(expected)


def test_latency_percentiles_per_api(answers, rows):
    latencies = defaultdict(list)
    for r in rows["exchanges"]:
        if r["latency_ms"] is not None:
            latencies[r["api_name"]].append(r["latency_ms"])
    got = _records(answers["latency_by_api"])
    assert {r["api_name"] for r in got} == set(latencies)
    for r in got:
        values = sorted(latencies[r["api_name"]])
        p99 = statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]
        assert r["exchanges"] == len(values)
        assert _close(r["p50_ms"], statistics.median(values)), r
        assert _close(r["p99_ms"], p99), r
        assert r["max_ms"] == values[-1]
    p99s = [r["p99_ms"] for r in got]
    assert p99s == sorted(p99s, reverse=True)


def test_ten_slowest_exchanges(answers, rows):
    answered = [r for r in rows["exchanges"] if r["latency_ms"] is not None]
    answered.sort(key=lambda r: (-r["latency_ms"], r["capture_file"], r["request_frame"]))
    expected = [(r["capture_file"], r["request_frame"], r["api_name"], r["client_id"],
                 None if r["topics"] is None else ",".join(r["topics"]), r["latency_ms"]) for r in answered[:10]]
    got = [(r["capture_file"], r["request_frame"], r["api_name"], r["client_id"], r["topics"], r["latency_ms"])
           for r in _records(answers["slowest"])]
    assert got == expected


def test_error_rates_per_client(answers, rows):
    requests, failed = Counter(), Counter()
    for r in rows["exchanges"]:
        if r["status"] in ("ok", "error"):
            requests[r["client_id"]] += 1
            failed[r["client_id"]] += r["status"] == "error"
    kinds = Counter((e["client_id"], e["retriable"]) for e in rows["errors"])
    got = {r["client_id"]: r for r in _records(answers["error_rates"], index=True)}
    assert set(got) == {client for client, n in failed.items() if n}
    for client, r in got.items():
        assert (r["requests"], r["failed"]) == (requests[client], failed[client])
        assert _close(r["error_rate"], failed[client] / requests[client])
        assert (r["retriable"], r["non_retriable"], r["undefined"]) == \
            (kinds[client, True], kinds[client, False], kinds[client, None])
        assert r["error_fields"] == r["retriable"] + r["non_retriable"] + r["undefined"]
    rates = [r["error_rate"] for r in _records(answers["error_rates"])]
    assert rates == sorted(rates, reverse=True)


def test_errors_by_client_and_name(answers, rows):
    expected = Counter((e["client_id"], e["api_name"], e["error_name"], e["retriable"]) for e in rows["errors"])
    got = {(r["client_id"], r["api_name"], r["error_name"], r["retriable"]): r["errors"]
           for r in _records(answers["errors_by_name"])}
    assert got == dict(expected)
    assert sum(got.values()) == len(rows["errors"])


def _sum(values):
    """SQL sum: nulls ignored, null when nothing is left."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def test_produce_volume_per_topic_and_codec(answers, rows):
    groups = defaultdict(list)
    for p in rows["partitions"]:
        if p["api_name"] == "Produce":
            groups[p["topic"], p["codec"]].append(p)
    got = {(r["topic"], r["codec"]): r for r in _records(answers["produce_volume"])}
    assert set(got) == set(groups)
    for key, ps in groups.items():
        r = got[key]
        assert r["partition_writes"] == len(ps)
        assert r["batches"] == _sum(p["batches"] for p in ps)
        assert r["records"] == _sum(p["records"] for p in ps)
        assert r["wire_bytes"] == _sum(p["request_record_bytes"] for p in ps)
        assert r["uncompressed_bytes"] == _sum(p["uncompressed_bytes"] for p in ps)
        assert r["records_rejected"] == sum(p["records"] or 0 for p in ps if p["error_code"] not in (None, 0))


def test_produce_volume_per_codec(answers, rows):
    groups = defaultdict(list)
    for p in rows["partitions"]:
        if p["api_name"] == "Produce":
            groups[p["codec"]].append(p)
    got = {r["codec"]: r for r in _records(answers["produce_by_codec"])}
    assert set(got) == set(groups)
    for codec, ps in groups.items():
        r = got[codec]
        known = [p for p in ps if p["uncompressed_bytes"] is not None]
        assert r["topics"] == len({p["topic"] for p in ps})
        assert r["wire_bytes"] == _sum(p["request_record_bytes"] for p in ps)
        assert _close(r["compression_ratio"], sum(p["uncompressed_bytes"] for p in known) /
                      sum(p["request_record_bytes"] for p in known) if known else None)


def test_consumer_lag_from_fetch_partitions(answers, rows):
    groups = defaultdict(list)
    for p in rows["partitions"]:
        if p["api_name"] == "Fetch" and p["high_watermark"] is not None and p["fetch_offset"] is not None \
                and p["fetch_kind"] == "consumer":  # a follower's lag is replication's, not a consumer's
            groups[p["client_id"], p["topic"], p["partition"]].append(p)
    got = {(r["client_id"], r["topic"], r["partition"]): r for r in _records(answers["consumer_lag"], index=True)}
    assert set(got) == set(groups)
    for key, ps in groups.items():
        lags = [p["high_watermark"] - p["fetch_offset"] for p in ps]
        last = max(ps, key=lambda p: (p["response_last_ts"], p["capture_file"], p["connection_id"],
                                      p["correlation_id"]))
        ages = [p["data_age_ms"] for p in ps if p["data_age_ms"] is not None]
        r = got[key]
        assert (r["fetches"], r["max_lag"]) == (len(ps), max(lags))
        assert r["last_lag"] == last["high_watermark"] - last["fetch_offset"]
        assert r["records_fetched"] == sum(p["records"] or 0 for p in ps)
        assert _close(r["max_data_age_ms"], max(ages) if ages else None)


def test_unanswered_orphan_and_malformed_counts(answers, rows):
    statuses = defaultdict(Counter)
    for r in rows["exchanges"]:
        statuses[r["capture_file"]][r["status"]] += 1
    framing = defaultdict(Counter)
    for c in rows["connections"]:
        framing[c["capture_file"]].update(resyncs=c["resyncs"], truncated_frames=c["truncated_frames"])
    assert {"no_response", "orphan_response", "malformed"} <= {s for c in statuses.values() for s in c}
    got = {r["capture_file"]: r for r in _records(answers["anomalies"])}
    assert set(got) == set(statuses)
    for name, counts in statuses.items():
        r = got[name]
        assert r["exchanges"] == sum(counts.values())
        assert (r["unanswered"], r["acks0"], r["orphan_responses"], r["malformed"]) == \
            (counts["no_response"], counts["acks0"], counts["orphan_response"], counts["malformed"])
        assert (r["resyncs"], r["truncated_frames"]) == (framing[name]["resyncs"], framing[name]["truncated_frames"])
    unusual = Counter((r["capture_file"], r["request_frame"], r["response_frame"], r["status"])
                      for r in rows["exchanges"] if r["status"] in ("no_response", "orphan_response", "malformed"))
    assert Counter((r["capture_file"], r["request_frame"], r["response_frame"], r["status"])
                   for r in _records(answers["unusual"])) == unusual


def test_connection_health(answers, rows):
    per_file = defaultdict(list)
    for c in rows["connections"]:
        per_file[c["capture_file"]].append(c)
    got = {r["capture_file"]: r for r in _records(answers["health"], index=True)}
    assert set(got) == set(per_file)
    for name, cs in per_file.items():
        r = got[name]
        for column in ("retransmissions", "out_of_order", "gaps", "gap_bytes", "resyncs"):
            assert r[column] == sum(c[column] for c in cs), (name, column)
        assert (r["connections"], r["rst"], r["tls"]) == \
            (len(cs), sum(c["ended"] == "rst" for c in cs), sum(bool(c["tls"]) for c in cs))
        rtts = [c["handshake_rtt_ms"] for c in cs if c["handshake_rtt_ms"] is not None]
        assert _close(r["handshake_rtt_p50_ms"], statistics.median(rtts) if rtts else None)
    troubled = {(c["capture_file"], c["connection_id"]) for c in rows["connections"]
                if c["retransmissions"] or c["out_of_order"] or c["gaps"] or c["resyncs"] or c["ended"] == "rst"}
    assert {(r["capture_file"], r["connection_id"]) for r in _records(answers["troubled"])} == troubled



ANSWERS = ("row_counts", "status_counts", "files_by_status", "latency_by_api", "slowest", "error_rates",
           "errors_by_name", "produce_volume", "produce_by_codec", "consumer_lag", "anomalies", "unusual", "health",
           "troubled", "group_summary", "generations", "members", "departures", "timeline", "delivery_by_topic",
           "delivery_by_group", "epochs", "reconciliation", "moved_partitions", "share_members", "share_summary",
           "redelivered_records", "transactions_by_id", "transaction_list", "slowest_transactions",
           "transaction_errors", "transaction_step_errors")


def test_both_layouts_give_the_same_answers(answers_by_layout):
    pd = pytest.importorskip("pandas")
    single, folders = answers_by_layout["file"], answers_by_layout["folder"]
    assert "capture_date" in folders["exchanges"] and "capture_date" not in single["exchanges"]
    for name in ANSWERS:
        a, b = single[name], folders[name]
        if isinstance(a, pd.Series):
            pd.testing.assert_series_equal(a, b, check_dtype=False, obj=name)
        else:
            pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=name)


# --- consumer groups and end-to-end latency ----------------------------------------------------------------


def _assignment_text(assignment) -> str | None:
    """The notebook's notation for an assignment: topic[partitions], topics space-separated."""
    if assignment is None:
        return None
    return " ".join(f"{a['topic']}[{','.join(str(p) for p in a['partitions'])}]" for a in assignment)


def _quantile_cont(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks: SQL's quantile_cont / percentile_cont."""
    values = sorted(values)
    position = (len(values) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


def _client_list(members, member_ids=None) -> str:
    return ", ".join(sorted(m["client_id"] for m in members
                            if m["client_id"] is not None and (member_ids is None or m["member_id"] in member_ids)))


def test_group_summary(answers, rows):
    per_group = defaultdict(list)
    for g in rows["groups"]:
        per_group[g["group_id"]].append(g)
    assert any(len(gs) > 1 for gs in per_group.values())
    assert any(g["stop_ms"] is not None for g in rows["groups"])
    got = {r["group_id"]: r for r in _records(answers["group_summary"])}
    assert set(got) == set(per_group)
    for group_id, gs in per_group.items():
        r = got[group_id]
        stops = [g["stop_ms"] for g in gs if g["stop_ms"] is not None]
        assert (r["generations"], r["captures"], r["max_members"]) == \
            (len(gs), len({g["capture_file"] for g in gs}), max(g["member_count"] for g in gs))
        assert r["rebalances_seen"] == sum(g["rebalance_ms"] is not None for g in gs)
        assert _close(r["rebalance_ms"], _sum(g["rebalance_ms"] for g in gs)), r
        assert _close(r["max_stop_ms"], max(stops) if stops else None), r
        assert _close(r["stop_ms"], sum(stops) if stops else None), r


def test_generations_with_joined_and_left_members(answers, rows):
    generations = {(g["group_id"], g["capture_file"], g["generation_id"]): g for g in rows["groups"]}
    previous = {(g["group_id"], g["capture_file"], g["next_generation_id"]): g for g in rows["groups"]}
    got = _records(answers["generations"])
    assert [(r["group_id"], r["capture_file"], r["generation_id"]) for r in got] == sorted(generations)
    assert any(r["joined"] for r in got) and any(r["left"] for r in got)
    for r in got:
        key = (r["group_id"], r["capture_file"], r["generation_id"])
        g = generations[key]
        before = previous.get(key, {"members": []})
        assert (r["assignor"], r["members"], r["clients"]) == \
            (g["protocol_name"], g["member_count"], _client_list(g["members"]))
        assert r["joined"] == (None if g["joined"] is None else _client_list(g["members"], set(g["joined"]))), r
        assert r["left"] == (None if g["left"] is None else _client_list(before["members"], set(g["left"]))), r
        assert (r["rebalance_start"], r["rebalance_ms"], r["stop_ms"]) == \
            (g["rebalance_start"], g["rebalance_ms"], g["stop_ms"])


def test_members_and_their_partitions_per_generation(answers, rows):
    expected = {}
    for g in rows["groups"]:
        for m in g["members"]:
            expected[g["group_id"], g["capture_file"], g["generation_id"], m["member_id"]] = (
                m["client_id"], m["member_id"] == g["leader"], _assignment_text(m["assignment"]), m["join_ts"],
                m["synced_ts"], m["waited_ms"], m["left_ts"], m["heartbeats"], m["commits"])
    got = _records(answers["members"])
    assert len(got) == len(expected)
    assert {(r["group_id"], r["capture_file"], r["generation_id"], r["member_id"]): (
        r["client_id"], r["leader"], r["assignment"], r["join_ts"], r["synced_ts"], r["waited_ms"], r["left_ts"],
        r["heartbeats"], r["commits"]) for r in got} == expected


def test_which_member_left_and_when(answers, rows):
    dropped = {(g["group_id"], g["capture_file"], g["generation_id"], member_id): g["rebalance_start"]
               for g in rows["groups"] for member_id in g["left"] or []}
    expected = {}
    for g in rows["groups"]:
        for m in g["members"]:
            drop = (g["group_id"], g["capture_file"], g["next_generation_id"], m["member_id"])
            if m["left_ts"] is not None or drop in dropped:
                expected[g["group_id"], g["capture_file"], m["member_id"], g["generation_id"]] = (
                    m["client_id"], _assignment_text(m["assignment"]), m["left_ts"],
                    g["next_generation_id"] if drop in dropped else None, dropped.get(drop))
    got = {(r["group_id"], r["capture_file"], r["member_id"], r["last_generation"]): (
        r["client_id"], r["assignment"], r["leave_group_ts"], r["dropped_in_generation"], r["dropped_ts"])
        for r in _records(answers["departures"])}
    assert len(got) == len(answers["departures"])
    assert got == expected
    assert any(v[2] is not None for v in got.values()) and any(v[3] is not None for v in got.values())


def test_rebalance_timeline_bars(answers, rows):
    """Each member: waiting from its JoinGroup to its assignment, then holding it until it rejoins (else leaves,
    else the generation ends); the group: each rebalance, then the stable time until the next."""
    joins = {(g["group_id"], g["capture_file"], g["generation_id"], m["member_id"]): m["join_ts"]
             for g in rows["groups"] for m in g["members"]}
    ids_of = defaultdict(set)
    for g in rows["groups"]:
        for m in g["members"]:
            ids_of[g["group_id"], g["capture_file"], m["client_id"]].add(m["member_id"])
    expected = Counter()
    for g in rows["groups"]:
        where = (g["group_id"], g["capture_file"])
        rebalance_end = g["rebalance_end"] or g["ended"]
        expected[(*where, "(group)", "rebalance", g["rebalance_start"], rebalance_end)] += 1
        if g["rebalance_end"] is not None and g["ended"] is not None and g["ended"] >= g["rebalance_end"]:
            expected[(*where, "(group)", "stable", g["rebalance_end"], g["ended"])] += 1
        for m in g["members"]:
            ids = sorted(ids_of[(*where, m["client_id"])])
            row = m["client_id"] + (f" #{ids.index(m['member_id']) + 1}" if len(ids) > 1 else "")
            ends = [t for t in (joins.get((*where, g["next_generation_id"], m["member_id"])), m["left_ts"], g["ended"])
                    if t is not None]
            gone = ends[0] if ends else None
            expected[(*where, row, "waiting", m["join_ts"], m["synced_ts"] or gone)] += 1
            if m["synced_ts"] is not None and gone is not None and gone >= m["synced_ts"]:
                expected[(*where, row, "assigned", m["synced_ts"], gone)] += 1
    got = Counter((r["group_id"], r["capture_file"], r["row"], r["phase"], r["start"], r["end"])
                  for r in _records(answers["timeline"]))
    assert got == expected
    assert {"rebalance", "stable", "waiting", "assigned"} <= {key[3] for key in got}


def test_groups_agree_with_the_clients_own_record(answers):
    """The recording clients logged their group, the members, who left, and (kafka-python's rebalance listener)
    each assignment and revocation with its generation: the notebook's members, departures and timeline bars
    must tell the same story."""
    members, departures = _records(answers["members"]), _records(answers["departures"])
    timeline = _records(answers["timeline"])
    checked = revocations = 0
    for truth_file in TRUTH_FILES:
        truth = read_truth(truth_file)
        for group_id, group in (truth.get("groups") or {}).items():
            seen = [r for r in members if (r["group_id"], r["capture_file"]) == (group_id, truth["capture"])]
            if not seen:  # a group behind TLS without its key log
                continue
            checked += 1
            assert {r["client_id"] for r in seen} == set(group["members"]), group_id
            assert {r["client_id"] for r in departures if r["group_id"] == group_id} <= set(group["left"])
            for client, events in (group.get("assignments") or {}).items():
                assigned = [e for e in events if e["event"] == "assigned"]
                revoked = [e for e in events if e["event"] == "revoked" and e["generation_id"] >= 0]
                bars = sorted((b for b in timeline if (b["group_id"], b["row"], b["phase"]) ==
                               (group_id, client, "assigned")), key=lambda b: b["start"])
                assert len(bars) == len(assigned) == len(revoked), client
                for bar, a, r in zip(bars, assigned, revoked, strict=True):
                    label = f"gen {a['generation_id']} {_assignment_text([a])}"
                    assert bar["label"] == label, (bar, a)
                    assert [m["assignment"] for m in seen if (m["member_id"], m["generation_id"]) ==
                            (a["member_id"], a["generation_id"])] == [_assignment_text([a])]
                    # the listener runs just after the SyncGroup answer, and just before the rejoin or LeaveGroup
                    assert abs(bar["start"].timestamp() - a["time"]) < 0.05, (bar, a)
                    assert abs(bar["end"].timestamp() - r["time"]) < 0.05, (bar, r)
                    revocations += 1
    assert checked >= 4 and revocations >= 3


def _deliveries_by(rows, *keys) -> dict:
    groups = defaultdict(list)
    for d in rows["deliveries"]:
        groups[tuple(d[k] for k in keys)].append(d)
    return groups


def _assert_latencies(r, batches):
    latencies = [d["delivery_ms"] for d in batches]
    assert r["deliveries"] == len(batches)
    assert _close(r["p50_ms"], _quantile_cont(latencies, 0.5)), r
    assert _close(r["p99_ms"], _quantile_cont(latencies, 0.99)), r
    assert r["max_ms"] == max(latencies)


def test_delivery_latency_per_topic(answers, rows):
    per_topic = _deliveries_by(rows, "topic")
    got = {(r["topic"],): r for r in _records(answers["delivery_by_topic"])}
    assert set(got) == set(per_topic) and len(got) > 10
    for key, batches in per_topic.items():
        r = got[key]
        _assert_latencies(r, batches)
        assert r["consumers"] == len({(d["consumer_ip"], d["consumer_client_id"]) for d in batches})
        assert _close(r["after_ack_p50_ms"], _quantile_cont([d["after_ack_ms"] for d in batches], 0.5))
    p99s = [r["p99_ms"] for r in _records(answers["delivery_by_topic"])]
    assert p99s == sorted(p99s, reverse=True)


def test_delivery_latency_per_topic_and_group(answers, rows):
    per_group = _deliveries_by(rows, "topic", "group_id")
    got = {(r["topic"], r["group_id"]): r for r in _records(answers["delivery_by_group"])}
    assert set(got) == set(per_group)
    assert any(group is None for _, group in got) and any(group is not None for _, group in got)
    for key, batches in per_group.items():
        _assert_latencies(got[key], batches)
        assert got[key]["records"] == sum(d["records"] for d in batches)


def test_deliveries_agree_with_what_the_clients_consumed(answers, rows):
    """Every record a client says it consumed was produced (acks > 0) in the same capture: each reaches one
    consumer once, so the records delivered per topic are the records consumed, by as many consumers, and a
    group's committed topics are delivered to that group."""
    records = Counter()
    for r in _records(answers["delivery_by_group"]):
        records[r["topic"]] += r["records"]
    consumers = {r["topic"]: r["consumers"] for r in _records(answers["delivery_by_topic"])}
    groups = {(r["topic"], r["group_id"]) for r in _records(answers["delivery_by_group"])}
    unread = {f["capture_file"] for f in rows["files"] if not f["kafka_packets"]}  # TLS, with no key log given
    checked = 0
    for truth_file in TRUTH_FILES:
        truth = read_truth(truth_file)
        if truth["capture"] in unread:
            continue
        failover = (truth.get("cluster") or {}).get("stopped_node")
        protocols = {g.get("protocol") for g in (truth.get("groups") or {}).values()}
        for topic, t in (truth.get("topics") or {}).items():
            if "share" in protocols or truth.get("transactions"):
                # share groups consume through ShareFetch, which deliveries does not read; the transactions
                # sample is here twice (a copy cut before its first EndTxn) under the same topic names (its
                # readers' deliveries are held to their own view in tests/derived/test_transactions.py)
                continue
            if t["produced"] and t["consumed"] and protocols & {"consumer", "streams"}:
                # a partition that moves to another member is fetched again from the offset last committed:
                # the new owner is delivered records the old one had fetched but not consumed
                assert t["consumed"] <= records[topic] <= 1.05 * t["consumed"], topic
                assert consumers.get(topic) == len(t["consumers"]), topic
            elif t["produced"] and t["consumed"] and failover:
                # deliveries are matched at the broker serving the partition: what a consumer fetched from the
                # new leader after a broker stopped was produced to the old one, and stays unmatched
                assert 0.9 * t["consumed"] <= records[topic] <= t["consumed"], topic
                assert consumers.get(topic) == len(t["consumers"]), topic
            elif t["produced"] and t["consumed"]:
                assert (records[topic], consumers.get(topic)) == (t["consumed"], len(t["consumers"])), topic
                checked += 1
        for group_id, group in (truth.get("groups") or {}).items():
            assert {(topic, group_id) for topic in group["committed"]} <= groups, group_id
    assert checked >= 20


def test_delivery_plot_holds_the_busiest_topics(answers, rows):
    counts = Counter(d["topic"] for d in rows["deliveries"])
    busiest = sorted(counts, key=lambda topic: (-counts[topic], topic))[:answers["PLOT_TOPICS"]]
    assert sorted(answers["points"]["topic"].unique()) == sorted(busiest)
    assert len(answers["points"]) == sum(counts[topic] for topic in busiest)


def test_cells_run_on_a_capture_without_groups_or_deliveries(notebook, tmp_path):
    """Admin traffic only: the group, delivery, share group and transaction sections answer with empty tables and
    draw nothing."""
    out = tmp_path / "out"
    export_tables(SAMPLES / "tansu_admin.pcap", out, "--deliveries", tables=())
    answers = _run_notebook_cells(notebook, out)
    for name in ("groups", "deliveries", "share_ranges", "share_consumption", "transactions", "transaction_steps"):
        assert answers["row_counts"][name] == 0, name
    assert answers["row_counts"]["exchanges"] > 0
    for name in ("group_summary", "generations", "members", "departures", "timeline", "delivery_by_topic",
                 "delivery_by_group", "points", "epochs", "reconciliation", "moved_partitions", "gaps",
                 "share_members", "share_summary", "redelivered_records", "transactions_by_id", "transaction_list",
                 "slowest_transactions", "transaction_errors", "transaction_step_errors", "timed"):
        assert answers[name].empty, name
    for figure in ("rebalance_figure", "delivery_figure", "handover_figure", "transaction_figure"):
        assert figure not in answers, figure


# --- KIP-848 groups, share groups and transactions ---------------------------------------------------------


def _heartbeat_groups(rows) -> list[dict]:
    return [g for g in rows["groups"] if g["group_protocol"] != "classic"]


def _joined_text(values) -> str | None:
    """SQL's array_to_string of a list: None for a null list, items joined by ', ' (an empty list: '')."""
    return None if values is None else ", ".join(values)


def _or_none(text: str):
    return text or None


def test_epochs_of_heartbeat_groups(answers, rows):
    heartbeat = _heartbeat_groups(rows)
    assert {"consumer", "share", "streams"} <= {g["group_protocol"] for g in heartbeat}
    previous = {(g["group_id"], g["capture_file"], g["next_generation_id"]): g for g in rows["groups"]}
    expected = {}
    for g in heartbeat:
        key = (g["group_id"], g["capture_file"], g["generation_id"])
        before = previous.get(key, {"members": []})
        waits = [m["waited_ms"] for m in g["members"] if m["waited_ms"] is not None]
        slowest = max(waits) if waits else None
        expected[key] = (
            g["group_protocol"], g["member_count"],
            None if g["joined"] is None else _client_list(g["members"], set(g["joined"])),
            None if g["left"] is None else _client_list(before["members"], set(g["left"])),
            g["rebalance_start"], g["rebalance_ms"], slowest,
            _or_none(", ".join(sorted(m["client_id"] for m in g["members"]
                                      if m["waited_ms"] is not None and m["waited_ms"] == slowest))),
            None if g["moved"] is None else len(g["moved"]), g["stop_ms"],
            _or_none(", ".join(sorted({e for m in g["members"] for e in m["errors"] or []}))))
    got = _records(answers["epochs"])
    assert [(r["group_id"], r["capture_file"], r["epoch"]) for r in got] == sorted(expected)
    assert {(r["group_id"], r["capture_file"], r["epoch"]): (
        r["protocol"], r["members"], r["joined"], r["left"], r["epoch_start"], r["reconcile_ms"], r["slowest_ms"],
        r["slowest_member"], r["moved"], r["max_gap_ms"], r["errors"]) for r in got} == expected
    assert any(r["moved"] for r in got) and any(r["left"] for r in got)


def test_members_reconciling_per_epoch(answers, rows):
    expected = []
    for g in _heartbeat_groups(rows):
        for m in g["members"]:
            expected.append(((g["group_id"], g["capture_file"], g["generation_id"], m["join_ts"], m["member_id"]), (
                g["group_protocol"], m["client_id"], _assignment_text(m["assignment"]), m["synced_ts"],
                m["waited_ms"], m["left_ts"], m["heartbeats"], _or_none(_joined_text(m["errors"])))))
    expected.sort(key=lambda e: e[0])
    got = [((r["group_id"], r["capture_file"], r["epoch"], r["epoch_ts"], r["member_id"]), (
        r["protocol"], r["client_id"], r["assignment"], r["reconciled_ts"], r["reconcile_ms"], r["left_ts"],
        r["heartbeats"], r["errors"])) for r in _records(answers["reconciliation"])]
    assert got == expected
    assert all(r["reconcile_ms"] is None or r["reconcile_ms"] >= 0 for r in _records(answers["reconciliation"]))


def test_moved_partitions_and_their_gaps(answers, rows):
    clients = {}
    for g in _heartbeat_groups(rows):
        for m in g["members"]:
            where = (g["group_id"], g["capture_file"], m["member_id"])
            clients[where] = min(filter(None, (clients.get(where), m["client_id"])), default=None)
    expected = Counter()
    for g in _heartbeat_groups(rows):
        for mv in g["moved"] or []:
            expected[(g["group_id"], g["capture_file"], g["generation_id"], mv["topic"], mv["partition"],
                      clients.get((g["group_id"], g["capture_file"], mv["from_member"])),
                      clients.get((g["group_id"], g["capture_file"], mv["to_member"])),
                      mv["released_ts"], mv["acquired_ts"], mv["gap_ms"], mv["from_member"], mv["to_member"])] += 1
    got = _records(answers["moved_partitions"])
    assert Counter((r["group_id"], r["capture_file"], r["epoch"], r["topic"], r["partition"], r["from_client"],
                    r["to_client"], r["released_ts"], r["acquired_ts"], r["gap_ms"], r["from_member"],
                    r["to_member"]) for r in got) == expected
    assert len(got) >= 7
    order = [(r["group_id"], r["capture_file"], r["epoch"], r["acquired_ts"], r["topic"], r["partition"]) for r in got]
    assert order == sorted(order)
    # the figure: the gaps of the groups with the most moves
    moves = Counter((r["group_id"], r["capture_file"]) for r in got)
    top = sorted(moves, key=lambda k: (-moves[k], k))[:answers["PLOT_MOVES"]]
    assert sorted(set(zip(answers["gaps"]["group_id"], answers["gaps"]["capture_file"], strict=True))) == sorted(top)
    assert len(answers["gaps"]) == sum(moves[k] for k in top)


def _partition_set(text: str | None) -> set[tuple[str, int]]:
    """'t[0,1] u[2]' as {(t, 0), (t, 1), (u, 2)}."""
    return {(topic, int(p)) for topic, parts in re.findall(r"(\S+)\[([\d,]*)\]", text or "")
            for p in parts.split(",") if p}


def _truth_partitions(partitions: dict) -> set[tuple[str, int]]:
    return {(topic, int(p)) for topic, ps in partitions.items() for p in ps}


def test_kip848_groups_agree_with_the_consumers_callbacks(answers):
    """The KIP-848 consumers logged every assignment and revocation (their rebalance listener, with their member
    epoch and what they owned after it): the partitions that moved, from which member to which, and when each
    member finished reconciling, must be the notebook's."""
    moved, reconciliation = _records(answers["moved_partitions"]), _records(answers["reconciliation"])
    checked = 0
    for truth_file in TRUTH_FILES:
        truth = read_truth(truth_file)
        for group_id, group in (truth.get("groups") or {}).items():
            details = group.get("member_details")
            if group.get("protocol") != "consumer" or not details:
                continue
            where = (group_id, truth["capture"])
            ids = {client: d["member_id"] for client, d in details.items()}
            mine = [r for r in reconciliation if (r["group_id"], r["capture_file"]) == where]
            assert {(r["client_id"], r["member_id"]) for r in mine} == set(ids.items())
            events = sorted((e["time_ms"] / 1000, client, e) for client, d in details.items() for e in d["events"]
                            if e["event"] in ("assigned", "revoked"))
            # a partition moves when one member's listener revokes it and another's is then assigned it
            released, expected = {}, {}
            for t, client, e in events:
                for unit in _truth_partitions(e["partitions"]):
                    if e["event"] == "revoked":
                        released[unit] = (client, t)
                    elif unit in released and released[unit][0] != client:
                        giver, revoked_at = released.pop(unit)
                        expected[(*unit, giver, client)] = (revoked_at, t, e["member_epoch"])
            got = {(r["topic"], r["partition"], r["from_client"], r["to_client"]): r for r in moved
                   if (r["group_id"], r["capture_file"]) == where}
            assert set(got) == set(expected) and len(expected) >= 5, group_id
            for key, (revoked_at, assigned_at, epoch) in expected.items():
                r = got[key]
                assert (r["epoch"], r["from_member"], r["to_member"]) == (epoch, ids[key[2]], ids[key[3]]), r
                # the heartbeat that stops listing it follows the revocation; the one that lists it, the assignment
                assert revoked_at - 0.05 <= r["released_ts"].timestamp() <= r["acquired_ts"].timestamp(), r
                assert abs(r["acquired_ts"].timestamp() - assigned_at) < 0.05, r
                assert _close(r["gap_ms"], round((r["acquired_ts"] - r["released_ts"]).total_seconds() * 1000, 3))
            # each member is reconciled when it owns all it was given: what its listener said it owned then
            owning = [(t, client, e) for t, client, e in events if e["event"] == "assigned" and e["owned_after"]]
            given = [r for r in mine if r["assignment"]]
            assert len(owning) == len(given) >= 5
            for t, client, e in owning:
                (r,) = [r for r in given if r["client_id"] == client
                        and _partition_set(r["assignment"]) == _truth_partitions(e["owned_after"])
                        and abs(r["reconciled_ts"].timestamp() - t) < 0.05]
                # the listener reports a revocation's end before the member moves on to the new epoch
                assert r["epoch"] == e["member_epoch"] + (0 if e["partitions"] else 1), (r, e)
            checked += 1
    assert checked >= 1


def test_share_members(answers, rows):
    expected = {(s["group_id"], s["topic"], s["client_id"], s["member_id"], s["capture_file"]): (
        s["acquired_records"], s["redelivered_records"], s["accepted"], s["released"], s["rejected"], s["lock_lost"],
        s["unacknowledged"], s["failed_acks"], s["processing_p50_ms"], s["processing_p99_ms"], s["processing_max_ms"])
        for s in rows["share_consumption"]}
    got = _records(answers["share_members"])
    assert [(r["group_id"], r["topic"], r["client_id"], r["member_id"], r["capture_file"]) for r in got] == \
        sorted(expected)
    assert {(r["group_id"], r["topic"], r["client_id"], r["member_id"], r["capture_file"]): (
        r["given"], r["redelivered"], r["accepted"], r["released"], r["rejected"], r["lock_lost"],
        r["unacknowledged"], r["failed_acks"], r["processing_p50_ms"], r["processing_p99_ms"],
        r["processing_max_ms"]) for r in got} == expected


def test_share_summary_per_group_and_topic(answers, rows):
    per_topic = defaultdict(list)
    for s in rows["share_consumption"]:
        per_topic[s["group_id"], s["topic"]].append(s)
    counts = defaultdict(list)
    for r in rows["share_ranges"]:
        if r["action"] == "acquired" and r["delivery_count"] is not None:
            counts[r["group_id"], r["topic"]].append(r["delivery_count"])
    got = {(r["group_id"], r["topic"]): r for r in _records(answers["share_summary"])}
    assert set(got) == set(per_topic) and got
    for key, ss in per_topic.items():
        r = got[key]
        assert r["members"] == len({s["member_id"] for s in ss})
        assert (r["deliveries"], r["redelivered"]) == (sum(s["acquired_records"] for s in ss),
                                                        sum(s["redelivered_records"] for s in ss))
        assert r["first_deliveries"] == r["deliveries"] - r["redelivered"]
        for column in ("accepted", "released", "rejected", "lock_lost", "unacknowledged"):
            assert r[column] == sum(s[column] for s in ss), column
        assert r["max_delivery_count"] == (max(counts[key]) if counts[key] else None)


def _ack_text(k: dict) -> str:
    return k["action"] if k["error_code"] in (None, 0) else f"{k['action']} failed: {k['error_name']}"


def test_redelivered_records(answers, rows):
    """Recomputed record by record: each delivery with a count of 2 or more, its member's acknowledgement, and the
    delivery before it with that member's acknowledgement (none: its lock was lost)."""
    def place(r):
        return r["capture_file"], r["group_id"], r["topic"], r["partition"]

    acquired = [r for r in rows["share_ranges"] if r["action"] == "acquired"]
    acks = [r for r in rows["share_ranges"] if r["action"] in ("accept", "release", "reject")]

    def first_ack(where, member, offset, after, until=None):
        found = [k for k in acks if place(k) == where and k["member_id"] == member
                 and k["first_offset"] <= offset <= k["last_offset"] and k["ts"] >= after
                 and (until is None or k["ts"] <= until)]
        return _ack_text(min(found, key=lambda k: k["ts"])) if found else None

    expected = Counter()
    for a in acquired:
        if (a["delivery_count"] or 0) < 2:
            continue
        for offset in range(a["first_offset"], a["last_offset"] + 1):
            befores = [p for p in acquired if place(p) == place(a) and p["first_offset"] <= offset <= p["last_offset"]
                       and p["delivery_count"] == a["delivery_count"] - 1 and p["ts"] <= a["ts"]]
            for p in befores or [None]:
                why = None
                if p is not None:
                    before = first_ack(place(a), p["member_id"], offset, p["ts"], a["ts"])
                    why = {None: "lock lost", "release": "released"}.get(before, before)
                expected[(a["group_id"], a["capture_file"], a["topic"], a["partition"], offset, a["delivery_count"],
                          a["client_id"], a["ts"], first_ack(place(a), a["member_id"], offset, a["ts"]),
                          None if p is None else p["client_id"], None if p is None else p["ts"], why)] += 1
    got = _records(answers["redelivered_records"])
    assert Counter(tuple(r.values()) for r in got) == expected
    assert {"lock lost", "released"} <= {r["why"] for r in got}
    order = [(r["group_id"], r["capture_file"], r["topic"], r["partition"], r["offset"], r["delivery_count"])
             for r in got]
    assert order == sorted(order)


def test_share_groups_agree_with_the_workers_own_record(answers):
    """The share consumers logged every record they were given (with its delivery count) and how they acknowledged
    it, and the group's summary which records were released and whose lock expired: the notebook's counts per
    member and per group, and its redelivered records, must match."""
    members, summary = _records(answers["share_members"]), _records(answers["share_summary"])
    redelivered = _records(answers["redelivered_records"])
    checked = 0
    for truth_file in TRUTH_FILES:
        truth = read_truth(truth_file)
        for group_id, group in (truth.get("groups") or {}).items():
            if group.get("protocol") != "share":
                continue
            checked += 1
            records = group["records"]
            final = {(r["partition"], r["offset"]): r["deliveries"][-1]["acknowledged"] for r in records}
            totals = [r for r in summary if r["group_id"] == group_id]
            got = {column: sum(r[column] for r in totals) for column in (
                "first_deliveries", "deliveries", "accepted", "rejected", "released", "lock_lost", "unacknowledged")}
            s = group["summary"]
            assert got == {"first_deliveries": s["records"], "deliveries": s["deliveries"], "accepted": s["accepted"],
                           "rejected": s["rejected"], "released": len(s["released"]),
                           "lock_lost": len(s["lock_expired"]),
                           "unacknowledged": sum(ack is None for ack in final.values())}, group_id
            assert max(r["max_delivery_count"] for r in totals) == s["max_delivery_count"]
            # per member: what it was given, how it acknowledged, and the records it held until another got them
            lost, held = Counter(), Counter()
            for r in records:
                for i, d in enumerate(r["deliveries"]):
                    if d["acknowledged"] is None:
                        (lost if i + 1 < len(r["deliveries"]) else held)[d["client_id"]] += 1
            for client, d in group["member_details"].items():
                (r,) = [r for r in members if (r["group_id"], r["client_id"]) == (group_id, client)]
                acknowledged = Counter(x["acknowledged"] for x in d["records"])
                assert (r["given"], r["redelivered"]) == \
                    (len(d["records"]), sum(x["delivery_count"] > 1 for x in d["records"])), client
                assert (r["accepted"], r["released"], r["rejected"]) == \
                    (acknowledged["accept"], acknowledged["release"], acknowledged["reject"]), client
                assert (r["lock_lost"], r["unacknowledged"]) == (lost[client], held[client]), client
            # which records came back, to whom, how they ended, and why
            expected = set()
            for r in records:
                for before, d in zip(r["deliveries"], r["deliveries"][1:], strict=False):
                    why = {"release": "released", None: "lock lost"}[before["acknowledged"]]
                    expected.add((r["topic"], r["partition"], r["offset"], d["delivery_count"], d["client_id"],
                                  d["acknowledged"], before["client_id"], why))
            mine = [r for r in redelivered if (r["group_id"], r["capture_file"]) == (group_id, truth["capture"])]
            assert len(mine) == len(expected) >= 10
            assert {(r["topic"], r["partition"], r["offset"], r["delivery_count"], r["client_id"], r["acknowledged"],
                     r["before_client_id"], r["why"]) for r in mine} == expected
            assert {(r["partition"], r["offset"]) for r in mine if r["why"] == "released"} == \
                {tuple(x) for x in s["released"]}
            assert {(r["partition"], r["offset"]) for r in mine if r["why"] == "lock lost"} == \
                {tuple(x) for x in s["lock_expired"]}
    assert checked >= 1


def test_transactions_per_transactional_id(answers, rows):
    per_id = defaultdict(list)
    for t in rows["transactions"]:
        per_id[t["transactional_id"]].append(t)
    got = {r["transactional_id"]: r for r in _records(answers["transactions_by_id"])}
    assert set(got) == set(per_id) and got
    for tid, ts in per_id.items():
        r = got[tid]
        outcomes = Counter(t["outcome"] for t in ts)
        assert (r["transactions"], r["committed"], r["aborted"], r["failed"], r["superseded"], r["open"]) == (
            len(ts), outcomes["committed"], outcomes["aborted"], outcomes["failed"], outcomes["superseded"],
            outcomes["open"]), tid
        assert r["records"] == _sum(t["records"] for t in ts)
        assert r["records_committed"] == sum(t["records"] or 0 for t in ts if t["outcome"] == "committed")
        durations = [t["duration_ms"] for t in ts if t["duration_ms"] is not None]
        ends = [t["commit_ms"] for t in ts if t["commit_ms"] is not None]
        assert _close(r["p50_ms"], _quantile_cont(durations, 0.5) if durations else None), r
        assert _close(r["p99_ms"], _quantile_cont(durations, 0.99) if durations else None), r
        assert r["max_ms"] == (max(durations) if durations else None)
        assert _close(r["end_txn_p50_ms"], _quantile_cont(ends, 0.5) if ends else None), r


def _transaction_row(t: dict) -> tuple:
    return (t["capture_file"], t["transactional_id"], t["producer_id"], t["producer_epoch"], t["client_id"],
            t["start_ts"], t["outcome"], t["duration_ms"], t["commit_ms"], _assignment_text(t["partitions"]),
            _or_none(", ".join(t["groups"] or [])), t["produce_requests"], t["records"], t["end_attempts"],
            _or_none(", ".join(t["errors"] or [])))


def test_every_transaction_and_the_slowest(answers, rows):
    def start(t):
        return next((x for x in (t["start_ts"], t["end_request_ts"], t["end_ts"]) if x is not None), None)

    ordered = sorted(rows["transactions"], key=lambda t: (t["capture_file"], t["transactional_id"], start(t),
                                                          t["producer_id"], t["producer_epoch"]))
    got = [tuple(r.values()) for r in _records(answers["transaction_list"])]
    assert got == [_transaction_row(t) for t in ordered] and got
    timed = sorted((t for t in rows["transactions"] if t["duration_ms"] is not None),
                   key=lambda t: (-t["duration_ms"], t["capture_file"], t["transactional_id"], t["start_ts"]))
    slowest = [tuple(r.values()) for r in _records(answers["slowest_transactions"])]
    assert len(slowest) == min(10, len(rows["transactions"]))
    assert slowest[:len(timed)] == [_transaction_row(t) for t in timed[:10]]
    # the plot: the transactions of the ids with the most, those with a duration
    counts = Counter(t["transactional_id"] for t in rows["transactions"])
    busiest = sorted(counts, key=lambda tid: (-counts[tid], tid))[:answers["PLOT_TRANSACTIONAL_IDS"]]
    assert sorted(answers["timed"]["transactional_id"].unique()) == sorted(busiest)
    assert len(answers["timed"]) == sum(t["transactional_id"] in busiest for t in timed)


def test_transaction_errors(answers, rows):
    expected = Counter((t["transactional_id"], error, t["outcome"])
                       for t in rows["transactions"] for error in t["errors"] or [])
    got = {(r["transactional_id"], r["error"], r["outcome"]): r["transactions"]
           for r in _records(answers["transaction_errors"])}
    assert got == dict(expected) and got
    steps = defaultdict(list)
    for s in rows["transaction_steps"]:
        if s["error_code"] not in (None, 0) and (s["transactional_id"] or s["api_name"] == "WriteTxnMarkers"):
            steps[s["transactional_id"], s["api_name"], s["error_name"]].append(s)
    got = {(r["transactional_id"], r["api_name"], r["error_name"]): r
           for r in _records(answers["transaction_step_errors"])}
    assert set(got) == set(steps) and got
    for key, ss in steps.items():
        answered = [s["response_ts"] for s in ss if s["response_ts"] is not None]
        assert (got[key]["responses"], got[key]["first_ts"], got[key]["last_ts"]) == \
            (len(ss), min(answered, default=None), max(answered, default=None))


def test_transactions_agree_with_the_producers_own_record(answers):
    """The transactional producer logged each transaction: what it wrote where, whether it committed or aborted,
    the producer epoch, the group whose offsets it sent, and when it asked to end it and got the answer. The same
    capture cut before its first EndTxn holds the first transaction, open."""
    listed, by_id = _records(answers["transaction_list"]), _records(answers["transactions_by_id"])
    tx = read_truth(TRANSACTIONS)["transactions"]
    told = [(t["outcome"], t["record_count"], t["producer_id"], t["producer_epoch"], tx["producer"])
            for t in tx["transactions"]]
    expected = {TRANSACTIONS.name: told, OPEN_TRANSACTION: [("open", *told[0][1:])]}
    outcomes = Counter()
    for capture, transactions in expected.items():
        mine = [r for r in listed if (r["capture_file"], r["transactional_id"]) == (capture, tx["transactional_id"])]
        assert [(r["outcome"], r["records"], r["producer_id"], r["producer_epoch"], r["client_id"])
                for r in mine] == transactions, capture
        outcomes.update(r["outcome"] for r in mine)
        for r, t in zip(mine, tx["transactions"], strict=False):  # as many as the list above says
            assert _partition_set(r["partitions"]) - {("__consumer_offsets", p) for p in range(50)} == \
                _truth_partitions(t["records"]), r
            offsets = t.get("offsets_to_transaction")
            assert r["groups"] == (offsets["group_id"] if offsets else None), r
            assert r["start_ts"].timestamp() >= t["begin_ms"] / 1000 - 0.05, r
            if r["outcome"] == "open":
                assert (r["duration_ms"], r["commit_ms"]) == (None, None)
            else:
                assert abs(r["start_ts"].timestamp() + r["duration_ms"] / 1000 - t["end_ms"] / 1000) < 0.05, r
    (totals,) = [r for r in by_id if r["transactional_id"] == tx["transactional_id"]]
    assert (totals["transactions"], totals["committed"], totals["aborted"], totals["failed"], totals["superseded"],
            totals["open"]) == (sum(outcomes.values()), outcomes["committed"], outcomes["aborted"], 0, 0, 1)
    assert totals["records_committed"] == sum(t["record_count"] for t in tx["transactions"]
                                              if t["outcome"] == "committed")
    # the slowest by the producer's clock is the slowest of its capture (the consume-transform-produce one)
    longest = max(tx["transactions"], key=lambda t: t["end_ms"] - t["begin_ms"])
    slowest = next(r for r in _records(answers["slowest_transactions"]) if r["capture_file"] == TRANSACTIONS.name)
    assert (slowest["producer_epoch"], slowest["records"]) == (longest["producer_epoch"], longest["record_count"])
