"""The analysing options are declared once (analyzer.pipeline.options): every command's click options and the
Spark job's argparse arguments are made from that declaration, and both turn a command line into the same
``Options``, by name."""

from __future__ import annotations

import re
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from analyzer.cli import options as cli_options
from analyzer.cli.commands import main
from analyzer.cli.options import analysis_options
from analyzer.pipeline import options as declared
from analyzer.pipeline.options import ANALYSIS_OPTIONS, DEFAULT_PORTS, Options, OptionSpec, options_from
from spark_jobs import export_job

SAMPLE = Path(__file__).resolve().parents[2] / "sample_pcaps" / "kafka09_legacy.pcap"
EVERY = tuple(spec.name for spec in ANALYSIS_OPTIONS)
FILES = ("ports", "detect_ports", "headers_only", "verify_crc", "separate_files", "tls_keylog")
# The analysing options each command takes (the command line as documented; `spark` takes every declared one).
TAKEN = {
    "export": (*FILES, "records", "deliveries", "max_batch_mb", "max_decompressed_mb"),
    "summary": (*FILES, "deliveries"),
    "exchanges": FILES,
    "report": (*FILES, "max_batch_mb", "max_decompressed_mb"),
    "show": ("ports", "detect_ports", "max_batch_mb", "tls_keylog"),
    "live": ("ports", "detect_ports", "headers_only", "tls_keylog"),
    "spark": EVERY,
}
KEYLOG_LINE = f"CLIENT_RANDOM {'ab' * 32} {'cd' * 48}\n"


def flat(text: str) -> str:
    """Help text with its wrapping undone."""
    return " ".join(text.split())


def shown(spec: OptionSpec) -> str:
    """What the help shows of an option after its flags: its help, then its default and range as click does."""
    if spec.kind != "int":
        return spec.help
    bounds = f"{spec.low}<=x<={spec.high}" if spec.high is not None else f"x>={spec.low}"
    return f"{spec.help} [{bounds}]" if spec.repeatable else f"{spec.help} [default: {spec.default}; {bounds}]"


def mentions(help_text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


@pytest.mark.parametrize("command", sorted(TAKEN))
def test_every_command_lists_the_declared_options_it_takes_with_their_defaults(command):
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    for spec in ANALYSIS_OPTIONS:
        if spec.name in TAKEN[command]:
            assert ", ".join(spec.flags) in text, (command, spec.flags)
            assert shown(spec) in text, (command, spec.name)
        else:
            assert not any(mentions(text, flag) for flag in spec.flags if flag.startswith("--")), (command, spec.name)


def test_the_spark_job_lists_every_declared_option_with_its_default():
    text = flat(export_job.parser().format_help())
    for spec in ANALYSIS_OPTIONS:
        assert all(mentions(text, flag) for flag in spec.flags), spec.name
        assert shown(spec) in text, spec.name


def test_the_declared_defaults_are_the_options_defaults():
    assert options_from({spec.name: spec.default for spec in ANALYSIS_OPTIONS}) == Options() == options_from({})
    assert Options().ports == DEFAULT_PORTS
    assert f"Default: {DEFAULT_PORTS[0]}." in next(spec.help for spec in ANALYSIS_OPTIONS if spec.name == "ports")


def _capture_options(monkeypatch) -> list[Options]:
    """Every analysing command stops (exit 0) where it hands its Options on to the analysis, into the list
    returned."""
    from analyzer.capture import live_sources as capture_live
    from analyzer.cli import live_view
    from analyzer.cli import show as show_module
    from analyzer.pipeline import run as run_module
    from spark_jobs import session

    captured: list[Options] = []

    def stop(options: Options):
        captured.append(options)
        raise click.exceptions.Exit(0)

    def run(files, options, *args, **kwargs):
        stop(options)

    def show(console, path, options, *args, **kwargs):
        stop(options)

    def run_live(source, options, **kwargs):
        stop(options)

    def spark_export(spark, paths, out, options, **kwargs):
        stop(options)

    class Stream:
        linktype = 1

        def __init__(self, path: str) -> None:
            pass

        def health(self):
            return types.SimpleNamespace(filtered_in_kernel=None)

    monkeypatch.setattr(run_module, "run", run)
    monkeypatch.setattr(show_module, "show", show)
    monkeypatch.setattr(live_view, "run_live", run_live)
    monkeypatch.setattr(capture_live, "StreamSource", Stream)
    monkeypatch.setattr(export_job, "export", spark_export)
    monkeypatch.setattr(session, "build_session", lambda *a, **k: types.SimpleNamespace(version="test"))
    return captured


def command_line(command: str, options: list[str], tmp_path: Path) -> list[str]:
    """``options`` given to ``command`` with whatever else it needs to reach the analysis."""
    path = str(SAMPLE)
    rest = {"export": [path, "-o", str(tmp_path / "out"), "--no-progress"],
            "summary": [path, "--no-progress"], "exchanges": [path, "--no-progress"],
            "report": [path, "-o", str(tmp_path / "report.html"), "--no-progress"],
            "show": [path, "--frame", "1"], "live": ["-r", path, "--no-screen"],
            "spark": [path, "-o", str(tmp_path / "spark-out")]}[command]
    return [command, *options, *rest]


def given(names: tuple[str, ...], keylog: Path) -> list[str]:
    """A command line setting each of ``names`` away from its default."""
    line = {"ports": ["-p", "9093", "-p", "9094"], "detect_ports": ["--detect-ports"],
            "headers_only": ["--headers-only"], "verify_crc": ["--verify-crc"], "records": ["--records"],
            "deliveries": ["--deliveries"], "max_batch_mb": ["--max-batch-mb", "8"],
            "max_decompressed_mb": ["--max-decompressed-mb", "100"], "separate_files": ["--separate-files"],
            "tls_keylog": ["--tls-keylog", str(keylog)]}
    return [arg for name in names for arg in line[name]]


def spark_job_options(args: list[str]) -> Options:
    return options_from(vars(export_job.parser().parse_args([*args, "in.pcap", "-o", "out"])))


@pytest.mark.parametrize("command", sorted(TAKEN))
@pytest.mark.parametrize("everything", [True, False], ids=["all-given", "none-given"])
def test_a_command_and_the_spark_job_make_the_same_options_of_the_same_command_line(command, everything, tmp_path,
                                                                                     monkeypatch):
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    keylog = tmp_path / "keys.log"
    keylog.write_text(KEYLOG_LINE)
    args = given(TAKEN[command], keylog) if everything else []
    captured = _capture_options(monkeypatch)
    result = CliRunner().invoke(main, command_line(command, args, tmp_path))
    assert result.exit_code == 0 and len(captured) == 1, result.output
    options = captured[0]
    assert options == spark_job_options(args)
    if not everything:
        assert options == Options()
    else:
        assert options.ports == (9093, 9094) and options.detect_ports and options.tls_keys is not None
        assert options != Options()


def test_the_brief_command_line_makes_equal_options(tmp_path, monkeypatch):
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    args = ["-p", "9093", "-p", "9094", "--detect-ports", "--headers-only", "--max-batch-mb", "8", "--separate-files"]
    expected = Options(ports=(9093, 9094), detect_ports=True, bodies=False, max_batch_mb=8, stitch=False)
    captured = _capture_options(monkeypatch)
    for command in ("export", "spark"):
        result = CliRunner().invoke(main, command_line(command, args, tmp_path))
        assert result.exit_code == 0, result.output
        assert captured.pop() == expected
    assert spark_job_options(args) == expected


@pytest.mark.parametrize("bad", [["-p", "0"], ["-p", "65536"], ["--max-batch-mb", "0"],
                                 ["--max-decompressed-mb", "-1"], ["--tls-keylog", "no-such-key-log"]])
def test_both_parsers_refuse_the_same_values(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["export", *bad, str(SAMPLE), "-o", "out", "--no-progress"])
    assert result.exit_code == 2, result.output
    with pytest.raises(SystemExit) as exit_:
        export_job.parser().parse_args([*bad, "in.pcap", "-o", "out"])
    assert exit_.value.code == 2


def test_a_declared_option_reaches_both_parsers_without_touching_them(monkeypatch):
    added = [OptionSpec("packet_by_packet", ("--packet-by-packet",), field="bulk", to_field=lambda x: not x,
                        help="Read every packet on its own (the reference path)."),
             OptionSpec("batch_rows", ("--batch-rows",), field="batch_rows", kind="int", default=1 << 14, low=1,
                        help="Rows held before they become Arrow batches.")]
    monkeypatch.setattr(declared, "ANALYSIS_OPTIONS", [*ANALYSIS_OPTIONS, *added])

    made: list[Options] = []

    @click.command()
    @analysis_options()
    def probe(options: Options) -> None:
        made.append(options)

    for args, expected in ((["--packet-by-packet", "--batch-rows", "100", "-p", "9093"],
                            Options(bulk=False, batch_rows=100, ports=(9093,))),
                           ([], Options())):
        result = CliRunner().invoke(probe, args)
        assert result.exit_code == 0, result.output
        assert made.pop() == expected
        assert spark_job_options(args) == expected
    for help_text in (CliRunner().invoke(probe, ["--help"]).output, export_job.parser().format_help()):
        for spec in added:
            assert shown(spec) in flat(help_text), spec.name
    assert CliRunner().invoke(probe, ["--batch-rows", "0"]).exit_code == 2
    with pytest.raises(SystemExit):
        export_job.parser().parse_args(["--batch-rows", "0", "in.pcap", "-o", "out"])


def test_a_command_note_follows_the_declared_help():
    @click.command()
    @analysis_options("detect_ports", notes={"detect_ports": "A note of its own."})
    def probe(options: Options) -> None:
        pass

    spec = next(spec for spec in ANALYSIS_OPTIONS if spec.name == "detect_ports")
    assert f"{spec.help} A note of its own." in flat(CliRunner().invoke(probe, ["--help"]).output)
    with pytest.raises(KeyError):
        analysis_options("ports", notes={"detect_ports": "not taken"})
    with pytest.raises(KeyError):
        cli_options.analysis_options("no_such_option")
