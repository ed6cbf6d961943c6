"""``kafkacap spark``: the Spark job (``spark_jobs``) from the command line, in local mode by default.

pyspark (and pandas, which pyspark 4.0 wants for ``mapInArrow``) are optional dependencies
(``pip install 'kafkacap[spark]'``), so they are imported only when the command runs.
"""

from __future__ import annotations

import time

import click

from analyzer.cli.options import analysis_options
from analyzer.cli.terminal import inert


@click.command("spark")
@click.argument("paths", nargs=-1, type=str)
@click.option("-o", "--output", "out", required=True,
              help="Output folder (local path or URI); replaced as a whole by the tables, one Parquet dataset per "
                   "table partitioned by capture_date.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@click.option("--aggregate", is_flag=True, help="Also the aggregate tables: api_usage and latency (per minute, "
              "API, client, broker), and exchange_counts and latency_histogram (what kafkacap report reads).")
@click.option("--aggregate-only", is_flag=True, help="Only (re)compute the aggregate tables of an existing output.")
@analysis_options()  # every one, as the Spark job's own command line (spark_jobs.export_job)
@click.option("--target-mb", type=click.IntRange(1), default=64, show_default=True,
              help="Small capture files are grouped into tasks of about this many MB.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Extra Spark setting (repeatable).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the HTML report of the output (as `kafkacap report OUTPUT` would); needs a local "
                   "output folder.")
def spark_command(paths, out, master, aggregate, aggregate_only, options, target_mb, confs, report_path) -> None:
    """Run the Spark job: capture files (local, hdfs://, s3://, gs://; folders and globs) to partitioned
    Parquet tables, the same rows as `export`."""
    if not paths and not aggregate_only:
        raise click.UsageError("give capture files or folders (or --aggregate-only on an existing output)")
    if report_path and "://" in out and not out.startswith("file://"):
        raise click.UsageError(f"--report reads the output folder from this machine: {inert(out)} is remote "
                               "(copy it here and run kafkacap report on the copy)")
    try:
        import pandas  # noqa: F401 - pyspark 4.0 checks for it before any mapInArrow
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{exc.name} is not installed: pip install 'kafkacap[spark]'") from None
    from rich.console import Console
    from rich.text import Text

    from spark_jobs.aggregate_job import aggregate_output
    from spark_jobs.export_job import JobError, export, parse_conf
    from spark_jobs.session import build_session

    err = Console(stderr=True, soft_wrap=True)

    def say(message: str) -> None:  # the job's messages name files and folders: printed inert
        err.print(Text(inert(message)))

    try:
        conf = parse_conf(list(confs))
        started = time.perf_counter()
        with err.status("starting Spark"):
            spark = build_session(master, "kafkacap", conf)
        say(f"Spark {spark.version} on {master}: started in {time.perf_counter() - started:.1f} s")
        if aggregate_only:
            aggregate_output(spark, out)
            say(f"wrote api_usage, latency, exchange_counts and latency_histogram into {out}")
            return
        result = export(spark, list(paths), out, options, aggregate=aggregate, target_mb=target_mb, log=say)
    except JobError as exc:
        raise click.ClickException(str(exc)) from None
    say("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    if result.unreadable == result.files:
        raise click.ClickException("no capture file could be read (see the files table)")
    if report_path:
        _write_report(out.removeprefix("file://"), report_path, say)


def _write_report(folder: str, path: str, say) -> None:
    """The report of the job's output folder, from its tables as written (aggregated by the report itself)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise click.ClickException("plotly is not installed: pip install plotly") from None
    from analyzer.report.page import write_report
    from analyzer.report.source import ReportInputError, open_folder

    try:
        size = write_report(open_folder(folder), path)
    except ReportInputError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write the report to {inert(path)}: {exc.strerror or exc}") from None
    say(f"wrote {path} ({size / 1e6:.1f} MB)")


def register(group: click.Group) -> None:
    group.add_command(spark_command)
