"""Kafka API names, version ranges and header versions.

Every frame needs its API looked up, so the tables are tuples indexed by api key: one bounds check and
one index, no hashing. The data comes from ``_generated/apis.py``; this module only shapes it.

Header versions (from Kafka's RequestHeader.json and ResponseHeader.json):
- request header v0 (no client_id) only for ControlledShutdown v0; flexible versions use v2 (adds a tag
  buffer); everything else v1;
- response header v1 (adds a tag buffer) for flexible versions, else v0; ApiVersions responses always
  use v0, so that a client can read the error of a version it does not speak.
"""

from __future__ import annotations

from typing import NamedTuple

from dissectors.kafka._generated import apis as _generated


class ApiInfo(NamedTuple):
    key: int
    name: str  # as the protocol guide spells it: "Produce", "ApiVersions"
    min_version: int
    max_version: int
    flexible_from: int | None  # first flexible version (requests and responses agree); None if never


def _index_by_key(rows: tuple[tuple[int, str, int, int, int | None], ...]) -> tuple[ApiInfo | None, ...]:
    table: list[ApiInfo | None] = [None] * (max(row[0] for row in rows) + 1)
    for row in rows:
        table[row[0]] = ApiInfo(*row)
    return tuple(table)


API_BY_KEY: tuple[ApiInfo | None, ...] = _index_by_key(_generated.APIS)
"""Indexed by api key (0..max key); None where no API has that key."""

API_KEY_LIMIT = len(API_BY_KEY)
"""One past the highest known api key: ``0 <= key < API_KEY_LIMIT`` guards an index."""

# The APIs whose latency is mostly a wait the client asked for: a Fetch is held until data arrives or its
# max_wait_ms passes (a long poll); JoinGroup until the group's members have joined (up to the rebalance
# timeout); SyncGroup until the leader has sent the assignment. Their latency is not the broker's speed.
WAIT_APIS = ("Fetch", "JoinGroup", "SyncGroup")

NEVER = 1 << 16
"""A version above any int16, for "never flexible" in the threshold tables below."""

REQUEST_HEADER_V2_FROM: tuple[int, ...] = tuple(
    NEVER if info is None or info.flexible_from is None else info.flexible_from for info in API_BY_KEY
)
"""Per api key, the first version whose request header is v2 (tagged fields). For hot loops."""

RESPONSE_HEADER_V1_FROM: tuple[int, ...] = tuple(
    NEVER if key in _generated.RESPONSE_HEADER_V0_ALWAYS else threshold
    for key, threshold in enumerate(REQUEST_HEADER_V2_FROM)
)
"""Per api key, the first version whose response header is v1 (tagged fields). For hot loops."""

REQUEST_HEADER_V0_VERSIONS: tuple[tuple[int, ...], ...] = tuple(
    tuple(version for key_v0, version in _generated.REQUEST_HEADER_V0 if key_v0 == key)
    for key in range(API_KEY_LIMIT)
)
"""Per api key, the versions whose request header is v0 (no client_id); empty for nearly all."""


DEFINED_VERSIONS: tuple[range, ...] = tuple(
    range(0) if info is None else range(info.min_version, info.max_version + 1) for info in API_BY_KEY
)
"""Per api key, the versions the definitions describe (an empty range where no API has that key)."""


FORMER_NAMES: dict[int, tuple[str, ...]] = dict(_generated.FORMER_NAMES)
"""Per api key Kafka renamed, the names older releases gave it (key 74: ListClientMetricsResources)."""

_KEY_BY_LOWER_NAME: dict[str, int] = {
    **{name.lower(): key for key, names in FORMER_NAMES.items() for name in names},
    **{info.name.lower(): info.key for info in API_BY_KEY if info is not None},
}


def key_of_name(name: str) -> int | None:
    """The api key of an API name in any case, current or former (``listclientmetricsresources`` -> 74)."""
    return _KEY_BY_LOWER_NAME.get(name.lower())


def api_name(key: int) -> str | None:
    """The API's name, or None for a key no known release defines."""
    if 0 <= key < API_KEY_LIMIT:
        info = API_BY_KEY[key]
        if info is not None:
            return info.name
    return None


def is_known(api_key: int, api_version: int) -> bool:
    """True when some known release defines this version of this API."""
    return 0 <= api_key < API_KEY_LIMIT and api_version in DEFINED_VERSIONS[api_key]


def undefined_note(api_key: int, api_version: int) -> str:
    """Why a request of an undefined API or version is not decoded, for a row's note."""
    name = api_name(api_key)
    if name is None:
        return f"API key {api_key} is not defined by any known Kafka release: body not decoded"
    versions = DEFINED_VERSIONS[api_key]
    return (f"{name} v{api_version} is beyond the definitions (v{versions.start}-v{versions.stop - 1}): "
            "body not decoded")


def request_header_version(api_key: int, api_version: int) -> int:
    """0, 1 or 2. Past an API's max version flexibility carries on; unknown APIs get 1, the classic one."""
    if 0 <= api_key < API_KEY_LIMIT:
        if api_version >= REQUEST_HEADER_V2_FROM[api_key]:
            return 2
        if api_version in REQUEST_HEADER_V0_VERSIONS[api_key]:
            return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1, mirroring :func:`request_header_version`; unknown APIs get 0."""
    if 0 <= api_key < API_KEY_LIMIT and api_version >= RESPONSE_HEADER_V1_FROM[api_key]:
        return 1
    return 0
