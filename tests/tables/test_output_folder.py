"""The export's output folder is replaced as a whole: no table of an earlier export survives a new one, a
folder holding anything kafkacap did not write is refused and left alone, and a failed export leaves the
earlier one intact."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.tables import writers as output
from tests import craft
from tests.capture.test_far_timestamps import CAPTURE_START, conversation_with_records
from tests.helpers import GROUP, invoke

BASE_TABLES = ("cluster", "connections", "errors", "exchanges", "files", "group_heartbeats", "groups", "partitions",
               "share_consumption", "share_ranges",
               "transaction_steps", "transactions")


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A heartbeat, a Produce and a Fetch with records, and another heartbeat."""
    return Path(craft.write(tmp_path_factory.mktemp("cap") / "a.pcap",
                            conversation_with_records(int(CAPTURE_START * 1000))))


def export(*args, failing: bool = False):
    """``kafkacap export``; ``failing``: the export is made to fail (how it reports that is not tested here)."""
    return invoke("export", *args, "--no-progress", "--jobs", "1", any_exception=failing)


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_re_export_without_records_leaves_no_records_table(tmp_path, capture):
    out = tmp_path / "out"
    assert export(capture, "-o", out, "--records").exit_code == 0
    assert "records.parquet" in listing(out)
    assert export(capture, "-o", out).exit_code == 0
    assert listing(out) == [output.MARKER, *(f"{t}.parquet" for t in BASE_TABLES)]
    assert json.loads((out / output.MARKER).read_text()) == {"format": "parquet", "tables": list(BASE_TABLES)}
    assert listing(tmp_path) == ["out"]  # no staging or old folder left beside it


def test_a_parquet_export_replaces_a_csv_one(tmp_path, capture):
    out = tmp_path / "out"
    assert export(capture, "-o", out, "--format", "csv", "--records").exit_code == 0
    assert "exchanges.csv" in listing(out)
    assert export(capture, "-o", out).exit_code == 0
    assert listing(out) == [output.MARKER, *(f"{t}.parquet" for t in BASE_TABLES)]


def test_a_folder_of_tables_from_an_older_version_is_replaced(tmp_path, capture):
    """Older versions wrote no marker: a folder of nothing but table files (and a staging folder an
    interrupted run left inside it) is theirs."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("exchanges.parquet", "records.parquet", "files.jsonl"):
        (out / name).write_bytes(b"old")
    (out / ".kafkacap-abc123").mkdir()
    assert export(capture, "-o", out).exit_code == 0
    assert listing(out) == [output.MARKER, *(f"{t}.parquet" for t in BASE_TABLES)]
    assert pq.read_table(out / "exchanges.parquet").num_rows == 4


@pytest.mark.parametrize("foreign", ["notes.txt", "exchanges.parquet.bak", "data"])
def test_a_folder_holding_something_else_is_refused_and_kept(tmp_path, capture, foreign):
    out = tmp_path / "out"
    assert export(capture, "-o", out).exit_code == 0
    before = {name: (out / name).read_bytes() for name in listing(out)}
    (out / foreign).write_text("the user's own")
    result = export(capture, "-o", out, "--records")
    assert result.exit_code == 3  # the tables could not be written (README exit codes)
    assert result.output.count("\n") == 1 and repr(foreign) in result.output and "Traceback" not in result.output
    assert (out / foreign).read_text() == "the user's own"
    assert {name: (out / name).read_bytes() for name in listing(out) if name != foreign} == before
    assert listing(tmp_path) == ["out"]


def test_an_export_failing_while_it_closes_its_tables_leaves_the_earlier_one_intact(tmp_path, capture, monkeypatch):
    """The disk fills up as the third table is finished: no table of the new export may replace an old one."""
    out = tmp_path / "out"
    assert export(capture, "-o", out, "--records").exit_code == 0
    before = {name: (out / name).read_bytes() for name in listing(out)}
    close = pq.ParquetWriter.close
    closed = []

    def failing_close(self):
        closed.append(self)
        close(self)
        if len(closed) == 3:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "close", failing_close)
    result = export(capture, "-o", out, failing=True)
    assert result.exit_code != 0
    assert {name: (out / name).read_bytes() for name in listing(out)} == before
    assert listing(tmp_path) == ["out"]


def test_an_export_failing_midway_leaves_the_earlier_one_intact(tmp_path, capture, monkeypatch):
    out = tmp_path / "out"
    assert export(capture, "-o", out, "--records").exit_code == 0
    before = {name: (out / name).read_bytes() for name in listing(out)}

    def broken(*args, **kwargs):
        raise OSError("the analysis failed")

    monkeypatch.setattr("analyzer.pipeline.analyze.connections_batch", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the internal error's traceback goes
    (tmp_path / "tmp").mkdir()
    result = export(capture, "-o", out, failing=True)
    assert result.exit_code == 4  # an internal error (README exit codes)
    assert len(list((tmp_path / "tmp").glob("kafkacap-traceback-*"))) == 1
    shutil.rmtree(tmp_path / "tmp")
    assert {name: (out / name).read_bytes() for name in listing(out)} == before
    assert listing(tmp_path) == ["out"]


def test_tables_settled_before_the_end_read_back_whole_and_in_order(tmp_path):
    """``settle()`` (called by ``run`` once the analysis' own tables are complete) ends the writer threads so
    the last row groups are encoded while the derived tables are made; a table written to after it goes on
    in the same file, after what came before, whatever thread writes it."""
    import pyarrow as pa

    from analyzer.pipeline.analyze import Options
    from analyzer.pipeline.run import run

    order: list[str] = []
    built: dict[str, list[pa.RecordBatch]] = {}
    folder = output.TableFolder(str(tmp_path / "out"))

    def sink(table: str, batch: pa.RecordBatch) -> None:
        order.append(table)
        built.setdefault(table, []).append(batch)
        folder.write(table, batch)

    def analysed() -> None:
        order.append("<analysed>")
        folder.settle()

    run([str(GROUP)], Options(records=True), sink, on_analysed=analysed)
    settled = order.index("<analysed>")
    assert {"exchanges", "partitions", "records", "connections"} <= set(order[:settled])
    assert set(order[settled + 1:]) == {"groups", "share_consumption", "transactions", "files"}
    for batch in list(built["exchanges"]):  # the settled table written to again
        sink("exchanges", batch)
    folder.commit()
    for table, batches in built.items():
        path = tmp_path / "out" / f"{table}.parquet"
        expected = pa.Table.from_batches(batches).combine_chunks()
        assert pq.read_table(path).equals(expected.cast(pq.read_schema(path))), table
