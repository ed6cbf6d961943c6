"""kcat, librdkafka's command-line client (Debian's ``kcat``), in the recordings: run as a process, read back.

Operators meet Kafka through kcat more than through any library, and Debian's kcat links Debian's own librdkafka,
a release older than the one in confluent-kafka's wheel, so it negotiates older Produce and Fetch versions.

Everything in the truth comes from kcat's own output:

- stderr with ``-d protocol``: librdkafka's ``Sent ProduceRequest (v7, ... CorrId 5)`` / ``Received ...Response``
  lines, the same confluent-kafka writes, handed to ``ClientTrace.librdkafka_line`` as they arrive (no local port,
  so requests are keyed by client id and correlation id, as confluent-kafka's are);
- producer with ``-vvv`` (on stderr): one delivery report per record, ``% Message delivered to partition 2 (offset 5) on
  broker 1`` (one kcat per topic, so the topic is the one it was given), or ``% Delivery failed for message``;
- consumer with ``-f``: one line per record handed over, topic, partition and offset;
- consumer with ``-d cgrp``: at close librdkafka removes each partition from the assignment with its stored offset
  (``Removing t [0] from assignment (..., stored offset=6)``), commits those (``OffsetCommit for 3 partition(s)
  ...: returned: Success``) and leaves the group. kcat itself prints no commits; these lines are the client's word
  on what it committed, and the truth takes them only when that commit returned Success.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .clients import Context

CLIENT = "kcat"
RUN_TIMEOUT = 60.0
# kcat's verbose delivery report (-vvv), and its failure report
DELIVERED = re.compile(r"^% Message delivered to partition (?P<partition>-?\d+) \(offset (?P<offset>-?\d+)\)")
DELIVERY_FAILED = re.compile(r"^% Delivery failed for message: (?P<why>.*)$")
# librdkafka's cgrp debug lines when a consumer closes
REMOVED = re.compile(r"\]: Removing (?P<topic>\S+) \[(?P<partition>\d+)\] from assignment \(.*stored "
                     r"offset=(?P<offset>-?\d+|INVALID)\)")
COMMITTING = re.compile(r"\|COMMIT\|.*: Committing offsets for (?P<count>\d+) partition\(s\)")
# its count is of the assignment handed in (partitions with no stored offset too), not of the offsets sent
COMMITTED = re.compile(r"\|COMMIT\|.*: OffsetCommit for \d+ partition\(s\) .*: returned: (?P<result>.*)$")
# kcat prints some messages in pieces ("% Group g rebalanced ...: assigned: " then each partition), and a
# librdkafka line written in between lands inside that text: it is split off and read on its own
EMBEDDED_LOG_LINE = re.compile(r"(?<=.)(?=%\d\|\d+\.\d+\|[A-Z0-9_]+\|)")
PROTOCOL_LINE = re.compile(r"^%\d\|[\d.]+\|(?:SEND|RECV)\|")
CONSUMED_FORMAT = "%t %p %o\\n"


class KcatError(RuntimeError):
    pass


def kcat_problem() -> str | None:
    """Why kcat cannot run here, or None."""
    if shutil.which("kcat") is None:
        return "kcat not found (Debian: apt-get install kcat)"
    return None


def kcat_version() -> str:
    """``1.7.1 (librdkafka 2.0.2)``, from ``kcat -V``."""
    shown = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False, timeout=10).stdout
    kcat = re.search(r"Version (\S+)", shown)
    librdkafka = re.search(r"librdkafka (\S+)", shown)
    if kcat is None:
        raise KcatError(f"kcat -V said {shown[:200]!r}")
    return f"{kcat.group(1)} (librdkafka {librdkafka.group(1)})" if librdkafka else kcat.group(1)


def _run(ctx: Context, args: Sequence[str], *, stdin: str | None = None) -> tuple[str, list[str]]:
    """Run kcat against ctx.bootstrap; its protocol lines go to ctx.trace as they come. Returns stdout and the
    stderr lines that were not librdkafka's protocol lines (kcat's own ``%`` messages, cgrp debug lines)."""
    command = ["kcat", "-b", ctx.bootstrap, *args]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)
    others: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            for line in EMBEDDED_LOG_LINE.split(raw.rstrip("\n")):
                claimed = ctx.trace.librdkafka_line(line, client=CLIENT)
                # cgrp debug lines are librdkafka's too (claimed), but the consumer's commits are read from them
                if not claimed or not PROTOCOL_LINE.search(line):
                    others.append(line)

    reader = threading.Thread(target=pump, name="kcat-stderr", daemon=True)
    reader.start()
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(RUN_TIMEOUT, kill)
    timer.start()
    try:
        if proc.stdin is not None:  # a few KiB at most: written whole before kcat's output is read
            proc.stdin.write(stdin or "")
            proc.stdin.close()
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        proc.wait()
    finally:
        timer.cancel()
        reader.join(10)
    if killed.is_set():
        raise KcatError(f"kcat {' '.join(args[:6])} did not finish within {RUN_TIMEOUT:.0f} s")
    if proc.returncode != 0:
        shown = [line for line in others if not line.startswith("%7|")]
        raise KcatError(f"kcat exited with {proc.returncode}: {' | '.join(shown[-5:])}")
    return stdout, others


def produce(ctx: Context, topic: str, records: Sequence[tuple[bytes, bytes]], *, client_id: str, codec: str,
            idempotent: bool = True) -> int:
    """Produce keyed records (``key:value`` lines on stdin, ``-K:``) with one codec; returns the number kcat says
    were delivered. With idempotence librdkafka forces acks=all."""
    lines = []
    for key, value in records:
        if b":" in key or b"\n" in key + value:
            raise ValueError("kcat reads one record per line, the key up to the first ':'")
        lines.append((key + b":" + value).decode())
    args = ["-P", "-t", topic, "-K:", "-z", codec, "-X", f"client.id={client_id}", "-X", "acks=all",
            "-X", f"enable.idempotence={str(idempotent).lower()}", "-d", "protocol", "-vvv"]
    _, others = _run(ctx, args, stdin="\n".join(lines) + "\n")
    offsets: dict[int, list[int]] = {}
    failures = []
    for line in others:
        if match := DELIVERED.match(line):
            offsets.setdefault(int(match["partition"]), []).append(int(match["offset"]))
        elif match := DELIVERY_FAILED.match(line):
            failures.append(match["why"])
    acknowledged = sum(len(values) for values in offsets.values())
    ctx.truth.produced(topic, acknowledged, client_id=client_id, codec=codec, acks=-1, offsets=offsets)
    if idempotent:
        _add_once(ctx.truth.expectations.setdefault("idempotent_producers", []), client_id)
    if failures:
        ctx.truth.notes.append(f"{client_id}: {len(failures)} records failed: {failures[0]}")
    if acknowledged + len(failures) != len(records):
        ctx.truth.notes.append(f"{client_id}: {len(records)} records given, {acknowledged} delivery reports and "
                               f"{len(failures)} failures")
    return acknowledged


def consume(ctx: Context, topics: Sequence[str], expected: int, *, client_id: str, group: str) -> dict[str, Any]:
    """Read ``expected`` records from the topics as one member of a classic group (``-G``), from the earliest
    offsets, then close: librdkafka commits what it consumed and leaves the group. Returns the committed offsets."""
    args = ["-G", group, "-c", str(expected), "-e", "-f", CONSUMED_FORMAT, "-X", f"client.id={client_id}",
            "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=60000", "-d", "protocol,cgrp",
            *topics]
    stdout, others = _run(ctx, args)
    read: dict[str, Counter[int]] = {topic: Counter() for topic in topics}
    last: dict[tuple[str, int], int] = {}
    for line in stdout.splitlines():
        topic, partition, offset = line.split()
        read.setdefault(topic, Counter())[int(partition)] += 1
        last[(topic, int(partition))] = max(last.get((topic, int(partition)), -1), int(offset))
    for topic, partitions in read.items():
        ctx.truth.consumed(topic, sum(partitions.values()), client_id=client_id, partitions=dict(partitions))
    total = sum(sum(partitions.values()) for partitions in read.values())
    if total != expected:
        ctx.truth.notes.append(f"{client_id}: read {total} records, expected {expected}")
    committed = _committed(ctx, others, client_id)
    for (topic, partition), offset in last.items():
        if committed.get(topic, {}).get(partition) != offset + 1:
            ctx.truth.notes.append(f"{client_id}: {topic} [{partition}] last read at {offset}, committed "
                                   f"{committed.get(topic, {}).get(partition)}")
    left = any(r["client_id"] == client_id and r["api_name"] == "LeaveGroup" for r in ctx.trace.records())
    ctx.truth.group(group, member=client_id, committed=committed or None, left=left)
    return committed


def _committed(ctx: Context, lines: list[str], client_id: str) -> dict[str, dict[int, int]]:
    """The offsets the closing consumer stored and then committed with Success (empty, and a note, otherwise)."""
    stored: dict[str, dict[int, int]] = {}
    committing = outcome = None
    for line in lines:
        if match := REMOVED.search(line):
            if match["offset"] != "INVALID":  # nothing read from that partition: nothing to commit
                stored.setdefault(match["topic"], {})[int(match["partition"])] = int(match["offset"])
        elif match := COMMITTING.search(line):
            committing = int(match["count"])
        elif match := COMMITTED.search(line):
            outcome = match["result"]
    count = sum(len(offsets) for offsets in stored.values())
    if outcome != "Success" or committing != count:
        ctx.truth.notes.append(f"{client_id}: committed offsets not known: {count} stored, {committing} being "
                               f"committed, the commit returned {outcome}")
        return {}
    return stored


def _add_once(values: list[str], value: str) -> None:
    if value not in values:
        values.append(value)
