"""The record walk shared by the processes of one file (--jobs): walked a part per process, joined, then read.

What every process then reads must be exactly what walking the file itself gives: the same chunks, column
for column, the same damage found at the same place, on real captures and on damaged ones. Where the parts
cannot be trusted (a boundary not found, a walk that does not land on the next part), each process walks as
before.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from analyzer.capture import chunks as _pcap_chunks
from analyzer.capture.chunks import joined_walk
from analyzer.capture.files import open_capture
from analyzer.pipeline import run
from tests import craft
from tests.test_bulk import interleaved

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = sorted((ROOT.parent / "shared" / "pcaps" / "public").glob("*.pcap"))
BENCH = sorted((ROOT / "bench-data").glob("kafka-*-20mb-*.pcap"))


def one_pass_walk(path) -> list[int]:
    """The record starts by the plain definition, one record at a time: each start plus 16 plus its caplen,
    until a start whose 16-byte header does not fit in the file (that one included)."""
    data = Path(path).read_bytes()
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos, starts = 24, []
    while True:
        starts.append(pos)
        if pos + 16 > len(data):
            return starts
        pos += 16 + struct.unpack_from(order + "I", data, pos + 8)[0]


def parts_of(path, parts: int) -> list[np.ndarray | None]:
    out = []
    for p in range(parts):
        with open_capture(path) as cap:
            out.append(cap.walk_part(p, parts))
    return out


def chunk_columns(path, walked=None) -> tuple[list, tuple]:
    with open_capture(path) as cap:
        chunks = []
        for c in cap.chunks((), walked):
            if c.tuples is not None:
                chunks.append((c.first_frame, c.last_frame, c.last_ts, c.record_ts,
                               [tuple(bytes(v) if isinstance(v, memoryview) else v for v in t) for t in c.tuples]))
            else:
                chunks.append((c.first_frame, c.last_frame, c.last_ts, c.record_ts,
                               *(a.tobytes() for a in (c.ts, c.keys, c.seq, c.ack, c.flags, c.start, c.stop,
                                                        c.seg_len))))
        s = cap.stats
        return chunks, (s.packets, s.tcp_packets, s.damage, s.first_ts_ns, s.last_ts_ns)


def damaged(tmp_path, rng: random.Random, how: str) -> Path:
    path = Path(craft.write(tmp_path / f"{how}.pcap", interleaved(rng, 3)))
    data = bytearray(path.read_bytes())
    starts = one_pass_walk(path)[:-1]
    if how == "cut_record":  # the last record runs past the end of the file
        del data[-rng.randrange(1, 30):]
    elif how == "cut_header":  # a few bytes of a next record header
        data += bytes(rng.randrange(1, 16))
    elif how == "huge_caplen":  # a record claiming more than the snap length, somewhere in the middle
        at = starts[rng.randrange(len(starts) // 3, 2 * len(starts) // 3)]
        struct.pack_into("<I", data, at + 8, 0x7FFF0000)
    path.write_bytes(bytes(data))
    return path


def assert_walked_reads_the_same(path, parts: int) -> bool:
    """Parts joined equal the one-pass walk, and chunks read from them equal the self-walked chunks.
    Returns whether the parts joined (False: the file is walked by every process, which is also fine)."""
    pieces = parts_of(path, parts)
    walked = None if any(p is None for p in pieces) else joined_walk(pieces)
    if walked is None:
        return False
    assert walked.tolist() == one_pass_walk(path)
    assert chunk_columns(path, walked) == chunk_columns(path)
    return True


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("how", ["clean", "cut_record", "cut_header", "huge_caplen"])
def test_chunks_from_the_shared_walk_equal_the_walked_ones(tmp_path, monkeypatch, seed, how):
    rng = random.Random(seed)
    path = damaged(tmp_path, rng, how)
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", rng.choice([300, 700, 3000, 20000]))
    joined = assert_walked_reads_the_same(path, rng.choice([2, 3, 4]))
    if how in ("clean", "cut_record", "cut_header"):
        assert joined  # damage at the very end does not stop the parts from joining


@pytest.mark.skipif(not PUBLIC and not BENCH, reason="no public or benchmark captures here")
@pytest.mark.parametrize("path", PUBLIC + BENCH, ids=lambda p: p.name)
def test_chunks_from_the_shared_walk_of_real_captures(path, monkeypatch):
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 1 << 16)
    with open_capture(path) as cap:
        if cap._chunkable() is None:
            pytest.skip("not read in chunks")
    joined = assert_walked_reads_the_same(path, 2)
    assert joined or path.stat().st_size < 1 << 20  # a tiny file may have no chain of records past its middle


def test_a_part_that_does_not_land_on_the_next_is_refused(tmp_path, monkeypatch):
    """A boundary guessed inside packet data (forced here) is never walked onto: no shared walk."""
    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(3), 3))
    starts = one_pass_walk(path)
    wrong = starts[len(starts) // 2] + 5
    monkeypatch.setattr(_pcap_chunks, "part_starts", lambda buf, pos, header, parts: [pos, wrong])
    assert parts_of(path, 2)[0] is None


def test_jobs_share_the_walk_and_give_the_rows_of_one_process(tmp_path, monkeypatch):
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from analyzer.cli.summary import Collector
    from analyzer.pipeline.analyze import Options

    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(11), 5))
    monkeypatch.setattr(run, "SHARD_MIN_BYTES", 0)
    tasks = run.plan([str(path)], 2)
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("fork")) as pool:
        walks = run._shared_walks(pool, tasks, str(tmp_path))
    assert np.load(walks[str(path)]).tolist() == one_pass_walk(path)

    def rows(jobs: int) -> dict:
        sink = Collector()
        run.run([str(path)], Options(), sink, jobs=jobs)
        return {name: sorted(map(str, (r for b in batches for r in b.to_pylist())))
                for name, batches in sink.batches.items()}

    assert rows(2) == rows(1)


def test_the_progress_of_split_files_moves_while_workers_read(tmp_path, monkeypatch):
    """--jobs on one file: the workers tell how far they have read, so the bar moves before any of them
    ends; the ticks add up to the file's size, counted once however many shards read it."""
    from analyzer.cli.summary import Collector
    from analyzer.pipeline.analyze import Options

    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(7), 24))
    size = Path(path).stat().st_size
    monkeypatch.setattr(run, "SHARD_MIN_BYTES", 0)
    monkeypatch.setattr(run, "PROGRESS_POLL", 0.001)
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 4096)  # many chunks: the workers report many times
    ticks: list[int] = []
    run.run([str(path)], Options(), Collector(), jobs=2, on_progress=ticks.append)
    assert sum(ticks) == size - size % 2 and all(t > 0 for t in ticks)
    assert len(ticks) >= 10  # not just one per shard as each ends: ticks came while the workers read


def test_a_part_of_the_walk_lets_the_pages_behind_it_go(tmp_path, monkeypatch):
    """A process walking half a file must not keep that half resident: the walk tells the mapping how far
    it has got after every stretch, as the chunked reading does (before this, a --jobs 2 worker's resident
    memory peaked at half the capture: 400 MB of the 800 MB benchmark capture)."""
    from analyzer.capture import files as capture

    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(3), 4))
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 2000)
    told: list[int] = []
    monkeypatch.setattr(capture._MappedSource, "release", lambda self, pos: told.append(pos))
    size = Path(path).stat().st_size
    whole = one_pass_walk(path)
    for part in range(2):
        told.clear()
        with open_capture(path) as cap:
            walked = cap.walk_part(part, 2)
        assert walked is not None and told == sorted(told) and set(told) <= set(whole)
        first, last = int(walked[0]), int(walked[-1])
        assert len(told) > (last - first) // 10000 > size // 40000  # all along the part
        assert told[0] < first + 10000 and told[-1] > last - 10000
