"""Each table declared once, and the compiled row writers say each field by the name it is declared under.

A table's columns are declared once (``analyzer.tables.schemas``: name, Arrow type, documentation); the column
buffers are made from that declaration, and the writers the core calls in C (``columns.pxd``'s ``add``) take one
parameter per field, named as declared, which every call site passes by keyword (Cython checks the names when it
compiles). This test holds the writers' parameters to the declaration, so a column declared without a writer
parameter, or a parameter named otherwise, fails here before any row is wrong; and it holds every call of them to
keywords.
"""

from __future__ import annotations

import re
from pathlib import Path

from analyzer.tables.schemas import (
    CONNECTION_ROW_FIELDS,
    ERROR_ROW_FIELDS,
    EXCHANGE_ROW_FIELDS,
    PARTITION_ROW_FIELDS,
    SETTING_FIELDS,
)
from dissectors.kafka.extract_rules import ErrorEntry

REPO = Path(__file__).resolve().parents[2]
COLUMNS_PXD = REPO / "analyzer" / "tables" / "columns.pxd"
CALLERS = (REPO / "analyzer" / "session" / "_matching.pyx",)
ENDPOINT_FIELDS = ("connection_id", "client_ip", "client_port", "broker_ip", "broker_port")


def declared(cls: str, method: str) -> list[str]:
    """Parameter names of ``cls.method`` as the .pxd declares it (``self`` left out)."""
    text = COLUMNS_PXD.read_text(encoding="utf-8")
    body = re.search(rf"^cdef class {cls}\b.*?(?=^\S)", text + "\nEND", re.S | re.M)
    assert body, cls
    signature = re.search(rf"cdef \w+ {method}\(self,(.*?)\)", body[0], re.S)
    assert signature, (cls, method)
    return [part.split()[-1] for part in signature[1].replace("\n", " ").split(",")]


def attributes(cls: str) -> list[str]:
    text = COLUMNS_PXD.read_text(encoding="utf-8")
    body = re.search(rf"^cdef class {cls}\b.*?(?=^\S)", text + "\nEND", re.S | re.M)
    return re.findall(r"cdef readonly \w+ (\w+)", body[0])


def test_the_exchange_writer_takes_every_declared_field_by_its_name() -> None:
    params = declared("ExchangeColumns", "add")
    assert params[0] == "conn" and attributes("Endpoints") == list(ENDPOINT_FIELDS)
    assert params[-1] == "settings"  # the settings columns, written in declared order (fill_settings)
    assert params[1:-1] == [f for f in EXCHANGE_ROW_FIELDS if f not in ENDPOINT_FIELDS and f not in SETTING_FIELDS]
    assert EXCHANGE_ROW_FIELDS == (*ENDPOINT_FIELDS, *params[1:-1], *SETTING_FIELDS)


def test_the_error_and_partition_writers_take_the_declared_names() -> None:
    params = declared("ErrorColumns", "add")
    assert params[-1] == "error" and (*params[:-1], *ErrorEntry._fields) == ERROR_ROW_FIELDS
    params = declared("PartitionColumns", "add")
    # The key fields, then the request's and the response's entries and the records summary, then replica_id.
    assert params[:7] == list(PARTITION_ROW_FIELDS[:7])
    assert params[7:] == ["asked", "answered", "summary", "replica_id"] and "replica_id" in PARTITION_ROW_FIELDS


def test_every_call_of_a_writer_names_its_fields() -> None:
    """No positional row: each call passes every field after the first by keyword."""
    calls = 0
    for path in CALLERS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"\b(?:self\.rows|rows|errors|partitions)\.add\((.*?)\)\n", text, re.S):
            args = [a.strip() for a in re.split(r",(?![^()]*\))", match[1].replace("\n", " ")) if a.strip()]
            positional = [a for a in args if not re.match(r"^\w+=", a)]
            assert positional in ([], ["self.conn"]), (path.name, args[:4])
            calls += 1
    assert calls >= 9  # the exchange rows (six kinds), the error rows and the partition rows (three)


def test_the_connection_row_is_built_by_field() -> None:
    from analyzer.session.connection import KafkaConnections

    row = KafkaConnections.syn_only_row(7, bytes([10, 0, 0, 1, 10, 0, 0, 2, 0x9C, 0x40, 0x23, 0x84]), 5, 9, 3, "fin")
    values = dict(zip(CONNECTION_ROW_FIELDS, row, strict=True))
    assert values["connection_id"] == 7 and values["client_ip"] == "10.0.0.1" and values["broker_port"] == 9092
    assert values["packets_to_broker"] == 3 and values["packets_to_client"] == 0 and values["tls_note"] is None
    assert values["syn_seen"] is True and values["ended"] == "fin" and values["last_ts"] == 9


def test_each_table_is_declared_once_with_what_the_stages_need() -> None:
    """The registry the writers, the Spark job and the topic naming read: every table's date columns are capture
    times of its own schema, and the tables named as carrying topic ids are those with both columns."""
    import pyarrow as pa

    from analyzer.pipeline.topic_ids import SCALAR_TABLES
    from analyzer.tables.schemas import OPTIONAL_SCHEMAS, SCHEMAS, TABLES
    from spark_jobs.capture_date import DATE_SOURCES
    from spark_jobs.export_job import ROW_TABLES

    assert set(TABLES) == set(SCHEMAS) | set(OPTIONAL_SCHEMAS) and not set(SCHEMAS) & set(OPTIONAL_SCHEMAS)
    for name, spec in TABLES.items():
        assert spec.name == name and spec.dated_by, name
        for column in spec.dated_by:
            assert pa.types.is_timestamp(spec.schema.field(column).type), (name, column)
    assert DATE_SOURCES == {name: spec.dated_by for name, spec in TABLES.items()}
    assert set(SCALAR_TABLES) == {"partitions", "errors", "records", "cluster", "share_ranges"}
    assert set(ROW_TABLES) == {"exchanges", "errors", "partitions", "connections", "cluster", "group_heartbeats",
                               "share_ranges", "transaction_steps"}


def test_rows_read_in_python_have_the_fields_of_their_tables():
    """The transaction_steps and group_heartbeats rows are named tuples the batch builders take by position:
    their fields must be the tables' columns, in order (the capture file and error name added later)."""
    from analyzer.session.heartbeats import GroupHeartbeat
    from analyzer.session.transactions import TransactionStep
    from analyzer.tables.schemas import (
        GROUP_HEARTBEATS_SCHEMA,
        TRANSACTION_STEPS_SCHEMA,
    )

    assert TransactionStep._fields == tuple(TRANSACTION_STEPS_SCHEMA.names[1:-1])
    assert GroupHeartbeat._fields == tuple(GROUP_HEARTBEATS_SCHEMA.names[1:-1])
    assert TRANSACTION_STEPS_SCHEMA.names[-1] == GROUP_HEARTBEATS_SCHEMA.names[-1] == "error_name"


def test_share_range_rows_have_the_fields_of_their_table():
    from analyzer.session.share_groups import ShareRange
    from analyzer.tables.schemas import SHARE_RANGES_SCHEMA

    assert ShareRange._fields == tuple(SHARE_RANGES_SCHEMA.names[1:-1])
