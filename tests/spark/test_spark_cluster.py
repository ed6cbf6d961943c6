"""The Spark job on a real cluster manager, with a fault: a standalone master and two one-core workers
started from the installed pyspark, the job shipped with ``spark-submit --archives`` (kafkacap's installed
packages, compiled modules included), and one worker killed (SIGKILL, with its executor and Python workers)
while it runs a write task. The job must still finish with the rows ``kafkacap export`` gives for the same
inputs: nothing lost, nothing written twice by the retried task.

Why every column is compared: the tables hold no analysis timing or host-dependent value (the ``files`` table
gives each file's path as given, its size and its capture times), and the analysis is deterministic, so a
task recomputed on the other executor gives the same rows.

The executors' Python sees the venv's site-packages without kafkacap's own packages: ``analyzer``,
``dissectors`` and ``spark_jobs`` reach them only through the archive, as on a cluster without kafkacap installed.
The cluster lives in the test's temporary folder (ports chosen free, bound to 127.0.0.1) and is killed in
every case, and with the test process if that dies first (Linux parent-death signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pandas", reason="pyspark 4.0 checks for pandas before any mapInArrow")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for Spark", allow_module_level=True)
if not Path("/proc/self/stat").exists():
    pytest.skip("finding the cluster's processes needs /proc", allow_module_level=True)

from tests.spark.test_spark_job import SAMPLES, SPLIT_SOURCE, TABLES, _cli_export, _dataset, _rotate, _rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("analyzer", "dissectors", "spark_jobs")
SPARK_HOME = Path(pyspark.__file__).resolve().parent
COPIES = 6  # copies of the sample captures: enough tasks (about 30) that both executors are busy when the kill comes
WAIT_SECONDS = 240  # for any one step; the whole test took 80-120 s on a busy 2-core machine


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies, so no JVM outlives a killed pytest."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _process_tree(roots: set[int]) -> set[int]:
    """``roots`` and all their descendants. PySpark's daemon moves its Python workers to a process group of
    their own, so killing the JVMs' groups is not enough."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def _kill_tree(pid: int) -> None:
    for _ in range(3):  # again, for processes forked while the first pass ran
        tree = _process_tree({pid})
        for p in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        if tree == {pid}:
            break


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Cluster:
    """A standalone master and its workers, each a process group of its own, logging into ``base/logs``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.logs = base / "logs"
        self.procs: dict[str, subprocess.Popen] = {}
        for name in ("logs", "local", "conf"):
            (base / name).mkdir()
        (base / "conf" / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n\n")
        drop = ("PYTHONPATH", "SPARK_HOME", "SPARK_CONF_DIR", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                "PYSPARK_SUBMIT_ARGS", "SPARK_LOCAL_DIRS", "SPARK_WORKER_DIR")
        self.env = {k: v for k, v in os.environ.items() if k not in drop}
        self.env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(base / "conf"), SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_LOCAL_DIRS=str(base / "local"), SPARK_LOG_DIR=str(self.logs),
                        SPARK_PID_DIR=str(base), SPARK_DAEMON_MEMORY="512m")
        master_port, self.master_ui = _free_ports(2)
        self.master_url = f"spark://127.0.0.1:{master_port}"
        self.worker_uis: dict[str, int] = {}
        self.start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(master_port), "--webui-port", str(self.master_ui)])

    def start(self, name: str, args: list[str], program: str = "spark-class",
              env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / program), *args], env=env or self.env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str) -> None:
        port, ui = _free_ports(2)
        work = self.base / name
        work.mkdir()
        self.worker_uis[name] = ui
        self.start(name, ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", str(ui), "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                          self.master_url])

    def master_state(self) -> dict:
        return _get_json(f"http://127.0.0.1:{self.master_ui}/json/") or {}

    def executors_of(self, worker: str) -> set[str]:
        state = _get_json(f"http://127.0.0.1:{self.worker_uis[worker]}/json/") or {}
        return {str(e["id"]) for e in state.get("executors", [])}

    def wait_for(self, what: str, condition) -> object:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name != "submit":
                    pytest.fail(f"{name} exited ({proc.returncode}) waiting for {what}:\n"
                                f"{_tail(self.logs / f'{name}.log')}")
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        pytest.fail(f"timed out waiting for {what}")

    def kill(self, name: str) -> None:
        _kill_tree(self.procs[name].pid)
        self.procs[name].wait(timeout=30)

    def shutdown(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            _kill_tree(proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A master and two workers of one core each, all alive; killed (process trees) whatever happens."""
    base = tmp_path / "cluster"
    base.mkdir()
    cluster = None
    try:
        cluster = Cluster(base)
        for name in ("worker1", "worker2"):
            cluster.start_worker(name)
        cluster.wait_for("two alive workers", lambda: sum(
            w.get("state") == "ALIVE" for w in cluster.master_state().get("workers", [])) == 2)
        yield cluster
    finally:
        if cluster is not None:
            cluster.shutdown()


def _packages_archive(base: Path) -> Path:
    """The archive of kafkacap's packages that docs/spark.md tells users to ship with --archives, laid out as
    its ``pip install --no-deps --target`` lays them out, without compiling the modules again (47 s of the
    suite): setuptools' build_py copies what the install takes besides the compiled modules (the sources and
    the package data pyproject.toml declares), and the compiled modules this run imports go beside their
    sources, as the install puts them. The archive itself is made by the command docs/spark.md gives."""
    target = base / "kafkacap-pkgs"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(target)], cwd=ROOT,
                   check=True, capture_output=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*.pyx"):
            compiled = source.with_name(source.stem + suffix)
            assert compiled.exists(), f"{compiled} is not built"
            shutil.copy(compiled, target / compiled.relative_to(ROOT))
    archive = base / "kafkacap-pkgs.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(target), *PACKAGES], check=True)
    return archive


def _executor_python(base: Path) -> Path:
    """A Python for the executors: this interpreter without site processing, its site-packages folders on
    the path minus kafkacap's packages and their editable-install hooks (which would find them without the
    archive)."""
    packages = base / "site-packages"
    packages.mkdir()
    site_folders = {*site.getsitepackages(), site.getusersitepackages()}
    for folder in dict.fromkeys(p for p in sys.path if p in site_folders and os.path.isdir(p)):
        for entry in Path(folder).iterdir():
            name = entry.name
            if name in PACKAGES or name.startswith("__editable__") or name.endswith(".pth"):
                continue
            if not (packages / name).exists():
                (packages / name).symlink_to(entry)
    wrapper = base / "executor-python"
    path = f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{packages}"'
    wrapper.write_text(f'#!/bin/sh\n{path} exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-c", "import pyarrow, cramjam\nimport analyzer"], capture_output=True,
                           text=True, cwd=base, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert "No module named 'analyzer'" in probe.stderr, probe.stderr  # only the archive can supply it
    return wrapper


def _inputs(folder: Path) -> Path:
    """COPIES folders of the sample captures, a rotated set whose exchanges cross files, a truncated and a
    random-bytes capture."""
    captures = sorted(p for p in SAMPLES.iterdir() if ".pcap" in p.name)
    for i in range(COPIES):
        copy = folder / f"c{i:02d}"
        copy.mkdir(parents=True)
        for capture in captures:
            shutil.copy(capture, copy / capture.name)
    _rotate(SPLIT_SOURCE, folder / "rotated", 4)
    damaged = folder / "damaged"
    damaged.mkdir()
    data = (SAMPLES / "tansu_broker_errors.pcap").read_bytes()
    (damaged / "truncated.pcap").write_bytes(data[: len(data) * 2 // 3])
    (damaged / "garbage.pcap").write_bytes(bytes(range(256)) * 40)
    return folder


def _running_write_tasks(ui: int) -> list[dict]:
    """Tasks running now in the stages of the job's write jobs (per the application's status API), while such
    a stage still has a task to start: the status API lags, and a task it calls running may have ended by the
    time its executor is killed, but then its executor is likely to have taken the next one."""
    apps = _get_json(f"http://127.0.0.1:{ui}/api/v1/applications") or []
    if not apps:
        return []
    stages = _get_json(f"http://127.0.0.1:{ui}/api/v1/applications/{apps[0]['id']}/stages"
                       "?status=active&details=true") or []
    return [task for stage in stages if (stage.get("description") or "").startswith("kafkacap: write")
            and _waiting_tasks(stage) >= 1
            for task in (stage.get("tasks") or {}).values() if task.get("status") == "RUNNING"]


def _waiting_tasks(stage: dict) -> int:
    """A stage's tasks not started yet."""
    started = sum(stage.get(k, 0) for k in ("numActiveTasks", "numCompleteTasks", "numFailedTasks",
                                            "numKilledTasks"))
    return stage.get("numTasks", 0) - started


def _events(folder: Path) -> list[dict]:
    (log,) = [p for p in folder.iterdir() if not p.name.endswith(".inprogress")]
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_job_survives_a_killed_worker_with_the_cli_rows(cluster: Cluster, tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in")
    out = tmp_path / "out"
    events = tmp_path / "events"
    events.mkdir()
    driver_port, block_port, ui = _free_ports(3)
    env = {**cluster.env, "PYSPARK_PYTHON": str(_executor_python(tmp_path)),
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    conf = {
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.port": driver_port, "spark.blockManager.port": block_port, "spark.ui.port": ui,
        "spark.driver.memory": "1g", "spark.executor.memory": "512m", "spark.cores.max": 2,
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    submit = cluster.start("submit", [
        "--master", cluster.master_url, "--name", "kafkacap-cluster-test",
        "--archives", f"{_packages_archive(tmp_path)}#kafkacap", "--conf", "spark.executorEnv.PYTHONPATH=kafkacap",
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        str(ROOT / "spark_jobs" / "export_job.py"), str(inputs), "-o", str(out), "--detect-ports", "--deliveries",
        "--target-mb", "1",
    ], program="spark-submit", env=env)

    def driver_log() -> str:
        return _tail(cluster.logs / "submit.log")

    def write_tasks_running() -> list[dict]:
        if submit.poll() is not None:
            pytest.fail(f"the job ended before its write stage:\n{driver_log()}")
        return _running_write_tasks(ui)

    running = cluster.wait_for("a write task running", write_tasks_running)
    executor = str(running[0]["executorId"])
    victim = next(w for w in ("worker1", "worker2") if executor in cluster.executors_of(w))
    cluster.kill(victim)
    assert submit.poll() is None, "the job finished before the kill"
    try:
        submit.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not finish after the kill:\n{driver_log()}")
    assert submit.returncode == 0, driver_log()

    # The kill failed a write task, which ran again on the other executor and succeeded.
    log = _events(events)
    write_stages = {stage for e in log if e["Event"] == "SparkListenerJobStart"
                    and (e.get("Properties") or {}).get("spark.job.description", "").startswith("kafkacap: write")
                    for stage in e["Stage IDs"]}
    ends = [e for e in log if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in write_stages]
    lost = [e for e in ends if e["Task End Reason"]["Reason"] == "ExecutorLostFailure"
            and e["Task Info"]["Executor ID"] == executor]
    assert lost, "no write task was running on the killed executor"
    for e in lost:
        task = (e["Stage ID"], e["Task Info"]["Index"])
        retried = [r for r in ends if (r["Stage ID"], r["Task Info"]["Index"]) == task
                   and r["Task End Reason"]["Reason"] == "Success"]
        assert retried and all(r["Task Info"]["Executor ID"] != executor for r in retried), task

    # Every table holds exactly the CLI's rows: none lost, none twice.
    expected = _cli_export([str(inputs)], tmp_path / "cli")
    for table in TABLES:
        got = _dataset(out / table).drop_columns(["capture_date"])
        assert got.num_rows == expected[table].num_rows, table
        assert _rows(got) == _rows(expected[table]), table
    files = {r["capture_file"]: r for r in _dataset(out / "files").to_pylist()}
    assert files["cap.pcap"]["continues_in"] == "cap.pcap1" and files["garbage.pcap"]["status"] == "unreadable"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging folder left
    assert [p for p in out.rglob(".*")] == []  # nor the killed attempt's partial files
