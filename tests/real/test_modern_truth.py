"""The modern-protocol samples (KIP-848 consumer group, KIP-932 share group, transactions, KIP-1071 streams group):
their truth files hold together, and kafkacap's heartbeat and transaction rows agree with what the clients printed.

The truth files were written by the recording clients (sample_pcaps/scenarios_modern.py): their rebalance callbacks,
the records and acknowledgements of the share consumers, the transactions, the streams instances' tasks, and the
group heartbeats and transactional requests as the Java clients' NetworkClient printed them. The first tests only
read the truth, so a re-recording that went wrong in a way the recorder did not notice fails here; the others hold
kafkacap's ``group_heartbeats`` and ``transactions`` tables to the truth, and skip while kafkacap has no such table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from sample_pcaps import truth_check
from tests.helpers import SAMPLES

CONSUMER, SHARE, TRANSACTIONS, STREAMS = (SAMPLES / f"kafka44_{name}.truth.json" for name in
                                         ("consumer_protocol", "share_group", "transactions", "streams_group"))
ALL = [CONSUMER, SHARE, TRANSACTIONS, STREAMS]

pytestmark = pytest.mark.skipif(not all(path.is_file() for path in ALL), reason="modern-protocol samples not recorded")


def _truth(path: Path) -> dict:
    return json.loads(path.read_text())


def _group(truth: dict, protocol: str) -> tuple[str, dict]:
    (found,) = [(group_id, entry) for group_id, entry in truth["groups"].items() if entry.get("protocol") == protocol
                and entry.get("member_details")]
    return found


# -- the truth files alone --------------------------------------------------------------------------------------------
def test_consumer_group_members_read_every_record_once_and_committed_the_end() -> None:
    truth = _truth(CONSUMER)
    group_id, group = _group(truth, "consumer")
    (topic,) = group["committed"]
    entry = truth["topics"][topic]
    assert entry["consumed"] == entry["produced"] > 0
    for partition, detail in entry["partitions"].items():
        assert detail["consumed"] == detail["produced"] == len(detail["offsets"])
        assert group["committed"][topic][partition] == detail["offsets"][-1] + 1  # lag 0 at the end
    joins = [h for h in group["heartbeats"] if h["direction"] == "request" and h["member_epoch"] == 0]
    leaves = [h for h in group["heartbeats"] if h["direction"] == "request" and h["member_epoch"] == -1]
    assert [h["client_id"] for h in joins] == group["members"]  # a, b, c in that order
    assert sorted(h["client_id"] for h in leaves) == sorted(group["members"])
    assert [h.get("subscribed_topic_regex") for h in joins] == [None, None, f"{topic.split('-')[0]}-.*"]
    # every partition is owned by one member at a time, as the members' rebalance listeners saw it
    owner: dict[int, str] = {}
    events = sorted(((e["time_ms"], client, e) for client, d in group["member_details"].items() for e in d["events"]),
                    key=lambda item: item[0])  # stable: each member's own events stay in their order
    for _time, client, event in events:
        for partition in event.get("partitions", {}).get(topic, []):
            if event["event"] == "assigned":
                assert partition not in owner, (client, partition, owner)
                owner[partition] = client
            elif event["event"] in ("revoked", "lost"):
                assert owner.pop(partition) == client
    assert not owner  # all gave their partitions up when they closed


def test_share_group_records_end_accepted_or_rejected_after_releases_and_an_expired_lock() -> None:
    truth = _truth(SHARE)
    group_id, group = _group(truth, "share")
    summary = group["summary"]
    (topic,) = {r["topic"] for r in group["records"]}
    assert summary["records"] == truth["topics"][topic]["produced"] == summary["accepted"] + summary["rejected"]
    assert summary["deliveries"] == truth["topics"][topic]["consumed"] > summary["records"]
    assert group["configs"] == {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "3000"}
    holders = [client for client, d in group["member_details"].items() if d["holder"]]
    for record in group["records"]:
        counts = [d["delivery_count"] for d in record["deliveries"]]
        assert counts == list(range(1, len(counts) + 1)), record  # each delivery counted by the broker
        last = record["deliveries"][-1]["acknowledged"]
        assert record["final"] == last in ("accept", "reject")
        if record["offset"] % 10 == 7:
            assert record["final"] == "reject"
        for earlier in record["deliveries"][:-1]:
            # a delivery before the last was released, or held by the member that let its lock expire
            assert earlier["acknowledged"] == "release" or (earlier["acknowledged"] is None
                                                            and earlier["client_id"] in holders), record
    assert summary["lock_expired"] and summary["released"] and summary["max_delivery_count"] == 2


def test_transactions_bump_the_epoch_and_readers_see_their_isolation_level() -> None:
    truth = _truth(TRANSACTIONS)
    tx = truth["transactions"]
    epoch = tx["initial_producer_epoch"]
    committed, everything = defaultdict(set), defaultdict(set)
    for number, transaction in enumerate(tx["transactions"]):
        assert transaction["index"] == number
        assert (transaction["producer_id"], transaction["producer_epoch"]) == (tx["producer_id"], epoch + number)
        assert transaction["end_txn"]["next_producer_epoch"] == epoch + number + 1  # transactions V2
        assert transaction["end_txn"]["committed"] == (transaction["outcome"] == "committed")
        assert transaction["end_txn"]["error_code"] == 0
        for topic, partitions in transaction["records"].items():
            for partition, offsets in partitions.items():
                everything[topic, partition] |= set(offsets)
                if transaction["outcome"] == "committed":
                    committed[topic, partition] |= set(offsets)
    assert {t["outcome"] for t in tx["transactions"]} == {"committed", "aborted"}
    ctp = [t for t in tx["transactions"] if t["kind"] == "ctp"]
    assert len(ctp) == 1 and ctp[0]["offsets_to_transaction"]["offsets"]
    for reader in tx["readers"].values():
        wanted = committed if reader["isolation_level"] == "read_committed" else everything
        seen = {(topic, partition): set(offsets) for topic, partitions in reader["offsets_seen"].items()
                for partition, offsets in partitions.items()}
        assert seen == {key: offsets for key, offsets in wanted.items() if offsets}
        assert reader["total"] == tx["expected"][reader["isolation_level"]]


def test_streams_instances_share_the_tasks_with_standbys_while_both_run() -> None:
    truth = _truth(STREAMS)
    group_id, group = _group(truth, "streams")
    details = list(group["member_details"].values())
    assert len(details) == 2
    source = truth["topics"][next(t for t, e in truth["topics"].items() if e["consumers"])]
    assert source["consumed"] >= source["produced"] > 0
    tasks = {f"0_{p}" for p in source["partitions"]}
    both = (max(d["started_ms"] for d in details), min(d["closed_ms"] for d in details))
    seen_split = False
    for instance in details:
        last = [t for t in instance["tasks"] if both[0] <= t["time_ms"] < both[1]]
        assert last, instance["instance"]
        final = last[-1]
        other = next(d for d in details if d is not instance)
        other_final = [t for t in other["tasks"] if t["time_ms"] < both[1]][-1]
        active = {t["task"] for t in final["active"]}
        assert active and active.isdisjoint({t["task"] for t in other_final["active"]})
        assert active | {t["task"] for t in other_final["active"]} == tasks
        assert {t["task"] for t in final["standby"]} == {t["task"] for t in other_final["active"]}
        seen_split = True
    assert seen_split
    statuses = [s["detail"] for h in group["heartbeats"] for s in h.get("status", [])]
    assert any("Internal topics are missing" in detail for detail in statuses)


# -- kafkacap against them ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, list[dict]]:
    truths = [_truth(path) for path in ALL]
    return truth_check.export_tables([SAMPLES / truth["capture"] for truth in truths],
                                     tmp_path_factory.mktemp("modern-export"),
                                     [truth["broker"]["port"] for truth in truths])


def _rows(tables: dict, name: str, capture: str, needed: set[str]) -> list[dict]:
    rows = tables.get(name)
    if not rows:
        pytest.skip(f"kafkacap writes no {name} table")
    missing = needed - set(rows[0])
    if missing:
        pytest.skip(f"kafkacap's {name} table has no {sorted(missing)}")
    return [row for row in rows if row["capture_file"] == capture]


@pytest.mark.parametrize("path", [CONSUMER, SHARE, STREAMS], ids=lambda p: p.name.split(".")[0])
def test_heartbeats_are_the_ones_the_clients_printed(tables, path: Path) -> None:
    """Each heartbeat the truth keeps (joins, leaves, responses that changed the member's epoch or assignment) is a
    group_heartbeats row of that client and correlation id, with the member id, epochs and assignment printed."""
    truth = _truth(path)
    protocol = {CONSUMER: "consumer", SHARE: "share", STREAMS: "streams"}[path]
    _group_id, group = _group(truth, protocol)
    rows = _rows(tables, "group_heartbeats", truth["capture"],
                 {"client_id", "correlation_id", "member_id", "request_epoch", "response_epoch"})
    by_key = {(row["client_id"], row["correlation_id"]): row for row in rows}
    names = {topic_id: topic for topic, topic_id in group.get("topic_ids", {}).items()}
    problems = []
    for beat in group["heartbeats"]:
        row = by_key.get((beat["client_id"], beat["correlation_id"]))
        label = f"{beat['client_id']} corr {beat['correlation_id']} ({beat['direction']})"
        if row is None:
            problems.append(f"{label}: no group_heartbeats row")
            continue
        if beat["direction"] == "request":
            if row["request_epoch"] != beat["member_epoch"]:
                problems.append(f"{label}: request epoch {row['request_epoch']}, printed {beat['member_epoch']}")
            if "subscribed_topic_regex" in beat and row.get("subscribed_regex") != beat["subscribed_topic_regex"]:
                problems.append(f"{label}: regex {row.get('subscribed_regex')!r}, printed "
                                f"{beat['subscribed_topic_regex']!r}")
            continue
        if (row["member_id"], row["response_epoch"]) != (beat["member_id"], beat["member_epoch"]):
            problems.append(f"{label}: member {row['member_id']} epoch {row['response_epoch']}, printed "
                            f"{beat['member_id']} epoch {beat['member_epoch']}")
        if "assignment" in beat and "assignment" in row:
            printed = sorted((names.get(a["topic_id"], a["topic_id"]), tuple(a["partitions"]))
                             for a in beat["assignment"] if a["partitions"])
            decoded = sorted((a["topic"], tuple(a["partitions"])) for a in row["assignment"] or [] if a["partitions"])
            if printed != decoded:
                problems.append(f"{label}: assignment {decoded}, printed {printed}")
    assert not problems, "\n".join(problems[:20])


def test_transactions_are_the_ones_the_producer_ran(tables) -> None:
    """kafkacap's transactions of the transactional id: in order, the producer id and epoch the producer's EndTxn
    carried, the outcome, and the records it wrote (the broker's own AddPartitionsToTxn verification, on the same
    listener, is not the client's)."""
    truth = _truth(TRANSACTIONS)
    tx = truth["transactions"]
    rows = _rows(tables, "transactions", truth["capture"],
                 {"transactional_id", "producer_id", "producer_epoch", "outcome", "records", "start_ts"})
    rows = sorted((row for row in rows if row["transactional_id"] == tx["transactional_id"]),
                  key=lambda row: row["start_ts"])
    decoded = [(row["producer_id"], row["producer_epoch"], row["outcome"], row["records"]) for row in rows]
    printed = [(t["producer_id"], t["producer_epoch"], t["outcome"], t["record_count"]) for t in tx["transactions"]]
    assert decoded == printed
