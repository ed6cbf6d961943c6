"""The bulk path (chunked pcap reading, runs of regular packets in bulk) against the per-packet loop.

The per-packet loop is the reference: every table must come out the same, row for row (the bulk path
groups rows by connection within a chunk, so rows are compared sorted). Captures: crafted conversations
with loss, reordering, repeats, pipelining and port reuse, interleaved over several connections and cut
into many small chunks so that connections cross chunk boundaries; the bundled sample captures; the
public third-party captures when ../shared is present.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.capture import chunks as _pcap_chunks
from analyzer.capture.files import open_capture
from analyzer.cli.summary import Collector
from analyzer.pipeline.analyze import Options, analyze_file
from tests import craft
from tests.capture.test_capture import read_all

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "sample_pcaps").glob("*.pcap*"))
PUBLIC = sorted((ROOT.parent / "shared" / "pcaps" / "public").glob("*.pcap*"))


def tables(path, shard=None, **opts) -> tuple[dict[str, pa.Table], object, list[tuple]]:
    """The tables, the file report and every frame the matchers were handed (connection, direction,
    first and last packet numbers, the head's bytes)."""
    sink = Collector()
    frames: list[tuple] = []

    def tap(connection_id, is_response, first_no, last_no, head) -> None:
        frames.append((connection_id, is_response, first_no, last_no, bytes(head)))

    report = analyze_file(str(path), Options(**opts), sink, shard, tap=tap)
    return {name: pa.Table.from_batches(batches) for name, batches in sink.batches.items()}, report, frames


def sorted_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(map(repr, row.values())) for row in table.to_pylist())


def assert_same(path, shard=None, **opts) -> dict[str, pa.Table]:
    """Analyse ``path`` both ways; every table, the frames handed to the matchers (heads byte for byte) and
    the capture stats must agree. Returns the bulk tables."""
    bulk, bulk_report, bulk_frames = tables(path, shard, bulk=True, **opts)
    each, each_report, each_frames = tables(path, shard, bulk=False, **opts)
    assert sorted(bulk_frames) == sorted(each_frames)
    assert sorted(bulk) == sorted(each)
    for name in each:
        assert sorted_rows(bulk[name]) == sorted_rows(each[name]), name
    assert bulk_report.stats == each_report.stats
    assert bulk_report.error == each_report.error is None
    return bulk


def conversation(rng: random.Random, port: int) -> list:
    """One connection with pipelined requests of all sizes, impaired at random."""
    c = craft.Conversation(cport=port, client_isn=rng.randrange(1 << 32), broker_isn=rng.randrange(1 << 32),
                           t=1_700_000_000.0 + rng.random(), step=0.0007, mss=rng.choice([536, 1448]))
    c.handshake()
    corr = 0
    for _ in range(rng.randrange(3, 9)):
        batch = []
        for _ in range(rng.randrange(1, 4)):  # pipelined
            corr += 1
            kind = rng.random()
            if kind < 0.4:
                batch.append((craft.produce_request_v3(corr, acks=rng.choice([0, 1]),
                                                       payload_size=rng.randrange(10, 9000)),
                              craft.produce_response_v3(corr)))
            elif kind < 0.7:
                batch.append((craft.heartbeat_request(corr), craft.heartbeat_response(corr)))
            else:
                batch.append((craft.heartbeat_request(corr),
                              craft.fetch_response_v11(corr, payload_size=rng.randrange(10, 12000))))
        c.send(True, b"".join(req for req, _ in batch))
        c.send(False, b"".join(resp for _, resp in batch))
    if rng.random() < 0.7:
        c.fin()
    packets = c.packets
    for _ in range(rng.randrange(0, 4)):  # impairments
        i = rng.randrange(3, len(packets))
        what = rng.random()
        if what < 0.35:
            del packets[i]  # loss
        elif what < 0.7 and i + 1 < len(packets):
            packets[i], packets[i + 1] = packets[i + 1], packets[i]  # reordering
        else:
            dup = packets[i].copy()
            dup.time = packets[i].time
            packets.insert(i + 1, dup)  # retransmission
    return packets


def interleaved(rng: random.Random, connections: int) -> list:
    streams = [conversation(rng, 40000 + n) for n in range(connections)]
    if rng.random() < 0.3:  # the same ports reused by a new connection later on
        later = conversation(rng, 40000)
        for p in later:
            p.time += 10
        streams.append(later)
    packets = [p for s in streams for p in s]
    packets.sort(key=lambda p: p.time)
    return packets


def impaired_capture(tmp_path, monkeypatch, rng: random.Random, connections: int):
    """A capture of interleaved impaired connections, read in chunks small enough for them to cross."""
    path = craft.write(tmp_path / "c.pcap", interleaved(rng, connections))
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", rng.choice([700, 3000, 20000]))
    return path


@pytest.mark.parametrize("seed", range(12))
def test_impaired_connections_crossing_chunk_boundaries(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    path = impaired_capture(tmp_path, monkeypatch, rng, rng.randrange(1, 6))
    out = assert_same(path)
    assert out["exchanges"].num_rows > 0
    assert_same(path, bodies=False)
    # One shard of two (--jobs 2): the other shard's packets leave the columns before the bulk work.
    shards = [assert_same(path, (i, 2)) for i in range(2)]
    assert sum(s["exchanges"].num_rows for s in shards if "exchanges" in s) == out["exchanges"].num_rows


def test_one_chunk_and_many_chunks_agree(tmp_path, monkeypatch):
    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(99), 4))
    whole = assert_same(path)
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 500)
    cut = assert_same(path)
    for name in whole:
        assert sorted_rows(whole[name]) == sorted_rows(cut[name])


def test_a_chunk_with_packets_for_the_per_packet_decoder(tmp_path):
    """IPv6 packets among IPv4 ones: that chunk goes packet by packet, the tables do not change."""
    rng = random.Random(5)
    packets = conversation(rng, 40001)
    v6 = craft.Conversation(client="fd00::1", broker="fd00::2", t=1_700_000_000.0002)
    v6.handshake()
    v6.send(True, craft.heartbeat_request(7))
    v6.send(False, craft.heartbeat_response(7))
    packets = sorted(packets + v6.packets, key=lambda p: p.time)
    path = craft.write(tmp_path / "c.pcap", packets)
    out = assert_same(path)
    assert 7 in out["exchanges"].column("correlation_id").to_pylist()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_captures(path):
    assert_same(path, records=True, verify_crc=True)


@pytest.mark.skipif(not PUBLIC, reason="../shared/pcaps/public not present")
@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name)
def test_public_captures(path):
    assert_same(path, records=True, detect_ports=True)


def test_damaged_files_read_the_same_in_chunks(tmp_path):
    """A cut last record, a cut record header, a record claiming too many bytes: same packets, same damage."""
    path = craft.write(tmp_path / "c.pcap", conversation(random.Random(3), 40000))
    data = Path(path).read_bytes()
    cases = {"cut_record": data[:-7], "cut_header": data + data[24:34]}
    huge = bytearray(data)
    huge[24 + 8:24 + 12] = (100 << 20).to_bytes(4, "little")  # the first record's caplen
    cases["huge_caplen"] = bytes(huge)
    for name, content in cases.items():
        damaged = tmp_path / f"{name}.pcap"
        damaged.write_bytes(content)
        _, stats = read_all(damaged)  # asserts the chunked reading gives the same packets and stats
        assert stats.damage, name


def test_pages_are_released_only_behind_the_chunk_in_use(tmp_path, monkeypatch):
    """The reader may drop the pages of records the consumer is done with, never those of the chunk it is
    about to hand out (dropping them early would read them back and keep them resident: memory would grow
    with the file)."""
    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(7), 3))
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 2000)
    released = []
    with open_capture(path) as cap:
        source = cap._source
        release = source.release
        monkeypatch.setattr(source, "release", lambda pos, drop=None: released.append(pos) or release(pos, drop))
        starts = []
        for chunk in cap.chunks():
            first_record = int(chunk.start[0]) if len(chunk) else None
            starts.append(first_record)
            assert released and first_record is not None and released[-1] <= first_record
    assert len(starts) > 5 and released == sorted(released)
