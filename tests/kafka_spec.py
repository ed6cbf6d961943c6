"""Kafka's protocol definitions as the generator reads them, made from the release jars on Maven Central.

The folder comes from ``tools/kafka_definitions.py`` (cached after the first run); a test that needs it is skipped
where Maven, Java or Maven Central cannot be reached, and runs on any clone elsewhere.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from tools.kafka_definitions import BEFORE_KIP_896, NEWEST, prepare
from tools.maven import MavenError

__all__ = ["BEFORE_KIP_896", "NEWEST", "available", "definitions"]


@cache
def _prepared() -> Path | str:
    try:
        return prepare()
    except (MavenError, OSError) as exc:
        return str(exc)


def definitions() -> Path:
    """The definitions folder: ``kafka-messages/<release>/`` and ``errors.tsv``."""
    folder = _prepared()
    if isinstance(folder, str):
        pytest.skip(f"Kafka's definitions could not be made from the release jars: {folder}")
    return folder


def available() -> bool:
    """Whether the definitions can be had here (for ``skipif``; made on the first call)."""
    return not isinstance(_prepared(), str)
