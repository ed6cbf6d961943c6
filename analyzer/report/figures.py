"""The small tables of ``aggregate`` drawn as plotly figures: UTC time axes, units on every axis, the
Okabe-Ito palette (told apart by readers with any common colour-vision deficiency), and hover text with the
values and the packet to open in Wireshark (``frame.number == N`` in that capture file)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc
from plotly.subplots import make_subplots

from analyzer.report.aggregate import OTHER, Interval, bucket_edges

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
OTHER_COLOUR = "#999999"
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


def _layout(fig: go.Figure, y_title: str, x_title: str = TIME_AXIS, height: int = HEIGHT, **extra) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, margin={"l": 70, "r": 20, "t": 30, "b": 50},
                      legend={"orientation": "v"}, hoverlabel={"namelength": -1}, **extra)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


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


def stacked_counts(t: pa.Table, interval: Interval, what: str, frame_label: str) -> go.Figure:
    """Bars of ``count`` per interval, stacked by series; hover: the count and the interval's first packet."""
    fig = go.Figure()
    names = _order(t)
    palette = colours(names)
    for name in names:
        s = t.filter(pc.equal(t["series"], name))
        fig.add_trace(go.Bar(
            x=_times(s["bin"]), y=s["count"].to_numpy(), name=name, marker_color=palette[name],
            customdata=np.stack([s["capture_file"].to_numpy(zero_copy_only=False),
                                 s["frame"].to_numpy(zero_copy_only=False)], axis=1),
            hovertemplate=(f"{name}<br>{TIME_HOVER} (+{interval.label})<br>%{{y:,}} {what}<br>"
                           f"first {frame_label}: packet %{{customdata[1]}} of %{{customdata[0]}}<extra></extra>")))
    return _layout(fig, f"{what} per {interval.label}", barmode="stack", bargap=0.1)


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
    return _layout(fig, "latency (ms, log scale)", yaxis_type="log")


def latency_heatmap(t: pa.Table) -> go.Figure:
    """Exchanges per latency bucket (x, log-spaced) and series (y); colour: count (log-scaled)."""
    names = sorted(set(t["series"].to_pylist()))
    lo, hi = pc.min(t["bucket"]).as_py(), pc.max(t["bucket"]).as_py()
    buckets = list(range(lo, hi + 1))
    z = np.zeros((len(names), len(buckets)))
    row = {n: i for i, n in enumerate(names)}
    for s, b, c in zip(t["series"].to_pylist(), t["bucket"].to_pylist(), t["count"].to_pylist(), strict=True):
        z[row[s], b - lo] = c
    labels = [f"{bucket_edges(b)[0]:.3g}" for b in buckets]
    text = [[f"{bucket_edges(b)[0]:.3g} to {bucket_edges(b)[1]:.3g} ms" for b in buckets] for _ in names]
    fig = go.Figure(go.Heatmap(
        x=labels, y=names, z=np.where(z > 0, np.log10(np.maximum(z, 1)) + 1, np.nan), customdata=z, text=text,
        colorscale="Cividis", colorbar={"title": {"text": "exchanges"}, "tickvals": [1, 2, 3, 4, 5, 6, 7],
                                        "ticktext": ["1", "10", "100", "1k", "10k", "100k", "1M"]},
        hovertemplate="%{y}<br>%{text}<br>%{customdata:,} exchanges<extra></extra>", xgap=1, ygap=1))
    return _layout(fig, "API", x_title="latency (ms, lower edge of each bucket; 10 buckets per factor of ten)",
                   height=max(HEIGHT, 60 + 22 * len(names)))


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
    _layout(fig, y_title, barmode="stack", bargap=0.1, height=2 * HEIGHT - 60)
    fig.update_xaxes(title_text="", row=1, col=1)
    return fig


def traffic_over_time(t: pa.Table, interval: Interval, palette: dict[str, str]) -> go.Figure:
    """Bytes per interval and topic (bars) for one direction; hover: bytes, records, exchanges' rows."""
    fig = go.Figure()
    for name in palette:
        s = t.filter(pc.equal(t["series"], name))
        if s.num_rows == 0:
            continue
        fig.add_trace(go.Bar(
            x=_times(s["bin"]), y=s["bytes"].to_numpy(zero_copy_only=False), name=name, marker_color=palette[name],
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
    """Per codec: bytes on the wire and uncompressed (grouped bars); hover: ratio, batches, records."""
    codecs = t["codec"].to_pylist()
    wire = t["wire_bytes"].to_numpy(zero_copy_only=False)
    raw = t["uncompressed_bytes"].to_numpy(zero_copy_only=False)
    ratio = np.where(wire > 0, raw / np.maximum(wire, 1), np.nan)
    custom = np.stack([ratio, t["batches"].to_numpy(zero_copy_only=False),
                       t["records"].to_numpy(zero_copy_only=False)], axis=1)
    fig = go.Figure()
    for name, y, colour in (("on the wire", wire, PALETTE[0]), ("uncompressed", raw, PALETTE[1])):
        fig.add_trace(go.Bar(
            x=codecs, y=y, name=name, marker_color=colour, customdata=custom,
            hovertemplate=(f"%{{x}}: %{{y:,}} bytes {name}<br>ratio %{{customdata[0]:.2f}}, %{{customdata[1]:,}} "
                           "batches, %{customdata[2]:,} records<extra></extra>")))
    return _layout(fig, "bytes (Produce requests, log scale)", x_title="codec", barmode="group", yaxis_type="log")


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
    return _layout(fig, "consumer lag (records)")


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


def group_timeline(t: pa.Table) -> go.Figure:
    """Per member (a row: group and client), its time without partitions in each rebalance (from its JoinGroup
    to its assignment) and its time consuming (from its assignment to its next rejoin or leave), as line
    segments; hover on either end: generation, partitions, the wait."""
    fig = go.Figure()
    for kind, colour, width in (("rebalance: no partitions", "#d55e00", 10), ("consuming", "#0072b2", 6)):
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
                                 line={"color": colour, "width": width}, marker={"size": 4, "color": colour},
                                 hovertemplate="%{y}<br>" + TIME_HOVER + "<br>%{text}<extra></extra>"))
    n = len(set(t["member"].to_pylist()))
    return _layout(fig, "member (group: client_id)", height=max(HEIGHT, 80 + 30 * n))
