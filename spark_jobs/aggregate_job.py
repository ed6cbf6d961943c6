"""Spark job: per-minute aggregates of the exchanges table -> Parquet tables ``api_usage`` and ``latency``.

    spark-submit spark_jobs/aggregate_job.py hdfs:///kafkacap/out      # on an existing export
    python -m spark_jobs.export_job captures/ -o out --aggregate       # or right after the export

Groups: the minute (UTC) of the exchange's first timestamp (request_first_ts; response_first_ts for a
response whose request is not in the capture), api_name, api_version, client_id, client_ip, broker_ip,
broker_port. ``api_usage`` has one row per group with the counts, bytes and a map of error counts by name
(one row per group rather than one per error name: totals stay one sum away, and the map is empty for the
common error-free group). ``latency`` has the latency percentiles per group, from ``percentile_approx``.
Both are partitioned by ``capture_date`` like the export.
"""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file by spark-submit: make the packages next to this one importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.publish import AGGREGATE_TABLES, OutputError, Staging
from spark_jobs.schemas import PARTITION_COLUMN
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
    PARTITION_COLUMN: "UTC date of minute; the output is partitioned by it.",
}


def _named(column, name: str):
    return column.alias(name, metadata={"comment": DOCS[name]} if name in DOCS else None)


def aggregates(exchanges):
    """(api_usage, latency) DataFrames from an exchanges DataFrame."""
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
    return api_usage.select("*", *dated), latency.select("*", *dated)


def write_aggregates(spark, exchanges_uri: str, staging: Staging) -> None:
    """Read the exchanges written at ``exchanges_uri`` and write both aggregates into ``staging``."""
    from functools import partial

    from spark_jobs.export_job import _run_concurrently, write_table

    api_usage, latency = aggregates(spark.read.parquet(exchanges_uri))
    _run_concurrently([partial(write_table, df, name, staging)
                       for name, df in zip(AGGREGATE_TABLES, (api_usage, latency), strict=True)])


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
    from spark_jobs.export_job import JobError, _parse_conf
    from spark_jobs.session import build_session

    p = argparse.ArgumentParser(prog="aggregate_job.py", description=__doc__.split("\n\n")[0])
    p.add_argument("output", help="an export's output folder; api_usage and latency are written into it")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    args = p.parse_args(argv)
    try:
        spark = build_session(args.master, "kafkacap-aggregate", _parse_conf(args.conf))
        aggregate_output(spark, args.output)
    except JobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(AGGREGATE_TABLES)} into {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
