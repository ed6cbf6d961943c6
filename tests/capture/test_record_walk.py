"""The compiled record walk (analyzer.capture._walk) against the walk written out plainly, record by record,
on well-formed records, on bytes from nowhere and at every edge of the buffer: it must take the same starts,
stop at the same place and never read outside the buffer."""

from __future__ import annotations

import mmap
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from analyzer.capture._walk import WalkAhead, walk_records
from tests.craft import damaged


def plain_walk(buf: bytes, pos: int, stop: int, little: bool, most: int) -> tuple[list[int], int, bool]:
    """Four records a turn while the position is before ``stop`` and fewer than ``most`` starts are taken; a
    position whose 16-byte header does not fit in the buffer ends the walk, cut, without being taken."""
    caplen = struct.Struct(("<" if little else ">") + "8xI4x")
    starts: list[int] = []
    while pos < stop and len(starts) < most:
        for _ in range(4):
            if pos + 16 > len(buf):
                return starts, pos, True
            starts.append(pos)
            pos += 16 + caplen.unpack_from(buf, pos)[0]
    return starts, pos, False


def records(rng: random.Random, little: bool, count: int) -> bytes:
    out = bytearray()
    for _ in range(count):
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 40, 60, 300))))
        out += struct.pack(("<" if little else ">") + "IIII", 1, 2, len(body), len(body)) + body
    return bytes(out)


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_takes_the_starts_of_the_plain_walk(seed):
    rng = random.Random(seed)
    little = rng.random() < 0.5
    buf = records(rng, little, rng.randrange(0, 60))
    if rng.random() < 0.5:  # cut anywhere, a header included
        buf = buf[:rng.randrange(len(buf) + 1)]
    if rng.random() < 0.3:  # or bytes from nowhere: caplens of up to 4 GB
        buf = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    for _ in range(20):
        pos = rng.randrange(-2, len(buf) + 20) if rng.random() < 0.2 else 0
        pos = max(pos, 0)
        stop = rng.randrange(pos, len(buf) + 40) if rng.random() < 0.7 else 1 << 40
        most = rng.choice((0, 4, 8, 1 << 17))
        starts, end, cut = walk_records(buf, pos, stop, little, most)
        assert (starts.tolist(), end, cut) == plain_walk(buf, pos, stop, little, most)


def test_a_header_reaching_the_last_byte_is_read_and_one_past_it_is_not():
    one = struct.pack("<IIII", 0, 0, 4, 4) + b"abcd"
    assert walk_records(one, 0, 100, True, 8)[0].tolist() == [0]
    assert walk_records(one, 0, 100, True, 8)[1:] == (20, True)
    assert walk_records(one[:15], 0, 100, True, 8)[1:] == (0, True)
    assert walk_records(b"", 0, 100, True, 8)[0].tolist() == []


def plain_fields(buf: bytes, starts: list[int], span: int) -> list[bytes]:
    """``span`` bytes from each start, from the last position they fit at for starts past it; zeros when the
    buffer is shorter than ``span``."""
    last = len(buf) - span
    return [bytes(span) if last < 0 else buf[min(s, last):min(s, last) + span] for s in starts]


@pytest.mark.parametrize("seed", range(30))
def test_the_walk_ahead_answers_what_the_walk_and_the_gather_would(seed):
    """Every take is compared with the plain walk, whether the walk running ahead was the one asked for (the
    next chunk), another one (the caller moved elsewhere: it is dropped), or none."""
    rng = random.Random(seed)
    little = rng.random() < 0.5
    buf = records(rng, little, rng.randrange(0, 80))
    if rng.random() < 0.4:
        buf = buf[:rng.randrange(len(buf) + 1)]
    if rng.random() < 0.2:
        buf = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    span = rng.choice((1, 16, 70, 500))
    most = rng.choice((4, 8, 1 << 17))
    ahead = WalkAhead(buf, little, most, np.dtype(f"V{span}"), len(buf) - span)
    pos, stop = 0, rng.choice((1, 50, 300, 1 << 20))
    for _ in range(12):
        starts, end, cut, fields = ahead.take(pos, stop)
        expected = plain_walk(buf, pos, stop, little, most)
        assert (starts.tolist(), end, cut) == expected
        assert [bytes(f) for f in fields.view(f"V{span}")] == plain_fields(buf, expected[0], span)
        choice = rng.random()
        if choice < 0.6 and not cut:  # ahead, on the chunk the next take asks for
            pos, stop = end, end + rng.choice((1, 50, 300, 1 << 20))
            ahead.start(pos, stop)
        else:
            if choice < 0.8:  # ahead, on a chunk no one will ask for
                ahead.start(end, end + 100)
            pos = rng.randrange(len(buf) + 1)
            stop = pos + rng.choice((1, 50, 300, 1 << 20))
    ahead.wait()


def mapping_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (Linux's /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isalnum() and "-" in line.split(" ", 1)[0]:  # a mapping's first line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_the_walking_thread_drops_the_pages_it_is_handed(tmp_path):
    """The chunked reader hands the pages behind its chunk to the next walk's thread (drop_with_next): they
    leave the process's resident memory, the walk's answer unchanged; pages outside the buffer are refused.
    The walk runs 4 MB past the dropped pages: touching a page may map its whole folio again (2 MB)."""
    path = tmp_path / "records.pcap"
    path.write_bytes(records(random.Random(3), True, 90_000))  # about 8.7 MB
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        size = len(m)
        assert sum(view[::4096]) >= 0  # every page resident
        before = mapping_rss_kb(path)
        assert before * 1024 >= size - 4096
        ahead = WalkAhead(view, True, 1 << 17, np.dtype("V16"), size - 16)
        with pytest.raises(ValueError):
            ahead.drop_with_next(0, size + 1)
        starts, end, _, _ = ahead.take(0, 8 << 20)  # to find a record start past 8 MB
        at = int(starts[-1])
        dropped = 4 << 20
        ahead.drop_with_next(0, dropped)
        ahead.start(at, size)
        starts, end, cut, _ = ahead.take(at, size)
        after = mapping_rss_kb(path)  # before the plain walk below reads every page again
        assert (starts.tolist(), end, cut) == plain_walk(bytes(view[:size]), at, size, True, 1 << 17)
        assert after * 1024 <= before * 1024 - dropped + 4096, (before, after)
        del view, starts, ahead


# --- the columns derived on the walk's thread, against the same columns computed on whole arrays ------------

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
PUBLIC = Path(__file__).resolve().parents[3] / "shared" / "pcaps" / "public"


def chunk_columns(path: Path, derive: bool, monkeypatch) -> list[tuple] | None:
    """Every chunk of ``path`` as plain values: its columns (or tuples) and frame numbers and times. Without
    ``derive``, the walk derives nothing and ``_Layout`` computes the columns with numpy, as it does for
    captures it gathers no fields for."""
    from analyzer.capture import chunks as chunks_module
    from analyzer.capture.files import CaptureError, open_capture

    with monkeypatch.context() as m:
        if not derive:
            m.setattr(chunks_module._Layout, "derive_on", lambda self, ahead: None)
        try:
            cap = open_capture(path)
        except CaptureError:
            return None
        chunks = cap.chunks()
        if chunks is None:  # not a chunked kind of capture (pcapng, a link type read per packet)
            return None
        out = []
        for c in chunks:
            columns = [np.asarray(a).tobytes() for a in (c.ts, c.keys, c.seq, c.ack, c.flags, c.start, c.stop,
                                                         c.seg_len)]
            tuples = None if c.tuples is None else [(*t[:6], bytes(t[6]), t[7]) for t in c.tuples]
            out.append((c.first_frame, c.last_frame, c.last_ts, c.record_ts, columns, tuples))
        return out


def captures() -> list[Path]:
    found = sorted(p for p in SAMPLES.iterdir() if p.suffix == ".pcap")
    if PUBLIC.is_dir():
        found += sorted(p for p in PUBLIC.rglob("*") if p.is_file() and ".pcap" in p.name)
    return found


@pytest.mark.parametrize("path", captures(), ids=lambda p: p.name)
def test_the_derived_columns_are_those_computed_on_whole_arrays(path, monkeypatch):
    derived = chunk_columns(path, True, monkeypatch)
    if derived is None:
        pytest.skip("not read in chunks")
    assert derived == chunk_columns(path, False, monkeypatch)


def test_the_derived_columns_of_damaged_captures_are_those_computed_on_whole_arrays(tmp_path, monkeypatch):
    """Bytes changed anywhere past the file header: lengths, times, addresses, flags and payloads that are
    not what they claim; both ways of computing the columns must read them alike."""
    content = (SAMPLES / "tansu_consumer_group.pcap").read_bytes()
    rng = random.Random(11)
    for trial in range(30):
        path = tmp_path / f"d{trial}.pcap"
        path.write_bytes(damaged(content, rng, 400))
        assert chunk_columns(path, True, monkeypatch) == chunk_columns(path, False, monkeypatch), trial
