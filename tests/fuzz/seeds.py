"""Seed inputs for every fuzz target, cut at run time from the sample captures (nothing big is committed).

Each seed is small (a few KB at most) so that the fuzzers spend their time mutating, not parsing: short
stretches of the captures' records, the Kafka frames and bodies in them (with the selector bytes each target
expects in front), their record data and compressed payloads, plus a few hand-made Kafka 0.7 frames and
reassembly scripts.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import struct
from collections.abc import Iterator
from pathlib import Path

from analyzer.capture.files import open_capture
from dissectors.kafka import headers
from dissectors.kafka.decoder import DecodeError, RecordsRef, decode
from tests.fuzz.targets.linklayer import LINK_TYPES

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
MAX_SEED = 4096
PCAP_HEADER = struct.Struct("<IHHiIII")
PCAP_RECORD = struct.Struct("<IIII")


def sample_captures() -> list[Path]:
    return sorted(p for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))


def pcap_records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, record with its header) of a little-endian classic pcap."""
    pos = PCAP_HEADER.size
    while pos + PCAP_RECORD.size <= len(data):
        caplen = PCAP_RECORD.unpack_from(data, pos)[2]
        end = pos + PCAP_RECORD.size + caplen
        yield pos, data[pos:end]
        pos = end


def pcapng_blocks(data: bytes) -> Iterator[bytes]:
    pos = 0
    while pos + 12 <= len(data):
        length = struct.unpack_from("<I", data, pos + 4)[0]
        if length < 12:
            return
        yield data[pos:pos + length]
        pos += length


def capture_cuts(path: Path) -> list[bytes]:
    """Stretches of ``path``: its file header and the records of a few places, each under MAX_SEED bytes."""
    data = path.read_bytes()
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        blocks = list(pcapng_blocks(data))
        head = [b for b in blocks[:2]]  # section header, interface description
        body = [b for b in blocks[2:] if len(b) < MAX_SEED // 2]
        return [b"".join(head + body[at:at + 6]) for at in (0, len(body) // 2)]
    records = [r for _, r in pcap_records(data) if len(r) < MAX_SEED // 2]
    cuts = []
    for at in (0, len(records) // 3, 2 * len(records) // 3):
        cut = bytearray(data[:PCAP_HEADER.size])
        for record in records[at:]:
            if len(cut) + len(record) > MAX_SEED:
                break
            cut += record
        cuts.append(bytes(cut))
    return cuts


def streams(path: Path) -> dict[bytes, bytes]:
    """Each direction's payload bytes in sequence order (the sample captures lose nothing)."""
    parts: dict[bytes, dict[int, bytes]] = {}
    with open_capture(path) as capture:
        for _no, _ts, key, seq, _ack, _flags, payload, _seg_len in capture.packets():
            if len(payload):
                parts.setdefault(key, {}).setdefault(seq, bytes(payload))
    out = {}
    for key, by_seq in parts.items():
        data = bytearray()
        for _seq, payload in sorted(by_seq.items()):
            data += payload
        out[key] = bytes(data)
    return out


def frames(stream: bytes) -> list[bytes]:
    """The size-prefixed frames from the start of ``stream``."""
    out = []
    pos = 0
    while pos + 4 <= len(stream):
        size = struct.unpack_from(">i", stream, pos)[0]
        if size < 0 or pos + 4 + size > len(stream):
            break
        out.append(stream[pos:pos + 4 + size])
        pos += 4 + size
    return out


def reverse_key(key: bytes) -> bytes:
    a = (len(key) - 4) // 2
    return key[a:2 * a] + key[:a] + key[-2:] + key[-4:-2]


def records_fields(value) -> Iterator[RecordsRef]:
    if isinstance(value, RecordsRef):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from records_fields(item)
    elif isinstance(value, list):
        for item in value:
            yield from records_fields(item)


def compressed_payloads(records: bytes) -> Iterator[tuple[int, bytes]]:
    """(codec, payload) of the compressed v2 batches and legacy wrappers in a records field."""
    pos = 0
    while pos + 17 <= len(records):
        length, magic = struct.unpack_from(">i4xb", records, pos + 8)
        end = pos + 12 + length
        if length <= 0 or end > len(records):
            return
        if magic == 2 and length >= 49:
            codec = struct.unpack_from(">h", records, pos + 21)[0] & 7
            if codec:
                yield codec, records[pos + 61:end]
        elif magic in (0, 1):
            codec = records[pos + 17] & 7
            at = pos + 18 + (8 if magic == 1 else 0)
            key_length = struct.unpack_from(">i", records, at)[0]
            at += 4 + max(key_length, 0) + 4
            if codec and at <= end:
                yield codec, records[at:end]
        pos = end


def kafka_seeds(path: Path, out: dict[str, list[bytes]], seen: set[tuple]) -> None:
    """Frames, bodies, record data and compressed payloads of one capture, for the dissector targets: one
    of each kind (api key, version, direction) over all captures, and the first request streams."""
    by_key = streams(path)
    for key, stream in by_key.items():
        requests = frames(stream)
        if not requests or not headers.looks_like_request(requests[0], 4, len(requests[0]),
                                                          len(requests[0]) - 4):
            continue
        if len(out["framing"]) < 40:
            out["framing"].append(bytes([len(out["framing"])]) + stream[:MAX_SEED])
            out["framing"].append(bytes([0x80 + len(out["framing"])]) + stream[:MAX_SEED])
        asked: dict[int, tuple[int, int]] = {}
        for frame in requests:
            try:
                header = headers.decode_request_header(frame, 4, len(frame))
            except headers.HeaderError:
                continue
            if not (0 <= header.api_key < 254 and 0 <= header.api_version < 256):
                continue  # not Kafka after all (a TLS stream read as plaintext): a seed's byte cannot say it
            asked[header.correlation_id] = (header.api_key, header.api_version)
            kind = (header.api_key, header.api_version, False)
            add_records(out, *kind, frame[header.body_offset:])
            if kind not in seen:
                seen.add(kind)
                add_body(out, *kind, frame[header.body_offset:])
                out["headers"].append(bytes([header.api_key + 2, header.api_version]) + frame[:64])
        for frame in frames(by_key.get(reverse_key(key), b"")):
            corr = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else None
            if corr not in asked:
                continue
            api_key, version = asked[corr]
            try:
                _corr, body_offset = headers.decode_response_header(frame, 4, len(frame), api_key, version)
            except headers.HeaderError:
                continue
            add_records(out, api_key, version, True, frame[body_offset:])
            if (api_key, version, True) in seen:
                continue
            seen.add((api_key, version, True))
            out["headers"].append(bytes([api_key + 2, version]) + frame[:64])
            add_body(out, api_key, version, True, frame[body_offset:])


def add_body(out: dict[str, list[bytes]], api_key: int, version: int, is_response: bool, body: bytes) -> None:
    for flags in (0, 6) if is_response is False else (1, 7):
        seed = bytes([api_key, version, flags]) + body
        if len(seed) <= MAX_SEED:
            out["extract"].append(seed)
            out["decoder"].append(seed)


def add_records(out: dict[str, list[bytes]], api_key: int, version: int, is_response: bool, body: bytes) -> None:
    """The record data of a Produce request or Fetch response, and the compressed payloads in it."""
    if api_key > 1 or len(out["records"]) >= 80:
        return
    try:
        tree = decode(body, 0, len(body), api_key, version, is_response)
    except DecodeError:
        return
    for ref in records_fields(tree):
        records = body[ref.offset:ref.offset + ref.length]
        if 0 < len(records) <= MAX_SEED:
            out["records"].append(b"\x07" + records)
        for codec, payload in compressed_payloads(records):
            if len(payload) <= MAX_SEED:
                out["codecs"].append(bytes([codec]) + payload)


def legacy07_seeds() -> list[bytes]:
    """A few Kafka 0.7 request/response pairs, laid out as the 0.7 wire format page gives them."""

    def part(topic: bytes, partition: int) -> bytes:
        return struct.pack(">h", len(topic)) + topic + struct.pack(">i", partition)

    def message(payload: bytes, magic: int = 1, attributes: int = 0) -> bytes:
        import zlib
        body = bytes([magic]) + (bytes([attributes]) if magic == 1 else b"")
        body += struct.pack(">I", zlib.crc32(payload)) + payload
        return struct.pack(">i", len(body)) + body

    messages = message(b"hello") + message(b"world", magic=0)
    produce = struct.pack(">h", 0) + part(b"topic-a", 0) + struct.pack(">i", len(messages)) + messages
    fetch = struct.pack(">h", 1) + part(b"topic-a", 0) + struct.pack(">qi", 0, 1 << 20)
    multifetch = struct.pack(">hh", 2, 2) + 2 * (part(b"topic-a", 1) + struct.pack(">qi", 0, 1 << 20))
    offsets = struct.pack(">h", 4) + part(b"topic-a", 0) + struct.pack(">qi", -1, 10)
    fetch_response = struct.pack(">h", 0) + messages
    one_fetch = struct.pack(">ih", 2 + len(messages), 0) + messages
    multifetch_response = struct.pack(">h", 0) + one_fetch + one_fetch
    offsets_response = struct.pack(">hiqq", 0, 2, 5, 0)
    pairs = [(produce, b""), (fetch, fetch_response), (multifetch, multifetch_response),
             (offsets, offsets_response), (fetch, struct.pack(">h", 3))]
    return [struct.pack(">H", len(request)) + request + response for request, response in pairs]


def tcp_seeds() -> list[bytes]:
    """Reassembly scripts: in order, reordered, repeated, overlapping, lossy, across the sequence wrap."""
    out = []
    for seed in range(8):
        rng = random.Random(seed)
        base = (1 << 32) - 3000 if seed % 2 else rng.randrange(1 << 32)
        ops = [bytes([6]) + struct.pack(">H", 0) + b"\x00"]  # SYN at base: data from base + 1
        pos = 1
        segments = []
        while pos < 6000:
            n = rng.choice((1, 100, 255))
            segments.append((pos, n))
            pos += n
        if seed >= 2:
            rng.shuffle(segments)
        if seed >= 4:
            segments += rng.sample(segments, len(segments) // 4)
        for offset, n in segments:
            ops.append(bytes([0x80 if seed == 7 and rng.random() < 0.1 else 0]) + struct.pack(">HB", offset, n))
            if seed >= 6 and rng.random() < 0.05:
                ops.append(bytes([2]) + struct.pack(">HB", offset + n, 0))  # the peer ACKs
        out.append(struct.pack(">I", base) + b"".join(ops)[:MAX_SEED])
    return out


TLS_SAMPLES = ("tansu_tls.pcap", "tansu_tls_resume.pcap")
MAX_TLS_SEED = 12_000  # a handshake with its certificate and the first protected records


def tls_connections(path: Path) -> list[list[tuple[bool, bytes]]]:
    """The TLS connections of a capture: each one's segments in capture order, (from the client?, payload),
    retransmissions left out."""
    conns: dict[bytes, list[tuple[bytes, bytes]]] = {}
    seen: set[tuple[bytes, int]] = set()
    with open_capture(path) as capture:
        for _no, _ts, key, seq, _ack, _flags, payload, _seg_len in capture.packets():
            if not len(payload) or (key, seq) in seen:
                continue
            seen.add((key, seq))
            conns.setdefault(min(key, reverse_key(key)), []).append((key, bytes(payload)))
    out = []
    for segments in conns.values():
        client, first = segments[0]
        if first[:2] != b"\x16\x03" or len(first) < 6 or first[5] != 1:  # a ClientHello first
            continue
        out.append([(key == client, payload) for key, payload in segments])
    return out


def tls_script(segments: list[tuple[bool, bytes]], op_extra: int = 0, limit: int = MAX_TLS_SEED) -> bytes:
    """Steps of the tls target, one per segment, up to ``limit`` bytes."""
    out = bytearray()
    for from_client, payload in segments:
        step = struct.pack(">BH", (0 if from_client else 1) | op_extra, len(payload)) + payload
        if len(out) + len(step) > limit:
            break
        out += step
    return bytes(out)


def tls_seeds() -> list[bytes]:
    """Each sample TLS connection's start as it was, cut in small pieces, with a loss in the client's
    protected records, and once after a key log step (flags bit 0)."""
    out = []
    keys = (SAMPLES / "tansu_tls.keys.log").read_bytes()
    for name in TLS_SAMPLES:
        for n, segments in enumerate(tls_connections(SAMPLES / name)):
            out.append(bytes([n & 0xF8]) + tls_script(segments))
            if n < 3:
                out.append(bytes([0x06]) + tls_script(segments, op_extra=4))  # pieces; the hello parsers
                lossy = list(segments)
                late = [i for i, (c, _p) in enumerate(lossy) if c][-1]
                out.append(bytes([0x08]) + tls_script(lossy[:late]) + struct.pack(">BH", 2, 100)
                           + tls_script(lossy[late:]))
                out.append(bytes([0x01]) + struct.pack(">H", len(keys[:2000])).rjust(3, b"\0")
                           + keys[:2000] + tls_script(segments, limit=MAX_TLS_SEED - 2003))
    return out


def all_seeds() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {name: [] for name in (
        "capture", "linklayer", "tcp", "framing", "headers", "extract", "decoder", "records", "codecs",
        "legacy07", "pipeline", "tls")}
    seen: set[tuple] = set()
    for path in sample_captures():
        cuts = capture_cuts(path)
        out["capture"] += cuts + [gzip.compress(cuts[0], mtime=0)]
        out["pipeline"] += cuts
        if cuts[0][:4] == b"\xd4\xc3\xb2\xa1":
            linktype = struct.unpack_from("<I", cuts[0], 20)[0]
            if linktype in LINK_TYPES:
                for _at, record in list(pcap_records(cuts[0]))[:8]:
                    out["linklayer"].append(bytes([LINK_TYPES.index(linktype)]) + record[PCAP_RECORD.size:])
        kafka_seeds(path, out, seen)
    out["tcp"] = tcp_seeds()
    out["legacy07"] = legacy07_seeds()
    out["tls"] = tls_seeds()
    return out


def write_seeds(folder: Path) -> dict[str, int]:
    """Write every target's seeds under ``folder/<target>/`` (named by content); the count per target."""
    counts = {}
    for target, seeds in all_seeds().items():
        where = folder / target
        where.mkdir(parents=True, exist_ok=True)
        unique = {hashlib.sha1(seed).hexdigest(): seed for seed in seeds}
        for name, seed in unique.items():
            (where / name).write_bytes(seed)
        counts[target] = len(unique)
    return counts
