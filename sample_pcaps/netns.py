"""Test hosts in Linux network namespaces, joined by a bridge, so a multi-broker capture looks like a network.

On loopback every broker of a cluster would share one address and the inter-broker traffic would never cross an
interface a capture of the clients' side sees. Here each node gets a namespace of its own (``kafkacap0-node1``
...) with ``eth0`` at ``10.77.0.N/24``, the other end of its veth pair plugged into a bridge in the root namespace
(``kafkacap0-br0``, ``10.77.0.254/24``). The recorder's clients stay in the root namespace and reach the nodes
over the bridge; a capture on the bridge (promiscuous, as tcpdump opens it) sees every frame once, client to
broker and broker to broker alike.

Everything is made with ``ip`` at run time and removed by ``down()``, which a context manager always calls.
Several runs can coexist (a recording and the test suite): each takes a slot, the first whose lock file it can
lock, and slot ``k`` names everything ``kafkacap{k}-...`` on ``10.77.{k}.0/24`` (slot 0 is ``kafkacap0-node1``
at ``10.77.0.1``). The lock dies with its process, so whatever a killed run left in a slot it can lock is stale
and ``up()`` removes it first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .brokers import BrokerError

PREFIX = "kafkacap"
SUBNET = "10.77"
SLOTS = 16
BRIDGE_HOST = 254  # the root namespace's address on the bridge: 10.77.0.254


def netns_problem() -> str | None:
    """Why namespaces, veth pairs and a bridge cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed: the cluster's hosts are network namespaces"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        return f"ip netns does not work here: {listed.stderr.strip()[:200]}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise BrokerError(f"ip {' '.join(args)} failed: {done.stderr.strip()[:300]}")
    return done


def _link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name, check=False).returncode == 0


def _namespaces() -> set[str]:
    listed = _ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def namespace_pids(namespace: str) -> list[int]:
    done = _ip("netns", "pids", namespace, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def _lock_dir() -> Path:
    run_lock = Path("/run/lock")
    return run_lock if run_lock.is_dir() and os.access(run_lock, os.W_OK) else Path(tempfile.gettempdir())


@dataclass
class NetnsLab:
    """``nodes`` namespaces on one bridge; ``hosts[i]`` is node i+1's address, ``exec_prefix(i)`` runs in it.

    The slot (names and subnet) is chosen by ``up()``; until then the names are slot 0's."""

    nodes: int = 3
    slot: int = 0
    namespaces: list[str] = field(init=False)
    hosts: list[str] = field(init=False)
    _made: bool = field(init=False, default=False)
    _lock: IO[bytes] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.nodes < BRIDGE_HOST:
            raise ValueError(self.nodes)
        self._name(self.slot)

    def _name(self, slot: int) -> None:
        self.slot = slot
        self.namespaces = [f"{self.prefix}-node{i}" for i in range(1, self.nodes + 1)]
        self.hosts = [f"{self.subnet}.{i}" for i in range(1, self.nodes + 1)]

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.slot}"

    @property
    def subnet(self) -> str:
        return f"{SUBNET}.{self.slot}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br0"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge, where the clients' connections come from."""
        return f"{self.subnet}.{BRIDGE_HOST}"

    def _host_side(self, index: int) -> str:
        return f"{self.prefix}-v{index + 1}"

    def exec_prefix(self, index: int) -> list[str]:
        """The words that run a command inside node ``index``'s namespace (``ip netns exec`` execs it: the pid
        of the child is the command's own)."""
        return ["ip", "netns", "exec", self.namespaces[index]]

    def _leftovers(self) -> bool:
        present = _namespaces()
        return bool(present.intersection(self.namespaces)) or _link_exists(self.bridge) or any(
            _link_exists(self._host_side(i)) for i in range(self.nodes))

    def _take_slot(self) -> None:
        """Lock the first free slot's file (held until ``down()``) and take its names."""
        for slot in range(SLOTS):
            lock = (_lock_dir() / f"kafkacap-netns-{slot}.lock").open("wb")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            self._lock = lock
            self._name(slot)
            return
        raise BrokerError(f"all {SLOTS} network namespace slots are taken by other runs")

    def _release_slot(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases its lock
            self._lock = None

    def up(self) -> NetnsLab:
        problem = netns_problem()
        if problem:
            raise BrokerError(problem)
        self._take_slot()
        if self._leftovers():
            problems = self._remove()  # left behind by a run that was killed before its clean-up
            if problems:
                self._release_slot()
                raise BrokerError(f"could not remove what a killed run left in slot {self.slot}: {problems}")
        self._made = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for index, (namespace, host) in enumerate(zip(self.namespaces, self.hosts, strict=True)):
                host_side, node_side = self._host_side(index), f"{self.prefix}-p{index + 1}"
                _ip("netns", "add", namespace)
                _ip("link", "add", host_side, "type", "veth", "peer", "name", node_side)
                _ip("link", "set", node_side, "netns", namespace)
                _ip("-n", namespace, "link", "set", node_side, "name", "eth0")
                _ip("-n", namespace, "addr", "add", f"{host}/24", "dev", "eth0")
                _ip("-n", namespace, "link", "set", "eth0", "up")
                _ip("-n", namespace, "link", "set", "lo", "up")  # a node reaches its own address through lo
                _ip("link", "set", host_side, "master", self.bridge)
                _ip("link", "set", host_side, "up")
        except BaseException:
            self.down()
            raise
        return self

    def _remove(self) -> list[str]:
        problems = []
        present = _namespaces()
        for namespace in self.namespaces:
            if namespace not in present:
                continue
            for pid in namespace_pids(namespace):  # only this lab's own children can live in its namespaces
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            done = _ip("netns", "del", namespace, check=False)
            if done.returncode != 0:
                problems.append(done.stderr.strip())
        for link in [*(self._host_side(i) for i in range(self.nodes)), self.bridge]:
            # a veth goes with its namespace's end, a moment after the namespace (so it may vanish under us);
            # the bridge stays until deleted
            if _link_exists(link):
                done = _ip("link", "del", link, check=False)
                if done.returncode != 0 and _link_exists(link):
                    problems.append(done.stderr.strip())
        return problems

    def down(self) -> None:
        if not self._made:
            self._release_slot()
            return
        problems = self._remove()
        self._made = False
        self._release_slot()
        if problems:
            raise BrokerError("network namespaces not fully removed: " + "; ".join(problems))

    def __enter__(self) -> NetnsLab:
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        self.down()
