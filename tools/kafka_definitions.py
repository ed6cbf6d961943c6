"""Kafka's protocol definitions, taken from the release jars on Maven Central, as the generator's input folder.

``python -m tools.kafka_definitions [--out DIR]`` prints the folder (made once, then reused). The ``kafka-clients``
jar of each release carries the JSON message definitions Kafka generates its own protocol classes from
(``common/message/*.json``) and the ``Errors`` enum, the error table the protocol guide is printed from. So a
fresh clone can regenerate the tables from nothing but Maven Central:

- the newest release (``NEWEST``) for every current API and version, and the error table;
- the last 3.x release (``BEFORE_KIP_896``) for the old versions Kafka 4 removed (KIP-896), which older clients
  still send.

The folder, laid out as ``tools/generate/`` reads it::

    kafka-messages/<version>/*Request.json, *Response.json, RequestHeader.json, ResponseHeader.json
    kafka-messages/<version>/source.json      {"artifact", "version", "commit", "jar_sha256"}
    errors.tsv                                 code, name, retriable, description (from NEWEST's Errors)
    errors.json                                where errors.tsv came from, as source.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tools.maven import MavenError, cache_root, jar_of, resolve

NEWEST = "4.4.0"
BEFORE_KIP_896 = "3.9.2"
RELEASES = (BEFORE_KIP_896, NEWEST)  # oldest first, as the generator takes them
MESSAGE_PREFIX = "common/message/"
ERROR_TABLE_SOURCE = Path(__file__).resolve().parent / "java" / "ErrorTable.java"
LAYOUT = 1  # bump when the folder's layout changes, so older caches are made again


def _wanted(name: str) -> bool:
    return name.endswith(("Request.json", "Response.json")) or name in ("RequestHeader.json", "ResponseHeader.json")


def _jar_source(jar: Path, version: str) -> dict[str, str]:
    with zipfile.ZipFile(jar) as archive:
        properties = archive.read("kafka/kafka-version.properties").decode()
    values = dict(line.split("=", 1) for line in properties.splitlines() if "=" in line)
    if values.get("version") != version:
        raise MavenError(f"{jar.name} says it is version {values.get('version')!r}")
    return {"artifact": "org.apache.kafka:kafka-clients", "version": version, "commit": values.get("commitId", ""),
            "jar_sha256": hashlib.sha256(jar.read_bytes()).hexdigest()}


def _extract_messages(jar: Path, target: Path) -> int:
    count = 0
    with zipfile.ZipFile(jar) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith(MESSAGE_PREFIX) and "/" not in name[len(MESSAGE_PREFIX):] \
                    and _wanted(name[len(MESSAGE_PREFIX):]):
                (target / name[len(MESSAGE_PREFIX):]).write_bytes(archive.read(info))
                count += 1
    if not count:
        raise MavenError(f"{jar.name} holds no message definitions under {MESSAGE_PREFIX}")
    return count


def _error_table(jars: Path) -> str:
    """Run ErrorTable.java against the release's jars: the table as Kafka's own Errors enum has it."""
    for tool in ("javac", "java"):
        if shutil.which(tool) is None:
            raise MavenError(f"{tool} was not found; the error table is read from Kafka's Errors class with Java")
    with tempfile.TemporaryDirectory(prefix="kafka-errors-") as work:
        classpath = f"{jars}/*"
        compiled = subprocess.run(["javac", "-d", work, "-cp", classpath, str(ERROR_TABLE_SOURCE)],
                                  capture_output=True, text=True, check=False)
        if compiled.returncode != 0:
            raise MavenError(f"javac ErrorTable.java failed: {compiled.stderr.strip()[-400:]}")
        ran = subprocess.run(["java", "-cp", f"{classpath}:{work}", "ErrorTable"],
                             capture_output=True, text=True, check=False)
        if ran.returncode != 0 or not ran.stdout.strip():
            raise MavenError(f"ErrorTable failed: {ran.stderr.strip()[-400:]}")
        return ran.stdout


def prepare(out: Path | None = None) -> Path:
    """The definitions folder, made from the jars unless it is already complete."""
    folder = out or cache_root() / "spec"
    stamp = folder / "layout.json"
    expected = {"layout": LAYOUT, "releases": list(RELEASES),
                "error_table_sha256": hashlib.sha256(ERROR_TABLE_SOURCE.read_bytes()).hexdigest()}
    if stamp.is_file() and json.loads(stamp.read_text()) == expected:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spec-", dir=folder.parent) as work:
        staging = Path(work) / "spec"
        for version in RELEASES:
            jars = resolve(f"kafka-clients-{version}", [f"org.apache.kafka:kafka-clients:{version}"])
            jar = jar_of(jars, "kafka-clients", version)
            target = staging / "kafka-messages" / version
            target.mkdir(parents=True)
            _extract_messages(jar, target)
            source = _jar_source(jar, version)
            (target / "source.json").write_text(json.dumps(source, indent=1) + "\n")
            if version == NEWEST:
                (staging / "errors.tsv").write_text(_error_table(jars))
                (staging / "errors.json").write_text(json.dumps(source, indent=1) + "\n")
        (staging / "layout.json").write_text(json.dumps(expected))
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kafka_definitions", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where to make the folder (default: the kafkacap cache)")
    args = parser.parse_args(argv)
    try:
        print(prepare(args.out))
    except (MavenError, OSError) as exc:
        print(f"kafka_definitions: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
