"""Carrying open connections over into the next file of a rotated capture set (tcpdump -C / -G).

When a file ends, some connections are mid-conversation: requests await answers, a frame is half read. The
task that analysed the file reads on into the next one, feeding only those connections' packets, until each
can be handed over: every request sent before the file boundary is answered and both directions are between
frames, so the next file's own analysis (which starts these connections mid-stream) sees the same frames
from there on. (A consumer always has a fetch in flight, so waiting for a connection with nothing pending
would mean reading the whole next file.) The exchanges completed meanwhile are this file's; the requests
still in flight at the hand-over are left to the next file's analysis. The stitch stage drops the next
file's copies of the exchanges this file owns: the result is what one pass over the concatenated files
gives. Pure: packets in, rows and hand-over records out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from analyzer.tcp.flows import FlowTable
from analyzer.tcp.reassembly import SYN

CARRY_NS = 120 * 1_000_000_000  # how far into the next file a connection is followed at most (capture time)
CHECK_EVERY = 1024  # packets fed between checks for connections come to rest
READ_THROUGH = 1 << 62  # hand-over point of a connection read through a whole file
SHORT_FILE = 10_000  # packets: a file this short is read through to find idle connections in the next one
OVERLAP_NS = 1_000_000_000  # a next file starting this much before this one ends is a parallel capture
TAIL_NS = 2 * 1_000_000_000  # a closing handshake's last packets follow its FINs within this (capture time)


@dataclass
class Handoff:
    """One connection carried into the next file: where the next file's analysis takes over."""

    connection_id: int  # in this file's numbering
    next_connection_id: int  # the next file's packet number of the connection's first packet there
    stop_frame: int  # the hand-over: the next file's packets before this one were read here in step
    owned: list[int] = field(default_factory=list)  # correlation ids of the exchanges completed here meanwhile
    next_file: str = ""  # the file it shows up in (the next one, or one further on when that one is short)


def continues(last_ts: int | None, next_first_ts: int) -> bool:
    """Rotated files follow each other; files of the same name pattern that overlap in time do not."""
    return last_ts is None or next_first_ts >= last_ts - OVERLAP_NS


FollowingFile = tuple[str, Iterator[tuple], Callable[[], int]]
"""(name, its packets, its packet count once they are all read)."""


def carried_connections(table: FlowTable, last_ts: int | None) -> list:
    """The connections followed into the next file: the open ones, and those closed just before the file
    ended (the last ACK of their FINs, or an RST, may be in the next file, where one pass over the
    concatenated files would still give it to them)."""
    return [c for c in table.open if c.ended is None
            or (last_ts is not None and c.closing_ts >= last_ts - TAIL_NS)]


def carry_over(table: FlowTable, following: Iterable[FollowingFile], base: int,
               last_ts: int | None) -> list[Handoff]:
    """Feed the following files' packets of the table's open connections (numbered on from ``base``).

    Usually the next file is enough; a short one (tcpdump -G in a quiet minute) may be read through to the
    one after. Returns one hand-over per connection and file it shows up in. Connections still busy at the
    time bound stay open; ``table.finish()`` settles them as usual.
    """
    carried = carried_connections(table, last_ts)
    if not carried:
        return []
    tails = [c for c in carried if c.ended is not None]
    by_key = {}
    for conn in carried:
        by_key[conn.client_key] = by_key[conn.broker_key] = conn
    rows = table.connections.out.exchanges
    start_rows = len(rows)
    deadline = None if last_ts is None else last_ts + CARRY_NS
    tail_ids = {c.conn_id for c in tails}
    tail_deadline = None if last_ts is None else last_ts + TAIL_NS
    busy = {c.conn_id for c in carried if not c.can_hand_over(base)}
    seen: list[tuple[str, dict[int, int], dict[int, int]]] = []  # per file: first packets, hand-over points
    for name, packets, count in following:
        first_seen: dict[int, int] = {}
        stop: dict[int, int] = {}
        seen.append((name, first_seen, stop))
        ended = _follow(table, packets, base, deadline, by_key, busy, first_seen, stop, len(carried),
                        tail_ids, tail_deadline)
        unseen = any(c.conn_id not in first_seen for c in carried)
        if ended or not (busy or (unseen and count() < SHORT_FILE)):
            break
        for cid in busy:  # read through: all of it was read in step here (and what that file's task
            if cid in first_seen:  # reads on into the files after it is owned here too)
                stop[cid] = READ_THROUGH
        base += count()
    owned: dict[int, list[int]] = {}
    for connection_id, correlation_id in zip(rows.column("connection_id", start_rows),
                                             rows.column("correlation_id", start_rows), strict=True):
        if correlation_id is not None:
            owned.setdefault(connection_id, []).append(correlation_id)
    return [Handoff(cid, nid, stop.get(cid, 0), owned.get(cid, []), name)
            for name, first_seen, stop in seen for cid, nid in first_seen.items()]


def _follow(table: FlowTable, packets: Iterator[tuple], base: int, deadline: int | None, by_key: dict,
            busy: set[int], first_seen: dict[int, int], stop: dict[int, int], carried: int,
            tail_ids: set[int] = frozenset(), tail_deadline: int | None = None) -> bool:
    """One following file; True when the time bound or every connection's hand-over ended the reading."""
    batch: list[tuple] = []
    no = 0
    done = False
    for pkt in packets:
        no = pkt[0]
        if deadline is not None and pkt[1] > deadline:
            done = True
            break
        if tail_ids and tail_deadline is not None and pkt[1] > tail_deadline:  # no late packet of theirs now
            carried -= sum(1 for cid in tail_ids if cid not in first_seen)
            tail_ids = frozenset()
            if not busy and len(first_seen) >= carried:
                done = True
                break
        conn = by_key.get(pkt[2])
        if conn is None:
            continue
        cid = conn.conn_id
        if cid not in first_seen:
            first_seen[cid] = no
        if cid not in busy:
            if not busy and len(first_seen) == carried:
                done = True
                break
            continue
        if pkt[5] & SYN and conn.handshake_ts >= 0:  # the ports were reused by a new connection: not ours
            busy.discard(cid)
            stop[cid] = no
            continue
        batch.append((base + no, *pkt[1:]))
        if len(batch) >= CHECK_EVERY:
            table.feed(batch)
            batch.clear()
            _hand_over(table, busy, stop, base, no + 1)
            if not busy and len(first_seen) == carried:
                done = True
                break
    if batch:
        table.feed(batch)
        _hand_over(table, busy, stop, base, no + 1)
    if done:
        for cid in busy:  # still in flight at the bound: this file keeps what it read
            if cid in first_seen:
                stop[cid] = no + 1
    return done


def _hand_over(table: FlowTable, busy: set[int], stop: dict[int, int], boundary: int, next_no: int) -> None:
    for conn in table.open:
        cid = conn.conn_id
        if cid in busy and conn.can_hand_over(boundary):
            conn.hand_over()
            busy.discard(cid)
            stop[cid] = next_no
