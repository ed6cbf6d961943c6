"""Spark job: per-minute aggregates of the exchanges table -> Parquet tables ``api_usage``, ``latency``,
``exchange_counts`` and ``latency_histogram``.

    spark-submit spark_jobs/aggregate_job.py hdfs:///kafkacap/out      # on an existing export
    python -m spark_jobs.export_job captures/ -o out --aggregate       # or right after the export

Groups: the minute (UTC) of the exchange's first timestamp (request_first_ts; response_first_ts for a
response whose request is not in the capture), api_name, api_version, client_id, client_ip, broker_ip,
broker_port. ``api_usage`` has one row per group with the counts, bytes and a map of error counts by name
(one row per group rather than one per error name: totals stay one sum away, and the map is empty for the
common error-free group). ``latency`` has the latency percentiles per group, from ``percentile_approx``.

``exchange_counts`` and ``latency_histogram`` are what ``kafkacap report`` draws its overview and latency
sections from, so that the report of a large output reads no exchange row for them. ``exchange_counts``: per
(minute, api_name, status, error_name of the failed ones) the exchanges and the first one's packets (the
report's hover names them). ``latency_histogram``: per (minute, latency series, held, bucket) the exchanges in
that log bucket of time (the report's buckets, 50 per factor of ten, compared with the same edges), the
smallest and the largest time and the slowest exchange; histograms add up exactly over minutes, so the report
reads its percentiles from them at any interval of a minute or more. All are partitioned by ``capture_date``
like the export.
"""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file by spark-submit: make the packages next to this one importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.capture_date import PARTITION_COLUMN
from spark_jobs.publish import AGGREGATE_TABLES, OutputError, Staging
from spark_jobs.session import job_settings

PERCENTILES = (0.5, 0.9, 0.99)
PERCENTILE_ACCURACY = 10000  # Spark's default: relative rank error 1/10000; exact below 10000 values a group

KEYS = ("minute", "api_name", "api_version", "client_id", "client_ip", "broker_ip", "broker_port")

DOCS = {
    "minute": "Start of the minute (UTC) of request_first_ts (response_first_ts for orphan responses).",
    "exchanges": "Exchange rows in the group (every status).",
    "requests": "Requests seen (rows with request_first_ts).",
    "responses": "Responses seen (rows with response_first_ts).",
    "request_bytes": "Sum of request_size.",
    "response_bytes": "Sum of response_size.",
    "errors": "Exchanges with a non-zero error_code.",
    "error_counts": "Exchanges per error_name, for non-zero error codes (empty map: no errors).",
    "no_response": "Requests never answered (status no_response).",
    "throttled": "Responses with throttle_time_ms > 0.",
    "throttle_time_ms": "Sum of throttle_time_ms.",
    "samples": "Exchanges with a latency (both request and response seen).",
    "latency_p50_ms": "Median latency_ms (percentile_approx).",
    "latency_p90_ms": "90th percentile of latency_ms (percentile_approx).",
    "latency_p99_ms": "99th percentile of latency_ms (percentile_approx).",
    "latency_max_ms": "Largest latency_ms.",
    "latency_mean_ms": "Mean latency_ms.",
    "status": "The exchanges' status.",
    "error_name": "error_name of the exchanges with status error; null for the others.",
    "first_ts": "The group's earliest exchange time (request_first_ts, else response_first_ts).",
    "request_capture_file": "capture_file of the group's first exchange by (time, request_frame).",
    "request_frame": "request_frame of the group's first exchange by (time, request_frame, capture_file).",
    "response_capture_file": "capture_file of the group's first exchange by (time, response_frame).",
    "response_frame": "response_frame of the group's first exchange by (time, response_frame, capture_file).",
    "series": "api_name, with Fetch split into 'Fetch (with records)', 'Fetch (empty)' (record_count 0) and "
              "'Fetch' (record_count unknown); '(unknown API)' when api_name is null.",
    "held": "Whether the broker held the exchanges by design (waited true, or null: unknown): the time is then "
            "latency_ms; otherwise service time, service_ms (latency_ms where null).",
    "bucket": "Log bucket b of the time: [10^(b/50), 10^((b+1)/50)) ms, each 4.7 % wide; times below 1 µs in "
              "bucket -150, above 10^9 ms in bucket 449.",
    "count": "Exchanges in the group.",
    "min_ms": "Smallest time in the bucket (ms).",
    "max_ms": "Largest time in the bucket (ms).",
    "slowest_capture_file": "capture_file of the slowest exchange in the bucket (ties: lowest response_frame, "
                            "then file).",
    "slowest_response_frame": "response_frame of that exchange.",
    PARTITION_COLUMN: "UTC date of minute; the output is partitioned by it.",
}


def _named(column, name: str):
    return column.alias(name, metadata={"comment": DOCS[name]} if name in DOCS else None)


def _bucket(value):
    """The histogram bucket of a time in ms (analyzer.report.aggregate.bucket_of): found by comparing with the
    very edges the report uses (a logarithm gives the neighbourhood, the edges decide), so Spark and pyarrow put
    every value in the same bucket."""
    from pyspark.sql import functions as F

    from analyzer.report.aggregate import HIST_EDGES, HIST_FIRST, HIST_PER_DECADE

    last = len(HIST_EDGES) - 2
    edges = F.array(*[F.lit(float(e)) for e in HIST_EDGES])
    guess = F.least(F.greatest(F.floor(F.log10(value) * HIST_PER_DECADE).cast("int") - HIST_FIRST, F.lit(0)),
                    F.lit(last))
    lower = F.element_at(edges, guess + 1)  # element_at counts from 1
    upper = F.element_at(edges, guess + 2)
    index = (F.when(value < HIST_EDGES[0], 0).when(value >= HIST_EDGES[-1], last)
             .when(value < lower, guess - 1).when(value >= upper, guess + 1).otherwise(guess))
    return (index + HIST_FIRST).cast("short")


def report_aggregates(ex):
    """(exchange_counts, latency_histogram) DataFrames from exchanges with their ``minute``."""
    from pyspark.sql import functions as F

    ts = F.coalesce("request_first_ts", "response_first_ts")
    failed = F.col("status") == "error"
    counts = ex.groupBy("minute", "api_name", "status", F.when(failed, F.col("error_name")).alias("error_name")).agg(
        F.count(F.lit(1)).alias("exchanges"), F.min(ts).alias("first_ts"),
        F.min(F.struct(ts, F.col("request_frame").isNull(), "request_frame", "capture_file")).alias("_rq"),
        F.min(F.struct(ts, F.col("response_frame").isNull(), "response_frame", "capture_file")).alias("_rs"))
    counts = counts.select(
        *[_named(F.col(c), c) for c in ("minute", "api_name", "status", "error_name")],
        _named(F.col("exchanges"), "exchanges"), _named(F.col("first_ts"), "first_ts"),
        _named(F.col("_rq.capture_file"), "request_capture_file"), _named(F.col("_rq.request_frame"), "request_frame"),
        _named(F.col("_rs.capture_file"), "response_capture_file"),
        _named(F.col("_rs.response_frame"), "response_frame"))

    timed = ex.where(F.col("latency_ms").isNotNull() & ~F.isnan("latency_ms"))
    fetch = (F.when(F.col("record_count") > 0, F.lit("Fetch (with records)"))
             .when(F.col("record_count").isNotNull(), F.lit("Fetch (empty)")).otherwise(F.lit("Fetch")))
    series = F.when(F.col("api_name") == "Fetch", fetch).otherwise(F.coalesce("api_name", F.lit("(unknown API)")))
    held = F.coalesce("waited", F.lit(True))
    value = F.when(held, F.col("latency_ms")).otherwise(F.coalesce("service_ms", "latency_ms"))
    timed = timed.select("minute", series.alias("series"), held.alias("held"), value.alias("value"),
                         "capture_file", "response_frame").where(~F.isnan("value"))
    hist = timed.groupBy("minute", "series", "held", _bucket(F.col("value")).alias("bucket")).agg(
        F.count(F.lit(1)).alias("count"), F.min("value").alias("min_ms"),
        F.min(F.struct((-F.col("value")).alias("negative"), F.col("response_frame").isNull().alias("no_frame"),
                       "response_frame", "capture_file")).alias("_slow"))
    hist = hist.select(
        *[_named(F.col(c), c) for c in ("minute", "series", "held", "bucket", "count", "min_ms")],
        _named(-F.col("_slow.negative"), "max_ms"), _named(F.col("_slow.capture_file"), "slowest_capture_file"),
        _named(F.col("_slow.response_frame"), "slowest_response_frame"))
    return counts, hist


def aggregates(exchanges):
    """(api_usage, latency, exchange_counts, latency_histogram) DataFrames from an exchanges DataFrame."""
    from pyspark.sql import functions as F

    first_ts = F.coalesce("request_first_ts", "response_first_ts")
    ex = exchanges.withColumn("minute", F.date_trunc("minute", first_ts))
    keys = list(KEYS)
    failed = F.col("error_code").isNotNull() & (F.col("error_code") != 0)
    per_error = ex.groupBy(*keys, F.when(failed, F.col("error_name")).alias("error")).agg(
        F.count(F.lit(1)).alias("exchanges"),
        F.count("request_first_ts").alias("requests"),
        F.count("response_first_ts").alias("responses"),
        F.sum("request_size").alias("request_bytes"),
        F.sum("response_size").alias("response_bytes"),
        F.count(F.when(F.col("status") == "no_response", 1)).alias("no_response"),
        F.count(F.when(F.col("throttle_time_ms") > 0, 1)).alias("throttled"),
        F.sum("throttle_time_ms").alias("throttle_time_ms"),
    )
    summed = ("exchanges", "requests", "responses", "request_bytes", "response_bytes", "no_response", "throttled",
              "throttle_time_ms")
    api_usage = per_error.groupBy(*keys).agg(
        *[_named(F.coalesce(F.sum(c), F.lit(0)).cast("bigint"), c) for c in summed[:5]],
        _named(F.coalesce(F.sum(F.when(F.col("error").isNotNull(), F.col("exchanges"))), F.lit(0)), "errors"),
        _named(F.map_from_entries(F.collect_list(
            F.when(F.col("error").isNotNull(), F.struct(F.col("error"), F.col("exchanges"))))), "error_counts"),
        *[_named(F.coalesce(F.sum(c), F.lit(0)).cast("bigint"), c) for c in summed[5:]],
    )
    timed = ex.where(F.col("latency_ms").isNotNull())
    pct = F.percentile_approx("latency_ms", list(PERCENTILES), PERCENTILE_ACCURACY)
    latency = timed.groupBy(*keys).agg(
        _named(F.count(F.lit(1)), "samples"), pct.alias("_p"),
        _named(F.max("latency_ms"), "latency_max_ms"), _named(F.avg("latency_ms"), "latency_mean_ms"),
    ).select(*keys, "samples", *[_named(F.col("_p")[i], f"latency_p{round(q * 100)}_ms")
                                 for i, q in enumerate(PERCENTILES)], "latency_max_ms", "latency_mean_ms")
    dated = [_named(F.to_date("minute"), PARTITION_COLUMN)]
    counts, hist = report_aggregates(ex)
    return tuple(df.select("*", *dated) for df in (api_usage, latency, counts, hist))


def write_aggregates(spark, exchanges_uri: str, staging: Staging) -> None:
    """Read the exchanges written at ``exchanges_uri`` and write both aggregates into ``staging``."""
    from functools import partial

    from spark_jobs.export_job import _run_concurrently, write_table

    _run_concurrently([partial(write_table, df, name, staging)
                       for name, df in zip(AGGREGATE_TABLES, aggregates(spark.read.parquet(exchanges_uri)),
                                           strict=True)])


def aggregate_output(spark, out: str) -> None:
    """Add (or replace) the aggregate tables of an existing output folder."""
    from spark_jobs.export_job import JobError

    staging = Staging(out)
    try:
        staging.check_replaceable()
    except OutputError as exc:
        raise JobError(str(exc)) from None
    exchanges = staging.uri("exchanges").replace(staging.folder, staging.out)
    if staging.fs.get_file_info(staging.fs_path(exchanges)).type.name == "NotFound":
        raise JobError(f"{out}: no exchanges table here (run the export first)")
    try:
        with job_settings(spark):
            write_aggregates(spark, exchanges, staging)
        staging.publish_tables(AGGREGATE_TABLES)
    except BaseException:
        staging.abort()
        raise


def main(argv: list[str] | None = None) -> int:
    from spark_jobs.export_job import JobError, parse_conf
    from spark_jobs.session import build_session

    p = argparse.ArgumentParser(prog="aggregate_job.py", description=__doc__.split("\n\n")[0])
    p.add_argument("output", help="an export's output folder; the aggregate tables are written into it")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    args = p.parse_args(argv)
    try:
        spark = build_session(args.master, "kafkacap-aggregate", parse_conf(args.conf))
        aggregate_output(spark, args.output)
    except JobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(AGGREGATE_TABLES)} into {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
