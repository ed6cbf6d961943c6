"""The cluster as the capture saw it: the ``cluster`` table, read from Metadata and DescribeTopicPartitions
responses.

The compiled matcher hands every such response it holds whole to :class:`ClusterView`, which decodes it with
the full decoder. Clients ask for Metadata every few seconds to minutes and nearly always hear the same
answer, so a row stands for a state (a broker's address, the controller id, a partition's leader and ISR)
from the first response that reported it to the last one before it changed: the rows say what changed and
when, not how often a client asked. Only these two APIs come here; the hot path never does.

The matcher reads a chunk of the capture connection by connection, so within a chunk responses arrive here
out of capture order: each response's states are kept as they come, and between chunks (``settle``), when every
later response is later in time too, each state's runs are put in order and joined. The rows leave when the
file ends.
"""

from __future__ import annotations

from analyzer.tables.schemas import id_text
from dissectors.kafka.decoder import decode
from dissectors.kafka.headers import HeaderError

METADATA, DESCRIBE_TOPIC_PARTITIONS = 3, 75
CLUSTER_APIS = frozenset((METADATA, DESCRIBE_TOPIC_PARTITIONS))
API_NAMES = {METADATA: "Metadata", DESCRIBE_TOPIC_PARTITIONS: "DescribeTopicPartitions"}
MAX_BODY_BYTES = 8 << 20  # a bigger response (a cluster of some 100,000 partitions) costs seconds to decode
MAX_ROWS = 200_000  # rows made per file (or per process of a file split across processes)
_NO_ID = bytes(16)  # the zero UUID: a topic without an id

# A row, as a list in CLUSTER_ROW_FIELDS order (analyzer.tables.schemas) but for error_name (named when the
# batch is made) and with the topic id as bytes until then.
(KIND, CLUSTER_ID, NODE_ID, HOST, PORT, RACK, TOPIC, TOPIC_ID, PARTITION, LEADER_ID, LEADER_EPOCH, REPLICAS, ISR,
 OFFLINE, ERROR_CODE, ERROR_NAME, FIRST_SEEN, LAST_SEEN, RESPONSES, CONNECTION_ID, FIRST_FRAME, LAST_FRAME,
 REPORTED_BY_IP, REPORTED_BY_PORT, API_NAME, API_VERSION, NOTE) = range(27)
_SETS = (ISR, OFFLINE)  # node lists whose order means nothing (replicas: the first is the preferred leader)
_ABSENT = "absent"  # a broker run of responses that did not list it (dropped when the rows are made)
_STATE = {"broker": (HOST, PORT, RACK), "controller": (NODE_ID,), _ABSENT: (),
          "partition": (TOPIC_ID, LEADER_ID, LEADER_EPOCH, REPLICAS, ISR, OFFLINE, ERROR_CODE)}


def _same(row: list, new: list) -> bool:
    """Whether ``new`` reports the state of ``row``: equal wherever both know the field (an older version
    that lacks leader_epoch or the topic id says nothing against a newer one that has them)."""
    return row[KIND] == new[KIND] and all(row[i] is None or new[i] is None or row[i] == new[i]
                                          or (i in _SETS and sorted(row[i]) == sorted(new[i]))
                                          for i in _STATE[row[KIND]])


def _join(run: list, other: list) -> None:
    """``other`` (the same state) into ``run``: the times widened, the first and last responses kept, what
    only one of them knows filled in."""
    for i in _STATE[run[KIND]]:
        if run[i] is None:
            run[i] = other[i]
    if other[FIRST_SEEN] < run[FIRST_SEEN]:
        run[FIRST_SEEN], run[FIRST_FRAME], run[CONNECTION_ID] = other[FIRST_SEEN], other[FIRST_FRAME], \
            other[CONNECTION_ID]
        run[REPORTED_BY_IP], run[REPORTED_BY_PORT] = other[REPORTED_BY_IP], other[REPORTED_BY_PORT]
        run[API_NAME], run[API_VERSION] = other[API_NAME], other[API_VERSION]
    if other[LAST_SEEN] > run[LAST_SEEN]:
        run[LAST_SEEN], run[LAST_FRAME] = other[LAST_SEEN], other[LAST_FRAME]
    run[RESPONSES] += other[RESPONSES]


def _in_order(runs: list[list]) -> list[list]:
    """One key's runs by time, each joined with the next where both report the same state."""
    out: list[list] = []
    for run in sorted(runs, key=lambda r: (r[FIRST_SEEN], r[LAST_SEEN])):
        if out and _same(out[-1], run):
            _join(out[-1], run)
        else:
            out.append(run)
    return out


def _nodes(values: list | None) -> list[int] | None:
    return None if values is None else list(values)


class ClusterView:
    """The runs of each broker's, controller's and partition's states in one file, until the file ends."""

    __slots__ = ("topic_names", "runs", "known", "made", "left_out", "too_big", "unreadable", "cluster_of",
                 "unsettled")

    def __init__(self, topic_names: dict[bytes, str] | None = None) -> None:
        self.topic_names = topic_names if topic_names is not None else {}  # topic id -> name, learnt elsewhere
        # key -> its runs; a partition of a DescribeTopicPartitions response is keyed by the reporting broker's
        # address until the rows are made (its cluster id comes from Metadata)
        self.runs: dict[tuple, list[list]] = {}
        self.unsettled: set[tuple] = set()  # keys with runs added since the last settle
        self.known: dict[str | None, set[int]] = {}  # cluster id -> node ids listed so far
        self.made = 0  # runs held
        self.left_out = 0  # changes not recorded: MAX_ROWS reached
        self.too_big = 0  # responses over MAX_BODY_BYTES, not read
        self.unreadable = 0  # responses the full decoder refused
        self.cluster_of: dict[tuple[str, int], str | None] = {}  # broker address -> cluster id it reported

    def __len__(self) -> int:
        return self.made

    def add(self, connection_id: int, ts: int, frame: int, broker_ip: str, broker_port: int, key: int,
            version: int, buf, off: int, end: int) -> None:
        """A response of ``key`` (Metadata or DescribeTopicPartitions) held whole: its body is ``buf[off:end]``,
        its last packet ``frame`` at ``ts`` (ns), on a connection to ``broker_ip:broker_port``."""
        if end - off > MAX_BODY_BYTES:
            self.too_big += 1
            return
        try:
            body = decode(buf, off, end, key, version, True)
        except (HeaderError, ValueError, OverflowError, IndexError, KeyError, TypeError):
            self.unreadable += 1
            return
        source = (ts, frame, connection_id, broker_ip, broker_port, API_NAMES[key], version)
        if key == METADATA:
            cluster: object = body.get("cluster_id")
            self.cluster_of[(broker_ip, broker_port)] = cluster
            self._brokers(cluster, body.get("brokers") or (), source)
            controller = body.get("controller_id")
            if controller is not None:
                row = self._row("controller", cluster, source)
                row[NODE_ID] = controller
                self._see(("controller", cluster), row)
        else:
            cluster = ("address", broker_ip, broker_port)
        for topic in body.get("topics") or ():
            self._topic(cluster, topic, source)

    def _brokers(self, cluster: str | None, brokers, source: tuple) -> None:
        listed = set()
        for b in brokers:
            node = b.get("node_id")
            listed.add(node)
            row = self._row("broker", cluster, source)
            row[NODE_ID], row[HOST], row[PORT], row[RACK] = node, b.get("host"), b.get("port"), b.get("rack")
            self._see(("broker", cluster, node), row)
        known = self.known.setdefault(cluster, set())
        for node in known - listed:  # not listed (stopped, fenced): a run without it parts the ones with it
            row = self._row(_ABSENT, cluster, source)
            row[NODE_ID] = node
            self._see(("broker", cluster, node), row)
        known |= listed

    def _topic(self, cluster: object, topic: dict, source: tuple) -> None:
        topic_id = topic.get("topic_id")
        if topic_id == _NO_ID:
            topic_id = None
        name = topic.get("name")
        which = name if name is not None else topic_id
        if which is None:
            return
        for p in topic.get("partitions") or ():
            index = p.get("partition_index")
            row = self._row("partition", cluster, source)
            row[TOPIC], row[TOPIC_ID], row[PARTITION] = name, topic_id, index
            row[LEADER_ID], row[LEADER_EPOCH], row[ERROR_CODE] = p.get("leader_id"), p.get("leader_epoch"), \
                p.get("error_code")
            row[REPLICAS], row[ISR] = _nodes(p.get("replica_nodes")), _nodes(p.get("isr_nodes"))
            row[OFFLINE] = _nodes(p.get("offline_replicas"))
            self._see(("partition", cluster, which, index), row)

    @staticmethod
    def _row(kind: str, cluster: object, source: tuple) -> list:
        ts, frame, connection_id, ip, port, api_name, version = source
        row: list = [None] * (NOTE + 1)
        row[KIND], row[CLUSTER_ID] = kind, cluster
        row[FIRST_SEEN] = row[LAST_SEEN] = ts
        row[FIRST_FRAME] = row[LAST_FRAME] = frame
        row[RESPONSES], row[CONNECTION_ID], row[REPORTED_BY_IP], row[REPORTED_BY_PORT] = 1, connection_id, ip, port
        row[API_NAME], row[API_VERSION] = api_name, version
        return row

    def _see(self, key: tuple, new: list) -> None:
        """``new`` reported now: a run of its own until ``settle`` joins it with its neighbours in time."""
        if self.made >= MAX_ROWS:
            self.settle()
            if self.made >= MAX_ROWS:
                self.left_out += 1
                return
        self.made += 1
        self.runs.setdefault(key, []).append(new)
        self.unsettled.add(key)

    def settle(self) -> None:
        """Put the runs added since the last call in time order and join them: call it between chunks of the
        capture, when every response still to come is later than those seen (or when the runs fill up)."""
        runs = self.runs
        for key in self.unsettled:
            before = runs[key]
            runs[key] = after = _in_order(before)
            self.made -= len(before) - len(after)
        self.unsettled.clear()

    def note(self) -> str | None:
        """What the rows leave out, or None."""
        parts = []
        if self.too_big:
            parts.append(f"{self.too_big:,} responses over {MAX_BODY_BYTES >> 20} MiB not read")
        if self.unreadable:
            parts.append(f"{self.unreadable:,} responses not decodable")
        if self.left_out:
            parts.append(f"{self.left_out:,} later changes not recorded: the file reached {MAX_ROWS:,} cluster rows")
        return "; ".join(parts) or None

    def drain(self) -> list[tuple]:
        """Every row, as tuples in CLUSTER_ROW_FIELDS order, and the view emptied (the file ended): runs in
        time order and joined, a DescribeTopicPartitions partition given the cluster id its broker reported,
        topic ids named by the names known now (else in UUID form)."""
        names, cluster_of = self.topic_names, self.cluster_of
        keyed: dict[tuple, list[list]] = {}
        for key, runs in self.runs.items():
            if key[0] == "partition":
                cluster, topic = key[1], key[2]
                if isinstance(cluster, tuple):
                    cluster = cluster_of.get(cluster[1:])
                    for run in runs:
                        run[CLUSTER_ID] = cluster
                if isinstance(topic, bytes):
                    topic = names.get(topic, topic)
                key = ("partition", cluster, topic, key[3])
            keyed.setdefault(key, []).extend(runs)
        note = self.note()
        rows = []
        for runs in keyed.values():
            for row in _in_order(runs):
                if row[KIND] == _ABSENT:
                    continue
                row[NOTE] = note
                topic_id = row[TOPIC_ID]
                if topic_id is not None:
                    if row[TOPIC] is None:
                        row[TOPIC] = names.get(topic_id) or id_text(topic_id)
                    row[TOPIC_ID] = id_text(topic_id)
                rows.append(tuple(row))
        self.runs, self.known, self.made, self.unsettled = {}, {}, 0, set()
        return rows
