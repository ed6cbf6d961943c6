"""Spark job: capture files -> the kafkacap tables as Parquet datasets partitioned by capture date.

    spark-submit spark_jobs/export_job.py 's3a://bucket/captures/2024-11-*/' -o s3a://bucket/kafkacap
    python -m spark_jobs.export_job sample_pcaps -o out-spark --detect-ports --aggregate

Plan (the same pipeline as ``kafkacap export``, spread over executors):

1. The driver lists the capture files (folders recursively, globs) and groups them into tasks: one file
   per task, or several small ones. Paths travel to the executors, never file bytes.
2. Analysis stage: a ``mapInArrow`` over the paths runs ``analyzer.pipeline.analyze.analyze_file`` on each file
   (remote files are streamed to local disk first) and yields envelope rows: every table's batches as
   Arrow IPC, plus one report per file. The result is cached; the driver collects the reports.
3. The driver builds the stitcher of rotated capture sets (``analyzer.pipeline.stitch``) from the reports.
4. Write stage, per table: a ``mapInArrow`` over that table's envelopes unpacks the batches, applies the
   stitcher and writes Parquet files per ``capture_date`` folder with pyarrow (``spark_jobs.write_task``),
   yielding a manifest. Connections that span files of a set come back in it and are merged and written
   on the driver (they are few), as is the ``files`` table (from the reports, less the exchanges the
   stitcher dropped, which the manifest counts).
5. Optionally the aggregates (``spark_jobs.aggregate_job``), then the staging folder replaces the output.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

if __package__ in (None, ""):  # run as a file by spark-submit: make the packages next to this one importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa

from analyzer.pipeline.analyze import FileReport, capture_names
from analyzer.pipeline.options import Options, OptionSpec, analysis_specs, options_from
from analyzer.pipeline.run import FOLLOW_FILES, InputError, file_row
from analyzer.pipeline.stitch import Stitcher, capture_sets, merge_connections, next_files
from analyzer.pipeline.topic_ids import known_names, merge_names
from analyzer.tables.schemas import FILES_SCHEMA, TABLES, files_batch
from spark_jobs.analyse_task import analyse_partition
from spark_jobs.capture_date import PARTITION_COLUMN, table_schema
from spark_jobs.envelope import ENVELOPE_DDL, REPORT, unpack_batches, unpack_report
from spark_jobs.inputs import CaptureInput, group_files, list_captures
from spark_jobs.publish import OutputError, Staging
from spark_jobs.session import job_settings
from spark_jobs.write_task import (
    DROPPED,
    FILE,
    HELD,
    MANIFEST_DDL,
    TableWriter,
    mark_done,
    sweep_attempts,
    write_empty,
    write_partition,
    write_rows,
)

ROW_TABLES = tuple(name for name, spec in TABLES.items() if spec.per_file and not spec.optional)
TARGET_TASK_MB = 64  # small files are grouped into tasks of about this much capture data
TASKS_PER_CORE = 4  # at least this many tasks per core, so a slow file does not leave the others idle


@dataclass
class ExportResult:
    out: str
    files: int
    unreadable: int
    exchanges: int
    connections: int
    seconds: dict[str, float] = field(default_factory=dict)


class JobError(Exception):
    """Bad input or output: a message for the user, no traceback."""


def export(spark, inputs: list[str], out: str, options: Options | None = None, *, aggregate: bool = False,
           target_mb: int = TARGET_TASK_MB, log: Callable[[str], None] | None = None) -> ExportResult:
    """Analyse the capture files ``inputs`` names and replace ``out`` with their tables (rotated sets
    stitched unless ``options.stitch`` is off, as in the CLI)."""
    with job_settings(spark):
        return _export(spark, inputs, out, options or Options(), aggregate, target_mb, log)


def _export(spark, inputs: list[str], out: str, options: Options, aggregate: bool, target_mb: int,
            log: Callable[[str], None] | None) -> ExportResult:
    from pyspark import StorageLevel

    say = log or (lambda _msg: None)
    clock = _Clock()
    try:
        files = list_captures(inputs)
    except InputError as exc:
        raise JobError(str(exc)) from None
    staging = Staging(out)
    try:
        staging.check_replaceable()
    except OutputError as exc:
        raise JobError(str(exc)) from None
    clock.lap("list")
    say(f"{len(files)} capture file{'s' if len(files) != 1 else ''}, {sum(f.size for f in files) / 1e6:,.1f} MB")

    paths = [f.path for f in files]
    following = _following(paths) if options.stitch else {}
    slots = spark.sparkContext.defaultParallelism * TASKS_PER_CORE
    groups = group_files(files, slots, target_mb << 20)
    names = capture_names(paths)
    plan = [[(files[i].path, following.get(files[i].path, []),
              {p: names[p] for p in (files[i].path, *following.get(files[i].path, []))}) for i in g] for g in groups]
    tasks = spark.range(0, len(plan), 1, len(plan))
    envelopes = tasks.mapInArrow(partial(analyse_partition, plan=plan, options=options), ENVELOPE_DDL)
    envelopes = envelopes.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with described(spark, f"kafkacap: analyse {len(files)} capture file{'s' if len(files) != 1 else ''}"):
            reports = _collect_reports(envelopes, paths, options.stitch)
        clock.lap("analyse")
        stitcher = Stitcher()
        for r in reports:
            stitcher.add_file(r.name, r.stats.packets if r.stats else 0, r.continues_in, r.handoffs)
        tables = (*ROW_TABLES, "records") if options.records else ROW_TABLES
        known = known_names(merge_names(r.topic_names for r in reports))  # topic ids named anywhere in the run
        manifests = _run_concurrently([partial(_write_rows, envelopes, t, stitcher, staging, known)
                                       for t in tables])
        manifest = dict(zip(tables, manifests, strict=True))
        dropped = {r.name: r.rows for r in manifest["exchanges"] if r.kind == DROPPED}
        for r in reports:
            r.exchanges -= dropped.get(r.name, 0)
        spanning = [b for r in manifest["connections"] if r.kind == HELD for b in unpack_batches(r.data)]
        _write_driver_side(staging, "connections", [merge_connections(pa.Table.from_batches(spanning))]
                           if spanning else [], manifest["connections"])
        for table in tables:
            if table != "connections":
                _write_driver_side(staging, table, [], manifest[table])
        _write_driver_side(staging, "files", [_files_table(reports, files, stitcher)], [])
        clock.lap("write")
        with described(spark, "kafkacap: derive groups"):
            _write_driver_side(staging, "groups", [_groups_table(spark, staging)], [])
        aborted_produces: list[tuple] = []  # the Produce exchanges of aborted transactions (for deliveries)
        with described(spark, "kafkacap: derive transactions"):
            _write_driver_side(staging, "transactions", [_transactions_table(spark, staging, aborted_produces)], [])
        with described(spark, "kafkacap: derive share consumption"):
            _write_driver_side(staging, "share_consumption", [_share_table(spark, staging)], [])
        if options.deliveries:
            with described(spark, "kafkacap: derive deliveries"):
                _write_deliveries(spark, staging, aborted_produces)
        clock.lap("derive")
        if aggregate:
            from spark_jobs.aggregate_job import write_aggregates

            write_aggregates(spark, staging.uri("exchanges"), staging)
            clock.lap("aggregate")
        staging.publish()
    except BaseException:
        staging.abort()
        raise
    finally:
        envelopes.unpersist()
    clock.lap("publish")
    result = ExportResult(staging.out, len(reports), sum(r.stats is None for r in reports),
                          sum(r.exchanges for r in reports), sum(r.connections for r in reports), clock.laps)
    say(f"wrote {result.exchanges:,} exchanges from {result.files} files to {result.out}"
        + (f" ({result.unreadable} unreadable: see the files table)" if result.unreadable else ""))
    return result


def _run_concurrently(jobs: list[Callable[[], object]]) -> list:
    """Run Spark jobs from threads, so small tables' jobs fill the cores a big table's last tasks leave idle
    (and the fixed cost of each job overlaps). Waits for all of them before raising the first failure: the
    staging folder must not be deleted under a running writer."""
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="kafkacap-write") as pool:
        futures = [pool.submit(job) for job in jobs]
        wait(futures)
    return [f.result() for f in futures]


def _following(paths: list[str]) -> dict[str, list[str]]:
    """The next files of each file's rotated set, as far as a task follows connections (as the CLI plans)."""
    after = next_files(paths)
    out: dict[str, list[str]] = {}
    for path in paths:
        nxt, cur = [], after.get(path)
        while cur is not None and len(nxt) < FOLLOW_FILES:
            nxt.append(cur)
            cur = after.get(cur)
        out[path] = nxt
    return out


class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


def _collect_reports(envelopes, paths: list[str], stitch: bool) -> list[FileReport]:
    """The per-file reports, in the order the stitcher needs (each rotated set in rotation order).
    Collecting them runs the analysis stage and fills the cache."""
    from pyspark.sql import functions as F

    rows = envelopes.where(F.col("table") == REPORT).select("data").collect()
    by_path: dict[str, FileReport] = {}
    for row in rows:
        report = unpack_report(row.data)
        by_path[report.path] = report
    order = [p for members in capture_sets(paths) for p in members] if stitch else paths
    missing = [p for p in order if p not in by_path]
    if missing:  # a worker died on a file (killed, out of memory): fail rather than write partial tables
        raise RuntimeError(f"no report for {len(missing)} file(s), e.g. {missing[0]}")
    return [by_path[p] for p in order]


def _write_rows(envelopes, table: str, stitcher: Stitcher, staging: Staging, topic_names: dict[str, str]) -> list:
    """The write stage of one table (``spark_jobs.write_task``); returns its manifest rows."""
    from pyspark.sql import functions as F

    spark = envelopes.sparkSession
    rows = envelopes.where(F.col("table") == table).coalesce(spark.sparkContext.defaultParallelism)
    with described(spark, f"kafkacap: write {table}"):
        return rows.mapInArrow(partial(write_partition, table=table, stitcher=stitcher, root=staging.uri(table),
                                       topic_names=topic_names), MANIFEST_DDL).collect()


@contextmanager
def described(spark, text: str) -> Iterator[None]:
    """Spark jobs started inside carry ``text`` as their description: Spark's UI, its status API and event
    log then name the stages by what they do rather than by the line that collects them. (A thread's own
    setting: the write threads each describe their table.)"""
    context = spark.sparkContext
    before = context.getLocalProperty("spark.job.description")
    context.setJobDescription(text)
    try:
        yield
    finally:
        context.setJobDescription(before)


def _write_driver_side(staging: Staging, table: str, tables: list[pa.Table], manifest: list) -> None:
    """Rows written by the driver (merged spanning connections, the files table); then the schema-only
    file if the table has no rows at all, and the ``_SUCCESS`` marker. The table's tasks have all ended:
    what attempts killed mid-write left is deleted."""
    root = staging.uri(table)
    sweep_attempts(root)
    written = sum(r.rows for r in manifest if r.kind == FILE)
    rows = [t for t in tables if t.num_rows]
    if rows:
        writer = TableWriter(root, table, "part-driver")
        for t in rows:
            for batch in t.to_batches():
                writer.write(batch)
        written += sum(n for _, n in writer.close())
    if not written:
        write_empty(root, table_schema(table))
    mark_done(root)


def _files_table(reports: list[FileReport], files: list[CaptureInput], stitcher: Stitcher) -> pa.Table:
    size_at = FILES_SCHEMA.get_field_index("file_bytes")
    sizes = {f.path: f.size for f in files}
    rows = []
    for r in reports:
        row = [*file_row(r), *stitcher.file_columns(r.name)]
        if r.stats is None:  # unreadable: the size the listing saw (the file may not be local)
            row[size_at] = sizes.get(r.path, row[size_at])
        rows.append(tuple(row))
    return pa.Table.from_batches([files_batch(rows)])


def _groups_table(spark, staging: Staging) -> pa.Table:
    """The groups table from the exchanges just written: the join, sync and leave rows collected (a few per
    member and rebalance), heartbeats and commits counted by Spark, then the CLI's own derivation."""
    from pyspark.sql import functions as F

    from analyzer.derived import groups, heartbeat_groups
    from analyzer.derived.tables import all_groups

    exchanges = spark.read.parquet(staging.uri("exchanges")).where(F.col("group_id").isNotNull())
    detail = exchanges.where(F.col("api_name").isin(*groups.DETAIL_APIS)).select(*groups.COLUMNS).toArrow()
    counts = (exchanges.where(F.col("api_name").isin(*groups.COUNTED_APIS) & F.col("generation_id").isNotNull())
              .groupBy(*groups.COUNT_KEYS)
              .agg(F.count(F.lit(1)).alias("requests"), F.max("response_last_ts").alias("last_ts"))).toArrow()
    counts = counts.cast(groups.COUNTS_SCHEMA)
    heartbeats = spark.read.parquet(staging.uri("group_heartbeats")).select(*heartbeat_groups.COLUMNS).toArrow()
    return all_groups(groups.groups_table(groups.detail_rows(detail), counts),
                      heartbeat_groups.heartbeat_groups_table(heartbeats, counts))


def _transactions_table(spark, staging: Staging, aborted_produces: list[tuple]) -> pa.Table:
    """The transactions table: the steps of transactional producers, their Produce exchanges and the partition
    rows of those collected (a few per transaction), then the CLI's own derivation; ``aborted_produces`` gets
    the keys of the aborted transactions' Produce exchanges."""
    from pyspark.sql import functions as F

    from analyzer.derived import transactions as t

    steps = spark.read.parquet(staging.uri("transaction_steps")).where(F.col("transactional_id").isNotNull())
    produces = spark.read.parquet(staging.uri("exchanges")).where(
        (F.col("api_name") == "Produce") & F.col("transactional_id").isNotNull())
    produced = spark.read.parquet(staging.uri("partitions")).where(
        (F.col("api_name") == "Produce") & F.coalesce(F.col("transactional"), F.lit(False)))
    return t.transactions_table(t.step_rows(steps.select(*t.STEP_COLUMNS).toArrow()),
                                t.produce_rows(produces.select("api_name", *t.PRODUCE_COLUMNS).toArrow()),
                                t.produced_rows(produced.select("api_name", "transactional",
                                                                *t.PRODUCED_COLUMNS).toArrow()),
                                aborted_produces)


def _share_table(spark, staging: Staging) -> pa.Table:
    """The share_consumption table: the share_ranges rows collected, then the CLI's own derivation."""
    from analyzer.derived import share_groups

    ranges = spark.read.parquet(staging.uri("share_ranges")).select(*share_groups.COLUMNS).toArrow()
    return share_groups.share_consumption_table(ranges)


def _write_deliveries(spark, staging: Staging, aborted_produces: list[tuple]) -> None:
    """The deliveries table (analyzer.derived.deliveries) by a range join in Spark: each Fetch range exploded
    into the offset buckets it covers, joined with the Produce rows of its topic, partition and bucket, and the
    earliest covering Fetch kept per produced batch and consumer, ties broken as the CLI breaks them (capture
    file, connection, correlation id); the aborted transactions' batches (``aborted_produces``) are not
    delivered by a read_committed consumer's Fetch."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from analyzer.derived import deliveries as d
    from analyzer.derived.transactions import aborted_keys

    parts = spark.read.parquet(staging.uri("partitions"))
    produced = parts.where((F.col("api_name") == "Produce") & (F.col("base_offset") >= 0)
                           & (F.coalesce(F.col("records"), F.lit(0)) > 0) & F.col("request_last_ts").isNotNull())
    span = F.col("records_last_offset") - F.col("records_first_offset")
    consumed = F.coalesce(F.col("fetch_kind"), F.lit("consumer")) != "follower"  # replication delivers to no one
    fetched = parts.where((F.col("api_name") == "Fetch") & consumed & (F.col("records_first_offset") >= 0)
                          & F.col("response_last_ts").isNotNull() & (span >= 0) & (span < d.MAX_SPAN))
    conns = spark.read.parquet(staging.uri("connections")).select("capture_file", "connection_id", "client_ip",
                                                                   "broker_ip", "broker_port")
    fetched = fetched.join(conns, ["capture_file", "connection_id"], "left")
    produced = produced.join(conns.drop("client_ip"), ["capture_file", "connection_id"], "left")
    named = (spark.read.parquet(staging.uri("exchanges")).where(F.col("group_id").isNotNull())
             .select("client_ip", "client_id", "group_id").distinct()
             .groupBy("client_ip", "client_id")
             .agg(F.when(F.count("group_id") == 1, F.first("group_id")).alias("group_id")))
    p = produced.select(
        "topic", "partition", "base_offset", "records", F.col("client_id").alias("producer_client_id"),
        F.col("capture_file").alias("produce_capture_file"), F.col("connection_id").alias("produce_connection_id"),
        F.col("correlation_id").alias("produce_correlation_id"), F.col("request_last_ts").alias("produced_ts"),
        F.col("response_last_ts").alias("acked_ts"), "broker_ip", "broker_port",
        F.floor(F.col("base_offset") / d.BUCKET).alias("bucket"))
    f = fetched.select(
        F.col("topic").alias("f_topic"), F.col("partition").alias("f_partition"), "records_first_offset",
        "records_last_offset", F.col("client_id").alias("consumer_client_id"),
        F.col("client_ip").alias("consumer_ip"), F.col("capture_file").alias("fetch_capture_file"),
        F.col("connection_id").alias("fetch_connection_id"), F.col("correlation_id").alias("fetch_correlation_id"),
        F.col("response_last_ts").alias("fetched_ts"), F.col("broker_ip").alias("f_broker_ip"),
        F.col("broker_port").alias("f_broker_port"),
        F.col("aborted_transactions").isNotNull().alias("f_committed"),  # Kafka lists none to read_uncommitted
        F.explode(F.sequence(F.floor(F.col("records_first_offset") / d.BUCKET),
                             F.floor(F.col("records_last_offset") / d.BUCKET))).alias("f_bucket"))
    if aborted_produces:
        keys = aborted_keys(aborted_produces).group_by(["capture_file", "connection_id", "correlation_id"])
        aborted = spark.createDataFrame(keys.aggregate([]).to_pylist(), "capture_file string, connection_id long, "
                                        "correlation_id int").select(
            F.col("capture_file").alias("produce_capture_file"), F.col("connection_id").alias("produce_connection_id"),
            F.col("correlation_id").alias("produce_correlation_id"), F.lit(True).alias("p_aborted"))
        p = p.join(F.broadcast(aborted), ["produce_capture_file", "produce_connection_id", "produce_correlation_id"],
                   "left")
    else:
        p = p.withColumn("p_aborted", F.lit(None).cast("boolean"))
    joined = p.join(f, (p.topic == f.f_topic) & (p.partition == f.f_partition) & (p.bucket == f.f_bucket)
                    & p.broker_ip.eqNullSafe(f.f_broker_ip) & p.broker_port.eqNullSafe(f.f_broker_port)
                    & (p.base_offset >= f.records_first_offset) & (p.base_offset <= f.records_last_offset)
                    & (f.fetched_ts >= p.produced_ts)
                    & ~(F.coalesce(p.p_aborted, F.lit(False)) & f.f_committed))  # a read_committed reader drops them
    first = Window.partitionBy("produce_capture_file", "produce_connection_id", "produce_correlation_id", "topic",
                               "partition", "consumer_ip", "consumer_client_id").orderBy(
        "fetched_ts", "fetch_capture_file", "fetch_connection_id", "fetch_correlation_id")
    rows = (joined.withColumn("n", F.row_number().over(first)).where(F.col("n") == 1)
            .join(named, (F.col("consumer_ip") == named.client_ip)
                  & (F.col("consumer_client_id") == named.client_id), "left")
            .withColumn("delivery_ms", _elapsed_ms("produced_ts", "fetched_ts"))
            .withColumn("after_ack_ms", _elapsed_ms("acked_ts", "fetched_ts")))
    manifest = rows.select(*d.DELIVERIES_SCHEMA.names).mapInArrow(
        partial(write_rows, table="deliveries", root=staging.uri("deliveries")), MANIFEST_DDL).collect()
    _write_driver_side(staging, "deliveries", [], manifest)


def _elapsed_ms(start: str, end: str):
    """end - start in ms as the CLI computes it: the difference in whole microseconds, then divided."""
    from pyspark.sql import functions as F

    return (F.unix_micros(F.col(end)) - F.unix_micros(F.col(start))).cast("double") / 1000.0


def write_table(df, table: str, staging: Staging) -> None:
    """A Spark DataFrame (the aggregates) as the dataset ``table`` of the staging folder, partitioned by
    capture_date."""
    df.write.partitionBy(PARTITION_COLUMN).parquet(staging.uri(table))
    if not staging.has_data_files(table):  # no rows, so no files: write one with the schema, for readers
        df.limit(0).write.mode("overwrite").parquet(staging.uri(table))


def parse_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise JobError(f"--conf {pair!r}: expected key=value")
        conf[key] = value
    return conf


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="export_job.py", description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="capture files, folders (searched recursively) or globs; local or hdfs://, s3://, gs://")
    p.add_argument("-o", "--output", required=True, help="output folder (replaced as a whole)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--aggregate", action="store_true", help="also the api_usage and latency tables")
    add_to_argparse(p)  # every analysing option, as `kafkacap spark` takes them
    p.add_argument("--target-mb", type=int, default=TARGET_TASK_MB, help="capture MB per task for small files")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    return p


def add_to_argparse(parser: argparse.ArgumentParser, names: Iterable[str] = ()) -> None:
    """The declared analysing options (``analyzer.pipeline.options``) named, all of them when none is, as
    arguments of ``parser``: the flags, ranges, defaults and help of the ``kafkacap`` commands' click options.
    ``options_from(vars(args))`` then makes the ``Options`` they say."""
    for spec in analysis_specs(names):
        text = spec.help.replace("%", "%%")  # argparse formats help with %
        if spec.kind == "flag":
            parser.add_argument(*spec.flags, dest=spec.name, action="store_true", help=text)
        elif spec.kind == "int":
            bounds = _bounds(spec)
            if spec.repeatable:
                parser.add_argument(*spec.flags, dest=spec.name, type=_whole_number(spec), action="append",
                                    default=list(spec.default), help=f"{text} [{bounds}]" if bounds else text)
            else:
                shown = f"default: {spec.default}" + (f"; {bounds}" if bounds else "")
                parser.add_argument(*spec.flags, dest=spec.name, type=_whole_number(spec), default=spec.default,
                                    help=f"{text} [{shown}]")
        else:
            parser.add_argument(*spec.flags, dest=spec.name, type=_file_value(spec), default=spec.default,
                                metavar=spec.metavar, help=text)


def _bounds(spec: OptionSpec) -> str:
    """The range as click's IntRange shows it: 1<=x<=65535, x>=1 (empty: unbounded)."""
    if spec.low is not None and spec.high is not None:
        return f"{spec.low}<=x<={spec.high}"
    if spec.low is not None:
        return f"x>={spec.low}"
    return f"x<={spec.high}" if spec.high is not None else ""


def _whole_number(spec: OptionSpec) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid integer") from None
        if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
            raise argparse.ArgumentTypeError(f"{value} is not in the range {_bounds(spec)}")
        return value

    return parse


def _file_value(spec: OptionSpec) -> Callable[[str], object]:
    """A file option's value, read as the command line is parsed (the key log: it then travels to the executors
    inside the options, as its text, never through a repr)."""
    def parse(text: str) -> object:
        if spec.read is None:
            return text
        try:
            return spec.read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def main(argv: list[str] | None = None) -> int:
    from spark_jobs.session import build_session

    args = parser().parse_args(argv)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        options = options_from(vars(args))
        started = time.perf_counter()
        spark = build_session(args.master, "kafkacap-export", parse_conf(args.conf))
        say(f"Spark session: {time.perf_counter() - started:.1f} s")
        result = export(spark, args.inputs, args.output, options, aggregate=args.aggregate,
                        target_mb=args.target_mb, log=say)
    except JobError as exc:
        say(f"error: {exc}")
        return 2
    say("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
