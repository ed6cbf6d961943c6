"""kafkacap's analysis of Kafka traffic in packet captures. As a library: ``from analyzer import analyze``
(analyzer.api), loaded when first named, so that the command line starts without it."""

from __future__ import annotations

_API = ("analyze", "analyze_batches", "Analysis", "options")


def __getattr__(name: str):
    if name in _API:
        from analyzer import api

        return getattr(api, name)
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return [*globals(), *_API]
