"""Writing an output folder so that a failed run never leaves half-written tables behind.

Every table is written under a staging folder next to the output (same parent, so a rename stays within
one filesystem). Only when all of them are complete is the output swapped: the old folder is renamed away,
the staging folder renamed in, the old one deleted. A failure before the swap deletes the staging folder
and leaves the previous output as it was.

On local disks and HDFS a rename is atomic. Object stores (S3, GCS) have no rename: pyarrow copies and
deletes there, so readers can see a mix of old and new objects for a moment (docs/spark.md).
"""

from __future__ import annotations

import os
import shutil
import uuid

import pyarrow.fs as pafs

from analyzer.tables.schemas import OPTIONAL_SCHEMAS, SCHEMAS
from spark_jobs.inputs import filesystem, is_local, local_path

AGGREGATE_TABLES = ("api_usage", "latency", "exchange_counts", "latency_histogram")
KNOWN_TABLES = (*SCHEMAS, *OPTIONAL_SCHEMAS, *AGGREGATE_TABLES)


class OutputError(Exception):
    """The output folder holds something this job did not write: refusing to replace it."""


def _parent_and_name(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else ("/" if cut == 0 else ""), path[cut + 1:]


class Staging:
    """A staging folder for the output ``out`` (a local path or a URI)."""

    def __init__(self, out: str) -> None:
        self.local = is_local(out)
        if self.local:
            self.out = os.path.abspath(local_path(out))
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self._out_path = self.out
        else:
            self.out = out.rstrip("/")
            self.fs, self._out_path = filesystem(self.out)
        parent, name = _parent_and_name(self.out)
        token = uuid.uuid4().hex[:12]
        self.folder = f"{parent}/.{name}.kafkacap-staging-{token}"
        self._old = f"{parent}/.{name}.kafkacap-old-{token}"

    def uri(self, table: str) -> str:
        """Where Spark writes ``table`` (local paths as file:// URIs, so a cluster's default filesystem does
        not claim them)."""
        path = f"{self.folder}/{table}"
        return "file://" + path if self.local else path

    def fs_path(self, uri_or_path: str) -> str:
        """The pyarrow path of one of this output's folders."""
        if self.local:
            return local_path(uri_or_path)
        return filesystem(uri_or_path)[1]

    def check_replaceable(self) -> None:
        """Refuse an output folder with anything but this tool's tables in it (a typo must not delete data)."""
        info = self.fs.get_file_info(self._out_path)
        if info.type == pafs.FileType.NotFound:
            return
        if info.type != pafs.FileType.Directory:
            raise OutputError(f"{self.out} exists and is not a folder")
        for entry in self.fs.get_file_info(pafs.FileSelector(self._out_path)):
            name = entry.base_name
            if name.startswith(("_", ".")) or name in KNOWN_TABLES or name.rsplit(".", 1)[0] in KNOWN_TABLES:
                continue
            raise OutputError(f"{self.out} holds {name!r}, which is not a kafkacap table; choose an empty or new "
                              "folder (the output folder is replaced as a whole)")

    def has_data_files(self, table: str) -> bool:
        path = self.fs_path(self.uri(table))
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return False
        return any(i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
                   for i in self.fs.get_file_info(pafs.FileSelector(path, recursive=True)))

    def publish(self) -> None:
        """Swap the staging folder in as the output folder."""
        fs, out = self.fs, self._out_path
        staged, old = self.fs_path(self.folder), self.fs_path(self._old)
        had_old = fs.get_file_info(out).type != pafs.FileType.NotFound
        if had_old:
            _move(fs, out, old)
        try:
            _move(fs, staged, out)
        except BaseException:
            if had_old:
                _move(fs, old, out)
            raise
        if had_old:
            _delete(fs, old)

    def publish_tables(self, tables: tuple[str, ...]) -> None:
        """Swap single tables into an existing output folder (each table on its own)."""
        fs = self.fs
        for table in tables:
            staged, target, old = (self.fs_path(f"{base}/{table}") for base in (self.folder, self.out, self._old))
            had_old = fs.get_file_info(target).type != pafs.FileType.NotFound
            if had_old:
                fs.create_dir(self.fs_path(self._old), recursive=True)
                _move(fs, target, old)
            _move(fs, staged, target)
        self.abort()
        _delete(fs, self.fs_path(self._old))

    def abort(self) -> None:
        _delete(self.fs, self.fs_path(self.folder))


def _move(fs: pafs.FileSystem, src: str, dest: str) -> None:
    if isinstance(fs, pafs.LocalFileSystem):
        os.replace(src, dest)
        return
    try:
        fs.move(src, dest)
    except (OSError, NotImplementedError):  # object stores: no directory rename
        pafs.copy_files(src, dest, source_filesystem=fs, destination_filesystem=fs)
        fs.delete_dir(src)


def _delete(fs: pafs.FileSystem, path: str) -> None:
    if isinstance(fs, pafs.LocalFileSystem):
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        fs.delete_dir(path)
    except (OSError, FileNotFoundError):
        pass
