#!/usr/bin/env python3
"""What decryption costs: the same real client traffic recorded in plaintext and over TLS, exported by kafkacap.

    python benchmarks/bench_tls.py [--seconds 20] [--size-mb 120] [--repeat 3] [--json FILE]

Recorded once into bench-data/tls/ (as root, like sample_pcaps/record.py): for each of plaintext, TLS 1.3
(AES-256-GCM) and TLS 1.2 (AES-128-GCM, ChaCha20-Poly1305), Tansu (behind stunnel for TLS) with a kafka-python
producer sending small records with a short linger (many small Produce requests) and a kafka-python consumer
fetching all the while, for ``--seconds``; the TLS clients write a key log. Each capture is replicated to
``--size-mb`` as bench_real.py does (copies on their own addresses, merged in time; a TLS copy's handshakes are
the original's, so the one key log serves them all).

Timed, interleaved, ``--repeat`` times: ``kafkacap export CAP -o DIR --port P --jobs 1 [--tls-keylog KEYS]``.
Printed per capture: min and median wall seconds, capture MB/s and exchanges per second (of the min), and the
TLS captures' throughput as a share of the plaintext one's, in exchanges per second (the same work) and in
capture MB/s (TLS captures are larger by their record overhead).
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import measure  # noqa: E402
from bench_real import DATA, REPO, kafkacap_command, replicate  # noqa: E402

sys.path.insert(0, str(REPO))
from sample_pcaps.brokers import StunnelTansu, TansuBroker  # noqa: E402
from sample_pcaps.capture import LoopbackCapture  # noqa: E402

FOLDER = DATA / "tls"
PORT = 9095
# name -> (TLS version or None for plaintext, TLS 1.2 cipher list)
KINDS = {
    "plain": (None, None),
    "tls13-aes256gcm": ("1.3", None),
    "tls12-aes128gcm": ("1.2", "ECDHE-RSA-AES128-GCM-SHA256"),
    "tls12-chacha20": ("1.2", "ECDHE-RSA-CHACHA20-POLY1305"),
}


def client_options(version: str | None, ciphers: str | None, keylog: Path) -> dict:
    if version is None:
        return {}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if version == "1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(ciphers)
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.keylog_filename = str(keylog)
    return {"security_protocol": "SSL", "ssl_context": context}


def workload(bootstrap: str, options: dict, seconds: float) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    stop = threading.Event()

    def consume() -> None:
        consumer = KafkaConsumer("bench-tls", bootstrap_servers=bootstrap, client_id="bench-consumer",
                                 auto_offset_reset="earliest", **options)
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=200)
        finally:
            consumer.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="bench-producer", acks=1, linger_ms=5,
                             enable_idempotence=False, **options)
    producer.send("bench-tls", b"warm-up").get(30)
    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + seconds
    index = 0
    while time.monotonic() < deadline:
        producer.send("bench-tls", key=b"key-%d" % (index % 7), value=b'{"seq": %d, "note": "%s"}' % (index, b"x" * 60))
        index += 1
        time.sleep(0.001)
    producer.flush(30)
    producer.close()
    stop.set()
    reader.join()


def record(kind: str, seconds: float) -> tuple[Path, Path | None]:
    FOLDER.mkdir(parents=True, exist_ok=True)
    capture = FOLDER / f"{kind}.pcap"
    keylog = FOLDER / f"{kind}.keys.log"
    version, ciphers = KINDS[kind]
    if capture.exists():
        return capture, keylog if version else None
    keylog.unlink(missing_ok=True)
    broker = TansuBroker("127.0.0.1", PORT) if version is None else StunnelTansu("127.0.0.1", PORT)
    print(f"recording {kind} for {seconds:.0f} s ...", flush=True)
    partial = capture.with_suffix(".partial.pcap")
    with broker, LoopbackCapture(partial, PORT):
        workload(broker.bootstrap, client_options(version, ciphers, keylog), seconds)
    partial.rename(capture)
    return capture, keylog if version else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--size-mb", type=float, default=120)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = {}
    for kind in KINDS:
        source, keylog = record(kind, args.seconds)
        runs[kind] = (replicate(source, args.size_mb, FOLDER), keylog)
    walls: dict[str, list[float]] = {kind: [] for kind in KINDS}
    exchanges: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for kind, (capture, keylog) in runs.items():
                out = Path(tmp) / kind
                flags = ["--jobs", "1", *(["--tls-keylog", str(keylog)] if keylog else [])]
                wall, _, _ = measure(kafkacap_command(capture, out, flags, port=PORT))
                walls[kind].append(wall)
                exchanges[kind] = pq.read_metadata(out / "exchanges.parquet").num_rows
    figures = {}
    for kind, (capture, _) in runs.items():
        best = min(walls[kind])
        mb = capture.stat().st_size / 1e6
        figures[kind] = {"capture_mb": round(mb, 1), "exchanges": exchanges[kind], "min_s": round(best, 2),
                         "median_s": round(statistics.median(walls[kind]), 2), "mb_per_s": round(mb / best, 1),
                         "exchanges_per_s": round(exchanges[kind] / best)}
    plain = figures["plain"]
    print(f"{'capture':18} {'MB':>7} {'exchanges':>10} {'min s':>7} {'median s':>9} {'MB/s':>7} {'exch/s':>8} "
          f"{'vs plain (exch/s)':>18} {'vs plain (MB/s)':>16}")
    for kind, f in figures.items():
        f["share_exchanges_per_s"] = round(f["exchanges_per_s"] / plain["exchanges_per_s"], 3)
        f["share_mb_per_s"] = round(f["mb_per_s"] / plain["mb_per_s"], 3)
        print(f"{kind:18} {f['capture_mb']:7.1f} {f['exchanges']:10,} {f['min_s']:7.2f} {f['median_s']:9.2f} "
              f"{f['mb_per_s']:7.1f} {f['exchanges_per_s']:8,} {f['share_exchanges_per_s']:18.2f} "
              f"{f['share_mb_per_s']:16.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
