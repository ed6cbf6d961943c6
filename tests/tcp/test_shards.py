"""Splitting one file's connections over processes (--jobs): the balanced plan and the sample it is made from.

Whatever the plan, every connection must be handled by exactly one shard: the shards' rows together are
the rows of the whole file. The plan itself is only judged on balance, on a capture from the benchmark's
generator whose connections differ widely in work.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.capture import chunks as _pcap_chunks
from analyzer.capture.files import open_capture
from analyzer.capture.pcap import parse_header
from analyzer.pipeline import run
from tests import craft
from tests.helpers import PUBLIC, ROOT, analyze_tables
from tests.tcp.test_bulk import impaired_capture, interleaved, sorted_rows

PUBLIC_PCAPS = sorted(PUBLIC.glob("*.pcap"))


def tables(path, shard=None, balance=False, weights=()) -> dict[str, pa.Table]:
    analysed = analyze_tables(path, shard=shard, balance_shards=balance, shard_weights=weights)
    assert analysed.report.error is None
    return analysed


def assert_shards_add_up(path, count: int, weights=()) -> list[dict[str, pa.Table]]:
    whole = tables(path)
    shards = [tables(path, (i, count), balance=True, weights=weights) for i in range(count)]
    for name, table in whole.items():
        if name == "cluster":
            assert cluster_states([s[name] for s in shards if name in s]) == cluster_states([table])
            continue
        together = sorted(row for s in shards if name in s for row in sorted_rows(s[name]))
        assert together == sorted_rows(table), name
    return shards


# What a cluster row says of the cluster, as opposed to which responses showed it and when.
_SEEN_BY = {"first_seen", "last_seen", "responses", "connection_id", "first_frame", "last_frame", "reported_by_ip",
            "reported_by_port", "api_name", "api_version", "note"}


def cluster_states(tables: list[pa.Table]) -> dict[tuple, int]:
    """Each state the cluster table records, with the responses that showed it: the same whichever process read
    which connection, although a state seen in several stretches may make more rows or fewer (each process
    joins the runs of the responses it read)."""
    states: dict[tuple, int] = {}
    for t in tables:
        for row in t.to_pylist():
            key = tuple(str(v) for k, v in row.items() if k not in _SEEN_BY)
            states[key] = states.get(key, 0) + row["responses"]
    return states


@pytest.mark.parametrize("seed", range(6))
def test_balanced_shards_handle_every_connection_once(tmp_path, monkeypatch, seed):
    """Crafted connections with loss, reordering, repeats and port reuse, cut into many small chunks."""
    rng = random.Random(seed)
    path = impaired_capture(tmp_path, monkeypatch, rng, rng.randrange(3, 9))
    shards = assert_shards_add_up(path, rng.choice([2, 3]))
    assert sum(1 for s in shards if "exchanges" in s and s["exchanges"].num_rows) >= 2


def test_balanced_shards_of_the_public_captures():
    if not PUBLIC_PCAPS:
        pytest.skip("../shared/pcaps/public is not present")
    for path in PUBLIC_PCAPS:
        assert_shards_add_up(path, 2)


def record_starts(path) -> list[int]:
    data = Path(path).read_bytes()
    order = parse_header(data[:24]).byte_order
    starts, pos = [], 24
    while pos + 16 <= len(data):
        starts.append(pos)
        pos += 16 + struct.unpack_from(order + "I", data, pos + 8)[0]
    return starts


def test_the_sample_starts_its_stretches_at_records(tmp_path):
    """Searching from any byte, the boundary found is the next record's start."""
    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(3), 6))
    starts = record_starts(path)
    data = Path(path).read_bytes()
    check = _pcap_chunks._RecordCheck(data, 24, parse_header(data[:24]))
    rng = random.Random(1)
    for at in [24, *rng.sample(range(25, starts[-8]), 300)]:
        expected = next(s for s in starts if s >= at)
        assert check.boundary(at) == expected, at


def test_the_sample_of_a_real_capture(tmp_path):
    """The sampled packets are the file's: every sampled key is a flow of the capture."""
    if not PUBLIC_PCAPS:
        pytest.skip("../shared/pcaps/public is not present")
    for path in PUBLIC_PCAPS:
        with open_capture(path) as cap:
            sample = cap.flow_sample()
            if sample is None:
                continue
            keys, flags, lengths, share = sample
            chunks = cap.chunks()
            known = {k.tobytes() for chunk in chunks for k in chunk.keys}
        assert 0 <= share <= 1.0001
        assert {k.tobytes() for k in keys} <= known, path.name


def frames_per_shard(shards: list[dict[str, pa.Table]]) -> list[int]:
    return [sum(s["connections"].column("requests").to_pylist()) + sum(s["connections"].column("responses").to_pylist())
            for s in shards]


def test_the_plan_evens_out_the_frames(tmp_path):
    """A generated capture of 16 producers, consumers and group members, whose frames per connection vary
    tenfold: the hash leaves one shard 16 % over half of the frames, the plan much less."""
    path = tmp_path / "big.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_capture.py"), "-o", str(path),
                    "--size-mb", "24", "--seed", "4", "--connections", "16"], check=True, capture_output=True)
    planned = frames_per_shard(assert_shards_add_up(path, 2))
    hashed = frames_per_shard([tables(path, (i, 2)) for i in range(2)])
    assert sum(planned) == sum(hashed)
    assert max(planned) <= 1.08 * sum(planned) / 2 < max(hashed), (planned, hashed)
    # Weighted as when the parent runs the first shard beside its writers: it gets less.
    weighted = frames_per_shard(assert_shards_add_up(path, 2, (0.8, 1.0)))
    assert sum(weighted) == sum(planned)
    assert weighted[0] < planned[0] and abs(weighted[0] / sum(weighted) - 0.8 / 1.8) < 0.04, (planned, weighted)


def test_a_file_of_large_frames_is_not_split(tmp_path):
    """Every process of a split file reads all of it: a file of mostly large frames (the generator's big
    profile, about 600 frames a MiB at this size) stays in one process, one of many small frames (5,000 a MiB)
    is split, its flow sample taken once for all shards."""
    paths = {}
    for profile in ("big", "small"):
        paths[profile] = tmp_path / f"{profile}.pcap"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_capture.py"), "-o", str(paths[profile]),
                        "--profile", profile, "--size-mb", "20", "--seed", "5"], check=True, capture_output=True)
        assert paths[profile].stat().st_size >= run.SHARD_MIN_BYTES
    assert [t.shard for t in run.plan([str(paths["big"])], 2)] == [None]
    split = run.plan([str(paths["small"])], 2)
    assert [t.shard for t in split] == [(0, 2), (1, 2)] and all(t.balanced for t in split)
    assert split[0].sample is not None and split[0].sample is split[1].sample


def test_only_a_file_on_its_own_is_planned(tmp_path, monkeypatch):
    """The files of a rotated set keep the hash: their shards must agree from one file to the next."""
    monkeypatch.setattr(run, "SHARD_MIN_BYTES", 0)
    one = craft.write(tmp_path / "alone.pcap", interleaved(random.Random(1), 2))
    rotated = [craft.write(tmp_path / name, interleaved(random.Random(i), 2))
               for i, name in enumerate(["rot.pcap", "rot.pcap1"])]
    alone = run.plan([str(one)], 2)
    assert [t.shard for t in alone] == [(0, 2), (1, 2)] and all(t.balanced for t in alone)
    tasks = run.plan([str(p) for p in rotated], 4)
    assert len(tasks) == 8 and not any(t.balanced for t in tasks)
    assert len(run.plan([str(p) for p in rotated], 4, stitch=False)) == 8
    assert all(t.balanced for t in run.plan([str(p) for p in rotated], 4, stitch=False))
