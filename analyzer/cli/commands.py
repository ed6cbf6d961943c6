"""The ``kafkacap`` command line: click commands and rich output around analyzer.pipeline.run; no protocol logic.

Every expected failure ends in one line on stderr and an exit code of ``ExitCode``; an unexpected one (a bug)
in one line too, with the traceback saved to a file for the report. Text from captures and file names is
printed through ``analyzer.cli.terminal.inert``.

pyarrow, numpy and the analysis modules are imported by the commands that analyse, not here: ``--version``,
``--help`` and ``apis`` would otherwise wait a third of a second for code they never run. rich too is imported
only when something is printed through it: an export to a pipe or a file prints one plain line, and the
processes of ``--jobs`` start sooner without it.
"""

from __future__ import annotations

import enum
import io
import json
import math
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from analyzer.cli import stopping
from analyzer.cli.options import analysis_options
from analyzer.cli.terminal import inert
from analyzer.tables.formats import FORMATS

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from analyzer.pipeline.analyze import FileReport
    from analyzer.pipeline.options import Options

STATUSES = ("ok", "error", "unchecked", "no_response", "acks0", "orphan_response", "malformed")
# --status also takes these: the errors that are failures, and those that are steps of the protocol.
ERROR_KINDS = ("failure", "expected")


class ExitCode(enum.IntEnum):
    """The exit codes, as the README's table documents them."""

    OK = 0  # done; files that were damaged or unreadable are reported on stderr and in the files table
    NOTHING_READ = 1  # no input could be read (or `show` found no such exchange)
    USAGE = 2  # the command line is wrong
    OUTPUT_FAILED = 3  # the tables could not be written
    INTERNAL_ERROR = 4  # a bug: the traceback is saved to a file
    INTERRUPTED = 130  # Ctrl-C (SIGINT)
    PIPE_CLOSED = 141  # whoever read the output stopped reading (`| head`)
    TERMINATED = 143  # SIGTERM
    HUNG_UP = 129  # SIGHUP (the terminal or ssh session closed)


class OutputError(click.ClickException):
    """The output folder could not be created or written."""

    exit_code = ExitCode.OUTPUT_FAILED


def _output_error(out_dir: str, exc: Exception) -> OutputError:
    """One line: the folder asked for, the path the system refused when it is another one, and why."""
    if not isinstance(exc, OSError) or not exc.strerror:
        return OutputError(f"cannot write the tables to {out_dir}: {exc}")
    where = f"{os.fsdecode(exc.filename)}: " if exc.filename and os.fsdecode(exc.filename) != str(out_dir) else ""
    return OutputError(f"cannot write the tables to {out_dir}: {where}{exc.strerror}")


AUTO_JOBS_MAX = 8  # as analyzer.pipeline.run.AUTO_JOBS_MAX (named in --help, which loads no analysis)


def _jobs(ctx: click.Context, param: click.Parameter, value: str | int) -> int:
    """--jobs N, or auto: the CPUs this process may run on (inputs too small to split still use one)."""
    if value == "auto":
        from analyzer.pipeline.run import auto_jobs

        return auto_jobs()
    try:
        jobs = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor 'auto'") from None
    if not 1 <= jobs <= 256:
        raise click.BadParameter(f"{jobs} is not in the range 1 to 256")
    return jobs


def _api_filter(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """--api: a name kafkacap knows (any case) or a key number that fits the protocol's int16; anything else
    could never match, so it is a usage error rather than an empty listing."""
    from dissectors.kafka.apis import API_BY_KEY, key_of_name
    from dissectors.kafka.legacy07 import REQUEST_TYPES

    legacy = {name.lower() for name in REQUEST_TYPES.values()}
    for value in values:
        if value.lstrip("-").isdigit():
            if not -(1 << 15) <= int(value) < 1 << 15:
                raise click.BadParameter(f"{value} is not an API key (keys are 16-bit numbers)")
        elif key_of_name(value) is None and value.lower() not in legacy:
            import difflib

            spelled = {info.name.lower(): info.name for info in API_BY_KEY if info is not None}
            close = [spelled[n] for n in difflib.get_close_matches(value.lower(), spelled, n=3, cutoff=0.6)]
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise click.BadParameter(f"{value!r} is not an API name ({hint}`kafkacap apis` lists them all)")
    return values


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


# The analysing options (analyzer.pipeline.options) every command that analyses capture files takes.
FILES_OPTIONS = ("ports", "detect_ports", "headers_only", "verify_crc", "separate_files", "tls_keylog")


def _common(*more: str) -> Callable[[Callable], Callable]:
    """PATHS, the analysing options of FILES_OPTIONS and ``more`` (the command then takes ``options``, as
    ``analysis_options`` says), -j and --no-progress."""
    def decorate(f: Callable) -> Callable:
        f = click.option("--no-progress", is_flag=True, help="No progress bar.")(f)
        f = click.option("-j", "--jobs", default="auto", show_default=True, callback=_jobs, metavar="N|auto",
                         help="Processes: across files, and across the connections of one large file unless its "
                              f"traffic is mostly large frames (auto: one per CPU, at most {AUTO_JOBS_MAX}).")(f)
        f = analysis_options(*FILES_OPTIONS, *more)(f)
        return click.argument("paths", nargs=-1, required=True, type=click.Path())(f)

    return decorate


def _out() -> Console:
    """Standard output; when it is not a terminal (a pipe, a file) tables are not squeezed to 80 columns."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def _err() -> Console:
    """Standard error, where each message stays one line (a log collecting it can grep it)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _err_is_terminal() -> bool:
    """Whether rich takes standard error for a terminal (a progress bar goes there), asked of rich only when it
    could say yes: stderr is a terminal, or TTY_COMPATIBLE=1 or FORCE_COLOR says to treat it as one."""
    if not (sys.stderr.isatty() or os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR")):
        return False
    return _err().is_terminal


def _say(level: str, message: str) -> None:
    """One line on stderr: ``error: ...`` or ``warning: ...``; ``message`` is printed inert, never as markup."""
    from rich.text import Text

    _err().print(Text.assemble((f"{level}:", "red" if level == "error" else "yellow"), " ", inert(message)))


def _note(line: str) -> None:
    """One unstyled line on stderr, written as rich would print it (``line`` already inert)."""
    sys.stderr.write(line + "\n")


def _read_nothing(r: FileReport) -> bool:
    """No packet could be read from this file: it could not be opened, or it broke before its first packet."""
    return r.stats is None or (r.stats.packets == 0 and bool(r.stats.damage))


def report_files(reports: list[FileReport]) -> None:
    """One line per file that could not be read in full, with the reader's own words for what went wrong."""
    for r in reports:
        if r.stats is None:
            message = r.error or "cannot be read"
            if message.startswith(f"{r.path}: "):  # the reader names the file by its path: by its name, as below
                message = message[len(r.path) + 2:]
            _say("error", f"{r.name}: {message}")
        elif r.error:
            _say("error", f"{r.name}: {r.error} (rows decoded before it are kept)")
        elif r.stats.damage:
            if _read_nothing(r):
                _say("error", f"{r.name}: {r.stats.damage} (no packet before it)")
            elif r.stats.damaged_places > 1:
                _say("warning", f"{r.name}: damaged in {r.stats.damaged_places:,} places "
                                     f"({r.stats.skipped_bytes:,} bytes passed over), read around each; the "
                                     f"first: {r.stats.damage}")
            else:
                _say("warning", f"{r.name}: {r.stats.damage} (read on after it)"
                     if r.stats.skipped_bytes else f"{r.name}: {r.stats.damage} (rows decoded before it are kept)")
        if r.connections_evicted:
            _say("warning", f"{r.name}: {r.connections_evicted:,} connections or flows were dropped from the "
                                 "flow table over its limits (connections table: ended = evicted)")
        if r.refused_batches:
            _say("warning", f"{r.name}: {r.refused_batches} compressed batches over the decompression "
                                 "limits were not expanded (--max-batch-mb, --max-decompressed-mb)")


def _analyse(paths: tuple[str, ...], options: Options, jobs: int, sink, no_progress: bool,
             on_analysed: Callable[[], None] | None = None) -> list[FileReport]:
    """Run the analysis with a progress bar; exit 1 with a clear message when nothing could be read.
    ``on_analysed``: as ``analyzer.pipeline.run.run``'s."""
    from analyzer.pipeline.run import InputError, expand_paths, run

    if "-" in paths and sys.stdin.isatty():
        raise click.UsageError("'-' reads a capture from standard input, which is a terminal here "
                               "(pipe one in: tcpdump -w - | kafkacap summary -)")
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
    if not no_progress and _err_is_terminal():
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=_err(), transient=True) as progress:
            task = progress.add_task(f"analysing {len(files)} file{'s' if len(files) != 1 else ''}", total=total)
            reports = run(files, options, sink, jobs=jobs, on_progress=lambda n: progress.advance(task, n),
                          on_analysed=on_analysed)
    else:
        reports = run(files, options, sink, jobs=jobs, on_analysed=on_analysed)
    report_files(reports)
    if all(_read_nothing(r) for r in reports):
        raise click.ClickException("no capture file could be read")
    return reports


class _Commands(click.Group):
    """The command group, run so that every way out is an ``ExitCode`` and at most one line on stderr."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        sys.exit(_guarded(lambda: super(_Commands, self).main(args, prog_name, complete_var, standalone_mode=False,
                                                              **extra)))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # click would swallow it and exit 1, which means "nothing could be read" here
            raise _PipeClosed from None


class _PipeClosed(Exception):
    """Standard output's reader has gone."""


def _guarded(command: Callable[[], object]) -> int:
    """Run ``command`` (click without its own handlers) and turn each way it can end into an exit code."""
    restore = _stop_quietly_on_signals()
    _escape_what_the_terminal_cannot_encode()
    try:
        result = command()
        sys.stdout.flush()  # a closed pipe shows here, not as a message at interpreter exit
        return result if isinstance(result, int) else ExitCode.OK
    except click.UsageError as exc:
        exc.show()  # click's usage text: it echoes the command line, the user's own words
        return ExitCode.USAGE
    except click.ClickException as exc:
        _say("error", exc.format_message())
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt) as exc:  # click turns KeyboardInterrupt into Abort (from it)
        if isinstance(exc, _HungUp) or isinstance(exc.__cause__, _HungUp):
            _say("error", "hung up")
            return ExitCode.HUNG_UP
        if isinstance(exc, _Terminated) or isinstance(exc.__cause__, _Terminated):
            _say("error", "terminated")
            return ExitCode.TERMINATED
        _say("error", "interrupted")
        return ExitCode.INTERRUPTED
    except (BrokenPipeError, _PipeClosed):
        _stdout_to_devnull()
        return ExitCode.PIPE_CLOSED
    except Exception as exc:  # noqa: BLE001 - a bug: one line and a saved traceback instead of a screenful
        return _internal_error(exc)
    finally:
        restore()


_SIGHUP = getattr(signal, "SIGHUP", None)  # none on Windows


class _Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, a service manager): ended as Ctrl-C is, partial output removed the same way."""


class _HungUp(_Terminated):
    """SIGHUP (the terminal or the ssh session closed): ended as SIGTERM is."""


def _stop_quietly_on_signals() -> Callable[[], None]:
    """Ctrl-C (SIGINT), SIGTERM and SIGHUP raise KeyboardInterrupt here (handled once, in ``_guarded``), after
    passing the signal on to the worker processes, which end at once without a traceback of their own (a
    terminal's Ctrl-C reaches them too; ``kill`` does not); while a command finishes what it has open
    (``stopping.finishing``), they are noted and let go. Returns what restores the previous handlers."""
    main_pid = os.getpid()

    def stop(signum: int, frame) -> None:
        if os.getpid() != main_pid:  # a worker forked from this process
            os._exit(128 + signum)
        if stopping.deferred(signal.Signals(signum).name):
            return
        multiprocessing = sys.modules.get("multiprocessing")
        for child in multiprocessing.active_children() if multiprocessing else ():
            try:
                os.kill(child.pid, signum)
            except OSError:
                pass
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _HungUp if signum == _SIGHUP else _Terminated

    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM, *((_SIGHUP,) if _SIGHUP is not None else ())):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, stop)
    except ValueError:  # not the main thread (an embedding program): its own handling stays
        pass

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def _escape_what_the_terminal_cannot_encode() -> None:
    """On a terminal that is not UTF-8 (PYTHONIOENCODING=ascii, a latin-1 locale), a character it cannot
    encode (a client id in Cyrillic, the arrow in show's titles) is written as a ``\\u`` escape, as ``inert``
    writes the unprintable ones, instead of ending the command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass


def _stdout_to_devnull() -> None:
    """The reader of stdout has gone: what is still buffered must not fail again when Python exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _internal_error(exc: Exception) -> int:
    """A bug: one line naming it, and the traceback in a file to attach to a report."""
    details = traceback.format_exc()
    try:
        from importlib.metadata import version

        header = f"kafkacap {version('kafkacap')}, python {sys.version.split()[0]}, argv {sys.argv!r}\n"
    except Exception:  # noqa: BLE001 - the header is a courtesy
        header = f"argv {sys.argv!r}\n"
    try:
        fd, path = tempfile.mkstemp(prefix="kafkacap-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(header + details)
        where = f"the traceback is in {path}; please attach it to a bug report"
    except OSError:
        sys.stderr.write(details)
        where = "the traceback is above; please attach it to a bug report"
    _say("error", f"internal error (a bug in kafkacap): {type(exc).__name__}: {exc}; {where}")
    return ExitCode.INTERNAL_ERROR


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafkacap")
def main() -> None:
    """Analyse Apache Kafka traffic in pcap/pcapng captures: every request matched to its response,
    with latency and errors, as a terminal summary or as Parquet/CSV/JSON-lines tables."""


@main.command()
@_common("deliveries")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document with the same figures (structure: docs/summary-json.md).")
def summary(paths, options: Options, jobs, no_progress, as_json) -> None:
    """Summarise Kafka traffic: capture span and rates, API usage and latency percentiles, slowest service
    times, errors (protocol steps apart), brokers, clients, topics, connections."""
    from analyzer.cli.summary import SUMMARY_TABLES, Collector, print_summary, summary_document
    from analyzer.tables.schemas import (
        CLUSTER_SCHEMA,
        CONNECTIONS_SCHEMA,
        DELIVERIES_SCHEMA,
        EXCHANGES_SCHEMA,
        GROUPS_SCHEMA,
        PARTITIONS_SCHEMA,
        SHARE_CONSUMPTION_SCHEMA,
        TRANSACTIONS_SCHEMA,
    )

    sink = Collector(SUMMARY_TABLES)
    reports = _analyse(paths, options, jobs, sink, no_progress)
    tables = (sink.table("exchanges", EXCHANGES_SCHEMA), sink.table("connections", CONNECTIONS_SCHEMA), reports,
              sink.table("partitions", PARTITIONS_SCHEMA), sink.table("groups", GROUPS_SCHEMA),
              sink.table("deliveries", DELIVERIES_SCHEMA) if options.deliveries else None)
    cluster = sink.table("cluster", CLUSTER_SCHEMA)
    transactions = sink.table("transactions", TRANSACTIONS_SCHEMA)
    shares = sink.table("share_consumption", SHARE_CONSUMPTION_SCHEMA)
    if as_json:
        from analyzer.cli.jsonout import dumps

        sys.stdout.write(dumps(summary_document(*tables, headers_only=not options.bodies,
                                                verify_crc=options.verify_crc, cluster=cluster,
                                                transactions=transactions, share_consumption=shares),
                               indent=2) + "\n")
    else:
        print_summary(_out(), *tables, headers_only=not options.bodies, verify_crc=options.verify_crc,
                      detect_ports=options.detect_ports, cluster=cluster, transactions=transactions,
                      share_consumption=shares)


@main.command()
@_common("records", "deliveries", "max_batch_mb", "max_decompressed_mb")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for the tables (exchanges, connections, files); existing tables are replaced.")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default="parquet", show_default=True)
@click.option("--summary", "with_summary", is_flag=True, help="Also print the summary.")
def export(paths, options: Options, jobs, no_progress, out_dir, fmt, with_summary) -> None:
    """Write the exchanges, connections and files tables to a folder."""
    from analyzer.tables.schemas import (
        CLUSTER_SCHEMA,
        CONNECTIONS_SCHEMA,
        DELIVERIES_SCHEMA,
        EXCHANGES_SCHEMA,
        GROUPS_SCHEMA,
        PARTITIONS_SCHEMA,
        SHARE_CONSUMPTION_SCHEMA,
        TRANSACTIONS_SCHEMA,
    )
    from analyzer.tables.writers import OutputFolderError, TableFolder

    replacing = _holds_files(out_dir)
    try:
        folder = TableFolder(out_dir, fmt)
    except OutputFolderError as exc:
        raise OutputError(str(exc)) from None
    except OSError as exc:
        raise _output_error(out_dir, exc) from None
    collector = None
    if with_summary:  # the report module (rich tables) is loaded only when a summary is printed
        from analyzer.cli.summary import SUMMARY_TABLES, Collector, print_summary

        collector = Collector(SUMMARY_TABLES)

    def sink(table: str, batch: pa.RecordBatch) -> None:
        try:
            folder.write(table, batch)
        except OSError as exc:
            raise _output_error(out_dir, exc) from None
        if collector is not None:
            collector(table, batch)

    try:
        reports = _analyse(paths, options, jobs, sink, no_progress, folder.settle)
    except BaseException:
        folder.abort()
        raise
    try:
        written = folder.commit()
    except OSError as exc:
        folder.abort()
        raise _output_error(out_dir, exc) from None
    if collector is not None:
        print_summary(_out(), collector.table("exchanges", EXCHANGES_SCHEMA),
                      collector.table("connections", CONNECTIONS_SCHEMA), reports,
                      collector.table("partitions", PARTITIONS_SCHEMA), collector.table("groups", GROUPS_SCHEMA),
                      collector.table("deliveries", DELIVERIES_SCHEMA) if options.deliveries else None,
                      headers_only=not options.bodies, verify_crc=options.verify_crc,
                      detect_ports=options.detect_ports, cluster=collector.table("cluster", CLUSTER_SCHEMA),
                      transactions=collector.table("transactions", TRANSACTIONS_SCHEMA),
                      share_consumption=collector.table("share_consumption", SHARE_CONSUMPTION_SCHEMA))
    rows = sum(r.exchanges for r in reports)
    _note(wrote_line(rows, out_dir, written, replacing))


def _holds_files(folder: str) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def wrote_line(rows: int, out_dir: str, written: list[str], replaced: bool) -> str:
    """The one line an export ends with: the folder, its tables in the schemas' order (whatever order they were
    written in), and whether an earlier export there was replaced."""
    from analyzer.tables.schemas import SCHEMAS

    order = {name: i for i, name in enumerate(SCHEMAS)}
    names = sorted({os.path.basename(p).split(".", 1)[0] for p in written}, key=lambda n: (order.get(n, len(order)), n))
    extension = os.path.splitext(written[0])[1] if written else ""
    return inert(f"wrote {rows:,} exchanges to {out_dir}: {', '.join(names)} ({extension.lstrip('.') or 'tables'})"
                 + ("; the earlier export there was replaced" if replaced else ""))


def _utc_time(ctx: click.Context, param: click.Parameter, value: str | None):
    """--since/--until: ISO 8601 (2026-11-21T01:48:03, with a space, a date alone, or an offset); UTC unless
    the text gives an offset."""
    if value is None:
        return None
    import datetime as dt

    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time (2026-11-21T01:48:03.5)") from None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


SORTS = {"time": [("request_last_ts", "ascending"), ("response_last_ts", "ascending")],
         "latency": [("latency_ms", "descending"), ("request_last_ts", "ascending")],
         "service": [("service_ms", "descending"), ("request_last_ts", "ascending")],
         "size": [("request_size", "descending"), ("request_last_ts", "ascending")],
         "response-size": [("response_size", "descending"), ("request_last_ts", "ascending")]}


@main.command()
@_common()
@click.option("--api", "apis", multiple=True, callback=_api_filter,
              help="Only these APIs (name like Produce, or key number).")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES + ERROR_KINDS),
              help="Only these statuses; 'failure': errors that are failures, 'expected': errors that are steps of "
                   "the protocol (status error is both).")
@click.option("--client", help="Only client_id or client address containing this text.")
@click.option("--broker", help="Only brokers whose address (ip:port, IPv6 as [ip]:port) contains this text.")
@click.option("--topic", "topics", multiple=True, help="Only exchanges naming this topic (exact name; repeatable).")
@click.option("--group", "groups", multiple=True, help="Only exchanges of this consumer group (exact id; repeatable).")
@click.option("--since", callback=_utc_time, help="Only requests completed at or after this time (ISO 8601, UTC).")
@click.option("--until", callback=_utc_time, help="Only requests completed before this time (ISO 8601, UTC).")
@click.option("--min-latency", type=click.FloatRange(0), callback=_finite,
              help="Only exchanges at least this slow (ms).")
@click.option("--sort", type=click.Choice(list(SORTS)), default="time", show_default=True,
              help="Order: by time, slowest first (latency, or service time: waits by design left out), or "
                   "largest request / response first.")
@click.option("--limit", type=click.IntRange(0), default=None,
              help="Rows to print, in every format (0: all). Default: 200 in the table, all with --json.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines (the columns of the exchanges table).")
def exchanges(paths, options: Options, jobs, no_progress, apis, statuses, client, broker, topics, groups, since, until,
              min_latency, sort, limit, as_json) -> None:
    """List exchanges, one per line, with filters."""
    from analyzer.cli.summary import Collector, print_exchanges
    from analyzer.tables.schemas import EXCHANGES_SCHEMA

    sink = Collector(("exchanges",))  # the listing reads no other table
    _analyse(paths, options, jobs, sink, no_progress)
    every = sink.table("exchanges", EXCHANGES_SCHEMA)
    ex = filter_exchanges(every, apis, statuses, client, min_latency, broker, topics, since, until, groups)
    if ex.num_rows == 0 and every.num_rows and (since is not None or until is not None):
        _note(span_hint(every))
    ex = ex.sort_by(SORTS[sort])
    if limit is None:
        limit = 0 if as_json else 200
    if as_json:
        from analyzer.cli.jsonout import dumps

        shown = ex.slice(0, limit) if limit else ex
        for batch in shown.to_batches(4096):
            sys.stdout.write("".join(dumps(row) + "\n" for row in batch.to_pylist()))
    else:
        print_exchanges(_out(), ex, limit or None)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--frame", "packet", type=int, help="The exchange whose request or response includes this packet.")
@click.option("--connection", type=int, help="Every exchange of this connection (its connection_id).")
@analysis_options("ports", "detect_ports", "max_batch_mb", "tls_keylog")
@click.option("--limit", type=click.IntRange(0), default=20, show_default=True, help="Exchanges to show (0: all).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: per exchange its row and both frames decoded.")
@click.option("--max-bytes", type=click.IntRange(0, 1 << 16), default=64, show_default=True,
              help="Bytes shown of each record key, value and header value (text as text, else hex; the full "
                   "size is always given).")
@click.option("--max-entries", type=click.IntRange(1), default=None,
              help="Elements shown of each array of a body (default 50, with --json 10,000); the rest are walked "
                   "past, not kept, and counted.")
def show(path, packet, connection, options: Options, limit, as_json, max_bytes, max_entries) -> None:
    """Decode chosen exchanges in full and print them as trees."""
    if packet is None and connection is None:
        raise click.UsageError("give --frame N or --connection ID")
    from analyzer.cli.show import show as show_exchanges

    shown, report = show_exchanges(_out(), path, options, connection, packet, limit, as_json=as_json,
                                   max_bytes=max_bytes, max_entries=max_entries)
    report_files([report])
    if _read_nothing(report):
        raise click.ClickException("the capture file could not be read")
    if not shown:
        raise click.ClickException("no exchange there (check the packet number or connection id, and --port)")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="JSON lines: key, name, min_version, max_version, "
              "flexible_from.")
def apis(as_json) -> None:
    """The Kafka API keys and versions kafkacap decodes (generated from Kafka's message definitions)."""
    from rich.table import Table

    from dissectors.kafka.apis import API_BY_KEY, FORMER_NAMES

    if as_json:
        for info in API_BY_KEY:
            if info is not None:
                sys.stdout.write(json.dumps({"key": info.key, "name": info.name, "min_version": info.min_version,
                                             "max_version": info.max_version,
                                             "flexible_from": info.flexible_from,
                                             "former_names": list(FORMER_NAMES.get(info.key, ()))}) + "\n")
        return

    t = Table(title="Kafka APIs decoded (every version of each, request and response)", title_justify="left")
    for col in ("key", "name", "versions", "flexible from", "formerly"):
        t.add_column(col, justify="right" if col in ("key", "versions", "flexible from") else "left")
    for info in API_BY_KEY:
        if info is None:
            continue
        t.add_row(str(info.key), info.name, f"{info.min_version}-{info.max_version}",
                  "-" if info.flexible_from is None else f"v{info.flexible_from}",
                  ", ".join(FORMER_NAMES.get(info.key, ())))
    _out().print(t)


def span_hint(ex: pa.Table) -> str:
    """Where the capture's requests lie in time: the hint for a --since/--until that matched nothing."""
    import pyarrow.compute as pc

    when = pc.coalesce(ex["request_last_ts"], ex["response_last_ts"])
    first, last = pc.min(when).as_py(), pc.max(when).as_py()
    if first is None:
        return "No exchange has a time."
    return (f"No exchange in that time range: the capture's requests run from {first:%Y-%m-%d %H:%M:%S} to "
            f"{last:%Y-%m-%d %H:%M:%S} UTC (--since and --until take UTC unless given an offset).")


def filter_exchanges(ex: pa.Table, apis, statuses, client, min_latency, broker=None, topics=(), since=None,
                     until=None, groups=()) -> pa.Table:
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = None

    def both(m):
        return m if mask is None else pc.and_(mask, m)

    if apis:
        from dissectors.kafka.apis import key_of_name

        names = [a for a in apis if not a.lstrip("-").isdigit()]
        # a renamed API's former name finds it by key: rows name it as the release that decoded it does
        keys = [int(a) for a in apis if a.lstrip("-").isdigit()] + [
            key for key in map(key_of_name, names) if key is not None]
        lowered = pc.utf8_lower(pc.fill_null(ex["api_name"], ""))
        m = pc.or_(pc.is_in(lowered, pa.array([n.lower() for n in names], pa.string())),
                   pc.is_in(ex["api_key"], pa.array(keys, pa.int16())))
        mask = both(pc.fill_null(m, False))
    if statuses:
        plain = [s for s in statuses if s not in ERROR_KINDS]
        m = pc.is_in(ex["status"], pa.array(plain, pa.string()))
        if set(statuses) & set(ERROR_KINDS):
            error = pc.equal(ex["status"], "error")
            expected = pc.fill_null(ex["error_expected"], False)
            if "failure" in statuses:
                m = pc.or_(m, pc.and_(error, pc.invert(expected)))
            if "expected" in statuses:
                m = pc.or_(m, pc.and_(error, expected))
        mask = both(pc.fill_null(m, False))
    if client:
        m = pc.or_(pc.match_substring(pc.fill_null(ex["client_id"], ""), client),
                   pc.match_substring(ex["client_ip"], client))
        mask = both(pc.fill_null(m, False))
    if min_latency is not None:
        mask = both(pc.fill_null(pc.greater_equal(ex["latency_ms"], min_latency), False))
    if broker:
        from analyzer.cli.summary import address_column

        mask = both(pc.fill_null(pc.match_substring(address_column(ex["broker_ip"], ex["broker_port"]), broker),
                                 False))
    if topics:
        rows = pc.list_parent_indices(ex["topics"])
        hit = pc.is_in(pc.list_flatten(ex["topics"]), pa.array(list(topics), pa.string()))
        named = pc.unique(pc.filter(rows, pc.fill_null(hit, False)))
        import numpy as np

        m = np.zeros(ex.num_rows, dtype=bool)
        m[named.to_numpy()] = True
        mask = both(pa.chunked_array([pa.array(m)]))
    if groups:
        mask = both(pc.fill_null(pc.is_in(ex["group_id"], pa.array(list(groups), pa.string())), False))
    when = pc.coalesce(ex["request_last_ts"], ex["response_last_ts"])
    if since is not None:
        mask = both(pc.fill_null(pc.greater_equal(when, pa.scalar(since, ex.schema.field("request_last_ts").type)),
                                 False))
    if until is not None:
        mask = both(pc.fill_null(pc.less(when, pa.scalar(until, ex.schema.field("request_last_ts").type)), False))
    return ex if mask is None else ex.filter(mask)


from analyzer.cli.spark import register  # noqa: E402 - the spark command lives in its own module

register(main)
from analyzer.cli.report import register as register_report  # noqa: E402 - as the spark command

register_report(main)
from analyzer.cli.live import register as register_live  # noqa: E402 - as the spark command

register_live(main)
