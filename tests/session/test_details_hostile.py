"""The bodies read in full (analyzer.session.details) come from strangers: cut, flipped and mismatched real
bodies of every detail API make rows (with nulls where nothing parses) and derived tables, never an error."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pyarrow as pa

from analyzer.derived.tables import DerivedTables
from analyzer.session.details import DETAIL_APIS, ExchangeDetails
from analyzer.tables.schemas import group_heartbeats_batch, share_ranges_batch, transaction_steps_batch
from tests.dissectors.test_extract_compiled import captured_bodies
from tests.helpers import SAMPLES

CAPTURES = [SAMPLES / f"kafka44_{name}.pcap" for name in ("consumer_protocol", "share_group", "transactions",
                                                         "streams_group")]
CONN = SimpleNamespace(connection_id=1, client_ip="10.0.0.1", client_port=50000, broker_ip="10.0.0.2",
                       broker_port=9092)


def _mangled(body: bytes, rnd: random.Random) -> bytes:
    choice = rnd.randrange(3)
    if choice == 0 and body:
        return body[:rnd.randrange(len(body))]
    if choice == 1 and body:
        flipped = bytearray(body)
        for _ in range(rnd.randint(1, 4)):
            flipped[rnd.randrange(len(flipped))] ^= 1 << rnd.randrange(8)
        return bytes(flipped)
    return bytes(rnd.randrange(256) for _ in range(rnd.randrange(64)))


def test_cut_flipped_and_mismatched_bodies_make_rows_and_tables():
    rnd = random.Random(848)
    bodies: dict[tuple[int, int, bool], list[bytes]] = {}
    for frame, off, key, version, is_response in captured_bodies(CAPTURES):
        if key in DETAIL_APIS:
            bodies.setdefault((key, version, is_response), []).append(bytes(frame[off:]))
    assert {key for key, _, _ in bodies} >= {22, 24, 26, 28, 68, 76, 78, 79, 88}
    details = ExchangeDetails()
    exchanges = 0
    for (key, version, is_response), found in sorted(bodies.items()):
        if is_response:
            continue
        answers = bodies.get((key, version, True), [b""])
        for body in found[:40]:
            for request, response in ((body, rnd.choice(answers)), (_mangled(body, rnd), rnd.choice(answers)),
                                      (body, _mangled(rnd.choice(answers), rnd)), (None, rnd.choice(answers)),
                                      (_mangled(body, rnd), None)):
                note = details.add(0, CONN, exchanges, "c", key, version, 10**18 + exchanges, 10**18 + exchanges + 5,
                                   request, response)
                assert note is None or isinstance(note, str)
                exchanges += 1

    def named(topic):
        return topic if topic is None or isinstance(topic, str) else "t"

    derived = DerivedTables()
    for table, batch in (("group_heartbeats", group_heartbeats_batch(details.heartbeats.drain(named), "f")),
                         ("share_ranges", share_ranges_batch(details.shares.drain(named), "f")),
                         ("transaction_steps", transaction_steps_batch(details.transactions.drain(named), "f"))):
        assert batch.num_rows
        derived.feed(table, batch)
    tables = dict(derived.finish())
    assert {"groups", "share_consumption", "transactions"} <= set(tables)
    assert all(isinstance(batch, pa.RecordBatch) for batch in tables.values())
