"""Record data: the bytes after one flag byte (verify CRC, expand legacy wrappers, skip refused batches) as a
``records`` field, walked by batch headers, summarised and decoded record by record under small limits.

Documented error: :class:`dissectors.kafka.records.RecordsError` (its subclasses CorruptData and
DecompressionRefused included). Beyond not raising: decompression stays within the limits. The budget is
charged what each expansion really cost, refused ones included, so the last one may pass it by one batch's work
(a buffer grown x4 at a time to one byte over the batch bound: under 4/3 of it); every one after is refused at
once.
"""

from __future__ import annotations

from dissectors.kafka.records import Limits, RecordsError, batches, records
from dissectors.kafka.records_summary import summary_at

ALLOWED = (RecordsError,)

MAX_BATCH = 1 << 16
MAX_TOTAL = 1 << 18
MAX_CHARGED = MAX_TOTAL + MAX_BATCH * 4 // 3 + 2


def test_one_input(data: bytes) -> None:
    if not data:
        return
    flags, buf = data[0], memoryview(data)[1:]
    verify_crc, legacy, skip_refused = bool(flags & 1), bool(flags & 2), bool(flags & 4)
    limits = Limits(MAX_BATCH, MAX_TOTAL)
    for walk in (
        lambda: batches(buf, 0, len(buf), verify_crc=verify_crc, decompress_legacy=legacy, limits=limits),
        lambda: summary_at(buf, 0, len(buf), verify_crc, limits),
        lambda: list(records(buf, 0, len(buf), limits=limits, skip_refused=skip_refused)),
    ):
        try:
            walk()
        except ALLOWED:
            pass
        assert limits.total_bytes <= MAX_CHARGED, limits.total_bytes
