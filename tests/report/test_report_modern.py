"""``kafkacap report`` of the modern-Kafka samples (a KIP-848 consumer group, a share group, transactions, a
Streams group), opened in headless Chromium as ``test_report`` opens the page of every sample: each point of
the epoch timeline, the share-group and the transaction plots is hovered as a user would, and the label
plotly draws is held to the exported tables, read with pyarrow (not with the report's code). Then pages
without those protocols, and an export from before their tables, have no such sections and no error."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("plotly")

from tests.helpers import SAMPLES, kafkacap  # noqa: E402
from tests.report.test_report import _open  # noqa: E402

MODERN = [SAMPLES / f"kafka44_{name}.pcap" for name in ("consumer_protocol", "share_group", "transactions",
                                                          "streams_group")]
NEW_TABLES = ("group_heartbeats", "share_ranges", "share_consumption", "transaction_steps", "transactions")
HOVERED = ("groups", "share", "transactions")
PROTOCOL_OF = {"consumer": "consumer", "share": "share", "streams": "streams"}

# Every point of every figure of the HOVERED sections (both ends of the timeline's segments, which are
# separated by nulls) hovered in turn through plotly's own hover, and the lines of the label it draws read.
_HOVER_ALL = """async (sections) => {
    const out = [];
    for (const gd of document.querySelectorAll('.js-plotly-plot')) {
        const section = gd.closest('section').id;
        if (!sections.includes(section)) continue;
        const index = Array.from(document.querySelectorAll('#' + section + ' .js-plotly-plot')).indexOf(gd);
        for (let c = 0; c < gd._fullData.length; c++) {
            const t = gd._fullData[c], n = (t.x || t.y).length;
            for (let p = 0; p < n; p++) {
                if ((t.x && t.x[p] === null) || (t.y && t.y[p] === null)) continue;
                Plotly.Fx.unhover(gd);
                Plotly.Fx.hover(gd, [{curveNumber: c, pointNumber: p}], (t.xaxis || 'x') + (t.yaxis || 'y'));
                await new Promise(r => setTimeout(r, 60));  // plotly draws at most one hover per 50 ms
                const lines = Array.from(gd.querySelectorAll('.hoverlayer .hovertext text'),
                    e => e.querySelectorAll('tspan.line').length
                        ? Array.from(e.querySelectorAll('tspan.line'), l => l.textContent) : [e.textContent]).flat();
                out.push({section, figure: index, trace: t.name, point: p, lines});
            }
        }
        Plotly.Fx.unhover(gd);
    }
    return out;
}"""


@pytest.fixture(scope="module")
def modern(tmp_path_factory) -> dict:
    """The report of the four modern samples in Chromium, every point of its new plots hovered, and their
    tables exported the ordinary way (the reference)."""
    tmp = tmp_path_factory.mktemp("modern")
    kafkacap("report", *MODERN, "--no-progress", "-o", tmp / "report.html")
    kafkacap("export", *MODERN, "--no-progress", "-o", tmp / "tables")
    view = {"report": tmp / "report.html", "tables": tmp / "tables",
            "then": lambda page: {"hovers": page.evaluate(_HOVER_ALL, list(HOVERED))}}
    _open(view["report"], view)
    return view


def _table(view: dict, name: str) -> pa.Table:
    return pq.read_table(view["tables"] / f"{name}.parquet")


def _hovers(view: dict, section: str, figure: int, trace: str | None = None) -> list[list[str]]:
    return [h["lines"] for h in view["hovers"] if h["section"] == section and h["figure"] == figure
            and (trace is None or h["trace"] == trace)]


def _utc(ts: dt.datetime) -> dt.datetime:
    """A time of the tables, to be compared with a hovered one (_same)."""
    return ts.astimezone(dt.UTC)


def _hovered_time(text: str) -> dt.datetime:
    """A time as the hover writes it (TIME_HOVER: 2026-11-29 13:31:22.232 UTC, then what follows)."""
    return dt.datetime.strptime(text[:23], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.UTC)


def _same(drawn: list[tuple], expected: list[tuple]) -> None:
    """Each drawn tuple is one expected tuple and the other way round: equal values, but for the times, written
    to the millisecond in the hover (plotly truncates or rounds it), within a millisecond of the table's."""
    def fits(d: tuple, e: tuple) -> bool:
        return all(abs(_hovered_time(a) - b) < dt.timedelta(milliseconds=1) if isinstance(b, dt.datetime)
                   else a == b for a, b in zip(d, e, strict=True))

    left = list(expected)
    for d in drawn:
        match = next((e for e in left if fits(d, e)), None)
        assert match is not None, (d, [e for e in left if e[:2] == d[:2]])
        left.remove(match)
    assert left == [], left


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_new_sections_are_drawn_without_script_errors(modern) -> None:
    assert [m for m in modern["messages"] if m[0] in ("error", "pageerror", "warning")] == []
    page = modern["report"].read_text(encoding="utf-8")
    for section in ("share", "transactions"):
        assert f'<section id="{section}">' in page and f'href="#{section}"' in page
    drawn = Counter(f["section"] for f in modern["figures"] if f["rendered"])
    assert drawn["share"] == 3 and drawn["transactions"] == 2, drawn
    assert all(h["lines"] for h in modern["hovers"]), [h for h in modern["hovers"] if not h["lines"]][:3]


# --- The consumer-group timeline: epochs as generations ------------------------------------------------------------

def _member_rows(groups: list[dict]) -> dict[tuple, str]:
    """(capture, group, member id) -> the row the timeline gives the member: group (protocol): client_id."""
    out = {}
    for g in groups:
        for m in g["members"]:
            label = f"{g['group_id']} ({g['group_protocol']}): {m['client_id'] or m['member_id']}"
            out[g["capture_file"], g["group_id"], m["member_id"]] = label
    return out


def _epoch_oracle(tables: Path) -> tuple[list, list, list]:
    """From the groups table, for the heartbeat protocols' epochs: each member's reconciling segment (row, epoch,
    waited_ms, join_ts, synced_ts), its owning one (row, epoch, synced_ts, the end: its join in its next epoch
    of the group, else its leave, else the epoch's end) and each moved partition's gap (the receiving member's
    row, epoch, topic, partitions, gap_ms, released_ts, acquired_ts)."""
    groups = [g for g in pq.read_table(tables / "groups.parquet").to_pylist() if g["group_protocol"] != "classic"]
    rows = _member_rows(groups)
    joins: dict[tuple, list] = {}
    for g in sorted(groups, key=lambda g: g["generation_id"]):
        for m in g["members"]:
            joins.setdefault((g["capture_file"], g["group_id"], m["member_id"]), []).append(
                (g["generation_id"], m["join_ts"]))
    reconciling, owning, moved = [], [], []
    for g in groups:
        epoch = g["generation_id"]
        for m in g["members"]:
            key = (g["capture_file"], g["group_id"], m["member_id"])
            row = rows[key]
            if m["join_ts"] and m["synced_ts"]:
                reconciling.append((row, epoch, f"{m['waited_ms']:,.1f}", _utc(m["join_ts"]), _utc(m["synced_ts"])))
            if m["synced_ts"]:
                later = [j for e, j in joins[key] if e > epoch and j is not None]
                end = later[0] if later else (m["left_ts"] or g["ended"])
                owning.append((row, epoch, _utc(m["synced_ts"]), _utc(end)))
        spans: dict[tuple, list] = {}
        for mv in g["moved"] or ():
            spans.setdefault((mv["to_member"], mv["topic"], mv["released_ts"], mv["acquired_ts"], mv["gap_ms"]),
                             []).append(mv["partition"])
        for (to, topic, released, acquired, gap), partitions in spans.items():
            moved.append((rows[g["capture_file"], g["group_id"], to], epoch, topic,
                          ",".join(map(str, sorted(partitions))), f"{gap:,.1f}", _utc(released), _utc(acquired)))
    return reconciling, owning, moved


def _segments(hovers: list[list[str]]) -> list[tuple[str, str, str, str]]:
    """The hovered segments' (row, start, end, text): both ends of each, in order."""
    assert len(hovers) % 2 == 0 and hovers
    out = []
    for a, b in zip(hovers[0::2], hovers[1::2], strict=True):
        assert a[0] == b[0] and a[2] == b[2], (a, b)  # the same member and segment at either end
        out.append((a[0], a[1], b[1], a[2]))
    return out


def test_epochs_are_drawn_as_generations(modern) -> None:
    """Every member of every KIP-848, share and Streams epoch has a reconciling segment from its join_ts to its
    synced_ts (hover: the epoch and waited_ms) and an owning one from synced_ts to its next epoch, leave or the
    epoch's end, on a row naming the protocol; every moved partition's gap is drawn on the row of the member
    it went to, from released_ts to acquired_ts, with its gap_ms."""
    reconciling, owning, moved = _epoch_oracle(modern["tables"])
    assert {row.split("(")[1].split(")")[0] for row, *_ in reconciling} == {"consumer", "share", "streams"}
    assert moved, "the KIP-848 and Streams samples move partitions"
    drawn = []
    for row, start, end, text in _segments(_hovers(modern, "groups", 0, "epoch: reconciling")):
        m = re.fullmatch(r"\w+, KIP-\d+ epoch (\d+); (?:partitions|tasks) .*; reconciled ([\d,.]+) ms after the "
                         r"epoch began", text)
        assert m, text
        drawn.append((row, int(m.group(1)), m.group(2), start, end))
    _same(drawn, reconciling)
    drawn = []
    for row, start, end, text in _segments(_hovers(modern, "groups", 0, "epoch: owning")):
        drawn.append((row, int(re.match(r"\w+, KIP-\d+ epoch (\d+);", text).group(1)), start, end))
    _same(drawn, owning)
    drawn = []
    for row, start, end, text in _segments(_hovers(modern, "groups", 0, "moved: no consumer")):
        m = re.fullmatch(r"\w+, KIP-\d+ epoch (\d+); moved (?:tasks )?(.+) ([\d,]+) from .+: no member consumed "
                         r"(?:them|it) for ([\d,.]+) ms", text)
        assert m, text
        drawn.append((row, int(m.group(1)), m.group(2), m.group(3), m.group(4), start, end))
    _same(drawn, moved)


def test_every_epoch_row_names_its_protocol(modern) -> None:
    """Every member of a heartbeat-protocol group has its reconciling and owning segments on a row naming the
    protocol, and only those; the classic groups' members (none in these samples: even the transactions
    sample's readers use the consumer protocol) keep the generation segments, on rows without one."""
    groups = pq.read_table(modern["tables"] / "groups.parquet").to_pylist()
    classic = {f"{g['group_id']}: {m['client_id']}" for g in groups if g["group_protocol"] == "classic"
               for m in g["members"]}
    epochs = {row for row, *_ in _epoch_oracle(modern["tables"])[0]}
    rows = {k: {lines[0] for lines in _hovers(modern, "groups", 0, k)} for k in (
        "rebalance: no partitions", "consuming", "epoch: reconciling", "epoch: owning")}
    assert rows["rebalance: no partitions"] == classic == rows["consuming"]
    assert rows["epoch: reconciling"] == epochs == rows["epoch: owning"]
    assert len(epochs) == sum(1 for _ in _member_rows([g for g in groups if g["group_protocol"] != "classic"]))


# --- Share groups ------------------------------------------------------------------------------------------------

SHARE_COUNTS = {"given": "acquired_records", "accepted": "accepted", "released": "released", "rejected": "rejected",
                "lock lost": "lock_lost", "unacknowledged": "unacknowledged"}


def _share_rows(view: dict) -> dict[str, dict]:
    rows = _table(view, "share_consumption").to_pylist()
    out = {f"{r['group_id']}: {r['client_id']} ({r['topic']})": r for r in rows}
    assert len(out) == len(rows) >= 3
    return out


def test_share_members_are_share_consumption(modern) -> None:
    """Each member's bars, hovered: given, accepted, released, rejected, lock lost and unacknowledged are its
    share_consumption row's, and so is the redelivered count."""
    rows = _share_rows(modern)
    seen = Counter()
    for lines in _hovers(modern, "share", 0):
        label, count, given = lines
        kind, n = re.fullmatch(r"(.+): ([\d,]+) records", count).groups()
        r = rows[label]
        assert int(_number(n)) == r[SHARE_COUNTS[kind]], (label, kind, n)
        assert given == f"given {r['acquired_records']:,} ({r['redelivered_records']:,} of them redelivered)"
        seen[label, kind] += 1
    assert seen == Counter({(label, kind): 1 for label in rows for kind in SHARE_COUNTS})
    assert sum(r["lock_lost"] for r in rows.values()) > 0 and sum(r["released"] for r in rows.values()) > 0


def test_share_processing_times_are_share_consumption(modern) -> None:
    rows = _share_rows(modern)
    seen = Counter()
    for label, value, over in _hovers(modern, "share", 1):
        q, ms = re.fullmatch(r"processing (p50|p99|max): ([\d,.]+) ms", value).groups()
        r = rows[label]
        assert _number(ms) == pytest.approx(r[f"processing_{q}_ms"], abs=5e-4), (label, q)
        assert over.startswith(f"over {r['processed']:,} records"), over
        seen[label] += 1
    timed = {label for label, r in rows.items() if r["processing_p50_ms"] is not None}
    assert timed and seen == Counter(dict.fromkeys(timed, 3))


def test_share_acquisitions_and_acknowledgements_are_share_ranges(modern) -> None:
    """Each hovered bar's records and ranges are the share_ranges rows of its interval and series (acquired:
    first deliveries and redeliveries apart; acknowledged: by action), and the bars add up to the table."""
    ranges = _table(modern, "share_ranges").to_pylist()
    width = _interval_seconds(modern["report"].read_text(encoding="utf-8"))
    totals, drawn = Counter(), Counter()
    for r in ranges:
        if r["action"] == "acquired":
            series = "redelivery" if (r["delivery_count"] or 0) >= 2 else "first delivery"
        else:
            series = r["action"]
        totals[series] += r["last_offset"] - r["first_offset"] + 1
    for lines in _hovers(modern, "share", 2):
        series, when, what = lines
        start = dt.datetime.strptime(when.split(" UTC")[0], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.UTC)
        records, verb, n = re.fullmatch(r"([\d,]+) records (acquired|acknowledged) in ([\d,]+) ranges", what).groups()
        inside = [r for r in ranges if start <= r["ts"] < start + dt.timedelta(seconds=width)
                  and (r["action"] == "acquired") == (verb == "acquired")
                  and (series in ("first delivery", "redelivery") or r["action"] == series)
                  and (series != "redelivery" or (r["delivery_count"] or 0) >= 2)
                  and (series != "first delivery" or (r["delivery_count"] or 0) < 2)]
        assert int(_number(records)) == sum(r["last_offset"] - r["first_offset"] + 1 for r in inside), lines
        assert int(_number(n)) == len(inside), lines
        drawn[series] += int(_number(records))
    assert drawn == totals
    assert {"first delivery", "redelivery", "accept", "release", "reject"} <= set(drawn)


def _interval_seconds(page: str) -> float:
    label = re.search(r"<dt>time interval of the plots</dt><dd>([^<]+)</dd>", page).group(1)
    number, unit = label.split(" ")
    return float(number) * {"ms": 1e-3, "s": 1, "min": 60, "h": 3600, "day": 86400, "days": 86400}[unit]


# --- Transactions ------------------------------------------------------------------------------------------------

def test_transactions_are_the_table(modern) -> None:
    """One marker per transaction, hovered: its transactional id, outcome, start, producer id and epoch, duration,
    EndTxn time, records and errors are its row's."""
    rows = _table(modern, "transactions").to_pylist()
    assert {r["outcome"] for r in rows} >= {"committed", "aborted"}
    expected = [(r["transactional_id"], r["outcome"], r["producer_id"], r["producer_epoch"],
                 f"{r['duration_ms']:,.3f}", f"{r['commit_ms']:,.3f}", r["records"], ", ".join(r["errors"]) or None,
                 _utc(r["start_ts"])) for r in rows]
    drawn = []
    for lines in _hovers(modern, "transactions", 0):
        tid, outcome = lines[0].rsplit(": ", 1)
        producer = re.match(r"producer id (\d+), epoch (\d+)", lines[2])
        lasted = re.fullmatch(r"lasted ([\d,.]+) ms; EndTxn answered in ([\d,.]+) ms(?: \(\d+ attempts\))?", lines[3])
        records = re.match(r"([\d,]+) records in", lines[4])
        errors = next((x.removeprefix("errors: ") for x in lines if x.startswith("errors: ")), None)
        assert producer and lasted and records, lines
        drawn.append((tid, outcome, int(producer.group(1)), int(producer.group(2)), lasted.group(1),
                      lasted.group(2), int(_number(records.group(1))), errors, lines[1]))
    _same(drawn, expected)


def test_transactions_per_id_are_the_table(modern) -> None:
    rows = _table(modern, "transactions").to_pylist()
    counts = Counter((r["transactional_id"], r["outcome"]) for r in rows)
    totals = Counter(r["transactional_id"] for r in rows)
    drawn = {}
    for tid, count, longest in _hovers(modern, "transactions", 1):
        outcome, n, total = re.fullmatch(r"(\w+): ([\d,]+) transactions \(of ([\d,]+)\)", count).groups()
        assert int(_number(total)) == totals[tid]
        slowest = max(r["duration_ms"] for r in rows if (r["transactional_id"], r["outcome"]) == (tid, outcome))
        assert longest == f"longest {slowest:,.3f} ms"
        drawn[tid, outcome] = int(_number(n))
    assert drawn == dict(counts)


def test_caps_are_kept_and_said(modern, monkeypatch) -> None:
    """With the caps set low, the plots draw only that many transactions, share members and epochs, and the
    captions say how many there were."""
    from analyzer.report import page, scans
    from analyzer.report.source import open_folder

    monkeypatch.setattr(scans, "MAX_TRANSACTIONS", 2)
    monkeypatch.setattr(scans, "MAX_SHARE_MEMBERS", 1)
    monkeypatch.setattr(page, "MAX_GENERATIONS", 3)
    report = page.build(open_folder(str(modern["tables"])))
    sections = {s.id: s for s in report.sections}
    tx = sections["transactions"].parts[0]
    assert sum(len(t.x) for t in tx.figure.data) == 2
    assert "2 of 5 transactions are drawn" in tx.caption
    share = sections["share"].parts[0]
    assert {y for t in share.figure.data for y in t.y} == {max(_share_rows(modern).items(),
                                                               key=lambda kv: kv[1]["acquired_records"])[0]}
    assert "The 1 given the most records are drawn, of 3." in share.caption
    groups = sections["groups"].parts[0]
    assert f"The latest 3 generations and epochs are drawn (of {_table(modern, 'groups').num_rows})" in groups.caption


# --- Without these protocols ---------------------------------------------------------------------------------------

def test_a_capture_without_them_has_no_such_sections(tmp_path) -> None:
    """A classic consumer group and no transaction: no share or transactions section, no epoch segment, and the
    page draws without a script error."""
    kafkacap("report", SAMPLES / "tansu_consumer_group.pcap", "--no-progress", "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    for section in ("share", "transactions"):
        assert f'id="{section}"' not in page and f'href="#{section}"' not in page
    view = {}
    _open(tmp_path / "r.html", view)
    assert [m for m in view["messages"] if m[0] in ("error", "pageerror", "warning")] == []
    timeline = [f for f in view["figures"] if f["section"] == "groups"][0]
    assert {t["name"] for t in timeline["traces"]} == {"rebalance: no partitions", "consuming"}
    assert all(f["rendered"] for f in view["figures"])


def test_an_export_from_before_the_new_tables_still_makes_a_report(modern, tmp_path) -> None:
    """The four samples' export without the new tables, and with the groups table as it was (no group_protocol,
    no moved, no member errors): the report is made, without share or transactions sections, its groups drawn
    as generations."""
    folder = tmp_path / "old"
    shutil.copytree(modern["tables"], folder)
    for name in NEW_TABLES:
        (folder / f"{name}.parquet").unlink()
    groups = pq.read_table(folder / "groups.parquet").drop_columns(["group_protocol", "moved"])
    members = groups["members"].type.value_type
    old_member = pa.struct([f for f in members if f.name != "errors"])
    rows = [[{k: v for k, v in m.items() if k != "errors"} for m in ms] for ms in groups["members"].to_pylist()]
    groups = groups.set_column(groups.schema.get_field_index("members"), "members",
                               pa.array(rows, pa.list_(old_member)))
    pq.write_table(groups, folder / "groups.parquet")
    kafkacap("report", folder, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="groups"' in page and "Generations and rebalances" in page
    assert "No consumer group generation" not in page
    for section in ("share", "transactions"):
        assert f'id="{section}"' not in page
    assert "epoch: reconciling" not in page and "rebalance: no partitions" in page
    assert pc.sum(groups["member_count"]).as_py() > 0
