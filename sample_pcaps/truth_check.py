"""Compare kafkacap's ``exchanges`` rows for one capture with that capture's truth file.

Each check returns a list of human-readable problems (empty when the capture's analysis agrees with what
the clients said). Pure functions over plain dicts, so the tests and any script can share them.

Keys: kafka-python and aiokafka requests carry the client's local port, so (client_id, client_port,
correlation_id) names exactly one request. librdkafka and the Java clients log no port; their requests are
compared as a multiset of (client_id, correlation_id, api_name, api_version), client ids being unique per
client instance.

Where the clients reported per partition (the Java clients: the offsets each record was acknowledged at, the
records read from each partition, the offsets committed), the ``partitions`` table is held to that too.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Row = dict[str, Any]
ANSWERED = ("ok", "error")


def _request_rows(rows: Iterable[Row], client_ids: set[str]) -> list[Row]:
    return [r for r in rows if r.get("client_id") in client_ids and r.get("status") != "orphan_response"]


def _index(rows: Iterable[Row]) -> dict[tuple, list[Row]]:
    index: dict[tuple, list[Row]] = {}
    for row in rows:
        index.setdefault((row["client_id"], row["client_port"], row["correlation_id"]), []).append(row)
    return index


def withheld_clients(truth: dict) -> set[str]:
    """Client ids of a TLS scenario whose session keys were not logged: nothing of theirs can be decoded."""
    return set(truth.get("tls", {}).get("withheld_clients", ()))


def decodable_requests(truth: dict) -> list[dict]:
    withheld = withheld_clients(truth)
    return [r for r in truth["requests"] if r["client_id"] not in withheld]


def match_requests(truth: dict, rows: list[Row]) -> tuple[list[tuple[dict, Row]], list[str]]:
    """Pair every request a client logged with its exchange row; problems for missing, doubled or extra (the
    requests of clients whose TLS keys were withheld are left out: none of theirs may be an exchange)."""
    truth = {**truth, "requests": decodable_requests(truth)}
    client_ids = {r["client_id"] for r in truth["requests"]} | withheld_clients(truth)
    candidates = _request_rows(rows, client_ids)
    problems: list[str] = []
    pairs: list[tuple[dict, Row]] = []
    by_port = _index(r for r in candidates)
    portless_rows: dict[tuple, list[Row]] = {}
    portless_ids = {r["client_id"] for r in truth["requests"] if r["client_port"] is None}
    for row in candidates:
        if row["client_id"] in portless_ids:
            key = (row["client_id"], row["correlation_id"], row["api_name"], row["api_version"])
            portless_rows.setdefault(key, []).append(row)
    for request in truth["requests"]:
        label = (f"{request['client_id']} {request['api_name']} v{request['api_version']} "
                 f"corr {request['correlation_id']}")
        if request["client_port"] is not None:
            found = by_port.get((request["client_id"], request["client_port"], request["correlation_id"]), [])
            if len(found) != 1:
                problems.append(f"{label} port {request['client_port']}: {len(found)} exchanges, expected 1")
                continue
            row = found[0]
            if (row["api_name"], row["api_version"]) != (request["api_name"], request["api_version"]):
                problems.append(f"{label}: exchange says {row['api_name']} v{row['api_version']}")
            pairs.append((request, row))
        else:
            key = (request["client_id"], request["correlation_id"], request["api_name"], request["api_version"])
            found = portless_rows.get(key, [])
            if not found:
                problems.append(f"{label}: no exchange with this client id, correlation id, api and version")
                continue
            pairs.append((request, found.pop(0)))
    paired = {id(row) for _, row in pairs}
    extra = [r for r in candidates if id(r) not in paired]
    if extra:
        problems.append(f"{len(extra)} exchange(s) from the clients' ids that no client logged as one request, e.g. "
                        + "; ".join(f"{r['client_id']} {r['api_name']} corr {r['correlation_id']}" for r in extra[:5]))
    return pairs, problems


def check_statuses(truth: dict, pairs: list[tuple[dict, Row]]) -> list[str]:
    """Answered requests are matched; where kafkacap reports a top-level error code it is the one the client
    saw; requests owed no response are acks0; deliberately unanswered ones are no_response, and so are those
    whose connection the broker closed while the client waited (``connection_closed``: a too-new version).

    kafkacap's exchange ``error_code`` is the top-level code when non-zero, else the first nested one: where the
    client saw top-level 0 and printed that nested code in the same response (truth ``nested_errors``), they
    agree."""
    unanswered = {(u["client_id"], u["api_name"]): u["expected_status"] for u in truth["unanswered"]}
    nested = {(e["client_id"], e["correlation_id"], e["error_code"]) for e in truth.get("nested_errors", ())}
    problems = []
    for request, row in pairs:
        label = f"{request['client_id']} {request['api_name']} corr {request['correlation_id']}"
        expected = unanswered.get((request["client_id"], request["api_name"]))
        if request.get("connection_closed") and not request["response_received"]:
            expected = expected or "no_response"  # the broker closed the connection, the client still waiting
        if request["expects_response"] is False or (expected and not request["response_received"]):
            want = "acks0" if request["expects_response"] is False else expected
            if row["status"] != want:
                problems.append(f"{label}: status {row['status']}, expected {want}")
        elif request["response_received"]:
            if row["status"] not in ANSWERED:
                problems.append(f"{label}: the client got a response but the status is {row['status']}")
            elif None not in (request["response_error_code"], row["error_code"]) \
                    and row["error_code"] != request["response_error_code"] \
                    and not (request["response_error_code"] == 0
                             and (request["client_id"], request["correlation_id"], row["error_code"]) in nested):
                problems.append(f"{label}: the client saw error {request['response_error_name']}, kafkacap "
                                f"{row['error_name']}")
    return problems


def undecoded_error_codes(pairs: list[tuple[dict, Row]]) -> list[str]:
    """Responses whose top-level error code the client read but kafkacap left empty (for example one that
    sits after a variable-length field, which a header-level decoder does not reach)."""
    return sorted({f"{request['api_name']} v{request['api_version']}" for request, row in pairs
                   if request["response_error_code"] is not None and row.get("error_code") is None})


def check_top_level_errors(truth: dict, rows: list[Row]) -> list[str]:
    """Every deliberate top-level error is an exchange with that client, api and error name."""
    found = Counter((r.get("client_id"), r.get("api_name"), r.get("error_name")) for r in rows
                    if r.get("status") == "error")
    wanted = Counter((e["client_id"], e["api_name"], e["error_name"]) for e in truth["errors"] if e["level"] == "top")
    return [f"{client_id} {api}: {count} x {error} expected, {found[(client_id, api, error)]} found"
            for (client_id, api, error), count in wanted.items() if found[(client_id, api, error)] < count]


def check_nested_errors(truth: dict, exchanges: list[Row], errors: list[Row]) -> list[str]:
    """Every deliberate nested (per-topic or per-partition) error is a row of the ``errors`` table, tied to an
    exchange of the client that received it. The errors table names its exchange either directly (client_id,
    api_name) or by (capture_file, connection_id, correlation_id)."""
    by_exchange = {(r["capture_file"], r["connection_id"], r["correlation_id"]): r for r in exchanges
                   if r.get("status") != "orphan_response"}
    found: Counter = Counter()
    for error in errors:
        exchange = by_exchange.get((error.get("capture_file"), error.get("connection_id"),
                                    error.get("correlation_id")), {})
        client_id = error.get("client_id", exchange.get("client_id"))
        api_name = error.get("api_name", exchange.get("api_name"))
        found[(client_id, api_name, error.get("error_name"))] += 1
    wanted = Counter((e["client_id"], e["api_name"], e["error_name"]) for e in truth["errors"]
                     if e["level"] == "nested")
    return [f"{client_id} {api}: {count} x nested {error} expected, {found[(client_id, api, error)]} found"
            for (client_id, api, error), count in wanted.items() if found[(client_id, api, error)] < count]


def _producer_groups(truth: dict) -> list[tuple[list[str], set[str]]]:
    """The topics that share producers, with those producers: one Produce request may carry several topics of one
    producer (a transaction writing two topics), so records on the wire are counted per such group of topics."""
    groups: list[tuple[list[str], set[str]]] = []
    for topic, entry in truth["topics"].items():
        producers = set(entry["producers"])
        if not producers:
            continue
        joined = [g for g in groups if g[1] & producers]
        topics = [topic] + [t for g in joined for t in g[0]]
        for g in joined:
            producers |= g[1]
            groups.remove(g)
        groups.append((topics, producers))
    return groups


def check_record_counts(truth: dict, rows: list[Row]) -> list[str]:
    """Produce requests of each producer carry exactly the records it had acknowledged (or sent with acks=0), counted
    over the topics those producers wrote (a request may carry several); Fetch responses to each consumer carry at
    least the records it consumed."""
    problems = []
    for topics, producers in _producer_groups(truth):
        produce = [r for r in rows if r.get("client_id") in producers and r.get("api_name") == "Produce"]
        carried = sum(r.get("record_count") or 0 for r in produce)
        # records a producer sent again (after NOT_LEADER_OR_FOLLOWER, say) are on the wire once more
        expected = sum(truth["topics"][topic]["produced"] + truth["topics"][topic]["produced_acks0"]
                       + truth["topics"][topic].get("produced_retried", 0) for topic in topics)
        if produce and carried != expected:
            problems.append(f"{', '.join(sorted(topics))}: Produce requests carry {carried} records, producers "
                            f"report {expected}")
    for topic, entry in truth["topics"].items():
        consumers = set(entry["consumers"])
        fetch = [r for r in rows if r.get("client_id") in consumers and r.get("api_name") == "Fetch"]
        fetched = sum(r.get("record_count") or 0 for r in fetch)
        if fetch and fetched < entry["consumed"]:
            problems.append(f"{topic}: Fetch responses carry {fetched} records, consumers read {entry['consumed']}")
    return problems


def check_nested_errors_seen(truth: dict, errors: list[Row]) -> list[str]:
    """Every nested error code the clients printed in a response (truth ``nested_errors``) is a row of the
    ``errors`` table for that client's exchange, with the same code and partition."""
    found = Counter((r.get("client_id"), r.get("correlation_id"), r.get("error_code"), r.get("partition"))
                    for r in errors)
    wanted = Counter((e["client_id"], e["correlation_id"], e["error_code"], e["partition"])
                     for e in truth.get("nested_errors", ()))
    return [f"{client_id} corr {cid}: {count} x nested error {code} (partition {partition}) printed by the client, "
            f"{found[(client_id, cid, code, partition)]} in the errors table"
            for (client_id, cid, code, partition), count in wanted.items()
            if found[(client_id, cid, code, partition)] < count]


def check_follower_fetches(truth: dict, rows: list[Row]) -> list[str]:
    """A replicated scenario (truth ``expectations.follower_fetches``: node ids, listener port, restarted nodes):
    every node sent follower Fetch requests on that port, each carrying its own node id as replica id (kind
    ``follower``), a restarted node with a new broker epoch after its restart, and no client's Fetch carries a
    replica id. Needs kafkacap's ``replica_id`` column; a problem says so when it is missing."""
    expected = truth.get("expectations", {}).get("follower_fetches")
    if not expected:
        return []
    fetches = [r for r in rows if r.get("api_name") == "Fetch" and r.get("broker_port") == expected["port"]]
    if fetches and "replica_id" not in fetches[0]:
        return ["kafkacap has no replica_id column: follower fetches cannot be told from consumers' fetches"]
    clients = {r["client_id"] for r in truth["requests"]}
    followers = [r for r in fetches if r.get("replica_id") is not None and r["replica_id"] >= 0]
    problems = [f"node {node}: no follower Fetch with replica id {node} on port {expected['port']}"
                for node in expected["nodes"] if not any(r["replica_id"] == node for r in followers)]
    wrong = [r for r in followers if r.get("client_id") in clients]
    if wrong:
        problems.append(f"{len(wrong)} Fetch requests of the clients carry a replica id, e.g. {wrong[0]['client_id']} "
                        f"corr {wrong[0]['correlation_id']}: {wrong[0]['replica_id']}")
    kinds = Counter(r.get("fetch_kind") for r in followers)
    if set(kinds) - {"follower"}:
        problems.append(f"follower fetches of kind {dict(kinds)}")
    for node in expected.get("restarted", ()):
        epochs = {r.get("replica_epoch") for r in followers if r["replica_id"] == node}
        if len(epochs - {None}) < 2:
            problems.append(f"node {node} was restarted, yet its follower fetches carry broker epochs {epochs}")
    return problems


def has_partition_detail(truth: dict) -> bool:
    """Whether the clients of this scenario reported per partition (topics[...]["partitions"])."""
    return any("partitions" in entry for entry in truth["topics"].values())


def check_partitions(truth: dict, partitions: list[Row]) -> list[str]:
    """Per partition the clients reported: the Produce entries of a topic's producers that the broker accepted
    cover exactly the offsets the producers were acknowledged at (base_offset onwards, one per record), in the
    producers' codec, with a producer id where the producer was idempotent; the Fetch responses to the topic's
    consumers carry at least the records they read from the partition."""
    problems = []
    idempotent = set(truth.get("expectations", {}).get("idempotent_producers", ()))
    for topic, entry in truth["topics"].items():
        producers, consumers = set(entry["producers"]), set(entry["consumers"])
        for partition, detail in sorted(entry.get("partitions", {}).items()):
            label = f"{topic}-{partition}"
            here = [r for r in partitions if r.get("topic") == topic and r.get("partition") == int(partition)]
            accepted = [r for r in here if r.get("api_name") == "Produce" and r.get("client_id") in producers
                        and r.get("error_code") == 0]
            offsets = sorted(offset for r in accepted if r.get("base_offset") is not None and r.get("records")
                             for offset in range(r["base_offset"], r["base_offset"] + r["records"]))
            if offsets != detail["offsets"]:
                problems.append(f"{label}: accepted Produce entries cover offsets {offsets}, the producers were "
                                f"acknowledged at {detail['offsets']}")
            codecs = {r.get("codec") for r in accepted} - set(entry["codecs"])
            if codecs:
                problems.append(f"{label}: Produce codec {sorted(map(str, codecs))}, producers used {entry['codecs']}")
            anonymous = [r for r in accepted if r["client_id"] in idempotent
                         and (r.get("producer_id") is None or r["producer_id"] < 0)]
            if anonymous:
                problems.append(f"{label}: {len(anonymous)} Produce entries of idempotent producers without a "
                                "producer id")
            fetched = sum(r.get("records") or 0 for r in here
                          if r.get("api_name") == "Fetch" and r.get("client_id") in consumers)
            if fetched < detail["consumed"]:
                problems.append(f"{label}: Fetch responses carry {fetched} records, consumers read "
                                f"{detail['consumed']}")
    return problems


def check_committed_offsets(truth: dict, partitions: list[Row]) -> list[str]:
    """The last accepted OffsetCommit entry of a group's members, per partition, holds the offset the client
    committed."""
    problems = []
    for group_id, entry in truth["groups"].items():
        members = set(entry["members"])
        commits = sorted((r for r in partitions if r.get("api_name") == "OffsetCommit"
                          and r.get("client_id") in members and r.get("error_code") == 0),
                         key=lambda r: (r.get("request_last_ts") is None, r.get("request_last_ts")))
        last = {(r.get("topic"), r.get("partition")): r.get("committed_offset") for r in commits}
        for topic, offsets in entry["committed"].items():
            for partition, offset in offsets.items():
                seen = last.get((topic, int(partition)))
                if seen != offset:
                    problems.append(f"group {group_id} {topic}-{partition}: the client committed {offset}, the "
                                    f"OffsetCommit requests say {seen}")
    return problems


def max_in_flight_on_the_wire(rows: list[Row]) -> int:
    """Most exchanges of one connection whose request had fully arrived while an earlier one was unanswered,
    from kafkacap's own timestamps."""
    best = 0
    by_connection: dict[Any, list[Row]] = {}
    for row in rows:
        if row.get("status") in ANSWERED and row.get("request_last_ts") and row.get("response_last_ts"):
            by_connection.setdefault((row["capture_file"], row["connection_id"]), []).append(row)
    for exchanges in by_connection.values():
        exchanges.sort(key=lambda r: r["request_last_ts"])
        for i, row in enumerate(exchanges):
            pending = 1 + sum(1 for earlier in exchanges[:i] if earlier["response_last_ts"] > row["request_last_ts"])
            best = max(best, pending)
    return best


def check_expectations(truth: dict, rows: list[Row]) -> list[str]:
    problems = []
    if truth.get("expectations", {}).get("pipelined") and max_in_flight_on_the_wire(rows) < 2:
        problems.append("the scenario pipelines requests, but no connection shows two in flight")
    minimum = truth.get("expectations", {}).get("min_produce_request_bytes")
    if minimum:
        sizes = [r.get("request_size") or 0 for r in rows if r.get("api_name") == "Produce"]
        if not sizes or max(sizes) < minimum:
            problems.append(f"largest Produce request is {max(sizes, default=0)} bytes, expected >= {minimum}")
    problems += check_unsupported_versions(truth, rows)
    return problems


def check_unsupported_versions(truth: dict, rows: list[Row]) -> list[str]:
    """A scenario of requests at versions the broker does not support (truth ``expectations.unsupported_versions``):
    each of the raw client's requests is an exchange on its port with that API and version, unanswered
    (no_response) where the broker closed the connection, else answered with the error the client read."""
    expected = truth.get("expectations", {}).get("unsupported_versions")
    if not expected:
        return []
    problems = []
    client_id = expected["client_id"]
    for request in expected["requests"]:
        label = f"{client_id} {request['api_name']} v{request['api_version']} port {request['client_port']}"
        found = [r for r in rows if r.get("client_id") == client_id and r.get("client_port") == request["client_port"]
                 and r.get("correlation_id") == request["correlation_id"] and r.get("status") != "orphan_response"]
        if len(found) != 1:
            problems.append(f"{label}: {len(found)} exchanges, expected 1")
            continue
        row = found[0]
        if (row["api_name"], row["api_version"]) != (request["api_name"], request["api_version"]):
            problems.append(f"{label}: the exchange says {row['api_name']} v{row['api_version']}")
        if request["outcome"] != "answered":
            if row["status"] != "no_response":
                problems.append(f"{label}: the broker closed the connection, yet the status is {row['status']}")
        elif row["status"] not in ANSWERED:
            problems.append(f"{label}: answered, yet the status is {row['status']}")
        elif request.get("error_name") not in (None, "NONE") and row.get("error_name") != request["error_name"]:
            problems.append(f"{label}: the client read {request['error_name']}, kafkacap {row.get('error_name')}")
    return problems


def kafkacap_command() -> list[str]:
    """The kafkacap CLI of the running interpreter: the installed script, or the module."""
    script = Path(sys.executable).with_name("kafkacap")
    return [str(script)] if script.exists() else [sys.executable, "-m", "analyzer.cli.commands"]


def export_tables(captures: list[Path], out_dir: Path, ports: Iterable[int],
                  keylogs: Iterable[Path] = ()) -> dict[str, list[Row]]:
    """Run ``kafkacap export`` on the captures (TLS ones decrypted with the key logs, given together in one
    file); every table it wrote, by name (``exchanges``, ...)."""
    import pyarrow.parquet as pq

    command = [*kafkacap_command(), "export", *map(str, captures), "-o", str(out_dir), "--no-progress"]
    keylogs = list(keylogs)
    if keylogs:
        combined = Path(out_dir).with_name(Path(out_dir).name + ".keys.log")
        combined.write_bytes(b"\n".join(Path(k).read_bytes() for k in keylogs))
        command += ["--tls-keylog", str(combined)]
    for port in sorted(set(ports)):
        command += ["--port", str(port)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kafkacap export failed ({result.returncode}): {result.stderr[-2000:]}")
    return {path.stem: pq.read_table(path).to_pylist() for path in sorted(Path(out_dir).glob("*.parquet"))}
