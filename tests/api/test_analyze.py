"""The library entry point gives what the command line gives: the export's tables, the summary's JSON."""

from __future__ import annotations

import json
import threading

import pytest

import analyzer
from analyzer.api import Analysis, analyze, analyze_batches
from analyzer.tables.schemas import TABLES
from tests.helpers import SAMPLES, export_tables, invoke

SAMPLE = SAMPLES / "kafka44_transactions.pcap"


@pytest.fixture(scope="module")
def samples() -> tuple[Analysis, None]:
    """Every bundled sample, analysed as ``make run`` exports them."""
    return analyze(SAMPLES, detect_ports=True, deliveries=True), None


def test_the_tables_are_the_exports(samples, tmp_path):
    got, _ = samples
    exported = export_tables(SAMPLES, tmp_path / "out", "--detect-ports", "--deliveries")
    assert sorted(got.tables) == sorted(exported) == sorted(n for n, s in TABLES.items() if n != "records")
    for name, table in exported.items():
        assert got[name].schema == TABLES[name].schema, name
        assert got[name].num_rows == table.num_rows, name
        assert got[name].to_pylist() == table.to_pylist(), name
    assert got.exchanges.num_rows > 3000 and got.transactions.num_rows == 5


def test_the_summary_is_the_commands_json(samples):
    got, _ = samples
    from analyzer.cli.jsonout import dumps

    result = invoke("summary", SAMPLES, "--detect-ports", "--deliveries", "--json", "--no-progress")
    assert result.exit_code == 0, result.output
    ours, theirs = json.loads(dumps(got.summary())), json.loads(result.output)
    for document in (ours, theirs):  # the time each file's analysis took is the one figure that differs
        for file in document["files"]:
            file.pop("analysis_seconds")
    assert ours == theirs


def test_duckdb_answers_sql_over_the_tables(samples):
    pytest.importorskip("duckdb")
    got, _ = samples
    con = got.duckdb()
    rows = con.sql("select api_name, count(*) from exchanges group by 1").fetchall()
    counted = got.exchanges.group_by("api_name").aggregate([([], "count_all")]).to_pydict()
    assert dict(rows) == dict(zip(counted["api_name"], counted["count_all"], strict=True))
    ((aborted,),) = con.sql("select count(*) from transactions where outcome = 'aborted'").fetchall()
    assert aborted == 2


def test_options_are_the_command_lines_and_checked_as_it_checks_them():
    with pytest.raises(TypeError, match="unknown option detect_port; the options are ports, detect_ports"):
        analyze(SAMPLE, detect_port=True)
    with pytest.raises(ValueError, match="ports: 70000 is not in 1..65535"):
        analyze(SAMPLE, ports=[9092, 70000])
    with pytest.raises(TypeError, match="headers_only: True or False"):
        analyze(SAMPLE, headers_only="yes")
    with pytest.raises(ValueError, match="keys.log: No such file"):  # as --tls-keylog refuses it
        analyze(SAMPLE, tls_keylog="/nonexistent/keys.log")
    one = analyze(SAMPLE, ports=9092, headers_only=True)
    assert one.options.ports == (9092,) and not one.options.bodies
    assert one.exchanges.num_rows == 94 and one.partitions.num_rows == 0  # headers only: no partition rows


def test_batches_as_they_come_make_the_same_tables_and_stopping_ends_the_run(samples):
    got, _ = samples
    gathered: dict[str, list] = {}
    for name, batch in analyze_batches(SAMPLES, detect_ports=True, deliveries=True):
        gathered.setdefault(name, []).append(batch)
    for name, batches in gathered.items():
        assert sum(b.num_rows for b in batches) == got[name].num_rows, name
    assert [r for b in gathered["exchanges"] for r in b.to_pylist()] == got.exchanges.to_pylist()

    before = {t for t in threading.enumerate() if t.name == "kafkacap analysis"}
    for _ in analyze_batches(SAMPLES, detect_ports=True):
        break
    assert {t for t in threading.enumerate() if t.name == "kafkacap analysis"} == before


def test_the_package_names_the_api_without_loading_it_first():
    assert analyzer.analyze is analyze and "analyze" in dir(analyzer)
    with pytest.raises(AttributeError):
        analyzer.no_such_thing  # noqa: B018
