"""Worker side: a capture file as a local path the pipeline can memory-map.

Local files are read in place. Files on other filesystems (HDFS, S3, GCS, ...) are streamed through
``pyarrow.fs`` into a temporary folder on the worker's local disk in fixed-size chunks, so memory stays flat
whatever the file size, and the copy keeps the file's name (the tables name files by it). The copy goes as
soon as the file is analysed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pyarrow.fs as pafs

from spark_jobs.inputs import filesystem, is_local, local_path

CHUNK_BYTES = 8 << 20

def local_dirs() -> list[str]:
    """Spark's scratch folders on this worker (YARN and Kubernetes point them at the big disks)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("LOCAL_DIRS") or ""
    return [d for d in dirs.split(",") if d and os.path.isdir(d)]


def copy_to_local(fs: pafs.FileSystem, path: str, dest: str) -> int:
    """Stream ``path`` on ``fs`` to the local file ``dest`` as stored (no transparent decompression)."""
    copied = 0
    with fs.open_input_stream(path, compression=None) as src, open(dest, "wb") as out:
        while chunk := src.read(CHUNK_BYTES):
            out.write(chunk)
            copied += len(chunk)
    return copied


@contextmanager
def local_copies(paths: list[str | None], fs_for=None) -> Iterator[list[str | None]]:
    """Local paths for ``paths`` (absolute; None stays None), copying the remote ones for the duration.

    ``fs_for(uri) -> (filesystem, path)`` overrides how a remote URI is opened (tests use it).
    A copy that fails raises OSError naming the URI; copies made so far are removed.
    """
    scratch: str | None = None
    out: list[str | None] = []
    try:
        for uri in paths:
            if uri is None:
                out.append(None)
            elif fs_for is None and is_local(uri):
                out.append(os.path.abspath(local_path(uri)))
            else:
                if scratch is None:
                    base = local_dirs()
                    scratch = tempfile.mkdtemp(prefix="kafkacap-fetch-", dir=base[0] if base else None)
                fs, inner = (fs_for or filesystem)(uri)
                folder = tempfile.mkdtemp(dir=scratch)  # one per file: files of a set may share a name
                dest = os.path.join(folder, os.path.basename(inner.rstrip("/")) or "capture")
                try:
                    copy_to_local(fs, inner, dest)
                except Exception as exc:  # noqa: BLE001 - every filesystem raises its own kinds
                    raise OSError(f"{uri}: cannot read ({exc})") from exc
                out.append(dest)
        yield out
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


class LazyCopies(Sequence[str]):
    """Local paths of the next files of a rotated set, copied only when the analysis reaches them: it
    follows open connections into the next file for a while and usually stops early, so most of these
    files are never read here. Iteration stops at the first file that cannot be copied (as it stops at one
    that cannot be opened). ``close()`` removes the copies."""

    def __init__(self, uris: Sequence[str], fs_for: Callable | None = None) -> None:
        self._uris = list(uris)
        self._fs_for = fs_for
        self._local: list[str] = []
        self._copies: list = []

    def __len__(self) -> int:
        return len(self._uris)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        while len(self._local) <= index:
            if not self._fetch_next():
                raise IndexError(index)
        return self._local[index]

    def __iter__(self) -> Iterator[str]:
        i = 0
        while i < len(self._uris):
            if i >= len(self._local) and not self._fetch_next():
                return
            yield self._local[i]
            i += 1

    def _fetch_next(self) -> bool:
        uri = self._uris[len(self._local)]
        copies = local_copies([uri], self._fs_for)
        try:
            (path,) = copies.__enter__()
        except OSError:
            return False
        self._copies.append(copies)
        self._local.append(path)
        return True

    def shown(self) -> dict[str, str]:
        """Local path -> the URI it was copied from, for the copies made."""
        return dict(zip(self._local, self._uris, strict=False))

    def close(self) -> None:
        for copies in self._copies:
            copies.__exit__(None, None, None)
        self._copies.clear()
