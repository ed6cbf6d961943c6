"""The Spark job in local mode gives the rows `kafkacap export` gives (sample captures, a rotated set whose
request/response pairs cross file boundaries, damaged and unreadable files), its aggregates match a plain
Python computation over the CLI's exchanges, and a failed run leaves the previous output as it was.

One SparkSession for the module; skipped when pyspark or Java is missing.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.helpers import (
    GROUP,
    SAMPLES,
    analyze_tables,
    canonical_rows,
    export_tables,
    kafkacap,
    pcap_records,
    split_capture,
)

pytest.importorskip("pyspark")
pytest.importorskip("pandas", reason="pyspark 4.0 checks for pandas before any mapInArrow")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for Spark", allow_module_level=True)

from analyzer.pipeline.analyze import Options  # noqa: E402
from analyzer.pipeline.run import InputError, expand_paths  # noqa: E402
from analyzer.tables.schemas import SCHEMAS  # noqa: E402
from spark_jobs import export_job  # noqa: E402
from spark_jobs.analyse_task import analyse_file  # noqa: E402
from spark_jobs.export_job import JobError, export  # noqa: E402
from spark_jobs.inputs import CaptureInput, group_files, list_captures  # noqa: E402

SPLIT_SOURCE = GROUP
TABLES = (*SCHEMAS, "deliveries")  # the row tables, groups, and deliveries (asked for: --deliveries)


@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import build_session

    session = build_session("local[2]", "kafkacap-tests", {"spark.ui.enabled": "false"})
    yield session
    session.stop()


def _rotate(src: Path, folder: Path, pieces: int) -> list[Path]:
    """The capture cut into ``pieces`` files of about as many packets, named as tcpdump -C names them (cap.pcap,
    cap.pcap1, ...)."""
    _, records = pcap_records(src)
    return split_capture(src, folder, [len(records) * i // pieces for i in range(1, pieces)])


def _cli_export(paths: list[str], out: Path) -> dict[str, pa.Table]:
    return export_tables(paths, out, "--detect-ports", "--deliveries", tables=TABLES)


def _dataset(folder: Path) -> pa.Table:
    return ds.dataset(folder, format="parquet", partitioning="hive").to_table()


_rows = canonical_rows


@pytest.fixture(scope="module")
def samples_run(spark, tmp_path_factory):
    """The job on sample_pcaps plus a rotated set, into a folder holding an older output; and the CLI's export."""
    base = tmp_path_factory.mktemp("samples")
    _rotate(SPLIT_SOURCE, base / "rotated", 4)
    inputs = [str(SAMPLES), str(base / "rotated")]
    out = base / "out"
    (out / "exchanges" / "capture_date=1999-01-01").mkdir(parents=True)  # a previous run's leftovers
    (out / "exchanges" / "capture_date=1999-01-01" / "part-0.parquet").write_bytes(b"old")
    (out / "api_usage").mkdir()
    result = export(spark, inputs, str(out), Options(detect_ports=True, deliveries=True), aggregate=True)
    return result, out, _cli_export(inputs, base / "cli"), base


def test_tables_equal_the_cli_export(samples_run) -> None:
    result, out, cli_tables, _ = samples_run
    assert not list(out.parent.glob(".out.kafkacap-*"))  # staging and old folders are gone
    assert "capture_date=1999-01-01" not in os.listdir(out / "exchanges")
    for table in TABLES:
        got = _dataset(out / table)
        expected = cli_tables[table]
        assert got.num_rows == expected.num_rows > 0, table
        assert _rows(got.drop_columns(["capture_date"])) == _rows(expected), table
        for field in expected.schema:  # types survive Spark: int16 stays int16, timestamps stay µs UTC
            assert got.schema.field(field.name).type.equals(field.type, check_metadata=False) or (
                pa.types.is_list(field.type) and got.schema.field(field.name).type.value_type == field.type.value_type
            ), (table, field)
    files = _dataset(out / "files")
    assert result.files == files.num_rows == len(expand_paths([str(SAMPLES)])) + 4
    assert result.exchanges == cli_tables["exchanges"].num_rows


def test_capture_date_is_the_utc_date_of_the_first_timestamp(samples_run) -> None:
    _, out, _, _ = samples_run
    exchanges = _dataset(out / "exchanges").to_pylist()
    for r in exchanges:
        first = r["request_first_ts"] or r["response_first_ts"]
        assert r["capture_date"] == first.astimezone(dt.UTC).date().isoformat()
    for table, column in (("connections", "first_ts"), ("files", "first_ts")):
        for r in _dataset(out / table).to_pylist():
            assert r["capture_date"] == r[column].astimezone(dt.UTC).date().isoformat()


def test_rotated_set_pairs_crossing_files_are_stitched(samples_run) -> None:
    _, out, _, base = samples_run
    files = {r["capture_file"]: r for r in _dataset(out / "files").to_pylist()}
    rotated = [files[n] for n in ("cap.pcap", "cap.pcap1", "cap.pcap2", "cap.pcap3")]
    assert [f["continues_in"] for f in rotated] == ["cap.pcap1", "cap.pcap2", "cap.pcap3", None]
    assert {f["capture_set"] for f in rotated} == {"cap.pcap"}
    starts = sorted(f["first_frame"] for f in rotated)
    exchanges = [r for r in _dataset(out / "exchanges").to_pylist() if r["capture_file"] == "cap.pcap"]

    def piece(frame: int) -> int:
        return max(i for i, s in enumerate(starts) if s <= frame)

    crossing = [r for r in exchanges if r["response_frame"] and piece(r["request_frame"]) != piece(r["response_frame"])]
    assert crossing, "the cuts should fall between some request and its response"
    # And the set gives what the uncut capture gives (the whole capture, named as the set's first file).
    whole = base / "whole"
    whole.mkdir()
    shutil.copy(SPLIT_SOURCE, whole / "cap.pcap")
    assert _rows(_exchanges(whole / "cap.pcap").drop_columns(["capture_file"])) == \
        _rows(pa.Table.from_pylist(exchanges).drop_columns(["capture_file", "capture_date"]))


def _minute(ts: dt.datetime) -> dt.datetime:
    return ts.replace(second=0, microsecond=0)


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_aggregates_match_a_python_computation(samples_run) -> None:
    _, out, cli_tables, _ = samples_run
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in cli_tables["exchanges"].to_pylist():
        first = r["request_first_ts"] or r["response_first_ts"]
        key = (_minute(first), r["api_name"], r["api_version"], r["client_id"], r["client_ip"], r["broker_ip"],
               r["broker_port"])
        groups[key].append(r)
    keys = ("minute", "api_name", "api_version", "client_id", "client_ip", "broker_ip", "broker_port")
    usage = {tuple(r[k] for k in keys): r for r in _dataset(out / "api_usage").to_pylist()}
    latency = {tuple(r[k] for k in keys): r for r in _dataset(out / "latency").to_pylist()}
    assert set(usage) == set(groups)
    for key, rows in groups.items():
        u = usage[key]
        failed = [r["error_name"] for r in rows if r["error_code"]]
        assert u["exchanges"] == len(rows)
        assert u["requests"] == sum(r["request_first_ts"] is not None for r in rows)
        assert u["responses"] == sum(r["response_first_ts"] is not None for r in rows)
        assert u["request_bytes"] == sum(r["request_size"] or 0 for r in rows)
        assert u["response_bytes"] == sum(r["response_size"] or 0 for r in rows)
        assert u["errors"] == len(failed)
        assert dict(u["error_counts"]) == dict(Counter(failed))
        assert u["no_response"] == sum(r["status"] == "no_response" for r in rows)
        assert u["throttled"] == sum((r["throttle_time_ms"] or 0) > 0 for r in rows)
        timed = [r["latency_ms"] for r in rows if r["latency_ms"] is not None]
        if not timed:
            assert key not in latency
            continue
        lat = latency[key]
        assert lat["samples"] == len(timed)
        assert lat["latency_max_ms"] == max(timed)
        for q in (50, 90, 99):  # below 10000 values a group, percentile_approx is the nearest-rank percentile
            assert lat[f"latency_p{q}_ms"] == _nearest_rank(timed, q / 100), (key, q, sorted(timed))
    assert sum(u["errors"] for u in usage.values()) > 0 and any(len(g) > 3 for g in groups.values())


@pytest.fixture(scope="module")
def damaged_run(spark, tmp_path_factory):
    """A folder with a good capture, a truncated one, random bytes named .pcap and an empty .pcap."""
    folder = tmp_path_factory.mktemp("damaged")
    inputs = folder / "in"
    inputs.mkdir()
    shutil.copy(SAMPLES / "tansu_admin.pcap", inputs / "good.pcap")
    data = (SAMPLES / "tansu_broker_errors.pcap").read_bytes()
    (inputs / "truncated.pcap").write_bytes(data[: len(data) * 2 // 3])
    (inputs / "garbage.pcap").write_bytes(bytes(range(256)) * 40)
    (inputs / "empty.pcap").write_bytes(b"")
    out = folder / "out"
    result = export(spark, [str(inputs)], str(out), Options(detect_ports=True, deliveries=True))
    return result, out, _cli_export([str(inputs)], folder / "cli")


def test_bad_files_become_files_rows(damaged_run) -> None:
    result, out, cli_tables = damaged_run
    files = {r["capture_file"]: r for r in _dataset(out / "files").to_pylist()}
    assert files["good.pcap"]["status"] == "ok" and files["good.pcap"]["message"] is None
    assert files["truncated.pcap"]["status"] == "damaged" and files["truncated.pcap"]["message"]
    for name in ("garbage.pcap", "empty.pcap"):
        assert files[name]["status"] == "unreadable" and name in files[name]["message"]
        assert files[name]["packets"] == 0 and files[name]["capture_date"] is None
    assert files["garbage.pcap"]["file_bytes"] == 256 * 40
    assert result.unreadable == 2
    for table in TABLES:  # the good and the damaged file keep their rows: the same as the CLI's
        got = _dataset(out / table).drop_columns(["capture_date"])
        assert _rows(got) == _rows(cli_tables[table]), table
    good = [r for r in _dataset(out / "exchanges").to_pylist() if r["capture_file"] == "good.pcap"]
    assert good and all(r["status"] in ("ok", "error") for r in good)


def test_a_failed_run_leaves_the_previous_output(spark, damaged_run, monkeypatch) -> None:
    _, out, _ = damaged_run
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_write = export_job._write_driver_side

    def failing(staging, table, tables, manifest):
        if table == "errors":  # the executors have written every table into the staging folder by now
            raise RuntimeError("disk full")
        real_write(staging, table, tables, manifest)

    monkeypatch.setattr(export_job, "_write_driver_side", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        export(spark, [str(SAMPLES / "tansu_admin.pcap")], str(out), Options())
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["cli", "in", "out"]  # no staging folder left


def test_refuses_to_replace_a_folder_it_did_not_write(spark, tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(JobError, match="notes.txt"):
        export(spark, [str(SAMPLES / "tansu_admin.pcap")], str(tmp_path), Options())
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    with pytest.raises(JobError, match="no such file"):
        export(spark, [str(tmp_path / "missing.pcap")], str(tmp_path / "out"), Options())


def test_remote_files_are_copied_and_named_as_given(tmp_path, monkeypatch) -> None:
    """A file on a non-local filesystem: streamed to a scratch copy, analysed, named by its URI, removed."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    remote = pafs.SubTreeFileSystem(str(SAMPLES), pafs.LocalFileSystem())

    def fs_for(uri: str):
        return remote, uri.rsplit("/", 1)[1]

    def tables(path: str, fs) -> tuple[object, dict[str, pa.Table]]:
        got: dict[str, list] = {}
        report = analyse_file(path, [], Options(detect_ports=True), lambda t, b: got.setdefault(t, []).append(b), fs)
        return report, {t: pa.Table.from_batches(b) for t, b in got.items()}

    uri = "mock://bucket/tansu_admin.pcap"
    report, copied = tables(uri, fs_for)
    _, local = tables(str(SAMPLES / "tansu_admin.pcap"), None)
    assert report.path == uri and report.name == "tansu_admin.pcap" and report.error is None
    for table in local:
        assert _rows(copied[table]) == _rows(local[table])
    assert list(tmp_path.iterdir()) == []  # the copy is gone

    def broken(uri: str):
        raise OSError("connection refused")

    report, _ = tables(uri, broken)
    assert report.stats is None and report.path == uri and "connection refused" in report.error


def test_listing_follows_the_cli_and_globs(tmp_path) -> None:
    assert [c.path for c in list_captures([str(SAMPLES)])] == expand_paths([str(SAMPLES)])
    pcapng = list_captures([str(SAMPLES / "*.pcapng")])
    assert [c.path for c in pcapng] == sorted(str(p) for p in SAMPLES.glob("*.pcapng"))
    assert pcapng[0].size == (SAMPLES / "tansu_ipv6_confluent.pcapng").stat().st_size
    with pytest.raises(InputError):
        list_captures([str(tmp_path / "*.pcap")])


def test_small_files_are_grouped_big_ones_alone() -> None:
    mb = 1 << 20
    files = [CaptureInput(f"f{i}", s * mb) for i, s in enumerate([300, 5, 5, 5, 5, 5, 5, 5, 100, 5])]
    groups = group_files(files, slots=2, target_bytes=64 * mb)
    assert sorted(i for g in groups for i in g) == list(range(len(files)))
    assert [0] in groups  # the biggest file is a task of its own and comes first
    assert groups[0] == [0]
    assert len(groups) == math.ceil(sum(f.size for f in files) / (64 * mb))
    assert group_files(files[:3], slots=8, target_bytes=64 * mb) == [[0], [1], [2]]


def test_aggregate_only_on_an_existing_output(spark, samples_run) -> None:
    from spark_jobs.aggregate_job import aggregate_output

    _, out, _, _ = samples_run
    before = _rows(_dataset(out / "api_usage"))
    shutil.rmtree(out / "latency")
    aggregate_output(spark, str(out))
    assert _rows(_dataset(out / "api_usage")) == before
    assert _dataset(out / "latency").num_rows > 0
    assert not list(out.parent.glob(".out.kafkacap-*"))


def test_the_cli_command_runs_the_job(spark, tmp_path) -> None:
    from analyzer.cli.spark import spark_command
    from tests.report.test_report import _comparable

    capture = str(SAMPLES / "tansu_admin.pcap")
    page = tmp_path / "spark.html"
    result = CliRunner().invoke(spark_command, [capture, "-o", str(tmp_path / "out"), "--detect-ports",
                                                "--report", str(page)])
    assert result.exit_code == 0, result.output
    expected = _cli_export([capture], tmp_path / "cli")["exchanges"]
    assert _rows(_dataset(tmp_path / "out" / "exchanges").drop_columns(["capture_date"])) == _rows(expected)
    # --report: the page `kafkacap report` makes of the same output folder
    kafkacap("report", tmp_path / "out", "-o", tmp_path / "again.html")
    assert _comparable(page.read_text(encoding="utf-8")) == _comparable(
        (tmp_path / "again.html").read_text(encoding="utf-8"))
    assert "tansu_admin.pcap" in page.read_text(encoding="utf-8")
    refused = CliRunner().invoke(spark_command, [capture, "-o", "s3://bucket/out", "--report", str(page)])
    assert refused.exit_code == 2 and "remote" in refused.output


def test_remote_listing_folders_and_globs(tmp_path, monkeypatch) -> None:
    """URIs are listed through pyarrow.fs: folders recursively by the CLI's capture-name rule, globs with
    shell meaning (``*`` within a folder, ``**`` across), names kept as URIs."""
    import spark_jobs.inputs as inputs

    caps = tmp_path / "bucket" / "caps"
    (caps / "sub").mkdir(parents=True)
    for name, size in (("a.pcap", 3), ("b.pcapng.gz", 5), ("notes.txt", 7), ("sub/c.pcap", 11)):
        (caps / name).write_bytes(b"x" * size)
    store = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    monkeypatch.setattr(inputs, "filesystem", lambda uri: (store, uri.removeprefix("mock://")))

    def listed(*uris: str) -> list[tuple[str, int]]:
        return [(c.path, c.size) for c in list_captures(list(uris))]

    folder = [("mock://bucket/caps/a.pcap", 3), ("mock://bucket/caps/b.pcapng.gz", 5),
              ("mock://bucket/caps/sub/c.pcap", 11)]
    assert listed("mock://bucket/caps") == folder
    assert listed("mock://bucket/caps/*.pcap") == folder[:1]
    assert listed("mock://bucket/caps/**/*.pcap") == [folder[0], folder[2]]
    assert listed("mock://bucket/caps/notes.txt") == [("mock://bucket/caps/notes.txt", 7)]  # named: taken as is
    with pytest.raises(InputError, match="no such file"):
        listed("mock://bucket/missing.pcap")
    with pytest.raises(InputError, match="no file matches"):
        listed("mock://bucket/caps/*.cap")


def test_publish_on_a_non_local_filesystem(tmp_path, monkeypatch) -> None:
    """The swap through pyarrow.fs (HDFS, object stores): the new tables replace the old folder, an aborted
    run leaves it alone, and a folder with other files in it is refused."""
    import spark_jobs.inputs as inputs
    import spark_jobs.publish as publish

    store = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    monkeypatch.setattr(inputs, "filesystem", lambda uri: (store, uri.removeprefix("mock://")))
    monkeypatch.setattr(publish, "filesystem", lambda uri: (store, uri.removeprefix("mock://")))
    (tmp_path / "bucket" / "out" / "exchanges").mkdir(parents=True)
    (tmp_path / "bucket" / "out" / "exchanges" / "old.parquet").write_bytes(b"old")

    def stage(content: bytes) -> publish.Staging:
        staging = publish.Staging("mock://bucket/out")
        staging.check_replaceable()
        assert staging.uri("exchanges").startswith("mock://bucket/.out.kafkacap-staging-")
        folder = staging.fs_path(staging.uri("exchanges"))
        store.create_dir(folder, recursive=True)
        with store.open_output_stream(folder + "/new.parquet") as f:
            f.write(content)
        return staging

    stage(b"aborted").abort()
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["out"]
    assert (tmp_path / "bucket" / "out" / "exchanges" / "old.parquet").read_bytes() == b"old"
    stage(b"new").publish()
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["out"]
    assert [p.name for p in (tmp_path / "bucket" / "out" / "exchanges").iterdir()] == ["new.parquet"]
    (tmp_path / "bucket" / "out" / "thesis.pdf").write_bytes(b"")
    with pytest.raises(publish.OutputError, match="thesis.pdf"):
        publish.Staging("mock://bucket/out").check_replaceable()


def _exchanges(capture: Path) -> pa.Table:
    return analyze_tables(capture, detect_ports=True)["exchanges"]


def test_an_attempt_that_dies_mid_write_spoils_nothing(tmp_path, monkeypatch) -> None:
    """Spark can give up on a task attempt that still runs (its executor missed heartbeats, its stage was
    resubmitted) and retry it elsewhere; the stale attempt may then write the same partition before or after
    the retry, and die mid-write. Readers see the retry's rows, whole and once, and the driver's sweep removes
    what the dead attempts left before the output is published."""
    from spark_jobs import write_task

    monkeypatch.setattr(write_task, "ROW_GROUP_ROWS", 1)  # every batch reaches the file when written
    rows = _exchanges(GROUP)
    root = str(tmp_path / "exchanges")

    def attempt() -> write_task.TableWriter:
        return write_task.TableWriter(root, "exchanges", "part-00003")

    half = rows.slice(0, rows.num_rows // 2).to_batches()[0]
    dead = [attempt(), attempt()]  # kept referenced: a killed process closes nothing
    dead[0].write(half)  # dies before its retry starts
    retry = attempt()
    for batch in rows.to_batches():
        retry.write(batch)
    retry.close()
    dead[1].write(half)  # a stale attempt that dies after the retry is done
    assert _rows(_dataset(tmp_path / "exchanges").drop_columns(["capture_date"])) == _rows(rows)
    write_task.sweep_attempts(root)
    assert [p.relative_to(tmp_path / "exchanges").as_posix() for p in (tmp_path / "exchanges").rglob("*")
            if p.is_file()] == [f"capture_date={d}/part-00003.zstd.parquet" for d in
                                sorted({ts.date().isoformat() for ts in rows.column("request_first_ts").to_pylist()})]
    assert _rows(_dataset(tmp_path / "exchanges").drop_columns(["capture_date"])) == _rows(rows)


def test_the_job_decrypts_tls_with_the_key_log(spark, tmp_path) -> None:
    """--tls-keylog reaches the executors (inside the options): the job's rows are the CLI export's, decrypted."""
    from analyzer.cli.spark import spark_command

    capture, keylog = str(SAMPLES / "tansu_tls.pcap"), str(SAMPLES / "tansu_tls.keys.log")
    result = CliRunner().invoke(spark_command, [capture, "-o", str(tmp_path / "out"), "--port", "9094",
                                                "--tls-keylog", keylog])
    assert result.exit_code == 0, result.output
    kafkacap("export", capture, "-o", tmp_path / "cli", "--port", "9094", "--tls-keylog", keylog, "--no-progress")
    for table in ("exchanges", "connections"):
        expected = pq.read_table(tmp_path / "cli" / f"{table}.parquet")
        assert _rows(_dataset(tmp_path / "out" / table).drop_columns(["capture_date"])) == _rows(expected)
    decrypted = pq.read_table(tmp_path / "cli" / "connections.parquet").column("tls_decrypted").to_pylist()
    assert sum(bool(d) for d in decrypted) > 10


def test_the_report_from_the_aggregates_is_the_report_from_the_rows(samples_run) -> None:
    """The overview and latency sections drawn from exchange_counts and latency_histogram equal those drawn
    from the exchange rows at the same (one-minute) interval: the same counts, first packets, histogram
    buckets, hence the same percentiles; and the histogram holds every timed exchange of the CLI's export."""
    from analyzer.report import page, scans
    from analyzer.report.source import open_folder
    from tests.report.test_report import _comparable

    _, out, cli_tables, _ = samples_run
    source = open_folder(str(out))
    assert scans.has_exchange_aggregates(source)
    from_aggregates = page.build(source, use_aggregates=True)
    from_rows = page.build(source, use_aggregates=False, min_interval_s=60)
    assert from_aggregates.interval == from_rows.interval and from_rows.interval.seconds >= 60
    assert ("drawn from" in dict(from_aggregates.facts)) and ("drawn from" not in dict(from_rows.facts))
    assert [f for f in from_aggregates.facts if f[0] != "drawn from"] == from_rows.facts
    for a, r in zip(from_aggregates.sections[:2], from_rows.sections[:2], strict=True):
        assert a.id == r.id and a.id in ("overview", "latency")
        assert len(a.parts) == len(r.parts) and all(p.figure is not None for p in r.parts)
        for pa_, pr in zip(a.parts, r.parts, strict=True):
            assert _comparable(pa_.figure.to_json()) == _comparable(pr.figure.to_json()), (a.id, pr.title)
    timed = [r for r in cli_tables["exchanges"].to_pylist() if r["latency_ms"] is not None]
    values = [r["latency_ms"] if r["waited"] is not False else
              (r["service_ms"] if r["service_ms"] is not None else r["latency_ms"]) for r in timed]
    histogram = _dataset(out / "latency_histogram").to_pylist()
    assert sum(r["count"] for r in histogram) == len(timed)
    assert max(r["max_ms"] for r in histogram) == max(values)
    assert min(r["min_ms"] for r in histogram) == min(values)
    for r in histogram:  # every bucket holds what its edges say
        assert 10 ** (r["bucket"] / 50) * (1 - 1e-12) <= r["min_ms"] or r["bucket"] == -150
        assert r["max_ms"] < 10 ** ((r["bucket"] + 1) / 50) * (1 + 1e-12) or r["bucket"] == 449


def test_topic_ids_named_by_another_files_response(spark, tmp_path) -> None:
    """Produce v13 names topics by id: the producers' file alone cannot name one of them, the consumer's file
    (its Metadata) can. The job names it across files, as the CLI does, and the tables equal the CLI's."""
    from tests.pipeline.test_topic_ids import CAPTURE, CONSUMER_START, FIRST_PRODUCE, check_named, cut

    first = cut(CAPTURE, tmp_path / "producers.pcap", FIRST_PRODUCE, CONSUMER_START - 1)
    second = cut(CAPTURE, tmp_path / "consumer.pcap", CONSUMER_START)
    export(spark, [str(first), str(second)], str(tmp_path / "out"), Options())
    tables = {name: _dataset(tmp_path / "out" / name).drop_columns(["capture_date"])
              for name in ("exchanges", "partitions")}
    check_named(tables)
    cli_rows = export_tables([first, second], tmp_path / "cli", tables=("partitions",))["partitions"]
    assert _rows(tables["partitions"].select(cli_rows.column_names)) == _rows(cli_rows)
