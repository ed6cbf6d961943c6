"""The generator (``python -m tools.generate``) and the API and error tables it wrote, against the protocol guide.

The tables are generated from the release jars' JSON definitions (``tests/kafka_spec.py``). The guides they are
checked against:
- the pages of the protocol guide a release's kafka-clients jar prints (``tools/protocol_guide.py``): every API's
  grammar per version, the error-code table and the API-key table, printed by Kafka's Java classes from its Java
  message classes, not from anything generated here. 3.9.2's pages are the 3.9 guide line for line and still
  list the versions Kafka 4 removed; 4.4.0's are the current guide.
- 002 (../shared/spec): the 0.8-era guide with the first API-key table (keys 0-16) and error codes, a page of
  the old wiki that no jar carries (its two tests skip without ../shared).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from dissectors.kafka.apis import (
    API_BY_KEY,
    FORMER_NAMES,
    ApiInfo,
    api_name,
    is_known,
    key_of_name,
    request_header_version,
    response_header_version,
)
from dissectors.kafka.errors import ERRORS, ErrorInfo, error_name, is_retriable
from dissectors.kafka.headers import response_top_level
from tests.kafka_spec import BEFORE_KIP_896, NEWEST, definitions, guide
from tools.generate import tables

REPO = Path(__file__).resolve().parents[2]
OLD_GUIDE = REPO.parent / "shared" / "spec" / "002_b327ac2fc02ede7e.txt"
BOTH_GUIDES = pytest.mark.parametrize("release", [BEFORE_KIP_896, NEWEST])

APIS = [info for info in API_BY_KEY if info is not None]
BY_NAME = {info.name: info for info in APIS} | {  # the guide is older than key 74's rename
    old: API_BY_KEY[key] for key, names in FORMER_NAMES.items() for old in names}


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path.name} is not available")
    return path


def read(path: Path) -> str:
    return need(path).read_text(encoding="utf-8")


def strip_json_comments(text: str) -> dict:
    return json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))


# ---------------------------------------------------------------------------------------------------------
# The generated modules


def test_generated_modules_are_up_to_date():
    """What ``python -m tools.generate --check`` checks: the committed modules are what the definitions give."""
    files = tables.render_all(definitions())
    assert sorted(files) == sorted(path.name for path in tables.OUTPUT_DIR.iterdir() if path.is_file())
    for name, text in files.items():
        assert (tables.OUTPUT_DIR / name).read_text(encoding="utf-8") == text, name


def test_generator_check_mode_runs_as_a_module(tmp_path):
    definitions()  # made (or found) here, so the module finds it in the cache
    result = subprocess.run([sys.executable, "-m", "tools.generate", "--check"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # and it says which module is stale when the definitions give another: a field renamed in the newest release
    spec = copy_spec(tmp_path)
    edit(spec / "kafka-messages" / NEWEST / "ExpireDelegationTokenRequest.json",
         '{ "name": "ExpiryTimePeriodMs"', '{ "name": "ExpiryPeriodMs"')
    result = subprocess.run([sys.executable, "-m", "tools.generate", "--check", "--spec", str(spec)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "out of date: _generated/schemas.py" in result.stderr, result.stderr
    assert "apis.py" not in result.stderr


def test_schemas_module_holds_the_structs_the_extraction_was_made_from():
    """The generator makes the extraction plans from its in-memory schemas, never running what it wrote: the
    written (and imported) schemas.py must hold the same structs, shared the same way, under the names the
    plans were given."""
    from dissectors.kafka._generated import schemas

    table = tables.build_tables(definitions()).schemas
    assert schemas.REQUESTS == table.requests and schemas.RESPONSES == table.responses
    order, names = tables.struct_names(table)
    written = {name: value for name, value in vars(schemas).items() if isinstance(value, tuple)}
    assert sorted(written) == sorted(names.values())
    for one in order:
        assert written[names[id(one)]] == one, names[id(one)]
    named = {id(value) for value in written.values()}
    for per_key in (schemas.REQUESTS, schemas.RESPONSES):  # and the tables refer to those objects, not copies
        for key, (_min_version, structs) in per_key.items():
            assert all(id(one) in named for one in structs), key


def test_the_generator_is_a_tool_not_part_of_the_package():
    """The wheel carries analyzer, dissectors and spark_jobs; the generator lives in tools/, which it does not."""
    found = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    packages = find_packages(str(REPO), include=found["find"]["include"])
    assert {name.split(".")[0] for name in packages} == {"analyzer", "dissectors", "spark_jobs"}
    assert not (REPO / "dissectors" / "kafka" / "generate.py").exists()
    shipped = [path for name in packages for path in (REPO / name.replace(".", "/")).iterdir()
               if path.suffix in (".py", ".pyx", ".pxd", ".pxi")]
    assert len(shipped) > 100
    assert not [path for path in shipped if re.search(r"^\s*(from|import) tools\b", path.read_text(encoding="utf-8"),
                                                      re.M)], "the runtime does not import the tools"


def test_definitions_come_from_the_release_jars():
    spec = definitions()
    assert tables.find_releases(spec) == (BEFORE_KIP_896, NEWEST)
    for release in (BEFORE_KIP_896, NEWEST):
        source = json.loads((spec / "kafka-messages" / release / "source.json").read_text())
        assert source["version"] == release and source["artifact"] == "org.apache.kafka:kafka-clients"
        assert f"Apache Kafka {release}:" in (tables.OUTPUT_DIR / "apis.py").read_text(encoding="utf-8")
        assert f"commit {source['commit']}" in (tables.OUTPUT_DIR / "schemas.py").read_text(encoding="utf-8")


def copy_spec(tmp_path: Path) -> Path:
    spec = definitions()
    shutil.copytree(spec / "kafka-messages", tmp_path / "kafka-messages")
    for name in ("errors.tsv", "errors.json"):
        shutil.copy(spec / name, tmp_path / name)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize("files, old, new, message", [
    # both releases define Produce v9-11; if one called v9 non-flexible they would disagree
    (["ProduceRequest.json", "ProduceResponse.json"], '"flexibleVersions": "9+"', '"flexibleVersions": "10+"',
     "disagree on flexibility"),
    (["ProduceRequest.json"], '"flexibleVersions": "9+"', '"flexibleVersions": "10+"',
     "flexibleVersions disagree"),
    (["FetchRequest.json", "FetchResponse.json"], '"apiKey": 1,', '"apiKey": 999,', "Fetch: api key"),
    (["MetadataResponse.json"], '"validVersions": "0-13"', '"validVersions": "0-14"',
     "validVersions disagree"),
    (["FetchResponse.json"], '"type": "int32"', '"type": "int33"', "unknown type"),
])
def test_generator_fails_loudly(tmp_path, files, old, new, message):
    spec = copy_spec(tmp_path)
    for name in files:
        edit(spec / "kafka-messages" / NEWEST / name, old, new)
    with pytest.raises(tables.GeneratorError, match=message):
        tables.render_all(spec)
    result = subprocess.run(
        [sys.executable, "-m", "tools.generate", "--check", "--spec", str(spec)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message.split(":")[0] in result.stderr


def test_generator_stops_at_a_rename_it_was_not_told_of(monkeypatch):
    monkeypatch.setattr(tables, "RENAMED_APIS", {})
    with pytest.raises(tables.GeneratorError, match="api key 74: ListConfigResources in one release, "
                                                      "ListClientMetricsResources in 3.9"):
        tables.render_all(definitions())


def test_generator_stops_when_a_release_changes_a_shared_response_layout(tmp_path):
    spec = copy_spec(tmp_path)
    # in the newest release, make Fetch's top-level ErrorCode (v7+) start at v8: v7 then disagrees with 3.9
    edit(spec / "kafka-messages" / NEWEST / "FetchResponse.json",
         '"name": "ErrorCode", "type": "int16", "versions": "7+"',
         '"name": "ErrorCode", "type": "int16", "versions": "8+"')
    with pytest.raises(tables.GeneratorError, match="Fetch v7: .* disagree on the response prefix"):
        tables.render_all(spec)


def test_generated_modules_read_as_data():
    for name in ("apis.py", "errors.py", "response_prefix.py"):
        text = (tables.OUTPUT_DIR / name).read_text(encoding="utf-8")
        assert "Do not edit by hand" in text.split('"""')[1]
        assert not re.search(r"^\s*(def|class|import|from|for|if|while)\b", text, re.M), name
        assert "/work/" not in text and "/home/" not in text and "/root/" not in text and "/.cache/" not in text


# ---------------------------------------------------------------------------------------------------------
# Names and keys


def guide_headings(kind: str, release: str = BEFORE_KIP_896) -> list[tuple[str, int, str, list[str]]]:
    """(name, version, heading line, grammar lines) for every "<Name> <kind> (Version: N)" in the guide, in the
    3.9 guide's notation. 4.x prints a struct's fields in braces, a nullable array as ``?[name]`` and a compact one
    as ``(name)``, read here as ``[name]``; it prints no TAG_BUFFER, so its flexible versions are not told."""
    lines = [" ".join(re.sub(r"^\??[\[(](\w+)[\])]$", r"[\1]", token) for token in line.split(" ")
                      if token not in ("{", "}"))
             for line in guide(release).messages.splitlines()]
    headings = []
    for i, line in enumerate(lines):
        match = re.match(rf"^(\w+) {kind} \(Version: (\d+)\) =>(.*)$", line)
        if match:
            grammar = []
            for following in lines[i + 1:]:
                if following.startswith("Field |") or re.match(r"\w+ (Request|Response) \(", following):
                    break  # a version without fields has no field table: the next heading follows
                grammar.append(following)
            headings.append((match[1], int(match[2]), match[3], grammar))
    return headings


@BOTH_GUIDES
def test_guide_api_names_are_ours_and_in_key_order(release):
    names = list(dict.fromkeys(name for name, *_ in guide_headings("Request", release)))
    assert len(names) >= 75
    assert set(names) <= set(BY_NAME)
    keys = [BY_NAME[name].key for name in names]
    assert keys == sorted(keys), "the guide lists APIs by key"
    assert names == list(dict.fromkeys(name for name, *_ in guide_headings("Response", release)))


def test_apis_absent_from_the_guide_are_controller_only_or_newer():
    in_guide = {name for name, *_ in guide_headings("Request")}
    for info in APIS:
        if info.name in in_guide:
            continue
        old = definitions() / "kafka-messages" / BEFORE_KIP_896 / f"{info.name}Request.json"
        if not old.exists():
            continue  # added after the guide's release (StreamsGroup*, ...)
        listeners = strip_json_comments(old.read_text(encoding="utf-8"))["listeners"]
        assert listeners == ["controller"], info.name  # the guide documents client-facing APIs only


@BOTH_GUIDES
def test_keys_agree_with_the_guides_api_key_table_and_headings(release):
    """The guide's API-key table (the APIs a release calls stable) and its "<Name> API (Key: N):" headings (those
    and the unstable ones) name, for each key, the API we have under it (or its former name)."""
    pages = guide(release)
    rows = pages.api_keys.splitlines()
    assert rows[0] == "Name | Key |"
    table = [re.fullmatch(r"(\w+) \| (\d+) \|", row) for row in rows[1:]]
    assert all(table), rows
    headings = re.findall(r"^(\w+) API \(Key: (\d+)\):$", pages.messages, re.M)
    assert {(m[1], m[2]) for m in table} <= set(headings) and len(table) >= 70
    for name, key in headings:
        assert BY_NAME[name].key == int(key), (name, key)
    assert [key for _name, key in headings] == sorted({key for _name, key in headings}, key=int)


def test_keys_agree_with_the_first_api_key_table():
    text = read(OLD_GUIDE)
    table = text[text.index("API name\tApiKey Value"):].split("\n\n")[0].splitlines()[1:]
    renamed = {"Offset": "ListOffsets", "GroupCoordinator": "FindCoordinator"}  # renamed since 0.8
    seen = 0
    for row in table:
        name, value = row.rsplit("\t", 1)
        if "-" in value:  # "Non-user facing control APIs	4-7"
            low, high = map(int, value.split("-"))
            assert all(API_BY_KEY[k] is not None for k in range(low, high + 1))
            continue
        name = name.removesuffix("Request")
        assert api_name(int(value)) == renamed.get(name, name)
        seen += 1
    assert seen == 13


def test_spot_values():
    # Kafka 4.1+: Produce v13 names topics by id; Fetch v18; 4.4's newest keys
    assert API_BY_KEY[0] == ApiInfo(0, "Produce", 0, 13, 9)
    assert API_BY_KEY[1] == ApiInfo(1, "Fetch", 0, 18, 12)
    assert API_BY_KEY[18] == ApiInfo(18, "ApiVersions", 0, 5, 3)
    assert API_BY_KEY[75] == ApiInfo(75, "DescribeTopicPartitions", 0, 0, 0)
    assert API_BY_KEY[17].flexible_from is None  # SaslHandshake was never flexible
    assert API_BY_KEY[68] == ApiInfo(68, "ConsumerGroupHeartbeat", 0, 1, 0)
    assert API_BY_KEY[78] == ApiInfo(78, "ShareFetch", 0, 2, 0)  # v0 (3.9's draft) and the stable v1-2
    assert api_name(89) == "StreamsGroupDescribe" and api_name(92) == "DeleteShareGroupOffsets"
    assert api_name(-1) is None and api_name(len(API_BY_KEY)) is None
    assert is_known(2, 0) and is_known(2, 11)  # ListOffsets v0 from 3.9, v11 from 4.4
    assert is_known(4, 7) and not is_known(4, 8)  # LeaderAndIsr: Kafka 4 removed it, 3.9 still defines it
    assert not is_known(0, 14) and not is_known(-1, 0) and not is_known(0, -1)
    assert [info.key for info in APIS] == list(range(len(API_BY_KEY)))  # no gaps today


def test_key_74_renamed_and_its_former_name_still_found():
    assert api_name(74) == "ListConfigResources" and is_known(74, 1)
    assert FORMER_NAMES == {74: ("ListClientMetricsResources",)}
    assert key_of_name("ListClientMetricsResources") == key_of_name("listconfigresources") == 74
    assert key_of_name("Produce") == 0 and key_of_name("NoSuchApi") is None


# ---------------------------------------------------------------------------------------------------------
# Versions and flexibility against the per-version grammars of the guide


@pytest.mark.parametrize("kind", ["Request", "Response"])
def test_guide_versions_are_in_range_and_flexibility_matches(kind):
    headings = guide_headings(kind)
    assert len(headings) >= 300
    for name, version, top, grammar in headings:
        info = BY_NAME[name]
        assert info.min_version <= version <= info.max_version, (name, version)
        compact = "TAG_BUFFER" in top or any("COMPACT_" in line or "TAG_BUFFER" in line for line in grammar)
        flexible = info.flexible_from is not None and version >= info.flexible_from
        assert compact == flexible, (name, kind, version)


FIXED_SIZES = {"BOOLEAN": 1, "INT8": 1, "INT16": 2, "UINT16": 2, "INT32": 4, "UINT32": 4, "INT64": 8,
               "FLOAT64": 8, "UUID": 16}


def guide_prefix(top: str, grammar: list[str]) -> tuple[int | None, int | None]:
    """Offsets of top-level error_code and throttle_time_ms before the first variable-size field."""
    types = {}
    for line in grammar:
        field, _, definition = line.partition(" => ")
        types.setdefault(field, definition)
    offset, found = 0, {}
    for token in top.split():
        size = FIXED_SIZES.get(types.get(token, ""))
        if size is None:  # an array, a string, a struct, or the tag buffer
            break
        found[token] = offset
        offset += size
    return found.get("error_code"), found.get("throttle_time_ms")


@BOTH_GUIDES
def test_response_prefix_matches_the_guide_grammars(release):
    body = bytes(range(1, 64))  # every offset reads a distinct value
    checked = 0
    for name, version, top, grammar in guide_headings("Response", release):
        error_offset, throttle_offset = guide_prefix(top, grammar)
        want = (None if error_offset is None else struct.unpack_from(">h", body, error_offset)[0],
                None if throttle_offset is None else struct.unpack_from(">i", body, throttle_offset)[0])
        assert response_top_level(body, 0, len(body), BY_NAME[name].key, version) == want, (name, version)
        checked += want != (None, None)
    assert checked >= 250


def test_response_prefix_examples():
    body = bytes(range(1, 64))

    def int16(at: int) -> int:
        return struct.unpack_from(">h", body, at)[0]

    def int32(at: int) -> int:
        return struct.unpack_from(">i", body, at)[0]

    for version in range(7, 18):
        assert response_top_level(body, 0, 63, 1, version) == (int16(4), int32(0))  # Fetch
    for version in range(3, 14):
        assert response_top_level(body, 0, 63, 3, version) == (None, int32(0))  # Metadata
    for version in range(0, 13):
        assert response_top_level(body, 0, 63, 0, version) == (None, None)  # Produce
    for version in range(0, 5):
        assert response_top_level(body, 0, 63, 18, version) == (int16(0), None)  # ApiVersions


# ---------------------------------------------------------------------------------------------------------
# Header versions


def test_request_header_v0_is_only_controlled_shutdown_v0():
    comment = (definitions() / "kafka-messages" / BEFORE_KIP_896 / "RequestHeader.json").read_text()
    name = re.search(r"Version 0 of the RequestHeader is only used by v0 of (\w+)Request", comment)[1]
    v0 = [(info.key, v) for info in APIS for v in range(info.min_version, info.max_version + 3)
          if request_header_version(info.key, v) == 0]
    assert v0 == [(BY_NAME[name].key, 0)]


def test_header_versions_follow_flexibility():
    for info in APIS:
        for version in range(info.min_version, info.max_version + 3):  # + newer versions than we know
            flexible = info.flexible_from is not None and version >= info.flexible_from
            if (info.name, version) != ("ControlledShutdown", 0):
                assert request_header_version(info.key, version) == (2 if flexible else 1)
            # ApiVersions answers in header v0 always: a client must read its error whatever it asked
            assert response_header_version(info.key, version) == (1 if flexible and info.name != "ApiVersions"
                                                                  else 0)
    assert request_header_version(9999, 0) == 1 and response_header_version(9999, 0) == 0
    assert request_header_version(-1, 5) == 1 and response_header_version(3, -1) == 0


# ---------------------------------------------------------------------------------------------------------
# Error codes


def error_table_lines(release: str = BEFORE_KIP_896) -> list[str]:
    header, *rows = guide(release).errors.splitlines()
    assert header == "Error | Code | Retriable | Description |"
    return rows


def test_error_table_size_and_retriable_flags():
    """The 3.9 guide's table (-1 .. 127) is a prefix of 4.4's: every code keeps its name and flag."""
    rows = error_table_lines()
    assert len(rows) == 129 and len(ERRORS) == 138  # -1 .. 127, then 4.4's -1 .. 136
    assert sorted(ERRORS) == list(range(-1, 137))
    for row in rows:
        name, code, retriable = (cell.strip() for cell in row.split("|")[:3])
        assert ERRORS[int(code)][:3] == (int(code), name, retriable == "True"), row


def test_error_table_is_the_newest_guides():
    rows = [[cell.strip() for cell in row.split("|")[:4]] for row in error_table_lines(NEWEST)]
    assert [(int(code), name, retriable == "True", description) for name, code, retriable, description in rows] == [
        tuple(ERRORS[code]) for code in sorted(ERRORS)]


def test_error_spot_values():
    assert ERRORS[-1] == ErrorInfo(-1, "UNKNOWN_SERVER_ERROR", False,
                                   "The server experienced an unexpected error when processing the request.")
    assert ERRORS[0] == ErrorInfo(0, "NONE", False, "")
    assert ERRORS[6][:3] == (6, "NOT_LEADER_OR_FOLLOWER", True)
    assert ERRORS[35][:3] == (35, "UNSUPPORTED_VERSION", False)
    assert ERRORS[89][:3] == (89, "THROTTLING_QUOTA_EXCEEDED", True)
    assert ERRORS[127][:3] == (127, "VOTER_NOT_FOUND", False)
    assert ERRORS[128][:3] == (128, "INVALID_REGULAR_EXPRESSION", False)  # KIP-848's regex subscriptions
    assert ERRORS[133][:3] == (133, "SHARE_SESSION_LIMIT_REACHED", True)
    assert error_name(0) == "NONE" and error_name(79) == "MEMBER_ID_REQUIRED"
    assert error_name(5120) == "UNDEFINED_ERROR_5120" and error_name(-2) == "UNDEFINED_ERROR_-2"
    assert is_retriable(3) is True and is_retriable(25) is False and is_retriable(5120) is None


def test_errors_retriable_in_the_first_guide_still_are():
    text = read(OLD_GUIDE)
    table = text[text.index("Error\tCode\tRetriable\tDescription"):text.index("## Some Common")]
    rows = re.findall(r"^[^\t\n]+\t(-?\d+)\t(Yes)?\t", table, re.M)
    assert len(rows) >= 30
    for code, retriable in rows:
        assert int(code) in ERRORS
        if retriable:
            assert is_retriable(int(code)) is True, code
