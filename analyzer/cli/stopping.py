"""What a stop signal does while a command finishes what it has open.

Ctrl-C, SIGTERM and SIGHUP end a command (``commands._stop_quietly_on_signals``). A command that finishes on
its way out (``live`` writing its open parts and closing the pcap it keeps) must not be cut short by the next
one: an impatient second Ctrl-C, or the SIGTERM a service manager sends after SIGHUP. While ``finishing`` is
in effect, a signal says on stderr that the finish is under way, once per signal, and is otherwise let go.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

_finishing: list[str] = []  # what is being finished, innermost last


@contextlib.contextmanager
def finishing(what: str) -> Iterator[None]:
    """Stop signals are noted, not acted on, until the block ends."""
    _finishing.append(what)
    try:
        yield
    finally:
        _finishing.pop()


def deferred(signal_name: str) -> bool:
    """True (and a line on stderr) when a finish is under way: the caller lets the signal go."""
    if not _finishing:
        return False
    try:
        sys.stderr.write(f"kafkacap: {signal_name} received while finishing {_finishing[-1]}; "
                         "it ends by itself in a moment\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr gone with the terminal: the finish goes on all the same
        pass
    return True
