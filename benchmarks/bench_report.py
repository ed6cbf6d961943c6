#!/usr/bin/env python3
"""Build time and peak memory of ``kafkacap report`` on tables folders of growing size: memory should stay flat.

    python benchmarks/bench_report.py [--capture bench-data/steady-x9.pcap] [--port 9093] [--copies 1 10 30]
                                      [--work bench-data/report] [--baseline TREE] [--json FILE]

The capture is exported once (``kafkacap export``); then, per --copies N, a tables folder is written with N
copies of every table, each shifted in time by the capture's span (plus a second) and with its capture_file
names made distinct, so that the copies follow one another as one long capture would (same row-group size as
the export). Per size: rows, wall seconds and peak RSS of ``kafkacap report DIR -o DIR.html`` (from
/usr/bin/time -v), and the page's size. --baseline TREE runs the same command with TREE's code first on the
path (another checkout, for a before/after figure; keep its sizes small: an older tree may hold every row).
--spark-copies N lays the N copies out as a Spark output (a folder per table), runs the Spark aggregate job
on it (spark_jobs/aggregate_job.py, local mode, timed) and times the report, which then draws the overview and
latency from the aggregate tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench-data"
KAFKACAP = Path(sys.executable).with_name("kafkacap")
TABLES = ("exchanges", "errors", "partitions", "connections", "files")
MARKER = "_kafkacap.json"


def export(capture: Path, port: int, out: Path) -> None:
    if (out / MARKER).is_file():
        return
    if out.exists():
        shutil.rmtree(out)
    cmd = [str(KAFKACAP), "export", str(capture), "--no-progress", "-o", str(out)]
    cmd += ["--port", str(port)] if port else ["--detect-ports"]
    subprocess.run(cmd, check=True, env=_env(REPO))


def _span_us(export_dir: Path) -> int:
    files = pq.read_table(export_dir / "files.parquet", columns=["first_ts", "last_ts"])
    lo, hi = pc.min(files["first_ts"]), pc.max(files["last_ts"])
    return (hi.value - lo.value) + 1_000_000


def _table_file(out: Path, table: str, spark: bool) -> Path:
    return out / table / "part-00000.parquet" if spark else out / f"{table}.parquet"


def replicate(export_dir: Path, copies: int, out: Path, spark: bool = False) -> int:
    """``copies`` time-shifted copies of every table of ``export_dir`` in ``out`` (as an export, or as a Spark
    output: a folder per table); returns the exchange rows."""
    done = out / ("_SUCCESS" if spark else MARKER)
    if not done.is_file():
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shift = _span_us(export_dir)
        for table in TABLES:
            src = pq.ParquetFile(export_dir / f"{table}.parquet")
            row_group = max((src.metadata.row_group(i).num_rows for i in range(src.metadata.num_row_groups)),
                            default=65536)
            data = src.read()
            path = _table_file(out, table, spark)
            path.parent.mkdir(exist_ok=True)
            with pq.ParquetWriter(path, data.schema) as writer:
                for i in range(copies):
                    writer.write_table(_shifted(data, i * shift, i), row_group_size=max(row_group, 1))
        if spark:
            done.write_text("")
        else:
            shutil.copy(export_dir / MARKER, done)
    return pq.ParquetFile(_table_file(out, "exchanges", spark)).metadata.num_rows


def spark_aggregates(folder: Path) -> float:
    """Run the Spark aggregate job on ``folder`` (local mode); its wall seconds."""
    if (folder / "latency_histogram").is_dir():
        return float("nan")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "spark_jobs.aggregate_job", str(folder), "--master", "local[2]",
                    "--conf", "spark.ui.enabled=false"], check=True, env=_env(REPO), capture_output=True)
    return time.perf_counter() - started


def _shifted(t: pa.Table, shift_us: int, copy: int) -> pa.Table:
    cols = []
    for name, col in zip(t.column_names, t.columns, strict=True):
        if pa.types.is_timestamp(col.type):
            col = pc.add(col, pa.scalar(shift_us, pa.duration("us")).cast(pa.duration(col.type.unit)))
        elif name == "capture_file" and copy:
            col = pc.binary_join_element_wise(pa.scalar(f"copy{copy}-"), col, "")
        cols.append(col)
    return pa.table(cols, schema=t.schema)


def _env(tree: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def measure(folder: Path, tree: Path) -> dict:
    page = folder.with_suffix(".html")
    cmd = ["/usr/bin/time", "-v", str(KAFKACAP), "report", str(folder), "-o", str(page)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=_env(tree))
    if run.returncode != 0:
        raise SystemExit(f"report failed on {folder}:\n{run.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", run.stderr).group(1)
    seconds = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    return {"wall_s": seconds, "peak_rss_mb": rss_kb / 1024, "page_mb": page.stat().st_size / 1e6}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capture", type=Path, default=DATA / "steady-x9.pcap")
    p.add_argument("--port", type=int, default=9093, help="the broker port (0: --detect-ports)")
    p.add_argument("--copies", type=int, nargs="*", default=[1, 10, 30])
    p.add_argument("--work", type=Path, default=DATA / "report")
    p.add_argument("--baseline", type=Path, help="another checkout to time the same way")
    p.add_argument("--baseline-copies", type=int, nargs="+", default=[1, 3])
    p.add_argument("--spark-copies", type=int, nargs="*", default=[])
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if not shutil.which("/usr/bin/time"):
        raise SystemExit("/usr/bin/time is needed (apt-get install time)")
    export_dir = args.work / "export"
    export(args.capture, args.port, export_dir)
    results = []
    runs = [(REPO, "this tree", n) for n in args.copies]
    if args.baseline:
        runs += [(args.baseline, "baseline", n) for n in args.baseline_copies]
    print(f"{'code':<10} {'copies':>6} {'exchanges':>12} {'partitions':>12} {'wall s':>7} {'peak RSS MB':>11} "
          f"{'page MB':>7}")
    for tree, label, n in runs:
        folder = args.work / f"x{n}"
        exchanges = replicate(export_dir, n, folder)
        partitions = pq.ParquetFile(folder / "partitions.parquet").metadata.num_rows
        r = {"code": label, "copies": n, "exchanges": exchanges, "partitions": partitions, **measure(folder, tree)}
        results.append(r)
        print(f"{label:<10} {n:>6} {exchanges:>12,} {partitions:>12,} {r['wall_s']:>7.2f} {r['peak_rss_mb']:>11.0f} "
              f"{r['page_mb']:>7.1f}", flush=True)
    for n in args.spark_copies:
        folder = args.work / f"x{n}-spark"
        exchanges = replicate(export_dir, n, folder, spark=True)
        job = spark_aggregates(folder)
        partitions = pq.ParquetFile(_table_file(folder, "partitions", True)).metadata.num_rows
        r = {"code": "aggregates", "copies": n, "exchanges": exchanges, "partitions": partitions,
             "spark_job_s": job, **measure(folder, REPO)}
        results.append(r)
        print(f"{'aggregates':<10} {n:>6} {exchanges:>12,} {partitions:>12,} {r['wall_s']:>7.2f} "
              f"{r['peak_rss_mb']:>11.0f} {r['page_mb']:>7.1f}   (Spark aggregate job: {job:.0f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
