"""``kafkacap report``: the page of the sample captures, opened in headless Chromium (Debian's ``chromium``,
driven by Playwright), checked against the exported tables with pyarrow (not with the report's own code);
and the same page from an export folder and from a Spark-layout (Hive-partitioned) folder."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

pytest.importorskip("plotly")

from analyzer.cli.commands import main  # noqa: E402
from spark_jobs.schemas import capture_dates  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "sample_pcaps"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = ("overview", "latency", "errors", "traffic", "groups", "connections")


def invoke(*args) -> None:
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exit_code == 0, (result.output, result.exception)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The report of the sample captures, and their tables exported the ordinary way (the reference)."""
    tmp = tmp_path_factory.mktemp("report")
    invoke("report", SAMPLES, "--detect-ports", "--no-progress", "-o", tmp / "report.html")
    invoke("export", SAMPLES, "--detect-ports", "--no-progress", "-o", tmp / "tables")
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
    invoke("report", built["tables"], "-o", tmp_path / "from_tables.html")
    assert _comparable((tmp_path / "from_tables.html").read_text(encoding="utf-8")) == _comparable(
        built["report"].read_text(encoding="utf-8"))


def test_report_of_a_spark_layout_folder_is_the_same_page(built, tmp_path) -> None:
    """Each table as a dataset partitioned by capture_date, as the Spark job writes it."""
    out = tmp_path / "spark_out"
    for name in ("exchanges", "errors", "partitions", "connections", "files", "groups"):
        table = pq.read_table(built["tables"] / f"{name}.parquet")
        dates = pa.chunked_array([capture_dates(name, b) for b in table.to_batches()], pa.date32())
        pq.write_to_dataset(table.append_column("capture_date", dates), out / name, partition_cols=["capture_date"])
    (out / "_SUCCESS").write_text("")
    assert all(d.name.startswith("capture_date=") for d in (out / "exchanges").iterdir())
    invoke("report", out, "-o", tmp_path / "from_spark.html")
    assert _comparable((tmp_path / "from_spark.html").read_text(encoding="utf-8")) == _comparable(
        built["report"].read_text(encoding="utf-8"))


def test_empty_tables_say_why(tmp_path) -> None:
    """No Kafka on the port asked for: every section says why it is empty instead of drawing nothing."""
    invoke("report", SAMPLES / "tansu_admin.pcap", "--port", "1", "--no-progress", "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "js-plotly-plot" not in page.split("<main>")[1].split('id="connections"')[0]
    assert page.count('class="empty"') >= 10
    assert "The exchanges table is empty" in page


def test_a_csv_export_is_refused(tmp_path) -> None:
    invoke("export", SAMPLES / "tansu_admin.pcap", "--no-progress", "-f", "csv", "-o", tmp_path / "t")
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t"), "-o", str(tmp_path / "r.html")])
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


@pytest.fixture(scope="module")
def browser_view(built, tmp_path_factory):
    """The page opened in headless Chromium: its figures' data as plotted, console messages, a hover's text;
    a screenshot is left in the test's temporary folder."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    shots = tmp_path_factory.mktemp("screenshots")
    messages = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            # Drawn at 0.6 device pixels per CSS pixel: a small screenshot (docs/report.png is one).
            page = browser.new_page(viewport={"width": 1280, "height": 1000}, device_scale_factor=0.6)
            page.on("console", lambda m: messages.append((m.type, m.text)))
            page.on("pageerror", lambda e: messages.append(("pageerror", str(e))))
            page.goto(built["report"].as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
                                   "document.querySelectorAll('.js-plotly-plot').length")
            figures = page.evaluate(_TRACES)
            # Hover the first bar of the request-rate plot as a user would, and read the label plotly draws.
            first = page.locator("#overview .js-plotly-plot").first
            gd_id = first.get_attribute("id")
            page.evaluate(f"Plotly.Fx.hover('{gd_id}', [{{curveNumber: 0, pointNumber: 0}}])")
            hover = page.locator(f"#{gd_id} .hoverlayer").text_content()
            page.screenshot(path=str(shots / "report.png"))
            page.locator("#latency").screenshot(path=str(shots / "latency.png"))
        finally:
            browser.close()
    return {"figures": figures, "messages": messages, "hover": hover, "shots": shots}


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
    """Each member's time without partitions in each generation, as drawn, is the groups table's waited_ms."""
    groups = pq.read_table(built["tables"] / "groups.parquet").to_pylist()
    expected = Counter()
    for g in groups:
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
