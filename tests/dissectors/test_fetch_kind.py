"""Follower fetches are not consumers: Fetch's replica_id (v0-14) and replica_state (v15+, a tagged struct)
become the exchanges' replica_id, replica_epoch and fetch_kind.

The compiled extraction is held to the full decoder on a body laid out by hand after FetchRequest.json; the real
traffic is the Java client's (sample_pcaps/kafka44_java_clients, consumers only) and, where recorded, a
three-broker cluster's (followers replicating).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli.commands import main as cli
from analyzer.tables.schemas import fetch_kind
from dissectors.kafka.decoder import decode
from dissectors.kafka.extract import extract

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
FETCH = 1


def fetch_v15_request(replica_state: tuple[int, int] | None) -> bytes:
    """FetchRequest v15: no topics, and the tagged replica_state (tag 1) when given."""
    body = struct.pack(">iiibii", 500, 1, 50 << 20, 0, 0, -1)  # max_wait, min_bytes, max_bytes, isolation, session
    body += b"\x01\x01\x01"  # topics [], forgotten_topics_data [], rack_id ""
    if replica_state is None:
        return body + b"\x00"
    state = struct.pack(">iq", *replica_state) + b"\x00"  # replica_id, replica_epoch, the struct's tag buffer
    return body + b"\x01\x01" + bytes([len(state)]) + state


@pytest.mark.parametrize("state", [(2, 7), None])
def test_replica_state_read_as_the_decoder_reads_it(state):
    buf = fetch_v15_request(state)
    fields = extract(buf, 0, len(buf), FETCH, 15, False).fields
    tree = decode(buf, 0, len(buf), FETCH, 15, False)
    if state is None:
        assert "replica_state.replica_id" not in fields and tree.get("replica_state") is None
    else:
        assert (fields["replica_state.replica_id"], fields["replica_state.replica_epoch"]) == state
        assert (tree["replica_state"]["replica_id"], tree["replica_state"]["replica_epoch"]) == state
    assert fields["max_wait_ms"] == 500


def test_a_replica_state_cut_short_is_truncated_not_guessed():
    buf = fetch_v15_request((2, 7))[:-5]
    got = extract(buf, 0, len(buf), FETCH, 15, False, partial=True)
    assert not got.complete and "replica_state.replica_id" not in (got.fields or {})


def test_fetch_kind_of_each_replica_id():
    api_key = pa.array([1, 1, 1, 1, 1, 1, 0], pa.int16())
    replica_id = pa.array([-1, None, 0, 3, -2, -3, None], pa.int32())
    assert fetch_kind(api_key, replica_id).to_pylist() == [
        "consumer", "consumer", "follower", "follower", "other", "other", None]


@pytest.mark.parametrize("capture", ["kafka44_java_clients", "kafka39_java_clients"])
def test_the_java_consumers_fetches_are_consumer_fetches(tmp_path, capture):
    path = SAMPLES / f"{capture}.pcap"
    if not path.exists():
        pytest.skip("sample capture missing")
    res = CliRunner().invoke(cli, ["export", str(path), "-o", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code == 0, res.output
    rows = pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
    fetches = [r for r in rows if r["api_name"] == "Fetch"]
    assert fetches and all(r["fetch_kind"] == "consumer" and r["replica_id"] is None for r in fetches)
    assert all(r["fetch_kind"] is None for r in rows if r["api_name"] != "Fetch")
    # every Fetch response was read whole: the empty answers of the fetch session carry 0 records, not unknown
    assert all(r["record_count"] is not None for r in fetches)
    assert sorted(r["record_count"] for r in fetches)[0] == 0
