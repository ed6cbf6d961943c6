"""The derived tables of a run, fed with its batches as they pass and made at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from analyzer.derived.groups import detail_rows, groups_table, member_counts, merge_counts
from analyzer.tables.schemas import EXCHANGES_SCHEMA

MERGE_EVERY = 256  # partial counts merged this often, so they stay as small as their distinct keys


class DerivedTables:
    """Keeps what the derived tables need from the batches a run writes, and makes the tables at the end: the
    group APIs' JoinGroup, SyncGroup and LeaveGroup rows (a few per member and rebalance) and running counts
    of heartbeats and commits (one row per member and generation), whatever the run's length."""

    def __init__(self) -> None:
        self._detail: list[pa.Table] = []
        self._counts: list[pa.Table] = []

    def feed(self, table: str, batch: pa.RecordBatch) -> None:
        if table != "exchanges":
            return
        t = pa.Table.from_batches([batch])
        rows = detail_rows(t)
        if rows.num_rows:
            self._detail.append(rows)
        counts = member_counts(t)
        if counts.num_rows:
            self._counts.append(counts)
            if len(self._counts) >= MERGE_EVERY:
                self._counts = [merge_counts(self._counts)]

    def finish(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(table, batch) of each derived table (one batch each, possibly empty)."""
        detail = pa.concat_tables(self._detail) if self._detail else detail_rows(EXCHANGES_SCHEMA.empty_table())
        groups = groups_table(detail, merge_counts(self._counts)).combine_chunks()
        self._detail, self._counts = [], []
        batches = groups.to_batches()
        yield "groups", batches[0] if batches else pa.RecordBatch.from_pylist([], schema=groups.schema)
