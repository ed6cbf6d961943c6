"""The compiled extraction (generated Cython, dissectors/kafka/_generated/extract_plans.pxi) against the full
Python decoder, its independent reference: every request and response body of the sample captures and of the
public captures (when ../shared is there), bodies written from the JSON definitions for every API and version,
and bodies kio encodes. A body the decoder reads gives what the decoded tree shows (tests/dissectors/test_decoder.py's
read_off_the_tree); cut short at many points, with ``partial``, it gives a beginning of that (the same topics in
the same order, the same rows but for the last one, which holds what was read before the cut, error codes
among the whole body's); with bits flipped, a result or DecodeError, and the decoded tree's values whenever the decoder
still reads it."""

from __future__ import annotations

import random
import struct
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.kafka.decoder import DecodeError, DecodeTruncated, decode, schema
from dissectors.kafka.extract import Extracted, PartitionEntry, extract
from dissectors.kafka.headers import HeaderError, decode_request_header, decode_response_header
from tests.dissectors.test_decoder import read_off_the_tree
from tests.dissectors.test_roundtrip import (
    ALL_BODIES,
    DEFINITIONS,
    KIO_BODIES,
    JsonEncoder,
    by_api,
    draw_kio_body,
    json_message,
    kio,
)
from tests.fuzz.seeds import sample_captures, streams

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
PUBLIC = SHARED / "pcaps" / "public"


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


def decoded(buf, off: int, key: int, version: int, is_response: bool) -> Extracted | None:
    """What the decoded tree shows, or None when the decoder does not read the body."""
    try:
        tree = decode(buf, off, len(buf), key, version, is_response)
    except DecodeError:
        return None
    return read_off_the_tree(tree, schema(key, version, is_response), key, is_response)


def codes(found: Extracted) -> list[tuple[str, int]]:
    """(field path, code) of each error: a struct cut short reports its code before its topic may be read."""
    return [(e.field_path, e.error_code) for e in found.errors]


def a_beginning_of(cut: Extracted, whole: Extracted) -> bool:
    """Whether a partial result is what the whole body's result starts with."""
    rows = cut.partitions
    return (cut.topics == whole.topics[:len(cut.topics)] and cut.partition_count <= whole.partition_count
            and rows[:-1] == whole.partitions[:max(len(rows) - 1, 0)]
            and (not rows or rows[-1][:2] == whole.partitions[len(rows) - 1][:2])
            and not Counter(codes(cut)) - Counter(codes(whole)))


def check(buf: bytes, off: int, key: int, version: int, is_response: bool, cuts, flips: list[bytes]) -> bool:
    """The checks of the module docstring on one body; False when the decoder does not read it whole."""
    want = decoded(buf, off, key, version, is_response)
    if want is None:
        return False
    whole = extract(buf, off, len(buf), key, version, is_response)
    assert whole == want, (key, version, is_response, bytes(buf[off:off + 64]).hex())
    for cut in cuts:
        short = buf[:off + cut]
        got = extract(short, off, len(short), key, version, is_response, partial=True)
        assert got == whole if got.complete else a_beginning_of(got, whole), (key, version, is_response, cut)
        try:
            assert extract(short, off, len(short), key, version, is_response) == got
        except DecodeTruncated:
            assert not got.complete
    for flipped in flips:
        try:
            got = extract(flipped, off, len(flipped), key, version, is_response, partial=True)
        except DecodeError:
            continue
        want = decoded(flipped, off, key, version, is_response)
        if want is not None:
            assert got == want, (key, version, is_response, bytes(flipped[off:off + 64]).hex())
    return True


def flips_of(buf: bytes, off: int, rnd: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count if len(buf) > off else 0):
        flipped = bytearray(buf)
        flipped[rnd.randrange(off, len(buf))] ^= 1 << rnd.randrange(8)
        out.append(bytes(flipped))
    return out


@pytest.mark.parametrize("source", ["samples", "public"])
def test_captured_bodies_whole_cut_and_flipped(source):
    paths = sample_captures() if source == "samples" else sorted(
        p for p in PUBLIC.glob("*") if ".pcap" in p.name) if PUBLIC.is_dir() else []
    if not paths:
        pytest.skip("../shared/pcaps/public is not here")
    bodies = captured_bodies(paths)
    assert len(bodies) > 100
    rnd = random.Random(7)
    read = 0
    for frame, body, api_key, version, is_response in bodies:
        n = len(frame) - body
        cuts = {0, 1, n // 3, n // 2, n - 1, rnd.randrange(n + 1)}
        read += check(frame, body, api_key, version, is_response, sorted(c for c in cuts if 0 <= c < n),
                      flips_of(frame, body, rnd, 3))
    # the others: frames a capture's snap length cut short, and the legacy captures' bodies
    assert read > len(bodies) // 2, (read, len(bodies))


@pytest.mark.skipif(not DEFINITIONS, reason="Kafka's definitions (release jars) are not available")
@pytest.mark.parametrize("key, is_response, versions", by_api(ALL_BODIES))
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_spec_bodies_every_api_and_version_cut_and_flipped(key, is_response, versions, data):
    """Bodies written from the JSON definitions (every API and version), whole, cut at every point, and with
    bits flipped."""
    for version in versions:
        message = json_message(key, version, is_response)
        buf, _values = JsonEncoder(message, version, data.draw).struct(message["fields"])
        rnd = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
        assert check(buf, 0, key, version, is_response, range(len(buf)), flips_of(buf, 0, rnd, 4))


class AbortingFetch(JsonEncoder):
    """Fetch responses every partition of which lists aborted transactions: the topics, their partitions and
    the aborted_transactions arrays of 1 to 3 elements, never null (elsewhere the encoder draws 0 to 2 or null)."""

    LISTS = ("Responses", "Partitions", "AbortedTransactions")

    def field(self, field: dict) -> tuple[bytes, object]:
        if field["name"] not in self.LISTS:
            return super().field(field)
        items = [self.element(field["type"][2:], field) for _ in range(self.draw(st.integers(1, 3)))]
        return self.length(len(items), True) + b"".join(d for d, _ in items), [v for _, v in items]


@pytest.mark.skipif(not DEFINITIONS, reason="Kafka's definitions (release jars) are not available")
@settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fetch_responses_count_their_aborted_transactions(data):
    """Fetch v4+ responses: a partition row has the count of its aborted_transactions and the smallest
    first_offset among them, as the decoded tree shows (whole, cut at every point, bits flipped); flexible
    versions' elements end in tag buffers (unknown tags drawn too), which the count steps over."""
    versions = [v for key, v, is_response in ALL_BODIES if key == 1 and is_response and v >= 4]
    assert versions and max(versions) >= 12
    for version in versions:
        message = json_message(1, version, True)
        buf, values = AbortingFetch(message, version, data.draw).struct(message["fields"])
        rnd = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
        assert check(buf, 0, 1, version, True, range(len(buf)), flips_of(buf, 0, rnd, 8))
        rows = extract(buf, 0, len(buf), 1, version, True).partitions
        listed = [p["aborted_transactions"] for t in values["responses"] for p in t["partitions"]]
        assert [(r.aborted_transactions, r.first_aborted_offset) for r in rows] == [
            (len(a), min(e["first_offset"] for e in a)) for a in listed]


@pytest.mark.skipif(kio is None, reason="kio is not installed")
@pytest.mark.parametrize("key, is_response, versions", by_api(KIO_BODIES))
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_kio_bodies_every_api_and_version(key, is_response, versions, data):
    for version in versions:
        _, _, buf = draw_kio_body(data, key, version, is_response)
        cut = data.draw(st.integers(0, max(len(buf) - 1, 0)), label="cut")
        rnd = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
        assert check(buf, 0, key, version, is_response, [cut] if buf else [], flips_of(buf, 0, rnd, 2))


def test_the_public_extraction_hands_out_partition_entry_tuples():
    """The matcher reads the compiled entries (dissectors.kafka.extract.Entry, integers unboxed); ``extract``
    gives callers PartitionEntry tuples of the same fields, each field None where the body did not carry it."""
    entries = []
    for frame, body, api_key, version, is_response in captured_bodies(sample_captures()):
        if api_key in (0, 1, 8):  # Produce, Fetch, OffsetCommit
            try:
                entries += extract(frame, body, len(frame), api_key, version, is_response, partial=True).partitions
            except DecodeError:  # the legacy captures' bodies
                continue
    assert len(entries) > 100
    assert all(type(p) is PartitionEntry for p in entries)
    produced = [p for p in entries if p.record_bytes is not None]
    assert produced and all(isinstance(p.records_offset, int) and p.partition is not None for p in produced)
    assert any(p.base_offset is None and p.error_code is None for p in produced)  # requests: no response fields
