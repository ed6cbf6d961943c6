"""Apache Kafka 3.9+/4.x in KRaft mode, one combined broker and controller on loopback, run from Maven jars.

The release tarball is not used: Maven Central is the one Java source every machine of this project reaches,
and ``tools.maven.resolve`` brings ``kafka_2.13`` with its runtime dependencies into a cached folder. The
classes the scripts of a release would call are called directly: ``kafka.tools.StorageTool format`` (with
``--add-scram`` when a SASL_SSL listener is wanted), then ``kafka.Kafka server.properties``.

Kafka 4.4 formats a new cluster at metadata.version 4.4-IV2 with every group protocol's feature finalized
(``group.version=1``, ``share.version=2``, ``streams.version=1``, ``transaction.version=2``) and enables the rebalance
protocols classic, consumer and streams by default (``group.coordinator.rebalance.protocols``, deprecated for the
feature versions; share groups follow ``share.version``): KIP-848 consumer groups, share groups, streams groups and
transactions V2 need no setting. A scenario may add broker settings (``extra_config``, e.g. shorter group heartbeat
intervals, whose 5 s minimum would slow its rebalances); ``describe()`` then names them.

Only the PLAINTEXT listener (``port``) is meant to be captured; the controller listens on another free port,
so the broker's own Raft traffic never enters a capture filtered on ``port``. Settings keep a single node fast
and deterministic: replication factors 1, one partition for the internal topics, no initial rebalance delay.
Kafka 4 logs through log4j2 (``log4j-slf4j-impl`` is added, the Maven artifact brings no binding); 3.x through
reload4j. Either way the log goes to ``server.log`` in the broker's temporary folder.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from .brokers import BrokerError, free_port, port_is_free, stop_process, wait_for_port

DEFAULT_VERSION = "4.4.0"
STARTED_MARKER = "Kafka Server started"
START_TIMEOUT = 60.0
SCRAM_MECHANISM = "SCRAM-SHA-512"
# A test credential for the SASL_SSL listener's user, created at format time; nothing secret.
SCRAM_USER = ("kafkacap", "kafkacap-secret")
STORE_PASSWORD = "kafkacap-store"
# Short-lived JVMs on a small machine: C1 only and the serial collector start fastest and use least CPU.
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = info
"""

LOG4J1_PROPERTIES = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def major_version(version: str) -> int:
    return int(version.split(".", 1)[0])


def broker_artifacts(version: str) -> list[str]:
    """Maven coordinates of a runnable broker: the server jar and an slf4j binding for its logging."""
    if major_version(version) >= 4:
        binding = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"
    else:
        binding = "org.slf4j:slf4j-reload4j:1.7.36"
    return [f"org.apache.kafka:kafka_2.13:{version}", binding]


def java_problem() -> str | None:
    """Why a Kafka broker from Maven jars cannot run here, or None."""
    missing = [tool for tool in ("java", "mvn") if not shutil.which(tool)]
    if missing:
        return (f"{' and '.join(missing)} not found (Apache Kafka is run from Maven Central's jars: "
                "it needs Java 17 and Maven)")
    return None


def resolve_jars(name: str, artifacts: list[str]) -> Path:
    """``tools.maven.resolve`` with its failure turned into a BrokerError."""
    from tools.maven import MavenError, resolve

    try:
        return resolve(name, artifacts)
    except MavenError as exc:
        raise BrokerError(str(exc)) from exc


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` makes it (base64url, no padding, not starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def logging_options(version: str, work: Path) -> list[str]:
    """JVM options that send a node's log to ``work/server.log``: log4j2 from Kafka 4, log4j 1 (reload4j) before."""
    log = work / "server.log"
    if major_version(version) >= 4:
        config = work / "log4j2.properties"
        config.write_text(LOG4J2_PROPERTIES.format(log=log))
        return [f"-Dlog4j2.configurationFile={config}", f"-Dkafka.logs.dir={work}"]
    config = work / "log4j.properties"
    config.write_text(LOG4J1_PROPERTIES.format(log=log))
    return [f"-Dlog4j.configuration=file:{config}", f"-Dkafka.logs.dir={work}"]


class ApacheKafkaBroker:
    """One Apache Kafka node (broker and controller) in KRaft mode, state in a temporary folder; a context manager.

    ``ssl_port`` and ``sasl_ssl_port`` add listeners with a self-signed certificate made by keytool (for
    ``localhost`` and the host address); the SASL_SSL listener takes SCRAM-SHA-512 for ``SCRAM_USER``. Clients
    find the certificate as PEM in ``ca_pem`` and as a PKCS12 trust store in ``truststore``.
    """

    software = "apache-kafka"

    def __init__(self, host: str = "127.0.0.1", port: int = 9092, *, version: str = DEFAULT_VERSION,
                 num_partitions: int = 1, ssl_port: int | None = None, sasl_ssl_port: int | None = None,
                 heap: str = "512m", extra_config: dict[str, str] | None = None) -> None:
        self.host = host
        self.port = port
        self.version = version
        self.num_partitions = num_partitions
        self.ssl_port = ssl_port
        self.sasl_ssl_port = sasl_ssl_port
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        self.controller_port: int | None = None
        self.startup_seconds: float | None = None
        self._work: tempfile.TemporaryDirectory | None = None
        self._proc: subprocess.Popen | None = None

    # -- addresses and files -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return _host_port(self.host, self.port)

    @property
    def ssl_bootstrap(self) -> str | None:
        return _host_port(self.host, self.ssl_port) if self.ssl_port else None

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        return _host_port(self.host, self.sasl_ssl_port) if self.sasl_ssl_port else None

    @property
    def work_dir(self) -> Path:
        if self._work is None:
            raise BrokerError("the broker is not running")
        return Path(self._work.name)

    @property
    def log_path(self) -> Path:
        return self.work_dir / "server.log"

    @property
    def ca_pem(self) -> Path:
        return self.work_dir / "ca.pem"

    @property
    def truststore(self) -> Path:
        return self.work_dir / "truststore.p12"

    @property
    def store_password(self) -> str:
        return STORE_PASSWORD

    @property
    def scram_credentials(self) -> tuple[str, str]:
        return SCRAM_USER

    # -- configuration -------------------------------------------------------------------------------------
    def _listeners(self) -> list[tuple[str, int]]:
        listeners = [("PLAINTEXT", self.port)]
        if self.ssl_port:
            listeners.append(("SSL", self.ssl_port))
        if self.sasl_ssl_port:
            listeners.append(("SASL_SSL", self.sasl_ssl_port))
        return listeners

    def _server_properties(self, work: Path) -> str:
        assert self.controller_port is not None
        advertised = ",".join(f"{name}://{_host_port(self.host, port)}" for name, port in self._listeners())
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{_host_port(self.host, self.controller_port)}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"{advertised},CONTROLLER://{_host_port(self.host, self.controller_port)}",
            "advertised.listeners": advertised,
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
            "log.dirs": str(work / "data"),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
        }
        if major_version(self.version) >= 4:
            settings.update({"share.coordinator.state.topic.replication.factor": "1",
                             "share.coordinator.state.topic.min.isr": "1"})
        if self.ssl_port or self.sasl_ssl_port:
            settings.update({
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(work / "broker.p12"),
                "ssl.keystore.password": STORE_PASSWORD,
                "ssl.key.password": STORE_PASSWORD,
            })
        if self.sasl_ssl_port:
            settings.update({
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            })
        settings.update(self.extra_config)
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _make_keystore(self, work: Path) -> None:
        """A self-signed RSA certificate for localhost and the host address, as keystore, trust store and PEM."""
        if shutil.which("keytool") is None:
            raise BrokerError("keytool not found (it comes with the JDK and makes the broker's certificate)")
        san = f"dns:localhost,ip:{self.host}" if self.host[0].isdigit() or ":" in self.host else \
            f"dns:localhost,dns:{self.host}"
        steps = [
            ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "2",
             "-dname", "CN=localhost", "-ext", f"SAN={san}", "-keystore", str(work / "broker.p12"),
             "-storetype", "PKCS12", "-storepass", STORE_PASSWORD, "-keypass", STORE_PASSWORD],
            ["-exportcert", "-rfc", "-alias", "broker", "-keystore", str(work / "broker.p12"),
             "-storepass", STORE_PASSWORD, "-file", str(work / "ca.pem")],
            ["-importcert", "-noprompt", "-alias", "broker", "-file", str(work / "ca.pem"),
             "-keystore", str(work / "truststore.p12"), "-storetype", "PKCS12", "-storepass", STORE_PASSWORD],
        ]
        for step in steps:
            made = subprocess.run(["keytool", *step], capture_output=True, text=True, check=False)
            if made.returncode != 0:
                raise BrokerError(f"keytool {step[0]} failed: {(made.stdout + made.stderr).strip()[-300:]}")

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> ApacheKafkaBroker:
        problem = java_problem()
        if problem:
            raise BrokerError(problem)
        for _name, port in self._listeners():
            if not port_is_free(self.host, port):
                raise BrokerError(f"{_host_port(self.host, port)} is already in use; stop whatever listens there")
        jars = resolve_jars(f"apache-kafka-{self.version}", broker_artifacts(self.version))
        began = time.monotonic()
        self._work = tempfile.TemporaryDirectory(prefix=f"apache-kafka-{self.version}-")
        work = Path(self._work.name)
        try:
            self.controller_port = free_port(self.host)
            config = work / "server.properties"
            config.write_text(self._server_properties(work))
            if self.ssl_port or self.sasl_ssl_port:
                self._make_keystore(work)
            java = ["java", "-cp", str(jars / "*"), *JVM_OPTIONS, *logging_options(self.version, work)]
            format_command = [*java, "-Xmx256m", "kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
                              "-c", str(config)]
            if self.sasl_ssl_port:
                user, password = SCRAM_USER
                format_command += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
            formatted = subprocess.run(format_command, capture_output=True, text=True, check=False,
                                       stdin=subprocess.DEVNULL, timeout=120)
            if formatted.returncode != 0:
                raise BrokerError(f"kafka-storage format failed ({formatted.returncode}): "
                                  f"{(formatted.stdout + formatted.stderr).strip()[-500:]}")
            out = (work / "kafka.out").open("w")
            self._proc = subprocess.Popen([*java, f"-Xmx{self.heap}", "-Xms64m", "kafka.Kafka", str(config)],
                                          stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
            out.close()
            self._wait_until_started(began + START_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = round(time.monotonic() - began, 1)
        return self

    def _wait_until_started(self, deadline: float) -> None:
        """The listener accepts connections and the server says it has finished starting."""
        assert self._proc is not None
        try:
            wait_for_port(self.host, self.port, max(1.0, deadline - time.monotonic()), self._proc)
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise BrokerError(f"the broker exited with {self._proc.returncode}")
                if self.log_path.is_file() and STARTED_MARKER in self.log_path.read_text(errors="replace"):
                    return
                time.sleep(0.2)
            raise BrokerError(f"the broker did not log '{STARTED_MARKER}' within {START_TIMEOUT:.0f} s")
        except BrokerError as exc:
            raise BrokerError(f"Apache Kafka {self.version} did not start: {exc}; " + self._log_tail()) from None

    def _log_tail(self, lines: int = 8) -> str:
        texts = []
        for name in ("kafka.out", "server.log"):
            path = self.work_dir / name
            if path.is_file():
                interesting = [line for line in path.read_text(errors="replace").splitlines()
                               if "ERROR" in line or "Exception" in line or name == "kafka.out"]
                texts += interesting[-lines:]
        return "last log lines: " + " | ".join(texts[-lines:]) if texts else "no log written"

    def stop(self) -> None:
        stop_process(self._proc, timeout=30)
        self._proc = None
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    def describe(self) -> dict:
        described: dict = {"software": self.software, "version": self.version, "host": self.host,
                           "port": self.port}
        if self.ssl_port:
            described["ssl_port"] = self.ssl_port
        if self.sasl_ssl_port:
            described["sasl_ssl_port"] = self.sasl_ssl_port
            described["sasl_mechanism"] = SCRAM_MECHANISM
        if self.extra_config:  # what a scenario set beyond the defaults (group heartbeat intervals, ...)
            described["config"] = dict(self.extra_config)
        return described

    def __enter__(self) -> ApacheKafkaBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
