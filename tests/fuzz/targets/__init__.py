"""Fuzz targets: one module per layer, each a ``test_one_input(data: bytes)`` that feeds the layer's entry point
and lets through only the exceptions that layer documents for bad input (its ``ALLOWED``). Anything else that
escapes is a finding.

The same modules serve atheris (coverage-guided, ``python -m tests.fuzz.run``) and hypothesis (``tests/``), so a
reimplementation of a layer (the compiled core) is fuzzed through unchanged targets.
"""

TARGETS = (
    "capture",  # analyzer.capture.files: pcap, pcapng, compressed files
    "linklayer",  # analyzer.capture.linklayer: link, IP and TCP header decoding
    "tcp",  # analyzer.tcp.reassembly: reassembly of one direction
    "framing",  # dissectors.kafka.framing: size-prefixed frames and resynchronisation
    "headers",  # dissectors.kafka.headers: request and response headers
    "extract",  # dissectors.kafka.extract: what the tables need from a body
    "decoder",  # dissectors.kafka.decoder: whole bodies
    "records",  # dissectors.kafka.records: record batches and legacy message sets
    "codecs",  # dissectors.kafka.codecs: bounded decompression
    "legacy07",  # dissectors.kafka.legacy07: the Kafka 0.7 wire format
    "pipeline",  # analyzer.pipeline.analyze: one capture file in, tables out
    "tls",  # analyzer.tls: records, handshake, key log, decryption, losses
)
