"""The steps of Kafka transactions: the ``transaction_steps`` table, read from the transaction APIs' bodies.

A transactional producer gets its producer id and epoch (InitProducerId), adds the partitions it writes to the
transaction (AddPartitionsToTxn; with transactions v2, KIP-890, the broker adds them as the Produce requests
arrive), adds a consumer group's offsets (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator) and
ends it (EndTxn: commit or abort); the coordinator then writes a marker to every partition (WriteTxnMarkers, a
broker-to-broker request). Each of these is a few exchanges per transaction, so the compiled matcher hands
their bodies here once the response has arrived and they are decoded in full (the hot path never comes here).
The ``transactions`` table is made from these steps and the Produce rows (analyzer.derived.transactions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = (
    22, 24, 25, 26, 27, 28)
TRANSACTION_APIS = {INIT_PRODUCER_ID: "InitProducerId", ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
                    ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn", END_TXN: "EndTxn", WRITE_TXN_MARKERS: "WriteTxnMarkers",
                    TXN_OFFSET_COMMIT: "TxnOffsetCommit"}


class TransactionStep(NamedTuple):
    """One row of transaction_steps as the session writes it (the capture file and error name come later)."""

    connection_id: int
    correlation_id: int
    client_id: str | None
    broker_ip: str | None
    broker_port: int | None
    api_name: str
    api_version: int
    request_ts: int | None
    response_ts: int | None
    transactional_id: str | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    new_producer_id: int | None = None
    new_producer_epoch: int | None = None
    committed: bool | None = None
    group_id: str | None = None
    partitions: list[tuple] | None = None  # (topic name or id, partitions), named when drained
    error_code: int | None = None


def _topics(entries, partitions_field: str) -> list[tuple[str | bytes | None, list[int]]] | None:
    """[(topic, partitions)] of a request's topic array, whatever its partitions are called; a topic is its name,
    or its id (TxnOffsetCommit v6+) until the rows are drained."""
    if entries is None:
        return None
    out = []
    for t in entries:
        parts = t.get(partitions_field) or []
        topic = t["name"] if "name" in t else t.get("topic_id")
        out.append((topic, [p if isinstance(p, int) else p.get("partition_index") for p in parts]))
    return out


def _first_error(response: dict, topics_field: str, partitions_field: str, code_field: str) -> int:
    """The top-level error code if non-zero, else the first partition's non-zero one, else 0."""
    top = response.get("error_code") or 0
    if top:
        return top
    for t in response.get(topics_field) or ():
        for p in t.get(partitions_field) or ():
            if p.get(code_field):
                return p[code_field]
    return 0


def steps_of(key: int, version: int, rq: dict | None, rs: dict | None, base: TransactionStep
             ) -> list[TransactionStep]:
    """The rows of one transaction exchange: one, or one per marker of WriteTxnMarkers. ``base`` holds the
    exchange's identity (connection, times...); the decoded bodies fill the rest, null where they did not
    parse (None)."""
    error = None if rs is None else rs.get("error_code")
    if key == WRITE_TXN_MARKERS:
        if rq is None:
            return [base]
        answered = {m.get("producer_id"): m for m in (rs or {}).get("markers") or ()}
        rows = []
        for marker in rq.get("markers") or ():
            result = answered.get(marker.get("producer_id"))
            code = None if result is None else _first_error(result, "topics", "partitions", "error_code")
            rows.append(base._replace(producer_id=marker.get("producer_id"),
                                      producer_epoch=marker.get("producer_epoch"),
                                      committed=marker.get("transaction_result"),
                                      partitions=_topics(marker.get("topics"), "partition_indexes"),
                                      error_code=code))
        return rows or [base]
    if rq is None:
        return [base._replace(error_code=error)]
    fields: dict = {"transactional_id": rq.get("transactional_id"), "producer_id": rq.get("producer_id"),
                    "producer_epoch": rq.get("producer_epoch"), "error_code": error}
    if key == INIT_PRODUCER_ID:
        if rs is not None and not error:
            fields.update(new_producer_id=rs.get("producer_id"), new_producer_epoch=rs.get("producer_epoch"))
    elif key == ADD_PARTITIONS_TO_TXN:
        if version <= 3:
            fields.update(transactional_id=rq.get("v3_and_below_transactional_id"),
                          producer_id=rq.get("v3_and_below_producer_id"),
                          producer_epoch=rq.get("v3_and_below_producer_epoch"),
                          partitions=_topics(rq.get("v3_and_below_topics"), "partitions"))
            if rs is not None:
                fields["error_code"] = _first_error(rs, "results_by_topic_v3_and_below", "results_by_partition",
                                                    "partition_error_code")
        else:  # v4+: brokers verifying partitions for several transactions at once (KIP-890): one row each
            transactions = rq.get("transactions") or ()
            results = {r.get("transactional_id"): r for r in (rs or {}).get("results_by_transaction") or ()}
            rows = []
            for txn in transactions:
                result = results.get(txn.get("transactional_id"))
                code = error if error else (None if result is None else
                                            _first_error(result, "topic_results", "results_by_partition",
                                                         "partition_error_code"))
                rows.append(base._replace(transactional_id=txn.get("transactional_id"),
                                          producer_id=txn.get("producer_id"),
                                          producer_epoch=txn.get("producer_epoch"),
                                          partitions=_topics(txn.get("topics"), "partitions"), error_code=code))
            return rows or [base._replace(error_code=error)]
    elif key == ADD_OFFSETS_TO_TXN:
        fields["group_id"] = rq.get("group_id")
    elif key == TXN_OFFSET_COMMIT:
        fields.update(group_id=rq.get("group_id"), partitions=_topics(rq.get("topics"), "partitions"))
        if rs is not None:
            fields["error_code"] = _first_error(rs, "topics", "partitions", "error_code")
    elif key == END_TXN:
        fields["committed"] = rq.get("committed")
        if rs is not None and not error and "producer_id" in rs:
            fields.update(new_producer_id=rs.get("producer_id"), new_producer_epoch=rs.get("producer_epoch"))
    return [base._replace(**fields)]


class TransactionSteps:
    """The transaction_steps rows of the exchanges answered so far, until they are drained."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[TransactionStep] = []

    def add(self, base: TransactionStep, key: int, version: int, rq: dict | None, rs: dict | None) -> None:
        """An exchange: ``base`` its identity, ``rq`` and ``rs`` its decoded bodies (None: not read)."""
        self.rows += steps_of(key, version, rq, rs, base)

    def drain(self, topic_name: Callable[[str | bytes], str | None]) -> list[TransactionStep]:
        """The rows, topic ids named (by the names the run knows now)."""
        rows, self.rows = self.rows, []
        return [r if r.partitions is None else r._replace(partitions=[
            {"topic": topic_name(t), "partitions": p} for t, p in r.partitions]) for r in rows]

    def __len__(self) -> int:
        return len(self.rows)
