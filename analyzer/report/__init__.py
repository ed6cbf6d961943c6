"""``kafkacap report``: one self-contained HTML page of plots drawn from the output tables.

The layers: ``source`` opens a folder of tables (an export or a Spark output) and reads chosen columns of
them; ``aggregate`` turns tables into small ones (per interval, per API, top topics) with pyarrow's kernels,
so the page stays small whatever the input; ``figures`` draws those as plotly figures; ``page`` lays the
sections out and writes the file. Only ``source`` and ``page.write_report`` touch the filesystem.
"""
