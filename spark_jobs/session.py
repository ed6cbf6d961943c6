"""The SparkSession the jobs run in, and the settings their output depends on.

``job_settings`` holds for the duration of a job, whatever session it is given (a notebook's too): the
session time zone is UTC (minutes and dates of capture times do not depend on where the driver runs);
Parquet timestamps Spark writes (the aggregates) are microseconds flagged UTC, like pyarrow's (Spark's
default, INT96, is deprecated and reads back without a time zone); envelope rows carry whole Arrow batches,
so Spark hands them to Python a few at a time (``maxRecordsPerBatch``).

``build_session`` adds defaults that spark-submit or ``conf`` may override: zstd like the CLI's export,
Arrow for pandas conversions; and in local mode (the embedded default): workers run this very interpreter
(its packages), few shuffle partitions, no web UI, no console progress bar, quiet logs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

JOB_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "4",
}

DEFAULT_CONF = {
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # numpy's OpenBLAS would start a spinning thread per core in every Python worker, for nothing kafkacap calls
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
}

LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
}

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _package_root() -> str:
    """The folder holding the ``analyzer`` and ``spark_jobs`` packages, for local workers' PYTHONPATH."""
    return str(Path(__file__).resolve().parents[1])


def _quiet_logging_conf() -> str:
    """A log4j2 configuration that only lets errors through (Spark's default prints every warning)."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), "kafkacap-spark-log4j2.properties")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(_LOG4J)
    return path


def _submitted_conf():
    """spark-submit's settings when it launched this driver (its JVM is already up); else an empty conf."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()
    return SparkConf()


def build_session(master: str | None = None, app_name: str = "kafkacap", conf: dict[str, str] | None = None,
                  quiet: bool = True):
    """A SparkSession; ``master`` None keeps spark-submit's (or local[*] outside spark-submit)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    submitted = _submitted_conf()
    master = master or submitted.get("spark.master", "local[*]")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {k: v for k, v in DEFAULT_CONF.items() if not submitted.contains(k)}
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings.update({k: v for k, v in LOCAL_CONF.items() if not submitted.contains(k)})
        settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(
            p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)
        if quiet and not submitted.contains("spark.driver.extraJavaOptions"):
            settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{_quiet_logging_conf()}"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def job_settings(spark) -> Iterator[None]:
    """``JOB_CONF`` while a job runs; the session's own values afterwards."""
    before = {key: spark.conf.get(key, None) for key in JOB_CONF}
    for key, value in JOB_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
