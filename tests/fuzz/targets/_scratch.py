"""A scratch file for the targets whose layer reads files (the capture reader, the whole pipeline)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_folder: str | None = None


def scratch_file(data: bytes, name: str = "input.pcap") -> str:
    """``data`` written to a file of this process's scratch folder (one per name, overwritten each call)."""
    global _folder
    if _folder is None:
        _folder = tempfile.mkdtemp(prefix="kafkacap-fuzz-")
        atexit.register(shutil.rmtree, _folder, True)
    path = os.path.join(_folder, name)
    with open(path, "wb") as file:
        file.write(data)
    return path
