"""``kafkacap report``: the HTML report of captures (analysed as ``export`` would, into a temporary folder) or
of a folder of tables written by ``export`` or by the Spark job (read as it is, no analysis).

pyarrow and plotly are imported only when the command runs, as the other commands do.
"""

from __future__ import annotations

import os
import tempfile

import click

from analyzer.cli.terminal import inert


def _command() -> click.Command:
    """Built when registered: it shares the analysis options of ``commands``, which imports this module last."""
    from analyzer.cli.commands import OutputError, _analyse, _common, _err, _output_error

    @click.command("report")
    @_common("max_batch_mb", "max_decompressed_mb")
    @click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
                  help="The HTML file to write (one self-contained page; replaced if it exists).")
    @click.option("--title", default="kafkacap report", show_default=True, help="Title of the page.")
    @click.option("--from-rows", is_flag=True,
                  help="On a Spark output: read the exchange rows even where the job's aggregate tables are there "
                       "(they give intervals of a minute at least; the rows, finer ones for a short span).")
    def report(paths, options, jobs, no_progress, out, title, from_rows) -> None:
        """Write one HTML page of plots (traffic, latency, errors, groups, connections): of capture files, or
        of a folder of tables written by `export` or by the Spark job (PATHS is then that one folder)."""
        try:
            import plotly  # noqa: F401
        except ImportError:
            raise click.ClickException("plotly is not installed: pip install plotly") from None
        from analyzer.report.page import write_report
        from analyzer.report.source import ReportInputError, is_tables_folder, open_folder
        from analyzer.tables.writers import OutputFolderError, TableFolder

        tables = [p for p in paths if is_tables_folder(p)]
        if tables and len(paths) > 1:
            raise click.UsageError(f"{tables[0]} is a folder of tables: give it alone, or give capture files")
        with tempfile.TemporaryDirectory(prefix="kafkacap-report-") as tmp:
            if tables:
                folder_path = tables[0]
            else:
                folder_path = os.path.join(tmp, "tables")
                try:
                    folder = TableFolder(folder_path, "parquet")
                except (OutputFolderError, OSError) as exc:
                    raise OutputError(f"cannot write the tables to a temporary folder: {exc}") from None

                def sink(table, batch) -> None:
                    try:
                        folder.write(table, batch)
                    except OSError as exc:
                        raise _output_error(folder_path, exc) from None

                try:
                    _analyse(paths, options, jobs, sink, no_progress, folder.settle)
                except BaseException:
                    folder.abort()
                    raise
                try:
                    folder.commit()
                except OSError as exc:
                    folder.abort()
                    raise _output_error(folder_path, exc) from None
            try:
                source = open_folder(folder_path)
            except ReportInputError as exc:
                raise click.ClickException(str(exc)) from None
            try:
                size = write_report(source, out, title, use_aggregates=not from_rows)
            except OSError as exc:
                raise OutputError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
        from rich.text import Text

        _err().print(Text(f"wrote {inert(out)} ({size / 1e6:.1f} MB)"))

    return report


def register(group: click.Group) -> None:
    group.add_command(_command())
