"""The small tables of ``aggregate`` drawn as plotly figures: UTC time axes, units on every axis, the
Okabe-Ito palette (told apart by readers with any common colour-vision deficiency), and hover text with the
values and the packet to open in Wireshark (``frame.number == N`` in that capture file)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Iterator

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc
from plotly.subplots import make_subplots

from analyzer.report.aggregate import EXPECTED_SUFFIX, HEATMAP_PER_DECADE, OPENED, OTHER, Interval

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
OTHER_COLOUR = "#999999"
# Expected protocol steps are drawn in greys (and hatched), so that no colour of a failure is spent on them.
EXPECTED_COLOURS = ("#BDBDBD", "#8F8F8F", "#DADADA", "#6E6E6E")
# How a connection ended, one colour per kind in every chart that shows it (opened: the SYN seen).
ENDED_COLOURS = {"fin": PALETTE[2], "rst": PALETTE[3], "reused": PALETTE[1], "evicted": PALETTE[5],
                 "capture_end": PALETTE[4], "continued": PALETTE[6]}
OPENED_COLOUR = PALETTE[0]
MAX_LOG_TICKS = 12  # labelled ticks on a log axis before only the powers of ten are labelled
TIME_AXIS = "time (UTC)"
TIME_HOVER = "%{x|%Y-%m-%d %H:%M:%S.%L} UTC"
HEIGHT = 380


def colours(names: list[str]) -> dict[str, str]:
    """A fixed colour per series name, in the order given; OTHER is grey."""
    out, i = {}, 0
    for name in names:
        if name == OTHER:
            out[name] = OTHER_COLOUR
        else:
            out[name] = PALETTE[i % len(PALETTE)]
            i += 1
    return out


def error_colours(names: list[str]) -> dict[str, str]:
    """Colours of error series in drawing order (the first at the bottom of a stack): failures, OTHER, then
    the expected protocol steps in greys."""
    failures = [n for n in names if n != OTHER and not n.endswith(EXPECTED_SUFFIX)]
    expected = [n for n in names if n.endswith(EXPECTED_SUFFIX)]
    out = colours(failures + ([OTHER] if OTHER in names else []))
    out |= {n: EXPECTED_COLOURS[i % len(EXPECTED_COLOURS)] for i, n in enumerate(expected)}
    return out


def ended_colours(kinds: list[str], opened: bool = False) -> dict[str, str]:
    """The colour of each way a connection ends (``closed: <kind>`` or ``<kind>``), the same in every chart."""
    out = {OPENED: OPENED_COLOUR} if opened else {}
    for k in kinds:
        out[k] = ENDED_COLOURS.get(k.removeprefix("closed: "), PALETTE[7])
    return out


def duration(ms: float, digits: int = 3) -> str:
    """A time in ms written in s from a second up, in µs below 10 µs, else in ms; ``digits`` significant."""
    value, unit = (ms / 1000, "s") if ms >= 1000 else (ms * 1000, "µs") if 0 < ms < 0.01 else (ms, "ms")
    text = f"{value:,.0f}" if value >= 10 ** digits else f"{value:.{digits}g}"
    return f"{text} {unit}"


def _nice(k: int, m: int) -> float:
    return float(f"{m}e{k}")  # m * 10**k without the binary rounding of the product


def log_axis(values: Collection[float]) -> dict:
    """A log axis in ms whose every label is a full value ("2 ms", "1 s"): ticks at 1, 2 and 5 times a power of
    ten (only the powers when there would be more than MAX_LOG_TICKS), the range widened to a tick on either
    side of the data so at least two are labelled. Plotly's own log ticks label the 2 to 9 with bare digits."""
    v = [x for x in values if x is not None and np.isfinite(x) and x > 0]
    if not v:
        return {"type": "log"}
    lo, hi = min(v), max(v)
    k0, k1 = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    for mantissas in ((1, 2, 5), (1,)):
        ticks = [_nice(k, m) for k in range(k0, k1 + 1) for m in mantissas]
        below = max(t for t in ticks if t <= lo * (1 + 1e-9))
        above = min(t for t in ticks if t >= hi * (1 - 1e-9))
        if below == above:
            below, above = ticks[ticks.index(below) - 1], ticks[ticks.index(above) + 1]
        shown = [t for t in ticks if below <= t <= above]
        if len(shown) <= MAX_LOG_TICKS:
            break
    pad = 0.02 * (math.log10(above) - math.log10(below))
    return {"type": "log", "tickvals": shown, "ticktext": [duration(t) for t in shown],
            "range": [math.log10(below) - pad, math.log10(above) + pad]}


def time_range(fig: go.Figure, interval: Interval) -> go.Figure:
    """The time axes over the whole capture span (from its first interval's start to its last one's end), so that
    a few rows in one interval are drawn where they happened rather than zoomed to a full-width wall."""
    if interval.first_us is None or interval.last_us is None:
        return fig
    width = max(1, round(interval.seconds * 1e6))
    epoch = dt.datetime(1970, 1, 1)
    first = interval.first_us // width * width
    last = interval.last_us // width * width + width
    fig.update_xaxes(range=[str(epoch + dt.timedelta(microseconds=us)) for us in (first, last)])
    return fig


def _layout(fig: go.Figure, y_title: str, x_title: str = TIME_AXIS, height: int = HEIGHT, **extra) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, margin={"l": 70, "r": 20, "t": 30, "b": 50},
                      legend={"orientation": "v"}, hoverlabel={"namelength": -1}, **extra)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


def _over(interval: Interval) -> dict:
    """A bar over its interval (its left edge at the interval's start): set, since plotly's default width for a
    lone bar on a time axis is a millisecond."""
    return {"width": 0.9 * interval.seconds * 1000, "offset": 0}


def _times(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """UTC timestamps as naive datetime64 (plotly writes them as they are; the axes say UTC)."""
    return col.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False)


def _order(t: pa.Table, column: str = "series") -> list[str]:
    """Series by total count, largest first, OTHER last."""
    if t.num_rows == 0:
        return []
    totals = t.group_by(column).aggregate([("count", "sum")]).sort_by([("count_sum", "descending")])
    names = [n for n in totals[column].to_pylist() if n != OTHER]
    return names + ([OTHER] if OTHER in totals[column].to_pylist() else [])


def stacked_counts(t: pa.Table, interval: Interval, what: str, frame_label: str,
                   palette: dict[str, str] | None = None, hatched: Collection[str] = ()) -> go.Figure:
    """Bars of ``count`` per interval, stacked by series (in ``palette``'s order and colours, else the largest
    first) over the capture span; hover: the count and the interval's first packet."""
    fig = go.Figure()
    names = _order(t)
    if palette is None:
        palette = colours(names)
    else:
        names = [n for n in palette if n in set(names)] + [n for n in names if n not in palette]
        palette = palette | {n: PALETTE[7] for n in names if n not in palette}
    for name in names:
        s = t.filter(pc.equal(t["series"], name))
        marker = {"color": palette[name]}
        if name in hatched:
            marker["pattern"] = {"shape": "/", "fgcolor": "#FFFFFF", "fgopacity": 0.6}
        fig.add_trace(go.Bar(
            x=_times(s["bin"]), y=s["count"].to_numpy(), name=name, marker=marker, **_over(interval),
            customdata=np.stack([s["capture_file"].to_numpy(zero_copy_only=False),
                                 s["frame"].to_numpy(zero_copy_only=False)], axis=1),
            hovertemplate=(f"{name}<br>{TIME_HOVER} (+{interval.label})<br>%{{y:,}} {what}<br>"
                           f"first {frame_label}: packet %{{customdata[1]}} of %{{customdata[0]}}<extra></extra>")))
    return time_range(_layout(fig, f"{what} per {interval.label}", barmode="stack"), interval)


def latency_lines(t: pa.Table, interval: Interval) -> go.Figure:
    """p50 (solid) and p99 (dotted) per series over time; hover: both, the count and the slowest exchange."""
    fig = go.Figure()
    names = _order(t)
    palette = colours(names)
    for name in names:
        s = t.filter(pc.equal(t["series"], name))
        custom = np.stack([s["count"].to_numpy(), s["max"].to_numpy(), s["p50"].to_numpy(), s["p99"].to_numpy(),
                           s["capture_file"].to_numpy(zero_copy_only=False),
                           s["frame"].to_numpy(zero_copy_only=False)], axis=1)
        hover = (f"{name}<br>{TIME_HOVER} (+{interval.label})<br>p50 %{{customdata[2]:.3f}} ms, "
                 "p99 %{customdata[3]:.3f} ms<br>%{customdata[0]:,} exchanges; slowest %{customdata[1]:.3f} ms: "
                 "response packet %{customdata[5]} of %{customdata[4]}<extra></extra>")
        for q, dash in (("p50", "solid"), ("p99", "dot")):
            fig.add_trace(go.Scatter(
                x=_times(s["bin"]), y=s[q].to_numpy(), name=f"{name} {q}", legendgroup=name, mode="lines+markers",
                line={"color": palette[name], "dash": dash}, marker={"size": 4}, customdata=custom,
                hovertemplate=hover))
    _layout(fig, "latency (log scale)")
    fig.update_yaxes(**log_axis([*t["p50"].to_pylist(), *t["p99"].to_pylist()]))
    return time_range(fig, interval)


def latency_heatmap(t: pa.Table, per_decade: int = HEATMAP_PER_DECADE) -> go.Figure:
    """Exchanges per latency bucket (x, on a log axis: bucket b spans 10^(b/per_decade) to 10^((b+1)/per_decade)
    ms) and series (y); colour: count (log-scaled); hover: the bucket's bounds and its count."""
    names = sorted(set(t["series"].to_pylist()))
    lo, hi = pc.min(t["bucket"]).as_py(), pc.max(t["bucket"]).as_py()
    edges = [10 ** (b / per_decade) for b in range(lo, hi + 2)]
    z = np.zeros((len(names), hi - lo + 1))
    row = {n: i for i, n in enumerate(names)}
    for s, b, c in zip(t["series"].to_pylist(), t["bucket"].to_pylist(), t["count"].to_pylist(), strict=True):
        z[row[s], b - lo] = c
    bounds = [f"{duration(a)} to {duration(b)}" for a, b in zip(edges, edges[1:], strict=False)]
    fig = go.Figure(go.Heatmap(
        x=edges, y=names, z=np.where(z > 0, np.log10(np.maximum(z, 1)) + 1, np.nan), customdata=z,
        text=[bounds for _ in names],
        colorscale="Cividis", colorbar={"title": {"text": "exchanges"}, "tickvals": [1, 2, 3, 4, 5, 6, 7],
                                        "ticktext": ["1", "10", "100", "1k", "10k", "100k", "1M"]},
        hovertemplate="%{y}<br>latency %{text}<br>%{customdata:,} exchanges<extra></extra>", xgap=1, ygap=1))
    _layout(fig, "API", x_title=f"latency (log scale; {per_decade} buckets per factor of ten)",
            height=max(HEIGHT, 60 + 22 * len(names)))
    axis = log_axis(edges)
    if sum(edges[0] <= v <= edges[-1] for v in axis["tickvals"]) >= 2:  # else widened to two labelled ticks
        axis["range"] = [math.log10(edges[0]), math.log10(edges[-1])]
    fig.update_xaxes(**axis)
    return fig


def two_rows(top: go.Figure, bottom: go.Figure, titles: tuple[str, str], y_title: str) -> go.Figure:
    """Two figures' traces as two rows sharing the time axis (the bottom's legend entries are joined to
    the top's by name)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.12)
    seen = set()
    for row, part in ((1, top), (2, bottom)):
        for trace in part.data:
            trace.legendgroup = trace.name
            trace.showlegend = trace.name not in seen
            seen.add(trace.name)
            fig.add_trace(trace, row=row, col=1)
    _layout(fig, y_title, barmode="stack", height=2 * HEIGHT - 60)
    fig.update_xaxes(title_text="", row=1, col=1)
    return fig


def _series(t: pa.Table, palette: dict[str, str]) -> Iterator[tuple[str, pa.Table]]:
    """(name, its rows) of each series of ``t`` the palette names, in the palette's order, those with rows."""
    for name in palette:
        s = t.filter(pc.equal(t["series"], name))
        if s.num_rows:
            yield name, s


def traffic_over_time(t: pa.Table, interval: Interval, palette: dict[str, str]) -> go.Figure:
    """Bytes per interval and topic (bars) for one direction; hover: bytes, records, exchanges' rows."""
    fig = go.Figure()
    for name, s in _series(t, palette):
        fig.add_trace(go.Bar(
            x=_times(s["bin"]), y=s["bytes"].to_numpy(zero_copy_only=False), name=name, marker_color=palette[name],
            **_over(interval),
            customdata=np.stack([s["records"].to_numpy(zero_copy_only=False), s["count"].to_numpy()], axis=1),
            hovertemplate=(f"{name}<br>{TIME_HOVER} (+{interval.label})<br>%{{y:,}} bytes, %{{customdata[0]:,}} "
                           "records in %{customdata[1]:,} partition entries<extra></extra>")))
    return fig


def top_partitions(t: pa.Table) -> go.Figure:
    """Horizontal bars: record bytes of the busiest topic-partitions, produced and fetched."""
    fig = go.Figure()
    labels = [f"{tp} [{p}]" for tp, p in zip(t["topic"].to_pylist(), t["partition"].to_pylist(), strict=True)]
    for kind, colour in (("produced", PALETTE[0]), ("fetched", PALETTE[1])):
        fig.add_trace(go.Bar(
            y=labels, x=t[f"{kind}_bytes"].to_numpy(zero_copy_only=False), orientation="h", name=kind,
            marker_color=colour, customdata=t[f"{kind}_records"].to_numpy(zero_copy_only=False),
            hovertemplate=f"%{{y}}<br>{kind}: %{{x:,}} bytes, %{{customdata:,}} records<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "topic [partition]", x_title="record bytes on the wire", barmode="stack",
                   height=max(HEIGHT, 80 + 24 * len(labels)))


def compression(t: pa.Table) -> go.Figure:
    """Per codec: bytes on the wire and uncompressed (grouped bars on an axis from zero, so their heights compare
    as the sizes do) and the ratio under the codec's name; hover: ratio, batches, records."""
    codecs = t["codec"].to_pylist()
    wire = t["wire_bytes"].to_numpy(zero_copy_only=False)
    raw = t["uncompressed_bytes"].to_numpy(zero_copy_only=False)
    ratio = np.where(wire > 0, raw / np.maximum(wire, 1), np.nan)
    labels = [f"{c}<br>ratio {r:.2f}" if np.isfinite(r) else c for c, r in zip(codecs, ratio, strict=True)]
    custom = np.stack([ratio, t["batches"].to_numpy(zero_copy_only=False),
                       t["records"].to_numpy(zero_copy_only=False), np.array(codecs, dtype=object)], axis=1)
    fig = go.Figure()
    for name, y, colour in (("on the wire", wire, PALETTE[0]), ("uncompressed", raw, PALETTE[1])):
        fig.add_trace(go.Bar(
            x=labels, y=y, name=name, marker_color=colour, customdata=custom,
            hovertemplate=(f"%{{customdata[3]}}: %{{y:,}} bytes {name}<br>ratio %{{customdata[0]:.2f}} "
                           "(uncompressed / on the wire), %{customdata[1]:,} batches, %{customdata[2]:,} records"
                           "<extra></extra>")))
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "bytes (Produce requests)", x_title="codec (ratio: uncompressed / on the wire)",
                   barmode="group")


def group_events(t: pa.Table) -> go.Figure:
    """One marker per group-protocol exchange: time (x), client (y), API (colour); errors drawn as crosses."""
    fig = go.Figure()
    names = sorted(set(t["api_name"].to_pylist()))
    palette = colours(names)
    for name in names:
        s = t.filter(pc.equal(t["api_name"], name))
        error = pc.fill_null(pc.not_equal(s["error_code"], 0), False).to_numpy(zero_copy_only=False)
        fig.add_trace(go.Scatter(
            x=_times(s["ts"]), y=s["client"].to_pylist(), mode="markers", name=name,
            marker={"color": palette[name], "size": 8, "symbol": np.where(error, "x", "circle").tolist(),
                    "line": {"width": 0}},
            customdata=np.stack([s["status"].to_numpy(zero_copy_only=False),
                                 s["error_name"].to_numpy(zero_copy_only=False),
                                 s["latency_ms"].to_numpy(zero_copy_only=False),
                                 s["capture_file"].to_numpy(zero_copy_only=False),
                                 s["request_frame"].to_numpy(zero_copy_only=False)], axis=1),
            hovertemplate=(f"{name} %{{y}}<br>{TIME_HOVER}<br>%{{customdata[0]}} %{{customdata[1]}}, "
                           "%{customdata[2]:.3f} ms<br>request packet %{customdata[4]} of %{customdata[3]}"
                           "<extra></extra>")))
    n = len(set(t["client"].to_pylist()))
    return _layout(fig, "client (client_id @ address)", height=max(HEIGHT, 80 + 26 * n))


def lag_lines(t: pa.Table, interval: Interval) -> go.Figure:
    """Largest consumer lag per interval and topic; hover: the lag and how many Fetch partition entries."""
    fig = go.Figure()
    names = _order(t)
    palette = colours(names)
    for name in names:
        s = t.filter(pc.equal(t["series"], name))
        fig.add_trace(go.Scatter(
            x=_times(s["bin"]), y=s["max_lag"].to_numpy(zero_copy_only=False), name=name, mode="lines+markers",
            line={"color": palette[name]}, customdata=s["count"].to_numpy(),
            hovertemplate=(f"{name}<br>{TIME_HOVER} (+{interval.label})<br>largest lag %{{y:,}} records "
                           "(of %{customdata:,} Fetch partition entries)<extra></extra>")))
    return time_range(_layout(fig, "consumer lag (records)"), interval)


def connection_timeline(t: pa.Table, palette: dict[str, str]) -> go.Figure:
    """One horizontal bar per connection from its first to its last packet, coloured by how it ended."""
    fig = go.Figure()
    for ended, colour in palette.items():
        s = t.filter(pc.equal(t["ended"], ended))
        if s.num_rows == 0:
            continue
        first = _times(s["first_ts"])
        duration_ms = (_times(s["last_ts"]) - first).astype("timedelta64[us]").astype(np.float64) / 1000
        fig.add_trace(go.Bar(
            y=s["label"].to_pylist(), x=np.maximum(duration_ms, 0.5), base=[str(x) for x in first],
            orientation="h", name=ended, marker_color=colour,
            customdata=np.stack([duration_ms, s["retransmissions"].to_numpy(), s["gaps"].to_numpy(),
                                 s["gap_bytes"].to_numpy(), s["resyncs"].to_numpy(), s["requests"].to_numpy(),
                                 s["capture_file"].to_numpy(zero_copy_only=False)], axis=1),
            hovertemplate=("%{y}<br>ended: " + ended + ", open %{customdata[0]:,.1f} ms<br>%{customdata[5]:,} "
                           "requests; %{customdata[1]:,} retransmissions, %{customdata[2]:,} gaps "
                           "(%{customdata[3]:,} bytes lost), %{customdata[4]:,} resyncs<br>first packet: "
                           "the number in the label, in %{customdata[6]}<extra></extra>")))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="date")
    return _layout(fig, "connection (#first packet client → broker)", barmode="overlay",
                   height=max(HEIGHT, 80 + 18 * t.num_rows))


def file_packets(t: pa.Table) -> go.Figure:
    """Per capture file, its packets by what they were (stacked horizontal bars)."""
    kinds = (("kafka_packets", "Kafka"), ("tls_packets", "TLS"), ("other_tcp_packets", "other TCP"),
             ("non_tcp_packets", "not TCP"), ("undecodable_packets", "undecodable"))
    fig = go.Figure()
    for (column, label), colour in zip(kinds, PALETTE, strict=False):
        fig.add_trace(go.Bar(y=t["capture_file"].to_pylist(), x=t[column].to_numpy(zero_copy_only=False),
                             orientation="h", name=label, marker_color=colour,
                             hovertemplate=f"%{{y}}<br>%{{x:,}} {label} packets<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, "capture file", x_title="packets", barmode="stack",
                   height=max(HEIGHT - 100, 80 + 24 * t.num_rows))


# The consumer-group timeline's segments: (kind, colour, width, dash). Classic generations: without partitions
# from JoinGroup to the assignment, then consuming; the heartbeat protocols' epochs (KIP-848 consumer, share and
# Streams groups): reconciling from the heartbeat that moved the member to the epoch until it owns what it was
# given (it keeps the partitions that do not move), then owning; a moved partition's time with no consumer.
TIMELINE_KINDS = (("rebalance: no partitions", "#d55e00", 10, "solid"), ("consuming", "#0072b2", 6, "solid"),
                  ("epoch: reconciling", "#e69f00", 10, "solid"), ("epoch: owning", "#56b4e9", 6, "solid"),
                  ("moved: no consumer", "#000000", 2, "dot"))


def group_timeline(t: pa.Table) -> go.Figure:
    """Per member (a row: group and client), a segment per kind of TIMELINE_KINDS: in each classic generation its
    time without partitions (JoinGroup to assignment) and consuming (assignment to its next rejoin or leave); in
    each epoch of the heartbeat protocols its time reconciling and owning; the moved partitions' gaps on the row
    of the member they went to. Hover on either end: generation or epoch, partitions, the wait."""
    fig = go.Figure()
    for kind, colour, width, dash in TIMELINE_KINDS:
        s = t.filter(pc.equal(t["kind"], kind))
        if not s.num_rows:
            continue
        starts, ends = _times(s["start"]), _times(s["end"])
        rows = s["member"].to_pylist()
        text = s["text"].to_pylist()
        x, y, hover = [], [], []
        for a, b, r, h in zip(starts, ends, rows, text, strict=True):
            x += [a, b, None]
            y += [r, r, None]
            hover += [h, h, None]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=kind, text=hover,
                                 line={"color": colour, "width": width, "dash": dash},
                                 marker={"size": 4, "color": colour},
                                 hovertemplate="%{y}<br>" + TIME_HOVER + "<br>%{text}<extra></extra>"))
    n = len(set(t["member"].to_pylist()))
    return _layout(fig, "member (group: client_id)", height=max(HEIGHT, 80 + 30 * n))


def committed_lag(t: pa.Table) -> go.Figure:
    """The lag at each committed offset, one line per group topic-partition (``series``); hover: the offset,
    the high watermark it was held to and whose Fetch reported it, and the packet."""
    fig = go.Figure()
    names = sorted(set(t["series"].to_pylist()))
    palette = colours(names)
    for name in names:
        s = t.filter(pc.equal(t["series"], name))
        custom = np.stack([s[c].to_numpy(zero_copy_only=False).astype(object) for c in
                           ("api_name", "committed_offset", "high_watermark", "hw_fetch_kind", "frame",
                            "capture_file")], axis=1)
        fig.add_trace(go.Scatter(
            x=_times(s["ts"]), y=s["lag"].to_numpy(zero_copy_only=False), name=name, mode="lines+markers",
            line={"color": palette[name], "shape": "hv"}, customdata=custom,
            hovertemplate=(f"{name}<br>{TIME_HOVER}<br>lag %{{y:,}} records: %{{customdata[0]}} offset "
                           "%{customdata[1]:,}, high watermark %{customdata[2]:,} (%{customdata[3]} Fetch)<br>"
                           "packet %{customdata[4]} of %{customdata[5]}<extra></extra>")))
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "lag at the commit (records)")


def laggiest_partitions(t: pa.Table) -> go.Figure:
    """The last known lag of the laggiest group topic-partitions, one bar each (``label``)."""
    custom = np.stack([t[c].to_numpy(zero_copy_only=False).astype(object)
                       for c in ("committed_offset", "high_watermark", "lag_at_commit")], axis=1)
    fig = go.Figure(go.Bar(
        x=t["label"].to_pylist(), y=t["lag"].to_numpy(zero_copy_only=False), marker_color=PALETTE[3],
        customdata=custom, name="lag at the end",
        hovertemplate=("%{x}<br>lag at the end %{y:,} records: committed %{customdata[0]:,}, last high watermark "
                       "%{customdata[1]:,}; lag at the last commit %{customdata[2]:,}<extra></extra>")))
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "lag (records)", x_title="group: topic[partition]")


# --- Share groups and transactions ---------------------------------------------------------------------------

SHARE_COUNTS = (("acquired_records", "given"), ("accepted", "accepted"), ("released", "released"),
                ("rejected", "rejected"), ("lock_lost", "lock lost"), ("unacknowledged", "unacknowledged"))
SHARE_QUANTILES = (("processing_p50_ms", "p50", "circle"), ("processing_p99_ms", "p99", "diamond"),
                   ("processing_max_ms", "max", "x"))
OUTCOME_COLOURS = {"committed": PALETTE[2], "aborted": PALETTE[1], "failed": PALETTE[3], "superseded": PALETTE[5],
                   "open": PALETTE[4]}


def _column(t: pa.Table, name: str) -> np.ndarray:
    return t[name].to_numpy(zero_copy_only=False)


def share_members(t: pa.Table) -> go.Figure:
    """Per share-group member and topic (``label``): the records it was given and what became of them, as
    grouped horizontal bars; hover: the count, of how many given (and redelivered)."""
    fig = go.Figure()
    labels = t["label"].to_pylist()
    custom = np.stack([_column(t, "acquired_records"), _column(t, "redelivered_records")], axis=1)
    for (column, name), colour in zip(SHARE_COUNTS, (PALETTE[0], PALETTE[2], PALETTE[1], PALETTE[3], PALETTE[5],
                                                     PALETTE[7]), strict=True):
        fig.add_trace(go.Bar(
            y=labels, x=_column(t, column), orientation="h", name=name, marker_color=colour, customdata=custom,
            hovertemplate=(f"%{{y}}<br>{name}: %{{x:,}} records<br>given %{{customdata[0]:,}} "
                           "(%{customdata[1]:,} of them redelivered)<extra></extra>")))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(rangemode="tozero")
    return _layout(fig, "member (group: client_id (topic))", x_title="records", barmode="group",
                   height=max(HEIGHT, 80 + 22 * len(SHARE_COUNTS) * len(labels) // 2))


def share_processing(t: pa.Table) -> go.Figure:
    """Per member and topic: its processing time (acquisition to acknowledgement) p50, p99 and longest, on a log
    axis; hover: the value and over how many records."""
    fig = go.Figure()
    labels = t["label"].to_pylist()
    values = []
    for (column, name, symbol), colour in zip(SHARE_QUANTILES, (PALETTE[0], PALETTE[3], PALETTE[7]), strict=True):
        x = _column(t, column)
        values += [v for v in x.tolist() if v is not None]
        fig.add_trace(go.Scatter(
            y=labels, x=x, mode="markers", name=name, customdata=_column(t, "processed"),
            marker={"color": colour, "size": 10, "symbol": symbol},
            hovertemplate=(f"%{{y}}<br>processing {name}: %{{x:.3f}} ms<br>over %{{customdata:,}} records "
                           "followed from acquisition to acknowledgement<extra></extra>")))
    fig.update_yaxes(autorange="reversed", type="category")
    _layout(fig, "member (group: client_id (topic))", x_title="processing time (log scale)",
            height=max(HEIGHT - 100, 80 + 30 * len(labels)))
    fig.update_xaxes(**log_axis(values))
    return fig


def records_over_time(t: pa.Table, interval: Interval, palette: dict[str, str], what: str) -> go.Figure:
    """Records per interval by series (bars); hover: the records and how many ranges."""
    fig = go.Figure()
    for name, s in _series(t, palette):
        fig.add_trace(go.Bar(
            x=_times(s["bin"]), y=_column(s, "records"), name=name, marker_color=palette[name], **_over(interval),
            customdata=s["count"].to_numpy(),
            hovertemplate=(f"{name}<br>{TIME_HOVER} (+{interval.label})<br>%{{y:,}} records {what} in "
                           "%{customdata:,} ranges<extra></extra>")))
    return fig


def transaction_points(t: pa.Table, interval: Interval) -> go.Figure:
    """One marker per transaction: when it started (x), how long it lasted (y, log scale), coloured by outcome;
    a triangle where only a lower bound is known (open at the capture's end, or begun before it). ``t``: x, ms,
    bound, outcome and the hover's columns (``hover``: its text lines after the first)."""
    fig = go.Figure()
    names = [o for o in OUTCOME_COLOURS if o in set(t["outcome"].to_pylist())]
    names += sorted(set(t["outcome"].to_pylist()) - set(names) - {None})
    for name in names:
        s = t.filter(pc.equal(t["outcome"], name))
        bound = _column(s, "bound").astype(bool)
        fig.add_trace(go.Scatter(
            x=_times(s["x"]), y=_column(s, "ms"), mode="markers", name=name,
            marker={"color": OUTCOME_COLOURS.get(name, PALETTE[7]), "size": 9, "line": {"width": 0},
                    "symbol": np.where(bound, "triangle-up", "circle").tolist()},
            customdata=np.stack([_column(s, "transactional_id"), _column(s, "hover")], axis=1),
            hovertemplate=(f"%{{customdata[0]}}: {name}<br>{TIME_HOVER}<br>%{{customdata[1]}}<extra></extra>")))
    _layout(fig, "duration (log scale)")
    fig.update_yaxes(**log_axis(t["ms"].to_pylist()))
    return time_range(fig, interval)


def transactions_per_id(t: pa.Table) -> go.Figure:
    """Per transactional id (``transactional_id``, largest first): its transactions by outcome (stacked horizontal
    bars); hover: the count, of how many, and the longest."""
    fig = go.Figure()
    ids = list(dict.fromkeys(t["transactional_id"].to_pylist()))
    names = [o for o in OUTCOME_COLOURS if o in set(t["outcome"].to_pylist())]
    names += sorted(set(t["outcome"].to_pylist()) - set(names) - {None})
    for name in names:
        s = t.filter(pc.equal(t["outcome"], name))
        fig.add_trace(go.Bar(
            y=s["transactional_id"].to_pylist(), x=s["count"].to_numpy(), orientation="h", name=name,
            marker_color=OUTCOME_COLOURS.get(name, PALETTE[7]),
            customdata=np.stack([_column(s, "total"), _column(s, "longest")], axis=1).astype(object),
            hovertemplate=(f"%{{y}}<br>{name}: %{{x:,}} transactions (of %{{customdata[0]:,}})<br>longest "
                           "%{customdata[1]}<extra></extra>")))
    fig.update_yaxes(autorange="reversed", type="category", categoryorder="array", categoryarray=ids)
    _layout(fig, "transactional id", x_title="transactions", barmode="stack",
            height=max(HEIGHT - 100, 80 + 26 * len(ids)))
    fig.update_layout(legend={"traceorder": "normal"})
    return fig
