"""The export's fast paths give exactly what the general code gives.

- ``records_summary.summary_at`` (one pass over v2 batch headers) against ``summarize(batches(...))`` on every records
  field of the sample and public captures, whole, cut at every kind of place, and with bytes damaged;
- the batch builders (rows written into column buffers, drained as Arrow arrays, offsets coalesced per column)
  against a plain column-by-column build written here, on the rows of real captures, with topic ids mixed in;
- a frame head collected by the packet loop (``FlowTable.feed`` appends segments itself) against the
  frames cut directly from the TCP byte stream, for frames split over many segments.
"""

from __future__ import annotations

import json
import random
import struct
import uuid
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.session.matching import RecordRows
from analyzer.tables import schemas as tables
from analyzer.tables.columns import ErrorColumns, ExchangeColumns, PartitionColumns
from dissectors.kafka.extract import PartitionEntry
from dissectors.kafka.records import NO_SUMMARY, Limits, RecordsError, batches, summarize
from dissectors.kafka.records_summary import held_summary_at, summary_at
from tests import craft
from tests.dissectors.test_records import FETCH, PRODUCE, PUBLIC, SAMPLES, public_spans, record_spans

SAMPLE_CAPTURES = sorted(p.name for p in SAMPLES.glob("*.pcap"))


def general_summary(buf, offset: int, length: int, verify_crc: bool) -> tuple:
    try:
        found = batches(buf, offset, length, verify_crc=verify_crc, limits=Limits())
    except RecordsError:
        return NO_SUMMARY
    return summarize(found, verify_crc)


def sample_spans() -> list[bytes]:
    out = []
    for name in SAMPLE_CAPTURES:
        port = json.loads((SAMPLES / name.replace(".pcap", ".truth.json")).read_text())["broker"]["port"]
        for api_key, is_response in ((PRODUCE, False), (FETCH, True)):
            out.extend(data for _topic, data in record_spans(SAMPLES / name, (port,), api_key, is_response))
    return out


def all_spans() -> list[bytes]:
    spans = sample_spans()
    if PUBLIC.is_dir():
        spans.extend(data for _name, _topic, data in public_spans())
    return spans


def summary(buf, offset: int, length: int, *, verify_crc: bool = False, limits: Limits | None = None) -> tuple:
    return summary_at(buf, offset, length, verify_crc, limits)


def test_summary_equals_the_batch_walk_on_real_records():
    spans = all_spans()
    assert len(spans) > 50
    fast = 0
    for data in spans:
        for verify in (False, True):
            got = summary(data, 0, len(data), verify_crc=verify, limits=Limits())
            assert got == general_summary(data, 0, len(data), verify)
        fast += data[16] == 2 if len(data) > 16 else 0
    assert fast > 20  # the v2 path itself was exercised, not only the fallback


def test_the_summary_compiled_callers_hold_is_the_summary_tuple():
    """The matcher and the partition columns get the v2 path's summary as a RecordsSummary (C fields, no Python
    int each); read as a sequence it is the general path's tuple: values, types, slices, equality, hash."""
    held = 0
    for data in all_spans():
        for verify in (False, True):
            got = held_summary_at(data, 0, len(data), verify, Limits())
            expected = general_summary(data, 0, len(data), verify)
            assert got == expected and tuple(got) == expected and len(got) == len(expected)
            assert [got[i] for i in range(-len(expected), len(expected))] == [*expected, *expected]
            assert [type(v) for v in got] == [type(v) for v in expected]
            assert got[3:9] == expected[3:9] and hash(got) == hash(expected)
            held += type(got) is not tuple
    assert held > 20


def test_summary_equals_the_batch_walk_on_cut_and_damaged_records():
    rng = random.Random(5)
    spans = [d for d in all_spans() if len(d) > 61]
    checked = 0
    for data in rng.sample(spans, min(60, len(spans))):
        framed = b"\xee" * 7 + data + b"\xee" * 5  # an offset inside a larger buffer, as in a frame
        cuts = {0, 1, 16, 17, 60, 61, 62, len(data) - 1, len(data)} | {rng.randrange(len(data)) for _ in range(8)}
        for cut in sorted(c for c in cuts if 0 <= c <= len(data)):
            for verify in (False, True):
                assert summary(framed, 7, cut, verify_crc=verify) == general_summary(framed, 7, cut, verify)
                checked += 1
        for _ in range(6):  # damaged bytes: lengths, magic, counts, attributes, CRCs
            broken = bytearray(data)
            at = rng.choice([8, 9, 10, 11, 16, 17, 21, 22, 57, 58, 59, 60, rng.randrange(len(data))])
            broken[at] ^= 1 << rng.randrange(8)
            assert summary(broken, 0, len(broken), verify_crc=True) == general_summary(broken, 0, len(broken), True)
            checked += 1
    assert checked > 500


def test_summary_outside_the_buffer_is_no_summary():
    data = sample_spans()[0]
    assert summary(data, 4, len(data)) == NO_SUMMARY == general_summary(data, 4, len(data), False)
    assert summary(data, -1, 3) == NO_SUMMARY


# ---------------------------------------------------------------------------------------------------------
# Batch builders


def column_by_column(rows: list, fields: tuple[str, ...], schema: pa.Schema, topic_names: dict) -> dict:
    """The expected column values, built one field at a time with plain Python (an independent build); rows as
    tuples in ``fields`` order or as dicts by field name."""
    if rows and isinstance(rows[0], dict):
        cols = {name: [r[name] for r in rows] for name in fields}
    else:
        cols = {name: [r[i] for r in rows] for i, name in enumerate(fields)}

    def text(t):
        if t is None or isinstance(t, str):
            return t
        return topic_names.get(t) or str(uuid.UUID(bytes=t))

    if "topic" in cols:
        cols["topic"] = [text(t) for t in cols["topic"]]
    if "topics" in cols:
        cols["topics"] = [None if ts is None else [text(t) for t in ts] for ts in cols["topics"]]
    out = {}
    for f in schema:
        if f.name not in cols or f.name == "api_name":  # api_name: derived from api_key in the batch
            continue
        values = cols[f.name]
        if f.type == tables.TS:
            scale = 1000 if f.name in ("first_record_ts", "max_record_ts") else None
            values = [None if v is None else (v * scale if scale else v // 1000) for v in values]
            out[f.name] = pa.array(values, pa.int64()).view(tables.TS)
        else:
            out[f.name] = pa.array(values, f.type)
    return out


TABLES = {"exchanges": ExchangeColumns, "partitions": PartitionColumns, "errors": ErrorColumns}


@pytest.fixture(scope="module")
def captured_rows() -> dict[str, list[dict]]:
    """The rows the core wrote into the column tables (read back by field name, before each drain), for a few
    sample captures."""
    seen: dict[str, list] = {name: [] for name in TABLES}
    import analyzer.pipeline.analyze as analyze

    original = analyze._emit_exchanges

    def spy(table, *args):
        for name in seen:
            seen[name].extend(getattr(table.connections.out, name))
        return original(table, *args)

    analyze._emit_exchanges = spy
    try:
        for capture in ("tansu_consumer_group.pcap", "tansu_broker_errors.pcap", "tansu_confluent_codecs.pcap"):
            analyze_file(str(SAMPLES / capture), Options(), lambda table, batch: None)
    finally:
        analyze._emit_exchanges = original
    assert all(seen.values())
    return seen


def with_topic_ids(rows: list[dict], field: str) -> list[dict]:
    """Every third row names its topic(s) by a 16-byte id instead."""
    out = []
    for i, r in enumerate(rows):
        topic = bytes([i % 7]) * 16
        if i % 3 == 0:
            r = {**r, field: (topic, "plain") if field == "topics" else topic}
        out.append(r)
    return out


def answered_only(row: dict) -> dict:
    """A partition row as if only the response named the topic-partition (its offsets are already the
    response's, else the request's: the core merges them as it adds the row)."""
    return {**row, "request_record_bytes": None}


@pytest.mark.parametrize("with_ids", [False, True])
def test_batches_equal_a_column_by_column_build(captured_rows, with_ids):
    names = {bytes([1]) * 16: "named-by-metadata"}
    cases = (("exchanges", tables.EXCHANGE_ROW_FIELDS, tables.EXCHANGES_SCHEMA, "topics"),
             ("partitions", tables.PARTITION_ROW_FIELDS, tables.PARTITIONS_SCHEMA, "topic"),
             ("errors", tables.ERROR_ROW_FIELDS, tables.ERRORS_SCHEMA, "topic"))
    for name, fields, schema, topic_field in cases:
        rows = captured_rows[name]
        if name == "partitions":  # and rows only a response names (the captures have none)
            answered = [answered_only(r) for r in rows if r["error_code"] is not None][:5]
            assert answered
            rows = rows + answered
        if with_ids:
            rows = with_topic_ids(rows, topic_field)
        table = TABLES[name]()
        for row in rows:
            table.append(row)
        assert [*table] == rows  # read back as written
        batch = getattr(tables, f"{name}_batch")(table.drain(partial(tables.topic_text, topic_names=names)),
                                                 "file.pcap")
        assert len(table) == 0
        assert batch.schema.equals(schema, check_metadata=True)
        expected = column_by_column(rows, fields, schema, names)
        for column, values in expected.items():
            assert batch.column(column).equals(values), (name, column)
        assert batch.column("capture_file").to_pylist() == ["file.pcap"] * len(rows)
    partitions = tables.partitions_batch(_drained(PartitionColumns, captured_rows["partitions"]), "f")
    assert pc.sum(pc.is_valid(partitions.column("committed_offset"))).as_py() > 0  # request-side values kept
    assert pc.sum(pc.is_valid(partitions.column("base_offset"))).as_py() > 0  # response-side values kept


def _drained(kind, rows: list[dict]) -> dict:
    table = kind()
    for row in rows:
        table.append(row)
    return table.drain(str)


def _value_strategy(name: str, typ: pa.DataType):
    """Any value a row field of Arrow type ``typ`` may hold, nulls included (capture times within int64 ns:
    beyond it see test_capture_times_beyond_int64_ns_are_kept_exactly; record times within what the plain
    build's ms-to-us product holds)."""
    topic = st.text(max_size=12) | st.binary(min_size=16, max_size=16)
    if name in tables.CAPTURE_TIME_FIELDS:
        return st.none() | st.integers(0, (1 << 63) - 1)
    if name in ("first_record_ts", "max_record_ts"):
        return st.none() | st.integers(-(1 << 50), 1 << 50)
    if name in ("uncompressed_bytes", "request_record_bytes", "response_record_bytes"):  # the ratio's doubles
        return st.none() | st.integers(0, 1 << 53)
    if name == "topics":
        return st.none() | st.lists(topic, max_size=4).map(tuple)
    if name == "topic":
        return st.none() | topic
    if pa.types.is_string(typ):
        return st.none() | st.text(max_size=20)
    if pa.types.is_boolean(typ):
        return st.none() | st.booleans()
    bits = typ.bit_width
    return st.none() | st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _rows_strategy(fields: tuple[str, ...]):
    types = tables.ROW_TYPES[fields]
    return st.lists(st.fixed_dictionaries({name: _value_strategy(name, types[name]) for name in fields}),
                    max_size=40)


@settings(max_examples=60, deadline=None)
@given(exchanges=_rows_strategy(tables.EXCHANGE_ROW_FIELDS), partitions=_rows_strategy(tables.PARTITION_ROW_FIELDS),
       errors=_rows_strategy(tables.ERROR_ROW_FIELDS))
def test_any_rows_drain_as_a_column_by_column_build_gives_them(exchanges, partitions, errors):
    """Random rows of every table (nulls anywhere, topic ids among names, every integer range) through the column
    buffers, against the plain build; twice through the same tables (drained buffers start afresh)."""
    names = {bytes(16): "zero-named"}
    cases = (("exchanges", exchanges, tables.EXCHANGE_ROW_FIELDS, tables.EXCHANGES_SCHEMA),
             ("partitions", partitions, tables.PARTITION_ROW_FIELDS, tables.PARTITIONS_SCHEMA),
             ("errors", errors, tables.ERROR_ROW_FIELDS, tables.ERRORS_SCHEMA))
    for name, rows, fields, schema in cases:
        table = TABLES[name]()
        for _ in range(2):
            for row in rows:
                table.append(row)
            assert [*table] == rows
            batch = getattr(tables, f"{name}_batch")(table.drain(partial(tables.topic_text, topic_names=names)), "f")
            assert batch.schema.equals(schema, check_metadata=True)
            for column, values in column_by_column(rows, fields, schema, names).items():
                assert batch.column(column).equals(values), (name, column)


def test_a_row_that_fails_half_way_leaves_no_trace(captured_rows):
    row = captured_rows["exchanges"][0]
    table = ExchangeColumns()
    table.append(row)
    for field, bad in (("partition_count", 1 << 40), ("note", b"not text"), ("topics", ["a", 5]),
                       ("response_frame", "7")):
        with pytest.raises((OverflowError, TypeError)):
            table.append({**row, field: bad})
        assert len(table) == 1
    table.append(row)
    assert [*table] == [row, row]
    batch = tables.exchanges_batch(table.drain(str), "f")
    assert batch.num_rows == 2 and batch.slice(0, 1).equals(batch.slice(1, 1))


def test_capture_times_beyond_int64_ns_are_kept_exactly(captured_rows):
    """A capture time past 2262 (beyond int64 ns) keeps its microseconds; one beyond even those is null."""
    past_2262, beyond = (1 << 64) + 1_234_567, 1 << 80
    first = captured_rows["errors"][0]
    table = ErrorColumns()
    for ts in (first["response_last_ts"], past_2262, beyond):
        table.append({**first, "response_last_ts": ts})
    assert [row["response_last_ts"] for row in table] == [first["response_last_ts"], past_2262, beyond]
    cols = table.drain(str)
    assert cols["response_last_ts"] == [first["response_last_ts"], past_2262, beyond]
    column = tables.errors_batch(cols, "f").column("response_last_ts")
    assert column.cast(pa.int64()).to_pylist() == [first["response_last_ts"] // 1000, past_2262 // 1000, None]


def test_record_rows_shared_per_partition_equal_whole_rows():
    """Record rows come as each partition's shared fields once and its records after; the batch is the one
    whole RECORD_ROW_FIELDS tuples give, and that one equals a column-by-column build."""
    handed = []
    import analyzer.pipeline.analyze as analyze

    original = analyze.records_batch

    def spy(rows, *args):
        handed.append(([*rows.heads], [*rows.counts], [*rows.records]))
        return original(rows, *args)

    analyze.records_batch = spy
    try:
        analyze_file(str(SAMPLES / "tansu_confluent_codecs.pcap"), Options(records=True), lambda t, b: None)
    finally:
        analyze.records_batch = original
    assert handed
    for heads, counts, records in handed:
        rows = RecordRows()
        rows.heads[:], rows.counts[:], rows.records[:] = heads, counts, records
        mine = iter(records)
        whole = [(*head, *next(mine)) for head, n in zip(heads, counts, strict=True) for _ in range(n)]
        assert len(heads) > 1 and len(whole) == len(records) > len(heads)
        names = {}
        batch = tables.records_batch(rows, "f", names)
        assert batch.equals(tables.records_batch(whole, "f", names))
        expected = column_by_column(whole, tables.RECORD_ROW_FIELDS, tables.RECORDS_SCHEMA, names)
        del expected["timestamp"]  # record timestamps are ms, which that build reads as ns
        for column, values in expected.items():
            assert batch.column(column).equals(values), column


def test_partition_rows_name_the_offsets_in_partition_entry_order():
    assert PartitionEntry._fields[3:-2] == tables.PARTITION_OFFSET_FIELDS


def test_empty_batches_have_the_schemas():
    for name, schema in (("exchanges", tables.EXCHANGES_SCHEMA), ("partitions", tables.PARTITIONS_SCHEMA),
                         ("errors", tables.ERRORS_SCHEMA)):
        batch = getattr(tables, f"{name}_batch")(TABLES[name]().drain(str), "f")
        assert batch.num_rows == 0 and batch.schema.equals(schema, check_metadata=True)
    batch = tables.records_batch([], "f", {})
    assert batch.num_rows == 0 and batch.schema.equals(tables.RECORDS_SCHEMA, check_metadata=True)


# ---------------------------------------------------------------------------------------------------------
# Frame heads collected by the packet loop


@pytest.mark.parametrize("bodies", [True, False])
def test_frames_split_over_many_segments_reach_the_matcher_whole(tmp_path, bodies):
    rng = random.Random(3)
    to_broker = b"".join(craft.produce_request_v3(c, 1, rng.choice([10, 3000, 70000])) for c in range(1, 13))
    to_client = b"".join(craft.fetch_response_v11(c, rng.choice([0, 5000, 90000])) for c in range(1, 13))
    conversation = craft.Conversation()
    conversation.handshake()
    pos = [0, 0]
    while pos[0] < len(to_broker) or pos[1] < len(to_client):
        side = rng.randrange(2)
        data = (to_broker, to_client)[side]
        if pos[side] < len(data):
            chunk = data[pos[side]:pos[side] + rng.choice([1, 3, 100, 1448, 1448, 1448, 1448])]
            pos[side] += len(chunk)
            conversation.send(side == 0, chunk, ack=rng.random() < 0.5)
    path = craft.write(tmp_path / "split.pcap", conversation.packets)

    frames: dict[bool, list[bytes]] = {False: [], True: []}

    def tap(conn_id, is_response, first_no, last_no, frame):
        frames[is_response].append(bytes(frame))

    options = Options(bodies=bodies)
    analyze_file(path, options, lambda table, batch: None, tap=tap)
    keep = options.frame_keep
    assert frames[False] == [f[:keep] for f in size_prefixed(to_broker)]
    assert frames[True] == [f[:keep] for f in size_prefixed(to_client)]
    assert any(len(f) > 60000 for f in frames[True]) == bodies


def size_prefixed(data: bytes):
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        yield data[pos:pos + 4 + size]
        pos += 4 + size
