"""``kafkacap report``: one self-contained HTML page of plots drawn from the output tables.

The layers: ``source`` opens a folder of tables (an export or a Spark output) and reads chosen columns of
them in record batches; ``aggregate`` holds the mergeable partial aggregates (counts, sums, first rows,
log-bucket latency histograms) and reads percentiles from the histograms; ``scans`` folds each table's batches
into them (or reads the Spark job's aggregate tables instead of the exchange rows), so memory stays flat
whatever the number of rows and the page small; ``figures`` draws the results as plotly figures; ``page``
lays the sections out and writes the file. Only ``source`` and ``page.write_report`` touch the filesystem.
"""
