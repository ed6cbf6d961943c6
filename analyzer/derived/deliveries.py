"""The ``deliveries`` table: end-to-end latency, from a producer's Produce to each consumer's Fetch of it.

A Produce response gives each partition's batch its ``base_offset``; a Fetch response returns a partition's
records from ``records_first_offset`` to ``records_last_offset``. A produced batch reaches a consumer in the
first Fetch response of that consumer that covers its base offset and comes after the Produce: one row per
produced batch and consumer, with the time in between. A consumer is a client id at a client address (a
group's members often share a client id, never a partition at the same time; several consumers on one host
with one client id are one consumer here). Its group is the one its group exchanges name, when only one.

Offsets are a cluster's, so matching runs over all the captures of a run: a producer captured on one host and
its consumers on another are matched, on the capture clocks as they are.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import DELIVERIES_SCHEMA, PARTITIONS_SCHEMA

MAX_SPAN = 1 << 22  # offsets one Fetch response's records may span and still be matched
BUCKET = 1 << 16  # offsets per bucket of the Spark job's range join (a span covers at most 65 buckets)

PRODUCE_COLUMNS = ("capture_file", "connection_id", "correlation_id", "client_id", "topic", "partition", "base_offset",
                   "records", "request_last_ts", "response_last_ts")
FETCH_COLUMNS = ("capture_file", "connection_id", "correlation_id", "client_id", "topic", "partition",
                 "records_first_offset", "records_last_offset", "response_last_ts")


def _select(parts: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    for name in columns:
        if name not in parts.column_names:
            parts = parts.append_column(PARTITIONS_SCHEMA.field(name),
                                        pa.nulls(parts.num_rows, PARTITIONS_SCHEMA.field(name).type))
    return parts.select(list(columns))


def produced_rows(parts: pa.Table) -> pa.Table:
    """Partition rows of Produce exchanges the broker appended (a base offset, no error, some records)."""
    t = _select(parts.filter(pc.equal(parts["api_name"], "Produce")), PRODUCE_COLUMNS)
    keep = pc.and_(pc.and_(pc.is_valid(t["base_offset"]), pc.greater_equal(t["base_offset"], 0)),
                   pc.and_(pc.greater(pc.fill_null(t["records"], 0), 0), pc.is_valid(t["request_last_ts"])))
    return t.filter(keep)


def fetched_rows(parts: pa.Table) -> pa.Table:
    """Partition rows of Fetch responses that returned records (their first and last offsets known, at most
    MAX_SPAN apart: a wider range comes from a damaged batch header and would match everything)."""
    t = _select(parts.filter(pc.equal(parts["api_name"], "Fetch")), FETCH_COLUMNS)
    span = pc.subtract(t["records_last_offset"], t["records_first_offset"])
    keep = pc.and_(pc.and_(pc.greater_equal(t["records_first_offset"], 0), pc.is_valid(t["response_last_ts"])),
                   pc.and_(pc.greater_equal(span, 0), pc.less(span, MAX_SPAN)))
    return t.filter(pc.fill_null(keep, False))


def _ns(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)


def deliveries_table(produced: pa.Table, fetched: pa.Table, client_ip: dict[tuple[str, int], str],
                     group_of: dict[tuple[str | None, str | None], str | None]) -> pa.Table:
    """One row per produced batch and consumer that fetched it. ``client_ip`` maps (capture file, connection
    id) to the client's address, ``group_of`` (client address, client id) to the consumer's group."""
    if not produced.num_rows or not fetched.num_rows:
        return DELIVERIES_SCHEMA.empty_table()
    produced = produced.combine_chunks()
    fetched = fetched.combine_chunks()
    f_ip = [client_ip.get(k) for k in zip(fetched["capture_file"].to_pylist(), fetched["connection_id"].to_pylist(),
                                          strict=True)]
    f_client = fetched["client_id"].to_pylist()
    consumer = [f"{ip}\0{cid}" for ip, cid in zip(f_ip, f_client, strict=True)]
    tp_p = [f"{t}\0{p}" for t, p in zip(produced["topic"].to_pylist(), produced["partition"].to_pylist(), strict=True)]
    tp_f = [f"{t}\0{p}" for t, p in zip(fetched["topic"].to_pylist(), fetched["partition"].to_pylist(), strict=True)]
    base = produced["base_offset"].to_numpy(zero_copy_only=False)
    p_ts = _ns(produced["request_last_ts"])
    first = fetched["records_first_offset"].to_numpy(zero_copy_only=False)
    last = fetched["records_last_offset"].to_numpy(zero_copy_only=False)
    f_ts = _ns(fetched["response_last_ts"])
    f_conn = fetched["connection_id"].to_numpy(zero_copy_only=False)
    f_corr = fetched["correlation_id"].to_numpy(zero_copy_only=False)
    by_tp_p: dict[str, list[int]] = {}
    for i, k in enumerate(tp_p):
        by_tp_p.setdefault(k, []).append(i)
    by_group: dict[tuple[str, str], list[int]] = {}
    for j, (k, c) in enumerate(zip(tp_f, consumer, strict=True)):
        if k in by_tp_p:
            by_group.setdefault((k, c), []).append(j)
    pairs_p: list[np.ndarray] = []
    pairs_f: list[np.ndarray] = []
    for (k, _), fs in by_group.items():
        ps = np.asarray(by_tp_p[k])
        order = np.argsort(base[ps], kind="stable")
        ps = ps[order]
        b = base[ps]
        fs = np.asarray(fs)
        lo = np.searchsorted(b, first[fs], "left")
        hi = np.searchsorted(b, last[fs], "right")
        n = np.maximum(hi - lo, 0)
        if not n.sum():
            continue
        f_rep = np.repeat(fs, n)
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(n)[:-1])), n)
        p_idx = ps[starts + np.arange(n.sum())]
        later = f_ts[f_rep] >= p_ts[p_idx]
        p_idx, f_rep = p_idx[later], f_rep[later]
        if not len(p_idx):
            continue
        # per produced batch, its earliest covering fetch first (ties: by connection, then correlation id)
        order = np.lexsort((f_corr[f_rep], f_conn[f_rep], f_ts[f_rep], p_idx))
        p_idx, f_rep = p_idx[order], f_rep[order]
        keep = np.concatenate(([True], p_idx[1:] != p_idx[:-1]))
        pairs_p.append(p_idx[keep])
        pairs_f.append(f_rep[keep])
    if not pairs_p:
        return DELIVERIES_SCHEMA.empty_table()
    pi = pa.array(np.concatenate(pairs_p))
    fi = pa.array(np.concatenate(pairs_f))
    p = produced.take(pi)
    f = fetched.take(fi)
    ips = [f_ip[j] for j in fi.to_pylist()]
    clients = f["client_id"].to_pylist()
    groups = [group_of.get((ip, c)) for ip, c in zip(ips, clients, strict=True)]
    delivery = pc.divide(pc.cast(pc.subtract(pc.cast(f["response_last_ts"], pa.int64()),
                                             pc.cast(p["request_last_ts"], pa.int64())), pa.float64()), 1000.0)
    after_ack = pc.divide(pc.cast(pc.subtract(pc.cast(f["response_last_ts"], pa.int64()),
                                              pc.cast(p["response_last_ts"], pa.int64())), pa.float64()), 1000.0)
    columns = {
        "topic": p["topic"], "partition": p["partition"], "base_offset": p["base_offset"], "records": p["records"],
        "producer_client_id": p["client_id"], "produce_capture_file": p["capture_file"],
        "produce_connection_id": p["connection_id"], "produce_correlation_id": p["correlation_id"],
        "produced_ts": p["request_last_ts"], "acked_ts": p["response_last_ts"],
        "consumer_client_id": f["client_id"], "consumer_ip": pa.array(ips, pa.string()),
        "group_id": pa.array(groups, pa.string()), "fetch_capture_file": f["capture_file"],
        "fetch_connection_id": f["connection_id"], "fetch_correlation_id": f["correlation_id"],
        "fetched_ts": f["response_last_ts"], "delivery_ms": delivery, "after_ack_ms": after_ack,
    }
    t = pa.table({name: columns[name] for name in DELIVERIES_SCHEMA.names}).cast(DELIVERIES_SCHEMA)
    return t.sort_by([("produced_ts", "ascending"), ("topic", "ascending"), ("partition", "ascending"),
                      ("consumer_client_id", "ascending")])
