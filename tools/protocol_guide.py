"""The generated sections of Apache Kafka's protocol guide, printed by a release's own jar.

Kafka's protocol guide (``docs/protocol.html`` on kafka.apache.org) includes three pages its build prints with
classes of the ``kafka-clients`` jar: every API's request and response grammar, version by version
(``Protocol``), the error codes (``Errors``) and the API keys (``ApiKeys``). Running those classes against a
release's jar gives that release's pages, the text the published guide shows: the 3.9 guide's grammars (all 610)
and error table read line for line as the 3.9.2 jar prints them. The grammars are printed by Kafka's Java code
from its Java message classes, not from anything this repository generates, so the tests compare the generated
tables with them.

``python -m tools.protocol_guide [--release VERSION]`` prints the folder (made once, then reused)::

    <cache>/protocol-guide/<version>/protocol_messages.html   Protocol: headers, then every API's grammars
    <cache>/protocol-guide/<version>/protocol_errors.html     Errors: code, name, retriable, description
    <cache>/protocol-guide/<version>/protocol_api_keys.html   ApiKeys: name and key
    <cache>/protocol-guide/<version>/source.json              {"artifact", "version", "jar_sha256"}

The jars come from Maven Central through :mod:`tools.maven` (the same folder :mod:`tools.kafka_definitions`
resolves); printing needs ``java``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.kafka_definitions import NEWEST
from tools.maven import MavenError, cache_root, jar_of, resolve

ARTIFACT = "org.apache.kafka:kafka-clients"
# page -> the class whose main() prints it (Kafka's build writes docs/generated/<page> the same way)
PAGES = {
    "protocol_messages.html": "org.apache.kafka.common.protocol.Protocol",
    "protocol_errors.html": "org.apache.kafka.common.protocol.Errors",
    "protocol_api_keys.html": "org.apache.kafka.common.protocol.ApiKeys",
}
SOURCE_FILE = "source.json"


def _print_page(jars: Path, main_class: str) -> str:
    ran = subprocess.run(["java", "-cp", f"{jars}/*", main_class], capture_output=True, text=True, check=False)
    if ran.returncode != 0 or "<table" not in ran.stdout:
        raise MavenError(f"{main_class} printed no page: {ran.stderr.strip()[-400:]}")
    return ran.stdout


def prepare(release: str = NEWEST, root: Path | None = None) -> Path:
    """The folder of ``release``'s pages, printed from its ``kafka-clients`` jar unless it is already complete."""
    folder = (root or cache_root()) / "protocol-guide" / release
    if (folder / SOURCE_FILE).is_file() and all((folder / page).is_file() for page in PAGES):
        return folder
    if shutil.which("java") is None:
        raise MavenError("java was not found; the protocol guide's pages are printed by Kafka's own classes")
    jars = resolve(f"kafka-clients-{release}", [f"{ARTIFACT}:{release}"])
    jar = jar_of(jars, "kafka-clients", release)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{release}-", dir=folder.parent) as work:
        staging = Path(work) / release
        staging.mkdir()
        for page, main_class in PAGES.items():
            (staging / page).write_text(_print_page(jars, main_class), encoding="utf-8")
        source = {"artifact": ARTIFACT, "version": release, "jar_sha256": hashlib.sha256(jar.read_bytes()).hexdigest()}
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.protocol_guide", description=__doc__.split("\n")[0])
    parser.add_argument("--release", default=NEWEST, help=f"the Kafka release (default: {NEWEST})")
    parser.add_argument("--out", type=Path, help="where to keep the folders (default: the kafkacap cache)")
    args = parser.parse_args(argv)
    try:
        print(prepare(args.release, args.out))
    except (MavenError, OSError) as exc:
        print(f"protocol_guide: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
