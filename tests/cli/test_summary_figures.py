"""The summary's figures mean what their labels say: produced records are the acknowledged ones (attempts and
failures apart), rates divide by the time the captures cover (one definition of a capture's span, from the
files table), and the group figures use the groups table's vocabulary with totals true to their label.

Expected values come from the tables the CLI exports (and the samples' truth files), computed here again."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import helpers
from tests.helpers import GROUP, SAMPLES, export_tables, read_tables, truth

# GROUP (tansu_consumer_group): a group through a rebalance, members sending LeaveGroup
CLUSTER = SAMPLES / "kafka44_cluster.pcap"  # Produce partitions answered NOT_LEADER_OR_FOLLOWER
ACKS0 = SAMPLES / "kafka09_acks0.pcap"  # acks=0: records sent, never acknowledged
ERRORS = SAMPLES / "tansu_broker_errors.pcap"  # days before GROUP: a second, unrelated capture


def kafkacap(*args: object) -> str:
    return helpers.kafkacap(*args, "--no-progress")


def table(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the rich table whose title starts with ``title`` in plain terminal output
    (one line per row: the output is wide enough)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    head: list[list[str]] = []
    rows: list[list[str]] = []
    for line in lines[at + 1:]:
        if line.startswith("┃"):
            cells = [c.strip() for c in line.split("┃")[1:-1]]
            head = [f"{h} {c}".strip() for h, c in zip(head, cells, strict=True)] if head else cells
        elif line.startswith("│"):
            rows.append([c.strip() for c in line.split("│")[1:-1]])
        elif line.startswith("└"):
            break
    return head, rows


def number(cell: str) -> int:
    return 0 if cell in ("", "-") else int(cell.replace(",", ""))


# Finding 3: produced is acknowledged without error; attempted and failed apart; fetched says what it counts.

def produce_figures(parts: pa.Table) -> dict[str, dict[str, int]]:
    """Per topic, from the partitions table: records in every Produce partition entry, in those answered
    without error (error_code 0), with an error, and never answered (acks=0, or no response)."""
    out: dict[str, dict[str, int]] = {}
    for r in parts.to_pylist():
        if r["api_key"] != 0 or r["records"] is None:
            continue
        f = out.setdefault(r["topic"], {"attempted": 0, "produced": 0, "failed": 0, "unacknowledged": 0})
        f["attempted"] += r["records"]
        key = "unacknowledged" if r["error_code"] is None else "produced" if r["error_code"] == 0 else "failed"
        f[key] += r["records"]
    return out


def test_rejected_records_are_not_counted_as_produced(tmp_path):
    told = truth(CLUSTER)["topics"]["cluster44"]
    figures = produce_figures(export_tables(CLUSTER, tmp_path / "out")["partitions"])["cluster44"]
    assert figures["produced"] == told["produced"] and figures["failed"] > 0  # the clients' own count agrees
    doc = json.loads(kafkacap("summary", CLUSTER, "--json"))
    row = next(t for t in doc["topics"] if t["topic"] == "cluster44")
    assert (row["produced"], row["produce_failed"], row["produce_attempted"], row["produce_unacknowledged"]) == (
        figures["produced"], figures["failed"], figures["attempted"], figures["unacknowledged"])
    head, rows = table(kafkacap("summary", CLUSTER), "Topics")
    cells = dict(zip(head, next(r for r in rows if r[0] == "cluster44"), strict=True))
    assert number(cells["produced"]) == told["produced"]
    assert number(cells["failed"]) == figures["failed"] and number(cells["attempted"]) == figures["attempted"]


def test_records_sent_with_acks0_are_attempted_not_produced(tmp_path):
    told = truth(ACKS0)["topics"]
    figures = produce_figures(export_tables(ACKS0, tmp_path / "out")["partitions"])
    doc = {t["topic"]: t for t in json.loads(kafkacap("summary", ACKS0, "--json"))["topics"]}
    for topic, entry in told.items():
        assert figures[topic]["unacknowledged"] == entry["produced_acks0"] > 0
        assert (doc[topic]["produced"] or 0) == entry["produced"] == 0
        assert doc[topic]["produce_unacknowledged"] == entry["produced_acks0"]


def test_the_topic_table_says_what_produced_and_fetched_count():
    text = kafkacap("summary", CLUSTER)
    after = " ".join(text[text.index("Topics ("):text.index("Replication")].split())
    assert "produced: records the broker acknowledged without error" in after
    assert "fetched: records in the Fetch responses to consumers" in after


# Finding 4: one span per capture, rates over the time the captures cover.

def covered(files: pa.Table) -> tuple[float, list[tuple[dt.datetime, dt.datetime]]]:
    """Seconds and intervals the captures of the files table cover: each file from its first to its last
    packet, overlapping files as one interval (plain Python, for two files)."""
    spans = sorted((r["first_ts"], r["last_ts"]) for r in files.to_pylist())
    merged: list[list[dt.datetime]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return sum((b - a).total_seconds() for a, b in merged), [(a, b) for a, b in merged]


def test_rates_divide_by_the_time_the_captures_cover(export_once):
    tables = read_tables(export_once([ERRORS, GROUP]))
    seconds, intervals = covered(tables["files"])
    assert len(intervals) == 2  # days apart
    doc = json.loads(kafkacap("summary", ERRORS, GROUP, "--json"))
    assert doc["capture"]["seconds"] == pytest.approx(seconds)
    assert [(i["first"], i["last"]) for i in doc["capture"]["intervals"]] == [
        (a.isoformat(timespec="microseconds"), b.isoformat(timespec="microseconds")) for a, b in intervals]
    requests = tables["exchanges"].num_rows - tables["exchanges"]["api_key"].null_count
    assert doc["capture"]["requests_per_second"] == pytest.approx(requests / seconds)
    for api in doc["apis"]:
        assert api["per_second"] == pytest.approx(api["requests"] / seconds)
    line = next(line for line in kafkacap("summary", ERRORS, GROUP).splitlines() if line.startswith("Capture:"))
    assert f"{seconds:,.3f} s" in line and f"({requests / seconds:,.1f}/s)" in line, line


def test_the_span_line_is_the_files_first_and_last_packet(group_export):
    files = read_tables(group_export)["files"].to_pylist()
    doc = json.loads(kafkacap("summary", GROUP, "--json"))
    assert doc["capture"]["first"] == files[0]["first_ts"].isoformat(timespec="microseconds")
    assert doc["capture"]["last"] == files[0]["last_ts"].isoformat(timespec="microseconds")
    assert doc["capture"]["seconds"] == pytest.approx((files[0]["last_ts"] - files[0]["first_ts"]).total_seconds())
    line = next(line for line in kafkacap("summary", GROUP).splitlines() if line.startswith("Capture:"))
    assert f"{files[0]['first_ts']:%Y-%m-%d %H:%M:%S.%f}" in line, line


def test_overlapping_captures_count_once_and_a_rotated_set_is_one_capture(group_export):
    """Two captures of the same traffic (one file's span, and the same shifted by half) cover their union;
    the files of one rotated set cover their set's whole span, the moments between its files included."""
    from analyzer.derived.span import capture_span_of, files_span

    row = read_tables(group_export)["files"].to_pylist()[0]
    first, last = row["first_ts"], row["last_ts"]
    half = (last - first) / 2
    two = pa.table({"capture_file": ["a", "b"], "capture_set": ["a", "b"], "first_ts": [first, first + half],
                    "last_ts": [last, last + half]})
    span = files_span(two)
    assert span.seconds == pytest.approx((last + half - first).total_seconds()) and len(span.intervals) == 1
    rotated = pa.table({"capture_file": ["r", "r1"], "capture_set": ["r", "r"], "first_ts": [first, last + half],
                        "last_ts": [last, last + 2 * half]})
    span = files_span(rotated)
    assert span.seconds == pytest.approx((last + 2 * half - first).total_seconds()) and len(span.intervals) == 1
    later = last + half + (last - first)
    apart = capture_span_of([("x", first, last), ("y", last + half, later)])
    assert apart.seconds == pytest.approx(2 * (last - first).total_seconds())
    assert apart.first == first and apart.last == later and len(apart.intervals) == 2


# Finding 5: the groups table's vocabulary, totals true to their labels.

def test_group_columns_use_the_groups_tables_names(group_export):
    groups = read_tables(group_export)["groups"].to_pylist()
    head, rows = table(kafkacap("summary", GROUP), "Consumer groups")
    assert "gone" not in head
    shown = {int(r[head.index("generation_id")]): dict(zip(head, r, strict=True)) for r in rows}
    for g in groups:
        cells = shown[g["generation_id"]]
        assert cells["left"] == ("-" if g["left"] is None else str(len(g["left"]))), cells
        assert cells["joined"] == ("-" if g["joined"] is None else str(len(g["joined"]))), cells
        sent = sum(m["left_ts"] is not None for m in g["members"])
        assert cells["left_ts"] == str(sent), cells
    assert any(g["left"] is not None and len(g["left"]) != sum(m["left_ts"] is not None for m in g["members"])
               for g in groups)  # the sample tells the two apart
    doc = json.loads(kafkacap("summary", GROUP, "--json"))
    for entry in doc["groups"]:
        for gen in entry["generation_rows"]:
            assert "left_group" not in gen and {"joined", "left", "left_ts", "stop_ms"} <= set(gen)


def waited_total(groups: list[dict]) -> float:
    """The members' time without partitions, summed: each member that was in the generation before, from its
    rejoin to its new assignment (waited_ms), over every generation."""
    by_gen = {g["generation_id"]: g for g in groups}
    total = 0.0
    for g in groups:
        before = by_gen.get(g["generation_id"] - 1)
        if before is None or g["left"] is None:
            continue
        ids = {m["member_id"] for m in before["members"]}
        total += sum(m["waited_ms"] or 0.0 for m in g["members"] if m["member_id"] in ids)
    return total


def test_the_group_total_sums_every_members_wait(group_export):
    """The recorded group, with its second member already in the first generation: the second rebalance
    stops both, and the total is both waits (the generation's stop_ms is only the longer one)."""
    import io

    from rich.console import Console

    from analyzer.cli.summary import _groups, group_rows

    groups = read_tables(group_export)["groups"].to_pylist()
    first, second = sorted(groups, key=lambda g: g["generation_id"])
    newcomer = [m for m in second["members"] if m["member_id"] in second["joined"]]
    assert newcomer
    first["members"] = first["members"] + newcomer
    first["member_count"] = len(first["members"])
    second["joined"] = []
    second["stop_ms"] = max(m["waited_ms"] for m in second["members"])
    both = pa.Table.from_pylist([first, second], schema=pq.read_schema(group_export / "groups.parquet"))
    total = waited_total(both.to_pylist())
    assert total > second["stop_ms"]
    entry = group_rows(both)[0]
    assert entry["waited_ms_total"] == pytest.approx(total)
    assert entry["stop_ms_max"] == pytest.approx(second["stop_ms"])
    out = io.StringIO()
    _groups(Console(file=out, width=200), [entry])
    summary_line = next(line for line in out.getvalue().splitlines() if line.strip().startswith("billing (classic):"))
    assert f"{total:.1f} ms in all" in summary_line and f"{second['stop_ms']:.1f}" in summary_line, summary_line


def test_the_recorded_groups_total_is_its_members_waits(group_export):
    groups = read_tables(group_export)["groups"].to_pylist()
    doc = json.loads(kafkacap("summary", GROUP, "--json"))
    assert doc["groups"][0]["waited_ms_total"] == pytest.approx(waited_total(groups))
    assert "stop_ms_total" not in doc["groups"][0]


def test_the_report_gives_the_span_the_summary_gives(tmp_path, export_once):
    tables = read_tables(export_once([ERRORS, GROUP]))
    seconds, intervals = covered(tables["files"])
    kafkacap("report", ERRORS, GROUP, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    fact = page[page.index("capture span"):][:400]
    assert f"{len(intervals)} captures that do not overlap, {seconds:,.3f} s in all" in fact


def test_the_summary_is_the_same_whatever_the_processes():
    """Percentiles are t-digests, merged in the order their rows' batches are met; with --jobs 2 the batches are
    cut where the processes' timing puts them, and the same capture gave another p99 at every run."""
    import json

    from tests.helpers import SAMPLES, invoke

    documents = []
    for jobs in ("1", "2", "2"):
        result = invoke("summary", SAMPLES, "--detect-ports", "--json", "--no-progress", "--jobs", jobs)
        assert result.exit_code == 0, result.output
        document = json.loads(result.output)
        for file in document["files"]:
            file.pop("analysis_seconds")
        documents.append(document)
    assert documents[0] == documents[1] == documents[2]
