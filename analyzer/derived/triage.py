"""Failure triage: what an operator looks at first when something is wrong, with the protocol's routine left out.

Three views of the exchanges and connections tables:

- unexpected errors: exchanges with status error whose error is not a step of the protocol (error_expected
  false: MEMBER_ID_REQUIRED answering a first JoinGroup and the like are left out), per client, API and error;
- retry storms: the same client (client_id and address) sending the same request (API and topics) and
  failing with the same error again and again, each failure within ``max_gap_s`` of the one before, at least
  ``min_failures`` times: a client stuck retrying, which no single error row shows;
- reconnect loops: the same client (address and client_id) opening short connections to the same broker one
  after another (each opened once the one before had closed, within ``max_gap_s``), at least
  ``min_connections`` of them: refused connections, failed authentication, a broker that closes at once. The
  concurrent connections a client opens to one broker (bootstrap, coordinator, leader) are not a loop.

Each is a sort and a cumulative sum over Arrow columns: an episode starts where the key changes or the gap
is too long, so no row is gone over in Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import TS

MIN_FAILURES = 3
STORM_GAP_S = 10.0
MIN_CONNECTIONS = 3
SHORT_S = 5.0
LOOP_GAP_S = 30.0
CLOSED = ("fin", "rst")  # endings a client's own reconnect follows; capture_end, evicted, idle tell nothing

EXCHANGE_COLUMNS = ["capture_file", "connection_id", "client_ip", "client_id", "broker_ip", "broker_port",
                    "api_name", "request_first_ts", "response_last_ts", "status", "error_name", "error_expected",
                    "topics", "request_frame", "response_frame"]
CONNECTION_COLUMNS = ["capture_file", "connection_id", "client_ip", "broker_ip", "broker_port", "first_ts",
                      "last_ts", "ended", "sasl_outcome"]


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"description": doc})


ERRORS_SCHEMA = pa.schema([
    _f("client_id", pa.string(), "client_id of the requests."),
    _f("client_ip", pa.string(), "Client address."),
    _f("api_name", pa.string(), "API."),
    _f("error_name", pa.string(), "The error (exchanges.error_name)."),
    _f("count", pa.int64(), "Exchanges that failed so."),
    _f("connections", pa.int64(), "Connections they came on."),
    _f("first_ts", TS, "Response time of the first (request time without response time)."),
    _f("last_ts", TS, "Response time of the last."),
    _f("capture_file", pa.string(), "Capture file of the first."),
    _f("frame", pa.int64(), "Packet of the first one's response (else its request)."),
])

STORMS_SCHEMA = pa.schema([
    _f("client_id", pa.string(), "client_id of the requests."),
    _f("client_ip", pa.string(), "Client address."),
    _f("api_name", pa.string(), "API."),
    _f("topics", pa.string(), "The topics the requests named, comma-separated (\"\" for none)."),
    _f("error_name", pa.string(), "The error every one of them got."),
    _f("failures", pa.int64(), "Failed exchanges in the storm."),
    _f("connections", pa.int64(), "Connections they came on (more than one: the client reconnected too)."),
    _f("first_ts", TS, "The first failure's time."),
    _f("last_ts", TS, "The last failure's time."),
    _f("seconds", pa.float64(), "last_ts minus first_ts."),
    _f("per_second", pa.float64(), "failures less one over seconds: the retry rate (null for one instant)."),
    _f("capture_file", pa.string(), "Capture file."),
    _f("frame", pa.int64(), "Packet of the first failure's response."),
])

LOOPS_SCHEMA = pa.schema([
    _f("client_id", pa.string(), "client_id of the connections' requests (null: none sent a request)."),
    _f("client_ip", pa.string(), "Client address."),
    _f("broker_ip", pa.string(), "Broker address."),
    _f("broker_port", pa.int32(), "Broker port."),
    _f("connections", pa.int64(), "Short connections in the loop, one after another."),
    _f("first_ts", TS, "The first one's first packet."),
    _f("last_ts", TS, "The last one's last packet."),
    _f("seconds", pa.float64(), "last_ts minus first_ts."),
    _f("per_minute", pa.float64(), "Connections opened per minute over the loop."),
    _f("longest_ms", pa.float64(), "The longest of the connections, first to last packet."),
    _f("resets", pa.int64(), "Of them, ended by a reset."),
    _f("without_exchange", pa.int64(), "Of them, carried no Kafka exchange (refused, or closed before a request)."),
    _f("failed_last", pa.int64(), "Of them, whose last exchange failed (an unexpected error) or whose SASL "
       "authentication failed: the connection ended right after a failure."),
    _f("last_errors", pa.string(), "The errors those last exchanges got (and SASL outcomes), distinct, "
       "comma-separated."),
    _f("capture_file", pa.string(), "Capture file."),
    _f("connection_id", pa.int64(), "The first connection (its first packet)."),
])


def _ensure(t: pa.Table, columns: list[str]) -> pa.Table:
    from analyzer.tables.schemas import CONNECTIONS_SCHEMA, EXCHANGES_SCHEMA

    for c in columns:
        if c not in t.column_names:
            schema = EXCHANGES_SCHEMA if c in EXCHANGES_SCHEMA.names else CONNECTIONS_SCHEMA
            t = t.append_column(schema.field(c), pa.nulls(t.num_rows, schema.field(c).type))
    return t.select(columns)


def failures(exchanges: pa.Table) -> pa.Table:
    """The exchanges that failed unexpectedly, with their time (response, else request) as ``ts``."""
    ex = _ensure(exchanges, EXCHANGE_COLUMNS)
    failed = pc.and_(pc.equal(pc.fill_null(ex["status"], ""), "error"),
                     pc.invert(pc.fill_null(ex["error_expected"], False)))
    ex = ex.filter(failed)
    return ex.append_column("ts", pc.coalesce(ex["response_last_ts"], ex["request_first_ts"])).append_column(
        "frame", pc.coalesce(ex["response_frame"], ex["request_frame"]))


def unexpected_errors(exchanges: pa.Table) -> pa.Table:
    """Unexpected errors per client, API and error, most first (ERRORS_SCHEMA)."""
    f = failures(exchanges).sort_by([("ts", "ascending"), ("frame", "ascending")])
    if f.num_rows == 0:
        return ERRORS_SCHEMA.empty_table()
    keys = ["client_id", "client_ip", "api_name", "error_name"]
    f = f.append_column("conn", pc.binary_join_element_wise(
        pc.fill_null(f["capture_file"], ""), f["connection_id"].cast(pa.string()), "#"))
    agg = f.group_by(keys, use_threads=False).aggregate([
        ([], "count_all"), ("conn", "count_distinct"), ("ts", "min"), ("ts", "max"), ("capture_file", "first"),
        ("frame", "first")])
    agg = agg.rename_columns({"count_all": "count", "conn_count_distinct": "connections", "ts_min": "first_ts",
                              "ts_max": "last_ts", "capture_file_first": "capture_file", "frame_first": "frame"})
    agg = agg.select(ERRORS_SCHEMA.names).cast(ERRORS_SCHEMA)
    return agg.sort_by([("count", "descending"), ("first_ts", "ascending"), ("api_name", "ascending")])


def _episodes(key: pa.ChunkedArray, start_us: np.ndarray, end_us: np.ndarray, max_gap_us: float,
              sequential: bool) -> np.ndarray:
    """Episode numbers of rows already sorted by key then start: a new one where the key changes, where a row
    starts more than ``max_gap_us`` after the previous row ended, and (``sequential``) where it starts before
    the previous one ended."""
    codes = pc.dictionary_encode(key.combine_chunks()).indices.to_numpy(zero_copy_only=False)
    new = np.ones(len(codes), dtype=bool)
    if len(codes) > 1:
        gap = start_us[1:] - end_us[:-1]
        new[1:] = (codes[1:] != codes[:-1]) | (gap > max_gap_us)
        if sequential:
            new[1:] |= gap < 0
    return np.cumsum(new)


def _micros(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return col.cast(TS).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _text_key(t: pa.Table, columns: list[str]) -> pa.ChunkedArray:
    parts = [pc.fill_null(t[c].cast(pa.string()), "\x00") for c in columns]
    return pc.binary_join_element_wise(*parts, "\x1f")


def retry_storms(exchanges: pa.Table, min_failures: int = MIN_FAILURES,
                 max_gap_s: float = STORM_GAP_S) -> pa.Table:
    """The same client, API, topics and error failing ``min_failures`` times or more, each within ``max_gap_s``
    of the one before (STORMS_SCHEMA), largest first."""
    f = failures(exchanges)
    if f.num_rows == 0:
        return STORMS_SCHEMA.empty_table()
    f = f.append_column("topic_list", pc.fill_null(pc.binary_join(f["topics"], ","), ""))
    keys = ["capture_file", "client_id", "client_ip", "api_name", "topic_list", "error_name"]
    f = f.append_column("key", _text_key(f, keys))
    f = f.sort_by([("key", "ascending"), ("ts", "ascending"), ("frame", "ascending")])
    ts = _micros(f["ts"])
    f = f.append_column("episode", pa.array(_episodes(f["key"], ts, ts, max_gap_s * 1e6, False)))
    f = f.append_column("conn", f["connection_id"])
    agg = f.group_by(["episode"], use_threads=False).aggregate([
        ([], "count_all"), ("conn", "count_distinct"), ("ts", "min"), ("ts", "max"), ("client_id", "first"),
        ("client_ip", "first"), ("api_name", "first"), ("topic_list", "first"), ("error_name", "first"),
        ("capture_file", "first"), ("frame", "first")])
    agg = agg.filter(pc.greater_equal(agg["count_all"], min_failures))
    seconds = pc.divide(pc.subtract(agg["ts_max"].cast(pa.int64()), agg["ts_min"].cast(pa.int64())).cast(
        pa.float64()), 1e6)
    rate = pc.divide(pc.subtract(agg["count_all"], 1).cast(pa.float64()),
                     pc.if_else(pc.greater(seconds, 0), seconds, None))
    out = pa.table({
        "client_id": agg["client_id_first"], "client_ip": agg["client_ip_first"], "api_name": agg["api_name_first"],
        "topics": agg["topic_list_first"], "error_name": agg["error_name_first"], "failures": agg["count_all"],
        "connections": agg["conn_count_distinct"], "first_ts": agg["ts_min"], "last_ts": agg["ts_max"],
        "seconds": seconds, "per_second": rate, "capture_file": agg["capture_file_first"],
        "frame": agg["frame_first"]}).cast(STORMS_SCHEMA)
    return out.sort_by([("failures", "descending"), ("first_ts", "ascending")])


def _connection_facts(exchanges: pa.Table) -> pa.Table:
    """Per connection: its client_id, whether it carried an exchange, and its last exchange's unexpected error."""
    ex = _ensure(exchanges, EXCHANGE_COLUMNS)
    keys = ["capture_file", "connection_id"]
    ts = pc.coalesce(ex["request_first_ts"], ex["response_last_ts"])
    failed = pc.and_(pc.equal(pc.fill_null(ex["status"], ""), "error"),
                     pc.invert(pc.fill_null(ex["error_expected"], False)))
    t = pa.table({"capture_file": ex["capture_file"], "connection_id": ex["connection_id"], "ts": ts,
                  "client_id": ex["client_id"],
                  "last_error": pc.if_else(failed, ex["error_name"], pa.scalar("", pa.string()))})
    t = t.sort_by([("ts", "ascending")])
    agg = t.group_by(keys, use_threads=False).aggregate([
        ("client_id", "min"), ("last_error", "last"), ([], "count_all")])
    return agg.rename_columns({"client_id_min": "client_id", "last_error_last": "last_error",
                               "count_all": "exchanges"})


def reconnect_loops(connections: pa.Table, exchanges: pa.Table, min_connections: int = MIN_CONNECTIONS,
                    short_s: float = SHORT_S, max_gap_s: float = LOOP_GAP_S) -> pa.Table:
    """Clients opening connections shorter than ``short_s`` to one broker one after another, ``min_connections``
    or more with at most ``max_gap_s`` between one's end and the next one's start (LOOPS_SCHEMA)."""
    c = _ensure(connections, CONNECTION_COLUMNS)
    c = c.filter(pc.and_(pc.is_in(c["ended"], pa.array(CLOSED)),
                         pc.and_(pc.is_valid(c["first_ts"]), pc.is_valid(c["last_ts"]))))
    if c.num_rows == 0:
        return LOOPS_SCHEMA.empty_table()
    duration_ms = pc.divide(pc.subtract(c["last_ts"].cast(pa.int64()), c["first_ts"].cast(pa.int64())).cast(
        pa.float64()), 1000.0)
    c = c.append_column("duration_ms", duration_ms).filter(pc.less(duration_ms, short_s * 1000))
    if c.num_rows == 0:
        return LOOPS_SCHEMA.empty_table()
    c = c.join(_connection_facts(exchanges), ["capture_file", "connection_id"], join_type="left outer")
    sasl_failed = pc.fill_null(pc.starts_with(c["sasl_outcome"], "failed"), False)
    error = pc.if_else(sasl_failed, pc.binary_join_element_wise("SASL ", c["sasl_outcome"], ""),
                       pc.if_else(pc.equal(pc.fill_null(c["last_error"], ""), ""), None, c["last_error"]))
    c = c.append_column("error", error)
    keys = ["capture_file", "client_ip", "client_id", "broker_ip", "broker_port"]
    c = c.append_column("key", _text_key(c, keys))
    c = c.sort_by([("key", "ascending"), ("first_ts", "ascending"), ("connection_id", "ascending")])
    c = c.append_column("episode", pa.array(_episodes(c["key"], _micros(c["first_ts"]), _micros(c["last_ts"]),
                                                      max_gap_s * 1e6, True)))
    c = c.append_column("rst", pc.cast(pc.equal(c["ended"], "rst"), pa.int64()))
    c = c.append_column("bare", pc.cast(pc.equal(pc.fill_null(c["exchanges"], 0), 0), pa.int64()))
    c = c.append_column("failed", pc.cast(pc.is_valid(c["error"]), pa.int64()))
    agg = c.group_by(["episode"], use_threads=False).aggregate([
        ([], "count_all"), ("first_ts", "min"), ("last_ts", "max"), ("duration_ms", "max"), ("rst", "sum"),
        ("bare", "sum"), ("failed", "sum"), ("error", "distinct"), ("client_id", "first"), ("client_ip", "first"),
        ("broker_ip", "first"), ("broker_port", "first"), ("capture_file", "first"), ("connection_id", "first")])
    agg = agg.filter(pc.greater_equal(agg["count_all"], min_connections))
    seconds = pc.divide(pc.subtract(agg["last_ts_max"].cast(pa.int64()), agg["first_ts_min"].cast(pa.int64())).cast(
        pa.float64()), 1e6)
    per_minute = pc.divide(pc.multiply(agg["count_all"].cast(pa.float64()), 60.0),
                           pc.if_else(pc.greater(seconds, 0), seconds, None))
    # one list per loop found (a handful), not per connection
    errors = pa.array([", ".join(sorted(e for e in v if e)) for v in agg["error_distinct"].to_pylist()],
                      pa.string())
    out = pa.table({
        "client_id": agg["client_id_first"], "client_ip": agg["client_ip_first"], "broker_ip": agg["broker_ip_first"],
        "broker_port": agg["broker_port_first"], "connections": agg["count_all"], "first_ts": agg["first_ts_min"],
        "last_ts": agg["last_ts_max"], "seconds": seconds, "per_minute": per_minute,
        "longest_ms": agg["duration_ms_max"], "resets": agg["rst_sum"], "without_exchange": agg["bare_sum"],
        "failed_last": agg["failed_sum"], "last_errors": errors, "capture_file": agg["capture_file_first"],
        "connection_id": agg["connection_id_first"]}).cast(LOOPS_SCHEMA)
    return out.sort_by([("connections", "descending"), ("first_ts", "ascending")])
