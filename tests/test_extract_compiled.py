"""The compiled extraction (dissectors/kafka/_extract.pyx) against the Python plans it replaces on the hot path:
every request and response body of the sample captures and of the public captures (when ../shared is
there), whole, cut short at many points (with and without ``partial``) and with bytes flipped, and bodies kio
encodes for every API and version, must give the same result or the same error with the same text.
The full decoder, the independent reference, is checked against extract() by test_fuzz_properties.py and the
extract fuzz target."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.kafka.headers import HeaderError, decode_request_header, decode_response_header
from tests.fuzz.seeds import sample_captures, streams
from tests.fuzz.targets.extract import outcome
from tests.test_roundtrip import ALL_BODIES, KIO_BODIES, JsonEncoder, by_api, draw_kio_body, json_message, kio

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PUBLIC = SHARED / "pcaps" / "public"
SPEC = SHARED / "spec"


def captured_bodies(paths: list[Path]) -> list[tuple[bytes, int, int, bool]]:
    """(frame, api key, version, is_response) of every frame the clients and brokers exchanged, the body
    starting at the offset its header gives (responses paired with their requests by correlation id)."""
    out = []
    for path in paths:
        try:
            by_key = streams(path)
        except Exception:  # a capture the plain stream reader does not take (other link types)
            continue
        asked: dict[tuple, dict[int, tuple[int, int]]] = {}
        for key, data in by_key.items():
            pos = 0
            while pos + 12 <= len(data):
                size = struct.unpack_from(">i", data, pos)[0]
                if size < 8 or pos + 4 + size > len(data):
                    break
                frame = data[pos:pos + 4 + size]
                try:
                    head = decode_request_header(frame, 4, len(frame))
                except HeaderError:
                    head = None
                if head is not None and head.defined:
                    asked.setdefault(key, {})[head.correlation_id] = (head.api_key, head.api_version)
                    out.append((frame, head.body_offset, head.api_key, head.api_version, False))
                pos += 4 + size
        for _direction, data in by_key.items():
            pos = 0
            while pos + 8 <= len(data):
                size = struct.unpack_from(">i", data, pos)[0]
                if size < 4 or pos + 4 + size > len(data):
                    break
                frame = data[pos:pos + 4 + size]
                corr = struct.unpack_from(">i", frame, 4)[0]
                for requests in asked.values():
                    if corr in requests:
                        api_key, version = requests[corr]
                        try:
                            body = decode_response_header(frame, 4, len(frame), api_key, version)[1]
                        except HeaderError:
                            break
                        out.append((frame, body, api_key, version, True))
                        break
                pos += 4 + size
    return out


def same(frame: bytes, body: int, api_key: int, version: int, is_response: bool, partial: bool) -> None:
    view = memoryview(frame)[body:]
    compiled = outcome(view, api_key, version, is_response, partial, True)
    assert compiled == outcome(view, api_key, version, is_response, partial, False), \
        (api_key, version, is_response, partial, bytes(view[:64]).hex())


@pytest.mark.parametrize("source", ["samples", "public"])
def test_captured_bodies_whole_cut_and_flipped(source):
    paths = sample_captures() if source == "samples" else sorted(
        p for p in PUBLIC.glob("*") if ".pcap" in p.name) if PUBLIC.is_dir() else []
    if not paths:
        pytest.skip("../shared/pcaps/public is not here")
    bodies = captured_bodies(paths)
    assert len(bodies) > 100
    rnd = random.Random(7)
    for frame, body, api_key, version, is_response in bodies:
        same(frame, body, api_key, version, is_response, False)
        n = len(frame) - body
        for cut in {0, 1, n // 3, n // 2, n - 1, rnd.randrange(n + 1)}:
            short = frame[:body + max(cut, 0)]
            for partial in (False, True):
                same(short, body, api_key, version, is_response, partial)
        for _ in range(3):
            if n:
                flipped = bytearray(frame)
                flipped[body + rnd.randrange(n)] ^= 1 << rnd.randrange(8)
                same(bytes(flipped), body, api_key, version, is_response, rnd.random() < 0.5)


@pytest.mark.skipif(kio is None, reason="kio is not installed")
@pytest.mark.parametrize("key, is_response, versions", by_api(KIO_BODIES))
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_kio_bodies_every_api_and_version(key, is_response, versions, data):
    for version in versions:
        _, _, buf = draw_kio_body(data, key, version, is_response)
        same(buf, 0, key, version, is_response, False)
        cut = data.draw(st.integers(0, len(buf)), label="cut")
        same(buf[:cut], 0, key, version, is_response, data.draw(st.booleans(), label="partial"))


@pytest.mark.skipif(not (SPEC / "kafka-messages").exists(), reason="../shared/spec is not available")
@pytest.mark.parametrize("key, is_response, versions", by_api(ALL_BODIES))
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_spec_bodies_every_api_and_version_cut_and_flipped(key, is_response, versions, data):
    """Bodies written from the JSON definitions (every API and version, kio or not), whole, cut at every
    point, and with bits flipped."""
    for version in versions:
        message = json_message(key, version, is_response)
        buf, _values = JsonEncoder(message, version, data.draw).struct(message["fields"])
        same(buf, 0, key, version, is_response, False)
        for cut in range(len(buf)):
            same(buf[:cut], 0, key, version, is_response, cut % 2 == 0)
        flipped = bytearray(buf)
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            if flipped:
                flipped[data.draw(st.integers(0, len(flipped) - 1), label="at")] ^= 1 << data.draw(
                    st.integers(0, 7), label="bit")
        same(bytes(flipped), 0, key, version, is_response, data.draw(st.booleans(), label="partial"))
