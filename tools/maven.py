"""Java artifacts from Maven Central, resolved once with the machine's Maven and kept in a cache folder.

Kafka's own release jars are the source of truth for the protocol (``kafka-clients`` carries the message
definitions and the error table) and the real broker the samples are recorded against (``kafka_2.13``). A set of
artifacts is resolved by writing a small ``pom.xml`` that depends on them and running ``mvn
dependency:copy-dependencies``, which also brings what they depend on (slf4j, the compression libraries), so a
``java -cp 'DIR/*'`` runs them. The folder is reused while its stamp names the same artifacts.

Where: ``$KAFKACAP_CACHE`` or ``$XDG_CACHE_HOME/kafkacap`` (``~/.cache/kafkacap``), under ``maven/<name>/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape


class MavenError(RuntimeError):
    """The artifacts could not be resolved (no Maven, no network to Maven Central, an unknown version)."""


def cache_root() -> Path:
    explicit = os.environ.get("KAFKACAP_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkacap"


def _pom(artifacts: Sequence[str]) -> str:
    dependencies = []
    for coordinate in artifacts:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise MavenError(f"not group:artifact:version: {coordinate!r}")
        group, artifact, version = (escape(p) for p in parts)
        dependencies.append(f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                            f"<version>{version}</version></dependency>")
    return "\n".join([
        '<project xmlns="http://maven.apache.org/POM/4.0.0">',
        "  <modelVersion>4.0.0</modelVersion>",
        "  <groupId>kafkacap.local</groupId><artifactId>resolve</artifactId><version>0</version>",
        "  <packaging>pom</packaging>",
        "  <dependencies>", *dependencies, "  </dependencies>",
        "</project>", ""])


def resolve(name: str, artifacts: Sequence[str], *, root: Path | None = None) -> Path:
    """The folder holding the jars of ``artifacts`` (``group:artifact:version``) and their runtime dependencies."""
    folder = (root or cache_root()) / "maven" / name
    stamp = folder / "artifacts.json"
    wanted = sorted(artifacts)
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return folder
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("Maven (mvn) was not found; it fetches Kafka's jars from Maven Central")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=folder.parent) as work:
        work_path = Path(work)
        (work_path / "pom.xml").write_text(_pom(wanted))
        lib = work_path / "lib"
        result = subprocess.run(
            [mvn, "-q", "-B", "-f", str(work_path / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
            capture_output=True, text=True, check=False)
        if result.returncode != 0 or not lib.is_dir():
            tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
            raise MavenError(f"mvn could not resolve {', '.join(wanted)}: " + " / ".join(tail))
        (lib / "artifacts.json").write_text(json.dumps(wanted))
        if folder.exists():
            shutil.rmtree(folder)
        lib.rename(folder)
    return folder


def jar_of(folder: Path, artifact: str, version: str) -> Path:
    """The jar of one artifact inside a resolved folder."""
    path = folder / f"{artifact}-{version}.jar"
    if not path.is_file():
        raise MavenError(f"{path.name} is not in {folder}")
    return path
