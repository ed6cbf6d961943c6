"""The Parquet tables store their sequence-like columns as deltas (``writers.DELTA_COLUMNS``) and read back
exactly the rows the analysis built."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.pipeline.analyze import Options
from analyzer.pipeline.run import run
from analyzer.tables.schemas import OPTIONAL_SCHEMAS, SCHEMAS
from analyzer.tables.writers import DELTA_COLUMNS, TableFolder

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"


@pytest.mark.parametrize("table", sorted(DELTA_COLUMNS))
def test_every_delta_column_is_an_integer_or_time_column_of_its_table(table):
    schema = (SCHEMAS | OPTIONAL_SCHEMAS)[table]
    for name in DELTA_COLUMNS[table]:
        assert name in schema.names, f"{table}.{name} is not a column"
        kind = schema.field(name).type
        assert pa.types.is_integer(kind) or pa.types.is_timestamp(kind), f"{table}.{name} is {kind}"


def test_a_real_capture_reads_back_as_built_with_its_sequences_as_deltas(tmp_path):
    built: dict[str, list[pa.RecordBatch]] = {}
    folder = TableFolder(str(tmp_path / "out"))

    def sink(table: str, batch: pa.RecordBatch) -> None:
        built.setdefault(table, []).append(batch)
        folder.write(table, batch)

    run([str(SAMPLES / "tansu_consumer_group.pcap")], Options(records=True, deliveries=True), sink)
    folder.commit()
    checked = set()
    for table, batches in built.items():
        path = tmp_path / "out" / f"{table}.parquet"
        expected = pa.Table.from_batches(batches).combine_chunks()
        assert pq.read_table(path).equals(expected.cast(pq.read_schema(path))), table
        meta = pq.ParquetFile(path).metadata
        for name in DELTA_COLUMNS.get(table, ()):
            if expected.column(name).null_count == expected.num_rows:
                continue  # all null: no values to encode
            i = meta.schema.names.index(name)
            encodings = {e for g in range(meta.num_row_groups) for e in meta.row_group(g).column(i).encodings}
            assert "DELTA_BINARY_PACKED" in encodings and "PLAIN" not in encodings, (table, name, encodings)
            checked.add(table)
    assert checked >= {"exchanges", "partitions", "records", "deliveries"}
