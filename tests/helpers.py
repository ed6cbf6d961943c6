"""What many test files need: where the captures are, the samples' truth files, kafkacap run in this process
(the analysis into Arrow tables, the command line through click's runner) or as its own process, and capture
files cut into the files of a rotated set.

Importing this module loads no part of kafkacap (each helper imports what it runs), so that a test file may
import it before it decides to skip (no pyspark, no plotly), and so that the suite's conftest stays cheap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

if TYPE_CHECKING:
    from click.testing import Result

    from analyzer.pipeline.analyze import FileReport, Options
    from analyzer.tls.keylog import KeyLog

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_pcaps"  # the bundled captures, each with its truth file (sample_pcaps/README.md)
TRUTH_FILES = sorted(SAMPLES.glob("*.truth.json"))
SHARED = ROOT.parent / "shared"  # beside the checkout when present: the protocol guide, public captures
PUBLIC = SHARED / "pcaps" / "public"
PUBLIC_CAPTURES = sorted(PUBLIC.glob("*.pcap*")) if PUBLIC.is_dir() else []
GROUP = SAMPLES / "tansu_consumer_group.pcap"  # a consumer group through a rebalance: the samples' most used

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")

Paths = str | os.PathLike | Iterable[str | os.PathLike]


# --- the samples -------------------------------------------------------------------------------------------

def sample_captures(suffixes: tuple[str, ...] = (".pcap", ".pcapng")) -> list[Path]:
    """The sample captures, by name."""
    return sorted(p for p in SAMPLES.iterdir() if p.suffix in suffixes)


def truth(name: str | os.PathLike) -> dict:
    """The truth file of a sample: ``name`` is its capture's name or path (``tansu_tls.pcap``), its truth file's,
    or the name alone (``tansu_tls``)."""
    return json.loads((SAMPLES / f"{Path(name).name.split('.')[0]}.truth.json").read_text())


def broker_port(name: str | os.PathLike) -> int:
    """The port the sample's broker listened on."""
    return truth(name)["broker"]["port"]


def sample_keylog(capture: str | os.PathLike) -> KeyLog | None:
    """The key log recorded beside a capture (``<name>.keys.log``), read; None when there is none."""
    from analyzer.tls.keylog import read_keylog

    keys = Path(capture).with_name(f"{Path(capture).name.split('.')[0]}.keys.log")
    return read_keylog(keys) if keys.exists() else None


# --- the analysis in this process ----------------------------------------------------------------------------

class Tables(dict):
    """An analysis' tables by name (``pa.Table``), with the batches they were made of (``batches``, by table, as
    the sink received them) and the file reports (``reports``; ``report`` when there is one file)."""

    def __init__(self, batches: dict[str, list[pa.RecordBatch]], reports: list[FileReport],
                 all_tables: bool) -> None:
        from analyzer.tables.schemas import SCHEMAS

        names = [*SCHEMAS, *(t for t in batches if t not in SCHEMAS)] if all_tables else list(batches)
        super().__init__((t, pa.Table.from_batches(batches.get(t, []), SCHEMAS.get(t) if all_tables else None))
                         for t in names)
        self.batches = batches
        self.reports = reports

    @property
    def report(self) -> FileReport:
        (report,) = self.reports
        return report


def _options(options: Options | None, fields: dict) -> Options:
    from analyzer.pipeline.analyze import Options

    if options is None:
        return Options(**fields)
    return dataclasses.replace(options, **fields) if fields else options


def _paths(paths: Paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def analyze_tables(path: str | os.PathLike, options: Options | None = None, /, *, shard=None, tap=None,
                   balance_shards: bool = False, shard_weights=(), all_tables: bool = False,
                   **option_fields) -> Tables:
    """One file through ``analyze_file`` (no stitching, no derived tables but those it makes itself), every
    batch kept: the tables it wrote to, or with ``all_tables`` every table of ``SCHEMAS`` (empty where it wrote
    none). The options: ``options`` with ``option_fields`` set, or ``Options(**option_fields)``. ``shard``,
    ``tap``, ``balance_shards`` and ``shard_weights`` go to ``analyze_file``."""
    from analyzer.pipeline.analyze import analyze_file

    batches: dict[str, list[pa.RecordBatch]] = {}
    report = analyze_file(os.fspath(path), _options(options, option_fields),
                          lambda table, batch: batches.setdefault(table, []).append(batch), shard, tap=tap,
                          balance_shards=balance_shards, shard_weights=shard_weights)
    return Tables(batches, [report], all_tables)


def run_tables(paths: Paths, options: Options | None = None, /, *, jobs: int = 1, stitch: bool = True,
               all_tables: bool = False, **option_fields) -> Tables:
    """Files through ``analyzer.pipeline.run.run``, as the command line runs them (stitched sets, the derived
    tables, ``jobs`` processes), every batch kept; the options and ``all_tables`` as for ``analyze_tables``."""
    from analyzer.pipeline.run import run

    batches: dict[str, list[pa.RecordBatch]] = {}
    reports = run(_paths(paths), _options(options, option_fields),
                  lambda table, batch: batches.setdefault(table, []).append(batch), jobs=jobs, stitch=stitch)
    return Tables(batches, reports, all_tables)


def canonical_rows(table: pa.Table) -> list[dict]:
    """A table's rows as dicts, in an order that does not depend on the order of the rows."""
    return sorted(table.to_pylist(), key=lambda r: repr(sorted(r.items())))


# --- the command line ----------------------------------------------------------------------------------------

def invoke(*args: object, any_exception: bool = False) -> Result:
    """``kafkacap ARGS`` in this process (click's runner); its exit code is the caller's to judge. An exception
    other than the command's own exit fails the test, unless ``any_exception``."""
    from click.testing import CliRunner

    from analyzer.cli.commands import main

    result = CliRunner().invoke(main, [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args])
    if not any_exception:
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def kafkacap(*args: object) -> str:
    """``kafkacap ARGS`` in this process, which must succeed: what it wrote to standard output."""
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def read_tables(folder: str | os.PathLike, tables: Iterable[str] | None = None) -> dict[str, pa.Table]:
    """The Parquet tables of an export folder by name: those named (each must be there), or every one in it."""
    import pyarrow.parquet as pq

    folder = Path(folder)
    if tables is None:
        return {p.name.removesuffix(".parquet"): pq.read_table(p) for p in sorted(folder.glob("*.parquet"))}
    return {t: pq.read_table(folder / f"{t}.parquet") for t in tables}


def export_tables(paths: Paths, out_dir: str | os.PathLike, *cli_args: object,
                  tables: Iterable[str] | None = None) -> dict[str, pa.Table]:
    """``kafkacap export PATHS -o OUT_DIR --no-progress CLI_ARGS`` in this process, which must succeed; then its
    tables, read back (``read_tables``: those named, or every one it wrote)."""
    kafkacap("export", *_paths(paths), "-o", out_dir, "--no-progress", *cli_args)
    return read_tables(out_dir, tables)


def run_cli(*args: object, env: dict[str, str] | None = None, timeout: float = 300,
            check: bool = False) -> subprocess.CompletedProcess:
    """``kafkacap ARGS`` as its own process (``python -m analyzer.cli``: the console script's entry point, with
    its exit path), run from the checkout; its output as text. ``env``: the whole environment, when given."""
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout, check=check)


# --- capture files -------------------------------------------------------------------------------------------

def pcap_records(capture: str | os.PathLike | bytes) -> tuple[bytes, list[bytes]]:
    """A classic pcap (a path, or its bytes) as its file header and its packet records (record headers included),
    as ``tcpdump -C`` writes them out."""
    data = capture if isinstance(capture, bytes) else Path(capture).read_bytes()
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records, pos = [], 24
    while pos + 16 <= len(data):
        (caplen,) = struct.unpack_from(order + "I", data, pos + 8)
        records.append(data[pos:pos + 16 + caplen])
        pos += 16 + caplen
    return data[:24], records


def split_capture(source: str | os.PathLike, folder: str | os.PathLike, cuts: Iterable[int],
                  name: str = "cap.pcap") -> list[Path]:
    """The packets of a classic pcap written as the files of a rotated set, named as ``tcpdump -C`` names them
    (``name``, ``name1``, ``name2``, ...) in ``folder`` (made if need be), cut before the given packet indexes
    (0-based)."""
    header, records = pcap_records(source)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [0, *cuts, len(records)]
    paths = []
    for i in range(len(bounds) - 1):
        path = folder / (name + (str(i) if i else ""))
        path.write_bytes(header + b"".join(records[bounds[i]:bounds[i + 1]]))
        paths.append(path)
    return paths
