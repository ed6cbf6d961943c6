"""The summary's failure triage (analyzer.derived.triage): unexpected errors per client, retry storms and
reconnect loops, each shown only when there is one, so a healthy capture's summary stays short."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from rich.console import Console

from analyzer.cli.terminal import Col, inert_text, print_table
from analyzer.derived.triage import reconnect_loops, retry_storms, unexpected_errors

TOP = 15


def _json(rows: list[dict]) -> list[dict]:
    return [{k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in r.items()} for r in rows]


def triage_rows(exchanges: pa.Table, connections: pa.Table) -> dict:
    """{"unexpected_errors": [...], "retry_storms": [...], "reconnect_loops": [...]}: the rows of the three
    views (their schemas' columns, times in ISO 8601), JSON-ready."""
    return {"unexpected_errors": _json(unexpected_errors(exchanges).to_pylist()),
            "retry_storms": _json(retry_storms(exchanges).to_pylist()),
            "reconnect_loops": _json(reconnect_loops(connections, exchanges).to_pylist())}


def _when(ts: dt.datetime | None) -> str:
    return "-" if ts is None else ts.astimezone(dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def print_triage(console: Console, exchanges: pa.Table, connections: pa.Table, top: int = TOP) -> None:
    """The three tables, each only when it has rows."""
    errors = unexpected_errors(exchanges).to_pylist()
    if errors:
        print_table(console, "Unexpected errors (protocol steps left out) per client", (
            Col("client_id"), Col("address", priority=2), Col("api"), Col("error"), Col("count", "right"),
            Col("first (UTC)", priority=1), Col("last (UTC)", priority=1), Col("packet", priority=3)), [
            (inert_text(r["client_id"], missing="(null)"), inert_text(r["client_ip"]), inert_text(r["api_name"]),
             inert_text(r["error_name"]), f"{r['count']:,}", _when(r["first_ts"]), _when(r["last_ts"]),
             str(r["frame"])) for r in errors[:top]])
    storms = retry_storms(exchanges).to_pylist()
    if storms:
        print_table(console, "Retry storms (the same request failing again and again)", (
            Col("client_id"), Col("address", priority=2), Col("api"), Col("topics", priority=1), Col("error"),
            Col("failures", "right"), Col("per s", "right"), Col("connections", "right", priority=2),
            Col("first (UTC)", priority=1)), [
            (inert_text(r["client_id"], missing="(null)"), inert_text(r["client_ip"]), inert_text(r["api_name"]),
             inert_text(r["topics"], missing=""), inert_text(r["error_name"]), f"{r['failures']:,}",
             "-" if r["per_second"] is None else f"{r['per_second']:.2f}", f"{r['connections']:,}",
             _when(r["first_ts"])) for r in storms[:top]])
    loops = reconnect_loops(connections, exchanges).to_pylist()
    if loops:
        print_table(console, "Reconnect loops (short connections one after another)", (
            Col("client_id"), Col("client"), Col("broker"), Col("connections", "right"), Col("per min", "right"),
            Col("resets", "right", priority=1), Col("no exchange", "right", priority=1),
            Col("after a failure", "right", priority=1), Col("errors", priority=2)), [
            (inert_text(r["client_id"], missing="(null)"), inert_text(r["client_ip"]),
             inert_text(f"{r['broker_ip']}:{r['broker_port']}"), f"{r['connections']:,}",
             "-" if r["per_minute"] is None else f"{r['per_minute']:.1f}", f"{r['resets']:,}",
             f"{r['without_exchange']:,}", f"{r['failed_last']:,}", inert_text(r["last_errors"], missing=""))
            for r in loops[:top]])
