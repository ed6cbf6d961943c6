"""The terminal summary at 80, 100, 120 and 200 columns: every cell that identifies a row or gives its figure
(service time, API, client and broker addresses, status and error names, ...) is printed whole, optional
columns give way first and the summary says which, and a column the same on every row goes to the title.

What must appear is computed here from the tables the CLI exports, never taken from the summary itself."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.text import Text

from analyzer.cli.summary import print_summary
from tests.helpers import SAMPLES, export_tables, run_tables

CAPTURES = ("tansu_broker_errors.pcap", "tansu_consumer_group.pcap", "kafka44_cluster.pcap")
WIDTHS = (80, 100, 120, 200)
WAITS = {"Fetch", "JoinGroup", "SyncGroup"}


def address(ip: str | None, port: int | None) -> str:
    return "-" if ip is None else f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


@pytest.fixture(scope="module", params=CAPTURES)
def capture(request, tmp_path_factory) -> dict:
    """The sample's exported tables, and the tables and reports of an analysis in this process to render."""
    path = SAMPLES / request.param
    exported = export_tables(path, tmp_path_factory.mktemp("export") / "out",
                             tables=("exchanges", "partitions", "groups", "connections"))
    return {"name": request.param, "analysed": run_tables(path, all_tables=True),
            **{t: table.to_pylist() for t, table in exported.items()}}


def render(capture: dict, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    analysed = capture["analysed"]
    print_summary(console, analysed["exchanges"], analysed["connections"], analysed.reports, analysed["partitions"],
                  analysed["groups"])
    return console.export_text()


def key_cells(capture: dict) -> dict[str, set[str]]:
    """Per summary table, the texts that identify its rows or give their figures, from the exported tables."""
    ex = capture["exchanges"]
    served = sorted((r for r in ex if r["waited"] is False and r["service_ms"] is not None),
                    key=lambda r: (-r["service_ms"], r["request_frame"]))[:10]
    slowest = set()
    for r in served:
        slowest |= {ms(r["service_ms"]), f"{r['api_name']} v{r['api_version']}",
                    address(r["client_ip"], r["client_port"]), address(r["broker_ip"], r["broker_port"]),
                    r["error_name"] if r["status"] == "error" else r["status"]}
    errors = {r["error_name"] for r in ex if r["error_code"] not in (0, None)}
    apis = {r["api_name"] for r in ex if r["api_name"]}
    brokers = {address(r["broker_ip"], r["broker_port"]) for r in ex}
    clients = {r["client_id"] for r in ex if r["client_id"]}
    topics = {p["topic"] for p in capture["partitions"] if p["api_key"] == 0 and p["records"] is not None}
    groups = {g["group_id"] for g in capture["groups"]}
    return {"slowest": slowest, "errors": errors, "apis": apis, "brokers": brokers, "clients": clients,
            "topics": topics, "groups": groups, "file": {capture["name"]}}


def whole(text: str, cell: str) -> bool:
    """``cell`` is printed whole somewhere in ``text``: not cut short, not run on into other characters."""
    return re.search(r"(?<![\w.:\[\]-])" + re.escape(cell) + r"(?![\w.:\[\]…-])", text) is not None


@pytest.mark.parametrize("width", WIDTHS)
def test_key_cells_are_printed_whole_at_every_width(capture, width):
    text = render(capture, width)
    assert max(Text(line).cell_len for line in text.splitlines()) <= width
    missing = {table: sorted(c for c in cells if not whole(text, c)) for table, cells in key_cells(capture).items()}
    assert not any(missing.values()), (missing, text)


def slowest_section(text: str) -> str:
    start = text.index("Slowest service times")
    return text[start:text.index("\n", text.index("└", start))]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_slowest_table_drops_optional_columns_and_says_so(capture, width):
    text = render(capture, width)
    section = slowest_section(text)
    header = " ".join(line for line in section.splitlines() if line.startswith("┃"))
    for column in ("service", "api", "client", "broker", "status", "packets"):
        assert re.search(rf"(?<![\w_]){column}(?![\w_])", header), header
    for column in ("client_id", "topics"):
        if column not in header:
            assert re.search(rf"not shown at {width} columns:.*{column}", text.replace("\n", " ")), text
    if width == 200:
        assert "client_id" in header and "topics" in header


def test_a_column_the_same_on_every_row_goes_to_the_title(capture):
    text = render(capture, 200)
    section = slowest_section(text)
    title = section.splitlines()[0]
    header = " ".join(line for line in section.splitlines() if line.startswith("┃"))
    assert f"file: {capture['name']}" in title and "file" not in header.split()
    rows = [line for line in section.splitlines() if line.startswith("│")]
    assert rows and not any(capture["name"] in row for row in rows)
