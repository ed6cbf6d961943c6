"""``--tls-keylog FILE``, the option of every command that analyses captures (``kafkacap spark`` included)."""

from __future__ import annotations

from collections.abc import Callable

import click

TLS_KEYS = "kafkacap.tls_keys"  # where --tls-keylog leaves the key log it read (the click context's meta)


def _tls_keylog(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Read the key log while the command line is parsed: a file that cannot be read is a usage error."""
    if value is None:
        return
    from analyzer.tls.keylog import KeyLogError, read_keylog

    try:
        ctx.meta[TLS_KEYS] = read_keylog(value)
    except KeyLogError as exc:
        raise click.BadParameter(str(exc)) from None


def tls_keylog_option(f: Callable) -> Callable:
    """--tls-keylog FILE: taken by every command that analyses captures, passed on through ``_options``."""
    return click.option("--tls-keylog", type=click.Path(dir_okay=False), callback=_tls_keylog, expose_value=False,
                        metavar="FILE", help="Decrypt TLS connections with the session secrets of this NSS key log "
                        "(SSLKEYLOGFILE). Key logs inside a pcapng (Decryption Secrets Blocks) are used without "
                        "it.")(f)
