"""Record batch header walk speed: a records field of 10,000 real v2 batches from the sample captures.

    python benchmarks/bench_records.py

Prints batches/s and MB/s for the header walk (the default export path) and with CRC-32C verification.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dissectors.kafka.records import batches  # noqa: E402
from tests.dissectors.test_records import sample_sets  # noqa: E402


def best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    real = [d for d in sample_sets() if d[16] == 2]
    field = b"".join(real * (10_000 // len(real) + 1))
    count = len(batches(field, 0, len(field)))
    walk = best_of(5, lambda: batches(field, 0, len(field)))
    crc = best_of(5, lambda: batches(field, 0, len(field), verify_crc=True))
    print(f"{count:,} batches, {len(field) / 1e6:.1f} MB")
    print(f"header walk: {count / walk:,.0f} batches/s ({len(field) / walk / 1e6:,.0f} MB/s)")
    print(f"with CRC-32C: {count / crc:,.0f} batches/s ({len(field) / crc / 1e6:,.0f} MB/s)")


if __name__ == "__main__":
    main()
