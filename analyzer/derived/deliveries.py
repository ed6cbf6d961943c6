"""The ``deliveries`` table: end-to-end latency, from a producer's Produce to each consumer's Fetch of it.

A Produce response gives each partition's batch its ``base_offset``; a Fetch response returns a partition's
records from ``records_first_offset`` to ``records_last_offset``. A produced batch reaches a consumer in the
first Fetch response of that consumer that covers its base offset and comes after the Produce: one row per
produced batch and consumer, with the time in between. Produce and Fetch are matched where the same broker
(address and port) serves the partition, its leader: offsets of a partition are that cluster's, and two
clusters (or two copies of one capture on other addresses) never mix; a consumer fetching from a follower
replica (KIP-392) is not matched. A consumer is a client id at a client address (a
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

PRODUCE, FETCH = 0, 1
MAX_SPAN = 1 << 22  # offsets one Fetch response's records may span and still be matched
MAX_PAIRS = 1 << 22  # (Fetch, produced batch) candidates held at once per partition and consumer
BUCKET = 1 << 16  # offsets per bucket of the Spark job's range join (a span covers at most 65 buckets)

PRODUCE_COLUMNS = ("capture_file", "connection_id", "correlation_id", "client_id", "topic", "partition", "base_offset",
                   "records", "request_last_ts", "response_last_ts")
FETCH_COLUMNS = ("capture_file", "connection_id", "correlation_id", "client_id", "topic", "partition",
                 "records_first_offset", "records_last_offset", "response_last_ts", "aborted_transactions")


def _select(parts: pa.Table | pa.RecordBatch, columns: tuple[str, ...], keep) -> pa.Table:
    """``columns`` of the rows ``keep(table)`` marks (selected first: filtering the wide rows costs more)."""
    present = [c for c in columns if c in parts.schema.names]
    t = pa.Table.from_batches([parts]) if isinstance(parts, pa.RecordBatch) else parts
    t = t.select(present)
    for name in columns:
        if name not in present:
            t = t.append_column(PARTITIONS_SCHEMA.field(name), pa.nulls(t.num_rows, PARTITIONS_SCHEMA.field(name).type))
    return t.select(list(columns)).filter(pc.fill_null(keep(t), False))


def produced_rows(parts: pa.Table | pa.RecordBatch) -> pa.Table:
    """Partition rows of Produce exchanges the broker appended (a base offset, no error, some records)."""
    def keep(t: pa.Table):
        return pc.and_(pc.and_(pc.equal(t["api_key"], PRODUCE), pc.greater_equal(t["base_offset"], 0)),
                       pc.and_(pc.greater(t["records"], 0), pc.is_valid(t["request_last_ts"])))
    return _select(parts, ("api_key", *PRODUCE_COLUMNS), keep).drop_columns(["api_key"])


def fetched_rows(parts: pa.Table | pa.RecordBatch) -> pa.Table:
    """Partition rows of consumers' Fetch responses that returned records (their first and last offsets known, at
    most MAX_SPAN apart: a wider range comes from a damaged batch header and would match everything); a follower's
    fetches replicate, they deliver to no one."""
    def keep(t: pa.Table):
        span = pc.subtract(t["records_last_offset"], t["records_first_offset"])
        consumed = pc.invert(pc.fill_null(pc.equal(t["fetch_kind"], "follower"), False))  # replication is not
        return pc.and_(pc.and_(pc.and_(pc.equal(t["api_key"], FETCH), consumed),
                               pc.greater_equal(t["records_first_offset"], 0)),
                       pc.and_(pc.is_valid(t["response_last_ts"]),
                               pc.and_(pc.greater_equal(span, 0), pc.less(span, MAX_SPAN))))
    return _select(parts, ("api_key", "fetch_kind", *FETCH_COLUMNS), keep).drop_columns(["api_key", "fetch_kind"])


def _ns(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)


def _codes(*arrays: pa.ChunkedArray) -> list[np.ndarray]:
    """Integer codes of the values of each array, shared across them (null is a value of its own)."""
    joined = pa.chunked_array([c for a in arrays for c in a.chunks], arrays[0].type)
    codes = pc.fill_null(pc.dictionary_encode(joined).combine_chunks().indices, -1)
    codes = codes.to_numpy(zero_copy_only=False).astype(np.int64) + 1  # null: 0
    out, at = [], 0
    for a in arrays:
        out.append(codes[at:at + len(a)])
        at += len(a)
    return out


def _pairs(keys: list[np.ndarray]) -> np.ndarray:
    """One int64 code per row for a tuple of non-negative code columns (exact: each step re-ranked, so the
    products stay far below int64)."""
    out = keys[0]
    for k in keys[1:]:
        _, out = np.unique(out * (int(k.max()) + 1) + k, return_inverse=True)
    return out.reshape(-1).astype(np.int64)


def deliveries_table(produced: pa.Table, fetched: pa.Table, connections: pa.Table, consumers: pa.Table,
                     aborted: pa.Table | None = None) -> pa.Table:
    """One row per produced batch and consumer that fetched it. ``connections`` (capture_file, connection_id,
    client_ip) gives a Fetch's client address, ``consumers`` (client_ip, client_id, group_id) the group of a
    consumer (null group: none or several).

    ``aborted`` (capture_file, connection_id, correlation_id) names the Produce exchanges of aborted
    transactions (analyzer.derived.transactions.aborted_keys). Their batches reach a read_committed consumer
    in the bytes of its Fetch responses, which list the aborted transactions for it to drop them: such a
    response (its partition's ``aborted_transactions`` not null; Kafka lists none, a null, to read_uncommitted
    consumers) delivers none of them. A read_uncommitted consumer is delivered them."""
    if not produced.num_rows or not fetched.num_rows:
        return DELIVERIES_SCHEMA.empty_table()

    produced = produced.combine_chunks()
    fetched = fetched.combine_chunks()
    fetched = _with(fetched, ["capture_file", "connection_id"], connections, ["client_ip", "broker_ip", "broker_port"])
    fetched = _with(fetched, ["client_ip", "client_id"], consumers, ["group_id"])
    produced = _with(produced.combine_chunks(), ["capture_file", "connection_id"], connections,
                     ["broker_ip", "broker_port"])
    n_p = produced.num_rows
    topic = np.concatenate(_codes(produced["topic"], fetched["topic"]))
    part = np.concatenate([produced["partition"].to_numpy(zero_copy_only=False),
                           fetched["partition"].to_numpy(zero_copy_only=False)]).astype(np.int64) + (1 << 31)
    broker = np.concatenate(_codes(produced["broker_ip"], fetched["broker_ip"]))
    port = np.concatenate([pc.fill_null(t["broker_port"], -1).to_numpy(zero_copy_only=False)
                           for t in (produced, fetched)]).astype(np.int64) + 1
    tp = _pairs([topic, part, broker, port])  # a partition as one broker (its leader) serves it
    tp_p, tp_f = tp[:n_p], tp[n_p:]
    ip_f, client_f = _codes(fetched["client_ip"]), _codes(fetched["client_id"])
    group_f = _pairs([tp_f, ip_f[0], client_f[0]])  # (partition at its broker, consumer) of each Fetch row
    base = produced["base_offset"].to_numpy(zero_copy_only=False)
    p_ts = _ns(produced["request_last_ts"])
    first = fetched["records_first_offset"].to_numpy(zero_copy_only=False)
    last = fetched["records_last_offset"].to_numpy(zero_copy_only=False)
    f_ts = _ns(fetched["response_last_ts"])
    f_file = np.unique(np.asarray(fetched["capture_file"].to_pylist(), dtype=object).astype(str),
                       return_inverse=True)[1].reshape(-1)  # ranks in text order, as Spark sorts
    f_conn = fetched["connection_id"].to_numpy(zero_copy_only=False)
    f_corr = fetched["correlation_id"].to_numpy(zero_copy_only=False)
    p_aborted = None
    if aborted is not None and aborted.num_rows:
        keys = ["capture_file", "connection_id", "correlation_id"]
        flagged = aborted.group_by(keys).aggregate([])
        flagged = flagged.append_column("aborted", pa.array(np.ones(flagged.num_rows, dtype=bool)))
        p_aborted = pc.fill_null(_with(produced.select(keys), keys, flagged, ["aborted"])["aborted"],
                                 False).to_numpy(zero_copy_only=False)
    f_committed = pc.is_valid(fetched["aborted_transactions"]).to_numpy(zero_copy_only=False)

    def earliest(p_idx: np.ndarray, f_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per produced batch, its earliest covering fetch (ties: by capture file, connection, correlation)."""
        order = np.lexsort((f_corr[f_idx], f_conn[f_idx], f_file[f_idx], f_ts[f_idx], p_idx))
        p_idx, f_idx = p_idx[order], f_idx[order]
        keep = np.concatenate(([True], p_idx[1:] != p_idx[:-1]))
        return p_idx[keep], f_idx[keep]

    p_order = np.lexsort((base, tp_p))  # produced rows by partition and broker, then base offset
    tp_sorted = tp_p[p_order]
    f_order = np.argsort(group_f, kind="stable")
    bounds = np.flatnonzero(np.diff(group_f[f_order])) + 1
    pairs_p: list[np.ndarray] = []
    pairs_f: list[np.ndarray] = []
    for fs in np.split(f_order, bounds):
        k = tp_f[fs[0]]
        lo_p, hi_p = np.searchsorted(tp_sorted, k, "left"), np.searchsorted(tp_sorted, k, "right")
        if lo_p == hi_p:
            continue
        ps = p_order[lo_p:hi_p]
        b = base[ps]
        lo = np.searchsorted(b, first[fs], "left")
        n = np.maximum(np.searchsorted(b, last[fs], "right") - lo, 0)
        found_p: list[np.ndarray] = []
        found_f: list[np.ndarray] = []
        ends = np.cumsum(n)
        start = 0
        while start < len(fs):  # slices of at most MAX_PAIRS (fetch, produced batch) pairs: memory stays bounded
            stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + MAX_PAIRS, "right")), start + 1)
            cn = n[start:stop]
            total = int(cn.sum())
            if total:
                f_rep = np.repeat(fs[start:stop], cn)
                offsets = np.repeat(lo[start:stop] - np.concatenate(([0], np.cumsum(cn)[:-1])), cn)
                p_idx = ps[offsets + np.arange(total)]
                later = f_ts[f_rep] >= p_ts[p_idx]
                if p_aborted is not None:  # dropped by a read_committed consumer
                    later &= ~(p_aborted[p_idx] & f_committed[f_rep])
                if later.any():
                    p_idx, f_rep = earliest(p_idx[later], f_rep[later])
                    found_p.append(p_idx)
                    found_f.append(f_rep)
            start = stop
        if found_p:
            p_idx, f_rep = earliest(np.concatenate(found_p), np.concatenate(found_f))
            pairs_p.append(p_idx)
            pairs_f.append(f_rep)
    if not pairs_p:
        return DELIVERIES_SCHEMA.empty_table()
    pp, ff = np.concatenate(pairs_p), np.concatenate(pairs_f)
    order = np.lexsort((f_corr[ff], f_conn[ff], f_file[ff], f_ts[ff], pp, p_ts[pp]))  # by production time
    p = produced.take(pa.array(pp[order]))
    f = fetched.take(pa.array(ff[order]))
    columns = {
        "topic": p["topic"], "partition": p["partition"], "base_offset": p["base_offset"], "records": p["records"],
        "producer_client_id": p["client_id"], "produce_capture_file": p["capture_file"],
        "produce_connection_id": p["connection_id"], "produce_correlation_id": p["correlation_id"],
        "produced_ts": p["request_last_ts"], "acked_ts": p["response_last_ts"],
        "consumer_client_id": f["client_id"], "consumer_ip": f["client_ip"], "group_id": f["group_id"],
        "fetch_capture_file": f["capture_file"], "fetch_connection_id": f["connection_id"],
        "fetch_correlation_id": f["correlation_id"], "fetched_ts": f["response_last_ts"],
        "delivery_ms": _elapsed_ms(p["request_last_ts"], f["response_last_ts"]),
        "after_ack_ms": _elapsed_ms(p["response_last_ts"], f["response_last_ts"]),
    }
    return pa.table({name: columns[name] for name in DELIVERIES_SCHEMA.names}).cast(DELIVERIES_SCHEMA)


def _with(t: pa.Table, keys: list[str], right: pa.Table, values: list[str]) -> pa.Table:
    """``t`` with ``values`` of ``right`` (unique on ``keys``) looked up by ``keys``, in ``t``'s row order
    (only the keys and the values go through the join)."""
    left = t.select(keys).append_column("_row", pa.array(np.arange(t.num_rows)))
    found = left.join(right.select([*keys, *values]), keys, join_type="left outer")
    rows = found["_row"].to_numpy()
    place = np.empty(len(rows), dtype=np.int64)
    place[rows] = np.arange(len(rows))
    found = found.take(pa.array(place))
    for name in values:
        t = t.append_column(right.schema.field(name), found[name])
    return t


def _elapsed_ms(start: pa.ChunkedArray, end: pa.ChunkedArray) -> pa.ChunkedArray:
    """end - start in ms: the difference in whole microseconds, then divided (as the Spark job does)."""
    return pc.divide(pc.cast(pc.subtract(pc.cast(end, pa.int64()), pc.cast(start, pa.int64())), pa.float64()), 1000.0)
