"""The cluster as the capture saw it, for the summary: brokers, the controller id, partitions whose leader or
ISR changed, and partitions short of in-sync or with offline replicas (from the ``cluster`` table).

An operator asked what happened during an incident wants the leadership moves and the shrunken ISRs with
their times, not every Metadata answer; the table already holds one row per state, so this only puts each
broker's and partition's rows in time order (a file analysed by several processes, or a rotated set, can
repeat a state) and reports the transitions.
"""

from __future__ import annotations

import datetime as dt
from itertools import pairwise

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from analyzer.cli.terminal import address, inert_text

SHOWN = 50  # rows per terminal table (the JSON document has them all)
_PARTITION_STATE = ("leader_id", "leader_epoch", "replicas", "isr", "offline_replicas", "error_code")


def _same_partition(a: dict, b: dict) -> bool:
    """Same reported state: equal where both know a field, the ISR and offline replicas as sets."""
    for name in _PARTITION_STATE:
        x, y = a[name], b[name]
        if x is None or y is None:
            continue
        if name in ("isr", "offline_replicas"):
            x, y = sorted(x), sorted(y)
        if x != y:
            return False
    return True


def _timelines(rows: list[dict], key, same) -> dict[tuple, list[dict]]:
    """Rows by ``key``, in time order, a row joined into the one before when ``same`` (rows of the same
    state repeated by several processes or files of a rotated set)."""
    by: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["first_seen"], r["last_seen"])):
        line = by.setdefault(key(r), [])
        if line and same(line[-1], r):
            prev = line[-1]
            prev["last_seen"] = max(prev["last_seen"], r["last_seen"])
            prev["responses"] = (prev["responses"] or 0) + (r["responses"] or 0)
        else:
            line.append(dict(r))
    return by


def _partition_key(r: dict) -> tuple:
    return (r["cluster_id"] or "", r["topic"] or "", r["partition"] if r["partition"] is not None else -1)


def _nodes(values: list[int] | None) -> str:
    return "-" if values is None else ",".join(map(str, values)) or "none"


def cluster_rows(table: pa.Table | None) -> dict:
    """The JSON summary's ``cluster`` section: brokers (each with the times it went unlisted), the controller
    ids reported, each partition's last state, its leader and ISR changes, and the times it was short of
    in-sync replicas or had offline ones."""
    empty: dict = {"brokers": [], "controllers": [], "partitions": [], "changes": [], "under_replicated": []}
    if table is None or table.num_rows == 0:
        return empty
    rows = table.to_pylist()
    brokers = _timelines([r for r in rows if r["kind"] == "broker"],
                         lambda r: (r["cluster_id"] or "", r["node_id"]),
                         lambda a, b: (a["host"], a["port"], a["rack"]) == (b["host"], b["port"], b["rack"])
                         and b["first_seen"] <= a["last_seen"])
    out = dict(empty)
    for (cluster, node), line in sorted(brokers.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        last = line[-1]
        out["brokers"].append({
            "cluster_id": cluster or None, "node_id": node, "host": last["host"], "port": last["port"],
            "rack": last["rack"], "first_seen": line[0]["first_seen"], "last_seen": last["last_seen"],
            "unlisted": [{"after": a["last_seen"], "until": b["first_seen"]} for a, b in pairwise(line)
                         if b["first_seen"] > a["last_seen"]],
        })
    controllers = _timelines([r for r in rows if r["kind"] == "controller"], lambda r: (r["cluster_id"] or "",),
                             lambda a, b: a["node_id"] == b["node_id"])
    for (cluster,), line in sorted(controllers.items()):
        out["controllers"].append({"cluster_id": cluster or None,
                                   "node_ids": sorted({r["node_id"] for r in line if r["node_id"] is not None}),
                                   "changes": len(line) - 1, "last": line[-1]["node_id"]})
    partitions = _timelines([r for r in rows if r["kind"] == "partition"], _partition_key, _same_partition)
    for (cluster, topic, partition), line in sorted(partitions.items()):
        last = line[-1]
        out["partitions"].append({
            "cluster_id": cluster or None, "topic": topic, "partition": partition,
            "leader_id": last["leader_id"], "leader_epoch": last["leader_epoch"], "replicas": last["replicas"],
            "isr": last["isr"], "offline_replicas": last["offline_replicas"], "error_name": last["error_name"],
            "first_seen": line[0]["first_seen"], "last_seen": last["last_seen"], "states": len(line),
        })
        for before, after in pairwise(line):
            out["changes"].append({
                "cluster_id": cluster or None, "topic": topic, "partition": partition, "at": after["first_seen"],
                "last_seen_before": before["last_seen"], "leader_before": before["leader_id"],
                "leader": after["leader_id"], "leader_epoch": after["leader_epoch"], "isr_before": before["isr"],
                "isr": after["isr"], "offline_replicas": after["offline_replicas"], "error_name": after["error_name"],
                "reported_by": address(after["reported_by_ip"], after["reported_by_port"], missing=None),
            })
        for r in line:
            isr, replicas, offline = r["isr"] or [], r["replicas"] or [], r["offline_replicas"] or []
            if len(set(isr)) < len(set(replicas)) or offline:
                out["under_replicated"].append({
                    "cluster_id": cluster or None, "topic": topic, "partition": partition, "from": r["first_seen"],
                    "until": r["last_seen"], "leader_id": r["leader_id"], "replicas": replicas, "isr": isr,
                    "offline_replicas": r["offline_replicas"],
                })
    out["changes"].sort(key=lambda c: (c["at"], c["topic"], c["partition"]))
    out["under_replicated"].sort(key=lambda u: (u["from"], u["topic"], u["partition"]))
    return out


def _time(value: dt.datetime | None) -> str:
    return "-" if value is None else value.strftime("%H:%M:%S.%f")[:-3]


def _print_brokers(console: Console, doc: dict) -> None:
    t = Table(title="Brokers (as Metadata responses listed them)", title_justify="left")
    for col, just in (("cluster", "left"), ("node", "right"), ("address", "left"), ("rack", "left"),
                      ("first seen", "left"), ("last seen", "left"), ("not listed", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for b in doc["brokers"]:
        gaps = ", ".join(f"{_time(g['after'])}..{_time(g['until'])}" for g in b["unlisted"]) or "-"
        t.add_row(inert_text(b["cluster_id"] or "-"), str(b["node_id"]),
                  inert_text(address(b["host"], b["port"])), inert_text(b["rack"] or "-"),
                  _time(b["first_seen"]), _time(b["last_seen"]), gaps)
    console.print(t)
    for c in doc["controllers"]:
        ids = ", ".join(map(str, c["node_ids"]))
        moved = (f"; it changed {c['changes']:,} times (KRaft brokers name a random live broker there, not the "
                 "active controller)") if c["changes"] else ""
        console.print(inert_text(f"Controller id reported{' for ' + c['cluster_id'] if c['cluster_id'] else ''}: "
                                 f"{ids}{moved}"))


def _print_changes(console: Console, doc: dict) -> None:
    changes = doc["changes"]
    if not changes:
        return
    t = Table(title=f"Partition leader and ISR changes ({len(changes):,})", title_justify="left")
    for col, just in (("at", "left"), ("topic", "left"), ("partition", "right"), ("leader", "left"),
                      ("epoch", "right"), ("ISR", "left"), ("offline", "left"), ("error", "left"),
                      ("reported by", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for c in changes[:SHOWN]:
        leader = str(c["leader"]) if c["leader"] == c["leader_before"] else f"{c['leader_before']} -> {c['leader']}"
        isr = _nodes(c["isr"]) if sorted(c["isr"] or []) == sorted(c["isr_before"] or []) \
            else f"{_nodes(c['isr_before'])} -> {_nodes(c['isr'])}"
        t.add_row(_time(c["at"]), inert_text(c["topic"]), str(c["partition"]), leader,
                  "-" if c["leader_epoch"] is None else str(c["leader_epoch"]), isr, _nodes(c["offline_replicas"]),
                  inert_text(c["error_name"] or "-"), inert_text(c["reported_by"] or "-"))
    console.print(t)
    if len(changes) > SHOWN:
        console.print(f"... and {len(changes) - SHOWN:,} more changes (kafkacap summary --json has them all)")


def _print_short(console: Console, doc: dict) -> None:
    short = doc["under_replicated"]
    if not short:
        return
    t = Table(title=f"Partitions short of in-sync replicas or with offline replicas ({len(short):,})",
              title_justify="left")
    for col, just in (("from", "left"), ("until", "left"), ("topic", "left"), ("partition", "right"),
                      ("leader", "right"), ("replicas", "left"), ("ISR", "left"), ("offline", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for u in short[:SHOWN]:
        t.add_row(_time(u["from"]), _time(u["until"]), inert_text(u["topic"]), str(u["partition"]),
                  str(u["leader_id"]), _nodes(u["replicas"]), _nodes(u["isr"]), _nodes(u["offline_replicas"]))
    console.print(t)
    if len(short) > SHOWN:
        console.print(f"... and {len(short) - SHOWN:,} more (kafkacap summary --json has them all)")


def print_cluster(console: Console, cluster_table: pa.Table | None) -> None:
    """The summary's cluster section; nothing when no Metadata or DescribeTopicPartitions response was read."""
    doc = cluster_rows(cluster_table)
    if not (doc["brokers"] or doc["partitions"]):
        return
    if doc["brokers"]:
        _print_brokers(console, doc)
    _print_changes(console, doc)
    _print_short(console, doc)
