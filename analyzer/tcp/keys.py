"""Flow keys: how the capture layer names a TCP flow (source address, destination address, source port,
destination port, in network order, as one bytes object), and the few operations the later layers need on them.

They belong to tcp, which routes packets by them; the session layer reads the endpoints of its connections
from them.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache


def endpoint_text(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


# Addresses a capture repeats (its brokers; a flood's sources) as one string each, converted once: the
# connections to one broker share its text (a string fewer per connection).
address_text = lru_cache(maxsize=1 << 16)(endpoint_text)


def split_key(key: bytes) -> tuple[bytes, bytes, int, int]:
    """A capture key (src addr + dst addr + ports, network order) into its parts."""
    a = (len(key) - 4) // 2
    return key[:a], key[a:2 * a], int.from_bytes(key[2 * a:2 * a + 2], "big"), int.from_bytes(key[-2:], "big")


def reverse_key(key: bytes) -> bytes:
    a = (len(key) - 4) // 2
    return key[a:2 * a] + key[:a] + key[-2:] + key[2 * a:2 * a + 2]
