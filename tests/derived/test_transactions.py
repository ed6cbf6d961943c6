"""The transactions and transaction_steps tables against the transactional producer's own view.

kafka44_transactions.pcap: a Java transactional producer (transactions v2, Kafka 4.4) commits and aborts five
transactions, one of them consume-transform-produce (TxnOffsetCommit); its truth file logs every transaction
(records written, EndTxn asked and answered, producer id and epoch) and every transaction request and response
the client itself sent and received.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from analyzer.derived.transactions import transactions_table
from tests.helpers import SAMPLES, export_tables, pcap_records, read_tables, truth

CAPTURE = SAMPLES / "kafka44_transactions.pcap"
TOLERANCE_MS = 250.0  # the client's clock readings against the packets' (JVM scheduling, logging)


@pytest.fixture(scope="module")
def tables(export_once) -> dict[str, pa.Table]:
    return read_tables(export_once(CAPTURE), ("transactions", "transaction_steps", "exchanges", "partitions"))


def _ms(ts: datetime) -> float:
    return ts.timestamp() * 1000.0


def test_every_transaction_with_its_outcome_epoch_records_and_partitions(tables):
    told = truth(CAPTURE)["transactions"]
    rows = tables["transactions"].to_pylist()
    assert [r["transactional_id"] for r in rows] == [told["transactional_id"]] * len(told["transactions"])
    for row, txn in zip(rows, told["transactions"], strict=True):
        assert row["outcome"] == txn["outcome"]
        assert (row["producer_id"], row["producer_epoch"]) == (txn["producer_id"], txn["producer_epoch"])
        assert row["records"] == txn["record_count"]
        assert row["end_attempts"] == 1
        written = {(topic, int(p)) for topic, parts in txn["records"].items() for p in parts}
        ours = {(e["topic"], p) for e in row["partitions"] for p in e["partitions"]}
        # the producer's partitions, and the group's offsets partition the consume-transform-produce one adds
        assert written <= ours and {t for t, _ in ours - written} <= {"__consumer_offsets"}
        assert ("offsets_to_transaction" in txn) == bool(row["groups"])
        if row["groups"]:
            assert row["groups"] == [txn["offsets_to_transaction"]["group_id"]]
        assert abs(_ms(row["end_request_ts"]) - txn["end_ms_requested"]) <= TOLERANCE_MS
        assert abs(_ms(row["end_ts"]) - txn["end_ms"]) <= TOLERANCE_MS
        assert row["start_ts"] <= row["end_request_ts"] <= row["end_ts"]
        assert row["duration_ms"] == pytest.approx((_ms(row["end_ts"]) - _ms(row["start_ts"])), abs=0.002)


def test_steps_are_the_requests_and_answers_the_client_logged(tables):
    log = truth(CAPTURE)["transactions"]["protocol_log"]
    steps = {(r["client_id"], r["correlation_id"]): r for r in tables["transaction_steps"].to_pylist()}
    requests = [e for e in log if e["direction"] == "request"]
    answers = {e["correlation_id"]: e for e in log if e["direction"] == "response"}
    assert requests
    for asked in requests:
        row = steps[asked["client_id"], asked["correlation_id"]]
        said = answers[asked["correlation_id"]]
        assert row["api_name"] == asked["api_name"] and row["api_version"] == asked["api_version"]
        assert row["transactional_id"] == asked["transactional_id"]
        assert (row["producer_id"], row["producer_epoch"]) == (asked["producer_id"], asked["producer_epoch"])
        assert row["committed"] == asked.get("committed")
        assert row["group_id"] == asked.get("group_id")
        if asked["api_name"] in ("InitProducerId", "EndTxn"):
            assert row["error_code"] == said["error_code"]
            assert (row["new_producer_id"], row["new_producer_epoch"]) == (said["producer_id"], said["producer_epoch"])
        if asked["api_name"] == "TxnOffsetCommit":
            offsets = {(t, int(p)) for t, parts in asked["offsets"].items() for p in parts}
            assert {(e["topic"], p) for e in row["partitions"] for p in e["partitions"]} == offsets
            assert row["error_code"] == 0 and set(said["partition_error_codes"]) == {0}


def test_read_committed_fetches_list_the_transactions_the_producer_aborted(tables):
    """A Fetch response to a read_committed consumer lists, per partition, the aborted transactions among the
    offsets it returns (aborted_transactions: how many; first_aborted_offset: the first offset of the first):
    those the producer aborted, where it wrote them (the truth: each transaction's records, by offset). A
    read_uncommitted consumer's responses list none (a null list), and its partitions carry the same records."""
    told = truth(CAPTURE)["transactions"]
    aborted: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (topic, partition) -> [(first, last) offset]
    for txn in told["transactions"]:
        if txn["outcome"] == "aborted":
            for topic, parts in txn["records"].items():
                for p, offsets in parts.items():
                    aborted.setdefault((topic, int(p)), []).append((min(offsets), max(offsets)))
    assert sum(map(len, aborted.values())) == 7  # two aborted transactions, over four and three partitions
    isolation = {(r["connection_id"], r["correlation_id"]): r["isolation_level"]
                 for r in tables["exchanges"].to_pylist() if r["api_name"] == "Fetch"}
    readers = {name: r["isolation_level"] for name, r in told["readers"].items()}
    seen = {level: set() for level in readers.values()}
    for row in tables["partitions"].to_pylist():
        if row["api_name"] != "Fetch" or row["client_id"] not in readers or not row["records"]:
            continue
        level = readers[row["client_id"]]
        assert isolation[row["connection_id"], row["correlation_id"]] == (level == "read_committed")
        if level == "read_uncommitted":
            assert (row["aborted_transactions"], row["first_aborted_offset"]) == (None, None)
        else:  # those whose records overlap what the response returns (from its fetch offset to its last)
            listed = sorted(first for first, last in aborted.get((row["topic"], row["partition"]), [])
                            if first <= row["records_last_offset"] and last >= row["fetch_offset"])
            assert row["aborted_transactions"] == len(listed), row
            assert row["first_aborted_offset"] == (listed[0] if listed else None), row
        seen[level].add((row["topic"], row["partition"]))
    assert seen["read_committed"] == seen["read_uncommitted"] >= set(aborted)


def test_deliveries_are_what_each_reader_consumed(tmp_path):
    """A read_committed consumer's Fetch responses still carry the aborted transactions' batches, which it
    drops; a read_uncommitted one consumes them. The deliveries per reader and partition are the records each
    says it consumed, and every delivered batch starts at an offset it saw."""
    rows = export_tables(CAPTURE, tmp_path / "out", "--deliveries", tables=("deliveries",))["deliveries"]
    delivered: dict[tuple, int] = {}
    starts: dict[tuple, set[int]] = {}
    for r in rows.to_pylist():
        key = (r["consumer_client_id"], r["topic"], r["partition"])
        delivered[key] = delivered.get(key, 0) + r["records"]
        starts.setdefault(key, set()).add(r["base_offset"])
    readers = truth(CAPTURE)["transactions"]["readers"]
    assert {level["isolation_level"] for level in readers.values()} == {"read_committed", "read_uncommitted"}
    for name, reader in readers.items():
        for topic, parts in reader["consumed"].items():
            for p, count in parts.items():
                key = (name, topic, int(p))
                assert delivered.get(key, 0) == count, key
                assert starts.get(key, set()) <= set(reader["offsets_seen"][topic][p]), key


def test_a_capture_cut_before_the_last_end_leaves_that_transaction_open(tmp_path, tables):
    """The packets up to the last EndTxn request's: the last transaction is open, the others as before."""
    last_end = max(r["request_ts"] for r in tables["transaction_steps"].to_pylist() if r["api_name"] == "EndTxn")
    header, records = pcap_records(CAPTURE)
    order = "<" if header[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    import struct

    kept = [r for r in records
            if datetime.fromtimestamp(struct.unpack_from(order + "I", r)[0], UTC).replace(
                microsecond=struct.unpack_from(order + "I", r, 4)[0]) < last_end]
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(header + b"".join(kept))
    whole = tables["transactions"].to_pylist()
    rows = export_tables(cut, tmp_path / "out", tables=("transactions",))["transactions"].to_pylist()
    assert [r["outcome"] for r in rows] == [r["outcome"] for r in whole[:-1]] + ["open"]
    assert rows[-1]["end_ts"] is None and rows[-1]["duration_ms"] is None


# --- the derivation's rules, on rows as the tables hold them ----------------------------------------------

STEP = {"capture_file": "c", "connection_id": 1, "client_id": "p", "broker_ip": "10.0.0.1", "broker_port": 9092,
        "response_ts": None, "transactional_id": "t", "producer_id": 7, "producer_epoch": 0,
        "new_producer_id": None, "new_producer_epoch": None, "committed": None, "group_id": None,
        "partitions": None, "error_name": "NONE"}


def _at(second: float) -> datetime:
    return datetime.fromtimestamp(1_700_000_000 + second, UTC)


def _derive(steps: list[dict]) -> list[dict]:
    from analyzer.derived.transactions import PRODUCE_COLUMNS, PRODUCED_COLUMNS, STEP_COLUMNS
    from analyzer.tables.schemas import EXCHANGES_SCHEMA, PARTITIONS_SCHEMA, TRANSACTION_STEPS_SCHEMA

    table = pa.Table.from_pylist([{**STEP, "response_ts": s["request_ts"], **s} for s in steps],
                                 schema=pa.schema([TRANSACTION_STEPS_SCHEMA.field(c) for c in STEP_COLUMNS]))
    produces = pa.table({c: pa.array([], EXCHANGES_SCHEMA.field(c).type) for c in PRODUCE_COLUMNS})
    produced = pa.table({c: pa.array([], PARTITIONS_SCHEMA.field(c).type) for c in PRODUCED_COLUMNS})
    return transactions_table(table, produces, produced).to_pylist()


def _add(second: float, **fields) -> dict:
    return {"api_name": "AddPartitionsToTxn", "request_ts": _at(second),
            "partitions": [{"topic": "a", "partitions": [0]}], **fields}


def _end(second: float, committed: bool = True, error: str = "NONE") -> dict:
    return {"api_name": "EndTxn", "request_ts": _at(second), "committed": committed, "error_name": error}


def _init(second: float) -> dict:
    return {"api_name": "InitProducerId", "request_ts": _at(second), "new_producer_id": 7, "new_producer_epoch": 1}


def test_a_new_producer_supersedes_the_open_transaction():
    rows = _derive([_add(1), _init(2), _add(3), _end(4)])
    assert [r["outcome"] for r in rows] == ["superseded", "committed"]


def test_a_retried_end_counts_its_attempts_and_its_error():
    rows = _derive([_add(1), _end(2, error="CONCURRENT_TRANSACTIONS"), _end(3)])
    assert [(r["outcome"], r["end_attempts"], r["errors"]) for r in rows] == [
        ("committed", 2, ["CONCURRENT_TRANSACTIONS"])]
    assert rows[0]["end_request_ts"] == _at(2) and rows[0]["commit_ms"] == 1000.0


def test_a_fenced_end_fails_the_transaction_and_an_unretried_error_too():
    assert [r["outcome"] for r in _derive([_add(1), _end(2, error="PRODUCER_FENCED")])] == ["failed"]
    assert [r["outcome"] for r in _derive([_add(1), _end(2, error="CONCURRENT_TRANSACTIONS")])] == ["failed"]
    assert [r["outcome"] for r in _derive([_add(1), _end(2, False)])] == ["aborted"]


def test_a_capture_starting_with_an_end_has_no_start():
    rows = _derive([_end(5)])
    assert rows[0]["outcome"] == "committed" and rows[0]["start_ts"] is None and rows[0]["duration_ms"] is None


def test_files_are_apart_and_batches_together_give_the_whole(tmp_path, tables, monkeypatch):
    """The capture and a copy under another name, in one run: each file's transactions, as the capture alone
    gives them (its rows wait dictionary-encoded, each file's own dictionary), handed on in batches of two
    rows that together are the table."""
    import analyzer.derived.transactions as derivation

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "copy.pcap").write_bytes(CAPTURE.read_bytes())
    monkeypatch.setattr(derivation, "BATCH_ROWS", 2)
    monkeypatch.setattr(derivation, "CHUNK", 3)
    monkeypatch.setattr(derivation, "FLUSH_EVERY", 2)
    both = export_tables([CAPTURE, tmp_path / "in" / "copy.pcap"], tmp_path / "out",
                         tables=("transactions",))["transactions"].to_pylist()
    alone = tables["transactions"].to_pylist()
    assert len(alone) == 5
    by_file: dict[str, list[dict]] = {}
    for row in both:
        by_file.setdefault(row.pop("capture_file"), []).append(row)
    assert sorted(by_file) == ["copy.pcap", CAPTURE.name]
    expected = [{k: v for k, v in r.items() if k != "capture_file"} for r in alone]
    assert list(by_file.values()) == [expected, expected]
