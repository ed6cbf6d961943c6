"""The truth file of one scenario: what the clients did and saw, filled in by the scenario as it runs.

Layout of ``<name>.truth.json`` (all counts come from the clients' side, never from the capture):

- ``scenario``, ``description``, ``capture`` (file name), ``capture_format`` (``pcap``, ``pcap-ns``, ``pcapng``),
  ``broker`` {software, version, host, port, and ``config``: the broker settings a scenario added}, ``clients``
  {name: version}.
- ``topics``: per topic, ``produced`` (records the broker acknowledged), ``produced_acks0`` (records sent
  with acks=0, never acknowledged), ``consumed`` (records handed to the application), ``codecs``, ``acks``,
  ``message_format`` (``v2`` record batches, or ``v0``/``v1`` message sets), ``producers``/``consumers``
  (client ids), and, from clients that report them (the Java ones), ``partitions``: per partition the
  ``produced`` count with the ``offsets`` the broker acknowledged, and the ``consumed`` count.
- ``groups``: per group id, the member client ids, committed offsets {topic: {partition: offset}}, and whether the
  members left. The groups of the modern protocols (``scenarios_modern``) add ``protocol`` (``consumer``: KIP-848,
  ``share``: KIP-932, ``streams``: KIP-1071), ``topic_ids`` (as CreateTopics answered), ``member_details`` per member
  client id (what the client logged, times ``time_ms`` in ms since the epoch: a consumer's rebalance-listener
  ``events`` {event assigned/revoked/lost/subscribed/closing/closed, partitions, member_id, member_epoch, owned_after}
  and ``commits`` {time_ms, done_ms, reason, offsets, member_epoch, error}; a share consumer's ``records`` {time_ms,
  partition, offset, delivery_count, acknowledged}, ``acknowledgements``, ``commits`` (commitSync results per
  partition) and ``callbacks`` (the acknowledgement commit callback); a streams instance's ``states``, ``tasks``
  {time_ms, active, standby} and ``processed``) and ``heartbeats`` (the heartbeat requests that joined or left and the
  responses that changed something, as the clients printed them: member id, epoch, assignment by topic id or streams
  tasks, status, error code; ``at`` is when the recorder read the line). A share group also has ``configs`` (its group
  configs, read back), ``records`` (every record's deliveries in time order and its final state) and ``summary``; the
  committed offsets of a KIP-848 group are each partition's last successful commit among its members.
- ``transactions`` (kafka44_transactions): the transactional id, producer client id, producer id and initial epoch
  (InitProducerId), and per transaction, in order, its kind (commit, abort, ctp: consume-transform-produce), begin
  and end times, the records written {topic: {partition: [offsets]}}, the outcome, the producer id and epoch its
  EndTxn carried and the next epoch the response gave, and for ctp the offsets sent to the transaction (group, member
  id, epoch); the readers' records per isolation level (``offsets_seen``); ``protocol_log`` (InitProducerId, EndTxn and
  TxnOffsetCommit as printed); ``expected`` records per isolation level.
- ``errors``: deliberately triggered broker errors, each {api_name, error_name, level (``top`` for the
  response's top-level error_code, ``nested`` for a per-topic/partition one), client, client_id, how, and
  api_version where a scenario names it (a request at a version the broker does not support)}. Only errors the
  client actually received are written.
- ``unanswered``: requests that deliberately get no response {client_id, api_name, expected_status}.
- ``acks0``: whether any producer used acks=0.
- ``expectations``: facts about the wire a scenario was built to produce: ``pipelined`` (some connection has
  several requests in flight), ``min_produce_request_bytes`` (its Produce requests are at least this big, so
  each spans many TCP segments), ``idempotent_producers`` (client ids whose batches carry a producer id).
- ``requests``: every request the clients logged: {client, client_id, client_port (null for librdkafka and
  the Java clients, which do not log it), broker, api_key, api_name, api_version, correlation_id,
  expects_response, response_received, response_error_code/response_error_name (top-level error code of the
  response, when the client exposes it), timed_out (only when librdkafka reported the request timed out),
  connection (librdkafka's broker handle; the Java clients' node id, ``node -1`` for the bootstrap
  connection), cancelled (only when a Java or Go client gave up the request in flight, closing the connection),
  connection_closed with closed_after_s (only when the broker closed the connection with the request unanswered
  while the client waited: the raw-socket client's too-new versions), header_version (the raw client's request
  header version), response_layout_version and response_api_keys (an ApiVersions answer the raw client read in
  another layout than it asked for: UNSUPPORTED_VERSION in v0, with the ranges it held), response_topics (the
  topics' names and nested error codes of a Metadata answer the raw client read)}.
- ``max_in_flight``: most requests outstanding on one connection, in the order the clients logged them.
- ``expectations.unsupported_versions`` (kafka44_unsupported_versions): the raw client's id and, per request in
  order, its local port, API, version, correlation id and outcome (answered, with the error name and the ranges
  read, or the connection closed by the broker).
- ``capture_stats``: tool, packets, kernel drops, size in bytes.
- ``tls`` (TLS scenarios only): ``keylog`` (the key log file next to the capture) and ``withheld_clients`` (client
  ids whose session secrets are not in it: their requests cannot be decoded and are expected not to be).
- ``request_logs`` (clients whose requests are not read from their own log, the Go ones): per client, the
  ``method`` its requests were logged with and the ``checks`` comparing that with the client's own counters.
- ``cluster`` (multi-broker scenarios only): the nodes and their namespaces, the capture interface and ports, the
  topic's replication, which node was stopped and why, the recorder's ``events`` (stop, exit, start, started,
  with epoch and UTC times and seconds into the stream), the partition leaders in the producer's metadata before
  and after, and the clients' own counters. Such a scenario's topics also carry ``produced_retried``: records the
  producer sent again (its ``record-retry-total``), so Produce requests on the wire carry ``produced`` plus that
  many.
- ``nested_errors`` (clients that print their responses, the Java ones of the cluster scenario): every non-zero
  error code below a response's top level {client_id, api_name, api_version, correlation_id, connection, in (the
  printed object holding it), partition, error_code, error_name (the client's own name), after_stop (whether it
  came once the recorder had begun to stop a node: those are also ``errors`` entries), at, at_utc}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client_trace import ClientTrace


@dataclass
class ScenarioTruth:
    name: str
    description: str
    capture: str
    capture_format: str
    broker: dict[str, Any]
    clients: dict[str, str] = field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    unanswered: list[dict[str, Any]] = field(default_factory=list)
    acks0: bool = False
    expectations: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # TLS scenarios: {"keylog": file name, "withheld_clients": client ids whose session keys are not in it}
    tls: dict[str, Any] = field(default_factory=dict)
    # {client: {"method": how its requests were logged, "checks": {...}}} (go_clients)
    request_logs: dict[str, Any] = field(default_factory=dict)
    # multi-broker scenarios: nodes, the stop/restart events, the clients' nested errors (scenarios_cluster)
    cluster: dict[str, Any] = field(default_factory=dict)
    nested_errors: list[dict[str, Any]] = field(default_factory=list)
    # a transactional producer's transactions and the readers at both isolation levels (scenarios_modern)
    transactions: dict[str, Any] = field(default_factory=dict)

    def _topic(self, topic: str) -> dict[str, Any]:
        return self.topics.setdefault(topic, {
            "produced": 0, "produced_acks0": 0, "consumed": 0, "codecs": [], "acks": [],
            "message_format": None, "producers": [], "consumers": [],
        })

    def _partition(self, topic: str, partition: int) -> dict[str, Any]:
        partitions = self._topic(topic).setdefault("partitions", {})
        return partitions.setdefault(str(partition), {"produced": 0, "offsets": [], "consumed": 0})

    def produced(self, topic: str, count: int, *, client_id: str, codec: str, acks: int,
                 message_format: str = "v2", offsets: dict[int, list[int]] | None = None) -> None:
        entry = self._topic(topic)
        for partition, acknowledged in sorted((offsets or {}).items()):
            detail = self._partition(topic, partition)
            detail["produced"] += len(acknowledged)
            detail["offsets"] = sorted(detail["offsets"] + list(acknowledged))
        if acks == 0:
            entry["produced_acks0"] += count
            self.acks0 = True
        else:
            entry["produced"] += count
        _add(entry["codecs"], codec)
        _add(entry["acks"], acks)
        _add(entry["producers"], client_id)
        entry["message_format"] = message_format

    def consumed(self, topic: str, count: int, *, client_id: str, partitions: dict[int, int] | None = None) -> None:
        entry = self._topic(topic)
        for partition, read in sorted((partitions or {}).items()):
            self._partition(topic, partition)["consumed"] += read
        entry["consumed"] += count
        _add(entry["consumers"], client_id)

    def group(self, group_id: str, *, member: str, committed: dict[str, dict[int, int]] | None = None,
              left: bool = False, assignments: list[dict] | None = None) -> None:
        entry = self.groups.setdefault(group_id, {"members": [], "committed": {}, "left": []})
        _add(entry["members"], member)
        if assignments:
            entry.setdefault("assignments", {})[member] = assignments
        for topic, offsets in (committed or {}).items():
            entry["committed"].setdefault(topic, {}).update({str(p): o for p, o in offsets.items()})
        if left:
            _add(entry["left"], member)

    def error(self, api_name: str, error_name: str, *, client: str, client_id: str, level: str,
              how: str, api_version: int | None = None) -> None:
        if level not in ("top", "nested"):
            raise ValueError(level)
        entry = {"api_name": api_name, "error_name": error_name, "level": level,
                 "client": client, "client_id": client_id, "how": how}
        if api_version is not None:
            entry["api_version"] = api_version
        self.errors.append(entry)

    def expect_unanswered(self, api_name: str, *, client_id: str, expected_status: str, why: str) -> None:
        self.unanswered.append({"api_name": api_name, "client_id": client_id,
                                "expected_status": expected_status, "why": why})

    def to_json(self, trace: ClientTrace, capture_stats: dict[str, Any]) -> dict[str, Any]:
        tls = {"tls": self.tls} if self.tls else {}
        return {**tls,
            "scenario": self.name,
            "description": self.description,
            "capture": self.capture,
            "capture_format": self.capture_format,
            "broker": self.broker,
            "clients": self.clients,
            **({"request_logs": self.request_logs} if self.request_logs else {}),
            **({"cluster": self.cluster} if self.cluster else {}),
            **({"nested_errors": self.nested_errors} if self.nested_errors else {}),
            **({"transactions": self.transactions} if self.transactions else {}),
            "topics": self.topics,
            "groups": self.groups,
            "errors": self.errors,
            "unanswered": self.unanswered,
            "acks0": self.acks0,
            "expectations": self.expectations,
            "notes": self.notes,
            "max_in_flight": trace.max_in_flight(),
            "capture_stats": capture_stats,
            "requests": trace.records(),
        }

    def write(self, path: Path, trace: ClientTrace, capture_stats: dict[str, Any]) -> None:
        text = json.dumps(self.to_json(trace, capture_stats), indent=1, sort_keys=False)
        Path(path).write_text(text + "\n")


def _add(values: list, value: Any) -> None:
    if value not in values:
        values.append(value)
