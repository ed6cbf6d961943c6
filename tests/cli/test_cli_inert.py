"""Capture strings reach the terminal as inert text: every command, run as a user runs it, on a capture whose
client ids, topic names and file name hold terminal escapes, C1 controls, NUL, bidi overrides and rich markup."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from crc32c import crc32c

from analyzer.cli.terminal import inert
from tests import craft

HOSTILE = {  # the string a client sent -> how the terminal must show it
    "\x1b[2J": "\\x1b[2J",  # clear the screen
    "\x1b]0;title\x07": "\\x1b]0;title\\x07",  # set the window title
    "c1\x85\x9b31m": "c1\\x85\\x9b31m",  # NEL and the one-byte CSI
    "nul\x00x": "nul\\x00x",
    "\u202eevil": "\\u202eevil",  # right-to-left override
    "[bold]x": "[bold]x",  # rich markup, to be shown as typed
    "[/]": "[/]",  # a closing tag with nothing to close: rich raised MarkupError
    ":thumbs_up:": ":thumbs_up:",  # a rich emoji code
    "производитель-😀": "производитель-😀",  # ordinary Unicode, shown as it is
}
FILE_NAME = "cap\x1b[31m\u202e.pcap"
FILE_NAME_SHOWN = "cap\\x1b[31m\\u202e.pcap"


def zigzag(n: int) -> bytes:
    return craft.uvarint((n << 1) ^ (n >> 63))


def record_batch(values: list[bytes]) -> bytes:
    """A v2 record batch, uncompressed, laid out as the protocol guide gives it."""
    records = b""
    for delta, value in enumerate(values):
        body = b"\x00" + zigzag(0) + zigzag(delta) + zigzag(-1) + zigzag(len(value)) + value + zigzag(0)
        records += zigzag(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1,
                            len(values)) + records
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), 0, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc


def produce_v3(corr: int, client_id: str, topics: list[str]) -> bytes:
    body = craft.kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", len(topics))
    for topic in topics:
        batch = record_batch([topic.encode()])
        body += craft.kstring(topic) + struct.pack(">ii", 1, 0) + struct.pack(">i", len(batch)) + batch
    return craft.request(0, 3, corr, client_id, body)


def produce_response_v3(corr: int, topics: list[str]) -> bytes:
    body = struct.pack(">i", len(topics))
    for topic in topics:
        body += craft.kstring(topic) + struct.pack(">i", 1) + struct.pack(">ihqq", 0, 0, 42, -1)
    return craft.response(corr, body + struct.pack(">i", 0))


@pytest.fixture(scope="module")
def hostile_capture(tmp_path_factory) -> Path:
    """One connection: a Produce per hostile string (as client id, and as the name of the topic written to)."""
    c = craft.Conversation()
    c.handshake()
    for corr, text in enumerate(HOSTILE):
        c.send(True, produce_v3(corr, text, [text]))
        c.send(False, produce_response_v3(corr, [text]))
    c.fin()
    folder = tmp_path_factory.mktemp("hostile")
    return Path(craft.write(folder / FILE_NAME, c.packets))


def kafkacap(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """The console script, in a new process, its output read as bytes."""
    code = "import sys; sys.argv[0] = 'kafkacap'; from analyzer.cli.console import script; script()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, timeout=300,
                          env={**os.environ, **(env or {})})


def assert_inert(done: subprocess.CompletedProcess, shown: list[str], sgr_allowed: bool = False) -> str:
    """No traceback, no control byte from the capture on stdout or stderr; returns stdout and stderr as text."""
    text = (done.stdout + done.stderr).decode("utf-8")
    assert "Traceback" not in text, text
    if sgr_allowed:  # rich's own colours: ESC [ digits m; nothing else may start with ESC
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    controls = sorted({f"U+{ord(ch):04X}" for ch in text
                       if (ord(ch) < 0x20 and ch not in "\n") or 0x7F <= ord(ch) <= 0x9F or ch == "\u202e"})
    assert not controls, (controls, text)
    for escaped in shown:
        assert escaped in text, (escaped, text)
    return text


@pytest.mark.parametrize("command", [
    ["summary"],
    ["summary", "--headers-only"],
    ["exchanges", "--limit", "0"],
])
def test_listings_show_capture_strings_escaped(hostile_capture, command):
    done = kafkacap(*command, hostile_capture, "--no-progress")
    assert done.returncode == 0, done.stderr
    assert_inert(done, [*HOSTILE.values(), FILE_NAME_SHOWN] if command[0] == "summary" else list(HOSTILE.values()))


def test_summary_topics_are_escaped(hostile_capture):
    done = kafkacap("summary", hostile_capture, "--no-progress")
    text = assert_inert(done, list(HOSTILE.values()))
    topics = text[text.index("Topics"):text.index("Connections and anomalies")]
    for shown in HOSTILE.values():
        assert shown in topics, shown


def test_summary_on_a_terminal_shows_only_its_own_colours(hostile_capture):
    """On a terminal rich adds its colour codes; the capture's own escapes must still come out escaped."""
    done = kafkacap("summary", hostile_capture, "--no-progress",
                    env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    assert b"\x1b[" in done.stdout  # the colours are there: the terminal path was taken
    assert_inert(done, [*HOSTILE.values(), FILE_NAME_SHOWN], sgr_allowed=True)


def test_export_summary_shows_escaped_text_and_the_tables_keep_the_exact_strings(hostile_capture, tmp_path):
    done = kafkacap("export", hostile_capture, "-o", tmp_path / "out", "--summary", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert_inert(done, [*HOSTILE.values(), FILE_NAME_SHOWN])
    ex = pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
    assert {r["client_id"] for r in ex} == set(HOSTILE)
    assert {r["client_id"]: r["topics"] for r in ex} == {text: [text] for text in HOSTILE}
    parts = pq.read_table(tmp_path / "out" / "partitions.parquet").to_pylist()
    assert {p["topic"] for p in parts} == set(HOSTILE)
    assert {f["capture_file"] for f in pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()} == {FILE_NAME}


def test_exchanges_json_is_valid_json_with_the_exact_strings(hostile_capture):
    done = kafkacap("exchanges", hostile_capture, "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert_inert(done, [])
    rows = [json.loads(line) for line in done.stdout.decode("ascii").splitlines()]
    assert {r["client_id"]: r["topics"] for r in rows} == {text: [text] for text in HOSTILE}


def test_show_prints_decoded_strings_escaped(hostile_capture):
    done = kafkacap("show", hostile_capture, "--connection", 1, "--limit", 0)
    assert done.returncode == 0, done.stderr
    text = assert_inert(done, [f"'{shown}'" for shown in HOSTILE.values()])
    assert text.count("Produce v3 correlation_id=") == len(HOSTILE)
    for shown in HOSTILE.values():
        assert f"client_id: '{shown}'" in text  # the request header's client id
        assert f"topic: '{shown}'" in text or f"name: '{shown}'" in text  # the topic in the request and response


def test_error_messages_show_file_names_escaped(hostile_capture, tmp_path):
    """A file that cannot be read is named in one escaped line, next to the good file's summary."""
    bad = tmp_path / "bad\x1b[2J\x9b.pcap"
    bad.write_bytes(b"not a capture at all, just text\n" * 4)
    done = kafkacap("summary", hostile_capture, bad, "--no-progress")
    assert done.returncode == 0, done.stderr
    text = assert_inert(done, ["bad\\x1b[2J\\x9b.pcap"])
    assert len([line for line in text.splitlines() if line.startswith("error:") and "bad\\x1b" in line]) == 1
    done = kafkacap("summary", bad, "--no-progress")
    assert done.returncode == 1
    assert_inert(done, ["bad\\x1b[2J\\x9b.pcap"])


@pytest.mark.parametrize("command", [["summary"], ["show", "--connection", "1", "--limit", "0"]])
def test_a_terminal_that_is_not_utf8_gets_escapes_not_a_crash(hostile_capture, command):
    done = kafkacap(*command, hostile_capture, "--no-progress" if command[0] == "summary" else "--limit=0",
                    env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    (done.stdout + done.stderr).decode("ascii")
    assert_inert(done, ["\\u043f\\u0440\\u043e", "\\U0001f600"])


@pytest.mark.parametrize("text,shown", [
    *HOSTILE.items(),
    ("plain-client_1", "plain-client_1"),
    ("производитель-日本-😀", "производитель-日本-😀"),  # ordinary Unicode stays as it is
    ("tab\tnew\nline\rcr", "tab\\tnew\\nline\\rcr"),
    ("back\\slash", "back\\\\slash"),  # doubled, so "\x1b" on screen always means one ESC character
    ("del\x7f", "del\\x7f"),
    ("lone\udc80", "lone\\udc80"),
    ("zero\u200bwidth\u2066isolate", "zero\\u200bwidth\\u2066isolate"),
    ("astral\U000e0001tag", "astral\\U000e0001tag"),
])
def test_inert_escapes_what_is_not_printable(text, shown):
    assert inert(text) == shown
