"""What the summary says about ports: those port detection took for Kafka and why, and the TCP left aside.

A user who sees fewer exchanges than expected must learn from the screen where the rest went: a port not
given, a TLS listener without its key log, flows that showed nothing of Kafka.
"""

from __future__ import annotations

from analyzer.pipeline.analyze import FileReport

LISTED_PORTS = 8  # ports named in a line; the rest are counted


def found_ports(reports: list[FileReport]) -> dict[int, tuple[str, int, str]]:
    """Port -> (why, packet, file) over every file: the earliest evidence in the first file that showed it."""
    found: dict[int, tuple[str, int, str]] = {}
    for r in reports:
        for port, (reason, frame) in r.ports_found.items():
            found.setdefault(port, (reason, frame, r.name))
    return dict(sorted(found.items()))


def ports_not_decoded(reports: list[FileReport]) -> list[tuple[int | None, int, int]]:
    """(server port or None for the ports past the listed ones, flows, TLS flows), most flows first."""
    total: dict[int, list[int]] = {}
    for r in reports:
        for port, counts in r.ports_not_decoded.items():
            sums = total.setdefault(port, [0, 0])
            sums[0] += counts[0]
            sums[1] += counts[3]
    ranked = sorted(total.items(), key=lambda item: (item[0] < 0, -item[1][0], item[0]))
    return [(port if port >= 0 else None, flows, tls) for port, (flows, tls) in ranked]


def port_lines(reports: list[FileReport], detect_ports: bool) -> list[str]:
    """The summary's lines on ports (none when every TCP flow was decoded and nothing was detected)."""
    lines = []
    for port, (reason, frame, name) in found_ports(reports).items():
        where = f"packet {frame:,}" + (f" of {name}" if len(reports) > 1 else "")
        lines.append(f"Kafka found on port {port}: {reason} ({where}).")
    left = ports_not_decoded(reports)
    if left:
        named = ", ".join(_port_text(port, flows, tls) for port, flows, tls in left[:LISTED_PORTS])
        more = sum(flows for _, flows, _ in left[LISTED_PORTS:])
        rest = f", and {more:,} connection(s) on other ports" if more else ""
        how = "showed nothing of Kafka" if detect_ports else "are on ports not given with --port"
        lines.append(f"TCP not decoded (connections that {how}): {named}{rest}.")
    return lines


def port_hints(reports: list[FileReport], detect_ports: bool) -> list[str]:
    """What to try when few or no exchanges were found: name the ports seen, and what would decode them."""
    left = ports_not_decoded(reports)
    tls = [port for port, _, tls_flows in left if port is not None and tls_flows]
    plain = [port for port, _, tls_flows in left if port is not None and not tls_flows]
    out = []
    if tls:
        out.append(f"TLS on port(s) {_ports(tls)} was not decrypted: give the clients' key log with --tls-keylog "
                   "(port detection then takes the ports whose sessions it holds secrets for).")
    if plain and not detect_ports:
        out.append(f"TCP traffic on port(s) {_ports(plain)}: give Kafka's port with --port, or try --detect-ports.")
    elif plain:
        out.append(f"TCP traffic on port(s) {_ports(plain)} showed no Kafka request or response.")
    return out


def _ports(ports: list[int]) -> str:
    shown = ", ".join(str(p) for p in ports[:LISTED_PORTS])
    return shown + (f" and {len(ports) - LISTED_PORTS} more" if len(ports) > LISTED_PORTS else "")


def _port_text(port: int | None, flows: int, tls: int) -> str:
    where = "other ports" if port is None else f"port {port}"
    kind = ", TLS" if tls == flows else (f", {tls:,} TLS" if tls else "")
    return f"{where} ({flows:,} connection{'s' if flows != 1 else ''}{kind})"
