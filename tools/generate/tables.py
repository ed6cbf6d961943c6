"""Generate the Kafka API tables from Apache Kafka's JSON message definitions.

Run ``python -m tools.generate [--spec DIR] [--check]`` from the repository root. ``DIR`` defaults to the folder
``python -m tools.kafka_definitions`` makes from Apache Kafka's release jars on Maven Central (and caches):
``kafka-messages/<version>/`` per release, with its ``source.json``, and ``errors.tsv``, the error table read from
the newest release's ``Errors`` class. The output lands in ``dissectors/kafka/_generated/``. The generator is a
tool of the repository, not part of the installed package: the runtime reads only what it wrote.

Why a generator: Kafka defines every request and response, every version, in JSON. Hand-copying version
ranges or field offsets would drift behind new releases (the way hand-written dissectors do). Reading
the JSON keeps one source of truth. The model below (field types, versions, nullable and tagged versions,
nested and common structs) yields the API table, the error table, the fixed top-level response prefix
and the full per-version schemas of every request and response (``schemas.py``), which one small
decoder (``dissectors/kafka/decoder.py``) interprets, and from the same schemas the compiled extraction
(``extract_plans.py``).

The message definitions come from two Kafka releases: the last 3.x still has versions that Kafka 4 removed
(KIP-896), and the newest release has APIs and versions the older one lacks. The tables take the union. Where
two releases define the same version, they must agree on what we use from it; otherwise the generator stops with
an error instead of guessing (``RENAMED_APIS`` and ``DRAFTS`` name the differences it was told of).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "dissectors" / "kafka" / "_generated"

# What the generated modules' banners say made them.
MADE_BY = "python -m tools.generate"
MADE_BY_FILE = "tools/generate/"

MESSAGES_DIR = "kafka-messages"
SOURCE_FILE = "source.json"  # per release folder: artifact, version, commit, jar_sha256
ERRORS_FILE = "errors.tsv"  # code, name, retriable, description: Kafka's Errors enum, one line per code
ERRORS_SOURCE_FILE = "errors.json"

# Keys Kafka renamed: api key -> (the older releases' name, the newer one). The newest name is the API's name;
# the older one stays accepted where users name APIs (filters). Any other name change stops the generator.
RENAMED_APIS = {74: ("ListClientMetricsResources", "ListConfigResources")}  # KIP-1142, Kafka 4.1

# APIs whose definitions in releases before the one given were drafts of a feature not yet shipped (no broker of
# those releases answers them), so a later release may lay out the same version differently: the later one stands.
DRAFTS = {"ReadShareGroupStateSummary": (4, 0)}  # KIP-932 share groups: 3.9 carried an early v0 response

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
    tag = raw.get("tag")
    if isinstance(tag, str) and tag.isdigit():  # Kafka's JSON reader takes "0" for 0, and one file says so
        tag = int(tag)
    return Field(
        name=name,
        type=ftype,
        versions=Versions.parse(raw["versions"]),
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=Versions.parse(raw.get("taggedVersions")),
        tag=tag,
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
    valid = Versions.parse(raw["validVersions"])
    retired = valid == EMPTY  # an API the release no longer speaks: its file says only key, name, "none"
    if not retired and "fields" not in raw:
        raise GeneratorError(f"{where}: no fields")
    message = Message(
        release=release,
        file=path.name,
        kind=raw["type"],
        name=raw["name"],
        api_key=raw.get("apiKey"),
        valid_versions=valid,
        flexible_versions=Versions.parse(raw.get("flexibleVersions") if retired else raw["flexibleVersions"]),
        fields=tuple(parse_field(f, where) for f in raw.get("fields", ())),
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


def release_order(version: str) -> tuple[int, ...]:
    """``"3.9.2"`` -> (3, 9, 2): releases sort by their numbers, not as text (4.10 after 4.9)."""
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        raise GeneratorError(f"{MESSAGES_DIR}/{version}: not a release number")
    return tuple(int(part) for part in version.split("."))


def find_releases(spec_dir: Path) -> tuple[str, ...]:
    """The release folders under ``kafka-messages/``, oldest first. A version defined by several releases is
    laid out from the newest one that is stable."""
    folder = spec_dir / MESSAGES_DIR
    if not folder.is_dir():
        raise GeneratorError(f"no {MESSAGES_DIR}/ in {spec_dir}")
    releases = tuple(sorted((p.name for p in folder.iterdir() if p.is_dir()), key=release_order))
    if not releases:
        raise GeneratorError(f"no release folders in {folder}")
    return releases


def load_release(spec_dir: Path, release: str) -> dict[str, Message]:
    """All request, response and header definitions of one release, keyed by JSON name."""
    folder = spec_dir / MESSAGES_DIR / release
    paths = sorted(path for path in folder.glob("*.json") if path.name != SOURCE_FILE)
    if not paths:
        raise GeneratorError(f"no JSON definitions in {folder}")
    messages = {}
    for path in paths:
        message = parse_message(path, release)
        if message.name != path.stem:
            raise GeneratorError(f"{release}/{path.name} defines {message.name}")
        messages[message.name] = message
    return messages


def read_source(path: Path) -> str:
    """Where a release's files came from, in words for the generated modules' banners."""
    try:
        source = json.loads(path.read_text(encoding="utf-8"))
        artifact, version, commit, digest = (source[k] for k in ("artifact", "version", "commit", "jar_sha256"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GeneratorError(f"{path.parent.name}/{path.name}: {exc}") from None
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise GeneratorError(f"{path.parent.name}/{path.name}: commit or sha256 malformed")
    return f"{artifact.split(':')[-1]}-{version}.jar (apache/kafka commit {commit}, sha256 {digest[:16]}...)"


def release_sources(spec_dir: Path, releases: Sequence[str]) -> dict[str, str]:
    """Each release folder's jar and Apache Kafka commit, read from its ``source.json``."""
    return {release: read_source(spec_dir / MESSAGES_DIR / release / SOURCE_FILE) for release in releases}


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
    former_names: list[str] = field(default_factory=list)  # what older releases called this key
    responses: dict[int, list[Message]] = field(default_factory=dict)

    def sources(self) -> str:
        """Which release defines which versions, for a comment next to the row."""
        by_release: dict[str, list[int]] = {}
        for version in sorted(self.requests):
            for message in self.requests[version]:
                by_release.setdefault(message.release, []).append(version)
        return ", ".join(f"{rel} {vs[0]}-{vs[-1]}" if len(vs) > 1 else f"{rel} {vs[0]}"
                         for rel, vs in sorted(by_release.items(), key=lambda kv: release_order(kv[0])))


def pair_messages(release: dict[str, Message]) -> Iterator[tuple[Message, Message]]:
    """Yield (request, response) per API of one release, checking that the pair agrees."""
    requests: dict[int, Message] = {}
    responses: dict[int, Message] = {}
    for message in release.values():
        if message.kind not in ("request", "response") or message.valid_versions == EMPTY:
            continue  # an API the release no longer speaks keeps its file with "validVersions": "none"
        key = message.api_key
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < 1 << 15:
            raise GeneratorError(f"{message.release}/{message.file}: bad api key {key!r}")
        same_kind = requests if message.kind == "request" else responses
        if key in same_kind:
            raise GeneratorError(f"{message.release}: {same_kind[key].name} and {message.name} "
                                 f"share key {key}")
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
    """``releases`` oldest first (dicts keep order)."""
    rows: dict[int, ApiRow] = {}
    key_of_name: dict[str, int] = {}
    for release in reversed(releases):  # newest first, so per-version lists are newest first
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
                if RENAMED_APIS.get(req.api_key) != (req.api_name, row.name):
                    raise GeneratorError(f"api key {req.api_key}: {row.name} in one release, "
                                         f"{req.api_name} in {release}")
                if req.api_name not in row.former_names:
                    row.former_names.append(req.api_name)
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
    """Derive the header exceptions, after checking the definitions still state them.

    Kafka 4 dropped request header v0 with the one API version that used it (ControlledShutdown v0), so the
    request-header rule is checked in the releases that still define header v0.
    """
    by_name = {row.name: row for row in rows}
    for release, messages in releases.items():
        request_header, response_header = messages.get("RequestHeader"), messages.get("ResponseHeader")
        if request_header is None or request_header.valid_versions not in (Versions(0, 2), Versions(1, 2)):
            raise GeneratorError(f"{release}: RequestHeader is not versions 0-2 or 1-2")
        if response_header is None or response_header.valid_versions != Versions(0, 1):
            raise GeneratorError(f"{release}: ResponseHeader is not versions 0-1")
        api, version, phrase = REQUEST_HEADER_V0_RULE
        if 0 in request_header.valid_versions:
            if phrase not in " ".join(messages[f"{api}Request"].comments.split()):
                raise GeneratorError(f"{release}: {api}Request no longer says it has a {phrase}")
            statement = f"Version 0 of the RequestHeader is only used by v{version} of {api}Request"
            if statement not in " ".join(request_header.comments.split()):
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
# Full schemas: every field of every request and response, per version


SCHEMA_PRIMITIVES = frozenset(PRIMITIVE_SIZES)  # fixed-size types: never nullable, never compact
ENTITY_TYPES = frozenset({"topicName", "brokerId", "groupId", "producerId", "transactionalId"})


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``, the way Kafka names fields in its protocol guide.

    An underscore goes before a capital that follows a lower-case letter or digit, so runs of capitals
    stay together (``ZkVersion`` -> ``zk_version``).
    """
    out = []
    previous_was_capital = True
    for char in name:
        if char.isupper():
            if not previous_was_capital:
                out.append("_")
            out.append(char.lower())
            previous_was_capital = True
        else:
            out.append(char)
            previous_was_capital = False
    return "".join(out)


def wire_type(base: str, compact: bool, nullable: bool) -> str:
    """``string`` -> ``compact_nullable_string`` and so on, the protocol guide's type names in lower case."""
    return ("compact_" if compact else "") + ("nullable_" if nullable else "") + base


class SchemaBuilder:
    """Lays out one message version as nested tuples (the format ``schemas.py`` documents), interned.

    Equal sub-structures (a partition struct unchanged over ten versions, an empty tag list) become one
    object, so the generated module defines each once and the decoder compiles each once. ``usage``
    remembers, per struct, where it is used first and in which versions, to name and comment it.
    """

    def __init__(self) -> None:
        self.interned: dict[tuple, tuple] = {}
        # id(struct) -> (message name, struct name, [(message name, version), ...]) from its first use on
        self.usage: dict[int, tuple[str, str, list[tuple[str, int]]]] = {}
        self._message: tuple[str, int] = ("", 0)

    def intern(self, value: tuple) -> tuple:
        return self.interned.setdefault(value, value)

    def message(self, message: Message, version: int) -> tuple:
        common = {s.name: s for s in message.common_structs}
        where = f"{message.release}/{message.file} v{version}"
        self._message = (message.name, version)
        struct = self.struct(message.fields, version, message.is_flexible(version), common, where)
        self.note(struct, message.name)
        return struct

    def note(self, struct: tuple, struct_name: str) -> None:
        message_name, version = self._message
        uses = self.usage.setdefault(id(struct), (message_name, struct_name, []))[2]
        if (message_name, version) not in uses:
            uses.append((message_name, version))

    def struct(self, fields: Sequence[Field], version: int, flexible: bool, common: dict[str, Struct],
               where: str) -> tuple:
        plain: list[tuple] = []
        tagged: dict[int, tuple] = {}
        for f in fields:
            if version not in f.versions:
                continue
            entry = self.field(f, version, flexible, common, where)
            if version in f.tagged_versions:
                if not flexible:
                    raise GeneratorError(f"{where}: {f.name} is tagged in a non-flexible version")
                if f.tag is None or not 0 <= f.tag < 1 << 31 or f.tag in tagged:
                    raise GeneratorError(f"{where}: {f.name} has a missing, bad or duplicate tag {f.tag!r}")
                tagged[f.tag] = self.intern((f.tag, *entry))
            else:
                plain.append(entry)
        names = [entry[1] for entry in tagged.values()] + [entry[0] for entry in plain]
        if len(set(names)) != len(names):
            raise GeneratorError(f"{where}: duplicate field names {names}")
        tags = self.intern(tuple(tagged[tag] for tag in sorted(tagged))) if flexible else None
        return self.intern((self.intern(tuple(plain)), tags))

    def field(self, f: Field, version: int, flexible: bool, common: dict[str, Struct], where: str) -> tuple:
        name = snake_case(f.name)
        compact = flexible if f.flexible_versions is None else version in f.flexible_versions
        nullable = version in f.nullable_versions
        entity = f.entity_type
        if entity is not None and entity not in ENTITY_TYPES:
            raise GeneratorError(f"{where}: {f.name} has unknown entityType {entity!r}")
        element = f.element_type
        if f.is_struct:
            sub_fields = f.fields
            if not sub_fields:
                struct_def = common[element]
                if version not in struct_def.versions:
                    raise GeneratorError(f"{where}: {f.name} uses {element} outside its versions")
                sub_fields = struct_def.fields
            sub = self.struct(sub_fields, version, flexible, common, f"{where}.{f.name}")
            self.note(sub, element)
            if f.is_array:
                return self.intern((name, wire_type("array", compact, nullable), sub))
            return self.intern((name, "nullable_struct" if nullable else "struct", sub))
        if f.is_array:
            if element not in SCHEMA_PRIMITIVES and element not in ("string", "bytes"):
                raise GeneratorError(f"{where}: {f.name} is an array of {element}")
            item = element if element in SCHEMA_PRIMITIVES else wire_type(element, compact, False)
            kind = wire_type("array", compact, nullable)
            return self.intern((name, kind, item, entity) if entity else (name, kind, item))
        if element in SCHEMA_PRIMITIVES:
            if nullable:
                raise GeneratorError(f"{where}: {f.name} is a nullable {element}")
            kind = element
        else:  # string, bytes, records
            kind = wire_type(element, compact, nullable)
        return self.intern((name, kind, None, entity) if entity else (name, kind))


class SchemaTable(NamedTuple):
    """Per api key: (min_version, one top-level struct per version from min) for requests and responses."""

    requests: dict[int, tuple[int, tuple[tuple, ...]]]
    responses: dict[int, tuple[int, tuple[tuple, ...]]]
    builder: SchemaBuilder
    names: dict[int, str]  # api key -> API name


def wire_shape(struct: tuple) -> tuple:
    """A struct without its field names and entity types: what the bytes on the wire depend on."""
    fields, tagged = struct

    def shape(entry: tuple) -> tuple:
        element = entry[2] if len(entry) > 2 else None
        return entry[1], wire_shape(element) if isinstance(element, tuple) else element

    return tuple(map(shape, fields)), None if tagged is None else tuple((t[0], *shape(t[1:])) for t in tagged)


def is_draft(message: Message) -> bool:
    """Whether ``message`` comes from a release in which its API had not shipped (``DRAFTS``)."""
    shipped = DRAFTS.get(message.api_name)
    return shipped is not None and release_order(message.release) < shipped


def chosen_schema(builder: SchemaBuilder, candidates: list[Message], name: str, version: int) -> tuple:
    """The layout from the newest stable release; every other stable release must lay it out the same.

    Releases may rename a field without changing the bytes (Vote v0-1: CandidateId became ReplicaId), so
    they must agree on the wire shape; the names are the chosen release's.
    """
    chosen = next((m for m in candidates if m.is_stable(version)), candidates[0])
    schema = builder.message(chosen, version)
    for other in candidates:
        if other is chosen or not other.is_stable(version) or is_draft(other):
            continue
        if wire_shape(SchemaBuilder().message(other, version)) != wire_shape(schema):
            raise GeneratorError(f"{name} v{version}: {chosen.release} and {other.release} disagree on the "
                                 f"{chosen.kind} schema")
    return schema


def build_schemas(rows: list[ApiRow]) -> SchemaTable:
    builder = SchemaBuilder()
    requests, responses = {}, {}
    for row in rows:
        versions = range(row.min_version, row.max_version + 1)
        requests[row.key] = (row.min_version, tuple(
            chosen_schema(builder, row.requests[v], f"{row.name}Request", v) for v in versions))
        responses[row.key] = (row.min_version, tuple(
            chosen_schema(builder, row.responses[v], f"{row.name}Response", v) for v in versions))
    return SchemaTable(requests, responses, builder, {row.key: row.name for row in rows})


SCHEMAS_GUIDE = '''\
# How to read this module
#
# A struct is (fields, tagged).
#   fields: the fields in wire order, each (name, type), (name, type, element) or
#           (name, type, element, entity); names are the protocol guide's (snake_case).
#   tagged: None in non-flexible versions; else the tagged fields as (tag, name, type[, element[, entity]]),
#           by tag, that may appear in the struct's trailing tag buffer.
# type: bool int8 int16 uint16 int32 uint32 int64 float64 uuid;
#       [compact_][nullable_]string, [compact_][nullable_]bytes, [compact_][nullable_]records (records are
#       bytes holding a record batch or message set); [compact_][nullable_]array; struct, nullable_struct
#       (a nullable struct is preceded by an int8: -1 for null, 1 for present).
#       compact_ means the flexible-version encoding (unsigned varint length + 1, 0 for null).
# element: for arrays the element (a type above or a struct); for struct and nullable_struct the struct;
#          None for other types that carry an entity.
# entity: Kafka's entityType when the definition gives one (topicName, brokerId, groupId, producerId,
#         transactionalId).
#
# Each struct is defined once and shared wherever it recurs (across versions, and across APIs when
# identical). It is named after its first use; the comment above it lists every use.'''


def version_ranges(versions: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    parts, start, previous = [], None, None
    for v in sorted(versions):
        if start is None:
            start = previous = v
        elif v == previous + 1:
            previous = v
        else:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = previous = v
    if start is not None:
        parts.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ", ".join(parts)


def struct_names(table: SchemaTable) -> tuple[list[tuple], dict[int, str]]:
    """Every distinct struct, children before parents, and a Python name for each."""
    order: list[tuple] = []
    names: dict[int, str] = {}
    taken: set[str] = set()

    def visit(struct: tuple) -> None:
        if id(struct) in names:
            return
        fields, tagged = struct
        for entry in (*fields, *[t[1:] for t in tagged or ()]):
            if len(entry) > 2 and isinstance(entry[2], tuple):
                visit(entry[2])
        message_name, struct_name, uses = table.builder.usage[id(struct)]
        first_version = uses[0][1]
        if struct_name == message_name:
            base = f"{message_name}_v{first_version}"
        else:  # AddPartitionsToTxnResponse + AddPartitionsToTxnTopicResult -> ..._TopicResult
            api = re.sub("(Request|Response)$", "", message_name)
            short = next((struct_name[len(p):] for p in (message_name, api)
                          if struct_name.startswith(p) and struct_name[len(p):][:1].isupper()), "")
            base = f"{message_name}_{short or struct_name}_v{first_version}"
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        taken.add(name)
        names[id(struct)] = name
        order.append(struct)

    for key in table.requests:  # API by API, request then response
        for per_key in (table.requests, table.responses):
            for struct in per_key[key][1]:
                visit(struct)
    return order, names


def render_entry(entry: tuple, names: dict[int, str], indent: str = "    ") -> list[str]:
    """One field as ``(name, type, ...),`` on a line, or over several when it would pass 110 columns."""
    parts = [names[id(item)] if isinstance(item, tuple) else repr(item) if item is None or
             isinstance(item, int) else quote(item) for item in entry]
    line = f"{indent}({', '.join(parts)}),"
    if len(line) <= 110:
        return [line]
    return [f"{indent}(", *(f"{indent}    {part}," for part in parts), f"{indent}),"]


def render_schemas(table: SchemaTable, commits: dict[str, str]) -> str:
    out = [banner("Field layouts of every Kafka request and response, every version (the union of the "
                  "releases below).", message_sources(commits))]
    out.append(SCHEMAS_GUIDE)
    order, names = struct_names(table)
    for struct in order:
        fields, tagged = struct
        _message_name, _struct_name, uses = table.builder.usage[id(struct)]
        by_message: dict[str, list[int]] = {}
        for message_name, version in uses:
            by_message.setdefault(message_name, []).append(version)
        comment = "; ".join(f"{m} v{version_ranges(vs)}" for m, vs in by_message.items())
        out.append("")
        out.extend(wrapped_comment(comment))
        tags = "None" if tagged is None else "()" if not tagged else None
        if not fields and tags is not None:
            out.append(f"{names[id(struct)]} = ((), {tags})")
            continue
        out.append(f"{names[id(struct)]} = ((")
        for entry in fields:
            out.extend(render_entry(entry, names))
        if tags is not None:
            out.append(f"), {tags})")
            continue
        out.append("), (")
        for entry in tagged:
            out.extend(render_entry(entry, names))
        out.append("))")
    for label, per_key in (("REQUESTS", table.requests), ("RESPONSES", table.responses)):
        out.append("")
        kind = label.lower()[:-1]
        out.append(f"# api_key: (min_version, ({kind} struct for each version from min_version))")
        out.append(f"{label} = {{")
        for key, (min_version, structs) in per_key.items():
            items = [names[id(s)] for s in structs]
            out.append(f"    {key}: ({min_version}, (  # {table.names[key]}")
            out.extend(wrapped_items(items))
            out.append("    )),")
        out.append("}")
    out.append("")
    return "\n".join(out)


def wrapped_items(items: list[str], width: int = 110) -> list[str]:
    """Tuple items, comma-terminated, filled into indented lines of at most ``width`` characters."""
    lines, line = [], "       "
    for item in items:
        if len(line) + 2 + len(item) > width:
            lines.append(line)
            line = "       "
        line += f" {item},"
    lines.append(line)
    return lines


def wrapped_comment(text: str, width: int = 110) -> list[str]:
    lines, current = [], "#"
    for word in text.split(" "):
        if len(current) + 1 + len(word) > width and current != "#":
            lines.append(current)
            current = "#  "
        current += " " + word
    lines.append(current)
    return lines


# ---------------------------------------------------------------------------------------------------------
# Error codes from Kafka's Errors class


class ErrorRow(NamedTuple):
    code: int
    name: str
    retriable: bool
    description: str


ERROR_LINE = re.compile(r"^(-?\d+)\t([A-Z][A-Z0-9_]*)\t(True|False)\t(.*)$")


def parse_error_table(text: str) -> list[ErrorRow]:
    """Lines ``code<TAB>NAME<TAB>True/False<TAB>description`` as ``tools/java/ErrorTable.java`` prints them."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        match = ERROR_LINE.match(line)
        if not match:
            raise GeneratorError(f"{ERRORS_FILE} line {number}: not code, name, retriable, description")
        rows.append(ErrorRow(int(match[1]), match[2], match[3] == "True", match[4].strip()))
    if not rows:
        raise GeneratorError(f"{ERRORS_FILE} is empty")
    codes = [r.code for r in rows]
    if len(set(codes)) != len(codes) or len({r.name for r in rows}) != len(rows):
        raise GeneratorError(f"duplicate error codes or names in {ERRORS_FILE}")
    if (0, "NONE") not in {(r.code, r.name) for r in rows}:
        raise GeneratorError("the error table lacks NONE = 0")
    return sorted(rows)


# ---------------------------------------------------------------------------------------------------------
# Rendering


def banner(what: str, sources: Sequence[str]) -> str:
    lines = [f'"""{what}', "", f"Generated by `{MADE_BY}` from:"]
    lines += [f"- {s}" for s in sources]
    lines += ["Do not edit by hand: change the generator or its sources and rerun it.", '"""', ""]
    return "\n".join(lines)


def message_sources(commits: dict[str, str]) -> list[str]:
    """``commits``: release -> its jar and commit, oldest release first."""
    return [f"*Request.json, *Response.json, *Header.json of Apache Kafka {release}:\n  {source}"
            for release, source in commits.items()]


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
    out.append("# api_key: names older releases gave it (still accepted where users name an API)")
    renamed = {r.key: tuple(r.former_names) for r in rows if r.former_names}
    out.append(f"FORMER_NAMES = {renamed!r}")
    out.append("")
    out.append("# (api_key, api_version) whose requests use header v0, which has no client_id.")
    out.append(f"REQUEST_HEADER_V0 = {header_v0!r}")
    out.append("")
    out.append("# api keys whose responses use header v0 (no tag buffer) in every version, flexible or not.")
    out.append(f"RESPONSE_HEADER_V0_ALWAYS = {always_v0!r}")
    out.append("")
    return "\n".join(out)


def render_errors(errors: list[ErrorRow], source: str) -> str:
    out = [banner("Kafka error codes, as Kafka's Errors class defines them (the protocol guide's error table "
                  "is printed from it).", [f"org.apache.kafka.common.protocol.Errors in\n  {source}"])]
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


def render_prefix(rows: list[ApiRow], prefixes: dict[int, list[Prefix]], commits: dict[str, str]) -> str:
    out = [banner("Byte offsets of top-level ErrorCode and ThrottleTimeMs in response bodies.",
                  message_sources(commits))]
    out.append(PREFIX_COMMENT)
    out.append("RESPONSE_PREFIX = {")
    for r in rows:
        items = [f"({p.error_code}, {p.throttle_time_ms})" for p in prefixes[r.key]]
        joined = ", ".join(items) + ("," if len(items) == 1 else "")
        one_line = f"    {r.key}: ({r.min_version}, ({joined})),  # {r.name}"
        if len(one_line) <= 110:
            out.append(one_line)
            continue
        out.append(f"    {r.key}: ({r.min_version}, (  # {r.name}")
        out.extend(wrapped_items(items))
        out.append("    )),")
    out.append("}")
    out.append("")
    return "\n".join(out)


def render_init(commits: dict[str, str]) -> str:
    return banner(f"Tables generated from the Kafka protocol definitions (see {MADE_BY_FILE}).",
                  message_sources(commits))


class Tables(NamedTuple):
    """Everything the generated modules hold, derived from one definitions folder, before any is rendered."""

    commits: dict[str, str]  # release -> its jar and commit, oldest release first
    rows: list[ApiRow]
    header_v0: tuple[tuple[int, int], ...]
    always_v0: tuple[int, ...]
    errors: list[ErrorRow]
    errors_source: str
    prefixes: dict[int, list[Prefix]]  # api key -> the response prefix of each version from min_version
    schemas: SchemaTable


def build_tables(spec_dir: Path) -> Tables:
    """Read and check the definitions; the checks run in this order, so that a layout disagreement is reported
    by the narrowest check that sees it (the response prefix before the whole schema)."""
    releases = {release: load_release(spec_dir, release) for release in find_releases(spec_dir)}
    commits = release_sources(spec_dir, tuple(releases))
    rows = build_api_rows(releases)
    header_v0, always_v0 = check_header_rules(releases, rows)
    try:
        errors = parse_error_table((spec_dir / ERRORS_FILE).read_text(encoding="utf-8"))
    except OSError as exc:
        raise GeneratorError(f"no error table: {exc}") from None
    errors_source = read_source(spec_dir / ERRORS_SOURCE_FILE)
    prefixes = {row.key: response_prefixes(row) for row in rows}
    return Tables(commits, rows, header_v0, always_v0, errors, errors_source, prefixes, build_schemas(rows))


def render_all(spec_dir: Path) -> dict[str, str]:
    """File name -> content of every generated module."""
    tables = build_tables(spec_dir)
    commits = tables.commits
    files = {
        "__init__.py": render_init(commits),
        "apis.py": render_apis(tables.rows, tables.header_v0, tables.always_v0, commits),
        "errors.py": render_errors(tables.errors, tables.errors_source),
        "response_prefix.py": render_prefix(tables.rows, tables.prefixes, commits),
        "schemas.py": render_schemas(tables.schemas, commits),
    }
    files["extract_plans.pxi"], files["extract_programs.py"] = render_extract_plans(tables.schemas, commits)
    return files


def render_extract_plans(table: SchemaTable, commits: dict[str, str]) -> tuple[str, str]:
    """The extraction as Cython for the APIs of HOT_APIS and as the interpreter's programs for the others
    (extract_plans.py), from the same schemas and struct names as ``schemas.py`` rendered beside it, so that the
    plans follow the tables written with them rather than the ones last committed. Nothing generated is run: the
    test that the written ``schemas.py`` holds these structs under these names imports it."""
    from tools.generate.extract_plans import GenerateError, render_extract

    _order, names = struct_names(table)
    header = banner("Extraction of what the tables need from the bodies of the APIs in HOT_APIS, as Cython "
                    "included by dissectors/kafka/extract.pyx.", message_sources(commits))
    header = "\n".join("# " + line if line else "#" for line in header.rstrip().removeprefix('"""')
                       .removesuffix('"""').strip().splitlines())
    programs_header = banner("The extraction of the APIs outside HOT_APIS: programs _interpret.pyx runs.",
                             message_sources(commits))
    try:
        return render_extract(table.requests, table.responses, names, header, programs_header)
    except GenerateError as exc:
        raise GeneratorError(str(exc)) from None


def default_spec_dir() -> Path:
    """The definitions folder made from the release jars (``tools/kafka_definitions.py``), made on first use."""
    from tools.kafka_definitions import prepare
    from tools.maven import MavenError

    try:
        return prepare()
    except MavenError as exc:
        raise GeneratorError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.generate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--spec", type=Path,
                        help="folder with kafka-messages/<release>/ and errors.tsv (default: made from the release "
                             "jars on Maven Central by python -m tools.kafka_definitions, and cached)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the generated modules are out of date")
    args = parser.parse_args(argv)
    try:
        files = render_all(args.spec or default_spec_dir())
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
    print(f"{len(stale)} of {len(files)} files rewritten in {OUTPUT_DIR.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
