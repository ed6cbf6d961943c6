"""The ``kafkacap`` command line: click commands and rich output around analyzer.run; no protocol logic."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console

from analyzer.analyze import FileReport, Options
from analyzer.output import FORMATS, OutputFolderError, TableFolder
from analyzer.run import InputError, expand_paths, run
from analyzer.tables import CONNECTIONS_SCHEMA, EXCHANGES_SCHEMA, PARTITIONS_SCHEMA

STATUSES = ("ok", "error", "unchecked", "no_response", "acks0", "orphan_response", "malformed")


AUTO_JOBS_MAX = 8  # each process walks every packet of a file it shares: more would mostly add memory


def _jobs(ctx: click.Context, param: click.Parameter, value: str | int) -> int:
    """--jobs N, or auto: the CPUs this process may run on (inputs too small to split still use one)."""
    if value == "auto":
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(cpus, AUTO_JOBS_MAX))
    try:
        jobs = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor 'auto'") from None
    if not 1 <= jobs <= 256:
        raise click.BadParameter(f"{jobs} is not in the range 1 to 256")
    return jobs


def _common(f: Callable) -> Callable:
    f = click.option("--separate-files", is_flag=True,
                     help="Analyse every file on its own, even the files of a rotated set (tcpdump -C/-G), "
                          "which are otherwise stitched into one capture.")(f)
    f = click.option("--no-progress", is_flag=True, help="No progress bar.")(f)
    f = click.option("--verify-crc", is_flag=True, help="Check every record batch's CRC (counted per partition).")(f)
    f = click.option("--headers-only", is_flag=True,
                     help="Decode headers and top-level errors only: no topics, partitions or nested errors "
                          "(about twice as fast on large captures).")(f)
    f = click.option("-j", "--jobs", default="auto", show_default=True, callback=_jobs, metavar="N|auto",
                     help="Processes: across files, and across the connections of one large file (auto: one "
                          f"per CPU, at most {AUTO_JOBS_MAX}).")(f)
    f = click.option("--detect-ports", is_flag=True,
                     help="Also find Kafka on any other port, by the shape of its request headers.")(f)
    f = click.option("-p", "--port", "ports", type=click.IntRange(1, 65535), multiple=True,
                     help="Kafka broker port (repeatable). Default: 9092.")(f)
    f = click.argument("paths", nargs=-1, required=True, type=click.Path())(f)
    return f


def _out() -> Console:
    """Standard output; when it is not a terminal (a pipe, a file) tables are not squeezed to 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _options(ports: tuple[int, ...], detect_ports: bool, headers_only: bool = False, verify_crc: bool = False,
             records: bool = False, max_batch_mb: int = 64, max_decompressed_mb: int = 4096,
             separate_files: bool = False) -> Options:
    return Options(ports=tuple(ports) or (9092,), detect_ports=detect_ports, bodies=not headers_only,
                   verify_crc=verify_crc, records=records, max_batch_mb=max_batch_mb,
                   max_decompressed_mb=max_decompressed_mb, stitch=not separate_files)


def _analyse(paths: tuple[str, ...], options: Options, jobs: int, sink, no_progress: bool) -> list[FileReport]:
    """Run the analysis with a progress bar; exit 1 with a clear message when nothing could be read."""
    err = Console(stderr=True)
    try:
        files = expand_paths(list(paths))
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            pass
    if not no_progress and err.is_terminal:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=err, transient=True) as progress:
            task = progress.add_task(f"analysing {len(files)} file{'s' if len(files) != 1 else ''}", total=total)
            reports = run(files, options, sink, jobs=jobs, on_progress=lambda n: progress.advance(task, n))
    else:
        reports = run(files, options, sink, jobs=jobs)
    for r in reports:
        if r.stats is None:
            err.print(f"[red]error:[/] {r.error}")
        elif r.error:
            err.print(f"[red]error:[/] {r.name}: {r.error} (rows decoded before it are kept)")
        elif r.stats.damage:
            err.print(f"[yellow]warning:[/] {r.name}: {r.stats.damage} (rows decoded before it are kept)")
        if r.refused_batches:
            err.print(f"[yellow]warning:[/] {r.name}: {r.refused_batches} compressed batches over the decompression "
                      "limits were not expanded (--max-batch-mb, --max-decompressed-mb)")
    if all(r.stats is None for r in reports):
        raise click.ClickException("no capture file could be read")
    return reports


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafkacap")
def main() -> None:
    """Analyse Apache Kafka traffic in pcap/pcapng captures: every request matched to its response,
    with latency and errors, as a terminal summary or as Parquet/CSV/JSON-lines tables."""


@main.command()
@_common
def summary(paths, ports, detect_ports, jobs, headers_only, verify_crc, no_progress, separate_files) -> None:
    """Summarise Kafka traffic: API usage and latency percentiles, errors, clients, connections."""
    from analyzer.report import Collector, print_summary

    sink = Collector()
    reports = _analyse(paths, _options(ports, detect_ports, headers_only, verify_crc, separate_files=separate_files),
                       jobs, sink, no_progress)
    print_summary(_out(), sink.table("exchanges", EXCHANGES_SCHEMA), sink.table("connections", CONNECTIONS_SCHEMA),
                  reports, sink.table("partitions", PARTITIONS_SCHEMA))


@main.command()
@_common
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for the tables (exchanges, connections, files); existing tables are replaced.")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default="parquet", show_default=True)
@click.option("--summary", "with_summary", is_flag=True, help="Also print the summary.")
@click.option("--records", is_flag=True, help="Also a records table: one row per record (offset, timestamp, "
              "key/value sizes, header keys, trace header). Slower.")
@click.option("--max-batch-mb", type=click.IntRange(1), default=64, show_default=True,
              help="A compressed batch that would expand beyond this is reported, not expanded.")
@click.option("--max-decompressed-mb", type=click.IntRange(1), default=4096, show_default=True,
              help="Decompression budget per capture file.")
def export(paths, ports, detect_ports, jobs, headers_only, verify_crc, no_progress, separate_files, out_dir, fmt,
           with_summary, records, max_batch_mb, max_decompressed_mb) -> None:
    """Write the exchanges, connections and files tables to a folder."""
    try:
        folder = TableFolder(out_dir, fmt)
    except OutputFolderError as exc:
        raise click.ClickException(str(exc)) from None
    collector = None
    if with_summary:  # the report module (rich tables) is loaded only when a summary is printed
        from analyzer.report import Collector, print_summary

        collector = Collector()

    def sink(table: str, batch: pa.RecordBatch) -> None:
        folder.write(table, batch)
        if collector is not None:
            collector(table, batch)

    try:
        reports = _analyse(paths, _options(ports, detect_ports, headers_only, verify_crc, records, max_batch_mb,
                                           max_decompressed_mb, separate_files), jobs, sink, no_progress)
    except BaseException:
        folder.abort()
        raise
    written = folder.commit()
    if collector is not None:
        print_summary(_out(), collector.table("exchanges", EXCHANGES_SCHEMA),
                      collector.table("connections", CONNECTIONS_SCHEMA), reports,
                      collector.table("partitions", PARTITIONS_SCHEMA))
    rows = sum(r.exchanges for r in reports)
    Console(stderr=True).print(f"wrote {rows:,} exchanges to " + ", ".join(written))


@main.command()
@_common
@click.option("--api", "apis", multiple=True, help="Only these APIs (name like Produce, or key number).")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES), help="Only these statuses.")
@click.option("--client", help="Only client_id or client address containing this text.")
@click.option("--min-latency", type=float, help="Only exchanges at least this slow (ms).")
@click.option("--limit", type=int, default=200, show_default=True, help="Rows to print (0: all).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table (all matching rows).")
def exchanges(paths, ports, detect_ports, jobs, headers_only, verify_crc, no_progress, separate_files, apis, statuses,
              client, min_latency, limit, as_json) -> None:
    """List exchanges, one per line, with filters."""
    from analyzer.report import Collector, print_exchanges

    sink = Collector()
    _analyse(paths, _options(ports, detect_ports, headers_only, verify_crc, separate_files=separate_files),
             jobs, sink, no_progress)
    ex = filter_exchanges(sink.table("exchanges", EXCHANGES_SCHEMA), apis, statuses, client, min_latency)
    ex = ex.sort_by([("request_last_ts", "ascending"), ("response_last_ts", "ascending")])
    if as_json:
        for row in ex.to_pylist():
            sys.stdout.write(json.dumps(row, default=str) + "\n")
    else:
        print_exchanges(_out(), ex, limit or None)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--frame", "packet", type=int, help="The exchange whose request or response includes this packet.")
@click.option("--connection", type=int, help="Every exchange of this connection (its connection_id).")
@click.option("-p", "--port", "ports", type=click.IntRange(1, 65535), multiple=True, help="Kafka port(s).")
@click.option("--detect-ports", is_flag=True, help="Also find Kafka on any other port.")
@click.option("--limit", type=int, default=20, show_default=True, help="Exchanges to show (0: all).")
def show(path, packet, connection, ports, detect_ports, limit) -> None:
    """Decode chosen exchanges in full and print them as trees."""
    if packet is None and connection is None:
        raise click.UsageError("give --frame N or --connection ID")
    from analyzer.show import show as show_exchanges

    shown = show_exchanges(_out(), path, _options(ports, detect_ports), connection, packet, limit)
    if not shown:
        raise click.ClickException("no exchange there (check the packet number or connection id, and --port)")


@main.command()
def apis() -> None:
    """The Kafka API keys and versions kafkacap decodes (generated from Kafka's message definitions)."""
    from rich.table import Table

    from dissectors.kafka.apis import API_BY_KEY

    t = Table(title="Kafka APIs decoded (every version of each, request and response)", title_justify="left")
    for col in ("key", "name", "versions", "flexible from"):
        t.add_column(col, justify="right" if col in ("key", "versions", "flexible from") else "left")
    for info in API_BY_KEY:
        if info is None:
            continue
        t.add_row(str(info.key), info.name, f"{info.min_version}-{info.max_version}",
                  "-" if info.flexible_from is None else f"v{info.flexible_from}")
    _out().print(t)


def filter_exchanges(ex: pa.Table, apis, statuses, client, min_latency) -> pa.Table:
    mask = None

    def both(m):
        return m if mask is None else pc.and_(mask, m)

    if apis:
        names = [a for a in apis if not a.lstrip("-").isdigit()]
        keys = [int(a) for a in apis if a.lstrip("-").isdigit()]
        lowered = pc.utf8_lower(pc.fill_null(ex["api_name"], ""))
        m = pc.or_(pc.is_in(lowered, pa.array([n.lower() for n in names], pa.string())),
                   pc.is_in(ex["api_key"], pa.array(keys, pa.int16())))
        mask = both(pc.fill_null(m, False))
    if statuses:
        mask = both(pc.is_in(ex["status"], pa.array(list(statuses))))
    if client:
        m = pc.or_(pc.match_substring(pc.fill_null(ex["client_id"], ""), client),
                   pc.match_substring(ex["client_ip"], client))
        mask = both(pc.fill_null(m, False))
    if min_latency is not None:
        mask = both(pc.fill_null(pc.greater_equal(ex["latency_ms"], min_latency), False))
    return ex if mask is None else ex.filter(mask)


if __name__ == "__main__":
    main()


from analyzer.cli_spark import register  # noqa: E402 - the spark command lives in its own module

register(main)
