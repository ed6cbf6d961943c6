"""The analysing options as click options, made from their one declaration (``analyzer.pipeline.options``).

``@analysis_options(*names)`` gives a command the declared options named (all of them when none is), listed in
its help in the declaration's order, and hands the command, in place of their values, one ``options``: the
``Options`` they say (``options_from``). A command reads what it needs of them there (``options.detect_ports``,
``not options.bodies`` for --headers-only), so an option added to the declaration needs no change to it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import click

from analyzer.pipeline.options import OptionSpec, analysis_specs, options_from


def _reader(spec: OptionSpec) -> Callable:
    """The click callback that reads a file option's value as it is parsed (a refusal is a usage error)."""
    read = spec.read

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
        if value is None or read is None:
            return value
        try:
            return read(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def click_option(spec: OptionSpec, note: str | None = None) -> Callable[[Callable], Callable]:
    """One declared option as a click option decorator; ``note``: a sentence of the command's own, after the
    declared help."""
    help_text = f"{spec.help} {note}" if note else spec.help
    if spec.kind == "flag":
        return click.option(*spec.flags, spec.name, is_flag=True, default=bool(spec.default), help=help_text)
    if spec.kind == "int":
        return click.option(*spec.flags, spec.name, type=click.IntRange(spec.low, spec.high),
                            multiple=spec.repeatable, default=spec.default,
                            show_default=not spec.repeatable and spec.default is not None, help=help_text)
    return click.option(*spec.flags, spec.name, type=click.Path(dir_okay=False), default=spec.default,
                        metavar=spec.metavar, callback=_reader(spec), help=help_text)


def analysis_options(*names: str, notes: Mapping[str, str] | None = None) -> Callable[[Callable], Callable]:
    """Decorator: the declared options ``names`` (all when none is named) for a click command, whose function
    then takes ``options`` (an ``Options``) instead of their values. ``notes``: name -> a sentence the command
    adds to that option's help."""
    specs = analysis_specs(names)
    notes = dict(notes or {})
    unknown = set(notes) - {spec.name for spec in specs}
    if unknown:
        raise KeyError(f"notes for options the command does not take: {', '.join(sorted(unknown))}")

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def command(*args, **kwargs):
            values = {spec.name: kwargs.pop(spec.name) for spec in specs}
            return f(*args, options=options_from(values), **kwargs)

        for spec in reversed(specs):  # click lists the option decorated last first
            command = click_option(spec, notes.get(spec.name))(command)
        return command

    return decorate
