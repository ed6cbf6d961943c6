"""``kafkacap report``: the page of the sample captures, opened in headless Chromium (Debian's ``chromium``,
driven by Playwright), checked against the exported tables with pyarrow (not with the report's own code);
and the same page from an export folder and from a Spark-layout (Hive-partitioned) folder."""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("plotly")

from spark_jobs.capture_date import capture_dates  # noqa: E402
from tests.helpers import SAMPLES, invoke, kafkacap  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = ("overview", "latency", "errors", "traffic", "groups", "connections")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The report of the sample captures, and their tables exported the ordinary way (the reference)."""
    tmp = tmp_path_factory.mktemp("report")
    kafkacap("report", SAMPLES, "--detect-ports", "--no-progress", "-o", tmp / "report.html")
    kafkacap("export", SAMPLES, "--detect-ports", "--no-progress", "-o", tmp / "tables")
    return {"report": tmp / "report.html", "tables": tmp / "tables"}


def _comparable(page: str) -> str:
    """The page without the generated figure ids."""
    return re.sub(r"fig-[a-z]+-\d+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "", page)


def test_page_is_self_contained_and_small(built) -> None:
    page = built["report"].read_text(encoding="utf-8")
    assert built["report"].stat().st_size < 10_000_000
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"http", page)  # nothing fetched at load: works offline
    for section in SECTIONS:
        assert f'<section id="{section}">' in page


def test_report_of_an_export_folder_is_the_same_page(built, tmp_path) -> None:
    kafkacap("report", built["tables"], "-o", tmp_path / "from_tables.html")
    assert _comparable((tmp_path / "from_tables.html").read_text(encoding="utf-8")) == _comparable(
        built["report"].read_text(encoding="utf-8"))


def test_report_of_a_spark_layout_folder_is_the_same_page(built, tmp_path) -> None:
    """Each table as a dataset partitioned by capture_date, as the Spark job writes it."""
    out = tmp_path / "spark_out"
    for name in ("exchanges", "errors", "partitions", "connections", "files", "groups", "share_consumption",
                 "share_ranges", "transactions"):
        table = pq.read_table(built["tables"] / f"{name}.parquet")
        dates = pa.chunked_array([capture_dates(name, b) for b in table.to_batches()], pa.date32())
        pq.write_to_dataset(table.append_column("capture_date", dates), out / name, partition_cols=["capture_date"])
    (out / "_SUCCESS").write_text("")
    assert all(d.name.startswith("capture_date=") for d in (out / "exchanges").iterdir())
    kafkacap("report", out, "-o", tmp_path / "from_spark.html")
    assert _comparable((tmp_path / "from_spark.html").read_text(encoding="utf-8")) == _comparable(
        built["report"].read_text(encoding="utf-8"))


def test_empty_tables_say_why(tmp_path) -> None:
    """No Kafka on the port asked for: every section says why it is empty instead of drawing nothing."""
    kafkacap("report", SAMPLES / "tansu_admin.pcap", "--port", "1", "--no-progress", "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "js-plotly-plot" not in page.split("<main>")[1].split('id="connections"')[0]
    assert page.count('class="empty"') >= 10
    assert "The exchanges table is empty" in page


def test_a_csv_export_is_refused(tmp_path) -> None:
    kafkacap("export", SAMPLES / "tansu_admin.pcap", "--no-progress", "-f", "csv", "-o", tmp_path / "t")
    result = invoke("report", tmp_path / "t", "-o", tmp_path / "r.html", any_exception=True)
    assert result.exit_code == 1
    assert not (tmp_path / "r.html").exists()


# --- In the browser -----------------------------------------------------------------------------------------

_TRACES = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    id: gd.id, section: gd.closest('section').id, rendered: !!gd.querySelector('.main-svg'),
    traces: gd._fullData.map(t => ({name: t.name, type: t.type, xaxis: t.xaxis,
        x: t.x ? Array.from(t.x, String) : null, y: t.y ? Array.from(t.y, String) : null,
        text: Array.isArray(t.text) ? Array.from(t.text, String) : null,
        customdata: t.customdata ? Array.from(t.customdata, r => (r && r.length !== undefined)
            ? Array.from(r, String) : String(r)) : null}))}))"""


# What Chromium drew of each figure: every axis with its type, range, title and tick labels (the SVG texts, with
# the value plotly placed each at: the datum bound to the text, in the axis' linear units, log10 on a log axis),
# the legend's entries and swatch colours, the bars' drawn widths in pixels.
_DRAWN = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    id: gd.id, section: gd.closest('section').id,
    axes: Object.keys(gd._fullLayout).filter(k => /^[xy]axis\\d*$/.test(k)).map(k => {
        const ax = gd._fullLayout[k], title = gd.querySelector('.g-' + ax._id + 'title text');
        return {id: ax._id, type: ax.type, range: ax.range.map(String), title: title ? title.textContent : '',
                ticks: Array.from(gd.querySelectorAll('.' + ax._id + 'tick text'),
                                  e => [e.textContent, e.__data__.x])};
    }),
    legend: Array.from(gd.querySelectorAll('.legend .traces'), e => [
        e.querySelector('.legendtext').textContent, e.querySelector('.legendpoints path').style.fill]),
    colours: gd._fullData.map(t => [t.name, t.marker && typeof t.marker.color === 'string' ? t.marker.color : null]),
    bar_widths: Array.from(gd.querySelectorAll('.barlayer .point path'), e => e.getBBox().width)}))"""

_FACTS = """() => Object.fromEntries(Array.from(document.querySelectorAll('header dt'),
                                           dt => [dt.textContent, dt.nextElementSibling.textContent]))"""

# The client coordinates of the middle of a heatmap's cell (row i, column j), scrolled into view; from the cell's
# edges as plotly computed them (calcdata: in data units, category bricks or latency edges alike).
_CELL = """([id, i, j]) => {
    const gd = document.getElementById(id), cd = gd.calcdata[0][0];
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const x = xa.l2p((xa.c2l(cd.x[j]) + xa.c2l(cd.x[j + 1])) / 2) + xa._offset;
    const y = ya.l2p((ya.c2l(cd.y[i]) + ya.c2l(cd.y[i + 1])) / 2) + ya._offset;
    const box = gd.querySelector('.main-svg').getBoundingClientRect();
    window.scrollTo(0, window.scrollY + box.top + y - window.innerHeight / 2);
    const now = gd.querySelector('.main-svg').getBoundingClientRect();
    return [now.left + x, now.top + y];
}"""

_HOVER_LINES = """(id) => Array.from(document.querySelectorAll('#' + id + ' .hoverlayer .hovertext text'),
    t => t.querySelectorAll('tspan.line').length ? Array.from(t.querySelectorAll('tspan.line'), l => l.textContent)
                                                 : [t.textContent]).flat()"""

HOVERED_ROWS = ("JoinGroup", "SyncGroup", "Fetch (empty)", "Fetch (with records)", "Produce", "Metadata")


def _hover_heatmap(page, figures: list[dict]) -> list[dict]:
    """Moves the mouse over the first, the fullest and the last non-empty cell of each of the heatmap's
    HOVERED_ROWS, as a user would, and reads the label plotly draws: its lines, with the row and column."""
    heat = [f for f in figures if f["section"] == "latency"][2]
    trace = heat["traces"][0]
    out, last = [], None
    for i, row in enumerate(trace["y"]):
        if row not in HOVERED_ROWS:
            continue
        counts = [float(c) for c in trace["customdata"][i]]
        filled = [j for j, c in enumerate(counts) if c > 0]
        for j in sorted({filled[0], filled[-1], max(filled, key=lambda j: counts[j])}):
            count = counts[j]
            x, y = page.evaluate(_CELL, [heat["id"], i, j])
            page.mouse.move(x, y)
            page.wait_for_function("([id, row, last]) => { const t = document.querySelector('#' + id + "
                                   "' .hoverlayer').textContent; return t.includes(row) && t !== last; }",
                                   arg=[heat["id"], row, last])
            last = page.locator(f"#{heat['id']} .hoverlayer").text_content()
            out.append({"row": row, "column": j, "count": float(count), "lines": page.evaluate(_HOVER_LINES,
                                                                                                heat["id"])})
    page.mouse.move(0, 0)
    return out


def _open(path: Path, view: dict, heatmap: bool = False) -> None:
    """The page in headless Chromium: fills ``view`` with its figures' data as plotted, what was drawn of them
    (_DRAWN), the header's facts, console messages and, with ``heatmap``, the heatmap's hover labels."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    messages = view.setdefault("messages", [])
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000}, device_scale_factor=0.6)
            page.on("console", lambda m: messages.append((m.type, m.text)))
            page.on("pageerror", lambda e: messages.append(("pageerror", str(e))))
            page.goto(path.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
                                   "document.querySelectorAll('.js-plotly-plot').length")
            view["figures"] = page.evaluate(_TRACES)
            view["drawn"] = page.evaluate(_DRAWN)
            view["facts"] = page.evaluate(_FACTS)
            if heatmap:
                view["heat_hovers"] = _hover_heatmap(page, view["figures"])
            view.update(view.pop("then", lambda page: {})(page))
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser_view(built, tmp_path_factory):
    """The page of every sample opened in headless Chromium (_open), and a hover's text; a screenshot is left
    in the test's temporary folder (drawn at 0.6 device pixels per CSS pixel: small, as docs/report.png is)."""
    shots = tmp_path_factory.mktemp("screenshots")

    def then(page) -> dict:
        # Hover the first bar of the request-rate plot, and read the label plotly draws.
        gd_id = page.locator("#overview .js-plotly-plot").first.get_attribute("id")
        page.evaluate(f"Plotly.Fx.hover('{gd_id}', [{{curveNumber: 0, pointNumber: 0}}])")
        hover = page.locator(f"#{gd_id} .hoverlayer").text_content()
        page.screenshot(path=str(shots / "report.png"))
        page.locator("#latency").screenshot(path=str(shots / "latency.png"))
        return {"hover": hover}

    view = {"then": then, "shots": shots}
    _open(built["report"], view, heatmap=True)
    return view


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    """The page and tables of one capture with a single error (an expected MEMBER_ID_REQUIRED), as drawn."""
    tmp = tmp_path_factory.mktemp("single")
    capture = SAMPLES / "tansu_ipv6_confluent.pcapng"
    kafkacap("report", capture, "--detect-ports", "--no-progress", "-o", tmp / "report.html")
    kafkacap("export", capture, "--detect-ports", "--no-progress", "-o", tmp / "tables")
    view = {"report": tmp / "report.html", "tables": tmp / "tables"}
    _open(view["report"], view)
    return view


def _figure(view, section: str, index: int = 0) -> dict:
    return [f for f in view["figures"] if f["section"] == section][index]


def test_no_script_errors_and_every_section_drawn(browser_view) -> None:
    assert [m for m in browser_view["messages"] if m[0] in ("error", "pageerror", "warning")] == []
    drawn = Counter(f["section"] for f in browser_view["figures"] if f["rendered"])
    for section in SECTIONS:
        assert drawn[section] >= 1, section
    assert all(f["rendered"] for f in browser_view["figures"])
    assert (browser_view["shots"] / "report.png").stat().st_size > 10_000


def test_request_counts_are_the_tables(browser_view, built) -> None:
    ex = pq.read_table(built["tables"] / "exchanges.parquet", columns=["api_name"])
    expected = Counter(ex["api_name"].to_pylist())
    plotted = {t["name"]: sum(int(v) for v in t["y"]) for t in _figure(browser_view, "overview")["traces"]}
    named = {name: n for name, n in plotted.items() if name != "other"}
    assert named == {name: expected[name] for name in named}
    assert sum(plotted.values()) == ex.num_rows


def test_hover_names_the_first_request_packet(browser_view, built) -> None:
    """The hover of the first interval of the busiest API gives its count and the packet of its first request."""
    trace = _figure(browser_view, "overview")["traces"][0]
    capture_file, frame = trace["customdata"][0]
    ex = pq.read_table(built["tables"] / "exchanges.parquet",
                       columns=["capture_file", "api_name", "request_frame", "request_first_ts"])
    row = ex.filter(pc.and_(pc.equal(ex["capture_file"], capture_file), pc.equal(ex["request_frame"], int(frame))))
    assert row["api_name"].to_pylist()[0] == trace["name"]
    assert f"packet {frame} of {capture_file}" in browser_view["hover"]
    assert f"{int(trace['y'][0]):,} exchanges" in browser_view["hover"]


def test_record_bytes_per_topic_are_the_tables(browser_view, built) -> None:
    p = pq.read_table(built["tables"] / "partitions.parquet",
                      columns=["api_key", "topic", "request_record_bytes", "response_record_bytes", "fetch_kind"])
    p = p.filter(pc.invert(pc.fill_null(pc.equal(p["fetch_kind"], "follower"), False)))  # consumption only
    fig = _figure(browser_view, "traffic")
    for axis, column, key in (("x", "request_record_bytes", 0), ("x2", "response_record_bytes", 1)):
        rows = p.filter(pc.equal(p["api_key"], key))
        sums = rows.group_by("topic").aggregate([(column, "sum")])
        expected = dict(zip(sums["topic"].to_pylist(), sums[f"{column}_sum"].to_pylist(), strict=True))
        traces = [t for t in fig["traces"] if t["xaxis"] == axis]
        assert traces, axis  # Produce on the top row, Fetch on the bottom one
        for t in traces:
            if t["name"] == "other":
                continue
            got = sum(int(float(v)) for v in t["y"] if v not in ("null", "NaN"))
            assert got == (expected.get(t["name"]) or 0), (axis, t["name"])


def test_slowest_exchange_and_latency_counts_are_the_tables(browser_view, built) -> None:
    ex = pq.read_table(built["tables"] / "exchanges.parquet",
                       columns=["api_name", "latency_ms", "record_count", "response_frame", "waited", "service_ms"])
    ex = ex.filter(pc.is_valid(ex["latency_ms"]))
    # Service time: the exchanges the broker did not hold (waited false), by API with Fetch split by records.
    series = [("Fetch (with records)" if (r or 0) > 0 else "Fetch (empty)") if a == "Fetch" else a
              for a, r in zip(ex["api_name"].to_pylist(), ex["record_count"].to_pylist(), strict=True)]
    served = ex.append_column("series", pa.array(series)).filter(pc.equal(ex["waited"], False))
    service = _figure(browser_view, "latency", 0)
    for t in service["traces"]:
        name = t["name"].rsplit(" ", 1)[0]
        if name == "other":
            continue
        own = served.filter(pc.equal(served["series"], name))
        slowest = max(float(c[1]) for c in t["customdata"])
        assert slowest == pytest.approx(pc.max(own["service_ms"]).as_py()), name
        assert sum(int(c[0]) for c in t["customdata"]) == own.num_rows, name
        for c in t["customdata"]:  # p50 <= p99 <= the slowest, in every interval
            assert float(c[2]) <= float(c[3]) + 1e-9 <= float(c[1]) + 2e-9
    heat = _figure(browser_view, "latency", 2)["traces"][0]
    rows = dict(zip(heat["y"], heat["customdata"], strict=True))
    fetch = ex.filter(pc.equal(ex["api_name"], "Fetch"))
    with_records = fetch.filter(pc.greater(fetch["record_count"], 0)).num_rows
    assert sum(float(v) for v in rows["Fetch (with records)"]) == with_records
    assert sum(float(v) for v in rows["Fetch (empty)"]) == fetch.num_rows - with_records
    assert sum(float(v) for v in rows["Produce"]) == ex.filter(pc.equal(ex["api_name"], "Produce")).num_rows


def test_error_counts_are_the_tables(browser_view, built) -> None:
    errors = pq.read_table(built["tables"] / "errors.parquet", columns=["error_name", "api_name"])
    fig = _figure(browser_view, "errors")
    plotted = {t["name"]: sum(int(v) for v in t["y"]) for t in fig["traces"]}
    assert sum(plotted.values()) == errors.num_rows
    expected_pairs = {("MEMBER_ID_REQUIRED", "JoinGroup")} | {
        ("REBALANCE_IN_PROGRESS", a) for a in ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit")}
    labels = Counter(f"{n} (expected)" if (n, a) in expected_pairs else n
                     for n, a in zip(errors["error_name"].to_pylist(), errors["api_name"].to_pylist(), strict=True))
    assert labels["MEMBER_ID_REQUIRED (expected)"] > 0
    for name, n in plotted.items():
        if name != "other":
            assert n == labels[name], name


def _label_floor(page: str):
    """The page's interval (its facts say it: '100 ms', '1 s', '5 min', ...) as a floor_temporal."""
    label = re.search(r"<dt>time interval of the plots</dt><dd>([^<]+)</dd>", page).group(1)
    number, unit = label.split(" ")
    unit = {"ms": "millisecond", "s": "second", "min": "minute", "h": "hour", "day": "day", "days": "day"}[unit]
    return lambda ts: pc.floor_temporal(ts, multiple=int(number), unit=unit)


def test_plotted_percentiles_are_within_a_bucket_of_the_exact_ones(browser_view, built) -> None:
    """p50 and p99 per interval and API of the service-time plot against pyarrow's exact quantile of the
    tables' service_ms (rank floor(q (n - 1)), interpolation "lower"): within the stated bucket error."""
    from analyzer.report.aggregate import PERCENTILE_ERROR

    floor = _label_floor(built["report"].read_text(encoding="utf-8"))
    ex = pq.read_table(built["tables"] / "exchanges.parquet")
    ex = ex.filter(pc.and_(pc.is_valid(ex["latency_ms"]), pc.equal(ex["waited"], False)))
    series = [("Fetch (with records)" if (r or 0) > 0 else "Fetch (empty)") if a == "Fetch" else a
              for a, r in zip(ex["api_name"].to_pylist(), ex["record_count"].to_pylist(), strict=True)]
    ts = pc.coalesce(ex["request_first_ts"], ex["response_first_ts"])
    rows = pa.table({"series": pa.array(series), "bin": floor(ts).cast(pa.timestamp("us")),
                     "ms": pc.coalesce(ex["service_ms"], ex["latency_ms"])})
    checked = 0
    for t in _figure(browser_view, "latency", 0)["traces"]:
        name, q = t["name"].rsplit(" ", 1)
        if name == "other":
            continue
        own = rows.filter(pc.equal(rows["series"], name))
        for x, y in zip(t["x"], t["y"], strict=True):
            values = own.filter(pc.equal(own["bin"], pa.scalar(dt_parse(x), pa.timestamp("us"))))["ms"]
            exact = pc.quantile(values, q=int(q[1:]) / 100, interpolation="lower")[0].as_py()
            assert abs(float(y) - exact) <= PERCENTILE_ERROR * exact + 1e-12, (name, q, x, y, exact)
            checked += 1
    assert checked > 10


def dt_parse(text: str):
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace(" ", "T"))


def test_histogram_percentiles_merge_exactly_and_stay_within_a_bucket() -> None:
    """Histograms of random latencies added in batches (merged as they come) against pyarrow's exact
    quantiles of the whole: counts and maxima exact, p50/p90/p99 within PERCENTILE_ERROR; the same result
    whatever the batches' order."""
    import numpy as np

    from analyzer.report import aggregate as ag

    rng = np.random.default_rng(7)
    n = 60_000
    series = rng.choice(["a", "b", "c", "d"], n)
    ms = np.concatenate([rng.lognormal(1.0, 2.0, n - 300), np.zeros(100), np.full(100, 5.0), rng.random(100) * 1e-4])
    rng.shuffle(ms)
    rows = pa.table({"series": series, "value": ms, "capture_file": pa.array(["f"] * n),
                     "frame": pa.array(np.arange(n))})
    results = []
    for order in (np.arange(0, n, 7000), np.arange(0, n, 7000)[::-1]):
        h = ag.LatencyHistograms(["series"])
        for start in order:
            h.add(rows.slice(int(start), 7000))
        results.append(ag.percentiles(h.result(), ["series"], (0.5, 0.9, 0.99)).sort_by("series"))
    assert results[0].equals(results[1])
    got = results[0].to_pylist()
    assert [r["series"] for r in got] == ["a", "b", "c", "d"]
    for r in got:
        own = rows.filter(pc.equal(rows["series"], r["series"]))["value"]
        assert r["count"] == len(own)
        assert r["max"] == pc.max(own).as_py()
        for q in (50, 90, 99):
            exact = pc.quantile(own, q=q / 100, interpolation="lower")[0].as_py()
            assert abs(r[f"p{q}"] - exact) <= ag.PERCENTILE_ERROR * exact + 1e-12, (r["series"], q)
    slowest = rows.sort_by([("value", "descending")]).slice(0, 1).to_pylist()[0]
    top = max(got, key=lambda r: r["max"])
    assert (top["series"], top["frame"]) == (slowest["series"], slowest["frame"])


def test_accumulators_stay_bounded_on_many_keys(monkeypatch) -> None:
    """Keys as many as the rows (hostile tables): an accumulator with max_groups keeps that many groups, those
    with the most rows; a time series folds the smallest series into 'other' and keeps the big ones exact."""
    from analyzer.report import aggregate as ag

    acc = ag.Accumulator(["k"], max_groups=10)
    big = pa.table({"k": pa.array([f"big{i}" for i in range(5)] * 100)})
    for i in range(50):
        acc.add(pa.table({"k": pa.array([f"u{i}-{j}" for j in range(40)])}))
        acc.add(big.slice(i * 10, 10))
        acc._merge()
        assert acc._parts[0].num_rows <= 10
    got = dict(zip(acc.result()["k"].to_pylist(), acc.result()["count"].to_pylist(), strict=True))
    assert acc.truncated and {k: got[k] for k in got if k.startswith("big")} == {f"big{i}": 100 for i in range(5)}

    monkeypatch.setattr(ag, "MAX_SERIES_KEPT", 3)
    monkeypatch.setattr(ag, "MERGE_ROWS", 8)
    interval = ag.Interval(1, 1, "second", "1 s")
    series = ag.SeriesOverTime(interval)
    ts = pa.array([0] * 60, pa.timestamp("us", "UTC"))
    for i in range(20):
        names = ["a"] * 30 + ["b"] * 20 + [f"x{i}-{j}" for j in range(10)]
        series.add(pa.table({"ts": ts, "series": pa.array(names)}))
    out = series.result(n=2)
    assert series.folded
    assert dict(zip(out["series"].to_pylist(), out["count"].to_pylist(), strict=True)) == {
        "a": 600, "b": 400, "other": 200}


def test_times_outside_the_span_do_not_multiply_the_intervals(built, tmp_path) -> None:
    """Exchanges dated hours apart decades after the capture files' span (tables put together by hand) land in
    the last interval instead of adding an interval each."""
    import datetime as dt

    from analyzer.report import aggregate as ag
    from analyzer.report import page
    from analyzer.report.source import open_folder

    folder = tmp_path / "tables"
    shutil.copytree(built["tables"], folder)
    ex = pq.read_table(folder / "exchanges.parquet")
    column = ex.schema.get_field_index("request_first_ts")
    start = dt.datetime(2090, 1, 1, tzinfo=dt.UTC)
    far = pa.array([start + dt.timedelta(hours=i) for i in range(ex.num_rows)], ex.schema.field(column).type)
    assert ex.num_rows > ag.MAX_BINS + 1
    pq.write_table(ex.set_column(column, ex.schema.field(column), far), folder / "exchanges.parquet")
    report = page.build(open_folder(str(folder)))
    bins = {x for t in report.sections[0].parts[0].figure.data for x in t.x}
    assert len(bins) <= ag.MAX_BINS + 1
    assert sum(sum(t.y) for t in report.sections[0].parts[0].figure.data) == ex.num_rows


def test_group_timeline_is_the_groups_table(browser_view, built) -> None:
    """Each member's time without partitions in each classic generation, as drawn, is the groups table's waited_ms
    (the heartbeat protocols' epochs: test_report_modern)."""
    groups = pq.read_table(built["tables"] / "groups.parquet").to_pylist()
    expected = Counter()
    for g in groups:
        if g["group_protocol"] != "classic":
            continue
        for m in g["members"]:
            if m["join_ts"] is not None and m["synced_ts"] is not None:
                expected[f"{g['group_id']}: {m['client_id'] or m['member_id']}", g["generation_id"],
                         f"{m['waited_ms']:,.1f}"] += 1
    assert expected, "the samples hold consumer groups"
    fig = _figure(browser_view, "groups", 0)
    waits = [t for t in fig["traces"] if t["name"] == "rebalance: no partitions"]
    assert len(waits) == 1
    drawn = Counter()
    texts = waits[0]["text"]
    for y, text in zip(waits[0]["y"][0::3], texts[0::3], strict=True):
        generation = int(text.split(";")[0].split()[-1])
        drawn[y, generation, text.rsplit("waited ", 1)[1].removesuffix(" ms")] += 1
    assert drawn == expected


# --- What is drawn, read back from Chromium and held to the tables -----------------------------------------------

_DURATION = re.compile(r"^(\d[\d,]*(?:\.\d+)?) (µs|ms|s)$")
_RANGE = re.compile(r"(\d[\d,]*(?:\.\d+)?)(?: (µs|ms|s))? to (\d[\d,]*(?:\.\d+)?) (µs|ms|s)")
_MS = {"µs": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(number: str, unit: str) -> float:
    return float(number.replace(",", "")) * _MS[unit]


def _drawn(view, section: str, index: int = 0) -> dict:
    return [f for f in view["drawn"] if f["section"] == section][index]


def _axis(figure: dict, axis_id: str) -> dict:
    return next(a for a in figure["axes"] if a["id"] == axis_id)


def _latency_values(tables: Path) -> pa.Table:
    """series and value (ms) of each exchange as the latency section defines them: the waits (waited, or null: a
    Fetch that brought records after a while) their latency_ms, the rest their service_ms (else latency_ms)."""
    ex = pq.read_table(tables / "exchanges.parquet",
                       columns=["api_name", "record_count", "latency_ms", "service_ms", "waited"])
    ex = ex.filter(pc.is_valid(ex["latency_ms"]))
    series = [("Fetch (with records)" if (r or 0) > 0 else "Fetch (empty)") if a == "Fetch" else a
              for a, r in zip(ex["api_name"].to_pylist(), ex["record_count"].to_pylist(), strict=True)]
    value = [lat if w is None or w else (svc if svc is not None else lat) for lat, svc, w in zip(
        ex["latency_ms"].to_pylist(), ex["service_ms"].to_pylist(), ex["waited"].to_pylist(), strict=True)]
    return pa.table({"series": series, "value": pa.array(value, pa.float64())})


def test_log_axes_label_every_tick_with_its_value_in_full(browser_view) -> None:
    """Every tick label drawn on a log axis (the latency plots) and on the heatmap's latency axis is a whole
    value with its unit ("2 ms", "1 s"), never a bare digit, and it is the value at which plotly drew it."""
    checked = 0
    heat = _drawn(browser_view, "latency", 2)
    for figure in browser_view["drawn"]:
        for axis in figure["axes"]:
            if axis["type"] != "log" and not (figure is heat and axis["id"] == "x"):
                continue
            assert len(axis["ticks"]) >= 2, (figure["id"], axis["id"], axis["ticks"])
            for text, at in axis["ticks"]:
                m = _DURATION.match(text)
                assert m, (figure["id"], axis["id"], text)
                assert axis["type"] == "log", (figure["id"], axis["id"], "a latency axis must be a log axis")
                assert _ms(*m.groups()) == pytest.approx(10 ** at, rel=1e-6), (figure["id"], text, 10 ** at)
                checked += 1
    assert checked >= 10


def test_heatmap_hovers_are_the_buckets_of_the_tables(browser_view, built) -> None:
    """Hovered as a user would: the slowest JoinGroup, SyncGroup and Fetch of the exchanges table lie within the
    bounds their row's last cell gives. The axis title says N buckets per factor of ten: the cells' edges as
    plotted, and every hovered cell's bounds, are 10^(k/N) ms; each hovered count, and each cell's count as
    plotted, is the exchanges of that API whose latency lies within the cell's bounds in the table."""
    values = _latency_values(built["tables"])
    cells = []
    for h in browser_view["heat_hovers"]:
        text = " ".join(h["lines"])
        assert h["lines"][0] == h["row"], h
        m = _RANGE.search(text)
        assert m, text
        count = int(re.search(r"([\d,]+) exchanges", text).group(1).replace(",", ""))
        cells.append((h["row"], _ms(m.group(1), m.group(2) or m.group(4)), _ms(m.group(3), m.group(4)), count, text))
    assert {c[0] for c in cells} >= {"JoinGroup", "SyncGroup", "Fetch (empty)", "Fetch (with records)"}
    # The bounds are written to 3 significant digits: compared within half a unit of the last.
    for row in ("JoinGroup", "SyncGroup", "Fetch (empty)", "Fetch (with records)"):
        slowest = pc.max(values.filter(pc.equal(values["series"], row))["value"]).as_py()
        _, low, high, _, text = max((c for c in cells if c[0] == row), key=lambda c: c[2])
        assert low * (1 - 5e-3) <= slowest < high * (1 + 5e-3), (row, slowest, text)

    title = _axis(_drawn(browser_view, "latency", 2), "x")["title"]
    per_decade = int(re.search(r"(\d+) buckets per factor of ten", title).group(1))
    edges = [float(x) for x in _figure(browser_view, "latency", 2)["traces"][0]["x"]]
    step = 10 ** (1 / per_decade)
    assert len(edges) >= 2
    assert all(b / a == pytest.approx(step, rel=1e-9) for a, b in zip(edges, edges[1:], strict=False)), (title,
                                                                                                        edges[:3])
    for (row, low, high, count, text), h in zip(cells, browser_view["heat_hovers"], strict=True):
        k = round(per_decade * math.log10(low))
        lo, hi = 10 ** (k / per_decade), 10 ** ((k + 1) / per_decade)
        assert low == pytest.approx(lo, rel=5e-3) and high == pytest.approx(hi, rel=5e-3), (text, lo, hi)
        own = values.filter(pc.equal(values["series"], row))["value"]
        inside = pc.sum(pc.and_(pc.greater_equal(own, lo), pc.less(own, hi))).as_py() or 0
        assert count == h["count"] == inside, (text, inside)
    trace = _figure(browser_view, "latency", 2)["traces"][0]
    for row, counts in zip(trace["y"], trace["customdata"], strict=True):
        own = values.filter(pc.equal(values["series"], row))["value"].to_numpy()
        # Values below 1 µs are counted in the first bucket (the histograms' clip), above 10^9 ms in the last.
        own = own.clip(1e-3, 1e9 * (1 - 1e-12))
        assert [float(c) for c in counts] == np.histogram(own, edges)[0].tolist(), row


def _rgb(colour: str) -> tuple[int, ...]:
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(int(v) for v in re.findall(r"\d+", colour)[:3])


def _grey(colour: str) -> bool:
    rgb = _rgb(colour)
    return max(rgb) - min(rgb) <= 16


def test_expected_errors_are_drawn_apart_from_failures(browser_view) -> None:
    """In both error charts, the expected protocol steps are grey and stacked above the failures (drawn after
    them), the failures in colour."""
    for section, index in (("overview", 1), ("errors", 0)):
        colours = _drawn(browser_view, section, index)["colours"]
        expected = [i for i, (n, _) in enumerate(colours) if n.endswith(" (expected)")]
        failures = [i for i, (n, _) in enumerate(colours) if not n.endswith(" (expected)") and n != "other"]
        assert expected and failures, colours
        assert all(_grey(colours[i][1]) for i in expected), (section, colours)
        assert not any(_grey(colours[i][1]) for i in failures), (section, colours)
        assert max(failures) < min(expected), (section, colours)


def _exchange_errors(tables: Path) -> tuple[int, int]:
    """(failures, expected protocol steps) among the exchanges with status error, by the table's error_expected."""
    ex = pq.read_table(tables / "exchanges.parquet", columns=["status", "error_expected"])
    error = ex.filter(pc.equal(ex["status"], "error"))
    expected = pc.sum(pc.fill_null(error["error_expected"], False)).as_py() or 0
    return error.num_rows - expected, expected


@pytest.mark.parametrize("view_name", ["browser_view", "single"])
def test_header_counts_failures_and_expected_steps_apart(view_name, request, built) -> None:
    view = request.getfixturevalue(view_name)
    tables = view["tables"] if "tables" in view else built["tables"]
    failures, expected = _exchange_errors(tables)
    text = view["facts"]["exchanges"]
    got = re.search(r"([\d,]+) failed\b.*?([\d,]+) [^;)]*\bexpected\b", text)
    assert got, text
    assert (int(got.group(1).replace(",", "")), int(got.group(2).replace(",", ""))) == (failures, expected), text


def test_errors_over_time_span_the_capture(single) -> None:
    """A capture with one expected error: both error charts' time axes run over the capture (its files' first
    to last packet, give or take an interval), not zoomed to the error's interval, and its bar is drawn a few
    pixels wide rather than as a wall or a hairline."""
    files = pq.read_table(single["tables"] / "files.parquet", columns=["first_ts", "last_ts"])
    first = pc.min(files["first_ts"]).as_py().replace(tzinfo=None)
    last = pc.max(files["last_ts"]).as_py().replace(tzinfo=None)
    interval = float(re.match(r"(\d+) ms", single["facts"]["time interval of the plots"]).group(1)) / 1000
    assert _exchange_errors(single["tables"]) == (0, 1)
    for section, index in (("overview", 1), ("errors", 0)):
        figure = _drawn(single, section, index)
        lo, hi = (dt_parse(x) for x in _axis(figure, "x")["range"])
        assert lo <= first and hi >= last, (section, lo, hi, first, last)
        assert (hi - lo).total_seconds() <= (last - first).total_seconds() + 2 * interval, (section, lo, hi)
        assert figure["bar_widths"] and all(3 <= w <= 60 for w in figure["bar_widths"]), figure["bar_widths"]


def test_connection_charts_colour_each_ending_alike(browser_view) -> None:
    """fin is one colour in both connection charts (legend swatches as drawn), and rst another."""
    opened = dict(_drawn(browser_view, "connections", 0)["legend"])
    timeline = dict(_drawn(browser_view, "connections", 1)["legend"])
    for kind in ("fin", "rst"):
        assert opened[f"closed: {kind}"] == timeline[kind], (kind, opened, timeline)
    assert timeline["fin"] != timeline["rst"]


def test_compression_axis_starts_at_zero_and_shows_the_ratio(browser_view, built) -> None:
    """The compression chart's byte axis is linear from 0 (so the bars' heights compare as the sizes do), and
    each codec's label gives the ratio of the Produce record bytes uncompressed to on the wire in the tables."""
    p = pq.read_table(built["tables"] / "partitions.parquet",
                      columns=["api_key", "codec", "request_record_bytes", "uncompressed_bytes"])
    p = p.filter(pc.and_(pc.equal(p["api_key"], 0), pc.is_valid(p["codec"])))
    sums = p.group_by("codec").aggregate([("request_record_bytes", "sum"), ("uncompressed_bytes", "sum")])
    ratios = {c: u / w for c, w, u in zip(sums["codec"].to_pylist(), sums["request_record_bytes_sum"].to_pylist(),
                                          sums["uncompressed_bytes_sum"].to_pylist(), strict=True) if w}
    figure = _drawn(browser_view, "traffic", 2)
    y = _axis(figure, "y")
    assert y["type"] == "linear" and float(y["range"][0]) == 0, y
    assert y["ticks"][0][0] == "0", y["ticks"]
    labels = {m.group(1): float(m.group(2)) for text, _ in _axis(figure, "x")["ticks"]
              if (m := re.match(r"(\w+)\s*ratio (\d+\.\d+)", text))}
    assert set(labels) == set(ratios), (labels, ratios)
    for codec, ratio in ratios.items():
        assert labels[codec] == pytest.approx(ratio, abs=0.005), codec


# --- Consumer lag and failure triage ------------------------------------------------------------------------------

def _lag_oracle(tables: Path) -> dict[tuple[str, str], int]:
    """(series label, offset packet) -> lag, recomputed from the exported tables by a plain search: each
    OffsetCommit's offset (its request's group) against the latest error-free Fetch high watermark of the same
    capture file and topic-partition at or before its request time."""
    p = pq.read_table(tables / "partitions.parquet").to_pylist()
    ex = {(r["capture_file"], r["connection_id"], r["correlation_id"]): r for r in pq.read_table(
        tables / "exchanges.parquet", columns=["capture_file", "connection_id", "correlation_id", "group_id",
                                               "request_frame", "api_name"]).to_pylist()
          if r["api_name"] == "OffsetCommit"}
    marks: dict[tuple, list] = {}
    for r in p:
        if r["api_name"] == "Fetch" and r["error_code"] == 0 and (r["high_watermark"] or -1) >= 0:
            marks.setdefault((r["capture_file"], r["topic"], r["partition"]), []).append(
                (r["response_last_ts"], r["high_watermark"]))
    out = {}
    for r in p:
        if r["api_name"] != "OffsetCommit" or r["error_code"] != 0 or (r["committed_offset"] or -1) < 0:
            continue
        x = ex[r["capture_file"], r["connection_id"], r["correlation_id"]]
        seen = [m for m in marks.get((r["capture_file"], r["topic"], r["partition"]), [])
                if m[0] <= r["request_last_ts"]]
        if seen:
            label = f"{x['group_id']}: {r['topic']}[{r['partition']}]"
            out[label, str(x["request_frame"])] = max(seen)[1] - r["committed_offset"]
    return out


def test_lag_at_each_commit_is_the_tables(browser_view, built) -> None:
    oracle = _lag_oracle(built["tables"])
    assert oracle, "the samples' consumers commit"
    drawn = {}
    for t in _figure(browser_view, "lag", 0)["traces"]:
        for y, custom in zip(t["y"], t["customdata"], strict=True):
            if custom[0] == "OffsetCommit":
                drawn[t["name"], custom[4]] = int(float(y))
    from analyzer.report.page import TOP_LAG_SERIES

    series = {name for name, _ in oracle}
    assert len({name for name, _ in drawn}) == min(TOP_LAG_SERIES, len(series))
    assert drawn == {k: v for k, v in oracle.items() if k[0] in {name for name, _ in drawn}}


def test_triage_tables_are_the_tables(built) -> None:
    """The unexpected-error table's counts per client, API and error are the exchanges with status error and
    error_expected false, counted here with a Counter."""
    page = built["report"].read_text(encoding="utf-8")
    section = page.split('<section id="triage">')[1].split("</section>")[0]
    first = section.split("<table>")[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", first)[1:]
    drawn = Counter()
    for row in rows:
        cells = re.findall(r"<td>(.*?)</td>", row)
        drawn[cells[0], cells[2], cells[3]] = int(cells[4].replace(",", ""))
    ex = pq.read_table(built["tables"] / "exchanges.parquet",
                       columns=["client_id", "api_name", "error_name", "status", "error_expected"]).to_pylist()
    expected = Counter((r["client_id"] or "", r["api_name"], r["error_name"]) for r in ex
                       if r["status"] == "error" and not r["error_expected"])
    top = dict(sorted(expected.items(), key=lambda kv: -kv[1])[:len(drawn)])
    assert len(drawn) == min(50, len(expected))
    assert {k: expected[k] for k in drawn} == dict(drawn)
    assert min(drawn.values()) >= min(top.values())
    assert "Reconnect loops" in section and "10.77.0.2" in section  # the cluster sample's stopped node
