"""What the terminal and the scripts are told: summary --json against the exported tables (computed here again
with plain Python), the exchanges listing's filters, sorting and limits in every format, one timestamp form,
IPv6 addresses in brackets, and protocol-step errors kept apart from failures."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow.parquet as pq
import pytest

from dissectors.kafka.errors import ERRORS, EXPECTED_ERRORS
from tests.helpers import GROUP, SAMPLES, broker_port, invoke, kafkacap, truth

WAITS = {"Fetch", "JoinGroup", "SyncGroup"}


def run(*args: object) -> str:
    return kafkacap(*args, "--no-progress") if args[0] != "apis" else kafkacap(*args)


@pytest.fixture(scope="module")
def group_rows(group_export) -> list[dict]:
    return pq.read_table(group_export / "exchanges.parquet").to_pylist()


def test_summary_json_holds_the_tables_figures(group_rows, group_export):
    doc = json.loads(run("summary", GROUP, "--json"))
    assert doc["format"] == 2
    assert sum(a["requests"] for a in doc["apis"]) == len(group_rows)
    per_api: dict[tuple, int] = {}
    for r in group_rows:
        per_api[(r["api_name"], r["api_version"])] = per_api.get((r["api_name"], r["api_version"]), 0) + 1
    assert {(a["api_name"], a["api_version"]): a["requests"] for a in doc["apis"]} == per_api
    # The capture's span is the file's first to last packet (the files table), which holds every exchange.
    (f,) = pq.read_table(group_export / "files.parquet").to_pylist()
    stamps = [r[c] for r in group_rows for c in ("request_first_ts", "response_last_ts") if r[c] is not None]
    assert f["first_ts"] <= min(stamps) and max(stamps) <= f["last_ts"]
    assert doc["capture"]["first"] == f["first_ts"].isoformat(timespec="microseconds")
    assert doc["capture"]["last"] == f["last_ts"].isoformat(timespec="microseconds")
    assert doc["capture"]["seconds"] == pytest.approx((f["last_ts"] - f["first_ts"]).total_seconds())
    # The slowest service times: answered, not held by design, slowest first; recomputed from the rows.
    served = sorted((r for r in group_rows if r["waited"] is False),
                    key=lambda r: (-r["service_ms"], r["request_frame"]))[:10]
    assert [(s["request_frame"], s["response_frame"], s["service_ms"]) for s in doc["slowest_service"]] == [
        (r["request_frame"], r["response_frame"], r["service_ms"]) for r in served]
    assert all(s["service_ms"] < 100 for s in doc["slowest_service"])  # no long poll, no group join
    assert [b["requests"] for b in doc["brokers"]] == [len(group_rows)]


def test_rebalance_steps_are_not_failures(group_rows):
    """Each member of the recorded group joins first with KIP-394's MEMBER_ID_REQUIRED, and the first member
    is told to rejoin by Heartbeat's REBALANCE_IN_PROGRESS when the second joins: protocol steps, counted
    apart; no JoinGroup failed, and the clients logged no deliberate error."""
    told = truth(GROUP)
    members = len(told["groups"]["billing"]["members"])
    assert not told["errors"]
    steps = [(r["api_name"], r["error_name"]) for r in group_rows if r["status"] == "error"]
    assert steps.count(("JoinGroup", "MEMBER_ID_REQUIRED")) == members
    assert ("Heartbeat", "REBALANCE_IN_PROGRESS") in steps
    assert set(steps) == {("JoinGroup", "MEMBER_ID_REQUIRED"), ("Heartbeat", "REBALANCE_IN_PROGRESS")}
    doc = json.loads(run("summary", GROUP, "--json"))
    join = next(a for a in doc["apis"] if a["api_name"] == "JoinGroup")
    assert (join["failures"], join["expected_errors"]) == (0, members)
    assert all(e["expected"] for e in doc["errors"])
    text = run("summary", GROUP)
    assert "Slowest service times" in text and "Brokers" in text and "Capture:" in text


@pytest.mark.parametrize("entry", EXPECTED_ERRORS, ids=lambda e: e.name)
def test_each_expected_error_names_its_source(entry):
    assert entry.name in {info.name for info in ERRORS.values()}
    assert "KIP-" in entry.source or "protocol guide" in entry.source
    assert entry.apis


def test_exchanges_filters_sort_and_limit_in_every_format(group_rows):
    lines = run("exchanges", GROUP, "--json").splitlines()
    assert len(lines) == len(group_rows)  # --json: every row unless --limit says otherwise
    assert len(run("exchanges", GROUP, "--json", "--limit", "3").splitlines()) == 3
    slow = [json.loads(line) for line in run("exchanges", GROUP, "--json", "--sort", "latency").splitlines()]
    latencies = [r["latency_ms"] for r in slow if r["latency_ms"] is not None]
    assert latencies == sorted(latencies, reverse=True)
    billing = [json.loads(line) for line in run("exchanges", GROUP, "--json", "--group", "billing").splitlines()]
    assert len(billing) == sum(1 for r in group_rows if r["group_id"] == "billing") >= 15
    orders = [json.loads(line) for line in run("exchanges", GROUP, "--json", "--topic", "orders").splitlines()]
    assert len(orders) == sum(1 for r in group_rows if r["topics"] and "orders" in r["topics"]) > 0
    middle = sorted(r["request_last_ts"] for r in group_rows)[len(group_rows) // 2]
    cut = middle.isoformat(timespec="microseconds")
    since = run("exchanges", GROUP, "--json", "--since", cut).splitlines()
    until = run("exchanges", GROUP, "--json", "--until", cut).splitlines()
    assert len(since) == sum(1 for r in group_rows if r["request_last_ts"] >= middle)
    assert len(since) + len(until) == len(group_rows)
    table = run("exchanges", GROUP, "--limit", "4")
    assert "4 more rows" not in table and f"{len(group_rows) - 4} more rows" in table


def test_one_timestamp_form_in_exports_and_listings(tmp_path, group_rows):
    run("export", GROUP, "-o", str(tmp_path / "j"), "--format", "jsonl")
    exported = [json.loads(line) for line in (tmp_path / "j" / "exchanges.jsonl").read_text().splitlines()]
    listed = [json.loads(line) for line in run("exchanges", GROUP, "--json").splitlines()]
    key = ("connection_id", "correlation_id")
    stamps = {tuple(r[k] for k in key): r["request_last_ts"] for r in exported}
    assert {tuple(r[k] for k in key): r["request_last_ts"] for r in listed} == stamps
    for text in stamps.values():  # ISO 8601, microseconds always written, UTC
        parsed = dt.datetime.fromisoformat(text)
        assert parsed.utcoffset() == dt.timedelta(0) and len(text.split(".")[1]) == len("123456+00:00")


def test_ipv6_addresses_are_bracketed():
    capture = str(SAMPLES / "tansu_ipv6_confluent.pcapng")
    port = str(broker_port(capture))
    text = run("exchanges", capture, "--port", port, "--limit", "0")
    assert f"[::1]:{port}" in text
    assert json.loads(run("summary", capture, "--port", port, "--json"))["brokers"][0]["broker_ip"] == "::1"
    assert run("exchanges", capture, "--port", port, "--json", "--broker", f"[::1]:{port}").strip()


def test_an_unknown_api_name_is_refused_with_a_suggestion():
    result = invoke("exchanges", GROUP, "--api", "Fetchh")
    assert result.exit_code == 2
    assert "did you mean Fetch" in result.output


def test_apis_json_lists_every_api_once():
    from dissectors.kafka.apis import API_BY_KEY

    rows = [json.loads(line) for line in run("apis", "--json").splitlines()]
    assert [r["key"] for r in rows] == [info.key for info in API_BY_KEY if info is not None]
    assert {r["name"] for r in rows} >= {"Produce", "Fetch", "JoinGroup", "ConsumerGroupHeartbeat"}
    assert all(r["min_version"] <= r["max_version"] for r in rows)


def test_errors_and_exchanges_say_which_errors_are_protocol_steps(tmp_path, group_rows):
    run("export", GROUP, "-o", str(tmp_path / "out"))
    errors = pq.read_table(tmp_path / "out" / "errors.parquet").to_pylist()
    steps = {("JoinGroup", "MEMBER_ID_REQUIRED"), ("Heartbeat", "REBALANCE_IN_PROGRESS")}
    assert errors and all(e["expected"] == ((e["api_name"], e["error_name"]) in steps) for e in errors)
    for r in group_rows:
        if r["error_code"] == 0:
            assert r["error_expected"] is False
        elif r["error_code"] is not None:
            assert r["error_expected"] == ((r["api_name"], r["error_name"]) in steps)
