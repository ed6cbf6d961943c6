"""Failures no exchange row carries: TLS alerts, failed SASL authentication, TLS connections not decrypted.

They sit in the connections table (tls_alerts, sasl_outcome, tls_note); the summary shows them beside the
Kafka errors, because a client that cannot connect at all is the failure an operator looks for first.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from analyzer.cli.terminal import address, inert_text

EXAMPLES = 3  # connections named per row
_ALERT = re.compile(r"(warning|fatal|level \d+) (\S+) from the (client|broker)")
_ORDERLY = ("warning", "close_notify")


def problem_rows(conns: pa.Table) -> list[dict]:
    """One row per kind of problem (an alert by level, name and sender; a SASL failure by mechanism, outcome
    and principal; a decryption failure by reason): how many connections, and the first few of them."""
    if conns.num_rows == 0:
        return []
    groups: dict[tuple[str, str], list[str]] = {}
    names = [n for n in ("tls_alerts", "sasl_outcome", "sasl_mechanism", "sasl_principal", "tls", "tls_decrypted",
                         "tls_note") if n in conns.column_names]
    wanted = _problem_mask(conns)
    picked = conns.filter(wanted).select(["connection_id", "client_ip", "client_port", "broker_ip", "broker_port",
                                          *names])
    for row in picked.to_pylist():
        where = f"#{row['connection_id']} {address(row['client_ip'], row['client_port'])} -> " \
                f"{address(row['broker_ip'], row['broker_port'])}"
        for level, name, sender in _ALERT.findall(row.get("tls_alerts") or ""):
            if (level, name) != _ORDERLY:
                groups.setdefault(("TLS alert", f"{level} {name} from the {sender}"), []).append(where)
        outcome = row.get("sasl_outcome")
        if outcome and outcome.startswith("failed"):
            who = f" as {row['sasl_principal']}" if row.get("sasl_principal") else ""
            groups.setdefault(("SASL", f"{row.get('sasl_mechanism') or 'authentication'} {outcome}{who}"),
                              []).append(where)
        if row.get("tls") and not row.get("tls_decrypted"):
            groups.setdefault(("TLS not decrypted", row.get("tls_note") or "unknown"), []).append(where)
    return [{"kind": kind, "what": what, "connections": len(wheres), "examples": wheres[:EXAMPLES]}
            for (kind, what), wheres in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))]


def _problem_mask(conns: pa.Table) -> pa.ChunkedArray:
    mask = pc.is_valid(conns.column("tls_alerts")) if "tls_alerts" in conns.column_names else None
    extra = []
    if "sasl_outcome" in conns.column_names:
        extra.append(pc.fill_null(pc.starts_with(conns.column("sasl_outcome"), "failed"), False))
    if "tls_decrypted" in conns.column_names:
        extra.append(pc.and_(pc.fill_null(conns.column("tls"), False),
                             pc.invert(pc.fill_null(conns.column("tls_decrypted"), False))))
    for m in extra:
        mask = m if mask is None else pc.or_(mask, m)
    return mask if mask is not None else pa.chunked_array([pa.array([False] * conns.num_rows)])


def print_problems(console: Console, conns: pa.Table) -> None:
    rows = problem_rows(conns)
    if not rows:
        return
    t = Table(title="Connection failures (TLS alerts, SASL, TLS not decrypted)", title_justify="left")
    for col, just in (("kind", "left"), ("what", "left"), ("connections", "right"), ("first connections", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for r in rows:
        t.add_row(r["kind"], inert_text(r["what"]), f"{r['connections']:,}", inert_text(", ".join(r["examples"])))
    console.print(t)
