"""``python -m analyzer.cli``: the ``kafkacap`` console script."""

from analyzer.cli.console import script

script()
