#!/usr/bin/env python3
"""Time the Spark job on a folder of capture files against ``kafkacap export`` on the same folder.

    python benchmarks/bench_spark.py [--files 16] [--size-mb 16] [--profile small] [--cores 1 2] [--jobs 1 2]

The folder holds ``--files`` synthetic captures from make_capture.py (different seeds, names without digits
so they are independent captures rather than one rotated set), cached in bench-data/ (git-ignored).
Printed per run: wall seconds of the whole command and MB/s; for Spark also the session start (JVM and
SparkContext) and the job's phases (analysis stage, table writes), so the fixed overhead and the scaling
over executor cores show apart. Both tools run with the same analysis options and must agree on the
number of exchanges. Never run from the test suite.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_capture  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench-data"
KAFKACAP = Path(sys.executable).with_name("kafkacap")


def _letters(i: int) -> str:
    """0 -> aa, 1 -> ab, ...: file names without digits (digits would make the files one rotated set)."""
    return string.ascii_lowercase[i // 26] + string.ascii_lowercase[i % 26]


def ensure_folder(files: int, size_mb: float, profile: str) -> Path:
    folder = DATA / f"spark-{profile}-{files}x{size_mb:g}mb"
    folder.mkdir(parents=True, exist_ok=True)
    spec = make_capture.PROFILES[profile]
    for i in range(files):
        path = folder / f"capture-{_letters(i)}.pcap"
        truth = make_capture.truth_path(path)
        if path.exists() and truth.exists() and json.loads(truth.read_text()).get("generator") == (
                make_capture.GENERATOR_VERSION):
            continue
        print(f"generating {path.name} ({i + 1}/{files}) ...", file=sys.stderr, flush=True)
        make_capture.generate(path, spec, size_mb, spec.connections, 1000 + i,
                              make_capture.Impairments())
    return folder


def _timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}")
    return wall, done.stderr


def run_spark(folder: Path, cores: int, out: Path) -> tuple[float, dict[str, float], int]:
    command = [sys.executable, "-m", "spark_jobs.export_job", str(folder), "-o", str(out),
               "--master", f"local[{cores}]"]
    wall, log = _timed(command)
    phases = {"session": float(re.search(r"Spark session: ([\d.]+) s", log).group(1))}
    for name, seconds in re.findall(r"(\w+) ([\d.]+)", log.split("seconds:", 1)[1]):
        phases[name] = float(seconds)
    rows = ds.dataset(out / "exchanges", format="parquet", partitioning="hive").count_rows()
    return wall, phases, rows


def run_cli(folder: Path, jobs: int, out: Path) -> tuple[float, int]:
    wall, _ = _timed([str(KAFKACAP), "export", str(folder), "-o", str(out), "--jobs", str(jobs), "--no-progress"])
    return wall, pq.read_metadata(out / "exchanges.parquet").num_rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--size-mb", type=float, default=16, help="size of each capture file")
    p.add_argument("--profile", choices=sorted(make_capture.PROFILES), default="small")
    p.add_argument("--cores", type=int, nargs="+", default=[1, 2], help="Spark local[N] runs")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="kafkacap export --jobs runs")
    args = p.parse_args(argv)

    folder = ensure_folder(args.files, args.size_mb, args.profile)
    captures = sorted(folder.glob("*.pcap"))
    mb = sum(c.stat().st_size for c in captures) / 1e6
    print(f"{len(captures)} files, {mb:,.1f} MB in {folder.relative_to(REPO)}")
    scratch = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    counts = set()
    try:
        for jobs in args.jobs:
            wall, rows = run_cli(folder, jobs, scratch / f"cli-{jobs}")
            counts.add(rows)
            print(f"kafkacap export --jobs {jobs}: {wall:7.1f} s  {mb / wall:6.1f} MB/s  {rows:,} exchanges")
        for cores in args.cores:
            wall, phases, rows = run_spark(folder, cores, scratch / f"spark-{cores}")
            counts.add(rows)
            job = wall - phases["session"]
            detail = ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
            print(f"spark local[{cores}]:          {wall:7.1f} s  {mb / wall:6.1f} MB/s  {rows:,} exchanges  "
                  f"(job without session start {job:.1f} s, {mb / job:.1f} MB/s; {detail})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if len(counts) != 1:
        sys.exit(f"the runs disagree on the number of exchanges: {sorted(counts)}")


if __name__ == "__main__":
    main()
