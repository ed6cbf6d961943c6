"""Fixtures shared by the test files; the plain helpers they are made from are in tests/helpers.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import GROUP, Paths, export_tables


@pytest.fixture(scope="session")
def export_once(tmp_path_factory) -> Callable[..., Path]:
    """``export_once(paths, *cli_args)``: the folder of ``kafkacap export PATHS --no-progress CLI_ARGS``
    (``export_tables``), made once a session for the same arguments. Shared: read it, never write into it."""
    folders: dict[tuple, Path] = {}

    def export(paths: Paths, *cli_args: object) -> Path:
        given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        key = (tuple(map(os.fspath, given)), tuple(map(str, cli_args)))
        if key not in folders:
            out = tmp_path_factory.mktemp("export") / "out"
            export_tables(given, out, *cli_args, tables=())
            folders[key] = out
        return folders[key]

    return export


@pytest.fixture(scope="session")
def group_export(export_once) -> Path:
    """The consumer-group sample (tansu_consumer_group.pcap) exported with the defaults: the folder, read only."""
    return export_once(GROUP)
