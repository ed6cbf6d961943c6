"""Third-party captures (../shared/pcaps/public): request/response counts per API and version must equal
those their SOURCES.md reports, latencies must equal the capture-time differences of the packets that
completed request and response (read by dpkt, an independent reader), and, where tshark is installed, the
shared tshark-based oracle must agree on every request, pair and latency. Skipped when ../shared is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import dpkt
import pytest

from analyzer.cli.summary import Collector
from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.tables.schemas import EXCHANGES_SCHEMA
from analyzer.tables.writers import TableFolder

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
PUBLIC = SHARED / "pcaps" / "public"
TOOLS = SHARED / "tools"

pytestmark = pytest.mark.skipif(not (PUBLIC / "SOURCES.md").exists(), reason="../shared/pcaps/public not present")


def sources() -> dict[str, dict]:
    """File name -> {"ports": [...], "counts": {(api, version): (requests, responses)}, "orphans": n}."""
    out = {}
    if not (PUBLIC / "SOURCES.md").exists():
        return out
    for line in (PUBLIC / "SOURCES.md").read_text().splitlines():
        if not re.match(r"\| \d+ \|", line):
            continue
        cells = [c.strip() for c in line.split("|")]
        name = cells[2].strip("`")
        ports = [int(p) for p in re.findall(r"\d+", cells[8])]
        counts = {}
        for api, ver, req, resp in re.findall(r"(\w+)\(\d+\) v(\d+): (\d+)/(\d+)", cells[9]):
            counts[(api, int(ver))] = (int(req), int(resp))
        orphans = re.search(r"plus (\d+) responses whose request", cells[9])
        out[name] = {"ports": ports, "counts": counts, "orphans": int(orphans.group(1)) if orphans else 0}
    return out


SOURCES = sources()


def run(name: str) -> list[dict]:
    sink = Collector()
    report = analyze_file(str(PUBLIC / name), Options(ports=tuple(SOURCES[name]["ports"])), sink)
    assert report.error is None
    return sink.table("exchanges", EXCHANGES_SCHEMA).to_pylist()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_counts_per_api_and_version_match_sources(name):
    rows = run(name)
    requests = Counter((r["api_name"], r["api_version"]) for r in rows if r["api_key"] is not None)
    answered = Counter((r["api_name"], r["api_version"]) for r in rows if r["status"] in ("ok", "error"))
    want = SOURCES[name]["counts"]
    assert {k: (requests[k], answered[k]) for k in requests} == want
    assert sum(r["status"] == "orphan_response" for r in rows) == SOURCES[name]["orphans"]
    assert not [r for r in rows if r["status"] == "malformed"]


def packet_times(path: Path) -> dict[int, int]:
    """Packet number -> capture time in µs, by dpkt."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        reader = dpkt.pcapng.Reader(f) if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
        return {i: round(Decimal(ts) * 1_000_000) for i, (ts, _) in enumerate(reader, start=1)}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_latency_is_the_capture_time_difference(name):
    if name.endswith(".pcapng"):
        pytest.skip("dpkt applies the first interface's if_tsresol to every interface; the tshark oracle "
                    "test covers this file")
    rows = [r for r in run(name) if r["status"] in ("ok", "error")]
    times = packet_times(PUBLIC / name)
    for r in rows:
        req_us = round(r["request_last_ts"].timestamp() * 1e6)
        resp_us = round(r["response_last_ts"].timestamp() * 1e6)
        assert resp_us == times[r["response_frame"]]
        assert req_us in times.values()
        assert r["latency_ms"] == pytest.approx((resp_us - req_us) / 1000, abs=0.002)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_agrees_with_the_tshark_oracle(name, tmp_path):
    ports = [a for p in SOURCES[name]["ports"] for a in ("--port", str(p))]
    ref = subprocess.run([sys.executable, str(TOOLS / "tshark_ref.py"), str(PUBLIC / name), *ports],
                         capture_output=True, text=True, check=True).stdout
    (tmp_path / "ref.json").write_text(ref)
    assert json.loads(ref)["requests"]
    folder = TableFolder(str(tmp_path / "out"))
    analyze_file(str(PUBLIC / name), Options(ports=tuple(SOURCES[name]["ports"])), folder.write)
    folder.commit()
    check = subprocess.run([sys.executable, str(TOOLS / "check_exchanges.py"), str(tmp_path / "ref.json"),
                            str(tmp_path / "out")], capture_output=True, text=True).stdout
    # The checker's exit code is 1 whenever one of its categories is empty (0/0), so read its figures.
    m = re.search(r"requests (\d+)/(\d+), api\+version (\d+)/(\d+), pairs (\d+)/(\d+), latency (\d+)/(\d+), "
                  r"unanswered (\d+)/(\d+), extra (\d+)", check)
    assert m, check
    found, n, typed, n2, paired, want, lat, want2, unanswered_ok, unanswered, extra = map(int, m.groups())
    assert (found, typed, paired, lat, unanswered_ok, extra) == (n, n, want, want, unanswered, 0), check
