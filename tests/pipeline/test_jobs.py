"""One file split over processes (--jobs): the workers' batches reach the sink while they run, in an order
fixed in advance, and together they are the rows of one process.

The order is checked against its definition (per table, each task's first batch in task order, then each
one's second...) with the batches published at random moments, so that no timing changes what is written;
the rows against a run in one process.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.capture import chunks as _pcap_chunks
from analyzer.cli.summary import Collector
from analyzer.pipeline import run
from analyzer.pipeline.analyze import FileReport, Options
from tests import craft
from tests.helpers import run_tables
from tests.tcp.test_bulk import interleaved


def rows(path: str, jobs: int, **options) -> dict[str, list[str]]:
    return {name: sorted(map(str, table.to_pylist())) for name, table in run_tables(path, jobs=jobs, **options).items()}


@pytest.mark.parametrize(("seed", "jobs", "hold"), [(0, 2, None), (1, 2, None), (2, 2, 0), (3, 3, None), (4, 3, 0)])
def test_the_shards_together_give_the_rows_of_one_process(tmp_path, monkeypatch, seed, jobs, hold):
    """The parent analyses the first shard itself, the workers the others. ``hold``: bytes of its own batches
    the parent holds until they are due (0: all go through its spool folder)."""
    path = str(craft.write(tmp_path / "c.pcap", interleaved(random.Random(seed), 6)))
    monkeypatch.setattr(run, "SHARD_MIN_BYTES", 0)
    if hold is not None:
        monkeypatch.setattr(run, "HOLD_BYTES", hold)
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 3000)  # many chunks: many batches from each worker
    assert len(run.plan([path], jobs)) == jobs
    one = rows(path, 1, batch_rows=3)
    assert one["exchanges"]
    assert rows(path, jobs, batch_rows=3) == one


@pytest.mark.parametrize("jobs", [2, 3])
def test_the_progress_of_split_files_moves_while_workers_read(tmp_path, monkeypatch, jobs):
    """The workers (and the parent, which analyses the first shard) tell how far they have read, so the bar
    moves before any of them ends; the ticks add up to the file's size, counted once however many shards
    read it."""
    path = craft.write(tmp_path / "c.pcap", interleaved(random.Random(7), 24))
    size = Path(path).stat().st_size
    monkeypatch.setattr(run, "SHARD_MIN_BYTES", 0)
    monkeypatch.setattr(run, "PROGRESS_POLL", 0.001)
    monkeypatch.setattr(_pcap_chunks, "CHUNK_BYTES", 4096)  # many chunks: the workers report many times
    ticks: list[int] = []
    run.run([str(path)], Options(), Collector(), jobs=jobs, on_progress=ticks.append)
    assert sum(ticks) == size - size % jobs and all(t > 0 for t in ticks)
    assert len(ticks) >= 10  # not just one per shard as each ends: ticks came while the workers read


def batch(task: int, table: str, number: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"from": [f"{task}:{table}:{number}"]})


def publish(folder: str, task: int, table: str, number: int) -> None:
    """As a worker does: written aside, then renamed."""
    path = run._batch_path(folder, table, number)
    with pa.OSFile(path + ".part", "wb") as f, pa.ipc.new_stream(f, batch(task, table, number).schema) as w:
        w.write_batch(batch(task, table, number))
    os.rename(path + ".part", path)


@pytest.mark.parametrize("held", [None, "memory", "spilled", "some spilled"])
@pytest.mark.parametrize("seed", range(8))
def test_the_merge_order_is_fixed_whatever_the_timing(tmp_path, seed, held):
    """``held``: the first task is the parent's own, its batches handed over between merges, as the parent
    analysing the first shard of a split file does: in memory, or in its spool folder once it holds too much
    (all of them, or those past two batches' worth)."""
    rng = random.Random(seed)
    tasks = rng.randrange(1, 4)
    counts = [{t: rng.randrange(0, 5) for t in ("exchanges", "connections", "errors") if rng.random() < 0.8}
              for _ in range(tasks)]
    folders = [str(tmp_path / f"t{i}") for i in range(tasks)]
    for f in folders:
        os.mkdir(f)
    futures: list[Future] = [Future() for _ in range(tasks)]
    # Each worker publishes its tables' batches in their order, the tables interleaved at random.
    plans = []
    for i in range(tasks):
        pending = [table for table, c in counts[i].items() for _ in range(c)]
        rng.shuffle(pending)
        numbered = dict.fromkeys(counts[i], 0)
        plan = []
        for table in pending:
            plan.append((table, numbered[table]))
            numbered[table] += 1
        plans.append(plan)
    delays = [[rng.random() * 0.002 for _ in plan] for plan in plans]

    def worker(i: int) -> None:
        for (table, n), delay in zip(plans[i], delays[i], strict=True):
            time.sleep(delay)
            publish(folders[i], i, table, n)
        futures[i].set_result((FileReport(path="x", name="x"), {t: c for t, c in counts[i].items() if c}))

    handed: list[tuple[str, str]] = []
    limits = {"memory": 1 << 30, "spilled": 0, "some spilled": 2 * batch(0, "exchanges", 0).nbytes}
    own = run._Held(folders[0], limits[held]) if held else None
    spools = run._Spools([own if own is not None and i == 0 else f for i, f in enumerate(folders)], futures)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(1 if held else 0, tasks)]
    for t in threads:
        t.start()

    def sink(table: str, b: pa.RecordBatch) -> None:
        handed.append((table, b.column(0)[0].as_py()))

    if own is not None:  # the parent's own batches, each followed by a merge of what is due
        for table, n in plans[0]:
            time.sleep(rng.random() * 0.002)
            own.add(table, batch(0, table, n))
            if held == "spilled":
                assert own.held_bytes == 0 and os.listdir(folders[0])
            elif held == "memory":
                assert not os.listdir(folders[0])
            spools.forward(sink, settle=False)
        futures[0].set_result((FileReport(path="x", name="x"), dict(own.counts)))
    deadline = time.monotonic() + 60
    while not spools.forward(sink):
        assert time.monotonic() < deadline, "the merge never finished"
        time.sleep(0.0005)
    for t in threads:
        t.join()
    for table in ("exchanges", "connections", "errors"):
        expected = [f"{i}:{table}:{n}" for n in range(5) for i in range(tasks) if n < counts[i].get(table, 0)]
        assert [v for t, v in handed if t == table] == expected
    assert all(not os.listdir(f) for f in folders)  # every spool file taken and deleted
    assert own is None or not any(own.batches.values())  # and every held batch


def test_batches_reach_the_sink_before_the_worker_ends(tmp_path):
    folder = str(tmp_path / "t0")
    os.mkdir(folder)
    future: Future = Future()
    spools = run._Spools([folder], [future])
    handed: list[str] = []
    publish(folder, 0, "exchanges", 0)
    assert not spools.forward(lambda table, b: handed.append(b.column(0)[0].as_py()))
    assert handed == ["0:exchanges:0"]
    publish(folder, 0, "exchanges", 1)
    future.set_result((FileReport(path="x", name="x"), {"exchanges": 2}))
    assert spools.forward(lambda table, b: handed.append(b.column(0)[0].as_py()))
    assert handed == ["0:exchanges:0", "0:exchanges:1"]


def test_a_lost_spool_file_is_an_error_not_a_wait(tmp_path):
    folder = str(tmp_path / "t0")
    os.mkdir(folder)
    future: Future = Future()
    future.set_result((FileReport(path="x", name="x"), {"exchanges": 1}))
    with pytest.raises(RuntimeError, match="lost a batch"):
        run._Spools([folder], [future]).forward(lambda table, b: None)
