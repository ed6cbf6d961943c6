"""kafkacap on Spark: capture files to the kafkacap tables (and per-minute aggregates) as Parquet datasets.

Entry points: ``export_job`` (spark-submit or ``python -m spark_jobs.export_job``; also ``kafkacap spark``)
and ``aggregate_job``. Driver side: ``inputs`` (listing, task planning), ``publish`` (staging folder and
swap), ``session``. Worker side: ``analyse_task`` (the analysis stage), ``fetch`` (local copies of remote
files), ``envelope`` (one schema for every table's batches), ``write_task`` (the write stage), ``schemas``
(capture_date). See docs/spark.md.
"""
