"""Rotated capture sets: which files belong together, and the stitch stage that makes their rows one capture's.

tcpdump -C / -G write one capture as consecutive files whose names differ only in numbers. Each file is
analysed on its own (in parallel, on any worker); the task of a file also follows its open connections into
the next file (``analyzer.pipeline.carry``). The stitch stage then makes the rows equal to those of one pass over the
concatenated files:

- every row of a chain of continuing files names the chain's first file as ``capture_file``, and packet
  numbers (frames, connection ids) count on across the chain, as in the concatenated capture;
- rows of the next file from before a connection's hand-over point are dropped (the previous file's task
  read those packets in sync and owns them), and the connection keeps its id from the file it began in;
- a connection's rows in the ``connections`` table from several files are added up into one.

``Stitcher`` works batch by batch so the CLI can stream; it needs the reports (or ``files`` rows and
hand-overs) of the files before the one whose batches it is given.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.pipeline.carry import Handoff
from analyzer.tables.schemas import CONNECTIONS_SCHEMA, TABLES

_DIGITS = re.compile(r"\d+")
_TRAILING_DIGITS = re.compile(r"\d+$")
_COMPRESSED = re.compile(r"\.(gz|bz2|xz|zst)$", re.IGNORECASE)



def set_key(path: str) -> str:
    """Files of one rotated set share this key: numbers masked, a trailing number (tcpdump -C) dropped."""
    folder, name = os.path.split(path)
    m = _COMPRESSED.search(name)
    suffix = m.group(0) if m else ""
    stem = name[: len(name) - len(suffix)]
    return os.path.join(folder, _DIGITS.sub("#", _TRAILING_DIGITS.sub("", stem)) + suffix.lower())


def _natural(path: str) -> list:
    name = _COMPRESSED.sub("", os.path.basename(path))
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def capture_sets(paths: Iterable[str]) -> list[list[str]]:
    """Group paths into sets in rotation order (cap.pcap, cap.pcap1, ..., cap.pcap10; or time-stamped names).

    Files of a set that turn out not to follow each other in time (parallel captures from several brokers
    named broker1.pcap, broker2.pcap) are not stitched: the carry step checks their timestamps.
    """
    groups: dict[str, list[str]] = {}
    for p in paths:
        groups.setdefault(set_key(p), []).append(p)
    out = []
    for members in groups.values():
        try:
            members.sort(key=_natural)
        except TypeError:  # names that only look alike: keep the given order
            pass
        out.append(members)
    return out


def next_files(paths: list[str]) -> dict[str, str | None]:
    """For each path, the next file of its set (None for the last one and for single files)."""
    after: dict[str, str | None] = {}
    for members in capture_sets(paths):
        for here, nxt in zip(members, [*members[1:], None], strict=True):
            after[here] = nxt
    return after


EXCHANGE_PART_TABLES = tuple(name for name, spec in TABLES.items() if name != "exchanges" and spec.per_file
                             and {"connection_id", "correlation_id"} <= set(spec.schema.names))
"""Tables whose rows belong to an exchange (its connection and correlation id, as the declarations say):
dropped with it where the previous file's task owns the exchange."""


@dataclass
class _FilePlan:
    head: str  # capture_file written for this file's rows: the first file of its chain
    offset: int  # added to its packet numbers
    mapped: dict[int, tuple[int, int]]  # its connection id -> (id in the chain, stop frame)
    owned: set[int]  # (connection id << 32 | correlation id) of rows the previous file's task owns


class Stitcher:
    """Per file of a chain: rows to drop, the capture_file and packet numbers to write. Files must be added
    in chain order (``add_file``) before their batches pass through ``apply``."""

    def __init__(self) -> None:
        self._plans: dict[str, _FilePlan] = {}
        self._held: list[pa.RecordBatch] = []  # connection rows of connections that span files
        self._links: dict[str, str] = {}  # file -> the next one of its chain, as the carry steps read them
        self._waiting: dict[str, list[tuple]] = {}  # hand-overs into files further on, until they are reached
        self.dropped: dict[str, int] = {}  # exchange rows dropped per file (the previous file owns them)

    def add_file(self, name: str, packets: int, continues_in: str | None, handoffs: Iterable[Handoff]) -> None:
        plan = self._plans.get(name)
        if plan is None:
            plan = self._plans[name] = _FilePlan(name, 0, {}, set())
        handoffs = list(handoffs)
        visited = list(dict.fromkeys(h.next_file for h in handoffs))  # in reading order
        for here, there in zip([name, *visited], visited, strict=False):
            self._links.setdefault(here, there)
        continues_in = continues_in or self._links.get(name)
        if continues_in is None:
            return
        for h in handoffs:
            chain_id = plan.mapped.get(h.connection_id, (h.connection_id + plan.offset, 0))[0]
            owned = {(h.next_connection_id << 32) | (c & 0xFFFFFFFF) for c in h.owned}
            self._waiting.setdefault(h.next_file or continues_in, []).append(
                (h.next_connection_id, chain_id, h.stop_frame, owned))
        nxt = self._plans.get(continues_in)
        if nxt is None:  # (the shards of one file each add their own connections' hand-overs)
            nxt = self._plans[continues_in] = _FilePlan(plan.head, plan.offset + packets, {}, set())
        for next_id, chain_id, stop, owned in self._waiting.pop(continues_in, []):
            # A connection read through a short file reaches the next one from two tasks: the furthest
            # hand-over point wins.
            nxt.mapped[next_id] = (chain_id, max(stop, nxt.mapped.get(next_id, (0, 0))[1]))
            nxt.owned |= owned

    def file_columns(self, name: str) -> tuple[str, int]:
        """(capture_set, first_frame) for the files table: the chain's first file, the file's first packet."""
        plan = self._plans.get(name)
        return (name, 1) if plan is None else (plan.head, plan.offset + 1)

    def apply(self, table: str, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The batch as one pass over the chain would have produced it (None: nothing left)."""
        if batch.num_rows == 0 or table == "files":
            return batch
        name = batch.column(0)[0].as_py()
        plan = self._plans.get(name)
        if plan is None or (plan.offset == 0 and not plan.mapped and plan.head == name):
            return self._hold_spanning(batch, None) if table == "connections" else batch
        ids = batch.column("connection_id")
        mapped_ids = pa.array(list(plan.mapped), pa.int64())
        where = pc.index_in(ids, value_set=mapped_ids)
        is_mapped = pc.is_valid(where)
        if plan.mapped:
            if table == "exchanges":
                # Before the hand-over the previous file's task read these packets in step: its exchanges
                # win, and what a mid-stream start alone produced there (orphans, junk) goes.
                frame = pc.coalesce(batch.column("request_frame"), batch.column("response_frame"))
                stops = pa.array([s for _, s in plan.mapped.values()], pa.int64())
                early = pc.fill_null(pc.less(frame, pc.take(stops, where)), False)
                status = batch.column("status")
                stray = pc.or_(pc.equal(status, "orphan_response"), pc.equal(status, "malformed"))
                early = pc.and_(early, pc.or_(pc.is_in(self._keys(batch), value_set=self._owned(plan)), stray))
                before = batch.num_rows
                batch = batch.filter(pc.invert(early))
                self.dropped[name] = self.dropped.get(name, 0) + before - batch.num_rows
            elif table in EXCHANGE_PART_TABLES:
                owned = pc.fill_null(pc.is_in(self._keys(batch), value_set=self._owned(plan)), False)
                batch = batch.filter(pc.invert(pc.and_(is_mapped, owned)))
            if batch.num_rows == 0:
                return None
            ids = batch.column("connection_id")
            where = pc.index_in(ids, value_set=mapped_ids)
            is_mapped = pc.is_valid(where)
        chain_ids = pa.array([c for c, _ in plan.mapped.values()], pa.int64())
        new_ids = pc.if_else(is_mapped, pc.take(chain_ids, where), pc.add(ids, plan.offset))
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        columns["capture_file"] = pa.array([plan.head] * batch.num_rows, pa.string())
        columns["connection_id"] = new_ids
        for frame_col in ("request_frame", "response_frame", "first_frame", "last_frame"):
            if frame_col in columns:
                columns[frame_col] = pc.add(columns[frame_col], plan.offset)
        out = pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)
        return self._hold_spanning(out, is_mapped) if table == "connections" else out

    @staticmethod
    def _keys(batch: pa.RecordBatch) -> pa.Array:
        """connection_id << 32 | correlation_id, per row."""
        ids = pc.cast(batch.column("connection_id"), pa.int64())
        corr = pc.bit_wise_and(pc.cast(batch.column("correlation_id"), pa.int64()), 0xFFFFFFFF)
        return pc.bit_wise_or(pc.shift_left(ids, 32), corr)

    @staticmethod
    def _owned(plan: _FilePlan) -> pa.Array:
        return pa.array(sorted(plan.owned), pa.int64())

    def _hold_spanning(self, batch: pa.RecordBatch, is_mapped: pa.Array | None) -> pa.RecordBatch | None:
        """Keep back the connection rows that have a share in another file (merged in ``finish``)."""
        spans = pc.fill_null(pc.equal(batch.column("ended"), "continued"), False)
        if is_mapped is not None:
            spans = pc.or_(spans, is_mapped)
        if not pc.any(spans).as_py():
            return batch
        self._held.append(batch.filter(spans))
        rest = batch.filter(pc.invert(spans))
        return rest if rest.num_rows else None

    def finish(self) -> pa.RecordBatch | None:
        """The held connection rows, one per connection (``merge_connections``)."""
        if not self._held:
            return None
        merged = merge_connections(pa.Table.from_batches(self._held, CONNECTIONS_SCHEMA))
        self._held.clear()
        return merged.combine_chunks().to_batches()[0] if merged.num_rows else None


_SUMMED = ("packets_to_broker", "packets_to_client", "bytes_to_broker", "bytes_to_client", "retransmissions",
           "out_of_order", "gap_bytes", "gaps", "stream_bytes", "requests", "responses", "unanswered",
           "orphan_responses", "malformed", "resyncs", "framed_bytes", "skipped_bytes", "truncated_frames")


def merge_connections(table: pa.Table) -> pa.Table:
    """Rows of one connection from consecutive files (same capture_file and connection_id after stitching)
    added up: counters summed, first and last packet times widened, the handshake from the first file, how
    it ended from the last."""
    if table.num_rows == 0:
        return table
    rows = table.sort_by([("capture_file", "ascending"), ("connection_id", "ascending"),
                          ("first_ts", "ascending")]).to_pylist()
    out: list[dict] = []
    for r in rows:
        prev = out[-1] if out else None
        if prev is None or (prev["capture_file"], prev["connection_id"]) != (r["capture_file"], r["connection_id"]):
            out.append(dict(r))
            continue
        for col in _SUMMED:
            if col in r and r[col] is not None:
                prev[col] = (prev[col] or 0) + r[col]
        prev["last_ts"] = max(x for x in (prev["last_ts"], r["last_ts"]) if x is not None)
        ids = {c for v in (prev.get("client_ids"), r.get("client_ids")) if v for c in v.split(",")}
        if "client_ids" in prev:
            prev["client_ids"] = ",".join(sorted(ids)) or None
        if "tls" in prev:
            prev["tls"] = bool(prev["tls"] or r["tls"])
        if "tls_decrypted" in prev:  # the handshake (and so the verdict) is in the first file
            prev["tls_decrypted"] = prev["tls_decrypted"] or r["tls_decrypted"]
            for col in ("tls_version", "tls_cipher", "tls_sni", "tls_note", "sasl_mechanism", "sasl_principal"):
                prev[col] = prev[col] if prev[col] is not None else r[col]
            prev["sasl_outcome"] = r["sasl_outcome"] or prev["sasl_outcome"]
        prev["ended"] = r["ended"]
    return pa.Table.from_pylist(out, schema=table.schema)
