"""kafkacap's analysis of every committed sample capture agrees with what the recording clients logged.

The truth files were written by the clients' side while the captures were recorded (sample_pcaps/record.py):
the requests each client says it sent, the responses it got and the errors it was deliberately given. Nothing
in them comes from kafkacap, so these tests cannot pass by agreeing with themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sample_pcaps import truth_check
from tests.helpers import SAMPLES, TRUTH_FILES
from tests.helpers import truth as read_truth

CORPUS_LIMIT = 5 * 1024 * 1024


def _with(predicate) -> list[Path]:
    return [path for path in TRUTH_FILES if predicate(read_truth(path))]


TOP_ERRORS = _with(lambda truth: any(e["level"] == "top" for e in truth["errors"]))
NESTED_ERRORS = _with(lambda truth: any(e["level"] == "nested" for e in truth["errors"]))
WITH_RECORDS = _with(lambda truth: bool(truth["topics"]))
WITH_EXPECTATIONS = _with(lambda truth: bool(truth.get("expectations")))
WITH_PARTITIONS = _with(truth_check.has_partition_detail)


def _name(path: Path) -> str:
    return path.name.split(".")[0]


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, list[dict]]:
    """kafkacap export over all sample captures at once, with every broker port the truth files name."""
    if not TRUTH_FILES:
        pytest.skip("no sample_pcaps/*.truth.json files")
    truths = [read_truth(path) for path in TRUTH_FILES]
    captures = [SAMPLES / truth["capture"] for truth in truths]
    out_dir = tmp_path_factory.mktemp("sample-export")
    keylogs = [SAMPLES / truth["tls"]["keylog"] for truth in truths if "tls" in truth]
    return truth_check.export_tables(captures, out_dir, [truth["broker"]["port"] for truth in truths], keylogs)


def _rows(tables: dict[str, list[dict]], truth: dict) -> list[dict]:
    return [row for row in tables["exchanges"] if row["capture_file"] == truth["capture"]]


def test_corpus_is_small_and_complete() -> None:
    if not TRUTH_FILES:
        pytest.skip("no sample_pcaps/*.truth.json files")
    total = 0
    for path in TRUTH_FILES:
        truth = read_truth(path)
        capture = SAMPLES / truth["capture"]
        assert capture.is_file(), f"{path.name} names a missing capture"
        total += capture.stat().st_size
        assert truth["requests"], f"{path.name}: no client-logged requests"
    assert total < CORPUS_LIMIT, f"sample captures take {total} bytes"


@pytest.mark.parametrize("truth_path", TRUTH_FILES, ids=_name)
def test_capture_format_is_the_one_recorded(truth_path: Path) -> None:
    """Magic numbers straight from the file: pcap (µs or ns) or pcapng, as the truth file says."""
    truth = read_truth(truth_path)
    magic = (SAMPLES / truth["capture"]).read_bytes()[:4]
    expected = {"pcap": {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4"},
                "pcap-ns": {b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"},
                "pcapng": {b"\x0a\x0d\x0d\x0a"}}[truth["capture_format"]]
    assert magic in expected


@pytest.mark.parametrize("truth_path", TRUTH_FILES, ids=_name)
def test_every_logged_request_is_exactly_one_exchange(tables, truth_path: Path) -> None:
    truth = read_truth(truth_path)
    pairs, problems = truth_check.match_requests(truth, _rows(tables, truth))
    assert not problems, "\n".join(problems[:20])
    assert len(pairs) == len(truth_check.decodable_requests(truth))


TLS_TRUTHS = _with(lambda truth: bool(truth.get("tls", {}).get("withheld_clients")))


@pytest.mark.parametrize("truth_path", TLS_TRUTHS, ids=_name)
def test_tls_connections_without_keys_are_counted_not_decoded(tables, truth_path: Path) -> None:
    """The clients whose keys were withheld sent requests (they logged them), yet none is an exchange, no
    connection carries their client id, and their connections are TLS rows that say why they were not read;
    the others' connections were all decrypted."""
    truth = read_truth(truth_path)
    withheld = truth_check.withheld_clients(truth)
    assert withheld and any(r["client_id"] in withheld for r in truth["requests"])
    assert not [r for r in _rows(tables, truth) if r["client_id"] in withheld]
    conns = [c for c in tables["connections"] if c["capture_file"] == truth["capture"]]
    assert all(c["tls"] for c in conns)
    withheld_ports = {r["client_port"] for r in truth["requests"] if r["client_id"] in withheld and r["client_port"]}
    dark = [c for c in conns if not c["tls_decrypted"]]
    assert withheld_ports <= {c["client_port"] for c in dark}
    assert {c["tls_note"] for c in dark} == {"no key for this client random in the key log"}
    assert not {c["client_ids"] for c in dark} - {None}
    keyed_ports = {r["client_port"] for r in truth_check.decodable_requests(truth) if r["client_port"]}
    assert keyed_ports <= {c["client_port"] for c in conns if c["tls_decrypted"]}


@pytest.mark.parametrize("truth_path", TRUTH_FILES, ids=_name)
def test_statuses_agree_with_what_the_clients_saw(tables, truth_path: Path) -> None:
    truth = read_truth(truth_path)
    pairs, _ = truth_check.match_requests(truth, _rows(tables, truth))
    problems = truth_check.check_statuses(truth, pairs)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("truth_path", TOP_ERRORS, ids=_name)
def test_deliberate_top_level_errors_are_reported(tables, truth_path: Path) -> None:
    truth = read_truth(truth_path)
    problems = truth_check.check_top_level_errors(truth, _rows(tables, truth))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("truth_path", NESTED_ERRORS, ids=_name)
def test_deliberate_nested_errors_are_reported(tables, truth_path: Path) -> None:
    truth = read_truth(truth_path)
    if "errors" not in tables:
        pytest.skip("kafkacap writes no errors table yet: per-topic/partition errors cannot be checked")
    errors = [row for row in tables["errors"] if row.get("capture_file") == truth["capture"]]
    problems = truth_check.check_nested_errors(truth, _rows(tables, truth), errors)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("truth_path", WITH_RECORDS, ids=_name)
def test_record_counts_match_the_clients(tables, truth_path: Path) -> None:
    truth = read_truth(truth_path)
    rows = _rows(tables, truth)
    if not rows or "record_count" not in rows[0]:
        pytest.skip("kafkacap has no record_count column yet: record counts cannot be checked")
    problems = truth_check.check_record_counts(truth, rows)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("truth_path", WITH_EXPECTATIONS, ids=_name)
def test_the_wire_shows_what_the_scenario_was_built_for(tables, truth_path: Path) -> None:
    """Pipelining visible in kafkacap's timestamps; Produce frames as big as the values the producer sent."""
    truth = read_truth(truth_path)
    problems = truth_check.check_expectations(truth, _rows(tables, truth))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("truth_path", WITH_PARTITIONS, ids=_name)
def test_partitions_agree_with_what_the_clients_were_told(tables, truth_path: Path) -> None:
    """Clients that report per partition (the Java ones): acknowledged offsets, codecs, producer ids, records
    read, and committed offsets, against kafkacap's partitions table."""
    truth = read_truth(truth_path)
    if "partitions" not in tables:
        pytest.skip("kafkacap writes no partitions table")
    rows = [row for row in tables["partitions"] if row["capture_file"] == truth["capture"]]
    problems = truth_check.check_partitions(truth, rows) + truth_check.check_committed_offsets(truth, rows)
    assert not problems, "\n".join(problems[:20])
