"""`kafkacap show`: chosen exchanges decoded in full, as trees (what `tshark -V` is to Wireshark).

The analysis runs as usual, twice: the first pass chooses the exchanges (of a connection, or the one holding a
packet), the second keeps their raw frames through a tap on the matcher; they are then decoded with the
schema decoder and printed with rich.
Every label is a rich ``Text`` and every string from the capture passes through ``inert``: a client id or
topic name is shown, never read as markup or sent to the terminal as control codes.
"""

from __future__ import annotations

import struct
import sys
import uuid
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from analyzer.cli.jsonout import dumps
from analyzer.cli.summary import Collector
from analyzer.cli.terminal import inert
from analyzer.pipeline.analyze import FileReport, Options, analyze_file
from analyzer.tables.schemas import EXCHANGES_SCHEMA
from dissectors.kafka.apis import api_name
from dissectors.kafka.decoder import RecordsRef, decode
from dissectors.kafka.errors import error_name
from dissectors.kafka.headers import HeaderError, decode_request_header, decode_response_header
from dissectors.kafka.legacy07 import REQUEST_TYPES, Legacy07Error, decode_07_request, decode_07_tree

MAX_LIST_ITEMS = 50  # longer arrays are shown in part, with a count of the rest
# Fields that carry credentials, shown by their size only: SASL tokens (PLAIN sends the password as is, SCRAM
# and OAUTHBEARER their proofs and bearer tokens), delegation token HMACs (the token's secret) and SCRAM
# salted passwords (AlterUserScramCredentials).
SECRET_FIELDS = frozenset(("auth_bytes", "hmac", "salted_password"))


@dataclass
class Frames:
    """The tap for the second pass: keeps the bytes of the chosen exchanges' frames, and of no other."""

    requests: set[tuple[int, int]]  # (connection id, first packet) of each request frame wanted
    responses: set[tuple[int, int]]  # (connection id, last packet) of each response frame wanted
    # (first packet, last packet, is_response, bytes), by (connection, packet, is_response)
    kept: dict[tuple[int, int, bool], tuple[int, int, bool, bytes]] = field(default_factory=dict)

    def __call__(self, conn_id: int, is_response: bool, first_no: int, last_no: int, frame) -> None:
        key = (conn_id, last_no) if is_response else (conn_id, first_no)
        if key in (self.responses if is_response else self.requests):
            self.kept[(*key, is_response)] = (first_no, last_no, is_response, bytes(frame))


def show(console: Console, path: str, options: Options, connection: int | None, packet: int | None,
         limit: int, as_json: bool = False) -> tuple[int, FileReport]:
    """Print the exchanges asked for; returns how many were shown, and what became of the file.

    Two passes over the capture, so that memory holds only the frames shown: the first finds the rows and
    which frames hold ``packet`` (their packet numbers, not their bytes); the second keeps the chosen
    exchanges' frames. One pass keeping every frame needed memory in proportion to the capture.
    """
    holding: list[tuple[int, bool, int, int]] = []  # frames that hold the packet: connection, side, packets

    def note(conn_id: int, is_response: bool, first_no: int, last_no: int, frame) -> None:
        if packet is not None and first_no <= packet <= last_no:
            holding.append((conn_id, is_response, first_no, last_no))

    sink = Collector()
    report = analyze_file(path, options, sink, tap=note)
    chosen = []
    for row in sink.table("exchanges", EXCHANGES_SCHEMA).to_pylist():
        conn = row["connection_id"]
        if connection is not None and conn != connection:
            continue
        if packet is not None and not any(
                c == conn and (last == row["response_frame"] if is_response else first == row["request_frame"])
                for c, is_response, first, last in holding):
            continue
        chosen.append(row)
        if limit and len(chosen) >= limit:
            break
    if not chosen:
        return 0, report
    frames = Frames(requests={(r["connection_id"], r["request_frame"]) for r in chosen
                              if r["request_frame"] is not None},
                    responses={(r["connection_id"], r["response_frame"]) for r in chosen
                               if r["response_frame"] is not None})
    analyze_file(path, options, lambda table, batch: None, tap=frames)
    for row in chosen:
        conn = row["connection_id"]
        request = frames.kept.get((conn, row["request_frame"], False))
        response = frames.kept.get((conn, row["response_frame"], True))
        if as_json:
            sys.stdout.write(dumps(exchange_document(row, request, response)) + "\n")
        else:
            console.print(exchange_tree(row, request, response))
    return len(chosen), report


MAX_JSON_LIST_ITEMS = 10_000  # longer arrays end with {"more": n}: a script gets the structure, memory stays bounded


def exchange_document(row: dict, request: tuple | None, response: tuple | None) -> dict:
    """The exchange for ``show --json``: its exchanges-table row, and each frame's packets, header and body
    decoded (secrets by size only, as in the tree), or the error that stopped the decoding."""
    legacy = row["api_key"] is None and row["api_name"] in REQUEST_TYPES.values()
    out: dict = {"exchange": row}
    request_07 = None
    for side, frame in (("request", request), ("response", response)):
        if frame is None:
            out[side] = None
            continue
        data = frame[3]
        doc: dict = {"packets": [frame[0], frame[1]], "bytes_kept": len(data)}
        try:
            if legacy:
                doc["body"] = _json_value("", decode_07_tree(data, 4, len(data), request_07, side == "response"))
                if side == "request":
                    request_07 = decode_07_request(data, 4, len(data))
            elif side == "response":
                doc["length"] = struct.unpack_from(">i", data, 0)[0]
                if row["api_key"] is None:
                    doc["correlation_id"] = struct.unpack_from(">i", data, 4)[0]
                else:
                    corr, body = decode_response_header(data, 4, len(data), row["api_key"], row["api_version"])
                    doc["correlation_id"] = corr
                    doc["body"] = _json_value("", decode(data, body, len(data), row["api_key"], row["api_version"],
                                                         True))
            else:
                doc["length"] = struct.unpack_from(">i", data, 0)[0]
                h = decode_request_header(data, 4, len(data))
                doc.update(api_key=h.api_key, api_version=h.api_version, correlation_id=h.correlation_id,
                           client_id=h.client_id)
                doc["body"] = _json_value("", decode(data, h.body_offset, len(data), row["api_key"],
                                                     row["api_version"], False))
        except (HeaderError, Legacy07Error) as exc:
            doc["error"] = str(exc)
        out[side] = doc
    return out


def _json_value(name: str, v):
    """A decoded value for JSON: bytes in hex (16-byte ids as UUIDs), secrets as their size, records by place."""
    if isinstance(v, dict):
        out = {}
        for k, item in v.items():
            if k in SECRET_FIELDS and isinstance(item, bytes | bytearray | memoryview):
                out[str(k)] = {"redacted_bytes": len(item)}
            else:
                out[str(k)] = _json_value(str(k), item)
        return out
    if isinstance(v, list):
        items = [_json_value("", item) for item in v[:MAX_JSON_LIST_ITEMS]]
        if len(v) > MAX_JSON_LIST_ITEMS:
            items.append({"more": len(v) - MAX_JSON_LIST_ITEMS})
        return items
    if isinstance(v, RecordsRef):
        return {"records_bytes": v.length, "offset": v.offset}
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        return str(uuid.UUID(bytes=b)) if len(b) == 16 and name.endswith("id") else b.hex()
    return v


def exchange_tree(row: dict, request: tuple | None, response: tuple | None) -> Tree:
    api = f"{row['api_name']} v{row['api_version']}" if row["api_name"] else "response without request"
    latency = f", {row['latency_ms']:.3f} ms" if row["latency_ms"] is not None else ""
    title = Text.assemble(
        (inert(api), "bold"), f" correlation_id={row['correlation_id']} ",
        (inert(f"{row['client_ip']}:{row['client_port']} → {row['broker_ip']}:{row['broker_port']}"), "dim"),
        " status=", (inert(row["status"]), "bold"), latency)
    tree = Tree(title)
    if row["note"]:
        tree.add(Text("note: " + inert(row["note"]), style="yellow"))
    legacy = row["api_key"] is None and row["api_name"] in REQUEST_TYPES.values()
    request_07 = None
    if request is not None:
        node = tree.add(Text(f"Request (packets {request[0]}-{request[1]}, {len(request[3])} bytes kept)"))
        if legacy:
            request_07 = _legacy_tree(node, request[3], None, False)
        else:
            _frame_tree(node, request[3], row["api_key"], row["api_version"], False)
    if response is not None:
        node = tree.add(Text(f"Response (packets {response[0]}-{response[1]}, {len(response[3])} bytes kept)"))
        if legacy:
            _legacy_tree(node, response[3], request_07, True)
        else:
            _frame_tree(node, response[3], row["api_key"], row["api_version"], True)
    return tree


def _legacy_tree(node: Tree, frame: bytes, request, is_response: bool):
    """A Kafka 0.7 frame; returns the decoded request (responses are decoded in its light)."""
    try:
        _value_tree(node, decode_07_tree(frame, 4, len(frame), request, is_response), frame)
        return None if is_response else decode_07_request(frame, 4, len(frame))
    except Legacy07Error as exc:
        node.add(_cannot_decode(exc))
        return None


def _frame_tree(node: Tree, frame: bytes, api_key: int | None, api_version: int | None, is_response: bool) -> None:
    node.add(Text(f"length: {struct.unpack_from('>i', frame, 0)[0]}"))
    try:
        if is_response:
            if api_key is None:
                node.add(Text(f"correlation_id: {struct.unpack_from('>i', frame, 4)[0]}"))
                return
            corr, body = decode_response_header(frame, 4, len(frame), api_key, api_version)
            node.add(Text(f"correlation_id: {corr}"))
        else:
            h = decode_request_header(frame, 4, len(frame))
            node.add(Text(f"api_key: {h.api_key} ({inert(str(api_name(h.api_key)))})"))
            node.add(Text(f"api_version: {h.api_version}"))
            node.add(Text(f"correlation_id: {h.correlation_id}"))
            node.add(Text(f"client_id: {_scalar('client_id', h.client_id, frame)}"))
            body = h.body_offset
        _value_tree(node.add(Text("body")), decode(frame, body, len(frame), api_key, api_version, is_response),
                    frame)
    except HeaderError as exc:
        node.add(_cannot_decode(exc))


def _cannot_decode(exc: Exception) -> Text:
    return Text("cannot decode: " + inert(str(exc)), style="red")


def _value_tree(node: Tree, value, frame: bytes) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            name = inert(str(k))
            if isinstance(v, dict | list) and v:
                _value_tree(node.add(Text(name)), v, frame)
            elif k in SECRET_FIELDS and isinstance(v, bytes | bytearray | memoryview):
                node.add(Text(f"{name}: (redacted: {len(v)} bytes)"))
            elif str(k).endswith("error_code") and isinstance(v, int) and v:
                node.add(Text.assemble(f"{name}: ", (f"{v} {inert(str(error_name(v)))}", "red")))
            else:
                node.add(Text(f"{name}: {_scalar(str(k), v, frame)}"))
    elif isinstance(value, list):
        for i, v in enumerate(value[:MAX_LIST_ITEMS]):
            if isinstance(v, dict | list):
                _value_tree(node.add(Text(f"[{i}]")), v, frame)
            else:
                node.add(Text(f"[{i}]: {_scalar('', v, frame)}"))
        if len(value) > MAX_LIST_ITEMS:
            node.add(Text(f"... {len(value) - MAX_LIST_ITEMS} more", style="dim"))


def _scalar(name: str, v, frame: bytes) -> str:
    """One decoded value as inert text: strings quoted and escaped, bytes in hex."""
    if isinstance(v, RecordsRef):
        return f"records: {v.length} bytes at offset {v.offset}"
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        if len(b) == 16 and name.endswith("id"):
            return str(uuid.UUID(bytes=b))
        return b[:32].hex() + ("..." if len(b) > 32 else "") + f" ({len(b)} bytes)"
    if isinstance(v, str):
        return "'" + inert(v).replace("'", "\\'") + "'"
    return inert(repr(v))
