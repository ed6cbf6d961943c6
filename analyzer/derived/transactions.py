"""The ``transactions`` table: one row per transaction of a transactional producer, from a whole run's
transaction_steps and transactional Produce exchanges.

A transactional producer's life, per transactional id: InitProducerId (a producer id and epoch; a second one
fences the previous producer and aborts what it left open), then transactions one after another. A transaction
begins with the first request that puts something in it: AddPartitionsToTxn (transactions v1), a Produce
carrying the transactional id (with transactions v2, KIP-890, the broker adds the partition itself),
AddOffsetsToTxn or TxnOffsetCommit; it ends with EndTxn, commit or abort. A failed EndTxn is retried by the
client (CONCURRENT_TRANSACTIONS while the previous one completes) or ends the producer (PRODUCER_FENCED,
INVALID_TXN_STATE). What the capture shows of each is one row: when it started and ended, how, what it wrote
(partitions, Produce requests, records), which groups' offsets it committed and the errors met on the way.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import EXCHANGES_SCHEMA, TRANSACTIONS_SCHEMA

STEP_COLUMNS = ("capture_file", "connection_id", "client_id", "broker_ip", "broker_port", "api_name", "request_ts",
                "response_ts", "transactional_id", "producer_id", "producer_epoch", "new_producer_id",
                "new_producer_epoch", "committed", "group_id", "partitions", "error_name")
PRODUCE_COLUMNS = ("capture_file", "connection_id", "correlation_id", "client_id", "broker_ip", "broker_port",
                   "request_first_ts", "response_last_ts", "transactional_id", "error_name")
PRODUCED_COLUMNS = ("capture_file", "connection_id", "correlation_id", "topic", "partition", "records",
                    "producer_id", "producer_epoch", "error_name")
CHUNK = 4_096  # rows made into Python dicts at a time
FLUSH_EVERY = 8_192  # closed transactions gathered into a table at a time
BATCH_ROWS = 1 << 15  # rows of the finished table handed on at a time
_NO_TIME = datetime.min.replace(tzinfo=UTC)
FENCING_ERRORS = frozenset(("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_TXN_STATE",
                            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "INVALID_PRODUCER_ID_MAPPING"))
"""EndTxn errors after which the client does not retry: the transaction ends there, failed."""


ENCODED = ("capture_file", "client_id", "broker_ip", "api_name", "error_name", "group_id")
"""Columns of few distinct values, kept dictionary-encoded while a run's rows wait: a million transactions'
steps then take half the memory."""


def _encoded(t: pa.Table) -> pa.Table:
    for name in ENCODED:
        i = t.schema.get_field_index(name)
        if i >= 0 and not pa.types.is_dictionary(t.schema.field(i).type):
            t = t.set_column(i, name, pc.dictionary_encode(t[name]))
    return t


def _decoded(t: pa.Table) -> pa.Table:
    for i, f in enumerate(t.schema):
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, t[f.name].cast(f.type.value_type))
    return t


def step_rows(steps: pa.Table) -> pa.Table:
    """The rows of transaction_steps the table is made from: those naming a transactional id."""
    t = steps.select(list(STEP_COLUMNS))
    return _encoded(t.filter(pc.is_valid(t["transactional_id"])))


def produce_rows(exchanges: pa.Table) -> pa.Table:
    """The Produce exchanges of transactional producers (a filter a caller can apply batch by batch)."""
    if any(c not in exchanges.column_names for c in ("api_name", *PRODUCE_COLUMNS)):  # an older table: none of them
        exchanges = EXCHANGES_SCHEMA.empty_table()
    t = exchanges.filter(pc.and_(pc.equal(exchanges["api_name"], "Produce"),
                                 pc.is_valid(exchanges["transactional_id"])))
    return _encoded(t.select(list(PRODUCE_COLUMNS)))


def produced_rows(partitions: pa.Table) -> pa.Table:
    """The partition rows of transactional Produce requests (their batches marked transactional)."""
    t = partitions.filter(pc.and_(pc.equal(partitions["api_name"], "Produce"),
                                  pc.fill_null(partitions["transactional"], False)))
    return _encoded(t.select(list(PRODUCED_COLUMNS)))


@dataclass(slots=True)  # a million open at once must stay small
class _Transaction:
    capture_file: str
    transactional_id: str
    producer_id: int | None = None
    producer_epoch: int | None = None
    client_id: str | None = None
    coordinator_ip: str | None = None
    coordinator_port: int | None = None
    start_ts: datetime | None = None
    end_request_ts: datetime | None = None
    end_ts: datetime | None = None
    outcome: str | None = None
    partitions: dict[str, set[int]] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    produces: list[tuple] | None = None  # (capture, connection, correlation id) of its Produce exchanges
    produce_requests: int = 0
    records: int = 0
    end_attempts: int = 0
    end_failed: bool = False

    def error(self, name: str | None) -> None:
        if name and name != "NONE" and name not in self.errors:
            self.errors.append(name)

    def add_partitions(self, entries: list[dict] | None) -> None:
        for entry in entries or ():
            self.partitions.setdefault(entry["topic"], set()).update(p for p in entry["partitions"] or ()
                                                                     if p is not None)


def transactions_table(steps: pa.Table, produces: pa.Table, produced: pa.Table,
                       aborted_produces: list[tuple] | None = None) -> pa.Table:
    """The transactions table from a whole run's ``step_rows``, ``produce_rows`` and ``produced_rows``;
    ``aborted_produces``, when given, gets the Produce exchanges of aborted transactions (``aborted_keys``)."""
    return pa.Table.from_batches(list(transactions_batches([steps, produces, produced], aborted_produces)),
                                 schema=TRANSACTIONS_SCHEMA)


def aborted_keys(produces: list[tuple]) -> pa.Table:
    """(capture_file, connection_id, correlation_id) of the Produce exchanges of aborted transactions: what a
    read_committed consumer drops (analyzer.derived.deliveries)."""
    files, connections, correlations = zip(*produces, strict=True) if produces else ((), (), ())
    return pa.table({"capture_file": pa.array(files, pa.string()), "connection_id": pa.array(connections, pa.int64()),
                     "correlation_id": pa.array(correlations, pa.int32())})


def transactions_batches(inputs: list[pa.Table], aborted_produces: list[tuple] | None = None
                         ) -> Iterator[pa.RecordBatch]:
    """The transactions table's rows in order, BATCH_ROWS at a time, from ``[steps, produces, produced]`` taken
    out of the list: what the caller no longer holds is let go as soon as it is gone over. ``aborted_produces``
    (when given) gets the keys of the Produce exchanges of the transactions that were aborted."""
    produced = inputs.pop()
    produces = _with_partitions(inputs.pop(), produced)
    steps = inputs.pop().unify_dictionaries()  # taken across chunks below
    files = pa.array(sorted(set(_distinct(steps["capture_file"])) | set(_distinct(produces["capture_file"]))),
                     pa.string())
    events = heapq.merge(_sorted_rows(steps, "request_ts", 1, files),
                         _sorted_rows(produces, "request_first_ts", 0, files), key=lambda e: e[:4])
    del steps, produces, produced  # the generators hold them until they are gone through
    out: list[_Transaction] = []
    made: list[pa.Table] = []  # closed transactions, as tables of FLUSH_EVERY rows
    current: dict[tuple[str, str], _Transaction] = {}

    def close(key: tuple[str, str], outcome: str) -> None:
        txn = current.pop(key, None)
        if txn is not None:
            txn.outcome = outcome
            if outcome == "aborted" and txn.produces and aborted_produces is not None:
                aborted_produces.extend(txn.produces)
            txn.produces = None
            out.append(txn)
            if len(out) >= FLUSH_EVERY:
                made.append(_table(out))
                out.clear()

    def opened(key: tuple[str, str], r: dict, ts: datetime | None, api: str) -> _Transaction:
        txn = current.get(key)
        if txn is None:  # an EndTxn first: the transaction began before the capture
            txn = current[key] = _Transaction(key[0], key[1], start_ts=None if api == "EndTxn" else ts)
        txn.client_id = txn.client_id or r["client_id"]
        return txn

    producer: dict[tuple[str, str], tuple[int | None, int | None]] = {}  # the last InitProducerId's answer
    last_key = None
    for capture_file, transactional_id, _, _, ts, is_step, r in events:
        key = (capture_file, transactional_id)
        if key != last_key:  # the events come by transactional id: the one before has no more
            for done, txn in list(current.items()):
                close(done, "failed" if txn.end_failed else "open")
            producer.clear()
            last_key = key
        api = r["api_name"] if is_step else "Produce"
        err = r["error_name"]
        if api == "InitProducerId":
            txn = current.get(key)
            if txn is not None:
                close(key, "failed" if txn.end_failed else "superseded")
            if err == "NONE":
                producer[key] = (r["new_producer_id"], r["new_producer_epoch"])
            continue
        txn = opened(key, r, ts, api)
        if txn.producer_id is None:
            txn.producer_id, txn.producer_epoch = (r["producer_id"], r["producer_epoch"]) if is_step \
                else producer.get(key, (None, None))
        txn.error(err)
        if api == "Produce":
            txn.produce_requests += 1
            if aborted_produces is not None:
                txn.produces = txn.produces or []
                txn.produces.append((capture_file, r["connection_id"], r["correlation_id"]))
            for topic, partition, records, producer_id, producer_epoch, error in zip(
                    *(r[c] or () for c in ("p_topic", "p_partition", "p_records", "p_producer_id",
                                           "p_producer_epoch", "p_error_name")), strict=False):
                txn.partitions.setdefault(topic, set()).add(partition)
                txn.records += records or 0
                if txn.producer_id is None:
                    txn.producer_id, txn.producer_epoch = producer_id, producer_epoch
                txn.error(error)
        elif api in ("AddPartitionsToTxn", "TxnOffsetCommit"):
            txn.add_partitions(r["partitions"] if api == "AddPartitionsToTxn" else None)
            if r["group_id"] and r["group_id"] not in txn.groups:
                txn.groups.append(r["group_id"])
            if api == "AddPartitionsToTxn":
                txn.coordinator_ip, txn.coordinator_port = r["broker_ip"], r["broker_port"]
        elif api == "AddOffsetsToTxn":
            if r["group_id"] and r["group_id"] not in txn.groups:
                txn.groups.append(r["group_id"])
            txn.coordinator_ip, txn.coordinator_port = r["broker_ip"], r["broker_port"]
        elif api == "EndTxn":
            txn.end_attempts += 1
            txn.end_request_ts = txn.end_request_ts or ts
            txn.coordinator_ip, txn.coordinator_port = r["broker_ip"], r["broker_port"]
            if err == "NONE":
                txn.end_ts = r["response_ts"]
                txn.end_failed = False
                if r["new_producer_id"] is not None:  # transactions v2: the epoch moves on with every EndTxn
                    producer[key] = (r["new_producer_id"], r["new_producer_epoch"])
                close(key, "committed" if r["committed"] else "aborted")
            elif err in FENCING_ERRORS:
                txn.end_ts = r["response_ts"]
                close(key, "failed")
            elif err is not None:
                txn.end_failed = True
    for key, txn in list(current.items()):
        close(key, "failed" if txn.end_failed else "open")
    made.append(_table(out))
    out.clear()
    rows = pa.concat_tables(made)
    made.clear()
    order = pc.sort_indices(rows, sort_keys=[("capture_file", "ascending"), ("start_ts", "ascending"),
                                             ("transactional_id", "ascending")])  # times unknown last
    for start in range(0, len(order), BATCH_ROWS):  # in order a batch at a time: never a second sorted copy
        yield from rows.take(order[start:start + BATCH_ROWS]).combine_chunks().to_batches()


def _distinct(column: pa.ChunkedArray) -> list[str]:
    values = column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
    return [v for v in pc.unique(values).to_pylist() if v is not None]


def _sorted_rows(table: pa.Table, ts: str, is_step: int, files: pa.Array):
    """(capture, transactional id, no time, time, time, is_step, row) of each row, in that order, a chunk of
    rows made into dicts at a time (a million transactions' rows never all at once). Files are ordered by
    their rank in ``files`` (dictionary columns do not sort)."""
    keys = pa.table({"file": pc.index_in(table["capture_file"], value_set=files),
                     "transactional_id": table["transactional_id"], "ts": table[ts]})
    order = pc.sort_indices(keys, sort_keys=[("file", "ascending"), ("transactional_id", "ascending"),
                                             ("ts", "ascending")])  # taken a chunk at a time: no sorted copy
    del keys
    for start in range(0, len(order), CHUNK):
        for r in table.take(order[start:start + CHUNK]).to_pylist():
            t = r[ts]
            yield (r["capture_file"] or "", r["transactional_id"] or "", t is None, t or _NO_TIME, t, is_step, r)


def _with_partitions(produces: pa.Table, produced: pa.Table) -> pa.Table:
    """The transactional Produce exchanges with their partition rows' topics, partitions, records, producer ids
    and errors as lists (p_topic, p_partition, ...), joined on the exchange."""
    keys = ["capture_file", "connection_id", "correlation_id"]
    produces, produced = _decoded(produces), _decoded(produced)  # Arrow lists and joins no dictionary column
    listed = produced.group_by(keys).aggregate([(c, "list") for c in PRODUCED_COLUMNS if c not in keys])
    listed = listed.rename_columns([c if c in keys else "p_" + c.removesuffix("_list") for c in listed.column_names])
    index = listed.select(keys).append_column("p_row", pa.array(range(listed.num_rows), pa.int64()))
    joined = produces.join(index, keys, join_type="left outer")  # Arrow joins no list columns: take them by row
    rows = joined["p_row"]
    for c in PRODUCED_COLUMNS:
        if c not in keys:
            joined = joined.append_column("p_" + c, listed["p_" + c].take(rows))
    return joined.drop_columns(["p_row"])


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000.0, 3)


def _table(transactions: list[_Transaction]) -> pa.Table:
    rows = [{
        "capture_file": t.capture_file, "transactional_id": t.transactional_id, "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch, "client_id": t.client_id, "coordinator_ip": t.coordinator_ip,
        "coordinator_port": t.coordinator_port, "start_ts": t.start_ts, "end_request_ts": t.end_request_ts,
        "end_ts": t.end_ts, "duration_ms": _ms(t.start_ts, t.end_ts), "commit_ms": _ms(t.end_request_ts, t.end_ts),
        "outcome": t.outcome,
        "partitions": [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(
            t.partitions.items(), key=lambda item: (item[0] is None, item[0] or ""))],
        "groups": t.groups, "produce_requests": t.produce_requests, "records": t.records,
        "end_attempts": t.end_attempts, "errors": t.errors,
    } for t in transactions]
    return pa.Table.from_pylist(rows, schema=TRANSACTIONS_SCHEMA)
