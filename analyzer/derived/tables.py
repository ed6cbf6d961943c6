"""The derived tables of a run, fed with its batches as they pass and made at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.derived.deliveries import deliveries_table, fetched_rows, produced_rows
from analyzer.derived.groups import COLUMNS as GROUP_COLUMNS
from analyzer.derived.groups import detail_rows, groups_table, member_counts, merge_counts
from analyzer.derived.heartbeat_groups import COLUMNS as HEARTBEAT_COLUMNS
from analyzer.derived.heartbeat_groups import heartbeat_groups_table
from analyzer.derived.share_groups import ShareConsumption
from analyzer.derived.transactions import aborted_keys, produce_rows, step_rows, transactions_batches
from analyzer.derived.transactions import produced_rows as transactional_rows
from analyzer.tables.schemas import (
    EXCHANGES_SCHEMA,
    GROUP_HEARTBEATS_SCHEMA,
    PARTITIONS_SCHEMA,
    TRANSACTION_STEPS_SCHEMA,
    TRANSACTIONS_SCHEMA,
)

CONNECTION_KEYS = {"capture_file": pa.string(), "connection_id": pa.int64(), "client_ip": pa.string(),
                   "broker_ip": pa.string(), "broker_port": pa.int32()}
MERGE_EVERY = 256  # partial counts merged this often, so they stay as small as their distinct keys
PENDING_ROWS = 1 << 16  # group-scoped exchanges held back before they are gone over together (bounds memory)


class DerivedTables:
    """Keeps what the derived tables need from the batches a run writes, and makes the tables at the end:

    - groups: the group APIs' JoinGroup, SyncGroup and LeaveGroup rows (a few per member and rebalance) and
      running counts of heartbeats and commits (one row per member and generation);
    - deliveries: the Produce partition rows the broker appended and the Fetch partition rows that returned
      records (a few columns each), each connection's client address, and the groups of client ids;
    - transactions: the transaction_steps rows of transactional producers, their Produce exchanges and the
      partition rows of those (a few columns each).
    """

    def __init__(self, deliveries: bool = True) -> None:
        self.deliveries = deliveries
        self._detail: list[pa.Table] = []
        self._counts: list[pa.Table] = []
        self._produced: list[pa.Table] = []
        self._fetched: list[pa.Table] = []
        self._connections: list[pa.Table] = []
        self._groups_of: dict[tuple[str | None, str | None], set[str]] = {}
        self._pending: list[pa.Table] = []  # group-scoped exchanges not yet gone over
        self._pending_rows = 0
        self._steps: list[pa.Table] = []
        self._heartbeats: list[pa.Table] = []
        self._shares = ShareConsumption()  # fed as the batches pass: what it holds is the records held
        self._txn_produces: list[pa.Table] = []
        self._txn_produced: list[pa.Table] = []

    def feed(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "exchanges":
            t = pa.Table.from_batches([batch])
            self._exchanges(t)
            _keep(produce_rows(t), self._txn_produces)
        elif table == "group_heartbeats":
            _keep(pa.Table.from_batches([batch]).select(list(HEARTBEAT_COLUMNS)), self._heartbeats)
        elif table == "share_ranges":
            self._shares.feed(pa.Table.from_batches([batch]))
        elif table == "transaction_steps":
            _keep(step_rows(pa.Table.from_batches([batch])), self._steps)
        elif table == "partitions" and "transactional" in batch.schema.names:
            _keep(transactional_rows(pa.Table.from_batches([batch])), self._txn_produced)
        if not self.deliveries:
            return
        if table == "partitions":
            for rows, into in ((produced_rows(batch), self._produced), (fetched_rows(batch), self._fetched)):
                if rows.num_rows:
                    into.append(rows)
        elif table == "connections":
            self._connections.append(pa.Table.from_batches([batch]).select(list(CONNECTION_KEYS)))

    def _exchanges(self, t: pa.Table) -> None:
        present = set(t.column_names)
        if "group_id" not in present:
            return
        t = t.select([c for c in GROUP_COLUMNS if c in present])
        t = t.filter(pc.is_valid(t["group_id"]))  # the group-scoped exchanges: a few per member and second
        if not t.num_rows:
            return
        self._pending.append(t)
        self._pending_rows += t.num_rows
        if self._pending_rows >= PENDING_ROWS:
            self._settle()

    def _settle(self) -> None:
        """Go over the group-scoped exchanges held back: gathered first, because each group-by costs a few
        milliseconds however few its rows."""
        if not self._pending:
            return
        t = pa.concat_tables(self._pending, promote_options="permissive")
        self._pending, self._pending_rows = [], 0
        rows = detail_rows(t)
        if rows.num_rows:
            self._detail.append(rows)
        counts = member_counts(t)
        if counts.num_rows:
            self._counts.append(counts)
            if len(self._counts) >= MERGE_EVERY:
                self._counts = [merge_counts(self._counts)]
        if self.deliveries:  # the consumers' groups: only the deliveries table names them
            for r in t.group_by(["client_ip", "client_id", "group_id"]).aggregate([]).to_pylist():
                self._groups_of.setdefault((r["client_ip"], r["client_id"]), set()).add(r["group_id"])

    def finish(self, final: bool = True) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(table, batch) of each derived table: one batch each, possibly empty, and the transactions table in
        as many as it takes. ``final``: the run is over, so what the transactions table is made from is let go
        as it is gone over; a live run makes the tables again at each rotation (``final=False``)."""
        self._settle()
        detail = pa.concat_tables(self._detail) if self._detail else detail_rows(EXCHANGES_SCHEMA.empty_table())
        counts = merge_counts(self._counts)
        heartbeats = _concat(self._heartbeats, GROUP_HEARTBEATS_SCHEMA.empty_table().select(list(HEARTBEAT_COLUMNS)))
        yield "groups", _one_batch(all_groups(groups_table(detail, counts), heartbeat_groups_table(heartbeats, counts)))
        yield "share_consumption", _one_batch(self._shares.finish())
        inputs = [_concat(self._steps, step_rows(TRANSACTION_STEPS_SCHEMA.empty_table())),
                  _concat(self._txn_produces, produce_rows(EXCHANGES_SCHEMA.empty_table())),
                  _concat(self._txn_produced, transactional_rows(PARTITIONS_SCHEMA.empty_table()))]
        if final:  # let go as soon as they are gone over
            self._steps, self._txn_produces, self._txn_produced = [], [], []
        handed = False
        aborted_produces: list[tuple] = []
        for batch in transactions_batches(inputs, aborted_produces):  # never two copies at once
            handed = True
            yield "transactions", batch
        if not handed:
            yield "transactions", pa.RecordBatch.from_pylist([], schema=TRANSACTIONS_SCHEMA)
        if not self.deliveries:
            return
        empty = PARTITIONS_SCHEMA.empty_table()
        produced = pa.concat_tables(self._produced) if self._produced else produced_rows(empty)
        fetched = pa.concat_tables(self._fetched) if self._fetched else fetched_rows(empty)
        keys = list(self._groups_of)
        consumers = pa.table({"client_ip": pa.array([k[0] for k in keys], pa.string()),
                              "client_id": pa.array([k[1] for k in keys], pa.string()),
                              "group_id": pa.array([next(iter(v)) if len(v) == 1 else None
                                                    for v in self._groups_of.values()], pa.string())})
        connections = (pa.concat_tables(self._connections) if self._connections
                       else pa.table({k: pa.array([], t) for k, t in CONNECTION_KEYS.items()}))
        connections = connections.group_by(["capture_file", "connection_id"]).aggregate(
            [("client_ip", "min"), ("broker_ip", "min"), ("broker_port", "min")])
        connections = connections.rename_columns({"client_ip_min": "client_ip", "broker_ip_min": "broker_ip",
                                                  "broker_port_min": "broker_port"})
        yield "deliveries", _one_batch(deliveries_table(produced, fetched, connections, consumers,
                                                        aborted_keys(aborted_produces)))


def all_groups(classic: pa.Table, heartbeat: pa.Table) -> pa.Table:
    """The groups table: classic generations and the heartbeat protocols' epochs, in one order."""
    return pa.concat_tables([classic, heartbeat]).sort_by([("capture_file", "ascending"), ("group_id", "ascending"),
                                                          ("generation_id", "ascending")])


def _keep(rows: pa.Table, into: list[pa.Table]) -> None:
    if rows.num_rows:
        into.append(rows)


def _concat(parts: list[pa.Table], empty: pa.Table) -> pa.Table:
    return pa.concat_tables(parts, promote_options="permissive") if parts else empty


def _one_batch(t: pa.Table) -> pa.RecordBatch:
    batches = t.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=t.schema)
