#!/usr/bin/env python3
"""Time ``kafkacap export`` on a large synthetic capture and check what it found against the truth.

    python benchmarks/bench_export.py [--profile big|small] [--size-mb N] [--jobs 1 2] [--keep] [--tshark]
                                      [--flat-sizes 200 800] [--json FILE]

The capture comes from make_capture.py and is cached in bench-data/ (git-ignored) with its truth files.
Per --jobs value: wall seconds, MB/s, packets/s, exchanges/s, peak RSS (the whole process tree, sampled
every 20 ms, and the largest single process), and a comparison of the exported exchanges table with the
generator's truth, per API and version and, when the table has the endpoints, per exchange (status and
latency). --tshark times tshark's Kafka dissection of the same file for scale. --flat-sizes runs --jobs 1
on captures of two sizes and prints both peak RSS figures: memory should not grow with the file.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_capture  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench-data"
KAFKACAP = Path(sys.executable).with_name("kafkacap")
STATUSES = ("ok", "error", "acks0", "no_response", "orphan_response", "malformed")


@dataclass
class Run:
    """One timed command on one capture."""

    tool: str
    jobs: int
    file_mb: float
    packets: int
    wall_s: float
    tree_peak_rss_mb: float
    max_process_rss_mb: float
    exchanges: int = 0
    check: dict = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return self.file_mb / self.wall_s

    def line(self) -> str:
        rate = f"{self.exchanges / self.wall_s:10,.0f} exch/s" if self.exchanges else " " * 17
        return (f"{self.tool:<9} jobs={self.jobs}  {self.file_mb:8.1f} MB {self.packets:>11,} pkts  "
                f"{self.wall_s:7.2f} s  {self.mb_per_s:7.1f} MB/s  {self.packets / self.wall_s:10,.0f} pkt/s  "
                f"{rate}  RSS tree {self.tree_peak_rss_mb:7.1f} MB (largest process {self.max_process_rss_mb:.1f})")


# --- the capture ---------------------------------------------------------------------------------------


def ensure_capture(profile: str, size_mb: float, seed: int) -> tuple[Path, dict]:
    """The cached capture for these settings, generated (with per-exchange truth) when absent."""
    path = DATA / f"kafka-{profile}-{size_mb:g}mb-seed{seed}.pcap"
    truth_file = make_capture.truth_path(path)
    current = truth_file.exists() and json.loads(truth_file.read_text()).get("generator") == (
        make_capture.GENERATOR_VERSION)
    if not (path.exists() and current):
        print(f"generating {path.name} ...", file=sys.stderr)
        spec = make_capture.PROFILES[profile]
        make_capture.generate(path, spec, size_mb, spec.connections, seed, make_capture.Impairments(),
                              exchanges_csv=True)
    return path, json.loads(truth_file.read_text())


# --- running and measuring -----------------------------------------------------------------------------


def _tree_rss_kb(root: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    stack.extend(int(child) for child in children.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def compile_bytecode(tree: Path) -> None:
    """Write the bytecode of a checkout's Python modules, as ``pip install`` does for an installed package:
    timed runs then load it, as users' do, even from a shell that sets PYTHONDONTWRITEBYTECODE (where every
    run would otherwise compile some twenty modules from source first, about 35 ms)."""
    folders = [str(tree / name) for name in ("analyzer", "dissectors") if (tree / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True, stdout=subprocess.DEVNULL)


def measure(command: list[str]) -> tuple[float, float, float]:
    """Run a command, output discarded; (wall seconds, peak RSS of its process tree in MB, largest single
    process in MB: ru_maxrss from wait4 covers the child and its reaped descendants)."""
    peak = 0
    with open(os.devnull, "wb") as sink, tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=sink, stderr=errors)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.02):
                peak = max(peak, _tree_rss_kb(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{command[0]} failed ({process.returncode}):\n{errors.read().decode()[-3000:]}")
    return wall, peak / 1024, usage.ru_maxrss / 1024  # Linux reports ru_maxrss in KiB


def run_kafkacap(capture: Path, truth: dict, jobs: int, keep: bool, extra: tuple[str, ...] = ()) -> Run:
    out_dir = DATA / f"export-{capture.stem}-j{jobs}" if keep else Path(tempfile.mkdtemp(prefix="kafkacap-bench-"))
    shutil.rmtree(out_dir, ignore_errors=True)
    command = [str(KAFKACAP), "export", str(capture), "-o", str(out_dir), "--jobs", str(jobs), "--no-progress",
               *extra]
    wall, tree_rss, max_rss = measure(command)
    run = Run("kafkacap", jobs, capture.stat().st_size / 1e6, truth["packets"], wall, tree_rss, max_rss)
    table = read_exchanges(out_dir)
    run.exchanges = table.num_rows
    run.check = compare(table, truth, capture, nested="--headers-only" not in extra)
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return run


def run_tshark(capture: Path, truth: dict) -> Run:
    command = ["tshark", "-r", str(capture), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "kafka",
               "-T", "fields", "-e", "kafka.correlation_id"]
    wall, tree_rss, max_rss = measure(command)
    return Run("tshark", 1, capture.stat().st_size / 1e6, truth["packets"], wall, tree_rss, max_rss)


def read_exchanges(out_dir: Path):
    import pyarrow.dataset as ds

    path = out_dir / "exchanges.parquet"
    if not path.exists():
        path = out_dir / "exchanges"
    return ds.dataset(str(path), format="parquet").to_table()


# --- checking against the truth ------------------------------------------------------------------------


def compare(table, truth: dict, capture: Path, nested: bool = True) -> dict:
    """Counts per (api_key, api_version, status) against the truth; per exchange when possible. ``nested``:
    the export decoded bodies, so an answer with only nested errors has status `error`."""
    columns = set(table.column_names)
    found: Counter = Counter()
    keys = table.column("api_key").to_pylist()
    versions = table.column("api_version").to_pylist()
    statuses = table.column("status").to_pylist()
    for key, version, status in zip(keys, versions, statuses, strict=True):
        found[key, version, status] += 1
    per_api = []
    for api in truth["apis"]:
        key, version = api["api_key"], api["api_version"]
        got = {s: found.pop((key, version, s), 0) for s in STATUSES}
        want = {s: api[s] for s in ("ok", "error", "acks0", "no_response")}
        per_api.append({"api": f"{api['api_name']} v{version}", "requests": api["requests"],
                        "found": sum(got[s] for s in STATUSES if s != "orphan_response"),
                        "damaged": api["damaged"], "want": want, "got": got,
                        "exact": all(got[s] == want[s] for s in want)})
    result = {"per_api": per_api, "unexpected": {f"{k}/{v}/{s}": n for (k, v, s), n in found.items()}}
    exchanges_csv = capture.with_name(capture.name + ".exchanges.csv")
    if exchanges_csv.exists() and {"client_ip", "client_port", "correlation_id", "latency_ms"} <= columns:
        result["per_exchange"] = compare_exchanges(table, exchanges_csv, nested)
    return result


def compare_exchanges(table, exchanges_csv: Path, nested: bool = True) -> dict:
    """Match rows on (client ip, client port, correlation id): found, same status, latency within 2 µs."""
    rows: dict[tuple, list] = {}
    names = ("client_ip", "client_port", "correlation_id", "status", "latency_ms")
    for ip, port, correlation_id, status, latency in zip(*(table.column(n).to_pylist() for n in names),
                                                         strict=True):
        rows.setdefault((ip, port, correlation_id), []).append((status, latency))
    tally: Counter = Counter()
    examples: list = []
    with open(exchanges_csv) as handle:
        for truth in csv.DictReader(handle):
            damaged = truth["request_damaged"] == "1" or truth["response_damaged"] == "1"
            tally["truth_damaged" if damaged else "truth_clean"] += 1
            candidates = rows.get((truth["client_ip"], int(truth["client_port"]), int(truth["correlation_id"])))
            if not candidates:
                tally["missing_damaged" if damaged else "missing_clean"] += 1
                if not damaged and len(examples) < 5:
                    examples.append(("missing", truth))
                continue
            status, latency = candidates.pop(0)
            if damaged:
                continue
            # The generator's status looks at the top-level error only; kafkacap's error_code falls back to
            # the first nested error (a partition's NOT_LEADER_OR_FOLLOWER) when it decodes bodies, so there
            # such an answer is an `error`.
            nested_error = nested and truth["status"] == "ok" and int(truth["nested_errors"])
            expected = "error" if nested_error else truth["status"]
            if status != expected:
                tally["status_differs"] += 1
                if len(examples) < 5:
                    examples.append((f"status {status}", truth))
            elif truth["response_end_ns"]:
                # µs pcap timestamps: both ends truncated to the microsecond
                want = (int(truth["response_end_ns"]) // 1000 - int(truth["request_end_ns"]) // 1000) / 1000
                if latency is not None and abs(latency - want) <= 0.002:
                    tally["latency_ok"] += 1
                else:
                    tally["latency_off"] += 1
                    if len(examples) < 5:
                        examples.append((f"latency {latency} ms, truth {want} ms", truth))
    tally["extra_rows"] = sum(len(left) for left in rows.values())
    return {"tally": dict(tally), "examples": [(why, dict(row)) for why, row in examples]}


def print_check(check: dict) -> None:
    print(f"  {'api':<22}{'requests':>9}{'found':>8}{'damaged':>8}   status counts, truth (undamaged+damaged) -> "
          "exported")
    for row in check["per_api"]:
        want = " ".join(f"{s}={n}" for s, n in row["want"].items() if n)
        got = " ".join(f"{s}={n}" for s, n in row["got"].items() if n)
        mark = "=" if row["exact"] else "~"
        print(f"  {row['api']:<22}{row['requests']:>9}{row['found']:>8}{row['damaged']:>8}   {want}  {mark}  {got}")
    if check["unexpected"]:
        print(f"  rows of api/version/status absent from the truth: {check['unexpected']}")
    if "per_exchange" in check:
        print(f"  per exchange: {check['per_exchange']['tally']}")
        for why, row in check["per_exchange"]["examples"]:
            print(f"    e.g. {why}: {row}")


# --- main ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(make_capture.PROFILES), default="big")
    parser.add_argument("--size-mb", type=float, help="capture size (default: the profile's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--keep", action="store_true", help="keep the exported tables in bench-data/")
    parser.add_argument("--tshark", action="store_true", help="also time tshark on the same capture")
    parser.add_argument("--flat-sizes", type=float, nargs=2, metavar=("SMALL_MB", "LARGE_MB"),
                        help="peak RSS of --jobs 1 on two capture sizes")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--headers-only", action="store_true", help="time `kafkacap export --headers-only`")
    args = parser.parse_args(argv)
    if not KAFKACAP.exists():
        raise SystemExit(f"{KAFKACAP} not found: install the project (pip install -e .) first")
    compile_bytecode(REPO)
    size = args.size_mb or make_capture.PROFILES[args.profile].size_mb
    capture, truth = ensure_capture(args.profile, size, args.seed)
    print(f"{capture.name}: {capture.stat().st_size / 1e6:.1f} MB, {truth['packets']:,} packets, "
          f"{truth['exchanges']:,} exchanges, {truth['connections']} connections, "
          f"impairments {truth['impairments']}")
    runs = []
    for jobs in args.jobs:
        run = run_kafkacap(capture, truth, jobs, args.keep, ("--headers-only",) if args.headers_only else ())
        runs.append(run)
        print(run.line())
        print_check(run.check)
    if args.tshark:
        if shutil.which("tshark") is None:
            print("tshark not installed (apt-get install -y tshark)")
        else:
            run = run_tshark(capture, truth)
            runs.append(run)
            print(run.line())
            best = min(r.wall_s for r in runs if r.tool == "kafkacap")
            print(f"tshark / kafkacap (best) wall time: {run.wall_s / best:.1f}x")
    if args.flat_sizes:
        print("memory flat check (--jobs 1):")
        for flat_size in args.flat_sizes:
            flat_capture, flat_truth = ensure_capture(args.profile, flat_size, args.seed)
            done = [r for r in runs if r.tool == "kafkacap" and r.jobs == 1 and flat_capture == capture]
            run = done[0] if done else run_kafkacap(flat_capture, flat_truth, 1, False,
                                                    ("--headers-only",) if args.headers_only else ())
            if not done:
                runs.append(run)
            print(f"  {run.file_mb:8.1f} MB: peak RSS tree {run.tree_peak_rss_mb:.1f} MB, "
                  f"largest process {run.max_process_rss_mb:.1f} MB, {run.mb_per_s:.1f} MB/s")
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "mb_per_s": r.mb_per_s} for r in runs], indent=1))


if __name__ == "__main__":
    main()
