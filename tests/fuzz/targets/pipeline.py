"""The whole pipeline: any bytes as one capture file, analysed into tables (bodies, records, CRCs checked,
Kafka found on any port), packet by packet and in bulk, and the derived tables (groups, deliveries) made of
them.

Documented error: none: ``analyze_file`` never raises on bad input; a file it cannot read gets ``error`` set
to a message for the user. A report saying "internal error" is a defect the pipeline caught, so it fails
here too.
"""

from __future__ import annotations

from analyzer.derived.tables import DerivedTables
from analyzer.pipeline.analyze import Options, analyze_file
from tests.fuzz.targets._scratch import scratch_file

ALLOWED: tuple[type[BaseException], ...] = ()

OPTIONS = (
    Options(detect_ports=True, verify_crc=True, records=True, max_batch_mb=1, max_decompressed_mb=4),
    Options(detect_ports=True, bulk=False, max_batch_mb=1, max_decompressed_mb=4),
)


def test_one_input(data: bytes) -> None:
    path = scratch_file(data)
    for options in OPTIONS:
        derived = DerivedTables()  # the batches are built (every conversion runs), fed on and dropped
        report = analyze_file(path, options, derived.feed)
        assert not (report.error or "").startswith("internal error"), report.error
        for _ in derived.finish():
            pass
