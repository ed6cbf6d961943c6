"""The groups table and the subscription/assignment columns, held to the clients' own view.

The consumer-group sample's truth file holds what each kafka-python member's rebalance listener was told, and
when: the generation and member id its coordinator held, and the partitions assigned or revoked (recorded by
sample_pcaps/scenarios_traffic.py). Capture times and the listener's clock are the same host's clock.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dissectors.kafka import consumer_protocol
from tests.helpers import GROUP, export_tables, read_tables, truth

TRUTH = truth(GROUP)
# The listener runs right after the SyncGroup answer is read, and the revoke right before the JoinGroup is sent.
LISTENER_SLACK_S = 0.25


@pytest.fixture(scope="module")
def tables(group_export):
    return read_tables(group_export, ("groups", "exchanges"))


def _events(kind: str) -> list[dict]:
    return [dict(e, client_id=client) for client, events in TRUTH["groups"]["billing"]["assignments"].items()
            for e in events if e["event"] == kind and e["generation_id"] is not None and e["generation_id"] >= 0]


def _members(groups) -> dict[tuple[int, str], dict]:
    return {(g["generation_id"], m["member_id"]): dict(m, generation=g)
            for g in groups.to_pylist() for m in g["members"]}


def test_every_generation_and_member_the_clients_saw(tables) -> None:
    groups = tables["groups"]
    assigned = _events("assigned")
    assert assigned, "the truth file records the members' assignments"
    assert sorted(set(groups["generation_id"].to_pylist())) == sorted({e["generation_id"] for e in assigned})
    members = _members(groups)
    assert len(members) == len(assigned)
    for e in assigned:
        m = members[e["generation_id"], e["member_id"]]
        assert m["client_id"] == e["client_id"]
        assert m["generation"]["group_id"] == "billing"
        assert m["assignment"] == [{"topic": e["topic"], "partitions": e["partitions"]}]
        assert m["subscription"] == [e["topic"]]
        synced = m["synced_ts"].timestamp()
        assert synced <= e["time"] < synced + LISTENER_SLACK_S, (e, m["synced_ts"])


def test_stop_time_is_the_members_own_gap(tables) -> None:
    """A member of the previous generation stops consuming when its partitions are revoked (just before it
    rejoins) and resumes when the new ones are assigned: the table's waited_ms is that gap as the wire saw it."""
    members = _members(tables["groups"])
    revoked = {(e["client_id"], e["generation_id"]): e for e in _events("revoked")}
    checked = 0
    for e in _events("assigned"):
        before = revoked.get((e["client_id"], e["generation_id"] - 1))
        if before is None:
            continue
        m = members[e["generation_id"], e["member_id"]]
        client_gap_ms = (e["time"] - before["time"]) * 1000
        assert abs(m["waited_ms"] - client_gap_ms) < LISTENER_SLACK_S * 1000, (m["waited_ms"], client_gap_ms)
        assert m["generation"]["stop_ms"] >= m["waited_ms"]
        checked += 1
    assert checked, "the sample has a member that stayed through a rebalance"


def test_joins_and_leaves(tables) -> None:
    groups = tables["groups"].sort_by("generation_id").to_pylist()
    truth_members = {e["client_id"]: e["member_id"] for e in _events("assigned")}
    last = groups[-1]
    assert {m["client_id"] for m in last["members"]} == set(TRUTH["groups"]["billing"]["left"])
    assert all(m["left_ts"] is not None for m in last["members"])  # every member said LeaveGroup
    for before, after in zip(groups, groups[1:], strict=False):
        new = {m["member_id"] for m in after["members"]} - {m["member_id"] for m in before["members"]}
        assert after["joined"] == sorted(new)
        assert set(after["joined"]) <= set(truth_members.values())
        assert after["rebalance_start"] <= after["rebalance_end"]
        assert after["rebalance_ms"] >= max(m["waited_ms"] for m in after["members"]) - 1e-3


def test_assignment_column_on_sync_group_rows(tables) -> None:
    ex = tables["exchanges"]
    sync = ex.filter(pc.and_(pc.equal(ex["api_name"], "SyncGroup"), pc.equal(ex["error_code"], 0))).to_pylist()
    assert sync and all(r["assignment"] is not None for r in sync)
    others = ex.filter(pc.invert(pc.is_in(ex["api_name"], value_set=pa.array(["SyncGroup", "JoinGroup"]))))
    assert others["assignment"].null_count == others.num_rows
    assert others["subscription"].null_count == others.num_rows


def _assignment_bytes(version: int, topics: dict[str, list[int]], user_data: bytes | None = b"") -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for name, parts in topics.items():
        raw = name.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts)) + b"".join(
            struct.pack(">i", p) for p in parts)
    return out + (struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data)


def test_consumer_protocol_reads_what_the_definition_lays_out() -> None:
    data = _assignment_bytes(3, {"orders": [0, 2], "audit": []}, b"\x01")
    got = consumer_protocol.assignment(data)
    assert [(t.topic, t.partitions) for t in got] == [("orders", [0, 2]), ("audit", [])]
    assert consumer_protocol.assignment(b"") == []
    sub = struct.pack(">hi", 0, 2) + b"\x00\x01a" + b"\x00\x02bc" + struct.pack(">i", -1)
    assert consumer_protocol.subscription(sub) == ["a", "bc"]


@pytest.mark.parametrize("data", [
    b"\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x05ab", b"\xff\xff", bytes(range(256)),
])
def test_consumer_protocol_refuses_garbage_without_raising(data) -> None:
    """Counts beyond the bytes, strings cut short, a negative version: None, never an exception."""
    assert consumer_protocol.assignment(data) is None
    assert consumer_protocol.subscription(data) is None


def test_an_assignment_cut_in_its_partitions_is_refused() -> None:
    data = _assignment_bytes(0, {"a": [1, 2, 3]})
    for cut in range(2, len(data) - 4):  # short of the user data's length, each cut is inside the fields
        assert consumer_protocol.assignment(data[:cut]) is None


# --- End-to-end latency: the deliveries table --------------------------------------------------------------

@pytest.fixture(scope="module")
def with_records(tmp_path_factory):
    return export_tables(GROUP, tmp_path_factory.mktemp("deliveries") / "out", "--records", "--deliveries",
                         tables=("deliveries", "records", "exchanges", "partitions"))


def test_every_produced_batch_reaches_the_group(with_records) -> None:
    """The clients consumed all they produced (truth): every batch a Produce response placed is delivered to a
    member of the group, after it was produced."""
    topic = TRUTH["topics"]["orders"]
    assert topic["consumed"] == topic["produced"]
    parts = with_records["partitions"]
    produced = parts.filter(pc.and_(pc.equal(parts["api_name"], "Produce"), pc.is_valid(parts["base_offset"])))
    placed = {(r["topic"], r["partition"], r["base_offset"]) for r in produced.to_pylist() if r["records"]}
    rows = with_records["deliveries"].to_pylist()
    assert {(r["topic"], r["partition"], r["base_offset"]) for r in rows} == placed
    members = set(TRUTH["groups"]["billing"]["members"])
    for r in rows:
        assert r["group_id"] == "billing" and r["consumer_client_id"] in members
        assert r["fetched_ts"] >= r["produced_ts"] and r["delivery_ms"] >= 0
        assert r["producer_client_id"] in topic["producers"]


def test_delivery_is_the_first_fetch_that_returned_the_offset(with_records) -> None:
    """Held to the records table (every record the full decoder read from each Fetch response, an independent
    path from the batch headers the deliveries come from): the delivering Fetch holds the batch's first record,
    and no earlier Fetch response of that consumer after the Produce held it."""
    records = with_records["records"].filter(pc.equal(with_records["records"]["api_name"], "Fetch")).to_pylist()
    ex = with_records["exchanges"]
    answered = {(r["connection_id"], r["correlation_id"]): r for r in ex.to_pylist()}
    seen: dict[tuple, list[tuple]] = {}
    for rec in records:
        x = answered[rec["connection_id"], rec["correlation_id"]]
        seen.setdefault((rec["topic"], rec["partition"], rec["offset"]), []).append(
            (x["response_last_ts"], x["client_id"], rec["connection_id"], rec["correlation_id"]))
    rows = with_records["deliveries"].to_pylist()
    assert rows
    for r in rows:
        fetches = seen[r["topic"], r["partition"], r["base_offset"]]
        mine = sorted(f for f in fetches if f[1] == r["consumer_client_id"] and f[0] >= r["produced_ts"])
        assert mine[0][2:] == (r["fetch_connection_id"], r["fetch_correlation_id"])
        assert mine[0][0] == r["fetched_ts"]


def test_group_names_from_the_capture_reach_the_terminal_inert(tables) -> None:
    """A group id is capture bytes: printed in the summary, its control characters must not act."""
    import io

    from rich.console import Console

    from analyzer.cli.summary import _groups, group_rows

    hostile = tables["groups"].set_column(1, "group_id", pa.array(["bill\x1b[2J\x07ing"] * tables["groups"].num_rows))
    out = io.StringIO()
    _groups(Console(file=out, width=200, force_terminal=True, color_system=None), group_rows(hostile))
    text = out.getvalue()
    assert "\x1b[2J" not in text and "\x07" not in text
    assert "bill" in text and "ing" in text


@pytest.mark.parametrize("pending_rows", [1, 3, 1 << 16])
def test_the_groups_table_does_not_depend_on_how_the_exchanges_arrive(tables, monkeypatch, pending_rows) -> None:
    """The group-scoped exchanges are held back and gone over together every PENDING_ROWS rows and at the end:
    fed the consumer-group sample's exchanges a row at a time, settling after every row, every few rows or only
    at the end, the groups table is the one the export wrote (and the deliveries table the same each way)."""
    from analyzer.derived import tables as derived

    monkeypatch.setattr(derived, "PENDING_ROWS", pending_rows)
    exchanges = tables["exchanges"]
    made = derived.DerivedTables(deliveries=True)
    for batch in exchanges.to_batches(max_chunksize=1):
        made.feed("exchanges", batch)
    assert made._pending_rows < max(pending_rows, 1)
    out = dict(made.finish())
    assert out["groups"].num_rows == tables["groups"].num_rows > 0
    assert pa.Table.from_batches([out["groups"]]).equals(tables["groups"].combine_chunks())
    whole = derived.DerivedTables(deliveries=True)
    whole.feed("exchanges", exchanges.combine_chunks().to_batches()[0])
    assert dict(whole.finish())["deliveries"].equals(out["deliveries"])
