"""The cyclic garbage collector during an analysis.

An analysis allocates millions of short-lived containers (frame heads, decoded entries, rows). With
CPython's default settings a young collection runs every 700 of them, and every so often an old-generation
one walks all the objects the imports made (numpy, pyarrow, the generated decoders: hundreds of thousands)
although none of them will ever be garbage. Here the objects that exist when the analysis starts are
frozen out of the collector's view (``gc.freeze``: constant time, no object is touched), and the young
generation holds more before it is collected: 4 % fewer instructions (callgrind: 5288 M to 5082 M for the
200 MB benchmark capture, 973 M to 934 M for a warm analysis of its first 50 MB; benchmarks/JOURNAL.md).
Cycles the analysis makes are still collected, so memory stays bounded.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000  # container allocations between young collections (CPython's default: 700)


@contextmanager
def collector_tuned() -> Iterator[None]:
    """Freeze what exists and widen the young generation for the duration; both are put back after (the
    freeze only when nothing was frozen before, so a caller's own ``gc.freeze`` is left alone)."""
    thresholds = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen_before:
            gc.unfreeze()
