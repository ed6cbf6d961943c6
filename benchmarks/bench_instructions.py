#!/usr/bin/env python3
"""Instructions per analysis of a capture, counted by valgrind's callgrind: a figure that does not drift.

    python benchmarks/bench_instructions.py [CAPTURE] [--slice-mb 50] [--headers-only] [--ports 9092] [--tree DIR ...]

Wall time on a shared machine drifts by tens of percent within an hour; the number of instructions an
analysis executes does not (to a few parts in a thousand). The script runs ``analyze_file`` once and three
times under callgrind (imports and the first-use compilation of extraction plans are the same in both) and
prints the difference divided by two: the instructions of one warm analysis, tables built, nothing written.
The default capture is the first 50 MB of the benchmark's 800 MB one (cut at a record boundary, kept in
bench-data/). ``--tree`` measures other checkouts of the project side by side (their ``analyzer`` and
``dissectors`` come first on the path), e.g. a ``git worktree`` of the commit before a change.

Needs valgrind (``apt-get install -y valgrind``); a 50 MB analysis takes about a minute under it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIG = REPO / "bench-data" / "kafka-big-800mb-seed1.pcap"
RUNNER = """
import gc, sys
from analyzer.pipeline.analyze import Options, analyze_file
for _ in range(int(sys.argv[3])):
    analyze_file(sys.argv[1], Options(bodies=sys.argv[2] == "1", ports=tuple(map(int, sys.argv[4].split(",")))),
                 lambda table, batch: None)
    gc.collect()
"""


def cut(source: Path, mb: float) -> Path:
    """The first ``mb`` MB of a classic pcap, ending at a record boundary (made once, kept beside it)."""
    target = source.with_name(f"{source.stem}.first{mb:g}mb.pcap")
    if target.exists():
        return target
    limit = int(mb * 1e6)
    with open(source, "rb") as f:
        data = f.read(limit + 65536 + 16)
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos = 24
    while pos + 16 <= len(data):
        nxt = pos + 16 + struct.unpack_from(order + "I", data, pos + 8)[0]
        if nxt > limit:
            break
        pos = nxt
    target.write_bytes(data[:pos])
    return target


def instructions(tree: Path, capture: Path, bodies: bool, runs: int, ports: str = "9092") -> int:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled once before, not inside the count
    command = [sys.executable, "-c", RUNNER, str(capture), "1" if bodies else "0", str(runs), ports]
    subprocess.run([sys.executable, "-c", "import analyzer.pipeline.analyze"], env=env, cwd=tree, check=True)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                          env=env, cwd=tree, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no total:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path)
    parser.add_argument("--slice-mb", type=float, default=50, help="cut the default capture to this size")
    parser.add_argument("--headers-only", action="store_true")
    parser.add_argument("--ports", default="9092", help="Kafka ports, comma-separated (the steady scenario: 9093)")
    parser.add_argument("--tree", type=Path, nargs="+", default=[REPO], help="project checkouts to measure")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    capture = args.capture
    if capture is None:
        if not BIG.exists():
            raise SystemExit(f"{BIG} is missing: make it with benchmarks/bench_export.py first")
        capture = cut(BIG, args.slice_mb)
    mode = "headers-only" if args.headers_only else "default"
    for tree in args.tree:
        capture = capture.resolve()  # the runner works in each tree
        once = instructions(tree.resolve(), capture, not args.headers_only, 1, args.ports)
        thrice = instructions(tree.resolve(), capture, not args.headers_only, 3, args.ports)
        print(f"{tree}: {(thrice - once) / 2 / 1e6:,.0f} M instructions per analysis ({capture.name}, {mode})")


if __name__ == "__main__":
    main()
