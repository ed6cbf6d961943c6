"""A three-node Apache Kafka cluster (KRaft) in network namespaces, for captures with inter-broker traffic.

A single node never replicates: no follower Fetch requests, no leadership moving, no client ever told
NOT_LEADER_OR_FOLLOWER. Here every node is broker and controller at once (a KRaft quorum of three, the fastest
layout to start: three JVMs, no separate controllers), each in its own namespace of a ``netns.NetnsLab`` at
``10.77.0.N`` (``10.77.k.N`` when another run holds slot 0), with the PLAINTEXT listener on ``port`` (clients and
replication: ``inter.broker.listener.name``) and the CONTROLLER listener on ``controller_port`` (Raft Fetch/Vote
between the voters, broker registrations and heartbeats). Both ports are the same on every node, since every node
has an address of its own. All nodes are formatted with one cluster id; the internal topics have replication factor
3 and min.insync.replicas 2.

A node can be stopped (SIGTERM: a controlled shutdown that moves its leaderships away first; or SIGKILL) and
started again on the same data, which is what makes clients refresh metadata and followers catch up. The
preferred-leader check runs every few seconds, so the restarted node gets its leaderships back while the clients
are still producing: the broker that just lost them answers NOT_LEADER_OR_FOLLOWER.

``capture()`` gives a tcpdump on the bridge, where client-to-broker and broker-to-broker frames both pass.
The jars are the ones ``apache_kafka`` resolves from Maven Central; heaps are small (the recorder's machine has
two cores for three brokers and the clients).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .apache_kafka import (
    DEFAULT_VERSION,
    JVM_OPTIONS,
    STARTED_MARKER,
    broker_artifacts,
    java_problem,
    logging_options,
    major_version,
    random_cluster_id,
    resolve_jars,
)
from .brokers import BrokerError, wait_for_port
from .capture import CaptureError, LoopbackCapture, choose_tool
from .netns import NetnsLab, netns_problem

NODES = 3
START_TIMEOUT = 120.0  # three JVMs starting at once on two cores
STOP_TIMEOUT = 60.0


def cluster_problem() -> str | None:
    """Why the cluster cannot run here (no Java/Maven, no root or ip netns), or None."""
    return java_problem() or netns_problem()


def wall_clock() -> dict[str, Any]:
    """Now, as epoch seconds (to line up with capture timestamps) and in UTC words."""
    now = time.time()
    return {"at": round(now, 3), "at_utc": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")}


@dataclass
class ClusterNode:
    """One Kafka process (broker and controller) in one namespace; its folder survives a restart."""

    node_id: int
    host: str
    work: Path
    exec_prefix: list[str]
    java: list[str]  # java, classpath and options, up to the heap
    proc: subprocess.Popen | None = field(default=None, repr=False)
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.work / "server.log"

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.is_file() else 0

    def launch(self, heap: str) -> None:
        out = (self.work / "kafka.out").open("a")
        self.proc = subprocess.Popen([*self.exec_prefix, *self.java, f"-Xmx{heap}", "-Xms64m", "kafka.Kafka",
                                      str(self.work / "server.properties")],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        self.starts += 1

    def started_since(self, offset: int) -> bool:
        """Whether the server logged that it finished starting after byte ``offset`` of its log."""
        if not self.log_path.is_file():
            return False
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return STARTED_MARKER.encode() in log.read()

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        """Wait for the process to exit; SIGKILL it when it takes longer than ``timeout``. Its exit code."""
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 6) -> str:
        texts = []
        for name in ("kafka.out", "server.log"):
            path = self.work / name
            if path.is_file():
                texts += [line for line in path.read_text(errors="replace").splitlines()
                          if "ERROR" in line or "Exception" in line or name == "kafka.out"][-lines:]
        return " | ".join(texts[-lines:]) or "no log written"


class ApacheKafkaCluster:
    """Three combined KRaft nodes in network namespaces, state in one temporary folder; a context manager."""

    software = "apache-kafka"

    def __init__(self, *, version: str = DEFAULT_VERSION, nodes: int = NODES, port: int = 9092,
                 controller_port: int = 9093, heap: str = "384m", extra_config: dict[str, str] | None = None) -> None:
        self.version = version
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        self.lab = NetnsLab(nodes)
        self.cluster_id = random_cluster_id()
        self.startup_seconds: float | None = None
        self.nodes: list[ClusterNode] = []
        self._work: tempfile.TemporaryDirectory | None = None

    # -- addresses -----------------------------------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        return self.lab.hosts

    @property
    def host(self) -> str:
        return self.hosts[0]

    @property
    def bootstrap(self) -> str:
        """Every node's PLAINTEXT listener, node 1 first (the Java clients number them -1, -2, ...)."""
        return ",".join(f"{host}:{self.port}" for host in self.hosts)

    def address_of(self, connection: str) -> str | None:
        """The broker address behind a Java client's ``node N`` (a node id, ``+N`` for the group coordinator's
        connection in 4.x, ``2147483647-N`` in 3.x, ``-k`` for the k-th bootstrap address)."""
        word = connection.removeprefix("node ").strip()
        try:
            number = int(word.lstrip("+"))
        except ValueError:
            return None
        if number < 0:
            index = -number - 1
        elif number > 2**30:
            index = 2**31 - 1 - number - 1
        else:
            index = number - 1
        return f"{self.hosts[index]}:{self.port}" if 0 <= index < len(self.hosts) else None

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    # -- configuration -------------------------------------------------------------------------------------
    def _server_properties(self, node_id: int, host: str, work: Path) -> str:
        voters = ",".join(f"{i}@{h}:{self.controller_port}" for i, h in enumerate(self.hosts, start=1))
        replicas = str(len(self.hosts))
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(work / "data"),
            "num.partitions": "3",
            "default.replication.factor": replicas,
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            # the restarted node takes its preferred leaderships back within seconds, not the default 5 minutes
            "leader.imbalance.check.interval.seconds": "5",
            "replica.lag.time.max.ms": "10000",
        }
        if major_version(self.version) >= 4:
            settings.update({"share.coordinator.state.topic.replication.factor": replicas,
                             "share.coordinator.state.topic.min.isr": "2"})
        settings.update(self.extra_config)
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> ApacheKafkaCluster:
        problem = cluster_problem()
        if problem:
            raise BrokerError(problem)
        jars = resolve_jars(f"apache-kafka-{self.version}", broker_artifacts(self.version))
        began = time.monotonic()
        try:
            self.lab.up()
            self._work = tempfile.TemporaryDirectory(prefix=f"apache-kafka-cluster-{self.version}-")
            formats = []
            for index, host in enumerate(self.hosts):
                work = Path(self._work.name) / f"node{index + 1}"
                work.mkdir()
                (work / "server.properties").write_text(self._server_properties(index + 1, host, work))
                java = ["java", "-cp", str(jars / "*"), *JVM_OPTIONS, *logging_options(self.version, work)]
                self.nodes.append(ClusterNode(index + 1, host, work, self.lab.exec_prefix(index), java))
                formats.append(subprocess.Popen(
                    [*java, "-Xmx256m", "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c",
                     str(work / "server.properties")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    stdin=subprocess.DEVNULL))
            for node, formatting in zip(self.nodes, formats, strict=True):
                output, _ = formatting.communicate(timeout=120)
                if formatting.returncode != 0:
                    raise BrokerError(f"kafka-storage format of node {node.node_id} failed "
                                      f"({formatting.returncode}): {output.strip()[-500:]}")
            for node in self.nodes:
                node.launch(self.heap)
            self._wait_started(self.nodes, [0] * len(self.nodes), began + START_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = round(time.monotonic() - began, 1)
        return self

    def _wait_started(self, nodes: list[ClusterNode], offsets: list[int], deadline: float) -> None:
        """Every node's listener answers and its log says it finished starting after the given offsets."""
        pending = dict(zip((n.node_id for n in nodes), offsets, strict=True))
        while pending:
            for node_id, offset in list(pending.items()):
                node = self.node(node_id)
                assert node.proc is not None
                if node.proc.poll() is not None:
                    raise BrokerError(f"Kafka node {node_id} exited with {node.proc.returncode}: {node.log_tail()}")
                if node.started_since(offset):
                    wait_for_port(node.host, self.port, max(1.0, deadline - time.monotonic()), node.proc)
                    del pending[node_id]
            if pending and time.monotonic() > deadline:
                raise BrokerError(f"Kafka nodes {sorted(pending)} did not log '{STARTED_MARKER}' in time: "
                                  + " | ".join(self.node(i).log_tail(3) for i in pending))
            time.sleep(0.2)

    def stop_node(self, node_id: int, signum: int = signal.SIGTERM) -> dict[str, Any]:
        """Stop one node with ``signum`` and wait until it is gone; what happened, with wall-clock times."""
        node = self.node(node_id)
        began = time.monotonic()
        event = {"event": "stop", "node_id": node_id, "signal": signal.Signals(signum).name, **wall_clock()}
        node.signal(signum)
        code = node.wait(STOP_TIMEOUT)
        return {**event, "exit_code": code, "stopped_after_s": round(time.monotonic() - began, 2),
                "exited": wall_clock()}

    def start_node(self, node_id: int) -> dict[str, Any]:
        """Start a stopped node again on its data and wait until it has finished starting (unfenced)."""
        node = self.node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise BrokerError(f"node {node_id} is still running")
        began = time.monotonic()
        event = {"event": "start", "node_id": node_id, **wall_clock()}
        offset = node.log_size()
        node.launch(self.heap)
        self._wait_started([node], [offset], began + START_TIMEOUT)
        return {**event, "started_after_s": round(time.monotonic() - began, 2), "started": wall_clock()}

    def stop(self) -> None:
        """Stop every node (SIGTERM together, then waited for), remove the namespaces and the state."""
        try:
            for node in self.nodes:
                node.signal(signal.SIGTERM)
            for node in self.nodes:
                node.wait(STOP_TIMEOUT)
        finally:
            try:
                self.lab.down()
            finally:
                if self._work is not None:
                    self._work.cleanup()
                    self._work = None

    def capture(self, path: Path, *, tool: str = "auto", ports: tuple[int, ...] | None = None) -> BridgeCapture:
        """A capture on the bridge of the client and broker listeners (and the controllers' unless ``ports``)."""
        return BridgeCapture(path, ports or (self.port, self.controller_port), iface=self.lab.bridge, tool=tool)

    def describe(self) -> dict[str, Any]:
        return {"software": self.software, "version": self.version, "host": self.host, "port": self.port,
                "controller_port": self.controller_port, "bootstrap": self.bootstrap,
                "nodes": [{"node_id": n.node_id, "host": n.host, "port": self.port,
                           "controller_port": self.controller_port, "roles": "broker,controller",
                           "namespace": self.lab.namespaces[n.node_id - 1]} for n in self.nodes],
                "network": {"bridge": self.lab.bridge, "subnet": f"{self.lab.subnet}.0/24",
                            "clients_from": self.lab.gateway}}

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class BridgeCapture(LoopbackCapture):
    """tcpdump on one interface for several TCP ports (the scapy sniffer takes one port, so tcpdump only)."""

    def __init__(self, path: Path, ports: tuple[int, ...], *, iface: str, tool: str = "auto") -> None:
        if choose_tool(tool) != "tcpdump":
            raise CaptureError("the cluster capture needs tcpdump (several ports on a bridge)")
        super().__init__(path, ports[0], iface=iface, tool="tcpdump")
        self.ports = ports

    def _command(self) -> list[str]:
        command = super()._command()
        return [*command[:-1], " or ".join(f"tcp port {port}" for port in self.ports)]
