"""The output formats ``kafkacap export`` writes, apart from the writers so the command line can offer them
without loading pyarrow."""

FORMATS = ("parquet", "csv", "jsonl")
