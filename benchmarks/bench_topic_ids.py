#!/usr/bin/env python3
"""What naming topic ids at the end of a run costs when every row waits for it (analyzer.pipeline.topic_ids).

    python benchmarks/bench_topic_ids.py [--rows 4000000] [--batch 16384] [--topics 200]

The worst case: a capture that starts after the clients' last Metadata call, so from the first batch on every
partitions row holds an unnamed id and the table is held back (in memory up to HOLD_BYTES, then spilled to an
Arrow IPC file) until the run's end names the ids. Batches of PARTITIONS_SCHEMA shape (all its columns, topics
by id) are fed to the resolver and taken back named; printed: rows per second through feed and finish, the
bytes spilled, and the peak RSS of this process (the batches are made one at a time: the peak is the resolver's
and one batch's).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analyzer.pipeline import topic_ids  # noqa: E402
from analyzer.pipeline.topic_ids import TopicIdResolver  # noqa: E402
from analyzer.tables.schemas import PARTITIONS_SCHEMA  # noqa: E402


def batches(rows: int, size: int, ids: list[uuid.UUID]):
    """The batches, made one at a time (the caller holds none of them: the peak RSS is the resolver's)."""
    for start in range(0, rows, size):
        n = min(size, rows - start)
        texts = pa.array([str(ids[(start + k) % len(ids)]) for k in range(n)], pa.string())
        columns = [texts if field.name in ("topic", "topic_id") else pa.nulls(n, field.type)
                   for field in PARTITIONS_SCHEMA]
        yield pa.RecordBatch.from_arrays(columns, schema=PARTITIONS_SCHEMA)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--batch", type=int, default=16_384)
    parser.add_argument("--topics", type=int, default=200)
    args = parser.parse_args()
    ids = [uuid.uuid4() for _ in range(args.topics)]
    names = {i.bytes: f"topic-{n}" for n, i in enumerate(ids)}
    nbytes = count = held = 0
    started = time.perf_counter()
    resolver = TopicIdResolver()
    for batch in batches(args.rows, args.batch, ids):
        nbytes += batch.nbytes
        count += 1
        held += not resolver.feed("partitions", batch)
    fed = time.perf_counter()
    spill = resolver._folder
    spilled = sum(f.stat().st_size for f in Path(spill).iterdir()) if spill else 0
    out_rows = named = 0
    for _, batch in resolver.finish(names):
        out_rows += batch.num_rows
        named += batch.column("topic").null_count == 0 and batch.column("topic")[0].as_py().startswith("topic-")
    done = time.perf_counter()
    assert out_rows == args.rows and held == count and named == count
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.rows:,} partitions rows in {count} batches ({nbytes / 1e6:.0f} MB in Arrow), every one held "
          f"(HOLD_BYTES {topic_ids.HOLD_BYTES >> 20} MB a table)")
    print(f"  feed (hold, spill): {fed - started:.2f} s; finish (read back, name): {done - fed:.2f} s; "
          f"{args.rows / (done - started) / 1e6:.2f} M rows/s; spilled {spilled / 1e6:.0f} MB; peak RSS {peak:.0f} MB "
          f"(pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
