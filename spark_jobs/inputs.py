"""Driver side: turn the paths, folders and globs a user gives into a list of capture files, and group them
into tasks.

Local paths (no scheme, or ``file://``) follow the CLI exactly (``analyzer.pipeline.run.expand_paths``), so the
``files`` table names them the same way. Anything else goes through ``pyarrow.fs`` (``hdfs://``,
``s3://``, ``gs://``, ...). Hadoop's S3 spellings ``s3a://`` and ``s3n://`` are read as ``s3://``, so one
URI can serve Spark's writer and pyarrow alike.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from analyzer.pipeline.run import CAPTURE_NAME, InputError, expand_paths

GLOB_CHARS = "*?["
HADOOP_S3_SCHEMES = ("s3a://", "s3n://")


@dataclass(frozen=True)
class CaptureInput:
    """One capture file: ``path`` as the user will see it in the files table, ``size`` in bytes."""

    path: str
    size: int


def is_local(path: str) -> bool:
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(path: str) -> str:
    """``file:///x`` or ``x`` to a plain local path."""
    return urlsplit(path).path if path.startswith("file:") else path


def pyarrow_uri(uri: str) -> str:
    for scheme in HADOOP_S3_SCHEMES:
        if uri.startswith(scheme):
            return "s3://" + uri[len(scheme):]
    return uri


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of ``uri`` and the path inside it."""
    return pafs.FileSystem.from_uri(pyarrow_uri(uri))


def list_captures(paths: list[str]) -> list[CaptureInput]:
    """Every capture file the arguments name, in a repeatable order; raises InputError for a path that
    exists nowhere or a folder or glob without capture files."""
    found: list[CaptureInput] = []
    for p in paths:
        found.extend(_list_local(p) if is_local(p) else _list_remote(p))
    return found


def _list_local(path: str) -> list[CaptureInput]:
    path = local_path(path)
    if any(c in path for c in GLOB_CHARS):
        matches = sorted(glob.glob(path, recursive=True))
        if not matches:
            raise InputError(f"{path}: no file matches")
        files = [f for f in matches if not os.path.isdir(f)] + expand_paths([d for d in matches if os.path.isdir(d)])
    else:
        files = expand_paths([path])
    return [CaptureInput(f, _size(f)) for f in files]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _list_remote(uri: str) -> list[CaptureInput]:
    fs, path = filesystem(uri)
    prefix = uri[: len(uri) - len(path)] if uri.endswith(path) else uri.split(path, 1)[0]
    cut = min((i for i in (path.find(c) for c in GLOB_CHARS) if i >= 0), default=-1)
    if cut >= 0:
        base = path[:cut].rsplit("/", 1)[0]
        pattern = glob_regex(path)
        infos = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if pattern.fullmatch(i.path)]
        if not infos:
            raise InputError(f"{uri}: no file matches")
    else:
        infos = [fs.get_file_info(path)]
        if infos[0].type == pafs.FileType.NotFound:
            raise InputError(f"{uri}: no such file or folder")
    found: list[CaptureInput] = []
    for info in infos:
        if info.type == pafs.FileType.Directory:
            inside = sorted((i for i in fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
                             if i.type == pafs.FileType.File and CAPTURE_NAME.search(i.base_name)),
                            key=lambda i: i.path)
            if not inside:
                raise InputError(f"{prefix}{info.path}: no capture files (*.pcap, *.pcapng, *.cap, optionally .gz) "
                                 "in this folder")
            found.extend(CaptureInput(prefix + i.path, i.size or 0) for i in inside)
        elif info.type == pafs.FileType.File:
            found.append(CaptureInput(prefix + info.path, info.size or 0))
    return found


def glob_regex(pattern: str) -> re.Pattern:
    """A shell glob as a regular expression over whole paths: ``*`` and ``?`` stay within one folder,
    ``**`` crosses folders, ``[...]`` is a character class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def group_files(files: list[CaptureInput], slots: int, target_bytes: int) -> list[list[int]]:
    """Indexes of ``files`` grouped into tasks: one file per task unless files are small, then several per
    task up to about ``target_bytes``, but never fewer tasks than ``slots`` (the cores to keep busy) while
    there are files to spread. Largest files first, each to the lightest task (longest processing time first),
    so one big file does not end up behind a queue of small ones."""
    if not files:
        return []
    total = sum(f.size for f in files)
    tasks = min(len(files), max(slots, -(-total // max(1, target_bytes))))
    order = sorted(range(len(files)), key=lambda i: (-files[i].size, i))
    groups: list[list[int]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for i in order:
        lightest = min(range(tasks), key=lambda t: (loads[t], len(groups[t])))
        groups[lightest].append(i)
        loads[lightest] += max(files[i].size, 1)
    for g in groups:
        g.sort()
    groups.sort(key=lambda g: -sum(files[i].size for i in g))  # biggest tasks start first
    return [g for g in groups if g]
