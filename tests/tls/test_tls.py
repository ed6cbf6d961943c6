"""Kafka over TLS, decrypted from a key log, against tshark and against the secrets it must never show.

The sample capture ``tansu_tls.pcap`` holds real clients talking TLS 1.3 and TLS 1.2 (AES-GCM, AES-CBC with
encrypt-then-MAC, ChaCha20-Poly1305) through stunnel to Tansu, with the key log the clients wrote. tshark, given
the same key log, decrypts and dissects the Kafka inside on its own (Wireshark's TLS and Kafka dissectors): every
Kafka PDU it finds must be an exchange of kafkacap's with the same client port, correlation id and API key, and
kafkacap's request and response times must be those of the packets in which tshark completed the PDUs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.pipeline.analyze import Options
from analyzer.tls.keylog import KeyLog
from tests.helpers import SAMPLES, analyze_tables, needs_tshark, run_tables

CAPTURE = SAMPLES / "tansu_tls.pcap"
KEYLOG = SAMPLES / "tansu_tls.keys.log"
PORT = 9094
# tansu_tls_resume: every TLS 1.3 handshake with a HelloRetryRequest, KeyUpdates both ways, TLS 1.3 PSK and
# TLS 1.2 ticket resumption.
RESUME, RESUME_KEYLOG, RESUME_PORT = SAMPLES / "tansu_tls_resume.pcap", SAMPLES / "tansu_tls_resume.keys.log", 9096
TLS_SAMPLES = [(CAPTURE, KEYLOG, PORT), (RESUME, RESUME_KEYLOG, RESUME_PORT)]


def analyse(path: Path, keys: KeyLog | None, port: int = PORT, **options) -> tuple[dict[str, pa.Table], object]:
    tables = analyze_tables(path, ports=(port,), tls_keys=keys, **options)
    return tables, tables.report


def tshark_pdus(path: Path, keylog: Path, port: int = PORT) -> tuple[dict[tuple[int, int], tuple[int, int]],
                                                                     dict[tuple, int], dict[int, int], set[int]]:
    """tshark's Kafka PDUs: requests {(client port, correlation id): (api key, frame)}, responses {(client port,
    correlation id): frame}, each frame's capture time (ns), and the TLS handshake message types it saw."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-o", f"tls.keylog_file:{keylog}", "-d", f"tcp.port=={port},tls",
         "-d", f"tls.port=={port},kafka", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
         "-e", "frame.number", "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.dstport",
         "-e", "kafka.request_key", "-e", "kafka.correlation_id", "-e", "tls.handshake.type"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    requests: dict[tuple[int, int], tuple[int, int]] = {}
    responses: dict[tuple[int, int], int] = {}
    times: dict[int, int] = {}
    handshakes: set[int] = set()
    for line in out.splitlines():
        frame, when, sport, dport, keys, corrs, kinds = (line.split("\t") + [""] * 7)[:7]
        handshakes |= {int(k) for k in kinds.replace(",", ";").split(";") if k}
        seconds, _, fraction = when.partition(".")
        times[int(frame)] = int(seconds) * 10**9 + int((fraction + "000000000")[:9])
        if not corrs:
            continue
        if int(dport) == port:
            for key, corr in zip(keys.split(";"), corrs.split(";"), strict=True):
                requests[(int(sport), int(corr))] = (int(key), int(frame))
        else:
            for corr in corrs.split(";"):
                responses[(int(dport), int(corr))] = int(frame)
    return requests, responses, times, handshakes


@needs_tshark
@pytest.mark.parametrize(("capture", "keylog", "port"), TLS_SAMPLES, ids=lambda v: getattr(v, "stem", v))
def test_every_pdu_tshark_decrypts_is_an_exchange_with_its_times(capture: Path, keylog: Path, port: int) -> None:
    requests, responses, times, handshakes = tshark_pdus(capture, keylog, port)
    assert len(requests) >= 15 and len(responses) >= 15  # tshark did decrypt: the test compares something
    if capture == RESUME:
        assert 24 in handshakes  # the KeyUpdates tshark decrypted are in the capture (the HRRs, in the clear)
    tables, _ = analyse(capture, KeyLog.from_file(keylog), port)
    rows = {(r["client_port"], r["correlation_id"]): r for r in tables["exchanges"].to_pylist()}
    assert set(rows) == set(requests) | set(responses)
    for key, (api_key, frame) in requests.items():
        row = rows[key]
        assert row["api_key"] == api_key
        assert int(row["request_last_ts"].timestamp() * 1e6) == times[frame] // 1000, key
    for key, frame in responses.items():
        row = rows[key]
        assert row["response_frame"] == frame, key
        assert int(row["response_last_ts"].timestamp() * 1e6) == times[frame] // 1000, key
        if key in requests:
            expected = (times[frame] - times[requests[key][1]]) / 1e6
            assert row["latency_ms"] == pytest.approx(expected, abs=1e-3)


def test_the_bulk_path_and_the_packet_loop_decrypt_alike() -> None:
    keys = KeyLog.from_file(KEYLOG)
    bulk, _ = analyse(CAPTURE, keys)
    loop, _ = analyse(CAPTURE, keys, bulk=False)
    for name in ("exchanges", "connections"):
        key = ["connection_id", "correlation_id"] if name == "exchanges" else ["connection_id"]
        assert bulk[name].sort_by([(k, "ascending") for k in key]).equals(
            loop[name].sort_by([(k, "ascending") for k in key]))


def test_without_keys_tls_is_counted_with_the_reason_and_bytes_add_up() -> None:
    tables, report = analyse(CAPTURE, None)
    assert "exchanges" not in tables or tables["exchanges"].num_rows == 0
    conns = tables["connections"].to_pylist()
    assert conns and all(c["tls"] and not c["tls_decrypted"] for c in conns)
    assert {c["tls_note"] for c in conns} == {"no key log given (--tls-keylog, or secrets in the pcapng)"}
    assert {c["tls_version"] for c in conns} == {"TLS 1.2", "TLS 1.3"}
    assert report.kafka_packets == 0 and report.tls_packets > 0
    keyed, report = analyse(CAPTURE, KeyLog.from_file(KEYLOG))
    for c in keyed["connections"].to_pylist():
        assert c["stream_bytes"] == c["framed_bytes"] + c["skipped_bytes"] + c["gap_bytes"] + (
            c["tls_record_bytes"] or 0)
    assert report.kafka_packets > 0 and report.tls_packets > 0  # the withheld clients' connections


def test_the_suites_of_the_sample_are_the_ones_recorded() -> None:
    tables, _ = analyse(CAPTURE, KeyLog.from_file(KEYLOG))
    decrypted = {(c["tls_version"], c["tls_cipher"]) for c in tables["connections"].to_pylist() if c["tls_decrypted"]}
    assert decrypted == {
        ("TLS 1.3", "TLS_AES_256_GCM_SHA384"),
        ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
        ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
        ("TLS 1.2", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    }


def secret_forms(keylog: Path) -> list[bytes]:
    """Every secret of a key log as it could leak: hex (either case) and raw bytes."""
    forms = []
    for line in keylog.read_bytes().splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith(b"#"):
            secret = bytes.fromhex(parts[2].decode())
            forms += [parts[2].lower(), parts[2].upper(), secret]
    assert forms
    return forms


def test_no_output_shows_a_tls_secret(tmp_path: Path) -> None:
    """Tables in every format, the summary, the exchange list, the show trees, the HTML report and the options'
    repr: none holds a secret of the key log, in hex or raw."""
    from sample_pcaps.truth_check import kafkacap_command

    forms = secret_forms(KEYLOG)
    cli = kafkacap_command()
    common = [str(CAPTURE), "--port", str(PORT), "--tls-keylog", str(KEYLOG), "--no-progress"]
    texts: list[bytes] = []
    runs = [["export", *common, "-o", str(tmp_path / "csv"), "-f", "csv", "--summary", "--records"],
            ["export", *common, "-o", str(tmp_path / "jsonl"), "-f", "jsonl"],
            ["export", *common, "-o", str(tmp_path / "parquet")],
            ["summary", *common],
            ["exchanges", *common, "--json"],
            ["report", *common, "-o", str(tmp_path / "page.html")],
            ["show", str(CAPTURE), "--port", str(PORT), "--tls-keylog", str(KEYLOG), "--connection", "1",
             "--limit", "0"]]
    for args in runs:
        done = subprocess.run([*cli, *args], capture_output=True, timeout=300, check=False)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        texts += [done.stdout, done.stderr]
    assert b"Produce" in b"".join(texts)  # the runs did decode something
    import pyarrow.parquet as pq

    for path in tmp_path.rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes())
            if path.suffix == ".parquet":
                texts.append(repr(pq.read_table(path).to_pylist()).encode())
    texts.append(repr(Options(tls_keys=KeyLog.from_file(KEYLOG))).encode())
    leaked = [form for form in forms for text in texts if form in text]
    assert not leaked


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_pcapng_decryption_secrets_blocks_decrypt_without_the_flag(tmp_path: Path) -> None:
    """``editcap --inject-secrets`` puts the key log into the capture: the same exchanges as with --tls-keylog,
    in one process and across shard processes."""
    injected = tmp_path / "tls.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{KEYLOG}", str(CAPTURE), str(injected)], check=True,
                   capture_output=True, timeout=60)
    flagged, _ = analyse(CAPTURE, KeyLog.from_file(KEYLOG))
    own, report = analyse(injected, None)
    key = [("client_port", "ascending"), ("correlation_id", "ascending")]
    columns = ["client_port", "correlation_id", "api_key", "status", "latency_ms", "record_count"]
    assert own["exchanges"].select(columns).sort_by(key).equals(flagged["exchanges"].select(columns).sort_by(key))
    assert report.stats.tls_secret_blocks == 1 and report.stats.on_tls_secrets is None
    sharded = run_tables(injected, ports=(PORT,), jobs=2)["exchanges"]
    assert sharded.select(columns).sort_by(key).equals(flagged["exchanges"].select(columns).sort_by(key))


@pytest.mark.parametrize("how", ["loss", "repeat", "snaplen", "reorder"])
def test_damaged_tls_streams_decrypt_what_they_can_and_account_for_every_byte(tmp_path: Path, how: str) -> None:
    """Packets lost, repeated, reordered or cut short: nothing crashes, every connection's bytes add up, the
    bulk path agrees with the packet loop, and every exchange read is one the intact capture has (same API and
    correlation id on the same connection): a lost record is passed over under its sequence number, not decoded
    as garbage."""
    from tests.tcp.test_stream_bytes import _damaged

    path = _damaged(CAPTURE, tmp_path / "tansu_tls.pcap", how, seed=len(how))
    keys = KeyLog.from_file(KEYLOG)
    clean, _ = analyse(CAPTURE, keys)
    intact = {(r["client_port"], r["correlation_id"], r["api_key"]) for r in clean["exchanges"].to_pylist()}
    results = [analyse(path, keys, bulk=bulk)[0] for bulk in (True, False)]
    for tables in results:
        for c in tables["connections"].to_pylist():
            assert c["stream_bytes"] == c["framed_bytes"] + c["skipped_bytes"] + c["gap_bytes"] + (
            c["tls_record_bytes"] or 0), c
        rows = tables["exchanges"].to_pylist() if "exchanges" in tables else []
        read = {(r["client_port"], r["correlation_id"], r["api_key"]) for r in rows if r["status"] in ("ok", "error")}
        assert read <= intact
        assert len(read) > len(intact) // 3  # most of the capture is still read
    key = [("connection_id", "ascending"), ("correlation_id", "ascending")]
    assert results[0]["exchanges"].sort_by(key).equals(results[1]["exchanges"].sort_by(key))


def _mutated(source: Path, out: Path, seed: int) -> Path:
    """A copy of the TLS sample with random TCP payload bytes overwritten, some record headers among them."""
    import random

    import dpkt

    rnd = random.Random(seed)
    with open(source, "rb") as f:
        reader = dpkt.pcap.Reader(f)
        linktype, packets = reader.datalink(), list(reader)
    with open(out, "wb") as f:
        writer = dpkt.pcap.Writer(f, linktype=linktype)
        for ts, data in packets:
            buf = bytearray(data)
            if len(buf) > 80 and rnd.random() < 0.3:
                for _ in range(rnd.randint(1, 6)):
                    at = rnd.randrange(66, len(buf))  # past Ethernet, IP and TCP (with timestamps) headers
                    buf[at] = rnd.choice((0x00, 0xFF, 0x16, 0x17, 0x03, rnd.randrange(256)))
            writer.writepkt(bytes(buf), ts)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_hostile_tls_bytes_never_crash_and_every_byte_is_accounted_for(tmp_path: Path, seed: int) -> None:
    """Bytes overwritten anywhere in the records (headers, handshake, ciphertext): the analysis ends without an
    internal error, each connection's bytes add up, and only exchanges of the intact capture are read."""
    path = _mutated(CAPTURE, tmp_path / "mutated.pcap", seed)
    clean, _ = analyse(CAPTURE, KeyLog.from_file(KEYLOG))
    intact = {(r["client_port"], r["correlation_id"], r["api_key"]) for r in clean["exchanges"].to_pylist()}
    for bulk in (True, False):
        tables, report = analyse(path, KeyLog.from_file(KEYLOG), bulk=bulk)
        assert report.error is None
        for c in tables["connections"].to_pylist():
            assert c["stream_bytes"] == c["framed_bytes"] + c["skipped_bytes"] + c["gap_bytes"] + (
            c["tls_record_bytes"] or 0), c
        rows = tables["exchanges"].to_pylist() if "exchanges" in tables else []
        assert {(r["client_port"], r["correlation_id"], r["api_key"]) for r in rows
                if r["status"] in ("ok", "error")} <= intact


def test_a_stream_joined_midway_is_taken_for_tls_only_on_record_headers_in_a_row() -> None:
    from analyzer.tls.layer import starts_tls

    record = bytes((23, 3, 3, 0, 20)) + bytes(20)
    assert starts_tls(record + bytes((23, 3, 3, 0, 1)), from_start=False)
    assert starts_tls(record, from_start=False)  # nothing after it to contradict
    assert not starts_tls(record + b"\x00\x00\x01\x00 plaintext record data", from_start=False)
    assert not starts_tls(bytes((23, 3, 3, 0xFF, 0xFF)) + bytes(40), from_start=False)  # longer than TLS allows
    assert starts_tls(bytes((22, 3, 1, 0xFF, 0xFF)), from_start=True)  # a stream's first byte: a header decides
    assert not starts_tls(b"\x00\x00\x00\x10\x00\x12\x00\x03", from_start=True)  # a Kafka request
