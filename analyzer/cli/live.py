"""``kafkacap live``: a Kafka "top" on the wire, with rolling tables (the screen and its loop:
``analyzer.cli.live_view``, loaded when the command runs, so that other commands start quickly)."""

from __future__ import annotations

import datetime as dt
import sys

import click

from analyzer.cli.options import analysis_options
from analyzer.cli.terminal import inert


@click.command("live")
@click.option("-i", "--interface", "iface", help="Network interface to capture on (Linux; root or CAP_NET_RAW).")
@click.option("-r", "--read", "read_path", help="Read a capture stream instead: '-' for standard input "
              "(tcpdump -w - -U | kafkacap live -r -), or a file.")
@analysis_options("ports", "detect_ports", "headers_only", "tls_keylog",
                  notes={"detect_ports": "No kernel filter then."})
@click.option("-w", "--write", "write_dir", type=click.Path(file_okay=False),
              help="Rolling Parquet tables in this folder: DIR/<table>/part-*.parquet, one part per rotation; "
                   "the groups and files tables (of the whole run) one file each, replaced at each rotation.")
@click.option("--pcap", "pcap_path", type=click.Path(dir_okay=False),
              help="Also keep the raw packets (with -i): FILE-<UTC start>-<n>.pcap, one file per rotation, "
                   "which kafkacap export reads as one capture.")
@click.option("--rotate", help="When to start a new part: a time (60s, 5m) or a size (100MB: of the rows "
              "gathered, or of the pcap file). Default with --write or --pcap: 60s.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), help="Stop after this many seconds.")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="Close a connection that carried no packet for this many seconds (ended idle): a peer that "
                   "vanished, or a FIN the capture missed, holds no state for ever.")
@click.option("--no-screen", is_flag=True, help="No live screen: only the final figures (for logs and scripts).")
@click.option("--snapshot", type=click.Path(dir_okay=False), help="Also write the final screen as text here.")
def live(iface, read_path, options, write_dir, pcap_path, rotate, duration, idle_timeout, no_screen,
         snapshot) -> None:
    """Watch Kafka traffic live: requests, errors and service times per API, refreshed every second."""
    from analyzer.capture.live_sources import InterfaceSource, LiveError, RollingPcap, StreamSource, ports_filter
    from analyzer.cli.live_view import parse_rotation, run_live

    if (iface is None) == (read_path is None):
        raise click.UsageError("give -i IFACE (capture) or -r PATH|- (a capture stream), one of them")
    if read_path == "-" and sys.stdin.isatty():
        raise click.UsageError("-r - reads a capture from standard input, which is a terminal here "
                               "(pipe one in: tcpdump -w - -U | kafkacap live -r -)")
    if pcap_path is not None and iface is None:
        raise click.UsageError("--pcap keeps what -i captures; a stream read with -r is a capture already "
                               "(keep it with tee: tcpdump -w - -U | tee FILE | kafkacap live -r -)")
    parse_rotation(rotate)
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        if iface is not None:
            source = InterfaceSource(iface, ports_filter(options.ports, options.detect_ports))
            label, name = f"on {iface}", f"live-{iface}-{started}"
        else:
            source = StreamSource(read_path)
            label, name = f"reading {'standard input' if read_path == '-' else read_path}", f"live-{started}"
        pcap = RollingPcap(pcap_path, source.linktype) if pcap_path is not None else None
    except LiveError as exc:
        raise click.ClickException(str(exc)) from None
    filtered = source.health().filtered_in_kernel
    from rich.console import Console
    from rich.text import Text

    where = Text(f"listening {label}" + ("" if filtered is not False else
                                         " (no kernel filter: every packet is read and sorted here)"))
    Console(stderr=True).print(where)
    if pcap is not None:
        for hidden, path, packets in pcap.recover_leftovers():
            if path is not None:
                click.echo(f"warning: {inert(hidden)}: left by a run that did not finish; its {packets:,} whole "
                           f"packets recovered as {inert(path)} (kafkacap export reads it with the other parts)",
                           err=True)
            else:
                click.echo(f"warning: {inert(hidden)}: left by a run that did not finish; "
                           + ("no whole packet in it" if not packets else "a recovered part has its name")
                           + ", left as it is", err=True)
    run_live(source, options, name=name, label=label, duration=duration, write_dir=write_dir, rotate=rotate,
             snapshot=snapshot, screen=not no_screen, idle_seconds=idle_timeout, pcap=pcap)


def register(group: click.Group) -> None:
    group.add_command(live)
