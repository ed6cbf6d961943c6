"""The groups table's KIP-848 rows (and group_heartbeats) against the consumers' own view.

kafka44_consumer_protocol.pcap: three Java consumers with group.protocol=consumer on a 6-partition topic: A
alone, then B joins, then C (subscribing by regular expression) joins, then B leaves; each logged every
rebalance callback (assigned, revoked, with what it owned after), its commits and its member epoch.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest

from tests.helpers import SAMPLES, read_tables, truth

CAPTURE = SAMPLES / "kafka44_consumer_protocol.pcap"
TOLERANCE_MS = 250.0  # the consumers' callbacks against the packets of the heartbeats around them
GROUP = "cg44-members"


@pytest.fixture(scope="module")
def tables(export_once) -> dict[str, pa.Table]:
    return read_tables(export_once(CAPTURE), ("groups", "group_heartbeats"))


@pytest.fixture(scope="module")
def members() -> dict[str, dict]:
    return truth(CAPTURE)["groups"][GROUP]["member_details"]


def _ms(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp() * 1000.0


def _owned(partitions: dict | list | None) -> set[tuple[str, int]]:
    if isinstance(partitions, list):  # the table's [{topic, partitions}]
        return {(e["topic"], p) for e in partitions for p in e["partitions"]}
    return {(t, int(p)) for t, ps in (partitions or {}).items() for p in ps}


def _epochs(tables) -> list[dict]:
    rows = [r for r in tables["groups"].to_pylist() if r["group_id"] == GROUP]
    assert rows and {r["group_protocol"] for r in rows} == {"consumer"}
    return rows


def test_every_assignment_a_consumer_took_up_is_an_epoch_it_reconciled_to(tables, members):
    """Each callback after which a consumer owned partitions is a member of some epoch with that assignment,
    reconciled (its heartbeat owning it all) within the tolerance of the callback."""
    epochs = _epochs(tables)
    checked = 0
    for name, said in members.items():
        for event in said["events"]:
            owned = _owned(event.get("owned_after"))
            if event["event"] != "assigned" or not owned:
                continue
            found = [m for e in epochs for m in e["members"]
                     if m["member_id"] == said["member_id"] and _owned(m["assignment"]) == owned]
            assert found, (name, event)
            assert min(abs(_ms(m["synced_ts"]) - event["time_ms"]) for m in found) <= TOLERANCE_MS, (name, event)
            checked += 1
    assert checked >= 7


def test_moved_partitions_are_the_revocations_and_assignments_the_consumers_saw(tables, members):
    """Every partition that changed hands went from a consumer that revoked it to one that was assigned it, at
    the times their callbacks say; and every revocation followed by another member's assignment is a move."""
    by_id = {said["member_id"]: said for said in members.values()}
    moved = [(mv, e["generation_id"]) for e in _epochs(tables) for mv in e["moved"] or ()]
    assert moved
    for mv, _ in moved:
        revokes = [ev for ev in by_id[mv["from_member"]]["events"] if ev["event"] == "revoked"
                   and (mv["topic"], mv["partition"]) in _owned(ev["partitions"])]
        assert min(abs(_ms(mv["released_ts"]) - ev["time_ms"]) for ev in revokes) <= TOLERANCE_MS, mv
        gains = [ev for ev in by_id[mv["to_member"]]["events"] if ev["event"] == "assigned"
                 and (mv["topic"], mv["partition"]) in _owned(ev["partitions"])]
        assert min(abs(_ms(mv["acquired_ts"]) - ev["time_ms"]) for ev in gains) <= TOLERANCE_MS, mv
        assert mv["gap_ms"] == pytest.approx(_ms(mv["acquired_ts"]) - _ms(mv["released_ts"]), abs=0.002)
    ours = {(mv["from_member"], mv["to_member"], mv["topic"], mv["partition"]) for mv, _ in moved}
    for said in members.values():
        for ev in (ev for ev in said["events"] if ev["event"] == "revoked"):
            for unit in _owned(ev["partitions"]):
                later = [(other["member_id"], g) for other in members.values() if other is not said
                         for g in other["events"] if g["event"] == "assigned" and unit in _owned(g["partitions"])
                         and g["time_ms"] > ev["time_ms"]]
                if later:
                    to = min(later, key=lambda x: x[1]["time_ms"])[0]
                    assert (said["member_id"], to, *unit) in ours, (ev, unit)
    for e in _epochs(tables):
        gaps = [mv["gap_ms"] for mv in e["moved"] or ()]
        assert e["stop_ms"] == (max(gaps) if gaps else None)


def test_joins_leaves_and_commits_per_epoch(tables, members):
    epochs = _epochs(tables)
    assert [e["generation_id"] for e in epochs] == sorted({e["generation_id"] for e in epochs})
    by_id = {said["member_id"]: name for name, said in members.items()}
    first_epoch = {}
    for e in epochs:
        for m in e["members"]:
            first_epoch.setdefault(by_id[m["member_id"]], e["generation_id"])
            assert m["client_id"] == by_id[m["member_id"]]
    # B and C joined after A, in that order; B left before the end, A and C at the end
    assert first_epoch["cg44-member-a"] < first_epoch["cg44-member-b"] <= first_epoch["cg44-member-c"]
    for name, said in members.items():
        closing = [ev["time_ms"] for ev in said["events"] if ev["event"] == "closing"]
        lefts = [m["left_ts"] for e in epochs for m in e["members"] if m["member_id"] == said["member_id"]
                 and m["left_ts"] is not None]
        assert len(lefts) == len(closing) == 1 and abs(_ms(lefts[0]) - closing[0]) <= TOLERANCE_MS, name
        commits: dict[int, int] = {}
        for c in said["commits"]:
            if c["error"] is None:
                commits[c["member_epoch"]] = commits.get(c["member_epoch"], 0) + 1
        ours = {e["generation_id"]: m["commits"] for e in epochs for m in e["members"]
                if m["member_id"] == said["member_id"] and m["commits"]}
        assert ours == commits, name
    left_b = [e for e in epochs if e["left"] and members["cg44-member-b"]["member_id"] in e["left"]]
    assert len(left_b) == 1 and left_b[0]["rebalance_start"] == max(
        m["left_ts"] for e in epochs for m in e["members"] if m["member_id"] == members["cg44-member-b"]["member_id"]
        and m["left_ts"] is not None)


def test_a_rebalance_ends_when_every_member_owns_its_assignment(tables):
    for e in _epochs(tables):
        if e["rebalance_end"] is None:
            continue
        assert e["rebalance_start"] <= e["rebalance_end"]
        assert e["rebalance_ms"] == pytest.approx(_ms(e["rebalance_end"]) - _ms(e["rebalance_start"]), abs=0.002)
        carried = [m for m in e["members"] if m["join_ts"] <= e["rebalance_end"]]
        assert all(m["synced_ts"] is not None and m["synced_ts"] <= e["rebalance_end"] for m in carried)
        assert e["rebalance_end"] in {m["synced_ts"] for m in carried}


def test_heartbeats_name_their_topics_and_epochs(tables, members):
    hb = tables["group_heartbeats"].to_pylist()
    assert {r["api_name"] for r in hb} == {"ConsumerGroupHeartbeat"}
    assert {r["member_id"] for r in hb} == {said["member_id"] for said in members.values()}
    assigned = {t["topic"] for r in hb for t in r["assignment"] or ()}
    assert assigned == {"cg44-orders"}  # topic ids named from the run's Metadata responses
    regex = [r["subscribed_regex"] for r in hb if r["subscribed_regex"]]
    assert regex == [members["cg44-member-c"]["subscription"]["pattern"]]
    leaves = sorted((r["request_ts"], r["member_id"]) for r in hb if r["request_epoch"] == -1)
    assert [m for _, m in leaves] == [members[n]["member_id"] for n in ("cg44-member-b", "cg44-member-a",
                                                                         "cg44-member-c")]


STREAMS = SAMPLES / "kafka44_streams_group.pcap"
STREAMS_TOLERANCE_MS = 1000.0  # a Streams instance reports its tasks once they are initialised, after the ack


def test_streams_tasks_are_the_ones_each_instance_ran(export_once):
    """Each set of tasks a Streams instance logged (active and standby) is its assignment at an epoch, reconciled
    at most a second before the instance had the tasks running."""
    epochs = [r for r in read_tables(export_once(STREAMS), ("groups",))["groups"].to_pylist()
              if r["group_id"] == "st44-app"]
    assert epochs and {r["group_protocol"] for r in epochs} == {"streams"}
    told = truth(STREAMS)["groups"]["st44-app"]["member_details"]
    checked = 0
    for client, said in told.items():
        for event in said["tasks"]:
            units = {(f"{t['task'].split('_')[0]} ({kind})", int(t["task"].split("_")[1]))
                     for kind in ("active", "standby") for t in event[kind]}
            if not units:
                continue
            found = [m for e in epochs for m in e["members"] if m["client_id"] == client
                     and _owned(m["assignment"]) == units and m["synced_ts"] is not None]
            if not found:  # a step within an epoch (standbys first, active tasks once released): its row ends
                #            with all of it, reconciled after this step
                assert [m for e in epochs for m in e["members"] if m["client_id"] == client
                        and units < _owned(m["assignment"]) and m["synced_ts"] is not None
                        and _ms(m["synced_ts"]) >= event["time_ms"] - STREAMS_TOLERANCE_MS], (client, event)
                continue
            lag = min((event["time_ms"] - _ms(m["synced_ts"]) for m in found), key=abs)
            assert 0 <= lag <= STREAMS_TOLERANCE_MS, (client, event, lag)
            checked += 1
    assert checked >= 4
