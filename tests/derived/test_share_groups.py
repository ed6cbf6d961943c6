"""share_ranges and share_consumption against the share consumers' own view.

kafka44_share_group.pcap: three Java share consumers (explicit acknowledgement) on a 2-partition topic; one
sits on its first five records until their 3 s lock runs out, the others accept most, release some (delivered
again) and reject some; each logged every record it got (offset, delivery count) and how it acknowledged it.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.helpers import SAMPLES, read_tables, truth

CAPTURE = SAMPLES / "kafka44_share_group.pcap"
TOLERANCE_MS = 250.0
GROUP = "share44-workers"


@pytest.fixture(scope="module")
def tables(export_once) -> dict[str, pa.Table]:
    return read_tables(export_once(CAPTURE), ("share_ranges", "share_consumption", "groups"))


@pytest.fixture(scope="module")
def told() -> dict:
    return truth(CAPTURE)["groups"][GROUP]


def _covering(rows: list[dict], client: str, topic: str, partition: int, offset: int, action: str) -> list[dict]:
    return [r for r in rows if r["client_id"] == client and r["topic"] == topic and r["partition"] == partition
            and r["action"] == action and r["first_offset"] <= offset <= r["last_offset"]]


def test_every_delivery_is_an_acquisition_and_every_acknowledgement_a_range(tables, told):
    rows = tables["share_ranges"].to_pylist()
    assert {r["group_id"] for r in rows} == {GROUP}
    deliveries = 0
    for record in told["records"]:
        for d in record["deliveries"]:
            got = _covering(rows, d["client_id"], record["topic"], record["partition"], record["offset"], "acquired")
            match = [r for r in got if r["delivery_count"] == d["delivery_count"]
                     and abs(r["ts"].timestamp() * 1000.0 - d["time_ms"]) <= TOLERANCE_MS]
            assert len(match) == 1, (record, d)
            deliveries += 1
            if d["acknowledged"] is not None:
                acked = _covering(rows, d["client_id"], record["topic"], record["partition"], record["offset"],
                                  d["acknowledged"])
                assert [r for r in acked if r["ts"] >= match[0]["ts"]], (record, d)
    assert deliveries == told["summary"]["deliveries"]
    acquired = sum(r["last_offset"] - r["first_offset"] + 1 for r in rows if r["action"] == "acquired")
    assert acquired == deliveries  # nothing acquired that no consumer saw


def test_consumption_counts_per_member_are_what_each_consumer_did(tables, told):
    rows = {r["client_id"]: r for r in tables["share_consumption"].to_pylist()}
    summary = told["summary"]
    assert sum(r["acquired_records"] for r in rows.values()) == summary["deliveries"]
    assert sum(r["accepted"] for r in rows.values()) == summary["accepted"]
    assert sum(r["rejected"] for r in rows.values()) == summary["rejected"]
    assert sum(r["released"] for r in rows.values()) == len(summary["released"])
    assert sum(r["lock_lost"] for r in rows.values()) == len(summary["lock_expired"])
    for client, said in told["member_details"].items():
        got = rows[client]
        records = said["records"]
        assert got["acquired_records"] == len(records)
        assert got["redelivered_records"] == sum(1 for r in records if r["delivery_count"] > 1)
        for action, column in (("accept", "accepted"), ("release", "released"), ("reject", "rejected")):
            assert got[column] == sum(1 for r in records if r["acknowledged"] == action), (client, action)
        unacked = sum(1 for r in records if r["acknowledged"] is None)
        assert got["lock_lost"] + got["unacknowledged"] == unacked, client
        assert got["processed"] == len(records) - unacked
        if got["processed"]:
            assert 0 <= got["processing_p50_ms"] <= got["processing_p99_ms"] <= got["processing_max_ms"]


def test_the_share_group_has_its_epochs(tables, told):
    rows = [r for r in tables["groups"].to_pylist() if r["group_id"] == GROUP]
    assert rows and {r["group_protocol"] for r in rows} == {"share"}
    members = {m["client_id"] for r in rows for m in r["members"]}
    assert members == set(told["member_details"])


def test_consumption_is_the_same_whichever_connection_comes_first(tables):
    """Batches keep each connection's order but interleave connections as they are drained: the table must not
    depend on which connection's rows come first."""
    import pyarrow.compute as pc

    from analyzer.derived.share_groups import ShareConsumption

    ranges = tables["share_ranges"]
    made = []
    for order in ("ascending", "descending"):
        by_connection = pc.sort_indices(ranges, sort_keys=[("connection_id", order)])  # stable: each its own order
        consumption = ShareConsumption()
        for start in range(0, ranges.num_rows, 7):  # in small batches, as drains hand them over
            consumption.feed(ranges.take(by_connection).slice(start, 7))
        made.append(consumption.finish().to_pylist())
    assert made[0] == made[1] == tables["share_consumption"].to_pylist()
