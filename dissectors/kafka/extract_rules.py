"""What extraction takes from a schema struct in its scope: the result types, the limits, and the rules of
:mod:`dissectors.kafka.extract` (what is a topic, a partition, an error) applied to one struct.

Kept apart from the compiled extraction so that the generator (which writes that extraction as Cython from
these rules) imports it without the extension module being built.
"""

from __future__ import annotations

from typing import NamedTuple

Topic = str | bytes
"""A topic name, or a topic id (its 16 bytes) where the version names topics by id."""

ZERO_UUID = bytes(16)
METADATA_TOPIC_ID = bytes(15) + b"\x01"  # KRaft's metadata log, by id only on the wire (Kafka's Uuid.METADATA_TOPIC_ID)
WELL_KNOWN_TOPIC_IDS = {METADATA_TOPIC_ID: "__cluster_metadata"}  # names no Metadata response gives
PARTITION_APIS = frozenset({0, 1, 2, 8, 9, 21, 23})
"""APIs with per-partition detail: Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords,
OffsetForLeaderEpoch."""
PRODUCE = 0
HOT_APIS = frozenset({
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 22, 23, 24, 25, 26, 28, 36, 56, 60, 62, 63, 68, 69, 75,
    76, 78, 79, 88})
"""APIs whose extraction is compiled with full optimisation (dissectors/kafka/_extract.pyx): the data path
(Produce, Fetch, ListOffsets, Metadata, DescribeTopicPartitions), consumer groups (classic, KIP-848, share,
streams), offsets, transactions, SASL, ApiVersions, and the inter-broker requests a KRaft cluster sends all the
time (AlterPartition, DescribeCluster, BrokerRegistration, BrokerHeartbeat). The others (admin, ACLs, quotas,
configs, Raft voters...) are rare in captures: their code is built with less optimisation (_extract_cold.pyx)."""
# What one body may add to the tables, whatever its array counts claim (a 16 MB OffsetFetch response names 4 M
# partitions, a Metadata request 8 M empty topics): past these the rest is counted, not kept. No real body
# comes near them (a broker's whole partition count is rarely above a few hundred thousand).
MAX_PARTITION_ROWS = 100_000  # PartitionEntry rows per body
MAX_ERROR_ROWS = 100_000  # ErrorEntry rows per body
MAX_TOPICS = 10_000  # distinct topics per body
PARTITION_FIELDS = frozenset({"partition_index", "partition", "index", "partition_id"})
PARTITION_LISTS = frozenset({"partitions", "partition_indexes"})
ROW_PARTITION_LISTS = frozenset({"partition_indexes"})  # OffsetFetch requests list partitions as int32s


class ErrorEntry(NamedTuple):
    """One non-zero error code field of a response."""

    field_path: str  # dotted field names without indices: "responses.partitions.error_code"
    topic: Topic | None  # the enclosing topic, if any
    partition: int | None  # the enclosing partition, if any
    error_code: int
    error_message: str | None  # the message field next to the code, when the version has one


class PartitionEntry(NamedTuple):
    """One topic-partition of Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords or
    OffsetForLeaderEpoch. A field is None when that API and version does not carry it."""

    topic: Topic | None
    partition: int
    error_code: int | None  # responses
    base_offset: int | None  # Produce response: offset of the first appended record
    log_append_time_ms: int | None  # Produce response (-1 unless the topic uses log-append time)
    log_start_offset: int | None  # Produce response v5+, Fetch request and response
    high_watermark: int | None  # Fetch response
    last_stable_offset: int | None  # Fetch response v4+
    fetch_offset: int | None  # Fetch request
    committed_offset: int | None  # OffsetCommit request, OffsetFetch response
    offset: int | None  # ListOffsets response v1+, DeleteRecords request (delete before it)
    low_watermark: int | None  # DeleteRecords response
    end_offset: int | None  # OffsetForLeaderEpoch response
    timestamp: int | None  # ListOffsets request (the query) and response v1+
    leader_epoch: int | None  # leader_epoch, or committed_leader_epoch (OffsetCommit, OffsetFetch)
    current_leader_epoch: int | None  # Fetch, ListOffsets and OffsetForLeaderEpoch requests
    records_offset: int | None  # where the records field's bytes start in ``buf`` (None if null or absent)
    record_bytes: int | None  # the records field's length


ROW_FIELDS = {name: name for name in PartitionEntry._fields[2:-2]}
"""Schema field name -> PartitionEntry field it fills."""
ROW_FIELDS["committed_leader_epoch"] = "leader_epoch"


class Extracted(NamedTuple):
    """What one request or response body contributes to the tables."""

    topics: list[Topic]  # every topic mentioned, in order of first appearance, without repeats
    partition_count: int  # topic-partition entries (array elements; repeats counted)
    errors: list[ErrorEntry]  # every non-zero error code of a response, innermost structs first
    top_error: int | None  # the response's top-level error_code, if the version has one
    throttle_time_ms: int | None  # the response's top-level throttle_time_ms, wherever it sits
    partitions: list[PartitionEntry]  # per topic-partition detail, for the APIs PARTITION_APIS names
    acks: int | None  # Produce requests
    transactional_id: str | None  # Produce requests v3+
    complete: bool  # False when ``partial`` extraction stopped at ``end`` (a frame cut short)
    topic_ids: dict[bytes, str] | None = None  # topic id -> name, from structs that carry both (Metadata v10+)
    # None, or what the limits left out: [partition rows, error rows, topic mentions] (MAX_PARTITION_ROWS...)
    left_out: list[int] | None = None
    # The top-level fields of BODY_FIELDS that this API and version has, by name (None when it has none)
    fields: dict[str, object] | None = None


TOP_FIELDS = {False: ("acks", "transactional_id"), True: ("error_code", "throttle_time_ms")}
"""is_response -> top-level fields kept (acks and transactional_id for Produce requests only)."""

_GROUP_MEMBER = ("group_id", "generation_id", "member_id", "group_instance_id")
BODY_FIELDS: dict[tuple[int, bool], tuple[str, ...]] = {
    (0, False): ("timeout_ms",),  # Produce
    (1, False): ("max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "session_id", "session_epoch",
                 "replica_id", "replica_state.replica_id", "replica_state.replica_epoch"),  # who fetches (KIP-903)
    (2, False): ("isolation_level",),  # ListOffsets v2+
    (8, False): ("group_id", "generation_id_or_member_epoch", "generation_id", "member_id", "group_instance_id"),
    (9, False): ("group_id",),  # OffsetFetch before v8 (v8+ asks for several groups)
    (10, False): ("key", "key_type"),  # FindCoordinator before v4: one key, a group unless key_type says not
    (11, False): ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id",
                  "protocol_type"),
    (11, True): ("generation_id", "protocol_type", "protocol_name", "leader", "member_id"),
    (12, False): _GROUP_MEMBER,  # Heartbeat
    (13, False): ("group_id", "member_id"),  # LeaveGroup (v3+ names its members in an array)
    (14, False): (*_GROUP_MEMBER, "protocol_type", "protocol_name"),  # SyncGroup
    (14, True): ("protocol_type", "protocol_name"),
    (18, False): ("client_software_name", "client_software_version"),  # ApiVersions v3+
    (22, False): ("transactional_id",),  # InitProducerId
    (24, False): ("transactional_id",),  # AddPartitionsToTxn before v4
    (25, False): ("transactional_id", "group_id"),  # AddOffsetsToTxn
    (26, False): ("transactional_id",),  # EndTxn
    (28, False): ("transactional_id", *_GROUP_MEMBER),  # TxnOffsetCommit
    (68, False): ("group_id", "member_id", "member_epoch", "instance_id", "rebalance_timeout_ms"),
    (68, True): ("member_id", "member_epoch", "heartbeat_interval_ms"),  # ConsumerGroupHeartbeat
}
"""(api key, is_response) -> top-level scalar fields read into ``Extracted.fields``, by their names in the
message definitions: the request settings an operator asks about (timeouts, waits, isolation, fetch sessions,
client software) and what places an exchange in a consumer group (group, member, generation). A dotted name
reads a fixed-size field of a tagged struct at the top level (Fetch v15+'s replica_state)."""
FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
               "uuid": 16}
ANY_REQUEST_FIELDS = ("timeout_ms",)  # read from the top level of any request that has it (admin APIs' too)


class Scope(NamedTuple):
    """Where a struct sits, which decides what its fields mean there."""

    api_key: int
    is_response: bool
    path: str  # dotted field names down to this struct ("" at the top level)
    top: bool
    element: bool  # an element of an array
    in_topic: bool  # an enclosing struct names a topic


def child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class StructRules:
    """The rules applied to one struct in one scope: which field names its topic (by name or id), which is
    its partition, which are error codes, which top-level values are kept, and what else a report needs."""

    def __init__(self, struct_schema: tuple, scope: Scope, struct_name: str = "struct") -> None:
        self.fields, self.tagged = struct_schema
        self.struct_name = struct_name
        self.scope = scope
        tagged_entries = [t[1:] for t in self.tagged or ()]
        everything = [*self.fields, *tagged_entries]
        self.topic_name = next((e[0] for e in self.fields if len(e) > 3 and e[3] == "topicName"
                                and e[1].endswith("string")), None)
        self.topic_id = next((e[0] for e in self.fields if e[0] == "topic_id" and e[1] == "uuid"), None)
        self.has_topic = self.topic_name is not None or self.topic_id is not None
        # the topic is reported as soon as the last field that names it is read
        names_topic = (self.topic_name, self.topic_id)
        self.topic_ready = next((e[0] for e in reversed(self.fields) if e[0] in names_topic), None)
        self.in_topic = scope.in_topic or self.has_topic
        self.partition = None
        if scope.element and self.in_topic:
            self.partition = next((e[0] for e in self.fields if e[0] in PARTITION_FIELDS and e[1] == "int32"),
                                  None)
        self.rows = self.partition is not None and scope.api_key in PARTITION_APIS
        self.errors = [e[0] for e in everything if scope.is_response and e[1] == "int16"
                       and (e[0] == "error_code" or e[0].endswith("_error_code"))]
        self.top_fields = []
        if scope.top and (scope.is_response or scope.api_key == PRODUCE):
            self.top_fields = [e[0] for e in everything if e[0] in TOP_FIELDS[scope.is_response]]
        self.body_fields = []
        if scope.top:
            wanted = BODY_FIELDS.get((scope.api_key, scope.is_response), ())
            if not scope.is_response:
                wanted = (*wanted, *ANY_REQUEST_FIELDS)
            self.body_fields = [e[0] for e in everything if e[0] in wanted and not isinstance(
                e[2] if len(e) > 2 else None, tuple) and not e[1].endswith("array")]
        self.tag_kept = [e[0] for e in tagged_entries if self.wanted(e[0], e[1])]
        # a tagged struct's leading fixed-size fields a dotted BODY_FIELDS name asks for:
        # struct name -> [(field name, type, wanted)] up to the last one wanted
        self.tag_struct_fields: dict[str, list[tuple[str, str, bool]]] = {}
        if scope.top:
            for entry in tagged_entries:
                element = entry[2] if len(entry) > 2 else None
                if not isinstance(element, tuple) or entry[1] not in ("struct", "nullable_struct"):
                    continue
                wanted_here = {name.split(".", 1)[1] for name in wanted if name.startswith(f"{entry[0]}.")}
                if not wanted_here:
                    continue
                leading: list[tuple[str, str, bool]] = []
                for sub in element[0]:
                    if not wanted_here - {name for name, _, keep in leading if keep}:
                        break
                    if sub[1] not in FIXED_SIZES:
                        raise ValueError(f"{self.struct_name}.{entry[0]}: {sub[0]} is not of a fixed size")
                    leading.append((sub[0], sub[1], sub[0] in wanted_here))
                self.tag_struct_fields[entry[0]] = leading
        if any(e[3:] == ("topicName",) or e[0] == "topic_id" for e in tagged_entries):
            raise ValueError(f"{self.struct_name}: a tagged topic field, which no definition has had so far")

    def wanted(self, name: str, type_name: str) -> bool:
        """Whether a scalar field's value is used once the struct is read."""
        if name in (self.topic_name, self.topic_id) or name in self.errors or name in self.top_fields \
                or name in self.body_fields:
            return True
        if self.rows and (name in ROW_FIELDS or type_name.endswith("records")):
            return True
        code = name.removesuffix("error_message") + "error_code"
        return name.endswith("error_message") and code in self.errors

    def reports(self) -> bool:
        """Whether the struct reports anything itself (a topic, a partition, an error, a top-level value)."""
        return bool(self.has_topic or self.partition is not None or self.errors or self.top_fields
                    or self.body_fields or self.tag_struct_fields)
