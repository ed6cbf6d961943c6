"""kafkacap's tables agree with tshark 4.0.17 on topics, topic-partitions and error codes, PDU by PDU.

tshark is an independent, hand-written Kafka dissector (Wireshark's packet-kafka.c). Wherever it decodes a
message completely, the ``exchanges``, ``partitions`` and ``errors`` rows kafkacap writes for that exchange
must say what tshark says. Captures: every third-party capture in ../shared/pcaps/public (ports from its
SOURCES.md) and every sample capture in sample_pcaps (broker port from its truth file).

How tshark is read. One run per capture, ``-T pdml`` (XML that keeps the dissection tree), trimmed with
``-J "kafka _ws.malformed"``. Each ``<proto name="kafka">`` is one Kafka PDU, however many a TCP segment
carries; the IP and TCP shownames of its packet give the addresses and ports. ``-T fields`` would flatten
nested fields per frame, losing which topic a partition belongs to and which PDU a field belongs to.

Which PDUs count. tshark 4.0 decodes only some API versions (many flexible versions are "Unsupported").
A (api_key, api_version, direction) class is decoded when tshark never flags one of its PDUs as an
unsupported version or unknown API key. Within such a class a PDU is compared only when tshark also
dissected it to the end without complaint: no ``[Malformed Packet]`` (the exception tshark shows after, or
inside, the PDU), no expert item of group Malformed (``pdu_length_mismatch``, ``bad_string_length``, ...),
and for a response, a known request (no ``kafka.request_missing``). The ``Unsupported ... version``
items inside an ApiVersions response annotate the listed ranges, not the PDU, so only the version and key
fields of the PDU's own header are looked at for those.

How tshark's nesting maps onto kafkacap's rows. tshark lists ``kafka.topic_name`` inside a topic subtree
and ``kafka.partition_id``/``kafka.error`` inside partition subtrees of it (the order inside a subtree
varies: Metadata puts a topic's error before its name). So every field is placed by the nearest
``kafka.topic_name`` and ``kafka.partition_id`` that is a child of one of its enclosing subtrees:
  * topics: every non-null ``kafka.topic_name`` (and ``kafka.forgotten_topic_name``, a Fetch request's
    forgotten topics) in the PDU. kafkacap's ``topics`` is the union of request and response, so the
    union of the compared directions must be contained in it, and equal it when every PDU the exchange
    has was compared.
  * topic-partitions (the seven partition APIs only): each ``kafka.partition_id`` with its topic (not a
    Fetch request's ``kafka.forgotten_topic_partition``: kafkacap has no row for a forgotten partition).
    kafkacap's ``partitions`` table merges request and response by (topic, partition): a row carries the
    response's partition error code, null when only the request named it. So the response's (topic,
    partition, error) multiset must equal the rows with an error code, the request's pairs must be rows,
    and with both directions compared the rows are exactly the union of both directions' pairs.
  * errors: every ``kafka.error`` other than 0 in a response, with its topic and partition as above.
    kafkacap's ``errors`` rows (topic, partition, error_code) must be the same multiset.
Exchanges are matched by (client address, client port, correlation id); a response PDU must also sit in
the packet kafkacap names as ``response_frame``.

The real captures hold no non-zero partition-level error in a PDU tshark decodes and no forgotten topic,
so a small hand-made capture (built from the protocol guide's field lists) adds both; tshark decoding its
every PDU without complaint is what vouches for the hand-made bytes.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from analyzer.cli.summary import Collector
from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.tables.schemas import ERRORS_SCHEMA, EXCHANGES_SCHEMA, PARTITIONS_SCHEMA
from tests.craft import Conversation, kstring, request, response, write

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO.parent / "shared" / "pcaps" / "public"
SAMPLES = REPO / "sample_pcaps"

# Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords, OffsetForLeaderEpoch.
PARTITION_APIS = {0, 1, 2, 8, 9, 21, 23}
EXPERT_GROUP_MALFORMED = "117440512"  # _ws.expert.group of "Malformed" items
NULL_STRING = "[ Null ]"  # how tshark shows a null string


def public_captures() -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Name -> (path, broker ports), ports from the "Kafka port(s)" column of SOURCES.md."""
    sources = PUBLIC / "SOURCES.md"
    if not sources.exists():
        return {}
    found = {}
    for line in sources.read_text().splitlines():
        if re.match(r"\| \d+ \|", line):
            cells = [c.strip() for c in line.split("|")]
            name = cells[2].strip("`")
            found[name] = (PUBLIC / name, tuple(int(p) for p in re.findall(r"\d+", cells[8])))
    return found


def sample_captures() -> dict[str, tuple[Path, tuple[int, ...]]]:
    found = {}
    for truth_path in sorted(SAMPLES.glob("*.truth.json")):
        truth = json.loads(truth_path.read_text())
        if "tls" in truth:  # encrypted: compared with tshark, given the key log, in test_tls.py
            continue
        found[truth["capture"]] = (SAMPLES / truth["capture"], (int(truth["broker"]["port"]),))
    return found


PUBLIC_CAPTURES = public_captures()
CAPTURES = {**PUBLIC_CAPTURES, **sample_captures()}


# ---------------------------------------------------------------------------------------------------------
# tshark's side


@dataclass
class Pdu:
    """One Kafka PDU as tshark dissected it."""

    frame: int
    client: tuple[str, int]
    is_request: bool
    correlation_id: int
    api_key: int | None
    api_version: int | None
    unsupported: bool = False  # tshark does not know this API key or version
    troubles: list[str] = field(default_factory=list)  # why it was not dissected cleanly to the end
    topics: list[str] = field(default_factory=list)
    pairs: list[tuple[str | None, int]] = field(default_factory=list)  # (topic, partition) per partition
    partition_errors: list[tuple[str | None, int, int]] = field(default_factory=list)  # partition-level
    errors: list[tuple[str | None, int | None, int]] = field(default_factory=list)  # every non-zero error

    @property
    def klass(self) -> tuple[int | None, int | None, str]:
        return (self.api_key, self.api_version, "request" if self.is_request else "response")


def _shown(elem: ET.Element) -> str:
    return elem.get("show", "")


def _walk(node: ET.Element, pdu: Pdu, topic: str | None, partition: int | None) -> None:
    """Collect topics, partitions and errors below ``node``, each placed by its enclosing subtrees."""
    children = list(node)
    for child in children:  # this level's own topic and partition set the context for all its fields
        name = child.get("name")
        if name == "kafka.topic_name":
            topic = _shown(child)
        elif name == "kafka.partition_id":
            partition = int(_shown(child))
    for child in children:
        name = child.get("name")
        if name == "kafka.topic_name" and _shown(child) != NULL_STRING:
            pdu.topics.append(_shown(child))
        elif name == "kafka.forgotten_topic_name":
            # A Fetch v7+ request's forgotten topics: tshark gives them a field of their own, kafkacap's
            # topics name them like any other topic. Their kafka.forgotten_topic_partition values are no
            # pairs: kafkacap writes partition rows for the partitions fetched, not for those dropped
            # from the fetch session.
            pdu.topics.append(_shown(child))
        elif name == "kafka.partition_id":
            pdu.pairs.append((topic, int(_shown(child))))
        elif name == "kafka.error":
            code = int(_shown(child))
            if partition is not None and any(c.get("name") == "kafka.partition_id" for c in children):
                pdu.partition_errors.append((topic, partition, code))
            if code:
                pdu.errors.append((topic, partition, code))
        elif name == "_ws.expert":
            group = next((c for c in child if c.get("name") == "_ws.expert.group"), None)
            if group is not None and _shown(group) == EXPERT_GROUP_MALFORMED:
                pdu.troubles.append(child.get("showname", "malformed expert item"))
        elif child.tag == "proto" and name == "_ws.malformed":
            pdu.troubles.append("[Malformed Packet]")
        if len(child) and name != "_ws.expert":
            _walk(child, pdu, topic, partition)


_HEADER_FIELDS = {"kafka.api_key", "kafka.api_version", "kafka.request.version", "kafka.response.version"}
_ADDRESSES = re.compile(r"Src: (\S+), Dst: (\S+)$")
_PORTS = re.compile(r"Src Port: (\d+), Dst Port: (\d+)")


def _pdu(proto: ET.Element, frame: int, src: tuple[str, int], dst: tuple[str, int]) -> Pdu:
    top = {child.get("name"): child for child in proto if child.tag == "field"}
    is_request = "kafka.request_key" in top
    key = top.get("kafka.api_key")
    version = top.get("kafka.api_version", top.get("kafka.response.version"))
    pdu = Pdu(frame=frame, client=src if is_request else dst, is_request=is_request,
              correlation_id=int(_shown(top["kafka.correlation_id"])),
              api_key=None if key is None else int(_shown(key)),
              api_version=None if version is None else int(_shown(version)))
    for name in _HEADER_FIELDS & top.keys():
        for item in top[name].iter("field"):
            if item.get("name") in ("kafka.unsupported_api_version", "kafka.unknown_api_key"):
                pdu.unsupported = True
    if "kafka.request_missing" in {e.get("name") for e in proto.iter("field")}:
        pdu.troubles.append("request missing")
    _walk(proto, pdu, None, None)
    return pdu


def tshark_pdus(path: Path, ports: tuple[int, ...]) -> list[Pdu]:
    command = [TSHARK, "-n", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE"]
    for port in ports:
        command += ["-d", f"tcp.port=={port},kafka"]
    command += ["-T", "pdml", "-J", "kafka _ws.malformed"]
    run = subprocess.run(command, capture_output=True, check=True, timeout=60)
    pdus: list[Pdu] = []
    for packet in ET.fromstring(run.stdout).iter("packet"):
        frame = 0
        addresses = ports_seen = None
        last: Pdu | None = None
        for proto in packet.findall("proto"):
            name = proto.get("name")
            if name == "geninfo":
                frame = int(next(f.get("show") for f in proto if f.get("name") == "num"))
            elif name in ("ip", "ipv6"):
                addresses = _ADDRESSES.search(proto.get("showname", "")).groups()
            elif name == "tcp":
                ports_seen = tuple(map(int, _PORTS.search(proto.get("showname", "")).groups()))
            elif name == "kafka":
                src = (_ip(addresses[0]), ports_seen[0])
                dst = (_ip(addresses[1]), ports_seen[1])
                last = _pdu(proto, frame, src, dst)
                pdus.append(last)
            elif name == "_ws.malformed" and last is not None:  # the exception tshark caught in that PDU
                last.troubles.append("[Malformed Packet]")
    return pdus


def _ip(text: str) -> str:
    return ipaddress.ip_address(text).compressed


# ---------------------------------------------------------------------------------------------------------
# kafkacap's side


@dataclass
class Tables:
    exchanges: list[dict]
    partitions: dict[tuple[int, int], list[dict]]  # (connection_id, correlation_id) -> rows
    errors: dict[tuple[int, int], list[dict]]


def kafkacap_tables(path: Path, ports: tuple[int, ...]) -> Tables:
    sink = Collector()
    report = analyze_file(str(path), Options(ports=ports), sink)
    assert report.error is None, report.error
    partitions: dict[tuple[int, int], list[dict]] = {}
    for row in sink.table("partitions", PARTITIONS_SCHEMA).to_pylist():
        partitions.setdefault((row["connection_id"], row["correlation_id"]), []).append(row)
    errors: dict[tuple[int, int], list[dict]] = {}
    for row in sink.table("errors", ERRORS_SCHEMA).to_pylist():
        errors.setdefault((row["connection_id"], row["correlation_id"]), []).append(row)
    return Tables(sink.table("exchanges", EXCHANGES_SCHEMA).to_pylist(), partitions, errors)


# ---------------------------------------------------------------------------------------------------------
# The comparison


@dataclass
class Outcome:
    compared: list[Pdu] = field(default_factory=list)
    unsupported: set = field(default_factory=set)  # classes tshark cannot decode
    unfinished: list[str] = field(default_factory=list)  # PDUs of decoded classes tshark did not finish
    problems: list[str] = field(default_factory=list)


def _client_key(x: dict) -> tuple[tuple[str, int], int]:
    return (_ip(x["client_ip"]), x["client_port"]), x["correlation_id"]


def _exchange_for(pdu: Pdu, candidates: list[dict]) -> dict | None:
    """The exchange of ``pdu`` among those of its client and correlation id (port reuse can make several)."""
    if pdu.is_request:  # the packet that completes a request is at or after the one holding its first byte
        before = [x for x in candidates if x["api_key"] is not None and x["request_frame"] <= pdu.frame]
        return max(before, key=lambda x: x["request_frame"], default=None)
    return next((x for x in candidates if x["response_frame"] == pdu.frame), None)


def compare(pdus: list[Pdu], tables: Tables) -> Outcome:
    out = Outcome(unsupported={p.klass for p in pdus if p.unsupported})
    by_client: dict[tuple, list[dict]] = {}
    for x in tables.exchanges:
        by_client.setdefault(_client_key(x), []).append(x)
    matched: dict[int, tuple[dict, list[Pdu]]] = {}
    for pdu in pdus:
        if pdu.klass in out.unsupported:
            continue
        label = f"frame {pdu.frame} {pdu.klass} corr {pdu.correlation_id}"
        if pdu.troubles:
            out.unfinished.append(f"{label}: {'; '.join(pdu.troubles)}")
            continue
        x = _exchange_for(pdu, by_client.get((pdu.client, pdu.correlation_id), []))
        if x is None:
            out.problems.append(f"{label}: no kafkacap exchange")
        elif (x["api_key"], x["api_version"]) != (pdu.api_key, pdu.api_version):
            out.problems.append(f"{label}: kafkacap says api {x['api_key']} v{x['api_version']}")
        else:
            matched.setdefault(id(x), (x, []))[1].append(pdu)
            out.compared.append(pdu)
    for x, compared in matched.values():
        out.problems += _compare_exchange(x, compared, tables)
    return out


def _compare_exchange(x: dict, compared: list[Pdu], tables: Tables) -> list[str]:
    key = (x["connection_id"], x["correlation_id"])
    label = (f"{x['api_name']} v{x['api_version']} corr {x['correlation_id']} "
             f"(frames {[p.frame for p in compared]})")
    request = next((p for p in compared if p.is_request), None)
    response = next((p for p in compared if not p.is_request), None)
    complete = request is not None and (response is not None or x["response_frame"] is None)
    problems = []

    theirs = {t for p in compared for t in p.topics}
    ours = set(x["topics"] or ())
    if not theirs <= ours or (complete and theirs != ours):
        problems.append(f"{label}: topics tshark {sorted(theirs)} kafkacap {sorted(ours)}")

    if x["api_key"] in PARTITION_APIS:
        rows = tables.partitions.get(key, [])
        pairs = Counter((r["topic"], r["partition"]) for r in rows)
        answered = Counter((r["topic"], r["partition"], r["error_code"])
                           for r in rows if r["error_code"] is not None)
        if response is not None and Counter(response.partition_errors) != answered:
            problems.append(f"{label}: response (topic, partition, error) tshark "
                            f"{sorted(response.partition_errors)} kafkacap {sorted(answered)}")
        if request is not None:
            # kafkacap merges rows by (topic, partition), so a request naming one twice would show as one
            # row; no capture does that, and if one ever does, it must be looked at, not passed over.
            if len(set(request.pairs)) != len(request.pairs):
                problems.append(f"{label}: the request names a partition twice: {sorted(request.pairs)}")
            if not set(request.pairs) <= set(pairs):
                problems.append(f"{label}: request partitions tshark {sorted(request.pairs)} "
                                f"kafkacap {sorted(pairs)}")
        if complete:
            union = set(request.pairs)
            if response is not None:
                union |= {(topic, partition) for topic, partition, _ in response.partition_errors}
            if pairs != Counter(union):
                problems.append(f"{label}: partitions tshark {sorted(union)} kafkacap {sorted(pairs)}")

    if response is not None:
        rows = tables.errors.get(key, [])
        ours_errors = Counter((e["topic"], e["partition"], e["error_code"]) for e in rows)
        if Counter(response.errors) != ours_errors:
            problems.append(f"{label}: (topic, partition, error) tshark {sorted(response.errors, key=str)} "
                            f"kafkacap {sorted(ours_errors, key=str)}")
    return problems


# ---------------------------------------------------------------------------------------------------------
# The tests


@functools.cache
def _both(name: str) -> tuple[list[Pdu], Tables]:
    path, ports = CAPTURES[name]
    with ThreadPoolExecutor(max_workers=1) as pool:  # tshark runs while kafkacap analyses
        theirs = pool.submit(tshark_pdus, path, ports)
        ours = kafkacap_tables(path, ports)
        return theirs.result(), ours


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_tshark_and_kafkacap_find_the_same_pdus(name: str) -> None:
    """Every request tshark frames (decoded or not) is an exchange of kafkacap's, and every response sits
    in the packet kafkacap names as its response_frame; so the comparison below cannot miss a PDU."""
    pdus, tables = _both(name)
    assert pdus, "tshark found no Kafka PDU"
    theirs = Counter((p.client, p.correlation_id, p.api_key, p.api_version) for p in pdus if p.is_request)
    ours = Counter((*_client_key(x), x["api_key"], x["api_version"]) for x in tables.exchanges
                   if x["api_key"] is not None)
    assert theirs == ours
    theirs = Counter((p.client, p.correlation_id, p.frame) for p in pdus if not p.is_request)
    ours = Counter((*_client_key(x), x["response_frame"]) for x in tables.exchanges
                   if x["response_frame"] is not None)
    assert theirs == ours


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_topics_partitions_and_errors_equal_tsharks(name: str) -> None:
    outcome = compare(*_both(name))
    assert not outcome.problems, "\n".join(outcome.problems)


def test_the_samples_give_the_comparison_something_to_compare() -> None:
    """Over the committed samples, tshark's clean PDUs include topics, partitions of every partition API
    it decodes there, and non-zero errors, so the equalities above are not met by empty sets."""
    samples = [name for name, (path, _) in CAPTURES.items() if path.parent == SAMPLES]
    if not samples:
        pytest.skip("no sample captures")
    compared = [p for name in samples for p in compare(*_both(name)).compared]
    assert any(p.topics for p in compared)
    assert {p.api_key for p in compared if p.pairs and p.api_key in PARTITION_APIS} >= {0, 1, 2, 8, 9}
    assert any(p.partition_errors for p in compared)
    assert any(p.errors for p in compared)
    assert any(topic is not None for p in compared for topic, _, _ in p.errors)  # placed under its topic


MUTATIONS = ["drop an error row", "change a partition's error code", "add a partition row", "rename a topic"]


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_an_altered_table_is_caught(mutation: str) -> None:
    """The comparison fails when kafkacap's rows are changed in any of the ways it claims to check."""
    name = "tansu_aiokafka_codecs.pcap"
    if name not in CAPTURES:
        pytest.skip(f"{name} not present")
    pdus, tables = _both(name)
    tables = copy.deepcopy(tables)
    if mutation == "drop an error row":
        rows = next(rows for rows in tables.errors.values() if rows)
        rows.pop()
    elif mutation == "change a partition's error code":
        row = next(r for rows in tables.partitions.values() for r in rows if r["error_code"] == 0)
        row["error_code"] = 6
    elif mutation == "add a partition row":
        rows = next(rows for rows in tables.partitions.values() if rows)
        rows.append({**rows[0], "partition": rows[0]["partition"] + 1})
    else:
        x = next(x for x in tables.exchanges if x["topics"])
        x["topics"] = [f"{x['topics'][0]}-renamed", *x["topics"][1:]]
    assert not compare(pdus, _both(name)[1]).problems
    assert compare(pdus, tables).problems


# ---------------------------------------------------------------------------------------------------------
# A hand-made capture for what the real ones lack (field lists from the protocol guide, non-flexible
# versions tshark 4.0 decodes)


def _i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def _fetch_v7(corr: int) -> tuple[bytes, bytes]:
    """Fetch v7: two partitions of "fetched", two of "dropped" forgotten; the response fails partition 1."""
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 77, 3)  # replica .. isolation, session id, epoch
    body += _i32(1) + kstring("fetched") + _i32(2)
    for partition in (0, 1):  # partition, fetch_offset, log_start_offset, partition_max_bytes
        body += struct.pack(">iqqi", partition, 100 + partition, 0, 1 << 20)
    body += _i32(1) + kstring("dropped") + _i32(2, 3, 4)  # forgotten_topics_data
    answer = struct.pack(">ihi", 0, 0, 77)  # throttle, error, session id
    answer += _i32(1) + kstring("fetched") + _i32(2)
    for partition, error in ((0, 0), (1, 6)):  # + high watermark, last stable, log start, aborted, records
        answer += struct.pack(">ihqqq", partition, error, 200, 200, 0) + _i32(0) + _i32(0)
    return request(1, 7, corr, body=body), response(corr, answer)


def _list_offsets_v1(corr: int) -> tuple[bytes, bytes]:
    """ListOffsets v1 for partition 0 of "alpha" and "beta"; "beta" fails."""
    body = _i32(-1, 2)  # replica_id, topics
    for topic in ("alpha", "beta"):
        body += kstring(topic) + _i32(1) + struct.pack(">iq", 0, -1)  # partition, timestamp
    answer = _i32(2)
    for topic, error in (("alpha", 0), ("beta", 3)):  # partition, error, timestamp, offset
        answer += kstring(topic) + _i32(1) + struct.pack(">ihqq", 0, error, -1, 42 if not error else -1)
    return request(2, 1, corr, body=body), response(corr, answer)


def _metadata_v1(corr: int) -> tuple[bytes, bytes]:
    """Metadata v1 (not a partition API): a partition-level error and a topic-level one."""
    body = _i32(2) + kstring("alpha") + kstring("missing")
    answer = _i32(1, 1) + kstring("b1") + _i32(9092) + kstring(None) + _i32(1)  # brokers, controller
    answer += _i32(2) + struct.pack(">h", 0) + kstring("alpha") + b"\x00" + _i32(2)  # error, name, internal
    # partitions: error, index, leader, replicas, in-sync replicas
    answer += struct.pack(">hii", 0, 0, 1) + _i32(1, 1) + _i32(1, 1)
    answer += struct.pack(">hii", 9, 1, 1) + _i32(1, 1) + _i32(0)
    answer += struct.pack(">h", 3) + kstring("missing") + b"\x00" + _i32(0)
    return request(3, 1, corr, body=body), response(corr, answer)


def test_a_hand_made_capture_with_partition_errors_and_forgotten_topics(tmp_path: Path) -> None:
    conversation = Conversation()
    conversation.handshake()
    for corr, exchange in enumerate((_fetch_v7, _list_offsets_v1, _metadata_v1), start=1):
        sent, answer = exchange(corr)
        conversation.send(True, sent)
        conversation.send(False, answer)
    conversation.fin()
    path = Path(write(tmp_path / "crafted.pcap", conversation.packets))
    pdus = tshark_pdus(path, (9092,))
    outcome = compare(pdus, kafkacap_tables(path, (9092,)))
    assert len(outcome.compared) == len(pdus) == 6, (outcome.unfinished, outcome.unsupported)
    assert not outcome.problems, "\n".join(outcome.problems)
    assert "dropped" in pdus[0].topics
    assert {(p.api_key, error) for p in pdus for *_, error in p.errors} == {(1, 6), (2, 3), (3, 9), (3, 3)}
