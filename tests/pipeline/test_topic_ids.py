"""Topics named by id (Produce v13, Fetch v13+) get their names from any response of the run, before or after.

The evidence is the Java client's own capture against Apache Kafka 4.4 (sample_pcaps/kafka44_java_clients): its
producers send Produce v13, which names topics by id only, and its truth file says which producer wrote which
topic. The capture is cut the way real captures start: after the first producer's Metadata, so only the
consumer's Metadata, later, names that producer's topic; and split into two files at the consumer's start, so
the name is in another file (and, with --jobs 2, another process) than the rows that need it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import dpkt
import pyarrow as pa
import pytest

from analyzer.cli.summary import unnamed_topic_ids
from analyzer.pipeline import topic_ids
from analyzer.pipeline.topic_ids import TopicIdResolver, name_batch
from tests.helpers import SAMPLES, export_tables, run_tables, truth

CAPTURE = SAMPLES / "kafka44_java_clients.pcap"
FIRST_PRODUCE = 55  # packet of java44-producer-none's first Produce v13, after its Metadata (packets 40-41)
CONSUMER_START = 178  # the consumer's first packet; its Metadata (packets 182-183) names all five topics


def cut(source: Path, target: Path, first: int, last: int | None = None) -> Path:
    """Packets first..last (1-based, inclusive) of a pcap, as a new pcap."""
    with source.open("rb") as f_in, target.open("wb") as f_out:
        reader = dpkt.pcap.Reader(f_in)
        writer = dpkt.pcap.Writer(f_out, linktype=reader.datalink(), snaplen=reader.snaplen)
        for number, (ts, data) in enumerate(reader, 1):
            if number >= first and (last is None or number <= last):
                writer.writepkt(data, ts)
    return target


def export(tmp_path: Path, *paths: Path, jobs: int = 1) -> dict[str, pa.Table]:
    return export_tables(paths, tmp_path / f"out-{jobs}", "--jobs", jobs, tables=("exchanges", "partitions"))


def producers_topics() -> dict[str, set[str]]:
    """client id -> the topics it produced to, as the clients' truth says."""
    out: dict[str, set[str]] = {}
    for topic, entry in truth(CAPTURE)["topics"].items():
        for client in entry["producers"]:
            out.setdefault(client, set()).add(topic)
    return out


def check_named(tables: dict[str, pa.Table]) -> int:
    """Every Produce v13 row names the topics its producer wrote to; returns how many rows were checked."""
    wrote = producers_topics()
    produce = [r for r in tables["partitions"].to_pylist() if r["api_name"] == "Produce"]
    assert produce
    for row in produce:
        assert row["api_version"] == 13 and row["topic_id"] is not None  # named by id on the wire
        assert uuid.UUID(row["topic_id"])
        assert row["topic"] in wrote[row["client_id"]], row
    for row in tables["exchanges"].to_pylist():
        if row["api_name"] == "Produce":
            assert set(row["topics"]) <= wrote[row["client_id"]], row
    assert unnamed_topic_ids(tables["exchanges"], tables["partitions"]) == []
    return len(produce)


@pytest.mark.skipif(not CAPTURE.exists(), reason="sample capture missing")
def test_produce_v13_topics_named_in_the_whole_capture(tmp_path):
    assert check_named(export(tmp_path, CAPTURE)) >= 5


@pytest.mark.skipif(not CAPTURE.exists(), reason="sample capture missing")
@pytest.mark.parametrize("batch_rows", [2, 1 << 14])
def test_a_name_from_a_later_metadata_response(tmp_path, batch_rows):
    """With batches of two rows, the Produce rows leave the analysis long before the Metadata that names them."""
    late = cut(CAPTURE, tmp_path / "late-start.pcap", FIRST_PRODUCE)
    tables = run_tables(late, batch_rows=batch_rows, all_tables=True)
    check_named(tables)
    none_rows = [r for r in tables["partitions"].to_pylist() if r["client_id"] == "java44-producer-none"]
    assert none_rows and all(r["topic"] == "java44-none" for r in none_rows)


@pytest.mark.skipif(not CAPTURE.exists(), reason="sample capture missing")
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_name_from_another_file_and_process(tmp_path, jobs):
    first = cut(CAPTURE, tmp_path / "producers.pcap", FIRST_PRODUCE, CONSUMER_START - 1)
    second = cut(CAPTURE, tmp_path / "consumer.pcap", CONSUMER_START)
    tables = export(tmp_path, first, second, jobs=jobs)
    check_named(tables)
    files = set(tables["partitions"].column("capture_file").to_pylist())
    assert files == {"producers.pcap", "consumer.pcap"}
    # alone, the producers' file cannot name java44-none: the id stays, and the summary counts it
    alone = export(tmp_path / "alone", first)
    none_rows = [r for r in alone["partitions"].to_pylist() if r["client_id"] == "java44-producer-none"]
    assert none_rows and all(r["topic"] == r["topic_id"] for r in none_rows)
    assert unnamed_topic_ids(alone["exchanges"], alone["partitions"]) == [none_rows[0]["topic_id"]]


def test_held_batches_spill_and_keep_their_order(tmp_path, monkeypatch):
    """Past HOLD_BYTES the held batches go through a file; order and content survive, names are filled."""
    monkeypatch.setattr(topic_ids, "HOLD_BYTES", 1)
    raw = uuid.uuid4()
    text = str(raw)
    batches = [pa.record_batch({"topic": [text, "plain"], "topic_id": [text, None], "n": [i, i]})
               for i in range(5)]
    resolver = TopicIdResolver()
    assert resolver.feed("connections", pa.record_batch({"n": [1]}))  # no topics: never held
    assert resolver.feed("partitions", pa.record_batch({"topic": ["a"], "topic_id": pa.nulls(1, pa.string()),
                                                        "n": [-1]}))
    assert not any(resolver.feed("partitions", b) for b in batches)
    out = list(resolver.finish({raw.bytes: "orders"}))
    assert [t for t, _ in out] == ["partitions"] * 5
    rows = pa.Table.from_batches([b for _, b in out]).to_pylist()
    assert [r["n"] for r in rows] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert [r["topic"] for r in rows] == ["orders", "plain"] * 5
    assert [r["topic_id"] for r in rows] == [text, None] * 5
    assert resolver.unnamed == []


def test_only_ids_are_renamed_and_unknown_ids_stay():
    known, unknown = uuid.uuid4(), uuid.uuid4()
    batch = pa.record_batch({
        "topic": [str(known), str(unknown), str(known), None],
        "topic_id": [str(known), str(unknown), None, None],  # row 2: a topic *named* like an id, not an id
        "topics": pa.array([[str(known), "x"], None, [], [str(unknown)]], pa.list_(pa.string())),
    })
    keys, names = pa.array([str(known)]), pa.array(["orders"])
    scalar = name_batch("partitions", batch, keys, names)
    assert scalar.column("topic").to_pylist() == ["orders", str(unknown), str(known), None]
    listed = name_batch("exchanges", batch, keys, names)
    assert listed.column("topics").to_pylist() == [["orders", "x"], None, [], [str(unknown)]]


def test_an_assignment_by_id_is_named_too():
    """ConsumerGroupHeartbeat answers assign partitions by topic id: the assignment column (and the groups table
    made from it) takes the run's names, partitions and empty or null assignments as they were."""
    known, unknown = uuid.uuid4(), uuid.uuid4()
    assignment = pa.array([[{"topic": str(known), "partitions": [0, 2]}, {"topic": "named", "partitions": [1]}],
                           None, [], [{"topic": str(unknown), "partitions": []}]],
                          pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))])))
    batch = pa.record_batch({"topics": pa.array([[], None, [], []], pa.list_(pa.string())), "assignment": assignment})
    resolver = TopicIdResolver()
    assert not resolver.feed("exchanges", batch)
    (table, named), = resolver.finish({known.bytes: "orders"})
    assert named.column("assignment").to_pylist() == [
        [{"topic": "orders", "partitions": [0, 2]}, {"topic": "named", "partitions": [1]}], None, [],
        [{"topic": str(unknown), "partitions": []}]]
    assert resolver.unnamed == [str(unknown)]


@pytest.mark.skipif(not CAPTURE.exists(), reason="sample capture missing")
def test_a_name_from_a_later_file_of_a_rotated_set(tmp_path):
    """tcpdump -C names: the two files are one capture, stitched; the name still comes from the second."""
    cut(CAPTURE, tmp_path / "cap.pcap", FIRST_PRODUCE, CONSUMER_START - 1)
    cut(CAPTURE, tmp_path / "cap.pcap1", CONSUMER_START)
    tables = export(tmp_path, tmp_path / "cap.pcap", tmp_path / "cap.pcap1")
    check_named(tables)
    assert set(tables["partitions"].column("capture_file").to_pylist()) == {"cap.pcap"}  # one capture
