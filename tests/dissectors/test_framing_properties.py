"""The splitter's documented guarantees, on every Kafka stream of the sample and public captures and of some
hostile captures (recorded as the analysis hands them over, replayed with stateless validators) and on
generated streams (random chunkings, gaps, garbage, TLS records, cut-off frames, absurd size prefixes): frames
are size-prefixed, ordered, disjoint pieces of the stream that re-concatenate to it when it is clean; the bytes
add up (frames + skipped + the frame the end cut off); memory held stays bounded."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import analyzer.session.connection as connection
from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.session.connection import find_request
from dissectors.kafka.framing import DEFAULT_KEEP, DEFAULT_MAX_FRAME, SCAN_WINDOW, FrameSplitter
from dissectors.kafka.headers import looks_like_request
from dissectors.sink import ByteSink
from tests import craft, hostile

ROOT = Path(__file__).resolve().parents[2]
# The plaintext samples (a TLS sample, with its key log beside it, is framed after decryption: test_tls.py).
SAMPLES = [p for p in sorted(ROOT.glob("sample_pcaps/*.pcap")) + sorted(ROOT.glob("sample_pcaps/*.pcapng"))
           if not p.with_name(p.stem + ".keys.log").exists()]
PUBLIC_DIR = ROOT.parent / "shared" / "pcaps" / "public"
PUBLIC = sorted(PUBLIC_DIR.glob("*.pcap")) + sorted(PUBLIC_DIR.glob("*.pcapng"))


def request_plausible(buf, off: int, end: int, size: int, fresh: bool) -> bool:
    return looks_like_request(buf, off, end, size)


def response_plausible(buf, off: int, end: int, size: int, fresh: bool) -> bool:
    """A stateless stand-in for the matcher's response check: a correlation id in a small range."""
    return end - off >= 4 and 0 <= struct.unpack_from(">i", buf, off)[0] < 1 << 20


def find_every(buf, start: int, end: int) -> int:
    """Every position is a candidate: the scan's validator does all the judging."""
    return start if start < end else -1


VALIDATORS = {"requests": (request_plausible, find_request), "responses": (response_plausible, find_every)}


class Tee(ByteSink):
    """Stands in for the splitter during an analysis: records the calls it gets, passes them on."""

    streams: list[tuple[str, list[tuple]]] = []

    def __init__(self, on_frame, validate, find, keep: int = DEFAULT_KEEP, max_frame: int = DEFAULT_MAX_FRAME,
                 owner=None, frames=None, responses: bool = False):
        self.inner = FrameSplitter(on_frame, validate, find, keep, max_frame, owner, frames=frames,
                                   responses=responses)
        self.events: list[tuple] = [("init", keep, max_frame)]
        kind = "responses" if getattr(validate, "__name__", "") == "response_plausible" else "requests"
        Tee.streams.append((kind, self.events))

    def begin(self) -> None:
        self.events.append(("begin",))
        self.inner.begin()

    def set_min_frame(self, n: int) -> None:
        self.events.append(("min_frame", n))
        self.inner.set_min_frame(n)

    def data(self, ts: int, no: int, chunk) -> None:
        self.events.append(("data", ts, no, bytes(chunk)))
        self.inner.data(ts, no, chunk)

    def gap(self, ts: int, nbytes: int) -> None:
        self.events.append(("gap", ts, nbytes))
        self.inner.gap(ts, nbytes)

    def finish(self, ts: int) -> None:
        self.events.append(("finish", ts))
        self.inner.finish(ts)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def frames_of(kind: str, events: list[tuple]) -> tuple[list[tuple], FrameSplitter]:
    """Play ``events`` to a splitter, checking after every call that it holds no more than it may."""
    frames: list[tuple] = []
    validate, find = VALIDATORS[kind]
    s = None
    for event in events:
        op = event[0]
        if op == "init":
            s = FrameSplitter(lambda *f: frames.append((*f[:5], bytes(f[5]), bool(f[6]))), validate, find,
                              *event[1:])
        elif op == "begin":
            s.begin()
        elif op == "min_frame":
            s.set_min_frame(event[1])
        elif op == "data":
            s.data(event[1], event[2], memoryview(event[3]))
        elif op == "gap":
            s.gap(event[1], event[2])
        else:
            s.finish(event[1])
        assert s.held <= max(s.keep, SCAN_WINDOW), (s.held, s.keep)
        if s.at_boundary():
            assert s.held == 0 and not s.body_left and not s.head_missing and not s.opaque()
    return frames, s


def assert_invariants(kind: str, events: list[tuple]) -> tuple[list[tuple], FrameSplitter]:
    """The documented guarantees: every frame is a size-prefixed piece of the stream, frames come in stream
    order without overlapping, and every byte fed is in a frame, counted as skipped, or in the frame the end
    cut off."""
    frames, s = frames_of(kind, events)
    stream = b"".join(e[3] for e in events if e[0] == "data")
    fed = len(stream)
    lost = sum(e[2] for e in events if e[0] == "gap")
    assert s.frames == len(frames) and s.held == 0
    for first_ts, _first_no, last_ts, _last_no, size, head, lossy in frames:
        assert s.min_frame <= size <= s.max_frame
        assert first_ts <= last_ts
        assert struct.unpack_from(">i", head)[0] == size
        assert len(head) <= min(size + 4, s.keep)
        assert lossy or len(head) == min(size + 4, s.keep)
    placed = sum(f[4] + 4 for f in frames) + s.skipped_bytes
    if lost:
        assert placed <= fed + lost
        return frames, s
    # Without gaps: whole heads are found in the stream in order, disjoint; the bytes add up.
    pos = 0
    for *_, size, head, lossy in frames:
        assert not lossy
        at = stream.find(head, pos)
        assert at >= 0
        pos = at + size + 4
    assert placed <= fed
    if not s.truncated_frames:
        assert placed == fed, (placed, fed)
    if not (s.tls or s.resyncs or s.skipped_bytes or s.truncated_frames) and all(f[4] + 4 <= s.keep for f in frames):
        assert b"".join(f[5] for f in frames) == stream
    return frames, s


def capture_streams(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[tuple]]]:
    Tee.streams = []
    with monkeypatch.context() as m:
        m.setattr(connection, "FrameSplitter", Tee)
        analyze_file(str(path), Options(detect_ports=True), lambda table, batch: None)
    return Tee.streams


@pytest.mark.parametrize("path", SAMPLES + PUBLIC, ids=lambda p: p.name)
def test_every_stream_of_the_captures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = capture_streams(path, monkeypatch)
    assert streams, f"no Kafka connection found in {path.name}"
    assert any(ev[0] == "data" for _kind, events in streams for ev in events)
    for kind, events in streams:
        assert_invariants(kind, events)
        # The same bytes also framed by the other direction's validator and finder.
        assert_invariants("responses" if kind == "requests" else "requests", events)


@pytest.mark.parametrize("case", ["tiny_segments", "resync_candidates", "random_both_ways", "length_prefix_2gib",
                                  "orphan_flood"])
def test_every_stream_of_the_hostile_captures(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = capture_streams(hostile.write_case(case, tmp_path / f"{case}.pcap"), monkeypatch)
    for kind, events in streams:
        assert_invariants(kind, events)


# -- generated streams -----------------------------------------------------------------------------------

def pieces(rng: random.Random) -> bytes:
    """A stream of requests with, now and then, garbage, a TLS record, a cut-off frame or a huge size prefix."""
    out = []
    for corr in range(rng.randrange(1, 14)):
        kind = rng.random()
        if kind < 0.35:
            out.append(craft.heartbeat_request(corr, client_id="c" * rng.randrange(0, 40)))
        elif kind < 0.65:
            out.append(craft.produce_request_v3(corr, acks=1, payload_size=rng.randrange(0, 3000)))
        elif kind < 0.75:
            out.append(rng.randbytes(rng.randrange(1, 700)))
        elif kind < 0.8:
            out.append(b"\x16\x03\x01" + rng.randbytes(rng.randrange(0, 300)))
        elif kind < 0.9:
            frame = craft.produce_request_v3(corr, acks=1, payload_size=rng.randrange(0, 500))
            out.append(frame[:rng.randrange(1, len(frame))])
        else:
            out.append(struct.pack(">i", rng.choice([-1, 0, 1, 3, 1 << 30])) + rng.randbytes(rng.randrange(0, 64)))
    return b"".join(out)


def generated_events(seed: int, keep: int, max_frame: int, gaps: bool, begin: bool, short: bool) -> list[tuple]:
    rng = random.Random(seed)
    stream = pieces(rng)
    events: list[tuple] = [("init", keep, max_frame)]
    if short:
        events.append(("min_frame", 2))
    if begin:
        events.append(("begin",))
    pos = no = 0
    while pos < len(stream):
        n = rng.choice([1, 2, 3, 5, 11, 64, 300, 1448, 5000])
        no += 1
        if gaps and rng.random() < 0.08:
            events.append(("gap", no * 10, min(n, len(stream) - pos)))
        else:
            events.append(("data", no * 10, no, stream[pos:pos + n]))
        pos += n
    events.append(("finish", no * 10 + 5))
    return events


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), keep=st.sampled_from([4, 16, 64, 512, 4096, DEFAULT_KEEP]),
       max_frame=st.sampled_from([64, 4096, DEFAULT_MAX_FRAME]), gaps=st.booleans(), begin=st.booleans(),
       short=st.booleans(), kind=st.sampled_from(["requests", "responses"]))
def test_generated_streams(seed, keep, max_frame, gaps, begin, short, kind):
    assert_invariants(kind, generated_events(seed, keep, max_frame, gaps, begin, short))


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), kind=st.sampled_from(["requests", "responses"]))
def test_clean_streams_re_concatenate(seed, kind):
    """A stream seen from its start, all frames, any chunking: the frames are the stream, nothing skipped."""
    rng = random.Random(seed)
    stream = b"".join(craft.heartbeat_request(corr) if rng.random() < 0.5 else
                      craft.produce_request_v3(corr, acks=1, payload_size=rng.randrange(0, 9000))
                      for corr in range(rng.randrange(1, 12)))
    events: list[tuple] = [("init", DEFAULT_KEEP, DEFAULT_MAX_FRAME), ("begin",)]
    pos = 0
    while pos < len(stream):
        n = rng.choice([1, 2, 3, 5, 11, 64, 300, 1448, 5000])
        events.append(("data", pos, pos, stream[pos:pos + n]))
        pos += n
    events.append(("finish", pos))
    frames, s = assert_invariants(kind, events)
    assert b"".join(f[5] for f in frames) == stream
    assert (s.resyncs, s.skipped_bytes, s.truncated_frames) == (0, 0, 0)
