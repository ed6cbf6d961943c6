"""Generate the Kafka API tables from Apache Kafka's JSON message definitions and the protocol guide.

Run ``python -m dissectors.kafka.generate [--spec DIR] [--check]`` from the repository root. ``DIR`` defaults
to ``../shared/spec`` next to the repository. The output lands in ``dissectors/kafka/_generated/``.

Why a generator: Kafka defines every request and response, every version, in JSON. Hand-copying version
ranges or field offsets would drift behind new releases (the way hand-written dissectors do). Reading
the JSON keeps one source of truth. The model below (field types, versions, nullable and tagged versions,
nested and common structs) is complete enough to grow into full per-version schemas. For now it emits
only the API table, the error table and the fixed top-level response prefix.

The message definitions come from several Kafka releases: an older one still has versions that newer
releases removed (KIP-896), and a newer one has APIs and versions the older one lacks. The tables take the
union. Where two releases define the same version, they must agree on what we use from it; otherwise
the generator stops with an error instead of guessing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC_DIR = REPO_ROOT.parent / "shared" / "spec"
OUTPUT_DIR = Path(__file__).resolve().parent / "_generated"

MESSAGES_DIR = "kafka-messages"
# Oldest first. A version defined by several releases is laid out from the newest one that is stable.
RELEASES = ("3.9.0", "trunk-dfb178a")
GUIDE_FILE = "001_d9547f6ddd911abd.txt"

# Header rules that the JSON states only in comments (and Kafka's Java code applies by hand). Each one
# is checked against the comment that states it, so a change upstream stops the generator.
REQUEST_HEADER_V0_RULE = ("ControlledShutdown", 0, "non-standard request header")
RESPONSE_HEADER_V0_ALWAYS_RULE = ("ApiVersions", "not in the header")

PRIMITIVE_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "float64": 8, "uuid": 16,
}
VARIABLE_PRIMITIVES = frozenset({"string", "bytes", "records"})


class GeneratorError(Exception):
    """The definitions are inconsistent or say something this generator does not understand."""


# ---------------------------------------------------------------------------------------------------------
# Model


class Versions(NamedTuple):
    """An inclusive version range; ``high`` None means open-ended ("3+"). ``none`` parses to ``EMPTY``."""

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int) or version < self.low:
            return False
        return self.high is None or version <= self.high

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return EMPTY
        match = re.fullmatch(r"(\d+)(?:(\+)|-(\d+))?", text.strip())
        if not match:
            raise GeneratorError(f"bad version range {text!r}")
        low = int(match[1])
        if match[2]:
            return cls(low, None)
        return cls(low, int(match[3]) if match[3] else low)


EMPTY = Versions(1, 0)


@dataclass(frozen=True)
class Field:
    """One field of a message or struct, as the JSON declares it."""

    name: str
    type: str
    versions: Versions
    nullable_versions: Versions = EMPTY
    tagged_versions: Versions = EMPTY
    tag: int | None = None
    flexible_versions: Versions | None = None  # per-field override (RequestHeader.ClientId: never compact)
    default: str | None = None
    ignorable: bool = False
    map_key: bool = False
    entity_type: str | None = None
    zero_copy: bool = False
    fields: tuple[Field, ...] = ()  # inline struct definition, for struct and struct-array types
    about: str = ""

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type[:1].isupper()

    def fixed_size(self) -> int | None:
        """Byte size when it never varies (a plain int, bool, uuid or float), else None."""
        if self.is_array:
            return None
        return PRIMITIVE_SIZES.get(self.type)


@dataclass(frozen=True)
class Struct:
    name: str
    versions: Versions
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Message:
    """A request, response or header definition from one JSON file of one release."""

    release: str
    file: str
    kind: str  # "request", "response" or "header"
    name: str  # JSON name: "ProduceRequest"
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    fields: tuple[Field, ...]
    common_structs: tuple[Struct, ...] = ()
    latest_version_unstable: bool = False
    comments: str = ""

    @property
    def api_name(self) -> str:
        for suffix in ("Request", "Response"):
            if self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def is_stable(self, version: int) -> bool:
        return not (self.latest_version_unstable and version == self.valid_versions.high)


def strip_comments(text: str) -> tuple[str, str]:
    """Split a Kafka JSON file into (JSON without ``//`` lines, the comment text)."""
    kept, comments = [], []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            comments.append(stripped[2:].strip())
        else:
            kept.append(line)
    return "\n".join(kept), "\n".join(comments)


def parse_field(raw: dict, where: str) -> Field:
    known = {
        "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "flexibleVersions",
        "default", "ignorable", "mapKey", "entityType", "zeroCopy", "fields", "about",
    }
    unknown = set(raw) - known
    if unknown:
        raise GeneratorError(f"{where}: unknown field attributes {sorted(unknown)}")
    name = raw["name"]
    if "versions" not in raw:
        raise GeneratorError(f"{where}.{name}: no versions")
    ftype = raw["type"]
    element = ftype[2:] if ftype.startswith("[]") else ftype
    if not (element in PRIMITIVE_SIZES or element in VARIABLE_PRIMITIVES or element[:1].isupper()):
        raise GeneratorError(f"{where}.{name}: unknown type {ftype!r}")
    if ftype.startswith("[]") and element == "records":
        raise GeneratorError(f"{where}.{name}: array of records")
    if ("tag" in raw) != ("taggedVersions" in raw):
        raise GeneratorError(f"{where}.{name}: tag and taggedVersions must come together")
    default = raw.get("default")
    return Field(
        name=name,
        type=ftype,
        versions=Versions.parse(raw["versions"]),
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=Versions.parse(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        flexible_versions=Versions.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None,
        default=None if default is None else str(default),
        ignorable=bool(raw.get("ignorable", False)),
        map_key=bool(raw.get("mapKey", False)),
        entity_type=raw.get("entityType"),
        zero_copy=bool(raw.get("zeroCopy", False)),
        fields=tuple(parse_field(sub, f"{where}.{name}") for sub in raw.get("fields", ())),
        about=raw.get("about", ""),
    )


def parse_message(path: Path, release: str) -> Message:
    json_text, comments = strip_comments(path.read_text(encoding="utf-8"))
    try:
        raw = json.loads(json_text)
    except json.JSONDecodeError as exc:
        raise GeneratorError(f"{release}/{path.name}: {exc}") from exc
    where = f"{release}/{path.name}"
    structs = tuple(
        Struct(s["name"], Versions.parse(s["versions"]),
               tuple(parse_field(f, f"{where}:{s['name']}") for f in s["fields"]))
        for s in raw.get("commonStructs", ())
    )
    message = Message(
        release=release,
        file=path.name,
        kind=raw["type"],
        name=raw["name"],
        api_key=raw.get("apiKey"),
        valid_versions=Versions.parse(raw["validVersions"]),
        flexible_versions=Versions.parse(raw["flexibleVersions"]),
        fields=tuple(parse_field(f, where) for f in raw["fields"]),
        common_structs=structs,
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        comments=comments,
    )
    check_struct_references(message)
    return message


def check_struct_references(message: Message) -> None:
    """Every struct-typed field must be defined inline or among the file's commonStructs."""
    common = {s.name for s in message.common_structs}

    def walk(fields: Iterable[Field]) -> None:
        for f in fields:
            if f.is_struct and not f.fields and f.element_type not in common:
                raise GeneratorError(f"{message.release}/{message.file}: {f.name} has undefined "
                                     f"struct type {f.element_type}")
            walk(f.fields)

    walk(message.fields)
    for struct in message.common_structs:
        walk(struct.fields)


def load_release(spec_dir: Path, release: str) -> dict[str, Message]:
    """All request, response and header definitions of one release, keyed by JSON name."""
    folder = spec_dir / MESSAGES_DIR / release
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise GeneratorError(f"no JSON definitions in {folder}")
    messages = {}
    for path in paths:
        message = parse_message(path, release)
        if message.name != path.stem:
            raise GeneratorError(f"{release}/{path.name} defines {message.name}")
        messages[message.name] = message
    return messages


def release_commits(spec_dir: Path) -> dict[str, str]:
    """Map each release folder to its Apache Kafka commit, read from the folder's README table."""
    readme = (spec_dir / MESSAGES_DIR / "README.md").read_text(encoding="utf-8")
    commits = {}
    for release in RELEASES:
        match = re.search(rf"^\|\s*`{re.escape(release)}/`\s*\|[^|\n]*\|\s*`([0-9a-f]{{40}})`", readme, re.M)
        if not match:
            raise GeneratorError(f"no commit for {release} in {MESSAGES_DIR}/README.md")
        commits[release] = match[1]
    return commits


# ---------------------------------------------------------------------------------------------------------
# The API table: union over releases


@dataclass
class ApiRow:
    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    # version -> request and response definitions, newest release first
    requests: dict[int, list[Message]] = field(default_factory=dict)
    responses: dict[int, list[Message]] = field(default_factory=dict)

    def sources(self) -> str:
        """Which release defines which versions, for a comment next to the row."""
        by_release: dict[str, list[int]] = {}
        for version in sorted(self.requests):
            for message in self.requests[version]:
                by_release.setdefault(message.release, []).append(version)
        return ", ".join(f"{rel} {vs[0]}-{vs[-1]}" if len(vs) > 1 else f"{rel} {vs[0]}"
                         for rel, vs in sorted(by_release.items(), key=lambda kv: RELEASES.index(kv[0])))


def pair_messages(release: dict[str, Message]) -> Iterator[tuple[Message, Message]]:
    """Yield (request, response) per API of one release, checking that the pair agrees."""
    requests: dict[int, Message] = {}
    responses: dict[int, Message] = {}
    for message in release.values():
        if message.kind not in ("request", "response"):
            continue
        key = message.api_key
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < 1 << 15:
            raise GeneratorError(f"{message.release}/{message.file}: bad api key {key!r}")
        same_kind = requests if message.kind == "request" else responses
        if key in same_kind:
            raise GeneratorError(f"{message.release}: {same_kind[key].name} and {message.name} share key {key}")
        same_kind[key] = message
    if set(requests) != set(responses):
        raise GeneratorError(f"requests without responses or vice versa: {set(requests) ^ set(responses)}")
    for key in sorted(requests):
        req, resp = requests[key], responses[key]
        where = f"{req.release}: {req.name}/{resp.name}"
        if req.api_name != resp.api_name:
            raise GeneratorError(f"{where}: names disagree")
        if req.valid_versions != resp.valid_versions:
            raise GeneratorError(f"{where}: validVersions disagree")
        if req.flexible_versions != resp.flexible_versions:
            raise GeneratorError(f"{where}: flexibleVersions disagree")
        yield req, resp


def build_api_rows(releases: dict[str, dict[str, Message]]) -> list[ApiRow]:
    rows: dict[int, ApiRow] = {}
    key_of_name: dict[str, int] = {}
    for release in reversed(RELEASES):  # newest first, so per-version lists are newest first
        for req, resp in pair_messages(releases[release]):
            assert req.api_key is not None
            if key_of_name.setdefault(req.api_name, req.api_key) != req.api_key:
                raise GeneratorError(f"{req.api_name}: api key {key_of_name[req.api_name]} in one release, "
                                     f"{req.api_key} in {release}")
            valid = req.valid_versions
            if valid.high is None:
                raise GeneratorError(f"{release}/{req.file}: open-ended validVersions")
            row = rows.get(req.api_key)
            if row is None:
                row = rows[req.api_key] = ApiRow(req.api_key, req.api_name, valid.low, valid.high, None)
            elif row.name != req.api_name:
                raise GeneratorError(f"api key {req.api_key}: {row.name} in one release, "
                                     f"{req.api_name} in {release}")
            row.min_version = min(row.min_version, valid.low)
            row.max_version = max(row.max_version, valid.high)
            for version in range(valid.low, valid.high + 1):
                row.requests.setdefault(version, []).append(req)
                row.responses.setdefault(version, []).append(resp)

    for row in rows.values():
        missing = [v for v in range(row.min_version, row.max_version + 1) if v not in row.requests]
        if missing:
            raise GeneratorError(f"{row.name}: versions {missing} defined by no release")
        flexible = []
        for version in sorted(row.requests):
            answers = {m.is_flexible(version) for m in row.requests[version] + row.responses[version]}
            if len(answers) != 1:
                where = ", ".join(sorted({m.release for m in row.requests[version]}))
                raise GeneratorError(f"{row.name} v{version}: releases {where} disagree on flexibility")
            flexible.append(answers.pop())
        # Once flexible, always flexible: the table stores only the first flexible version.
        first = flexible.index(True) if True in flexible else None
        if first is not None and not all(flexible[first:]):
            raise GeneratorError(f"{row.name}: flexible versions are not a suffix")
        row.flexible_from = None if first is None else row.min_version + first
    return [rows[key] for key in sorted(rows)]


def check_header_rules(releases: dict[str, dict[str, Message]], rows: list[ApiRow]) -> tuple[
        tuple[tuple[int, int], ...], tuple[int, ...]]:
    """Derive the header exceptions, after checking the definitions still state them."""
    by_name = {row.name: row for row in rows}
    for release in RELEASES:
        messages = releases[release]
        for header, versions in (("RequestHeader", Versions(0, 2)), ("ResponseHeader", Versions(0, 1))):
            if header not in messages or messages[header].valid_versions != versions:
                raise GeneratorError(f"{release}: {header} is not versions {versions.low}-{versions.high}")
        api, version, phrase = REQUEST_HEADER_V0_RULE
        if phrase not in " ".join(messages[f"{api}Request"].comments.split()):
            raise GeneratorError(f"{release}: {api}Request no longer says it has a {phrase}")
        statement = f"Version 0 of the RequestHeader is only used by v{version} of {api}Request"
        if statement not in " ".join(messages["RequestHeader"].comments.split()):
            raise GeneratorError(f"{release}: RequestHeader no longer says {statement!r}")
        api, phrase = RESPONSE_HEADER_V0_ALWAYS_RULE
        if phrase not in " ".join(messages[f"{api}Response"].comments.split()):
            raise GeneratorError(f"{release}: {api}Response no longer says tagged fields are {phrase}")
    header_v0 = ((by_name[REQUEST_HEADER_V0_RULE[0]].key, REQUEST_HEADER_V0_RULE[1]),)
    always_v0 = (by_name[RESPONSE_HEADER_V0_ALWAYS_RULE[0]].key,)
    return header_v0, always_v0


# ---------------------------------------------------------------------------------------------------------
# Fixed top-level response prefix


class Prefix(NamedTuple):
    error_code: int | None
    throttle_time_ms: int | None


def fixed_prefix(message: Message, version: int) -> Prefix:
    """Offsets of top-level ErrorCode/ThrottleTimeMs that sit before any variable-length field.

    Tagged fields live in the trailing tag buffer, not in the sequence, so they are skipped. A struct
    field stops the walk: in flexible versions it ends in a tag buffer of its own.
    """
    offset = 0
    error_code = throttle = None
    for f in message.fields:
        if version not in f.versions or version in f.tagged_versions:
            continue
        size = f.fixed_size()
        if size is None or version in f.nullable_versions:
            break
        if f.name == "ErrorCode" and f.type == "int16":
            error_code = offset
        elif f.name == "ThrottleTimeMs" and f.type == "int32":
            throttle = offset
        offset += size
    return Prefix(error_code, throttle)


def response_prefixes(row: ApiRow) -> list[Prefix]:
    """Per version, the prefix from the newest release, checked against every other stable release."""
    prefixes = []
    for version in range(row.min_version, row.max_version + 1):
        candidates = row.responses[version]
        chosen = next((m for m in candidates if m.is_stable(version)), candidates[0])
        prefix = fixed_prefix(chosen, version)
        for other in candidates:
            if other is not chosen and other.is_stable(version) and fixed_prefix(other, version) != prefix:
                raise GeneratorError(f"{row.name} v{version}: {chosen.release} and {other.release} "
                                     f"disagree on the response prefix")
        prefixes.append(prefix)
    return prefixes


# ---------------------------------------------------------------------------------------------------------
# Error codes from the protocol guide


class ErrorRow(NamedTuple):
    code: int
    name: str
    retriable: bool
    description: str


ERROR_ROW = re.compile(r"^([A-Z][A-Z0-9_]*) \| (-?\d+) \| (True|False) \| (.*?) ?\|$")


def parse_error_table(guide_text: str) -> list[ErrorRow]:
    """Rows ``NAME | code | True/False | description |`` of the guide's error-code table."""
    rows = [ErrorRow(int(m[2]), m[1], m[3] == "True", m[4].strip())
            for m in map(ERROR_ROW.match, guide_text.splitlines()) if m]
    if not rows:
        raise GeneratorError("no error-code table in the protocol guide")
    codes = [r.code for r in rows]
    if len(set(codes)) != len(codes) or len({r.name for r in rows}) != len(rows):
        raise GeneratorError("duplicate error codes or names in the protocol guide")
    if (0, "NONE") not in {(r.code, r.name) for r in rows}:
        raise GeneratorError("the error table lacks NONE = 0")
    return sorted(rows)


# ---------------------------------------------------------------------------------------------------------
# Rendering


def sha256_prefix(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def banner(what: str, sources: Sequence[str]) -> str:
    lines = [f'"""{what}', "", "Generated by `python -m dissectors.kafka.generate` from:"]
    lines += [f"- {s}" for s in sources]
    lines += ["Do not edit by hand: change the generator or its sources and rerun it.", '"""', ""]
    return "\n".join(lines)


def message_sources(commits: dict[str, str]) -> list[str]:
    return [f"{MESSAGES_DIR}/{rel}/: *Request.json, *Response.json, *Header.json\n"
            f"  (apache/kafka commit {commits[rel]})" for rel in RELEASES]


def quote(text: str) -> str:
    """A double-quoted Python string literal (JSON string syntax is valid Python)."""
    return json.dumps(text, ensure_ascii=False)


def wrapped_literal(text: str, indent: str, width: int = 110) -> list[str]:
    """A string literal as implicitly concatenated lines, each within ``width`` with its indent."""
    room = width - len(indent) - 1  # the trailing comma or parenthesis
    pieces, current = [], ""
    for word in re.split(r"(?<= )", text):
        if current and len(quote(current + word)) > room:
            pieces.append(current)
            current = ""
        current += word
    pieces.append(current)
    return [indent + quote(p) for p in pieces]


def render_apis(rows: list[ApiRow], header_v0: tuple[tuple[int, int], ...], always_v0: tuple[int, ...],
                commits: dict[str, str]) -> str:
    out = [banner("Kafka API keys, names and version ranges (the union of the releases below).",
                  message_sources(commits))]
    out.append("# (api_key, name, min_version, max_version, flexible_from)")
    out.append("# flexible_from: first flexible version, None if never. The comment names the releases that")
    out.append("# define each version range.")
    out.append("APIS = (")
    for r in rows:
        out.append(f"    ({r.key}, {quote(r.name)}, {r.min_version}, {r.max_version}, {r.flexible_from}),"
                   f"  # {r.sources()}")
    out.append(")")
    out.append("")
    out.append("# (api_key, api_version) whose requests use header v0, which has no client_id.")
    out.append(f"REQUEST_HEADER_V0 = {header_v0!r}")
    out.append("")
    out.append("# api keys whose responses use header v0 (no tag buffer) in every version, flexible or not.")
    out.append(f"RESPONSE_HEADER_V0_ALWAYS = {always_v0!r}")
    out.append("")
    return "\n".join(out)


def render_errors(errors: list[ErrorRow], guide: Path) -> str:
    out = [banner("Kafka error codes, from the protocol guide's error-code table.",
                  [f"{guide.name} (sha256 {sha256_prefix(guide)}...)"])]
    out.append("# (code, name, retriable, description)")
    out.append("ERRORS = (")
    for e in errors:
        out.append(f"    ({e.code}, {quote(e.name)}, {e.retriable},")
        out.extend(wrapped_literal(e.description, "     "))
        out[-1] += "),"
    out.append(")")
    out.append("")
    return "\n".join(out)


PREFIX_COMMENT = """\
# Offsets count from the start of the response body (after the response header). A field gets an
# offset only when every field before it has a fixed size in that version; None otherwise.
# api_key: (min_version, ((error_code_offset, throttle_time_ms_offset) for each version from min))"""


def render_prefix(rows: list[ApiRow], commits: dict[str, str]) -> str:
    out = [banner("Byte offsets of top-level ErrorCode and ThrottleTimeMs in response bodies.",
                  message_sources(commits))]
    out.append(PREFIX_COMMENT)
    out.append("RESPONSE_PREFIX = {")
    for r in rows:
        items = [f"({p.error_code}, {p.throttle_time_ms})" for p in response_prefixes(r)]
        joined = ", ".join(items) + ("," if len(items) == 1 else "")
        one_line = f"    {r.key}: ({r.min_version}, ({joined})),  # {r.name}"
        if len(one_line) <= 110:
            out.append(one_line)
            continue
        out.append(f"    {r.key}: ({r.min_version}, (  # {r.name}")
        line = "       "
        for item in items:
            if len(line) + 2 + len(item) > 110:
                out.append(line)
                line = "       "
            line += f" {item},"
        out.append(line)
        out.append("    )),")
    out.append("}")
    out.append("")
    return "\n".join(out)


def render_init(commits: dict[str, str], guide: Path) -> str:
    sources = [*message_sources(commits), f"{guide.name} (sha256 {sha256_prefix(guide)}...)"]
    return banner("Tables generated from the Kafka protocol definitions (see dissectors/kafka/generate.py).",
                  sources)


def render_all(spec_dir: Path) -> dict[str, str]:
    """File name -> content of every generated module."""
    releases = {release: load_release(spec_dir, release) for release in RELEASES}
    commits = release_commits(spec_dir)
    rows = build_api_rows(releases)
    header_v0, always_v0 = check_header_rules(releases, rows)
    guide = spec_dir / GUIDE_FILE
    errors = parse_error_table(guide.read_text(encoding="utf-8"))
    return {
        "__init__.py": render_init(commits, guide),
        "apis.py": render_apis(rows, header_v0, always_v0, commits),
        "errors.py": render_errors(errors, guide),
        "response_prefix.py": render_prefix(rows, commits),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dissectors.kafka.generate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR,
                        help="folder with kafka-messages/ and the protocol guide (default: ../shared/spec)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the generated modules are out of date")
    args = parser.parse_args(argv)
    try:
        files = render_all(args.spec)
    except (GeneratorError, OSError, KeyError) as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return 2
    stale = [name for name, text in files.items()
             if not (OUTPUT_DIR / name).is_file() or (OUTPUT_DIR / name).read_text(encoding="utf-8") != text]
    if args.check:
        for name in stale:
            print(f"out of date: {OUTPUT_DIR.name}/{name}", file=sys.stderr)
        return 1 if stale else 0
    OUTPUT_DIR.mkdir(exist_ok=True)
    for name in stale:
        (OUTPUT_DIR / name).write_text(files[name], encoding="utf-8")
    print(f"{len(stale)} of {len(files)} modules rewritten in {OUTPUT_DIR.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
