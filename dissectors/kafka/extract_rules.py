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
"""APIs whose extraction is generated Cython (dissectors/kafka/extract.pyx), compiled: the data path
(Produce, Fetch, ListOffsets, Metadata, DescribeTopicPartitions), consumer groups (classic, KIP-848, share,
streams), offsets, transactions, SASL, ApiVersions, and the inter-broker requests a KRaft cluster sends all the
time (AlterPartition, DescribeCluster, BrokerRegistration, BrokerHeartbeat). The others (admin, ACLs, quotas,
configs, Raft voters...) are rare in captures: one interpreter (_interpret.pyx) runs their programs, which the
generator writes as data (_generated/extract_programs.py) instead of code to compile."""
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
    aborted_transactions: int | None  # Fetch response v4+: its aborted_transactions entries (None: a null array)
    first_aborted_offset: int | None  # Fetch response v4+: the smallest first_offset of those (None: none listed)
    records_offset: int | None  # where the records field's bytes start in ``buf`` (None if null or absent)
    record_bytes: int | None  # the records field's length


ROW_ARRAYS = {"aborted_transactions": ("aborted_transactions", "first_offset", "first_aborted_offset")}
"""Schema name of an array of structs in a partition row -> (the PartitionEntry field its element count fills, an
integer field of its elements, the PartitionEntry field the smallest of those fills). A null array fills neither,
an empty one the count (0) only. Only the count and that one field are read: the elements' other fields (fixed
size, and a tag buffer) are stepped over. The compiled functions read them (APIs of HOT_APIS); the programs of
the others have no operation for them (the generator stops if one of those APIs has such an array)."""
ROW_ARRAY_FIELDS = frozenset(name for count, _, least in ROW_ARRAYS.values() for name in (count, least))
ROW_FIELDS = {name: name for name in PartitionEntry._fields[2:-2] if name not in ROW_ARRAY_FIELDS}
"""Schema field name -> PartitionEntry field it fills (a scalar of the struct; ROW_ARRAYS: the others)."""
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
        # arrays of structs a partition row counts (ROW_ARRAYS)
        self.row_arrays = [e[0] for e in self.fields if self.rows and e[0] in ROW_ARRAYS
                           and e[1].endswith("array") and isinstance(e[2] if len(e) > 2 else None, tuple)]
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


# ---------------------------------------------------------------------------------------------------------
# The programs of the APIs outside HOT_APIS (dissectors/kafka/_interpret.pyx runs them)

PROGRAM_OPS: tuple[tuple[str, int], ...] = (
    # reading a struct's fields (each stops the struct at the first failure, as the generated functions do)
    ("skip", 1),  # n: move n bytes on, unchecked (the next read or the struct's end sees it)
    ("check", 2),  # n, where: truncated unless n bytes are in view (a run of fixed-size fields with one kept)
    ("read", 2),  # type, target: a fixed-size field, in view
    ("topic_id", 3),  # id slot, name slot or NO_TARGET, report: the struct named by its topic id
    ("topic_name", 6),  # compact, nullable, where, slot, id slot or NO_TARGET, report: a topic name
    ("topic_list", 4),  # compact, compact names, nullable names, where: an array of topic names
    ("partition_list", 4),  # compact, nullable, where, rows: an int32 array of partition indexes
    ("struct_array", 4),  # compact, nullable, where, program: an array of structs something in which is needed
    ("nullable_struct", 2),  # where, program
    ("struct", 1),  # program
    ("records", 2),  # compact, where: a partition row's records (their place and length)
    ("read_str", 4),  # compact, nullable, where, slot: a string kept
    ("lenient", 3),  # width, element size, where: a string, bytes or fixed-size array nothing needs, by its length
    ("lenient_compact", 4),  # element size, array, width, nullable: the same, compact (else skip_sized/skip_array)
    ("skip_sized", 3),  # compact, width, nullable: a string, bytes or records skipped strictly
    ("skip_struct", 1),  # program: a struct of variable size nothing in which is needed
    ("skip_nullable_struct", 2),  # program or NO_TARGET, size
    ("skip_array", 7),  # compact, nullable, element size or NO_TARGET, program or NO_TARGET, then a string
    #                     element's compact, width, nullable
    ("skip_tags", 0),  # a tag buffer nothing in which is needed
    ("tags", 2),  # where, handlers; then each handler: tag, its length in words, kind (TAG_...), what the kind needs
    ("check_end", 1),  # where: truncated if the struct ran past the end
    ("done", 0),  # the fields are read: the reports follow (also when the bytes ended first)
    # reporting what was read (after the fields, or what was read of them when the bytes ended first)
    ("partition", 0),  # a partition counted (cut short before it was read: nothing reported)
    ("row", 1),  # the number of typed values, then their PartitionEntry value indexes: a partition row
    ("error", 3),  # field path, code target, message slot or NO_TARGET: an error row if the code is not 0
    ("top", 2),  # TOP_FIELD_NAMES index, slot
    ("body", 2),  # name, slot: a field of BODY_FIELDS
    ("tag_field", 2),  # name, slot: a tagged struct's field of BODY_FIELDS, when the tag was there
    ("return", 0),
)
"""A program's operations (their codes are their indexes here) and how many operand words follow each code.
A program is a header (object slots, slots with those of the programs it calls, whether it makes partition rows,
where its reports start) and its operations; ``where`` and names are indexes into the programs' strings. A
target is a slot (>= 0), ``TARGET_PARTITION``, or ``TARGET_VALUE - i`` for PartitionEntry value i read unboxed.
``tags`` handlers: ``TAG_FIXED`` (type, target), ``TAG_STRING`` (compact, nullable, slot), ``TAG_STRUCT``
(total size, where, fields, then each field's type and target or NO_TARGET)."""
PROGRAM_HEADER = 4
PROGRAM_OPERANDS = {"struct_array": 3, "nullable_struct": 1, "struct": 0, "skip_struct": 0, "skip_nullable_struct": 0,
                    "skip_array": 3}
"""Operation -> the index of its operand that is a program (NO_TARGET where there is none)."""
STRING_OPERANDS = {"check": 1, "topic_name": 2, "topic_list": 3, "partition_list": 2, "struct_array": 2,
                   "nullable_struct": 0, "records": 1, "read_str": 2, "lenient": 2, "tags": 0, "check_end": 0,
                   "error": 0, "body": 0, "tag_field": 0}
"""Operation -> the index of its operand that is a string (a field path, or a name)."""
PROGRAM_TYPES = ("bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid")
TOP_FIELD_NAMES = ("error_code", "throttle_time_ms", "acks", "transactional_id")
NO_TARGET = -100
TARGET_PARTITION = -1
TARGET_VALUE = -2
TAG_FIXED, TAG_STRING, TAG_STRUCT = range(3)


def check_programs(programs: tuple[tuple[int, ...], ...], strings: tuple[str, ...], entry_points: tuple) -> None:
    """ValueError unless the programs are what the interpreter can run safely: every operand in range (a slot
    inside the program's window, a string, a program, a type), the operations in order (fields, ``done`` where
    the header says the reports start, reports, ``return``), a program's slots with those of the programs it
    calls within its total, and the programs a skip calls made of skips only. The interpreter checks its
    programs with this at import, and the generator what it writes."""
    op = {name: code for code, (name, _) in enumerate(PROGRAM_OPS)}
    arity = [operands for _, operands in PROGRAM_OPS]
    skips_only = {op[name] for name in ("skip", "skip_sized", "skip_struct", "skip_nullable_struct", "skip_array",
                                        "skip_tags", "check_end", "done", "return")}
    skipping: set[int] = set()
    for number, words in enumerate(programs):
        try:
            _check_program(number, words, programs, strings, skipping)
        except IndexError:
            raise ValueError(f"extract_programs.PROGRAMS[{number}]: an operation cut short") from None
    for number in skipping:
        words = programs[number]
        i = PROGRAM_HEADER
        while i < len(words):
            if words[i] not in skips_only:
                raise ValueError(f"extract_programs.PROGRAMS[{number}]: a skipping program that does more")
            i += 1 + arity[words[i]]
    for entry in entry_points:
        if len(entry) != 4 or not all(-1 <= program < len(programs) for program in entry[3]):
            raise ValueError(f"extract_programs.ENTRY_POINTS: {entry[:3]}")


def _check_program(number: int, words: tuple[int, ...], programs: tuple[tuple[int, ...], ...],
                   strings: tuple[str, ...], skipping: set[int]) -> None:
    """check_programs for one program (the programs a skip in it calls added to ``skipping``)."""
    op = {name: code for code, (name, _) in enumerate(PROGRAM_OPS)}
    arity = [operands for _, operands in PROGRAM_OPS]
    values = len(PartitionEntry._fields) - 1  # the unboxed values of a partition row

    def bad(why: str) -> ValueError:
        return ValueError(f"extract_programs.PROGRAMS[{number}]: {why}")

    if len(words) <= PROGRAM_HEADER:
        raise bad("no operations")
    slots, total, rows, report_at = words[:PROGRAM_HEADER]
    if not (0 <= slots <= total and rows in (0, 1) and PROGRAM_HEADER < report_at < len(words)):
        raise bad("header")

    def slot(value: int) -> None:
        if not 0 <= value < slots:
            raise bad(f"slot {value}")

    def target(value: int) -> None:
        if not (value == TARGET_PARTITION or rows and TARGET_VALUE - values < value <= TARGET_VALUE):
            slot(value)

    def called(value: int, skips: bool = False) -> None:
        if skips and value == NO_TARGET:
            return
        if not 0 <= value < len(programs):
            raise bad(f"program {value}")
        if skips:
            skipping.add(value)
        elif slots + programs[value][1] > total:
            raise bad(f"fewer slots than program {value} uses")

    def kind(value: int) -> None:
        if not 0 <= value < len(PROGRAM_TYPES):
            raise bad(f"type {value}")

    i = PROGRAM_HEADER
    done = False
    while i < len(words):
        code = words[i]
        if not 0 <= code < len(PROGRAM_OPS) or (code >= op["partition"]) != done:
            raise bad(f"operation at {i}")
        name = PROGRAM_OPS[code][0]
        o = words[i + 1:i + 1 + arity[code]]
        if len(o) != arity[code]:
            raise bad(f"operation at {i} cut short")
        if name in STRING_OPERANDS and not 0 <= o[STRING_OPERANDS[name]] < len(strings):
            raise bad(f"string {o[STRING_OPERANDS[name]]}")
        if name in PROGRAM_OPERANDS:
            called(o[PROGRAM_OPERANDS[name]], skips=name.startswith("skip"))
        if name == "read":
            kind(o[0])
            target(o[1])
            if o[1] <= TARGET_VALUE and PROGRAM_TYPES[o[0]] in ("float64", "uuid"):
                raise bad("an unboxed value of that type")
        elif name == "topic_id":
            slot(o[0])
            if o[1] != NO_TARGET:
                slot(o[1])
        elif name == "topic_name":
            slot(o[3])
            if o[4] != NO_TARGET:
                slot(o[4])
        elif name == "records" and not rows:
            raise bad("records outside a row")
        elif name == "read_str":
            slot(o[3])
        elif name == "tags":
            h = i + 1 + arity[code]
            for _ in range(o[1]):
                if h + 2 >= len(words) or words[h + 2] not in (TAG_FIXED, TAG_STRING, TAG_STRUCT):
                    raise bad(f"tag handler at {h}")
                length = words[h + 1]
                if words[h + 2] == TAG_FIXED:
                    if length != 5 or words[h + 4] == TARGET_PARTITION:
                        raise bad(f"tag handler at {h}")
                    kind(words[h + 3])
                    target(words[h + 4])
                elif words[h + 2] == TAG_STRING:
                    if length != 6:
                        raise bad(f"tag handler at {h}")
                    slot(words[h + 5])
                else:
                    if h + 5 >= len(words) or length != 6 + 2 * words[h + 5] or h + length > len(words) \
                            or not 0 <= words[h + 4] < len(strings):
                        raise bad(f"tag handler at {h}")
                    for k in range(words[h + 5]):
                        kind(words[h + 6 + 2 * k])
                        if words[h + 7 + 2 * k] != NO_TARGET:
                            slot(words[h + 7 + 2 * k])
                h += length
            i = h - 1 - arity[code]
        elif name == "done":
            done = True
            if i + 1 != report_at:
                raise bad("the reports are not where the header says")
        elif name == "row":
            indexes = words[i + 2:i + 2 + o[0]]
            if not rows or len(indexes) != o[0] or not all(0 <= index < values for index in indexes):
                raise bad("row")
            i += o[0]
        elif name == "error":
            target(o[1])
            if o[1] == TARGET_PARTITION:
                raise bad("an error code in the partition")
            if o[2] != NO_TARGET:
                slot(o[2])
        elif name == "top":
            if not 0 <= o[0] < len(TOP_FIELD_NAMES):
                raise bad("top field")
            slot(o[1])
        elif name in ("body", "tag_field"):
            slot(o[1])
        elif name == "return" and i + 1 != len(words):
            raise bad("words after the return")
        i += 1 + arity[code]
    if not done or words[-1] != op["return"]:
        raise bad("no end")
